"""version_mismatch: the culprit host loaded an older NCCL than the rest of the job. The
node-local communicators initialise fine; the default one fails on every rank with invalid
usage. The old version's banner (printed by the host's local rank 0) is the root cause."""

from __future__ import annotations

from rankwatch.simulate.baseline import baseline
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import USAGE_ERR, chain, warn
from rankwatch.simulate.lines.pytorch import init_exception
from rankwatch.simulate.lines.versions import WARN_SITES
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet


def build(job: Job) -> None:
    rng = job.rng
    fail_t = [baseline(job, r, "bootstrap") for r in job.ranks]
    t_det = max(fail_t) + rng.uniform(0.2, 0.5)
    odd = job.culprit
    old = odd.host.nccl
    for r in job.ranks:
        v = r.host.nccl
        if r.host is odd.host:
            other, over = 0, job.nccl.code
        else:
            other, over = odd.rank, old.code
        msg = (
            f"Mismatched NCCL version detected : rank {r.rank} version {v.code} "
            f"rank {other} version {over}"
        )
        t = t_det + rng.uniform(0.0, 0.03)
        warn(job, r, t, WARN_SITES[v.ver]["mismatch"], msg)
        chain(job, r, t + 0.0002, "mismatch", 5)
        init_exception(job, r, t + 0.01, USAGE_ERR, msg, v.ver)
    job.root_meta = (odd.rank, odd.host.name, "nccl_version_banner")
    job.notes.append(
        f"{odd.host.name} loaded NCCL {old.ver} while the job uses {job.nccl.ver}; the "
        "node-local communicators initialise fine, the default one fails on every rank "
        "with invalid usage. The banner is printed by each host's local rank 0 only."
    )
    run_fleet(job)


SCENARIO = Scenario(
    name="version_mismatch",
    about="one host runs another NCCL version than the rest of the job",
    build=build,
    nccl="2.21.5",
    transport="IB",
    needs_two_hosts=True,
    host_wide=True,
    culprit_nccl="2.18.3",
)
