"""Engine throughput, side by side on the same lines in one run:

1. the rankwatch engine end to end (decode, classify, rings, correlation, diagnosis),
2. Hyperscan alone over the same lines with the same database (the ceiling),
3. the `hyperscan` PyPI binding called once per line,
4. a plain-Python `re` loop over the catalog's patterns,

on both file layouts of one generated job: per-rank files and per-node files whose lines carry
torchrun's interleaved `[defaultN]:` prefixes. The engine and the ceiling alternate round by
round on each layout; the table gives the median and the spread (min-max) of the rounds, by
wall time and by the CPU time of the measuring thread (both run on that one thread, so CPU time
leaves out the waits that other work on this 2-core machine causes; it still feels shared caches).
With `--before-python`, every round also runs the same measurement in a subprocess under
another build's interpreter (e.g. main's `.venv/bin/python`), so before and after alternate
too. Adds ring memory on a 4,096-rank job against its configured budget. Appends the tables
to bench/history/01-engine.md unless --no-write (bench/RESULTS.md's "Engine" area is then
updated by hand).

    .venv/bin/python bench/engine_bench.py [--lines 1000000] [--repeat 5]
        [--before-python /path/to/other/.venv/bin/python [--before-pythonpath DIR]]
        [--engine-only] [--fresh-process]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rankwatch import Catalog, Engine, EngineConfig, hyperscan_version  # noqa: E402
from rankwatch.local import analyze_files, discover  # noqa: E402
from rankwatch.simulate import fleetgen  # noqa: E402

LAYOUTS = ("per-rank", "per-node")


def load_fleet(root: Path) -> list[tuple[Path, bytes]]:
    files, _ = discover([root])
    return [(f.path, f.path.read_bytes()) for f in files]


def count_lines(data: list[tuple[Path, bytes]]) -> int:
    return sum(b.count(b"\n") for _, b in data)


def make_fleets(out: Path, min_lines: int) -> dict[str, Path]:
    """One job (same scenario, seed and steps) written in each layout; grown until the
    per-rank files hold `min_lines`."""
    steps = 40
    while True:
        root = out / f"steps{steps}"
        fleetgen.generate(
            "cuda_error", root / "per-rank", ranks=2048, layout="per-rank", seed=7, steps=steps
        )
        lines = count_lines(load_fleet(root / "per-rank"))
        if lines >= min_lines:
            fleetgen.generate(
                "cuda_error", root / "per-node", ranks=2048, layout="per-node", seed=7, steps=steps
            )
            return {lay: root / lay for lay in LAYOUTS}
        steps = int(steps * min_lines / max(lines, 1) * 1.1) + 1


def best_of(repeat: int, fn: Callable[[], object]) -> tuple[float, object]:
    best = float("inf")
    result: object = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def run_engine(catalog: Catalog, data: list[tuple[Path, bytes]]) -> int:
    engine = Engine(catalog)
    for path, blob in data:
        s = engine.open_stream("bench", str(path), source_key=str(path))
        engine.feed(s, blob)
        engine.close_stream(s)
    return len(engine.finish())


def run_pyhyperscan(catalog: Catalog, lines: list[bytes]) -> int:
    import hyperscan

    sigs = catalog.signatures()
    exprs: list[bytes] = []
    flags: list[int] = []
    for s in sigs:
        for p in s["patterns"]:
            exprs.append(p.encode())
            f = hyperscan.HS_FLAG_SINGLEMATCH
            if s.get("caseless"):
                f |= hyperscan.HS_FLAG_CASELESS
            flags.append(f)
    db = hyperscan.Database()
    db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs), flags=flags)
    count = 0

    def on_match(_id: int, _f: int, _t: int, _flags: int, _ctx: object) -> None:
        nonlocal count
        count += 1

    scan = db.scan
    for line in lines:
        scan(line, match_event_handler=on_match)
    return count


def run_re_loop(patterns: list[re.Pattern[str]], lines: list[str]) -> int:
    count = 0
    for line in lines:
        for p in patterns:
            if p.search(line):
                count += 1
    return count


def compile_re(catalog: Catalog) -> tuple[list[re.Pattern[str]], int]:
    out: list[re.Pattern[str]] = []
    failed = 0
    for s in catalog.signatures():
        for p in s["patterns"]:
            try:
                out.append(re.compile(p, re.IGNORECASE if s.get("caseless") else 0))
            except re.error:
                failed += 1
    return out, failed


@dataclass
class MemoryCheck:
    lines: int
    budget: int
    peak: int
    end: int
    shrinks: int
    diagnoses: int


def memory_check(catalog: Catalog, tmp: Path, budget: int) -> MemoryCheck:
    out = tmp / "mem4096"
    fleetgen.generate("ib_link_down", out, ranks=4096, layout="per-rank", seed=3, steps=40)
    files, _ = discover([out])
    engine = Engine(catalog, EngineConfig(memory_budget_bytes=budget))
    result = analyze_files(engine, files)
    st = result.stats
    return MemoryCheck(
        lines=result.lines,
        budget=budget,
        peak=int(str(st["peak_memory_bytes"])),
        end=int(str(st["memory_bytes"])),
        shrinks=int(str(st["ring_shrinks"])),
        diagnoses=len(result.diagnoses),
    )


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


@dataclass
class Times:
    """One round's seconds: wall and the measuring thread's CPU, engine and ceiling."""

    engine: float
    hs: float
    engine_cpu: float
    hs_cpu: float


@dataclass
class Rounds:
    """Per-round times of one build on one layout (engine and ceiling of the same round)."""

    lines: int = 0
    times: list[Times] = field(default_factory=list)
    diagnoses: int = 0

    def rates(self, cpu: bool = False) -> tuple[list[float], list[float], list[float]]:
        eng = [self.lines / (t.engine_cpu if cpu else t.engine) for t in self.times]
        hs = [self.lines / (t.hs_cpu if cpu else t.hs) for t in self.times]
        return eng, hs, [e / h * 100 for e, h in zip(eng, hs, strict=True)]


def one_round(catalog: Catalog, data: list[tuple[Path, bytes]], blob: bytes) -> tuple[Times, int]:
    w0, c0 = time.perf_counter(), time.thread_time()
    n_diag = run_engine(catalog, data)
    w1, c1 = time.perf_counter(), time.thread_time()
    catalog._core.scan_lines(blob)
    w2, c2 = time.perf_counter(), time.thread_time()
    return Times(w1 - w0, w2 - w1, c1 - c0, c2 - c1), n_diag


def joined(data: list[tuple[Path, bytes]]) -> bytes:
    return b"".join(b if b.endswith(b"\n") else b + b"\n" for _, b in data)


def worker(root: Path, rounds: int) -> None:
    """Measures one layout under this interpreter's build; prints the rounds as JSON."""
    catalog = Catalog()
    data = load_fleet(root)
    blob = joined(data)
    out = Rounds(lines=sum(1 for ln in blob.split(b"\n") if ln))
    for _ in range(rounds):
        times, out.diagnoses = one_round(catalog, data, blob)
        out.times.append(times)
    rounds_json = [vars(t) for t in out.times]
    print(json.dumps({"lines": out.lines, "times": rounds_json, "diagnoses": out.diagnoses}))


