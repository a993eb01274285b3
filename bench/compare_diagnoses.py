"""Diagnoses of two builds side by side: `rankwatch analyze --json` of every input, once with
the default memory budget and once with a tight one, under this interpreter and under another
build's (`--before-python`, optionally with `--before-pythonpath` put first on its path), and
the JSON compared once keys naming seconds, memory or bytes (timings, sizes) are left out.
A change that should not change any diagnosis (a faster peeler, a scan memo) must report 0
differences.

Inputs: generated fleets (every scenario of `rankwatch.simulate.fleetgen` in each layout,
written under a temporary folder), every case folder under each `--corpus` (the real-log
corpus's `cases/`, the held-out sets), and any `--input` folder or file.

    .venv/bin/python bench/compare_diagnoses.py --before-python OTHER/.venv/bin/python \\
        [--before-pythonpath OTHER/python] [--corpus ../shared/corpus/real] [--ranks 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from rankwatch.simulate import fleetgen  # noqa: E402

LAYOUTS = fleetgen.LAYOUTS
TIGHT_BUDGET = 2_000_000
VOLATILE = ("seconds", "memory", "bytes")
RUN_CLI = "import sys; from rankwatch.cli import main; sys.exit(main())"


def stable(o: object) -> object:
    """`o` without the keys whose values depend on timing or memory sizes."""
    if isinstance(o, dict):
        return {k: stable(v) for k, v in o.items() if not any(w in k for w in VOLATILE)}
    if isinstance(o, list):
        return [stable(v) for v in o]
    return o


def analyze(python: str, pythonpath: str | None, path: Path, budget: int | None) -> str:
    """The stable JSON of one `analyze` run, or the exit code and error tail when it failed."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [python, "-c", RUN_CLI, "analyze", "--json", "-q", str(path)]
    if budget is not None:
        cmd += ["--memory-budget-bytes", str(budget)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    try:
        return json.dumps(stable(json.loads(p.stdout)), sort_keys=True)
    except json.JSONDecodeError:
        return f"rc={p.returncode} err={p.stderr[-300:]}"


def generated(out: Path, ranks: int, seed: int, steps: int) -> list[Path]:
    paths = []
    for scenario in fleetgen.SCENARIOS:
        for layout in LAYOUTS:
            root = out / f"{scenario}-{layout}"
            fleetgen.main(
                [
                    "--scenario", scenario, "--ranks", str(ranks), "--seed", str(seed),
                    "--steps", str(steps), "--layout", layout, "--out", str(root),
                ]
            )  # fmt: skip
            paths.append(root)
    return paths


def corpus_cases(corpus: Path) -> list[Path]:
    cases = corpus / "cases" if (corpus / "cases").is_dir() else corpus
    return sorted(p for p in cases.iterdir() if p.is_dir())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before-python", required=True)
    ap.add_argument("--before-pythonpath")
    ap.add_argument("--corpus", type=Path, action="append", default=[])
    ap.add_argument("--input", type=Path, action="append", default=[])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-fleets", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rw-compare-") as tmp:
        inputs = [] if args.no_fleets else generated(Path(tmp), args.ranks, args.seed, args.steps)
        for corpus in args.corpus:
            inputs += corpus_cases(corpus)
        inputs += args.input
        compared = differ = 0
        for path in inputs:
            for budget in (None, TIGHT_BUDGET):
                after = analyze(sys.executable, None, path, budget)
                before = analyze(args.before_python, args.before_pythonpath, path, budget)
                compared += 1
                if after != before:
                    differ += 1
                    print(f"DIFF {path} budget={budget}", flush=True)
                    print(f"  this build: {after[:300]}\n  before:     {before[:300]}")
        print(f"{len(inputs)} inputs, {compared} comparisons, {differ} differences")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
