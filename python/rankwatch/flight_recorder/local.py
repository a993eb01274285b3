"""Flight Recorder dumps in `rankwatch analyze`: which job each dump belongs to, and feeding
each job's dumps to the engine beside its logs."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rankwatch.flight_recorder import (
    MAX_DUMP_BYTES,
    Finding,
    feed_dumps,
    find_dumps,
    read_dumps,
)
from rankwatch.inputs import DumpFile, InputError, LogFile

if TYPE_CHECKING:
    from rankwatch.engine import Engine
from rankwatch.safe_text import printable


@dataclass
class FedDumps:
    """What the dumps of every job gave: counts for the report, findings per job."""

    dumps: int = 0
    lines: int = 0
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    findings: dict[str, list[Finding]] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {
            "dumps": self.dumps,
            "lines": self.lines,
            "skipped": self.skipped,
            "notes": self.notes,
            "findings": {job: len(fs) for job, fs in sorted(self.findings.items())},
        }


def given_dumps(
    paths: Sequence[str],
    job: str | None,
    files: Sequence[LogFile],
    found: Sequence[DumpFile],
    on_problem: Callable[[str], None],
) -> list[DumpFile]:
    """The dumps named with `--flight-recorder` (files, folders, globs), each with its job:
    `--job`, else the only job of the other inputs, else (no other inputs) the name of the
    folder the dumps are in. With several jobs and no `--job` that is a usage error."""
    listed, problems = find_dumps(paths)
    for m in problems:
        on_problem(m)
    if not listed:
        return []
    jobs = sorted({f.job for f in files} | {d.job for d in found})
    if job is not None:
        name = job
    elif len(jobs) == 1:
        name = jobs[0]
    elif not jobs:
        first = Path(paths[0])
        base = first if first.is_dir() else listed[0].parent
        name = printable(os.path.basename(os.path.realpath(base)) or "job")
    else:
        raise InputError(
            f"--flight-recorder: the inputs are {len(jobs)} jobs ({', '.join(jobs[:5])}); "
            "say which one the dumps belong to with --job"
        )
    seen = {os.path.realpath(d.path) for d in found}
    return [DumpFile(p, name) for p in listed if os.path.realpath(p) not in seen]


def feed_job_dumps(
    engine: Engine,
    dumps: Sequence[DumpFile],
    max_bytes: int = MAX_DUMP_BYTES,
    on_problem: Callable[[str], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    memory_bytes: int | None = None,
) -> FedDumps:
    """Reads, checks and analyzes every job's dumps and feeds their lines to the engine. A
    dump that cannot be used is reported ("PATH: reason") and left out. `memory_bytes`
    bounds what one job's dumps hold (`read_dumps`)."""
    out = FedDumps()
    by_job: dict[str, list[Path]] = defaultdict(list)
    for d in dumps:
        by_job[d.job].append(d.path)
    for job, paths in sorted(by_job.items()):
        read, problems, notes = read_dumps(paths, max_bytes, memory_bytes=memory_bytes)
        for m in problems:
            out.skipped.append(m)
            if on_problem is not None:
                on_problem(m)
        for m in notes:
            out.notes.append(m)
            if on_note is not None:
                on_note(m)
        if not read:
            continue
        where = os.path.commonpath([os.path.dirname(os.path.abspath(p)) for p in paths])
        shown = os.path.relpath(where) if not os.path.relpath(where).startswith("..") else where
        analysis, lines = feed_dumps(engine, job, read, printable(shown, limit=None))
        out.dumps += len(read)
        out.lines += lines
        out.findings[job] = analysis.findings
    return out
