"""How the job comes down once workers exit: each host's agent notices a worker's exit at its
next poll, SIGTERMs the other local workers and reports; the scenario's cascade tells other
hosts' workers that a peer is gone; when node 0's agent (the rendezvous store) exits, the
agents still running fail with RendezvousConnectionError. Events run in true-time order."""

from __future__ import annotations

import heapq
import math

from rankwatch.simulate.fleet import Host
from rankwatch.simulate.job import RDZV_LOST, TRIGGER, WORKER_EXIT, Job
from rankwatch.simulate.lines import torchrun
from rankwatch.simulate.lines.records import ROOT, mark


def run_fleet(job: Job) -> None:
    """Process worker exits in time order: agents, SIGTERM, cascades, rendezvous loss."""
    for h in job.hosts:
        ts = [job.own_exit_t[r] for r in h.ranks if job.own_exit_t[r] < math.inf]
        if ts:
            job.push(min(ts), WORKER_EXIT, h.idx, -1)
    rdzv_pushed = False
    while job.events:
        t, seq, kind, hi, ri = heapq.heappop(job.events)
        h = job.hosts[hi]
        if kind == TRIGGER:
            fn = job.triggers.pop(seq)
            if not job.host_dead[hi] and job.death_t[ri] == math.inf:
                fn()
            continue
        if job.host_dead[hi]:
            continue
        if kind == RDZV_LOST:
            _rendezvous_lost(job, h, t)
            continue
        alive = [r for r in h.ranks if job.death_t[r] == math.inf]
        t1 = min(job.own_exit_t[r] for r in alive)
        if t1 > t + 1e-9:
            continue
        _worker_failed(job, h, t1)
        if job.cascade is not None:
            job.cascade(hi, max(job.death_t[r] for r in h.ranks))
        if hi == 0 and not rdzv_pushed:
            rdzv_pushed = True
            for o in job.hosts:
                if not job.host_dead[o.idx]:
                    job.push(job.host_exit_t[0] + job.rng.uniform(0.3, 1.5), RDZV_LOST, o.idx, -1)


def _sigterm(job: Job, h: Host, ranks: list[int], t: float) -> float:
    """The agent SIGTERMs these workers one by one from t; returns the time after."""
    for r in ranks:
        torchrun.sigterm(job, h, t, job.ranks[r].pid)
        job.death_t[r] = t + job.rng.uniform(0.02, 0.6)
        t += 0.0004
    return t


def _worker_failed(job: Job, h: Host, t1: float) -> None:
    """The agent of h saw a worker exit at t1: SIGTERM the rest, report, exit."""
    poll = t1 + job.rng.uniform(0.005, 0.1)
    alive = [r for r in h.ranks if job.death_t[r] == math.inf]
    failed = sorted(
        (r for r in alive if job.own_exit_t[r] <= poll), key=lambda r: job.own_exit_t[r]
    )
    termed = [r for r in alive if r not in failed]
    for r in failed:
        job.death_t[r] = job.own_exit_t[r]
    t = _sigterm(job, h, termed, poll)
    # every failure of one poll carries the same timestamp; the first in local-rank
    # order is logged (and reported as the root cause)
    first = min(failed, key=lambda r: job.ranks[r].local)
    root = job.spec.root_in_agent_log and first == job.culprit_rank
    t_failed = max((job.death_t[r] for r in termed), default=t) + 0.01
    torchrun.child_failed(job, h, t_failed, poll, failed, first, mark(ROOT, 0) if root else 0)
    job.host_dead[h.idx] = True
    job.host_exit_t[h.idx] = t_failed + 0.7


def _rendezvous_lost(job: Job, h: Host, t: float) -> None:
    """The rendezvous store on node 0 went away: the agent shuts down its workers."""
    torchrun.stopping(job, h, t)
    alive = [r for r in h.ranks if job.death_t[r] == math.inf]
    tt = _sigterm(job, h, alive, t + 0.001)
    torchrun.rendezvous_lost(job, h, tt + 0.7)
    job.host_dead[h.idx] = True
    job.host_exit_t[h.idx] = tt + 0.8
