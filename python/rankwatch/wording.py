"""How a diagnosis names things in prose: a process, a suspect, an alternative, repeated lines.
The terminal report and the incident page both say it this way."""

from __future__ import annotations

from collections.abc import Sequence

from rankwatch import diagnosis as rd

# The parts that name a process.
Who = rd.RootCause | rd.FirstWarning | rd.Suspect | rd.ReportedBy


def who_text(
    rank: int | None, host: str | None, device: int | None = None, pid: int | None = None
) -> str:
    """`rank 3 on node-1 (GPU 2, pid 4242)`, with what is known."""
    parts = []
    if rank is not None:
        parts.append(f"rank {rank}")
    if host:
        parts.append(f"on {host}")
    extra = []
    if device is not None:
        extra.append(f"GPU {device}")
    if pid is not None:
        extra.append(f"pid {pid}")
    if extra:
        parts.append("(" + ", ".join(extra) + ")")
    return " ".join(parts) or "unknown process"


def who(d: Who) -> str:
    """The process a part names."""
    if isinstance(d, rd.ReportedBy):
        return who_text(d.rank, d.host)
    if isinstance(d, rd.Suspect):
        return who_text(d.rank, d.host, None, d.pid)
    return who_text(d.rank, d.host, d.device, d.pid)


def counted(lines: Sequence[str]) -> list[str]:
    """Each distinct line once, in first-seen order, with how often it came when more than once
    (processes told apart by nothing the line shows)."""
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    return [line if n == 1 else f"{line}  (x{n})" for line, n in counts.items()]


def suspect_text(s: rd.Suspect) -> str:
    reasons = "; ".join(s.reasons[:2]) or "-"
    return f"{who(s)}  score {s.score}: {reasons}"


def alternative_text(a: rd.Alternative) -> str:
    sig = f" [{a.signature}]" if a.signature else ""
    return f"{who(a)}{sig}: {a.why_not}"