def run_before(python: str, pythonpath: str | None, root: Path) -> tuple[Times, int]:
    cmd = [python, str(Path(__file__).resolve()), "--worker", str(root), "--repeat", "1"]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    got = json.loads(res.stdout.strip().splitlines()[-1])
    return Times(**got["times"][0]), int(got["diagnoses"])


def spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def layout_table(results: dict[tuple[str, str], Rounds], builds: list[str]) -> list[str]:
    rows = [
        "| layout | build | lines | engine, lines/s | Hyperscan alone, lines/s "
        "| engine / Hyperscan (wall) | engine / Hyperscan (thread CPU) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for lay in LAYOUTS:
        for build in builds:
            r = results[(build, lay)]
            eng, hs, pct = r.rates()
            pct_cpu = r.rates(cpu=True)[2]
            rows.append(
                f"| {lay} | {build} | {r.lines:,} | {spread(eng, ',.0f')} | {spread(hs, ',.0f')} "
                f"| {spread(pct, '.0f')}% | {spread(pct_cpu, '.0f')}% |"
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--re-sample", type=int, default=0, help="run the re loop on only this many lines (0 = all)"
    )
    ap.add_argument("--memory-budget-bytes", type=int, default=64 << 20)
    ap.add_argument(
        "--before-python",
        help="interpreter of another build (its venv's python) measured alternately as 'before'",
    )
    ap.add_argument(
        "--before-pythonpath",
        help="put this folder first on the 'before' interpreter's path (a copy of another "
        "build's python/ folder, its compiled core included)",
    )
    ap.add_argument(
        "--engine-only",
        action="store_true",
        help="only the engine and Hyperscan rounds (no PyPI binding, re loop or memory check; "
        "implies --no-write)",
    )
    ap.add_argument(
        "--fresh-process",
        action="store_true",
        help="measure this build in a subprocess each round too, as 'before' is (a process that "
        "has fed the engine before runs it faster: a fair side-by-side needs both fresh)",
    )
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.repeat)
        return

    catalog = Catalog()
    builds = ["this build"] + (["before"] if args.before_python else [])
    results = {(b, lay): Rounds() for b in builds for lay in LAYOUTS}
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        fleets = make_fleets(tmp / "fleet", args.lines)
        data = {lay: load_fleet(fleets[lay]) for lay in LAYOUTS}
        blobs = {lay: joined(data[lay]) for lay in LAYOUTS}
        for lay in LAYOUTS:
            results[("this build", lay)].lines = sum(1 for ln in blobs[lay].split(b"\n") if ln)
            mb = len(blobs[lay]) / 1e6
            print(
                f"{lay}: {results[('this build', lay)].lines:,} lines, {mb:,.1f} MB, "
                f"{len(data[lay])} files",
                flush=True,
            )
        # Engine and ceiling alternate, and so do the builds (in turned order each round), so
        # a burst of load on this shared machine hits all of them.
        for i in range(args.repeat):
            for lay in LAYOUTS:
                order = builds if i % 2 == 0 else builds[::-1]
                for build in order:
                    r = results[(build, lay)]
                    if build == "before":
                        t, r.diagnoses = run_before(
                            args.before_python, args.before_pythonpath, fleets[lay]
                        )
                        r.lines = results[("this build", lay)].lines
                    elif args.fresh_process:
                        t, r.diagnoses = run_before(sys.executable, None, fleets[lay])
                    else:
                        t, r.diagnoses = one_round(catalog, data[lay], blobs[lay])
                    r.times.append(t)
                    print(
                        f"round {i + 1} {lay} {build}: engine {t.engine:.3f}s, Hyperscan alone "
                        f"{t.hs:.3f}s ({t.hs / t.engine * 100:.0f}%); thread CPU "
                        f"{t.engine_cpu:.3f}s, {t.hs_cpu:.3f}s "
                        f"({t.hs_cpu / t.engine_cpu * 100:.0f}%); "
                        f"{r.diagnoses} diagnoses",
                        flush=True,
                    )
        if args.engine_only:
            print("\n".join(layout_table(results, builds)))
            return
        blob = blobs["per-rank"]
        mb = len(blob) / 1e6
        raw_lines = [ln for ln in blob.split(b"\n") if ln]
        del data, blobs
        t_pyhs, n_pyhs = best_of(1, lambda: run_pyhyperscan(catalog, raw_lines))
        print(f"hyperscan PyPI per line: {t_pyhs:.2f} s ({n_pyhs} matches)", flush=True)
        patterns, re_failed = compile_re(catalog)
        text_lines = [ln.decode("utf-8", "replace") for ln in raw_lines]
        sample = text_lines[: args.re_sample] if args.re_sample else text_lines
        t_re, n_re = best_of(1, lambda: run_re_loop(patterns, sample))
        re_rate = len(sample) / t_re
        print(f"python re loop: {t_re:.2f} s on {len(sample):,} lines ({n_re} matches)", flush=True)
        mem = memory_check(catalog, tmp, args.memory_budget_bytes)
        print(f"memory: {mem}", flush=True)

    per_rank = results[("this build", "per-rank")]
    eng_rate = statistics.median(per_rank.rates()[0])
    others = [
        ("`hyperscan` PyPI binding, one call per line", t_pyhs, len(raw_lines) / t_pyhs),
        (f"Python `re` loop over {len(patterns)} catalog patterns", t_re, re_rate),
    ]
    other_rows = ["| what | seconds | lines/s | MB/s | engine is |", "|---|---:|---:|---:|---:|"]
    for name, seconds, rate in others:
        other_rows.append(
            f"| {name} | {seconds:.2f} | {rate:,.0f} | {rate * mb / len(raw_lines):,.1f} "
            f"| {eng_rate / rate:.1f}× faster |"
        )
    cmd = (
        f"`.venv/bin/python bench/engine_bench.py --lines {args.lines} --repeat {args.repeat}"
        + (f" --re-sample {args.re_sample}" if args.re_sample else "")
        + (" --before-python <main's .venv/bin/python>" if args.before_python else "")
        + "`"
    )
    section = "\n".join(
        [
            "## Engine",
            "",
            f"Measured {time.strftime('%Y-%m-%d')} with {cmd}.",
            f"Machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()},"
            f" Hyperscan (Vectorscan) {hyperscan_version().strip()}.",
            f"Corpus: one generated 2,048-rank job (`fleetgen` scenario cuda_error, seed 7) "
            f"written as per-rank files and as per-node files (`[defaultN]:` interleaved), "
            f"{len(catalog)} signatures, {len(patterns) + re_failed} patterns. Each round "
            "feeds the engine every file and then has Hyperscan alone scan the same bytes line "
            "by line (`Catalog._core.scan_lines`); median (min–max) over "
            f"{args.repeat} rounds.",
            "",
            *layout_table(results, builds),
            "",
            f"Once, on the per-rank lines ({len(raw_lines):,} lines, {mb:,.1f} MB)"
            + (f"; the `re` loop on the first {len(sample):,} only" if args.re_sample else "")
            + ":",
            "",
            *other_rows,
            "",
            f"Engine memory (rings, hits, context) on a 4,096-rank job ({mem.lines:,} lines, "
            f"ib_link_down): budget {mem.budget / 2**20:.0f} MiB, peak {mem.peak / 2**20:.1f} "
            f"MiB, at end {mem.end / 2**20:.1f} MiB, ring shrinks {mem.shrinks}, "
            f"diagnoses {mem.diagnoses}.",
            "",
        ]
    )
    print(section)
    if not args.no_write:
        append_history(HERE / "history" / "01-engine.md", section)


def append_history(path: Path, section: str) -> None:
    """Appends a run's section to its area's file in bench/history/, under a dated heading one
    level down, so that the file keeps every run in order. bench/RESULTS.md holds each area's
    current figure, its command and date, and is brought up to date by hand from the run."""
    lines = section.strip("\n").split("\n")
    title = lines[0].lstrip("#").strip()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    text = path.read_text() if path.exists() else ""
    entry = "\n".join([f"### {title}: run of {stamp}", *lines[1:]])
    path.write_text(text.rstrip("\n") + "\n\n" + entry + "\n")
    print(f"appended to {path}; update its area in {HERE / 'RESULTS.md'} if this is the figure")


if __name__ == "__main__":
    main()
