"""Where the lines go: one file per rank, one per host (torchrun --tee, `[defaultN]:` before
each worker line), or torchrun's --log-dir tree; dmesg-<host>.log at the top in every layout.
Lines of a file are sorted by true time; a worker's lines stop where it died. Writing finds
where each marked line landed, for the truth."""

from __future__ import annotations

import math
from pathlib import Path

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.records import ERR, OUT, Rec, unmark


def write(job: Job, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    if job.layout == "per-rank":
        _write_per_rank(job, out)
    elif job.layout == "per-node":
        _write_per_node(job, out)
    else:
        _write_logdir(job, out)
    for hi, recs in job.kernel_recs.items():
        _write_file(job, out, f"dmesg-{job.hosts[hi].name}.log", [(recs, "")])


def _write_per_rank(job: Job, out: Path) -> None:
    for r in job.ranks:
        _write_file(job, out, f"rank-{r.rank}.log", [(_alive(job, r), "")])
    for h in job.hosts:
        _write_file(job, out, f"agent-{h.name}.log", [(job.agent_recs[h.idx], "")])


def _write_per_node(job: Job, out: Path) -> None:
    for h in job.hosts:
        parts: list[tuple[list[Rec], str]] = [
            (_alive(job, job.ranks[r]), f"[default{job.ranks[r].local}]:") for r in h.ranks
        ]
        parts.append((job.agent_recs[h.idx], ""))
        _write_file(job, out, f"{h.name}.log", parts)


def _write_logdir(job: Job, out: Path) -> None:
    for h in job.hosts:
        base = f"{h.name}/{job.name}_{h.suffix}/attempt_0"
        for ri in h.ranks:
            r = job.ranks[ri]
            recs = _alive(job, r)
            stdout = [x for x in recs if x[1] == OUT]
            stderr = [x for x in recs if x[1] == ERR]
            _write_file(job, out, f"{base}/{r.local}/stdout.log", [(stdout, "")])
            _write_file(job, out, f"{base}/{r.local}/stderr.log", [(stderr, "")])
        _write_file(job, out, f"{h.name}/agent.log", [(job.agent_recs[h.idx], "")])


def _alive(job: Job, r: Rank) -> list[Rec]:
    """The rank's records up to its death."""
    d = job.death_t[r.rank]
    recs = job.rank_recs[r.rank]
    if d == math.inf:
        return recs
    return [x for x in recs if x[0] <= d]


def _write_file(job: Job, out: Path, rel: str, parts: list[tuple[list[Rec], str]]) -> None:
    """Write the records of `parts` (each with the prefix of its lines) sorted by time."""
    merged: list[tuple[float, int, str, int, str]] = []
    for recs, pre in parts:
        merged.extend((t, i, text, flag, pre) for i, (t, _s, text, flag) in enumerate(recs))
    merged.sort(key=lambda x: x[0])
    chunks: list[str] = []
    times: list[float] = []
    for t, _i, text, flag, pre in merged:
        if pre:
            chunks.append(pre + text.replace("\n", "\n" + pre))
        else:
            chunks.append(text)
        times.extend([t] * (text.count("\n") + 1))
        if flag:
            kind, idx = unmark(flag)
            line = text.split("\n")[idx]
            job.located[kind] = (rel, pre + line)
    path = out / rel
    if path.parent not in job.made_dirs:
        path.parent.mkdir(parents=True, exist_ok=True)
        job.made_dirs.add(path.parent)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        if chunks:
            f.write("\n".join(chunks))
            f.write("\n")
    if job.line_times is not None:
        job.line_times[rel] = times
