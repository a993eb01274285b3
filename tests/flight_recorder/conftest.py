"""Fixtures of the Flight Recorder tests: `rankwatch analyze` run in this process."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from rankwatch.cli import main

Analyze = Callable[..., tuple[int, dict[str, Any], str]]


@pytest.fixture
def analyze(capsys: pytest.CaptureFixture[str]) -> Analyze:
    """`analyze(*args)` -> (exit status, the --json report, stderr)."""

    def run(*args: str | Path) -> tuple[int, dict[str, Any], str]:
        code = main(["analyze", *map(str, args), "--json", "-q"])
        out, err = capsys.readouterr()
        return code, (orjson.loads(out) if out.strip() else {}), err

    return run
