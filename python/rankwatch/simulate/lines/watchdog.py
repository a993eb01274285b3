"""ProcessGroupNCCL's watchdog: the collective timeout, an NCCL error it picks up, the
heartbeat monitor, and how it takes the process down (SIGABRT after the dump wait, with the
C++ frames of both exceptions). Timing follows nccl-messages.md section 3.2 item 9."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import DETAIL, REMOTE_ERR
from rankwatch.simulate.lines.pytorch import LIBDIR, PGSRC, TIMEOUT_MS, c10, err, pg_prefix
from rankwatch.simulate.lines.records import ROOT, mark

DUMP_WAIT_S = 60.0  # from the timeout lines to the SIGABRT
HEARTBEAT_S = 480.0
DUMP_MSG = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
    "across ranks, the order of collectives is not same for all ranks or the scheduled "
    "collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock "
    "or other reasons such as network errors or bugs in the communications library (e.g. "
    "NCCL), etc. "
)
HEARTBEAT_MSG = (
    "ProcessGroupNCCL's watchdog got stuck for {s} seconds without making progress in "
    "monitoring enqueued collectives. This typically indicates a NCCL/CUDA API (e.g., "
    "CudaEventDestroy) hang blocking the watchdog, and could be triggered by another thread "
    "holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other deadlock-prone "
    "behaviors.If you suspect the watchdog is not actually stuck and a longer timeout would "
    "help, you can either increase the timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger "
    "value or disable the heartbeat monitor (TORCH_NCCL_ENABLE_MONITORING=0).If either of "
    "aforementioned helps, feel free to file an issue to PyTorch about the short timeout or "
    "false positive abort; otherwise, please attempt to debug the hang. "
)

# the libraries of a frame, in the order of Rank.bases
_LIBS = (
    f"{LIBDIR}/libc10.so",
    f"{LIBDIR}/libtorch_cuda.so",
    f"{LIBDIR}/libc10_cuda.so",
    "/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/lib/x86_64-linux-gnu/libc.so.6",
)
_C10, _TORCH_CUDA, _C10_CUDA, _STDCXX, _LIBC = range(5)
_WATCHDOG_LOOP = ""  # the watchdog loop's symbol, which depends on the torch build

# (symbol, offset, library) of the frames between c10::Error and the watchdog thread's start,
# by where the exception was raised; any other kind is the outer rethrow
_RAISED_IN: dict[str, tuple[tuple[str, int, int], ...]] = {
    "timeout": (
        (
            "c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
            "duration<long, std::ratio<1l, 1000l> > >)",
            0x2AC,
            _TORCH_CUDA,
        ),
        (_WATCHDOG_LOOP, 0x8F8, _TORCH_CUDA),
    ),
    "ncclerr": (
        (
            "c10d::ProcessGroupNCCL::checkForNCCLErrorsInternal(std::shared_ptr<c10d::NCCLComm>&)",
            0x4A8,
            _TORCH_CUDA,
        ),
        ("c10d::ProcessGroupNCCL::WorkNCCL::checkAndSetException()", 0x7E, _TORCH_CUDA),
        (_WATCHDOG_LOOP, 0x238, _TORCH_CUDA),
    ),
    "cuda": (
        (
            "c10::detail::torchCheckFail(char const*, char const*, unsigned int, "
            "std::string const&)",
            0x6B,
            _C10,
        ),
        (
            "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool)",
            0x3C2,
            _C10_CUDA,
        ),
        (
            "c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const",
            0x52,
            _TORCH_CUDA,
        ),
        ("c10d::ProcessGroupNCCL::WorkNCCL::isCompleted()", 0x58, _TORCH_CUDA),
        (_WATCHDOG_LOOP, 0x1F8, _TORCH_CUDA),
    ),
}
_OUTER_RETHROW = (
    ("<unknown function>", 0x11C2671, _TORCH_CUDA),
    ("<unknown function>", 0xE37D8A, _TORCH_CUDA),
)


def frames(job: Job, r: Rank, kind: str) -> list[str]:
    """The `frame #N:` lines of an exception raised in the watchdog thread."""
    loop = (
        "c10d::ProcessGroupNCCL::Watchdog::runLoop()"
        if job.watchdog_func == "run"
        else "c10d::ProcessGroupNCCL::watchdogHandler()"
    )
    spec = [
        ("c10::Error::Error(c10::SourceLocation, std::string)", 0x98, _C10),
        *((sym or loop, off, lib) for sym, off, lib in _RAISED_IN.get(kind, _OUTER_RETHROW)),
    ]
    if kind != "run":
        spec.append(("c10d::ProcessGroupNCCL::ncclCommWatchdog()", 0x14D, _TORCH_CUDA))
    spec += [
        ("<unknown function>", 0xDC253, _STDCXX),
        ("<unknown function>", 0x94AC3, _LIBC),
        ("clone", 0x44, _LIBC),
    ]
    out: list[str] = []
    for i, (sym, off, lib) in enumerate(spec):
        # named symbols sit at a fixed place inside their library; unknown ones are
        # already library-relative
        at = 0 if sym.startswith("<") else (zlib.crc32(sym.encode()) % 0x1800000) & ~0xF
        out.append(f"frame #{i}: {sym} + {off:#x} ({r.bases[lib] + at + off:#x} in {_LIBS[lib]})")
    return out


def abort_lines(
    job: Job,
    r: Rank,
    t: float,
    inner: Sequence[str],
    raise_from: str,
    raise_kind: str,
) -> None:
    """`... watchdog thread terminated with exception` + libstdc++ terminate (SIGABRT)."""
    pt = job.pg_lines
    head = f"{pg_prefix(r)}Process group watchdog thread terminated with exception: "
    body = [
        *inner[1:],
        f"Exception raised from {raise_from} (most recent call first):",
        *frames(job, r, raise_kind),
    ]
    c10(job, r, t, "E", pt["term"], head + inner[0] + "\n" + "\n".join(body))
    outer = [
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        f"  what():  {head}{inner[0]}",
        *body,
        f"Exception raised from {job.watchdog_func} at {PGSRC}:{pt['wd_raise']} "
        "(most recent call first):",
        *frames(job, r, "run"),
    ]
    err(job, r, t + 0.0005, "\n".join(outer))
    job.set_exit(r, t + 0.002 + job.rng.uniform(0.0, 0.05), -6)


def watchdog_timeout(job: Job, r: Rank, t_enq: float, desync: list[str] | None = None) -> None:
    """The stuck collective (enqueued at t_enq) times out; rank 0 may add the desync report."""
    pt = job.pg_lines
    s = job.schedule.stuck_seq
    ran = TIMEOUT_MS + job.rng.randint(3, 99)
    t = t_enq + ran / 1000.0
    work = (
        f"WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn={job.schedule.numel}, "
        f"NumelOut={job.schedule.numel}, Timeout(ms)={TIMEOUT_MS})"
    )
    caught = (
        f"[Rank {r.rank}] Watchdog caught collective operation timeout: {work} ran for "
        f"{ran} milliseconds before timing out."
    )
    c10(job, r, t, "E", pt["timeout"], caught)
    if desync is not None:
        kind_line = next(i for i, ln in enumerate(desync) if f"[{job.culprit_rank}]" in ln)
        c10(
            job,
            r,
            t + 0.0004,
            "E",
            pt["desync"],
            pg_prefix(r) + "\n" + "\n".join(desync),
            flag=mark(ROOT, kind_line + 1),
        )
    _failure_detected(job, r, t + 0.001)
    _dump_signal(job, r, t)
    _take_process_down(
        job, r, t, [caught], f"checkTimeout at {PGSRC}:{pt['timeout_raise']}", "timeout"
    )


def _dump_signal(job: Job, r: Rank, t: float) -> None:
    """The flight-recorder dump lines after a timeout at t."""
    pt = job.pg_lines
    s = job.schedule.stuck_seq
    c10(
        job,
        r,
        t + 0.0012,
        "E",
        pt["stack"],
        "Stack trace of the failed collective not found, potentially because FlightRecorder "
        "is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero "
        "value.",
    )
    c10(
        job,
        r,
        t + 0.0015,
        "E",
        pt["firstpg"],
        f"{pg_prefix(r)}First PG on this rank to signal dumping.",
    )
    c10(
        job,
        r,
        t + 0.002,
        "E",
        pt["dumpsig"],
        f"{pg_prefix(r)}Received a dump signal due to a collective timeout from this local "
        f"rank and we will try our best to dump the debug info. Last enqueued NCCL work: {s}, "
        f"last completed NCCL work: {s - 1}.{DUMP_MSG}",
    )


def watchdog_ncclerr(job: Job, r: Rank, t: float, last_err: str) -> None:
    """The watchdog finds the communicator in error (a remote process or the network)."""
    _failure_detected(job, r, t)
    inner = [
        f"NCCL error: {REMOTE_ERR}, NCCL version {r.host.nccl.ver}",
        DETAIL[REMOTE_ERR],
        "Last error:",
        last_err,
    ]
    raise_from = f"checkForNCCLErrorsInternal at {PGSRC}:{job.pg_lines['err_raise']}"
    _take_process_down(job, r, t, inner, raise_from, "ncclerr")


def _failure_detected(job: Job, r: Rank, t: float) -> None:
    s = job.schedule.stuck_seq
    c10(
        job,
        r,
        t,
        "E",
        job.pg_lines["faildet"],
        f"{pg_prefix(r)} failure detected by watchdog at work sequence id: {s} PG status: "
        f"last enqueued work: {s}, last completed work: {s - 1}",
    )


def _take_process_down(
    job: Job, r: Rank, t: float, inner: Sequence[str], raise_from: str, raise_kind: str
) -> None:
    """After the dump wait from the failure seen at t: the warnings, then the abort."""
    pt = job.pg_lines
    ta = t + DUMP_WAIT_S + job.rng.uniform(0.0, 0.08)
    c10(
        job,
        r,
        ta,
        "E",
        pt["some"],
        f"[Rank {r.rank}] Some NCCL operations have failed or timed out. Due to the "
        "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
    )
    c10(
        job,
        r,
        ta + 0.0002,
        "E",
        pt["take"],
        f"[Rank {r.rank}] To avoid data inconsistency, we are taking the entire process down.",
    )
    abort_lines(job, r, ta + 0.0005, inner, raise_from, raise_kind)


def heartbeat_abort(job: Job, r: Rank, t: float) -> None:
    """The heartbeat monitor finds the watchdog stuck and kills the process (SIGABRT)."""
    c10(
        job,
        r,
        t,
        "E",
        job.pg_lines["heart"],
        pg_prefix(r) + HEARTBEAT_MSG.format(s=int(HEARTBEAT_S)),
    )
    c10(
        job,
        r,
        t + 0.5,
        "F",
        job.pg_lines["fatal"],
        f"{pg_prefix(r)}Terminating the process after attempting to dump debug info, "
        "due to ProcessGroupNCCL watchdog hang.",
    )
    job.set_exit(r, t + 0.52, -6)
