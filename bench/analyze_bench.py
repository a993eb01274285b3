"""`rankwatch analyze` end to end on a healthy 16,384-rank job written as 2,048 per-node files
(`[defaultN]:` interleaving), in one run with alternating repeats:

1. `rankwatch analyze --json` with a cold cache (an empty cache folder each time) and a warm one,
2. `cat FILES | grep -c -F -f FRAGMENTS` with 20 literal fragments taken from the catalog
   (pinned in bench/grep_fragments.txt so that grep's figure does not move when the catalog
   grows; `--fragments-from-catalog` picks 20 spread over the current catalog instead),
3. Hyperscan alone over the same lines with the catalog's database (no decoding, no state),

then start-up (`rankwatch analyze` of a one-line file with a cold and a warm cache, and
`rankwatch validate`), where `analyze` spends its time (imports, catalog, reading, decoding,
applying), the same job written per rank (per-line speed of the two layouts), and, for a
build with `--threads`, one thread against one per core.
With `--before RANKWATCH` (the `rankwatch` script of another build, e.g. main), every rankwatch
figure is also taken for that build, in the same rounds. Appends its section to
bench/history/06-analyze.md unless --no-write (bench/RESULTS.md's "Analyze" area is then
updated by hand).

    .venv/bin/python bench/analyze_bench.py [--repeat 5] [--before BASE/.venv/bin/rankwatch]

The job is generated into bench/out/ once and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
JOB: dict[str, Any] = {
    "scenario": "healthy",
    "ranks": 16384,
    "layout": "per-node",
    "seed": 1,
    "steps": 20,
}
JOB_DIR = HERE / "out" / "analyze-healthy-16384-per-node"
PER_RANK_JOB = dict(JOB, layout="per-rank")
PER_RANK_DIR = HERE / "out" / "analyze-healthy-16384-per-rank"
FRAGMENTS = 20
PINNED_FRAGMENTS = HERE / "grep_fragments.txt"
ONE_LINE = "node1:11:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"


@dataclass
class Timing:
    """Seconds of each repeat of one measurement."""

    runs: list[float] = field(default_factory=list)

    @property
    def best(self) -> float:
        return min(self.runs)

    def text(self) -> str:
        """Best, then median and the slowest: on a shared machine the best is the least
        disturbed run, and the rest shows how much load there was."""
        return f"{self.best:.2f} ({statistics.median(self.runs):.2f}, {max(self.runs):.2f})"


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


# --- the job and the grep fragments ---------------------------------------------------------


def ensure_job(job: dict[str, Any] = JOB, job_dir: Path = JOB_DIR) -> list[Path]:
    stamp = job_dir / "bench-job.json"
    if not (stamp.exists() and json.loads(stamp.read_text()) == job):
        sys.path.insert(0, str(HERE))
        import fleetgen

        if job_dir.exists():
            for p in job_dir.iterdir():
                p.unlink()
        print(f"generating {job} into {job_dir.relative_to(ROOT)} ...", flush=True)
        params = {k: v for k, v in job.items() if k != "scenario"}
        fleetgen.generate(job["scenario"], job_dir, **params)
        stamp.write_text(json.dumps(job))
    return sorted(p for p in job_dir.iterdir() if p.suffix == ".log")


_CLASS_ESCAPES = set("dDsSwWbBAzZntrfvexpPQEkcuhH0123456789")


def literal_runs(pattern: str) -> list[str]:
    """The stretches of a regex that match only themselves, e.g. 'Connect to ' and ' failed'
    in 'Connect to \\S+ failed'."""
    runs: list[str] = []
    run = ""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt in _CLASS_ESCAPES:
                runs.append(run)
                run = ""
            else:
                run += nxt
            i += 2
            continue
        if c in "*?{":  # the previous character is optional or repeated: not part of a literal
            run = run[:-1]
        if c in ".^$*+?()[]{}|":
            runs.append(run)
            run = ""
            if c == "[":
                i = pattern.find("]", i + 2) if pattern.find("]", i + 2) >= 0 else len(pattern)
        else:
            run += c
        i += 1
    runs.append(run)
    return [r for r in runs if r]


def catalog_fragments(signatures: list[dict[str, Any]], count: int) -> list[str]:
    """One literal fragment (the longest, at least 10 characters) per case-sensitive signature,
    `count` of them spread evenly over the catalog."""
    per_sig: list[str] = []
    for sig in signatures:
        if sig.get("caseless"):
            continue
        runs = [r.strip() for p in sig["patterns"] for r in literal_runs(p)]
        best = max(runs, key=len, default="")
        if len(best) >= 10 and best not in per_sig:
            per_sig.append(best)
    if len(per_sig) <= count:
        return per_sig
    return [per_sig[round(i * (len(per_sig) - 1) / (count - 1))] for i in range(count)]


def pinned_fragments(signatures: list[dict[str, Any]]) -> list[str]:
    """The fragments of bench/grep_fragments.txt, each checked to still be a literal run of a
    catalog pattern (so grep keeps searching for what the catalog looks for)."""
    runs = {r.strip() for sig in signatures for p in sig["patterns"] for r in literal_runs(p)}
    wanted = [f for f in PINNED_FRAGMENTS.read_text().splitlines() if f]
    gone = [f for f in wanted if not any(f in run for run in runs)]
    if gone:
        raise SystemExit(
            f"{PINNED_FRAGMENTS.name}: no longer in the catalog: {gone}; "
            "rerun with --fragments-from-catalog and pin a new set"
        )
    return wanted


# --- one measurement each -------------------------------------------------------------------


def run_rankwatch(rankwatch: str, args: Sequence[str], cache_dir: str) -> bytes:
    env = dict(os.environ, RANKWATCH_CACHE_DIR=cache_dir)
    proc = subprocess.run([rankwatch, *args], env=env, capture_output=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{rankwatch} {' '.join(args)} failed: {proc.stderr.decode()[-500:]}")
    return proc.stdout


def run_grep(files: list[Path], fragments: Path) -> int:
    env = dict(os.environ, LC_ALL="C")
    cat = subprocess.Popen(["cat", "--", *map(str, files)], stdout=subprocess.PIPE)
    grep = subprocess.run(
        ["grep", "-c", "-F", "-f", str(fragments)],
        stdin=cat.stdout,
        stdout=subprocess.PIPE,
        env=env,
        check=False,
    )
    assert cat.stdout is not None
    cat.stdout.close()
    cat.wait()
    return int(grep.stdout.decode().strip() or 0)


SPLIT_CODE = """
import json, sys, time
t0 = time.perf_counter()
import rankwatch.cli
from rankwatch import Catalog, Engine
from rankwatch.local import analyze_files, discover
t1 = time.perf_counter()
catalog = Catalog()
t2 = time.perf_counter()
files, _ = discover([sys.argv[1]])
t3 = time.perf_counter()
result = analyze_files(Engine(catalog), files)
t4 = time.perf_counter()
phases = {"imports": t1 - t0, "catalog": t2 - t1, "discover": t3 - t2,
          "analyze_files (read, decode, apply, correlate)": t4 - t3}
