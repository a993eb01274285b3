"""The ground truth of a generated job (`truth.json`) and the check that its marked lines are
where it says."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankwatch.simulate.job import Job, Meta
from rankwatch.simulate.lines.records import ALT, FIRST, ROOT


@dataclass
class Truth:
    """What the generator injected; written as ``truth.json`` next to the logs.

    ``root_cause`` / ``first_warning`` hold ``rank``, ``host``, ``line`` (verbatim, as written
    in the file, without the newline), ``signature`` (catalog id) and ``file`` (path of the
    file holding ``line``, relative to the output folder). ``first_warning`` may carry
    ``equivalent``: entries of the same shape for lines of the same event that are
    indistinguishable in time from the logs (wrong_iface: rank 0's bootstrap root and the ring
    predecessor fail within milliseconds, without timestamps).
    """

    job: str
    scenario: str
    ranks: int
    layout: str
    expect_diagnosis: bool
    root_cause: dict[str, Any] | None
    first_warning: dict[str, Any] | None
    host_offsets_s: dict[str, float]
    notes: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"


def truth_of(job: Job) -> Truth:
    """The truth of a job whose files have been written."""

    def entry(kind: int, meta: Meta | None) -> dict[str, Any] | None:
        if meta is None:
            return None
        loc = job.located.get(kind)
        if loc is None:
            raise RuntimeError(f"{job.scenario}: marked line was not written (kind {kind})")
        return {
            "rank": meta[0],
            "host": meta[1],
            "line": loc[1],
            "signature": meta[2],
            "file": loc[0],
        }

    first = entry(FIRST, job.first_meta)
    alt = entry(ALT, job.alt_meta)
    if first is not None and alt is not None:
        # printed within milliseconds on different hosts without timestamps: which one
        # came first cannot be told from the logs, so both are acceptable
        first["equivalent"] = [alt]
    return Truth(
        job=job.name,
        scenario=job.scenario,
        ranks=job.world_size,
        layout=job.layout,
        expect_diagnosis=job.root_meta is not None,
        root_cause=entry(ROOT, job.root_meta),
        first_warning=first,
        host_offsets_s={h.name: h.offset for h in job.hosts},
        notes=" ".join(job.notes),
    )


def check_truth(out_dir: Path, truth: Truth) -> list[str]:
    """Problems with ``truth``: the marked lines must be lines of their ``file``.

    Also reports (as ``note:`` entries) other files that contain the same line verbatim.
    """
    problems: list[str] = []
    files = [p for p in Path(out_dir).rglob("*.log") if p.is_file()]
    entries: list[tuple[str, dict[str, Any] | None]] = [
        ("root_cause", truth.root_cause),
        ("first_warning", truth.first_warning),
    ]
    if truth.first_warning:
        entries += [
            ("first_warning.equivalent", e) for e in truth.first_warning.get("equivalent", [])
        ]
    for name, entry in entries:
        if entry is None:
            continue
        line = str(entry["line"])
        target = Path(out_dir) / str(entry["file"])
        if not target.is_file():
            problems.append(f"{name}: file {entry['file']} missing")
            continue
        if line not in target.read_text(encoding="utf-8").split("\n"):
            problems.append(f"{name}: line not found in {entry['file']}")
        others = [
            str(p.relative_to(out_dir))
            for p in files
            if p != target and line in p.read_text(encoding="utf-8").split("\n")
        ]
        if others:
            problems.append(f"note: {name} line also in {len(others)} other file(s): {others[:3]}")
    if truth.expect_diagnosis and truth.root_cause is None:
        problems.append("expect_diagnosis without root_cause")
    return problems
