"""Resident memory against the engine's accounted memory and its budget.

Each scenario runs in a fresh process, through the Python `Engine` or through the real daemon
(`rankwatch run` as a process, on the dev broker: RSS from /proc, accounted from /metrics):

- `ranks N`: one job whose records carry N distinct ranks (a shipper that puts a pid or a pod
  hash in the rank field), three lines each, canonical records as `rankwatch replay` sends;
- `jobs N`: N successive short failing jobs (8 ranks, a cause line each), quiet jobs released
  after `release_quiet_ms`.

Baseline is the process's RSS once the catalog, the Hyperscan database and scratch (and for
the daemon, aiokafka and its connections) are up, before the first record. The budget bounds
the engine's state, so the figure that must stay within 1.3x the budget is peak RSS minus the
baseline. Prints a Markdown table for bench/history/11-memory.md (and the figure for the
"Memory" area of bench/RESULTS.md).

    .venv/bin/python bench/memory_bench.py                      # engine only
    .venv/bin/python bench/memory_bench.py --daemon             # engine and daemon (broker)
    .venv/bin/python bench/memory_bench.py --ranks 1000 500000 --budgets-mib 50 --jobs 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
CAUSE = (
    "node{h}:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)
QUIET_MS = 60_000
STEP_MS = 1_000
BATCH = 2_000


def proc_kib(pid: int | str, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rank_records(ranks: int, job: str = "wide") -> Iterator[bytes]:
    for r in range(ranks):
        host = f"pod-{r:07d}"
        for s in range(3):
            line = f"step {s} loss 2.{s} lr 3e-4 tokens {r * 7 + s}"
            yield orjson.dumps({"job": job, "rank": r, "host": host, "ts": 1_000 + s, "line": line})


def job_records(i: int) -> Iterator[bytes]:
    for rank in range(8):
        for s in range(3):
            line = f"[rank{rank}]: step {s} loss 2.{s} lr 3e-4"
            yield orjson.dumps({"job": f"job-{i}", "rank": rank, "ts": 1_000 + s, "line": line})
        yield orjson.dumps(
            {"job": f"job-{i}", "rank": rank, "ts": 1_010, "line": CAUSE.format(h=rank)}
        )


# --- engine (in this process, a child of the driver) ---------------------------------------


def engine_child(kind: str, n: int, budget: int) -> dict[str, Any]:
    from rankwatch import Catalog, Engine, EngineConfig
    from rankwatch.engine import Decoder

    quiet = 0 if kind == "kept" else QUIET_MS
    engine = Engine(Catalog(), EngineConfig(memory_budget_bytes=budget, release_quiet_ms=quiet))
    decoder = Decoder("canonical")
    engine.poll(1_000)
    base = proc_kib("self", "VmRSS")
    now, peak_acc = 1_000, 0
    batch: list[bytes] = []

    def flush() -> None:
        nonlocal peak_acc
        k = len(batch)
        engine.feed_records(decoder, "bench", batch, [None] * k, [None] * k, [now] * k)
        batch.clear()

    if kind == "ranks":
        for rec in rank_records(n):
            batch.append(rec)
            if len(batch) == BATCH:
                flush()
        flush()
        engine.poll(now)
    else:
        for i in range(n):
            batch.extend(job_records(i))
            flush()
            engine.poll(now)
            now += STEP_MS
    s = engine.stats()
    return {
        "base": base,
        "rss": proc_kib("self", "VmRSS"),
        "hwm": proc_kib("self", "VmHWM"),
        "accounted": s["memory_bytes"],
        "peak_accounted": s["peak_memory_bytes"],
        "jobs": s["jobs"],
        "sources_capped": s.get("sources_capped", 0),
    }


# --- daemon (a `rankwatch run` process on the dev broker) ----------------------------------


def daemon_run(kind: str, n: int, budget: int, port: int, backlog: bool = False) -> dict[str, Any]:
    """One daemon row. With `backlog`, every record is on the topic before the daemon starts
    (the shape of a quiet machine, whatever the load: the whole burst waits to be read), and
    the baseline is that of a first daemon started alike on an empty topic."""
    sys.path.insert(0, str(ROOT / "bench"))
    from daemon_bench import create_topics

    bootstrap = f"127.0.0.1:{port}"
    tag = f"mem-{kind}-{n}-{budget}-{os.getpid()}-{int(time.time())}"
    topic, out = f"{tag}-in", f"{tag}-out"
    asyncio.run(create_topics(bootstrap, {topic: 1, out: 1, f"{topic}-empty": 1}))
    if kind == "ranks":
        keyed = (("wide", rec) for rec in rank_records(n))
    else:
        keyed = ((f"job-{i}", rec) for i in range(n) for rec in job_records(i))
    if not backlog:
        return watch_daemon(
            bootstrap, topic, out, budget, lambda: produce_now(bootstrap, topic, keyed), kind
        )
    total = produce_now(bootstrap, topic, keyed)
    empty = watch_daemon(bootstrap, f"{topic}-empty", out, budget, lambda: 0, kind)
    r = watch_daemon(bootstrap, topic, out, budget, lambda: total, kind, base_wait=0)
    r["base"] = empty["base"]
    return r


def produce_now(bootstrap: str, topic: str, keyed: Iterator[tuple[str, bytes]]) -> int:
    return asyncio.run(produce(bootstrap, topic, keyed))


def watch_daemon(
    bootstrap: str,
    topic: str,
    out: str,
    budget: int,
    feed: Any,
    kind: str,
    base_wait: float = 3,
) -> dict[str, Any]:
    """Starts `rankwatch run` on `topic`, takes its baseline, calls `feed` (how many records
    the daemon will read), waits until it read them and released its quiet jobs."""
    from daemon_bench import DaemonProc, free_port

    mport = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="rankwatch-mem-"))
    log_path = workdir / "daemon.log"
    cmd = [
        *(sys.executable, "-m", "rankwatch.cli", "run", "--bootstrap-servers", bootstrap),
        *("--topic", topic, "--output-topic", out, "--group-id", f"{topic}-group"),
        *("--initial-offset", "earliest", "--metrics-addr", f"127.0.0.1:{mport}"),
        *("--memory-budget-bytes", str(budget), "--release-quiet-ms", "2000"),
    ]
    env = dict(os.environ)
    if os.environ.get("RANKWATCH_PEAK_FILE"):  # where the bytes are at the peak (peak_sampler)
        path = [str(ROOT / "bench/peak_sampler"), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    try:
        d = DaemonProc(proc, mport, log_path)
        while not d.metrics():
            if proc.poll() is not None:
                raise SystemExit(f"daemon exited: {log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        time.sleep(base_wait)
        base = proc_kib(proc.pid, "VmRSS")
        total = feed()
        peak_acc, m = 0.0, {}
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"daemon exited: {log_path.read_text()[-3000:]}")
            m = d.metrics()
            peak_acc = max(peak_acc, m.get("rankwatch_ring_memory_bytes", 0.0))
            if m.get("rankwatch_records_in_total", 0.0) >= total:
                break
            time.sleep(0.2)
        time.sleep(4 if kind == "jobs" else 1)  # quiet jobs are released after 2 s
        m = d.metrics()
        return {
            "base": base,
            "rss": proc_kib(proc.pid, "VmRSS"),
            "hwm": proc_kib(proc.pid, "VmHWM"),
            "accounted": int(m.get("rankwatch_ring_memory_bytes", 0)),
            "peak_accounted": int(max(peak_acc, m.get("rankwatch_ring_memory_bytes", 0))),
            "jobs": int(m.get("rankwatch_jobs", m.get("rankwatch_active_jobs", -1))),
            "sources_capped": 0,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


async def produce(bootstrap: str, topic: str, keyed: Iterator[tuple[str, bytes]]) -> int:
    """Sends (job, value) records keyed by job, flushing every 20,000 so that the producer's
    own memory stays small; returns how many were sent."""
    from rankwatch.kafka.replay import BatchSender, new_producer

    producer = new_producer({"bootstrap_servers": bootstrap})
    await producer.start()
    try:
        sender = BatchSender(producer, topic, sorted(await producer.partitions_for(topic)))
        for job, value in keyed:
            await sender.add(job.encode(), value)
            if sender.records % 20_000 == 0:
                await sender.flush()
        await sender.flush()
        return sender.records
    finally:
        await producer.stop()


# --- driver ----------------------------------------------------------------------------------


def run_child(args: list[str], port: int, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--port", str(port), *extra, "--child", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"child {args} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def row(where: str, title: str, budget: int, r: dict[str, Any]) -> str:
    over = r["hwm"] - r["base"]
    return (
        f"| {where} | {title} | {mib(budget)} | {mib(r['base'])} | {mib(r['hwm'])} | "
        f"{mib(r['rss'])} | {mib(r['peak_accounted'])} | {mib(r['accounted'])} | "
        f"{over / max(r['peak_accounted'], 1):.2f} | **{over / budget:.2f}** | {r['jobs']:,} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="*", default=[1_000, 100_000, 500_000])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--budgets-mib", type=int, nargs="+", default=[50, 256])
    p.add_argument("--daemon", action="store_true", help="also run `rankwatch run` on a broker")
    p.add_argument("--daemon-only", action="store_true", help="only `rankwatch run`")
    p.add_argument("--kept", action="store_true", help="also jobs never released (engine)")
    p.add_argument(
        "--port", type=int, default=int(os.environ.get("RANKWATCH_TEST_KAFKA_PORT", 19392))
    )
    p.add_argument(
        "--backlog",
        action="store_true",
        help="daemon rows: produce every record before the daemon starts (a burst read at "
        "full speed, as on a quiet machine; baseline from a daemon on an empty topic)",
    )
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        where, kind, n, budget = a.child
        run = engine_child if where == "engine" else None
        if run is not None:
            print(json.dumps(run(kind, int(n), int(budget))))
        else:
            print(json.dumps(daemon_run(kind, int(n), int(budget), a.port, a.backlog)))
        return
    scenarios = [("ranks", r, f"one job, {r:,} distinct ranks") for r in a.ranks]
    if a.jobs:
        scenarios.append(("jobs", a.jobs, f"{a.jobs:,} successive 8-rank jobs"))
    if a.jobs and a.kept:
        title = f"{a.jobs:,} successive jobs, never released (evicted under the budget)"
        scenarios.append(("kept", a.jobs, title))
    wheres = [] if a.daemon_only else ["engine"]
    broker = a.daemon or a.daemon_only
    if broker:
        dev_broker("start", a.port, "--fresh")
        wheres.append("daemon")
    try:
        print_rows(wheres, scenarios, a.budgets_mib, a.port, ["--backlog"] if a.backlog else [])
    finally:
        if broker:  # an idle broker left running takes a fifth of a core from what follows
            dev_broker("stop", a.port)


def dev_broker(action: str, port: int, *extra: str) -> None:
    command = [str(ROOT / "deploy/kafka/dev-broker"), action, "--port", str(port), *extra]
    subprocess.run(command, check=action == "start", capture_output=True)


def print_rows(
    wheres: list[str],
    scenarios: list[tuple[str, int, str]],
    budgets_mib: list[int],
    port: int,
    extra: list[str],
) -> None:
    print(
        "| Where | Scenario | Budget MiB | Baseline RSS | Peak RSS | End RSS | Peak accounted | "
        "End accounted | (peak RSS - baseline) / peak accounted | (peak RSS - baseline) / budget "
        "| Jobs held |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for where in wheres:
        for kind, n, title in scenarios:
            if where == "daemon" and kind == "kept":
                continue
            for b in budgets_mib:
                budget = b << 20
                r = run_child([where, kind, str(n), str(budget)], port, extra)
                print(row(where, title, budget, r), flush=True)


if __name__ == "__main__":
    main()
