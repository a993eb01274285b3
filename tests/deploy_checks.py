"""Helpers for the tests of deploy/: the shipped dashboard's queries, and the real tools the
checks run (installed by scripts/setup-test-services.sh)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "rankwatch.json"
# Series of `rankwatch alert`, not of the analysis daemon: their queries must be valid PromQL,
# but only a running alert deliverer gives them data.
ALERT_DELIVERER_METRICS = ("rankwatch_alerts_", "rankwatch_alert_")


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: run scripts/setup-test-services.sh")
    return path


def load_dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(DASHBOARD.read_bytes())
    return doc


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dashboard["panels"]:
        yield p
        yield from p.get("panels", [])  # collapsed rows hold their panels


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    return [
        (str(p["title"]), str(t["expr"]))
        for p in panels(load_dashboard())
        for t in p.get("targets", [])
    ]
