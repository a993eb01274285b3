"""xid79: the culprit's GPU falls off the bus (NVRM Xid 79 in the kernel log, the root cause).
On seeds whose second bit is clear the rank then fails with a CUDA error; otherwise it hangs
until the heartbeat monitor kills it. The other hosts time out."""

from __future__ import annotations

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.kernel import NVRM_LOAD, kern
from rankwatch.simulate.lines.pytorch import CUDA_HINTS
from rankwatch.simulate.lines.records import ROOT, mark
from rankwatch.simulate.lines.watchdog import HEARTBEAT_S, abort_lines, heartbeat_abort
from rankwatch.simulate.scenarios.common import full_baseline, timeouts_for_all
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet

XID_BUS = "9a000"


def build(job: Job) -> None:
    rng = job.rng
    full_baseline(job)
    cul = job.culprit
    T = job.culprit_time()
    bdf = f"0000:{cul.bus[:2]}:00"
    _kernel_lines(job, cul, T, bdf)
    job.root_meta = (cul.rank, cul.host.name, "xid_79")
    crash = (job.seed // 2) % 2 == 0
    if crash:
        tc = T + rng.uniform(0.3, 2.0)
        inner = ["CUDA error: unspecified launch failure", *CUDA_HINTS, ""]
        abort_lines(
            job,
            cul,
            tc,
            inner,
            "c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43",
            "cuda",
        )
    else:
        heartbeat_abort(job, cul, T + HEARTBEAT_S + rng.uniform(0.0, 8.0))
    timeouts_for_all(job, skip=[cul.rank])
    job.notes.append(
        f"GPU {bdf} (busId {cul.bus}, rank {cul.rank}) on {cul.host.name} fell off the bus at "
        f"true t={T:.3f}s; the rank "
        + ("fails with a CUDA error" if crash else "hangs until the heartbeat monitor kills it")
        + "; the other hosts time out."
    )
    run_fleet(job)


def _kernel_lines(job: Job, cul: Rank, T: float, bdf: str) -> None:
    rng = job.rng
    h = cul.host
    kern(
        job, h, -3100.0, "nvidia-nvlink: Nvlink Core is being initialized, major device number 509"
    )
    kern(job, h, -3099.8, NVRM_LOAD)
    uuid = "-".join(f"{rng.getrandbits(n * 4):0{n}x}" for n in (8, 4, 4, 4, 12))
    kern(job, h, T, f"NVRM: GPU at PCI:{bdf}: GPU-{uuid}")
    kern(job, h, T + 0.0001, f"NVRM: GPU Board Serial Number: 16543210{rng.randint(10000, 99999)}")
    kern(
        job,
        h,
        T + 0.0002,
        f"NVRM: Xid (PCI:{bdf}): 79, pid={cul.pid}, name=python3, GPU has fallen off the bus.",
        flag=mark(ROOT, 0),
    )
    kern(job, h, T + 0.0003, f"NVRM: GPU {bdf}.0: GPU has fallen off the bus.")


SCENARIO = Scenario(
    name="xid79",
    about="a GPU falls off the bus (Xid 79 in the kernel log); its rank stalls",
    build=build,
    nccl="2.27.7",
    transport="IB",
    culprit_bus=XID_BUS,
)
