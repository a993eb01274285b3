"""Flight Recorder reading and analysis speed: a synthetic job of RANKS ranks, each dump
holding ENTRIES entries shaped like torch 2.10's (stack frames shared as torch's pickler
shares them), one rank stuck one collective behind. Reports the median of the runs of
reading every dump (checked) and analyzing them.

    .venv/bin/python bench/fr_bench.py [--ranks 1024] [--entries 2000] [--runs 3]
        [--memory-budget-bytes 1073741824] [--dir DIR]

With --dir, the dumps are written to DIR once and read from there on later calls (so that
two versions of rankwatch can be timed in turns on the same files). With --before PYTHONPATH
(a copy of an older python/ tree with its extension), each of --turns turns runs the bench
in a fresh process twice, that build then this one, on the same dumps, and prints the medians
of both side by side (wall, CPU, peak RSS of each process).
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rankwatch.flight_recorder import analyze, find_dumps, read_dumps, render

T0 = 1_800_000_000_000_000_000


def make_dump(rank: int, ranks: int, entries: int) -> bytes:
    frames = [
        {
            "filename": "/usr/lib/python3/torch/distributed/distributed_c10d.py",
            "line": 4174,
            "name": "all_reduce",
        },
        {
            "filename": "/usr/lib/python3/torch/distributed/c10d_logger.py",
            "line": 83,
            "name": "wrapper",
        },
        {"filename": "train.py", "line": 50, "name": "train_step"},
        {"filename": "train.py", "line": 88, "name": "main"},
    ]
    last = entries if rank != ranks // 2 else entries - 1  # one rank never calls the last one
    out: list[dict[str, Any]] = []
    for seq in range(1, last + 1):
        done = seq < entries
        out.append(
            {
                "record_id": seq - 1,
                "pg_id": 0,
                "process_group": ("0", "default_pg"),
                "collective_seq_id": seq,
                "p2p_seq_id": 0,
                "op_id": seq,
                "profiling_name": "nccl:all_reduce",
                "time_created_ns": T0 + seq * 1_000_000,
                "duration_ms": 1.5,
                "input_sizes": [[1024, 1024]],
                "input_dtypes": ["BFloat16"],
                "output_sizes": [[1024, 1024]],
                "output_dtypes": ["BFloat16"],
                "state": "completed" if done else "started",
                "time_discovered_started_ns": T0 + seq * 1_000_000 + 10,
                "time_discovered_completed_ns": T0 + seq * 1_000_000 + 900 if done else None,
                "retired": done,
                "timeout_ms": 600_000,
                "is_p2p": False,
                "thread_id": "140000000000000",
                "thread_name": "pt_main_thread",
                "frames": frames,
            }
        )
    doc = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(ranks)))}},
        "pg_status": {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": last,
                "last_completed_collective": last - 1,
            }
        },
        "entries": out,
    }
    return pickle.dumps(doc, protocol=2)


def compare(args: argparse.Namespace) -> int:
    """--before: fresh processes in turns, before then after, on the same dumps."""
    here = Path(__file__).resolve()
    after_path = str(here.parents[1] / "python")
    base = [
        sys.executable,
        str(here),
        f"--ranks={args.ranks}",
        f"--entries={args.entries}",
        f"--runs={args.runs}",
        f"--memory-budget-bytes={args.memory_budget_bytes}",
        f"--dir={args.dir}",
    ]
    got: dict[str, list[tuple[float, float, float, float]]] = {"before": [], "after": []}
    for turn in range(args.turns):
        for which, path in (("before", args.before), ("after", after_path)):
            env = {**os.environ, "PYTHONPATH": path}
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                base, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
            out = proc.stdout.read().decode() if proc.stdout else ""
            _, status, usage = os.wait4(proc.pid, 0)
            whole = time.perf_counter() - t0
            m = re.search(r"median ([\d.]+) s .*CPU median ([\d.]+) s", out)
            if status != 0 or m is None:
                print(f"turn {turn} {which}: failed ({status}): {out[-300:]}", file=sys.stderr)
                return 1
            row = (float(m.group(1)), float(m.group(2)), whole, usage.ru_maxrss / 1e6)
            got[which].append(row)
            print(
                f"turn {turn} {which:6} load {load:.1f}: read+analyze {row[0]:.2f} s, CPU "
                f"{row[1]:.2f} s, whole process {whole:.2f} s, peak RSS {row[3]:.2f} GB",
                file=sys.stderr,
            )
    for which, rows in got.items():
        med = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(
            f"{which:6}: read+analyze median {med[0]:.2f} s "
            f"({', '.join(f'{r[0]:.2f}' for r in rows)}), CPU {med[1]:.2f} s, whole process "
            f"{med[2]:.2f} s, peak RSS {med[3]:.2f} GB over {len(rows)} fresh processes"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--memory-budget-bytes",
        type=int,
        default=0,
        help="as analyze passes it (its default is 1 GiB): each dump keeps its newest entries "
        "within its share; 0 keeps every entry",
    )
    ap.add_argument("--dir", type=Path, help="write the dumps here once, and reuse them")
    ap.add_argument(
        "--before",
        metavar="PYTHONPATH",
        help="compare with this python/ tree (and its extension), in fresh processes in turns "
        "(needs --dir)",
    )
    ap.add_argument("--turns", type=int, default=5, help="turns of --before")
    args = ap.parse_args()
    if args.before:
        if args.dir is None:
            ap.error("--before needs --dir (both builds read the same dumps)")
        return compare(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if len(list(folder.iterdir())) != args.ranks:
            t = time.perf_counter()
            for r in range(args.ranks):
                dump = make_dump(r, args.ranks, args.entries)
                (folder / f"nccl_trace_rank_{r}").write_bytes(dump)
            size = sum(f.stat().st_size for f in folder.iterdir())
            print(
                f"wrote {args.ranks} dumps x {args.entries} entries, {size / 1e6:.0f} MB, "
                f"in {time.perf_counter() - t:.1f} s",
                file=sys.stderr,
            )
        times, reads, analyses, cpus = [], [], [], []
        for _ in range(args.runs):
            c0 = time.process_time()
            t0 = time.perf_counter()
            paths, _ = find_dumps([folder])
            budget = args.memory_budget_bytes or None
            dumps, problems, _ = read_dumps(paths, memory_bytes=budget)
            kept = sum(len(d.entries) for d in dumps)
            t1 = time.perf_counter()
            result = analyze(dumps)
            lines = render(result)
            t2 = time.perf_counter()
            assert not problems and len(dumps) == args.ranks
            assert [(f.kind, f.culprits) for f in result.findings] == [
                ("not_scheduled", [args.ranks // 2])
            ], result.findings
            del dumps, result, lines
            print(f"entries analyzed: {kept:,}", file=sys.stderr)
            cpus.append(time.process_time() - c0)
            times.append(t2 - t0)
            reads.append(t1 - t0)
            analyses.append(t2 - t1)
    print(
        f"{args.ranks} ranks x {args.entries} entries: median {statistics.median(times):.2f} s "
        f"(read {statistics.median(reads):.2f} s, analyze {statistics.median(analyses):.2f} s) "
        f"over {args.runs} runs: {', '.join(f'{t:.2f}' for t in times)}; CPU median "
        f"{statistics.median(cpus):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
