"""Memory bounded in every dimension (issue 9): sources per job are capped and the excess is
named in the diagnosis; one job with 500,000 distinct ranks stays within 1.3x the budget in
resident memory (measured in a subprocess, above the process's baseline); the daemon's
per-job bookkeeping forgets jobs the engine released."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
from aiokafka.structs import ConsumerRecord

from rankwatch import Catalog, Engine, EngineConfig
from rankwatch.daemon.engine_worker import EngineWorker
from rankwatch.engine import Decoder
from rankwatch.report import Style, render_diagnosis

CAUSE = (
    "node{r}:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)


def records(job: str, ranks: range, cause_rank: int | None = None) -> list[bytes]:
    out = []
    for r in ranks:
        line = CAUSE.format(r=r) if r == cause_rank else f"step 1 loss 2.5 tokens {r}"
        out.append(
            orjson.dumps({"job": job, "rank": r, "host": f"pod-{r}", "ts": 1_000, "line": line})
        )
    return out


def feed(engine: Engine, values: list[bytes], now: int = 1_000) -> None:
    n = len(values)
    engine.feed_records(Decoder(), "in/0", values, [None] * n, [None] * n, [now] * n)


def test_sources_over_the_cap_share_one_source_and_are_named_in_the_diagnosis() -> None:
    engine = Engine(Catalog(), EngineConfig(max_sources_per_job=50))
    feed(engine, records("wide", range(200), cause_rank=150))
    [d] = engine.finish()
    over = d["sources_over_cap"]
    assert over is not None and over["lines"] >= 150, over
    assert over["sources_tracked"] <= 50
    stats = engine.stats()
    assert stats["sources_capped"] == over["lines"]
    assert "beyond the" in render_diagnosis(d, Style(color=False))


def test_a_job_under_the_cap_reports_no_untracked_sources() -> None:
    engine = Engine(Catalog(), EngineConfig(max_sources_per_job=500))
    feed(engine, records("small", range(200), cause_rank=150))
    [d] = engine.finish()
    assert d["sources_over_cap"] is None
    assert d["root_cause"]["rank"] == 150


CHILD = textwrap.dedent(
    """
    import json, sys
    import orjson
    from rankwatch import Catalog, Engine, EngineConfig
    from rankwatch.engine import Decoder

    def kib(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024

    ranks, budget = int(sys.argv[1]), int(sys.argv[2])
    engine = Engine(Catalog(), EngineConfig(memory_budget_bytes=budget))
    decoder = Decoder()
    engine.poll(1_000)
    base = kib("VmRSS")
    batch = []
    for r in range(ranks):
        line = f"step 1 loss 2.5 lr 3e-4 tokens {r * 7}"
        batch.append(orjson.dumps(
            {"job": "wide", "rank": r, "host": f"pod-{r:07d}", "ts": 1_000, "line": line}))
        if len(batch) == 5_000 or r + 1 == ranks:
            n = len(batch)
            engine.feed_records(decoder, "in/0", batch, [None] * n, [None] * n, [1_000] * n)
            batch = []
    engine.poll(2_000)
    s = engine.stats()
    print(json.dumps({"base": base, "hwm": kib("VmHWM"), "peak": s["peak_memory_bytes"],
                      "capped": s["sources_capped"]}))
    """
)


def test_500k_distinct_ranks_stay_within_the_budget_in_resident_memory() -> None:
    budget = 50 << 20
    out = subprocess.run(
        [sys.executable, "-c", CHILD, "500000", str(budget)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    r = json.loads(out.stdout)
    assert r["capped"] > 0
    assert r["peak"] <= budget, r
    assert r["hwm"] - r["base"] <= 1.3 * budget, r


def test_the_worker_forgets_jobs_the_engine_released() -> None:
    async def run() -> int:
        engine = Engine(Catalog(), EngineConfig(release_quiet_ms=10_000, max_wait_ms=1_000))
        worker = EngineWorker(engine)
        try:
            await worker.poll(1_000)
            for i in range(20):
                batch = [
                    ConsumerRecord("in", 0, o, 1_000, 0, None, v, None, -1, len(v), ())
                    for o, v in enumerate(records(f"job-{i}", range(4), cause_rank=2))
                ]
                await worker.submit_feed_many([(Decoder(), "in/0", batch, "")])
            assert len({d["id"] for d in await worker.poll(100_000)}) == 20
            await worker.poll(200_000)  # quiet for 100 s: released
            stats = await worker.stats()
            assert stats["jobs"] == 0 and stats["jobs_released"] == 20
            return worker.diagnosed_count()
        finally:
            worker.close()

    assert asyncio.run(run()) == 0


def test_a_burst_of_diagnoses_is_decoded_one_at_a_time() -> None:
    """Thousands of jobs diagnosed in one poll (a backlog read in a burst) were decoded into
    Python objects all at once, about five times their JSON: the daemon's RSS peaked at 3-4x a
    50 MiB budget with the engine well inside it. `poll_lazily` holds the burst as JSON and
    decodes a diagnosis when it is reached. Measured with tracemalloc (exact allocation sizes,
    no timing): the lazy peak is a small fraction of decoding the same burst at once."""
    import tracemalloc

    def burst() -> EngineWorker:
        worker = EngineWorker(Engine(Catalog(), EngineConfig(release_quiet_ms=600_000)))
        asyncio.run(worker.poll(1_000))
        values = [v for i in range(300) for v in records(f"job-{i}", range(4), cause_rank=2)]
        batch = [
            ConsumerRecord("in", 0, o, 1_000, 0, None, v, None, -1, len(v), ())
            for o, v in enumerate(values)
        ]

        async def feed_all() -> None:
            await worker.submit_feed_many([(Decoder(), "in/0", batch, "")])

        asyncio.run(feed_all())
        return worker

    async def eager(worker: EngineWorker) -> int:
        return len({str(d["id"]) for d in await worker.poll(30_000)})

    async def lazy(worker: EngineWorker) -> int:
        return len({str(d["id"]) for d in await worker.poll_lazily(30_000)})

    peaks = []
    for consume in (eager, lazy):
        worker = burst()
        try:
            tracemalloc.start()
            n = asyncio.run(consume(worker))
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        finally:
            worker.close()
        assert n == 300
        assert worker.diagnosed_count() == 300
    eager_peak, lazy_peak = peaks
    assert lazy_peak < eager_peak / 3, peaks


FILES_CHILD = textwrap.dedent(
    """
    import json, sys
    from rankwatch import Catalog, Engine, EngineConfig
    from rankwatch._core import release_free_memory
    from rankwatch.inputs import discover
    from rankwatch.local import analyze_files

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

    folder, budget = sys.argv[1], int(sys.argv[2])
    files, _ = discover([folder])
    engine = Engine(Catalog(), EngineConfig(memory_budget_bytes=budget))
    base = rss()
    result = analyze_files(engine, files)
    # What the engine still holds: pages freed during the run go back to the OS now, not
    # after the allocator's purge delay (which made the figure jump by ~10 MB between runs).
    release_free_memory()
    print(json.dumps({"grew": rss() - base, "files": result.files}))
    """
)


def _files_growth(folder: Path, files: int, budget: int) -> int:
    for i in range(files):
        (folder / f"rank-{i}.log").write_text(
            f"node-{i // 8}:{1000 + i}:{1000 + i} [{i % 8}] NCCL INFO Bootstrap : "
            f"Using eth0:10.0.{i // 250 % 250}.{i % 250}<0>\n"
        )
    out = subprocess.run(
        [sys.executable, "-c", FILES_CHILD, str(folder), str(budget)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    r = json.loads(out.stdout)
    assert r["files"] == files
    return int(r["grew"])


def test_many_small_files_cost_little_memory_outside_the_budget(tmp_path: Path) -> None:
    """Probe N15: each file's queue was made up front, about 1.6 KiB per file outside the
    budget. What each further file costs is measured between 10,000 and 40,000 files, so the
    threads' fixed memory cancels out."""
    budget = 20_000_000
    (tmp_path / "few").mkdir()
    (tmp_path / "many").mkdir()
    # RSS only errs upwards (the allocator's arenas, a loaded machine's page cache): another
    # measurement where one is over the bound, and the smallest counts. With freed pages
    # returned before each measurement, runs give 480-620 B per file.
    tries = []
    for _ in range(3):
        few = _files_growth(tmp_path / "few", 10_000, budget)
        many = _files_growth(tmp_path / "many", 40_000, budget)
        tries.append((many - few) / 30_000)
        if tries[-1] <= 1000:
            break
    assert min(tries) <= 1000, tries  # 1,890 before the fix
