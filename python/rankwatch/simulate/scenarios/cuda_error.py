"""cuda_error: the culprit hits an illegal memory access after the last step and exits 1;
its IB rail peers report retry-exceeded completions about 30 s later; the rest time out."""

from __future__ import annotations

from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import IB_RETRY_S, chain, info, warn, wc_msg
from rankwatch.simulate.lines.pytorch import CUDA_HINTS, destroy_warning, excepthook
from rankwatch.simulate.lines.versions import WARN_SITES
from rankwatch.simulate.lines.watchdog import watchdog_ncclerr
from rankwatch.simulate.scenarios.common import full_baseline, rail_peers, timeouts_for_all
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet


def build(job: Job) -> None:
    rng = job.rng
    full_baseline(job)
    cul = job.culprit
    T = job.culprit_time()
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 301, in <module>',
        "    main()",
        '  File "/workspace/train.py", line 262, in main',
        "    total_loss += loss.item()",
        "                  ^^^^^^^^^^^",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        *CUDA_HINTS,
        "",
    ]
    excepthook(job, cul, T, lines, root_at=6)
    destroy_warning(job, cul, T + 0.2)
    job.set_exit(cul, T + 0.35, 1)
    job.root_meta = (cul.rank, cul.host.name, "pt_cuda_error")
    for p in rail_peers(job):
        tp = T + IB_RETRY_S + rng.uniform(-1.0, 2.0)
        m12 = wc_msg(job.nccl, cul, 12, f"mlx5_{p.local}", 1048576)
        warn(job, p, tp, WARN_SITES["2.26.2"]["wc"], m12, tid=p.tid_prog)
        chain(job, p, tp + 0.0001, "wc", 6, tid=p.tid_prog)
        info(job, p, tp + 0.0003, "proxy.cc:929 -> 6 [Progress Thread]", p.tid_prog)
        watchdog_ncclerr(job, p, tp + rng.uniform(0.05, 0.2), m12)
    timeouts_for_all(job, skip=[cul.rank])
    job.notes.append(
        f"rank {cul.rank} on {cul.host.name} hit an illegal memory access at true "
        f"t={T:.3f}s and exited 1; its IB rail peers report status=12 ~30 s later; the "
        "rest time out."
    )
    run_fleet(job)


SCENARIO = Scenario(
    name="cuda_error",
    about="one rank hits an illegal memory access (CUDA error); the rest time out",
    build=build,
    nccl="2.26.2",
    transport="IB",
)
