"""Memory per rank and per held line at job scale, each size in a fresh process: one healthy
fleetgen job of N ranks (per-rank files plus the launchers'), turned into canonical Kafka
records the way `rankwatch replay` sends them and fed through `Engine.feed_records` in
10,000-record batches (the daemon's path) under the default engine configuration.

Reports the engine's accounted memory (all of it, and its rings), the growth of the process's
resident memory over the feed (the records are built before the first reading), and per rank
and per held line. Lines held are counted from the corpus: every non-blank line of a file, at
most `ring_lines` of them per file (a healthy rank prints fewer); the run checks that nothing
was evicted or shrunk, i.e. the job fit in the default budget.

    .venv/bin/python bench/scale_bench.py                 # 1,024, 4,096 and 16,384 ranks
    .venv/bin/python bench/scale_bench.py --ranks 1024
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rankwatch import Catalog, Engine, EngineConfig
from rankwatch.engine import Decoder
from rankwatch.kafka.replay import canonical_record, interleave
from rankwatch.local import discover
from rankwatch.simulate import fleetgen

BATCH = 10_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def one_job(ranks: int) -> dict[str, Any]:
    config = EngineConfig()
    with tempfile.TemporaryDirectory(prefix="rw-scale-") as tmp:
        t = time.perf_counter()
        fleetgen.generate("healthy", Path(tmp) / "job", ranks=ranks, seed=7, job="wide")
        files, _ = discover([Path(tmp) / "job"])
        pairs = list(interleave(files))
        gen_s = time.perf_counter() - t
    per_file: dict[str, int] = {}
    for f, _line in pairs:
        per_file[f.origin] = per_file.get(f.origin, 0) + 1
    held = sum(min(n, config.ring_lines) for n in per_file.values())
    values = [canonical_record(f, line) for f, line in pairs]
    keys: list[bytes | None] = [b"wide"] * len(values)
    engine = Engine(Catalog(), config)
    decoder = Decoder("canonical")
    engine.poll(1_000)
    base = rss_bytes()
    t = time.perf_counter()
    for s in range(0, len(values), BATCH):
        n = len(values[s : s + BATCH])
        engine.feed_records(
            decoder, "logs/0", values[s : s + BATCH], keys[s : s + BATCH], [None] * n, [None] * n
        )
    feed_s = time.perf_counter() - t
    stats: dict[str, Any] = json.loads(engine._core.stats_json())
    return {
        "ranks": ranks,
        "files": len(per_file),
        "records": len(values),
        "lines_held": held,
        "accounted": stats["memory_bytes"],
        "rings": stats["memory_breakdown"]["rings"],
        "budget": stats["memory_budget_bytes"],
        "rss_growth": rss_bytes() - base,
        "evicted": stats["jobs_evicted"],
        "ring_shrinks": stats["ring_shrinks"],
        "sources_capped": stats["sources_capped"],
        "generate_s": gen_s,
        "feed_records_per_s": len(values) / feed_s,
    }


def mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, action="append", help="job sizes (default 1k, 4k, 16k)")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(one_job(a.child)))
        return
    print(
        "| ranks | records (files) | lines held | accounted (rings) | RSS growth | "
        "accounted per rank | rings per held line | RSS per rank | within budget |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for ranks in a.ranks or [1024, 4096, 16384]:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(ranks)],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout)
        fits = not (r["evicted"] or r["ring_shrinks"] or r["sources_capped"])
        print(
            f"| {ranks:,} | {r['records']:,} ({r['files']:,}) | {r['lines_held']:,} | "
            f"{mib(r['accounted'])} ({mib(r['rings'])}) | {mib(r['rss_growth'])} | "
            f"{r['accounted'] / ranks / 1024:.1f} KiB | {r['rings'] / r['lines_held']:.0f} B | "
            f"{r['rss_growth'] / ranks / 1024:.1f} KiB | "
            f"{'yes' if fits else 'no'} ({mib(r['budget'])} budget) |",
            flush=True,
        )


if __name__ == "__main__":
    main()
