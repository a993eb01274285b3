"""Every real-log case of tests/cases/<family>/<case>.toml through `rankwatch analyze`'s path
(discover, the engine, the shipped catalog), checked against the case's expectations. The format
is described in tests/cases/README.md."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from one_log import diagnose, diagnose_job

HERE = Path(__file__).resolve().parent
KEYS = {"batch", "moved_from", "log", "files", "diagnoses", "expect"}
# Operators of an expectation written as an inline table: `line = { startswith = "..." }`.
OPS = {
    "startswith",
    "endswith",
    "contains",
    "contains_any",
    "has",
    "any_contains",
    "none_contains",
    "at_most",
}


@dataclass(frozen=True)
class Case:
    id: str
    path: Path
    data: dict[str, Any]

    def run(self, tmp_path: Path) -> list[dict[str, Any]]:
        if "log" in self.data:
            return diagnose(tmp_path, self.data["log"])
        return diagnose_job(tmp_path, self.data["files"])


def load(path: Path) -> Case:
    data = tomllib.loads(path.read_text())
    case = Case(f"{path.parent.name}/{path.stem}", path, data)
    unknown = set(data) - KEYS
    assert not unknown, f"{case.id}: unknown keys {sorted(unknown)}"
    assert ("log" in data) != ("files" in data), f"{case.id}: give `log` or `files`, not both"
    if data.get("diagnoses") == 0:
        assert not data.get("expect"), f"{case.id}: expectations on no diagnosis"
    else:
        assert data.get("expect"), f"{case.id}: no expectations"
    return case


CASES = [load(p) for p in sorted(HERE.glob("*/*.toml"))]


def same(actual: Any, want: Any) -> bool:
    """Equal, and of the same kind: `true` is not 1, a number is not its string."""
    if isinstance(want, list):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(want)
            and all(same(a, w) for a, w in zip(actual, want, strict=True))
        )
    if isinstance(want, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == want.keys()
            and all(same(actual[k], w) for k, w in want.items())
        )
    return type(actual) is type(want) and actual == want


def texts(actual: Any, where: str) -> list[str]:
    assert isinstance(actual, list | tuple), f"{where}: {actual!r} is not a list"
    assert all(isinstance(t, str) for t in actual), f"{where}: {actual!r} holds non-text"
    return list(actual)


def apply(op: str, want: Any, actual: Any, where: str) -> None:
    shown = f"{where}: {op} {want!r}, got {actual!r}"
    wants = want if isinstance(want, list) else [want]
    if op in ("startswith", "endswith", "contains", "contains_any"):
        assert isinstance(actual, str), shown
        if op == "startswith":
            assert actual.startswith(want), shown
        elif op == "endswith":
            assert actual.endswith(want), shown
        elif op == "contains":
            assert all(w in actual for w in wants), shown
        else:
            assert any(w in actual for w in wants), shown
    elif op == "has":
        assert isinstance(actual, list | tuple), shown
        assert all(w in actual for w in wants), shown
    elif op == "any_contains":
        assert any(want in t for t in texts(actual, where)), shown
    elif op == "none_contains":
        assert not any(want in t for t in texts(actual, where)), shown
    elif op == "at_most":
        assert isinstance(actual, int | float) and not isinstance(actual, bool), shown
        assert actual <= want, shown
    else:
        raise AssertionError(f"{where}: unknown operator {op}")


def check(actual: Any, want: Any, where: str) -> None:
    """`want` mirrors the diagnosis: a table descends, an operator table tests, a value must
    equal. In a list, a key is an index (`0`), `*` (every element) or the `signature` of the
    one element that has it (collateral)."""
    if not isinstance(want, dict):
        assert same(actual, want), f"{where}: want {want!r}, got {actual!r}"
        return
    if want and want.keys() <= OPS:
        for op, w in want.items():
            apply(op, w, actual, where)
        return
    assert not want.keys() & OPS, f"{where}: operators mixed with fields: {sorted(want)}"
    for key, sub in want.items():
        at = f"{where}.{key}"
        if isinstance(actual, list | tuple):
            if key == "*":
                for i, item in enumerate(actual):
                    check(item, sub, f"{where}[{i}]")
            elif key.isdigit():
                assert int(key) < len(actual), f"{at}: only {len(actual)} elements"
                check(actual[int(key)], sub, at)
            else:
                hits = [x for x in actual if isinstance(x, dict) and x.get("signature") == key]
                assert len(hits) == 1, f"{at}: {len(hits)} elements with that signature"
                check(hits[0], sub, at)
        else:
            assert isinstance(actual, dict) and key in actual, f"{at}: missing in {actual!r}"
            check(actual[key], sub, at)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case, tmp_path: Path) -> None:
    diagnoses = case.run(tmp_path)
    count = case.data.get("diagnoses")
    if count is not None:
        assert len(diagnoses) == count, f"{count} diagnoses wanted, got {diagnoses!r}"
    if count == 0:
        return
    assert diagnoses, "no diagnosis"
    check(diagnoses[0], case.data["expect"], "diagnosis")


def test_no_case_file_is_left_out() -> None:
    # A case one folder too deep or beside this file would never run.
    assert sorted(HERE.rglob("*.toml")) == [c.path for c in CASES]
