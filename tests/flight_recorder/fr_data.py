"""Where the checked-in Flight Recorder fixtures are, and readers of them for tests (our
own files: trusted, so the plain unpickler may read them here)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "data" / "flight_recorder"
# `analyze(*args)` -> (exit status, the --json report, stderr): the `fr_analyze` fixture.
Analyze = Callable[..., tuple[int, dict[str, Any], str]]

SCENARIOS = ("size_mismatch", "skipped", "hang", "p2p_unmatched", "p2p_unmatched_nccl", "healthy")


def real_doc(scenario: str = "hang", rank: int = 0) -> dict[str, Any]:
    doc: dict[str, Any] = pickle.loads((DATA / scenario / f"nccl_trace_rank_{rank}").read_bytes())
    return doc


def write_dump(path: Path, doc: object) -> Path:
    path.write_bytes(pickle.dumps(doc, protocol=2))
    return path
