"""What the Python side of a worker prints: c10 log lines (ProcessGroupNCCL), uncaught
exceptions as torchelastic's excepthook prefixes them, the training script's logging and
warnings. Formats follow shared/reference/log-formats.md."""

from __future__ import annotations

from collections.abc import Sequence

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import DETAIL
from rankwatch.simulate.lines.records import ERR, ROOT, mark

SITE = "/usr/local/lib/python3.11/site-packages"
LIBDIR = f"{SITE}/torch/lib"
PGSRC = "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
PGN = "ProcessGroupNCCL.cpp"
TIMEOUT_MS = 600000
CUDA_HINTS = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)


def c10(job: Job, r: Rank, t: float, sev: str, line: int, msg: str, flag: int = 0) -> None:
    """A c10 log line of ProcessGroupNCCL.cpp:line at severity sev (I, W, E, F)."""
    ts = job.clock.c10(r.host.local_time(t), r.mono_ns(t))
    job.rank_recs[r.rank].append((t, ERR, f"[rank{r.rank}]:[{sev}{ts} {PGN}:{line}] {msg}", flag))


def err(job: Job, r: Rank, t: float, text: str, flag: int = 0) -> None:
    """Text on the worker's stderr, as it is."""
    job.rank_recs[r.rank].append((t, ERR, text, flag))


def excepthook(job: Job, r: Rank, t: float, lines: Sequence[str], root_at: int = -1) -> None:
    """An uncaught exception, each line prefixed with the rank; line root_at is the root."""
    pre = f"[rank{r.rank}]: "
    text = "\n".join(pre + ln if ln else "" for ln in lines)
    err(job, r, t, text, mark(ROOT, root_at) if root_at >= 0 else 0)


def app(job: Job, r: Rank, t: float, level: str, msg: str) -> None:
    """A line of the training script's own logging."""
    err(job, r, t, f"{job.clock.python_logging(r.host.local_time(t))} {level} {msg}")


def pg_prefix(r: Rank) -> str:
    """How ProcessGroupNCCL names the default process group in its lines."""
    return f"[PG ID 0 PG GUID 0(default_pg) Rank {r.rank}] "


def pg_prefix_intra(r: Rank) -> str:
    """... and the node-local one from dist.new_subgroups()."""
    pg = r.host.idx + 1
    return f"[PG ID {pg} PG GUID {pg} Rank {r.local}] "


def pg_init(job: Job, r: Rank, t: float) -> None:
    """ProcessGroupNCCL's options and environment lines for both process groups."""
    v = r.host.nccl
    pt = job.pg_lines
    desync = 1 if job.spec.desync_debug else 0
    c10(
        job,
        r,
        t,
        "I",
        pt["opts"],
        f"{pg_prefix(r)}ProcessGroupNCCL initialization options: size: {job.world_size}, "
        f"global rank: {r.rank}, TIMEOUT(ms): {TIMEOUT_MS}, USE_HIGH_PRIORITY_STREAM: 0, "
        "SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0",
    )
    c10(
        job,
        r,
        t + 0.0002,
        "I",
        pt["envs"],
        f"{pg_prefix(r)}ProcessGroupNCCL environments: NCCL version: {v.ver}, "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, "
        f"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 15000, TORCH_NCCL_DESYNC_DEBUG: {desync}, "
        "TORCH_NCCL_ENABLE_TIMING: 0, TORCH_NCCL_BLOCKING_WAIT: 0, "
        "TORCH_DISTRIBUTED_DEBUG: OFF, TORCH_NCCL_ENABLE_MONITORING: 1, "
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, TORCH_NCCL_TRACE_BUFFER_SIZE: 0, "
        "TORCH_NCCL_COORD_CHECK_MILSEC: 1000, TORCH_NCCL_NAN_CHECK: 0, "
        "TORCH_NCCL_CUDA_EVENT_CACHE: 1, TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN: 1",
    )
    c10(
        job,
        r,
        t + job.rng.uniform(0.03, 0.08),
        "I",
        pt["opts"],
        f"{pg_prefix_intra(r)}ProcessGroupNCCL initialization options: size: {job.per_host}, "
        f"global rank: {r.rank}, TIMEOUT(ms): {TIMEOUT_MS}, USE_HIGH_PRIORITY_STREAM: 0, "
        f"SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: {r.host.idx + 1}",
    )


def barrier_warning(job: Job, r: Rank, t: float) -> None:
    if job.nccl.torch == "2.5":
        msg = (
            f"{pg_prefix(r)} using GPU {r.local} to perform barrier as devices used by this "
            "process are currently unknown. This can potentially cause a hang if this rank "
            "to GPU mapping is incorrect.Specify device_ids in barrier() to force use of a "
            "particular device,or call init_process_group() with a device_id."
        )
    else:
        msg = (
            f"{pg_prefix(r)} using GPU {r.local} as device used by this process is "
            "currently unknown. This can potentially cause a hang if this rank to GPU "
            "mapping is incorrect. You can pecify device_id in init_process_group() to "
            "force use of a particular device."
        )
    c10(job, r, t, "W", job.pg_lines["barrier"], msg)


def destroy_warning(job: Job, r: Rank, t: float) -> None:
    c10(
        job,
        r,
        t,
        "W",
        job.pg_lines["destroy"],
        "Warning: WARNING: destroy_process_group() was not called before program exit, which "
        "can leak resources. For more info, please see "
        "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())",
    )


def init_exception(job: Job, r: Rank, t: float, error: str, last_err: str, nccl_ver: str) -> None:
    """DistBackendError from the comm init under dist.barrier(); the worker exits 1."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/workspace/train.py", line 301, in <module>',
        "    main()",
        '  File "/workspace/train.py", line 187, in main',
        "    dist.barrier()",
        f'  File "{SITE}/torch/distributed/c10d_logger.py", line 81, in wrapper',
        "    return func(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/torch/distributed/distributed_c10d.py", line 4635, in barrier',
        "    work = group.barrier(opts=opts)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^",
        f"torch.distributed.DistBackendError: NCCL error in: {PGSRC}:{job.pg_lines['check']}, "
        f"{error}, NCCL version {nccl_ver}",
        DETAIL[error],
        "Last error:",
        last_err,
    ]
    excepthook(job, r, t, lines)
    destroy_warning(job, r, t + 0.05)
    job.set_exit(r, t + 0.08 + job.rng.uniform(0.0, 0.2), 1)
