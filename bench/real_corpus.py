"""Score rankwatch on the real-log corpus (`shared/corpus/real/`), as its README describes.

A failing case passes when the first diagnosis's `root_cause.line` equals the case's
`evidence_line` (whitespace-normalised; an outer launcher prefix kept on one side and stripped
on the other is tolerated). A healthy case passes when there is no diagnosis at all.

    .venv/bin/python bench/real_corpus.py [--corpus DIR] [--json OUT] [-v]

Prints one line per case and a summary by confidence. Exit status 0 always (it measures).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from rankwatch.catalog_loader import Catalog
from rankwatch.engine import Engine, EngineConfig
from rankwatch.local import analyze_files, discover

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "real"
_WS = re.compile(r"\s+")
# What may sit between a stripped launcher prefix and the line it wrapped.
_PREFIX_END = set(" \t:]|>)")
MIN_SUFFIX_CHARS = 20


@dataclass
class CaseResult:
    id: str
    category: str
    confidence: str
    passed: bool
    got_line: str | None
    got_signature: str | None
    expected_line: str | None
    diagnoses: int


def normalise(line: str) -> str:
    return _WS.sub(" ", line).strip()


def same_line(got: str, expected: str) -> bool:
    """Equal after whitespace normalisation, or equal but for an outer launcher prefix."""
    a, b = normalise(got), normalise(expected)
    if a == b:
        return True
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    if len(short) < MIN_SUFFIX_CHARS or not long_.endswith(short):
        return False
    return long_[len(long_) - len(short) - 1] in _PREFIX_END


def analyze_case(case_dir: Path, catalog: Catalog) -> list[dict[str, object]]:
    files, _ = discover([str(case_dir)], job=case_dir.name)
    engine = Engine(catalog, EngineConfig())
    result = analyze_files(engine, files, progress=False, on_error=lambda _m: None)
    return [dict(d) for d in result.diagnoses]


def score_case(entry: dict[str, object], corpus: Path, catalog: Catalog) -> CaseResult:
    case_id = str(entry["id"])
    diagnoses = analyze_case(corpus / "cases" / case_id, catalog)
    expected = entry.get("evidence_line")
    got_line = got_sig = None
    if diagnoses:
        root = diagnoses[0].get("root_cause") or {}
        assert isinstance(root, dict)
        got_line = str(root.get("line", ""))
        sig = diagnoses[0].get("signature") or {}
        got_sig = str(sig.get("id", "")) if isinstance(sig, dict) else str(sig)
    # A few healthy controls carry an evidence line anyway (an Init COMPLETE): the category
    # decides, as the corpus README says.
    healthy = entry["category"] == "healthy"
    if healthy:
        passed = not diagnoses
    else:
        passed = got_line is not None and same_line(got_line, str(expected))
    return CaseResult(
        id=case_id,
        category=str(entry["category"]),
        confidence="healthy" if healthy else str(entry["confidence"]),
        passed=passed,
        got_line=got_line,
        got_signature=got_sig,
        expected_line=None if expected is None else str(expected),
        diagnoses=len(diagnoses),
    )


def summarise(results: list[CaseResult]) -> list[str]:
    def count(pred: object) -> tuple[int, int]:
        sel = [r for r in results if pred(r)]  # type: ignore[operator]
        return sum(r.passed for r in sel), len(sel)

    groups = {
        "high/medium": lambda r: r.confidence in ("high", "medium"),
        "healthy": lambda r: r.confidence == "healthy",
        "high/medium + healthy": lambda r: r.confidence in ("high", "medium", "healthy"),
        "low": lambda r: r.confidence == "low",
        "all": lambda r: True,
    }
    out = []
    for name, pred in groups.items():
        ok, n = count(pred)
        pct = 100.0 * ok / n if n else 0.0
        out.append(f"{name:<22} {ok:>3}/{n:<3} {pct:5.1f}%")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--json", type=Path, help="write per-case results here")
    ap.add_argument("-v", "--verbose", action="store_true", help="show got/expected on failures")
    args = ap.parse_args(argv)
    manifest = json.loads((args.corpus / "manifest.json").read_text())
    catalog = Catalog([])
    results = [score_case(e, args.corpus, catalog) for e in manifest]
    for r in results:
        mark = "PASS" if r.passed else "FAIL"
        print(f"{mark} {r.confidence:<7} {r.category:<34} {r.id}  [{r.got_signature}]")
        if args.verbose and not r.passed:
            print(f"     got:      {r.got_line}")
            print(f"     expected: {r.expected_line}")
    print()
    print("\n".join(summarise(results)))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
