"""ib_link_down: an InfiniBand port goes down on the culprit's host (async event: port
error). Its rail peers on the neighbouring hosts see retry-exceeded completions (status=12)
about 30 s later, then flushed ones (status=5); the culprit's own QPs fail too; everyone else
times out on the next allreduce."""

from __future__ import annotations

from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import IB_RETRY_S, chain, info, warn, wc_msg
from rankwatch.simulate.lines.records import ROOT
from rankwatch.simulate.lines.versions import WARN_SITES
from rankwatch.simulate.lines.watchdog import watchdog_ncclerr
from rankwatch.simulate.scenarios.common import full_baseline, rail_peers, timeouts_for_all
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet

_LENGTH = 524288
_WC_SITE = WARN_SITES["2.21.5"]["wc"]


def build(job: Job) -> None:
    rng = job.rng
    full_baseline(job)
    cul = job.culprit
    T = job.culprit_time()
    hca = f"mlx5_{cul.local}"
    warn(
        job,
        cul,
        T,
        WARN_SITES["2.21.5"]["async"],
        f"NET/IB : {hca}:1 Got async event : port error",
        tid=cul.tid_async,
        dev=0,
        kind=ROOT,
    )
    job.root_meta = (cul.rank, cul.host.name, "nccl_ib_async_event")
    peers = rail_peers(job)
    v = job.nccl
    for p in peers:
        tp = T + IB_RETRY_S + rng.uniform(-1.5, 1.5)
        m12 = wc_msg(v, cul, 12, f"mlx5_{p.local}", _LENGTH)
        warn(job, p, tp, _WC_SITE, m12, tid=p.tid_prog)
        chain(job, p, tp + 0.0001, "wc", 6, tid=p.tid_prog)
        info(job, p, tp + 0.0003, "proxy.cc:903 -> 6 [Progress Thread]", p.tid_prog)
        last = ""
        for k in range(rng.randint(2, 3)):
            last = wc_msg(v, cul, 5, f"mlx5_{p.local}", 0)
            warn(job, p, tp + 0.001 + k * 0.0005, _WC_SITE, last, tid=p.tid_prog)
        watchdog_ncclerr(job, p, tp + rng.uniform(0.05, 0.2), last)
    # the culprit's own QPs go to error too
    tc = T + IB_RETRY_S + rng.uniform(-1.0, 1.0)
    if peers:
        m12 = wc_msg(v, peers[-1], 12, hca, _LENGTH)
        warn(job, cul, tc, _WC_SITE, m12, tid=cul.tid_prog)
        m5 = wc_msg(v, peers[0], 5, hca, 0)
        warn(job, cul, tc + 0.001, _WC_SITE, m5, tid=cul.tid_prog)
        watchdog_ncclerr(job, cul, tc + rng.uniform(0.05, 0.2), m5)
    timeouts_for_all(job)
    job.notes.append(
        f"{hca} port 1 on {cul.host.name} (rank {cul.rank}) went down at true "
        f"t={T:.3f}s; its rail peers {[p.rank for p in peers]} see status=12 about 30 s "
        "later and status=5 flushes; everyone else times out."
    )
    run_fleet(job)


SCENARIO = Scenario(
    name="ib_link_down",
    about="an InfiniBand port goes down on one host; its peers' transfers fail",
    build=build,
    nccl="2.21.5",
    transport="IB",
    needs_two_hosts=True,
)