for part, seconds in (getattr(result, "timing", None) or {}).items():
    phases[f"- {part}" + (" (summed over threads)" if part in ("read", "decode") else "")] = seconds
print(json.dumps(phases))
"""


def run_split(rankwatch: str, cache_dir: str) -> dict[str, float]:
    """Where one in-process analysis of the job spends its time, under the build's Python."""
    python = str(Path(rankwatch).parent / "python")
    env = dict(os.environ, RANKWATCH_CACHE_DIR=cache_dir)
    out = subprocess.run(
        [python, "-c", SPLIT_CODE, str(JOB_DIR)], env=env, capture_output=True, check=True
    ).stdout
    result: dict[str, float] = json.loads(out)
    return result


# --- the run --------------------------------------------------------------------------------


@dataclass
class Build:
    name: str
    rankwatch: str
    times: dict[str, Timing] = field(default_factory=dict)
    split: dict[str, Timing] = field(default_factory=dict)
    reported_lines: int = 0
    per_rank_lines: int = 0
    threads_option: bool = False

    def add(self, what: str, seconds: float) -> None:
        self.times.setdefault(what, Timing()).runs.append(seconds)


BIG_COLD, BIG_WARM = "analyze --json, cold cache", "analyze --json, warm cache"
ONE_THREAD = "analyze --json --threads 1, warm cache"
PER_RANK = "analyze --json of the job written per rank, warm cache"
ONE_COLD = "analyze of a one-line file, cold cache"
ONE_WARM = "analyze of a one-line file, warm cache"
VALIDATE = "validate, warm cache"


def byte_compile(rankwatch: str) -> None:
    """Write the .pyc files of the build's rankwatch package, as `pip install` does for a
    wheel: with PYTHONDONTWRITEBYTECODE set (as on this machine) an editable install would
    otherwise compile every rankwatch module from source on each start (30-40 ms of CPU)."""
    python = Path(rankwatch).read_text().splitlines()[0].removeprefix("#!").strip()
    code = (
        "import compileall, os, rankwatch; "
        "compileall.compile_dir(os.path.dirname(rankwatch.__file__), quiet=1)"
    )
    subprocess.run([python, "-c", code], check=True)


def has_threads_option(rankwatch: str) -> bool:
    proc = subprocess.run([rankwatch, "analyze", "--help"], capture_output=True, check=False)
    return b"--threads" in proc.stdout


