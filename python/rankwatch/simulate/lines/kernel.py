"""Kernel log lines (journald style), written as dmesg-<host>.log where a scenario has any."""

from __future__ import annotations

from rankwatch.simulate.fleet import Host
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.records import OUT

NVRM_LOAD = (
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.08  Tue Nov 26 20:24:05 UTC 2024"
)


def kern(job: Job, h: Host, t: float, msg: str, flag: int = 0) -> None:
    job.kernel_recs.setdefault(h.idx, []).append(
        (t, OUT, f"{job.clock.journal(h.local_time(t))} {h.name} kernel: {msg}", flag)
    )
