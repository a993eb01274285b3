"""shm_full: /dev/shm on the culprit's host is full. During the default communicator's
transport setup the culprit cannot extend its NCCL segment, its local peers fail to attach,
and the loss propagates around the bootstrap ring host by host."""

from __future__ import annotations

from functools import partial

from rankwatch.simulate.baseline import baseline
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import SYS_ERR, chain, warn
from rankwatch.simulate.lines.pytorch import init_exception
from rankwatch.simulate.lines.records import ROOT
from rankwatch.simulate.lines.versions import WARN_SITES
from rankwatch.simulate.scenarios.common import peer_gone_in_init
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet

_SHM_SIZE = 9637892
_SITES = WARN_SITES["2.27.7"]


def build(job: Job) -> None:
    rng = job.rng
    cul = job.culprit
    # every rank blocks in the default communicator's transport setup
    ends = {r.rank: baseline(job, r, "transport") for r in job.ranks}
    T = ends[cul.rank] + rng.uniform(0.01, 0.05)
    seg = "/dev/shm/nccl-" + "".join(
        rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        for _ in range(6)
    )
    warn(
        job,
        cul,
        T,
        _SITES["shm_extend"],
        f"Error: failed to extend {seg} to {_SHM_SIZE} bytes, error: No space left on device (28)",
        kind=ROOT,
    )
    m2 = (
        f"Error while creating shared memory segment {seg} (size {_SHM_SIZE}), error: No "
        "space left on device (28)"
    )
    warn(job, cul, T + 0.0003, _SITES["shm_seg"], m2)
    chain(job, cul, T + 0.0005, "shm", 2)
    init_exception(job, cul, T + 0.01, SYS_ERR, m2, job.nccl.ver)
    job.root_meta = (cul.rank, cul.host.name, "nccl_shm_extend_failed")
    _local_peers_fail(job, seg, T)
    job.notes.append(
        f"/dev/shm of {cul.host.name} is full: rank {cul.rank} cannot extend its NCCL "
        "segment during the default communicator's transport setup, its local peers fail to "
        "attach, and the loss propagates around the bootstrap ring."
    )
    job.cascade = partial(_ring_cascade, job)
    run_fleet(job)


def _local_peers_fail(job: Job, seg: str, T: float) -> None:
    cul = job.culprit
    for lr in cul.host.ranks:
        if lr == cul.rank:
            continue
        p = job.ranks[lr]
        tp = T + job.rng.uniform(0.005, 0.06)
        m = (
            f"Error while attaching to shared memory segment {seg} (size {_SHM_SIZE}), "
            "error: No such file or directory (2)"
        )
        warn(job, p, tp, _SITES["shm_seg"], m)
        chain(job, p, tp + 0.0003, "shm", 2)
        init_exception(job, p, tp + 0.01, SYS_ERR, m, job.nccl.ver)


def _ring_cascade(job: Job, hi: int, t_dead: float) -> None:
    """Host hi's workers are gone: its bootstrap-ring neighbours' inits fail."""
    if job.nodes < 2:
        return
    g = job.per_host
    for dh, recv in ((1, True), (-1, False)):
        oh = (hi + dh) % job.nodes
        if job.host_dead[oh] or oh == hi:
            continue
        b = job.ranks[oh * g] if recv else job.ranks[oh * g + g - 1]
        dead = job.ranks[hi * g + g - 1] if recv else job.ranks[hi * g]
        t = t_dead + job.rng.uniform(0.05, 0.4)
        job.trigger(t, b, partial(peer_gone_in_init, job, b, dead, recv, t))


SCENARIO = Scenario(
    name="shm_full",
    about="/dev/shm is too small on one host: NCCL cannot extend a shared segment",
    build=build,
    nccl="2.27.7",
    transport="IB",
    intra_first=False,
)
