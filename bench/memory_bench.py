"""Resident memory against the engine's accounted memory, each scenario in a fresh process:

1. many successive short failing jobs (8 ranks, a cause line each), polled as a daemon would,
   with quiet jobs released (`release_quiet_ms`) and without,
2. one job with 100,000 distinct ranks (one `[rankN]:` line each).

Prints a Markdown table for bench/RESULTS.md (section "Memory").

    .venv/bin/python bench/memory_bench.py [--jobs 10000] [--ranks 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from rankwatch import Catalog, Engine, EngineConfig

CAUSE = (
    "node{h}:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable\n"
)
QUIET_MS = 60_000
STEP_MS = 1_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def stats(engine: Engine) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(engine._core.stats_json())
    return result


def short_job_bytes(rank: int) -> bytes:
    steps = "".join(f"[rank{rank}]: step {s} loss 2.{s} lr 3e-4\n" for s in range(20))
    return (steps + CAUSE.format(h=rank)).encode()


def successive_jobs(jobs: int, release_quiet_ms: int) -> dict[str, Any]:
    engine = Engine(Catalog(), EngineConfig(release_quiet_ms=release_quiet_ms))
    engine.poll(1_000)
    base = rss_bytes()
    now = 1_000
    for i in range(jobs):
        for rank in range(8):
            stream = engine.open_stream(f"job-{i}", f"rank{rank}.log", rank=rank)
            engine.feed(stream, short_job_bytes(rank), now)
            engine.close_stream(stream)
        engine.poll(now)
        now += STEP_MS
    s = stats(engine)
    return {"rss_growth": rss_bytes() - base, "accounted": s["memory_bytes"], "jobs": s["jobs"]}


def distinct_ranks(ranks: int) -> dict[str, Any]:
    engine = Engine(Catalog(), EngineConfig())
    base = rss_bytes()
    stream = engine.open_stream("wide", "all.log")
    chunk: list[str] = []
    for r in range(ranks):
        chunk.append(f"[rank{r}]: step 1 loss 2.5 lr 3e-4\n")
        if len(chunk) == 10_000:
            engine.feed(stream, "".join(chunk).encode(), 1_000)
            chunk = []
    engine.feed(stream, "".join(chunk).encode(), 1_000)
    engine.close_stream(stream)
    s = stats(engine)
    return {"rss_growth": rss_bytes() - base, "accounted": s["memory_bytes"], "jobs": s["jobs"]}


def run_child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--ranks", type=int, default=100_000)
    p.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        kind, n, *rest = a.child
        if kind == "jobs":
            print(json.dumps(successive_jobs(int(n), int(rest[0]))))
        else:
            print(json.dumps(distinct_ranks(int(n))))
        return
    rows = [
        (
            f"{a.jobs:,} successive 8-rank jobs, release after 60 s quiet",
            ["jobs", str(a.jobs), str(QUIET_MS)],
            a.jobs,
        ),
        (f"{a.jobs:,} successive 8-rank jobs, never released", ["jobs", str(a.jobs), "0"], a.jobs),
        (f"one job, {a.ranks:,} distinct ranks", ["ranks", str(a.ranks)], 1),
    ]
    print("| Scenario | Jobs held | Accounted | RSS growth | RSS growth per job |")
    print("|---|---|---|---|---|")
    for title, args, units in rows:
        r = run_child(args)
        per = f"{r['rss_growth'] / units / 1024:.1f} KiB" if units > 1 else "-"
        print(
            f"| {title} | {r['jobs']:,} | {mib(r['accounted'])} | {mib(r['rss_growth'])} | {per} |"
        )


if __name__ == "__main__":
    main()
