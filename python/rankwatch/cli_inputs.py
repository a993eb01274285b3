"""Input discovery as the commands run it: what was skipped or renamed is printed on stderr
as it is found, and a reason to stop is raised as InputError (exit status 2)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rankwatch.inputs import DumpFile, InputError, LogFile, discover


def say(kind: str) -> Callable[[str], None]:
    """A printer of `rankwatch: KIND MESSAGE` lines on stderr."""
    return lambda message: print(f"rankwatch: {kind} {message}", file=sys.stderr)


def find_inputs(
    paths: Sequence[str | Path],
    job: str | None,
    rank_pattern: str | None,
    what: str = "",
    dumps: list[DumpFile] | None = None,
) -> tuple[list[LogFile], list[str]]:
    """`discover` with its messages printed; `what` prefixes the error (`--baseline: `).
    Flight Recorder dumps found among the files go to `dumps` when it is given."""
    skipped_line = say("skipped")
    try:
        files, skipped = discover(
            paths, job=job, rank_pattern=rank_pattern, note=say("note:"), dumps=dumps
        )
    except InputError as e:
        for s in e.skipped:
            skipped_line(s)
        raise InputError(f"{what}{e}") from None
    for s in skipped:
        skipped_line(s)
    return files, skipped
