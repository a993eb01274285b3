"""What several scenarios share: the full healthy baseline, everybody else timing out on the
collective the culprit never joins, the culprit's IB rail peers, and what a rank logs when a
peer's socket closes under it."""

from __future__ import annotations

from collections.abc import Iterable

from rankwatch.simulate.baseline import baseline, training
from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import REMOTE_ERR, chain, info, net_closed_msg, warn
from rankwatch.simulate.lines.pytorch import init_exception
from rankwatch.simulate.lines.watchdog import watchdog_ncclerr, watchdog_timeout


def full_baseline(job: Job) -> None:
    """Every rank initialises and trains all steps."""
    for r in job.ranks:
        baseline(job, r)
        training(job, r)


def timeouts_for_all(job: Job, skip: Iterable[int] = (), desync: list[str] | None = None) -> None:
    """Every rank but `skip` enqueues the next allreduce and times out on it 10 minutes later;
    rank 0 adds the desync report, if given."""
    skip_set = set(skip)
    t_enq0 = job.schedule.last_step_t + job.rng.uniform(0.25, 0.6)
    for r in job.ranks:
        if r.rank in skip_set:
            continue
        t_enq = t_enq0 + job.rng.uniform(0.0, 0.06)
        watchdog_timeout(job, r, t_enq, desync if r.rank == 0 else None)


def rail_peers(job: Job) -> list[Rank]:
    """The culprit's peers on the same IB rail: its local rank on the neighbouring hosts."""
    out: list[Rank] = []
    for dh in (-1, 1):
        oh = (job.culprit_host + dh) % job.nodes
        if oh != job.culprit_host:
            p = job.ranks[oh * job.per_host + job.culprit_local]
            if p not in out:
                out.append(p)
    return out


def peer_gone_in_init(job: Job, r: Rank, dead: Rank, recv: bool, t: float) -> None:
    """r's bootstrap socket to the dead process closes during the comm init: r fails it."""
    src, msg = net_closed_msg(dead, recv, r.host.nccl)
    warn(job, r, t, src, msg)
    chain(job, r, t + 0.0002, "closed", 6)
    init_exception(job, r, t + 0.01, REMOTE_ERR, msg, r.host.nccl.ver)


def peer_gone_in_training(job: Job, r: Rank, dead: Rank, recv: bool, t: float) -> None:
    """r's NET/Socket connection to the dead process closes: its proxy thread reports it and
    the watchdog takes r down."""
    src, msg = net_closed_msg(dead, recv, r.host.nccl)
    warn(job, r, t, src, msg, tid=r.tid_prog)
    chain(job, r, t + 0.0002, "net_closed", 6, tid=r.tid_prog)
    info(job, r, t + 0.0005, "proxy.cc:929 -> 6 [Progress Thread]", r.tid_prog)
    watchdog_ncclerr(job, r, t + job.rng.uniform(0.05, 0.2), msg)
