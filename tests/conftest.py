"""Shared fixtures: the shipped catalog, the fleet generator (rankwatch.simulate), and a helper that
generates a job and analyzes it through the real engine."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # bench scripts some tests import

from daemon_fixtures import *  # noqa: E402, F403
from rankwatch import Catalog, Engine, EngineConfig  # noqa: E402
from rankwatch.local import analyze_files, discover  # noqa: E402
from rankwatch.simulate import fleetgen  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Compiled catalogs go to a folder of this session, not the user's cache (subprocesses
    inherit it)."""
    os.environ["RANKWATCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("rankwatch-cache"))


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog()


def analyze_dir(
    path: Path, catalog: Catalog, config: EngineConfig | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    files, _ = discover([path], job=None)
    engine = Engine(catalog, config)
    result = analyze_files(engine, files)
    return result.diagnoses, dict(result.stats)


GenerateAndAnalyze = Callable[..., tuple[Any, list[dict[str, Any]]]]


@pytest.fixture
def generate_and_analyze(tmp_path: Path, catalog: Catalog) -> GenerateAndAnalyze:
    def run(scenario: str, **kw: Any) -> tuple[Any, list[dict[str, Any]]]:
        name = f"{scenario}-{kw.get('layout', 'per-rank')}-{kw.get('seed', 0)}"
        out = tmp_path / name
        truth = fleetgen.generate(scenario, out, job=name, **kw)
        diagnoses, _ = analyze_dir(out, catalog)
        return truth, diagnoses

    return run


@pytest.fixture
def fr_analyze(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, Any, str]]:
    """`rankwatch analyze` run in this process: `fr_analyze(*args)` -> (exit status, the
    --json report, stderr)."""
    import orjson

    from rankwatch.cli import main

    def run(*args: str | Path) -> tuple[int, Any, str]:
        code = main(["analyze", *map(str, args), "--json", "-q"])
        out, err = capsys.readouterr()
        return code, (orjson.loads(out) if out.strip() else {}), err

    return run
