"""How a generated line is kept until the files are written: (true time, stream, text, mark).

The text may hold several lines (a traceback). The mark flags one of them as a line the truth
names (root cause, first warning, or an equivalent of it); the layouts find it in the file
that gets written and record where it landed."""

from __future__ import annotations

OUT = 0  # stdout of a worker (NCCL lines)
ERR = 1  # stderr of a worker (c10, Python, logging)

ROOT = 0
FIRST = 1
ALT = 2  # a line as good as first_warning (same event, no observable order)

# (true time, stream, text, mark); mark = 0 or mark(kind, line)
Rec = tuple[float, int, str, int]


def mark(kind: int, line: int) -> int:
    """Flag line `line` of a record's text as the truth's `kind` (ROOT, FIRST or ALT)."""
    return (line << 2) | (kind + 1)


def unmark(flag: int) -> tuple[int, int]:
    """(kind, line) of a non-zero mark."""
    return (flag & 3) - 1, flag >> 2
