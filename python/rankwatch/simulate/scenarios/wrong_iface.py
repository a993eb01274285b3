"""wrong_iface: one host's NCCL bootstraps on docker0 (172.17.0.1), which other hosts cannot
reach. The bootstrap root (rank 0) and the culprit's ring predecessor fail to connect within
milliseconds of each other; hosts before the culprit then fail one by one through the
bootstrap ring, and hosts from it on hang until the rendezvous store on node 0 disappears."""

from __future__ import annotations

from functools import partial

from rankwatch.simulate.baseline import baseline
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import SYS_ERR, chain, warn
from rankwatch.simulate.lines.pytorch import init_exception
from rankwatch.simulate.lines.records import ALT, FIRST
from rankwatch.simulate.lines.versions import WARN_SITES
from rankwatch.simulate.scenarios.common import peer_gone_in_init
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet


def build(job: Job) -> None:
    rng = job.rng
    fail_t = {r.rank: baseline(job, r, "bootstrap") for r in job.ranks}
    first = job.culprit_host * job.per_host  # rank whose docker0 address others must reach
    victim = job.ranks[first - 1]  # its bootstrap-ring predecessor
    cul = job.ranks[first]
    r0 = job.ranks[0]
    t_b = max(fail_t.values()) + rng.uniform(0.05, 0.2)
    t_root = t_b + rng.uniform(0.0, 0.02)
    t_prev = t_b + rng.uniform(0.0, 0.02)
    src = WARN_SITES["2.21.5"]["connect"]
    msg_root = (
        f"socketStartConnect: Connect to 172.17.0.1<{cul.port}> failed : Network is unreachable"
    )
    ring_port = cul.port + rng.randint(1, 400)  # its bootstrap-ring listener
    msg_prev = (
        f"socketStartConnect: Connect to 172.17.0.1<{ring_port}> failed : Network is unreachable"
    )
    tid_root = r0.pid + 89
    root_first = t_root <= t_prev
    warn(job, r0, t_root, src, msg_root, tid=tid_root, dev=0, kind=FIRST if root_first else ALT)
    chain(job, r0, t_root + 0.0002, "root", 2, tid=tid_root)
    warn(job, victim, t_prev, src, msg_prev, kind=ALT if root_first else FIRST)
    chain(job, victim, t_prev + 0.0002, "connect", 2)
    init_exception(job, victim, t_prev + 0.01, SYS_ERR, msg_prev, job.nccl.ver)
    job.root_meta = (cul.rank, cul.host.name, "nccl_iface_unreachable")
    fw, alt = (r0, victim) if root_first else (victim, r0)
    job.first_meta = (fw.rank, fw.host.name, "nccl_sock_connect_failed")
    job.alt_meta = (alt.rank, alt.host.name, "nccl_sock_connect_failed")
    job.notes.append(
        f"{cul.host.name} picked docker0 (172.17.0.1) for bootstrap and NET/Socket; the "
        f"bootstrap root (rank 0) and rank {victim.rank} cannot reach it. Hosts before it "
        "fail one by one through the bootstrap ring; hosts from it on hang waiting for the "
        "root and are shut down when the rendezvous store on node 0 disappears."
    )
    job.cascade = partial(_ring_cascade, job)
    run_fleet(job)


def _ring_cascade(job: Job, hi: int, t_dead: float) -> None:
    # only the hosts before the culprit have a connected bootstrap ring
    if hi == 0 or hi > job.culprit_host:
        return
    prev_h = job.hosts[hi - 1]
    b = job.ranks[prev_h.ranks[-1]]
    dead_peer = job.ranks[hi * job.per_host]
    t = t_dead + job.rng.uniform(0.02, 0.3)
    job.trigger(t, b, partial(peer_gone_in_init, job, b, dead_peer, False, t))


SCENARIO = Scenario(
    name="wrong_iface",
    about="one host's NCCL bootstraps on docker0, a bridge other hosts cannot reach",
    build=build,
    nccl="2.21.5",
    transport="Socket",
    needs_two_hosts=True,
    host_wide=True,
    culprit_on_docker0=True,
)