def one_round(build: Build, one_line: Path, warm: str, tmp: Path) -> int:
    """Every rankwatch measurement once for one build; returns the lines analyze reported."""
    big = ["analyze", "--json", "-q", str(JOB_DIR)]
    one = ["analyze", "-q", str(one_line)]

    def fresh() -> str:
        return tempfile.mkdtemp(dir=tmp)

    seconds, out = timed(lambda: run_rankwatch(build.rankwatch, big, fresh()))
    build.add(BIG_COLD, seconds)
    build.add(BIG_WARM, timed(lambda: run_rankwatch(build.rankwatch, big, warm))[0])
    if build.threads_option:
        single = [*big[:-1], "--threads", "1", big[-1]]
        build.add(ONE_THREAD, timed(lambda: run_rankwatch(build.rankwatch, single, warm))[0])
    per_rank = ["analyze", "--json", "-q", str(PER_RANK_DIR)]
    seconds, per_rank_out = timed(lambda: run_rankwatch(build.rankwatch, per_rank, warm))
    build.add(PER_RANK, seconds)
    build.per_rank_lines = json.loads(per_rank_out)["input"]["lines"]
    build.add(ONE_COLD, timed(lambda: run_rankwatch(build.rankwatch, one, fresh()))[0])
    build.add(ONE_WARM, timed(lambda: run_rankwatch(build.rankwatch, one, warm))[0])
    build.add(VALIDATE, timed(lambda: run_rankwatch(build.rankwatch, ["validate"], warm))[0])
    for phase, value in run_split(build.rankwatch, warm).items():
        build.split.setdefault(phase, Timing()).runs.append(value)
    lines: int = json.loads(out)["input"]["lines"]
    return lines


@dataclass
class Corpus:
    files: list[Path]
    blob: bytes
    lines: int
    fragments: list[str]
    per_rank_files: int = 0
    per_rank_lines: int = 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rankwatch", default=str(Path(sys.executable).parent / "rankwatch"))
    ap.add_argument("--before", help="the rankwatch script of the build to compare with")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--fragments-from-catalog",
        action="store_true",
        help=f"grep for {FRAGMENTS} fragments spread over the current catalog, not the pinned set",
    )
    args = ap.parse_args()

    from rankwatch import Catalog, hyperscan_version

    files = ensure_job()
    blob = b"".join(p.read_bytes() for p in files)
    catalog = Catalog()
    signatures = catalog.signatures()
    fragments = (
        catalog_fragments(signatures, FRAGMENTS)
        if args.fragments_from_catalog
        else pinned_fragments(signatures)
    )
    corpus = Corpus(files, blob, blob.count(b"\n"), fragments)
    print(f"job: {len(files)} files, {corpus.lines:,} lines, {len(blob) / 1e6:,.1f} MB", flush=True)
    per_rank_files = ensure_job(PER_RANK_JOB, PER_RANK_DIR)
    corpus.per_rank_files = len(per_rank_files)
    corpus.per_rank_lines = sum(p.read_bytes().count(b"\n") for p in per_rank_files)
    builds = [Build("after", args.rankwatch)]
    if args.before:
        builds.insert(0, Build("before", args.before))
    for b in builds:
        b.threads_option = has_threads_option(b.rankwatch)
        byte_compile(b.rankwatch)
    grep_t, hs_t = Timing(), Timing()
    grep_count = hs_matches = 0
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        frag_file = tmp / "fragments.txt"
        frag_file.write_text("\n".join(corpus.fragments) + "\n")
        one_line = tmp / "rank-0.log"
        one_line.write_text(ONE_LINE)
        warm = str(tmp / "warm-cache")
        for b in builds:
            run_rankwatch(b.rankwatch, ["validate"], warm)
        for r in range(args.repeat):
            for b in builds:
                b.reported_lines = one_round(b, one_line, warm, tmp)
            seconds, grep_count = timed(lambda: run_grep(files, frag_file))
            grep_t.runs.append(seconds)
            seconds, (_, hs_matches) = timed(lambda: catalog._core.scan_lines(blob))
            hs_t.runs.append(seconds)
            print(f"round {r + 1}/{args.repeat} done", flush=True)

    section = render(
        args,
        builds,
        corpus,
        {"grep": (grep_t, grep_count), "hyperscan": (hs_t, hs_matches)},
        f"Hyperscan (Vectorscan) {hyperscan_version().strip()}, {len(catalog)} signatures",
    )
    print(section)
    if not args.no_write:
        sys.path.insert(0, str(HERE))
        from engine_bench import append_history

        append_history(HERE / "history" / "06-analyze.md", section)


