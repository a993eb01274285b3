"""desync: the culprit hangs on the CPU side after the last step and never enqueues the next
allreduce; every other rank times out on it, and rank 0 (TORCH_NCCL_DESYNC_DEBUG=1) names the
culprit in the desync report; its agent SIGTERMs it."""

from __future__ import annotations

from rankwatch.simulate.job import Job
from rankwatch.simulate.scenarios.common import full_baseline, timeouts_for_all
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet


def build(job: Job) -> None:
    full_baseline(job)
    cul = job.culprit
    s = job.schedule.stuck_seq
    others = [r for r in range(job.world_size) if r != cul.rank]
    report = [
        f"\t - [0] Timeout at collective: ALLREDUCE, #{s}",
        "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
        f"\t     [{cul.rank}] finished collective #{s - 1}, but didn't join collective "
        f"#{s} (count from 1)",
        "\t - Snapshot of ranks' latest states:",
        f"\t   #{s} started ranks:",
        f"\t     [{', '.join(map(str, others))}] started ALLREDUCE",
        f"\t   #{s - 1} finished ranks:",
        f"\t     [{cul.rank}] finished ALLREDUCE",
    ]
    job.root_meta = (cul.rank, cul.host.name, "pt_desync_report")
    timeouts_for_all(job, skip=[cul.rank], desync=report)
    job.notes.append(
        f"rank {cul.rank} on {cul.host.name} hung on the CPU side after step {job.steps} "
        f"and never enqueued SeqNum={s}; every other rank times out on SeqNum={s}; rank 0 "
        "(TORCH_NCCL_DESYNC_DEBUG=1) names it in the desync report; it is SIGTERMed by its "
        "agent."
    )
    run_fleet(job)


SCENARIO = Scenario(
    name="desync",
    about="one rank never joins a collective the others wait in",
    build=build,
    nccl="2.27.7",
    transport="IB",
    desync_debug=True,
)
