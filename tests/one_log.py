"""Analyses invented log text the way `rankwatch analyze` would: one text as a one-file job, or
several files as one job. Shared by the real-log cases (tests/cases/) and the tests that pin
classes and shapes found in held-out real logs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rankwatch.catalog_loader import Catalog
from rankwatch.engine import Engine, EngineConfig
from rankwatch.local import analyze_files, discover


def _analyze(folder: Path, job: str) -> list[dict[str, Any]]:
    files, _ = discover([str(folder)], job=job)
    engine = Engine(Catalog([]), EngineConfig())
    result = analyze_files(engine, files, progress=False, on_error=lambda _m: None)
    return [dict(d) for d in result.diagnoses]


def diagnose(tmp_path: Path, text: str) -> list[dict[str, Any]]:
    case = tmp_path / "case"
    case.mkdir()
    (case / "log.txt").write_text(text)
    return _analyze(case, "case")


def diagnose_job(tmp_path: Path, files: dict[str, str]) -> list[dict[str, Any]]:
    """Several files of one job, as `rankwatch analyze FOLDER` reads them."""
    case = tmp_path / "job"
    case.mkdir()
    for name, text in files.items():
        (case / name).write_text(text)
    return _analyze(case, "job")


def root(diagnoses: list[dict[str, Any]]) -> dict[str, Any]:
    assert diagnoses, "no diagnosis"
    rc = diagnoses[0]["root_cause"]
    assert isinstance(rc, dict)
    return rc


def root_line(diagnoses: list[dict[str, Any]]) -> str:
    return str(root(diagnoses)["line"])


def signature(diagnoses: list[dict[str, Any]]) -> str:
    return str(diagnoses[0]["signature"]["id"])