def layout_table(before: Build | None, after: Build, corpus: Corpus) -> list[str]:
    """Per-line speed of the same job written per node and per rank (warm cache)."""
    rows = [
        "",
        "| the same job, warm cache | files | lines | before: s | after: s | before | after |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, what, files, lines in (
        ("per node (`[defaultN]:`)", BIG_WARM, len(corpus.files), corpus.lines),
        ("per rank", PER_RANK, corpus.per_rank_files, corpus.per_rank_lines),
    ):
        cells = []
        for b in (before, after):
            t = b.times.get(what) if b else None
            cells.append((t.text(), f"{lines / t.best:,.0f} lines/s") if t else ("—", "—"))
        rows.append(
            f"| {name} | {files:,} | {lines:,} | {cells[0][0]} | {cells[1][0]} "
            f"| {cells[0][1]} | {cells[1][1]} |"
        )
    return rows


def render(
    args: argparse.Namespace,
    builds: list[Build],
    corpus: Corpus,
    baselines: dict[str, tuple[Timing, int]],
    library: str,
) -> str:
    sys.path.insert(0, str(HERE))
    from engine_bench import cpu_model

    grep_t, grep_count = baselines["grep"]
    hs_t, hs_matches = baselines["hyperscan"]
    grep_rate = corpus.lines / grep_t.best
    before = builds[0] if len(builds) > 1 else None
    after = builds[-1]

    def cell(build: Build | None, what: str) -> str:
        if build is None or what not in build.times:
            return "—"
        return build.times[what].text()

    def vs_grep(build: Build | None, what: str) -> str:
        if build is None:
            return "—"
        rate = corpus.lines / build.times[what].best
        return f"{rate:,.0f} lines/s, {rate / grep_rate:.2f}× grep"

    table = [
        "| what | before: s, best (median, max) | after: s, best (median, max) | before, best "
        "| after, best |",
        "|---|---:|---:|---:|---:|",
    ]
    for what in (BIG_COLD, BIG_WARM, ONE_THREAD):
        if what not in after.times:
            continue
        table.append(
            f"| `rankwatch {what}` | {cell(before, what)} | {cell(after, what)} "
            f"| {vs_grep(before if before and what in before.times else None, what)} "
            f"| {vs_grep(after, what)} |"
        )
    for name, t, note in (
        ("`cat FILES \\| grep -c -F -f` 20 fragments", grep_t, f"{grep_count:,} lines matched"),
        ("Hyperscan alone, same database, per line", hs_t, f"{hs_matches:,} matches"),
    ):
        rate = corpus.lines / t.best
        table.append(
            f"| {name} | — | {t.text()} | — | {rate:,.0f} lines/s, "
            f"{rate / grep_rate:.2f}× grep; {note} |"
        )
    table += layout_table(before, after, corpus)
    table += ["", "| start-up | before | after |", "|---|---:|---:|"]
    for what in (ONE_COLD, ONE_WARM, VALIDATE):
        table.append(f"| `rankwatch {what}` | {cell(before, what)} | {cell(after, what)} |")
    table += [
        "",
        "| where `analyze` of the job spends its time (in process, warm cache) | before | after |",
        "|---|---:|---:|",
    ]
    for phase in after.split:
        b = before.split.get(phase) if before else None
        a = after.split[phase]
        table.append(f"| {phase} | {b.text() if b else '—'} | {a.text()} |")
    command = "`.venv/bin/python bench/analyze_bench.py --repeat {}{}`".format(
        args.repeat, " --before BASE/.venv/bin/rankwatch" if before else ""
    )
    return "\n".join(
        [
            "## Analyze",
            "",
            f"Measured {time.strftime('%Y-%m-%d')} with {command}"
            + (", where BASE is a checkout of main built with `make setup`" if before else "")
            + ".",
            f"Machine: {os.cpu_count()} cores, {cpu_model()}; {library}.",
            f"Job: `fleetgen` {JOB['scenario']}, {JOB['ranks']:,} ranks, {JOB['layout']} "
            f"(`[defaultN]:` interleaving), seed {JOB['seed']}, {JOB['steps']} steps: "
            f"{len(corpus.files):,} files, {corpus.lines:,} lines, "
            f"{len(corpus.blob) / 1e6:,.1f} MB. Rates divide that newline count by the time; "
            f"rankwatch's own `input.lines` says {after.reported_lines:,}.",
            f"{args.repeat} rounds; each round runs every measurement once, builds alternating. "
            "Times are wall-clock seconds of the whole command (Python start-up included), the "
            "best of the rounds with the median and the slowest in brackets; rates use the best; "
            "cold cache: an empty cache folder, warm: one that holds this catalog. grep runs "
            "with `LC_ALL=C`; Hyperscan alone runs in process over the lines already in memory.",
            "grep fragments: " + ", ".join(f"`{f}`" for f in corpus.fragments) + ".",
            "",
            *table,
            "",
        ]
    )


if __name__ == "__main__":
    main()
