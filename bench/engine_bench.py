"""Engine throughput, side by side on the same lines in one run:

1. the rankwatch engine end to end (decode, classify, rings, correlation, diagnosis),
2. Hyperscan alone over the same lines with the same database (the ceiling),
3. the `hyperscan` PyPI binding called once per line,
4. a plain-Python `re` loop over the catalog's patterns,

plus ring memory on a 4,096-rank job against its configured budget. Writes the table into
bench/RESULTS.md (section "Engine") unless --no-write.

    .venv/bin/python bench/engine_bench.py [--lines 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rankwatch import Catalog, Engine, EngineConfig, hyperscan_version  # noqa: E402
from rankwatch.local import analyze_files, discover  # noqa: E402
from rankwatch.simulate import fleetgen  # noqa: E402


def load_fleet(root: Path) -> list[tuple[Path, bytes]]:
    files, _ = discover([root])
    return [(f.path, f.path.read_bytes()) for f in files]


def make_fleet(out: Path, min_lines: int) -> tuple[list[tuple[Path, bytes]], int]:
    steps = 40
    while True:
        for p in out.glob("**/*"):
            if p.is_file():
                p.unlink()
        fleetgen.generate("cuda_error", out, ranks=2048, layout="per-rank", seed=7, steps=steps)
        data = load_fleet(out)
        lines = sum(b.count(b"\n") for _, b in data)
        if lines >= min_lines:
            return data, lines
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--re-sample", type=int, default=0, help="run the re loop on only this many lines (0 = all)"
    )
    ap.add_argument("--memory-budget-bytes", type=int, default=64 << 20)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()

    catalog = Catalog()
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        data, _ = make_fleet(tmp / "fleet", args.lines)
        blob = b"".join(b if b.endswith(b"\n") else b + b"\n" for _, b in data)
        mb = len(blob) / 1e6
        raw_lines = [ln for ln in blob.split(b"\n") if ln]
        print(f"corpus: {len(raw_lines):,} lines, {mb:,.1f} MB, {len(data)} files", flush=True)

        # Engine and ceiling alternate, so a burst of load on this shared machine hits both.
        t_engine = t_hs = float("inf")
        n_diag = n_hs_matches = 0
        for _ in range(args.repeat):
            t, res = best_of(1, lambda: run_engine(catalog, data))
            n_diag = res if isinstance(res, int) else 0
            t_engine = min(t_engine, t)
            t, hs_result = best_of(1, lambda: catalog._core.scan_lines(blob))
            t_hs = min(t_hs, t)
            n_hs_matches = hs_result[1] if isinstance(hs_result, tuple) else 0
        print(f"engine end to end: {t_engine:.2f} s ({n_diag} diagnoses)", flush=True)
        print(f"hyperscan alone: {t_hs:.2f} s ({n_hs_matches} matches)", flush=True)
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

    rate = len(raw_lines) / t_engine
    rows = [
        ("rankwatch engine, end to end", t_engine, rate, mb / t_engine),
        (
            "Hyperscan alone, same database, per line (ceiling)",
            t_hs,
            len(raw_lines) / t_hs,
            mb / t_hs,
        ),
        (
            "`hyperscan` PyPI binding, one call per line",
            t_pyhs,
            len(raw_lines) / t_pyhs,
            mb / t_pyhs,
        ),
        (
            f"Python `re` loop over {len(patterns)} catalog patterns",
            t_re,
            re_rate,
            re_rate * mb / len(raw_lines),
        ),
    ]
    table = [
        "| what | seconds | lines/s | MB/s | engine is |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, t, r, m in rows:
        ratio = (
            "—"
            if name.startswith("rankwatch")
            else (f"{rate / r:.2f}× its rate" if r > rate else f"{rate / r:.1f}× faster")
        )
        table.append(f"| {name} | {t:.2f} | {r:,.0f} | {m:,.1f} | {ratio} |")
    hs_share = rate / (len(raw_lines) / t_hs) * 100
    section = "\n".join(
        [
            "## Engine",
            "",
            f"Measured {time.strftime('%Y-%m-%d')} with `.venv/bin/python bench/engine_bench.py"
            f" --lines {args.lines} --repeat {args.repeat}`"
            + (f" --re-sample {args.re_sample}" if args.re_sample else "")
            + ".",
            f"Machine: {os.cpu_count()} cores, {cpu_model()}, Python {platform.python_version()},"
            f" Hyperscan (Vectorscan) {hyperscan_version().strip()}.",
            f"Corpus: {len(raw_lines):,} generated lines ({mb:,.1f} MB) of a 2,048-rank job "
            f"(`fleetgen` scenario cuda_error, per-rank files), {len(catalog)} signatures, "
            f"{len(patterns) + re_failed} patterns"
            + (
                f" ({re_failed} not accepted by Python `re`, left out of its loop)"
                if re_failed
                else ""
            )
            + ".",
            "Times are the best of the repeats (engine and Hyperscan alone alternating), one run "
            "for the slower two"
            + (
                f"; the `re` loop ran on the first {len(sample):,} lines only"
                if args.re_sample
                else ""
            )
            + ".",
            "",
            *table,
            "",
            f"The engine runs at **{hs_share:.0f}%** of the Hyperscan-alone rate and "
            f"**{rate / re_rate:.0f}×** the plain-`re` loop.",
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
        write_section(HERE / "RESULTS.md", "## Engine", section)


def write_section(path: Path, heading: str, section: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    start = text.find(heading)
    if start >= 0:
        end = text.find("\n## ", start + len(heading))
        text = text[:start] + section + ("\n" + text[end + 1 :] if end >= 0 else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


if __name__ == "__main__":
    main()
