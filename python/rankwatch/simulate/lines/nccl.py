"""NCCL's own lines: INFO (no timestamp), WARN (a timestamp in 2.26-2.29), the `-> N`
return-code breadcrumbs after a WARN, and the messages whose wording depends on the version.
Formats follow shared/reference/nccl-messages.md."""

from __future__ import annotations

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.records import OUT, mark
from rankwatch.simulate.lines.versions import RETURN_CHAINS, WARN_SITES, NcclBuild

SYS_ERR = "unhandled system error (run with NCCL_DEBUG=INFO for details)"
REMOTE_ERR = "remote process exited or there was a network error"
USAGE_ERR = "invalid usage (run with NCCL_DEBUG=WARN for details)"
# the second line torch prints for an ncclResult_t
DETAIL = {
    SYS_ERR: "ncclSystemError: System call (e.g. socket, malloc) or external library call "
    "failed or device error. ",
    REMOTE_ERR: "ncclRemoteError: A call failed possibly due to a network error or a remote "
    "process exiting prematurely.",
    USAGE_ERR: "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
}
IB_RETRY_S = 30.0  # an IB peer gives up (retry exceeded) this long after the link stops


def info(job: Job, r: Rank, t: float, msg: str, tid: int = 0, dev: int = -1, flag: int = 0) -> None:
    job.rank_recs[r.rank].append(
        (
            t,
            OUT,
            f"{r.host.name}:{r.pid}:{tid or r.pid} [{r.local if dev < 0 else dev}] NCCL INFO {msg}",
            flag,
        )
    )


def bare(job: Job, r: Rank, t: float, text: str, flag: int = 0) -> None:
    """A line NCCL prints without its usual prefix (the version banner before 2.27)."""
    job.rank_recs[r.rank].append((t, OUT, text, flag))


def warn(
    job: Job,
    r: Rank,
    t: float,
    src: str,
    msg: str,
    tid: int = 0,
    dev: int = -1,
    kind: int = -1,
) -> None:
    """A WARN line (after an empty line, as NCCL prints it); kind >= 0 marks it for the truth."""
    v = r.host.nccl
    ts = job.clock.nccl_warn(r.host.local_time(t)) if 26 <= v.minor <= 29 else ""
    text = (
        f"\n{ts}{r.host.name}:{r.pid}:{tid or r.pid} [{r.local if dev < 0 else dev}] "
        f"{src} NCCL WARN {msg}"
    )
    job.rank_recs[r.rank].append((t, OUT, text, mark(kind, 1) if kind >= 0 else 0))


def chain(job: Job, r: Rank, t: float, key: str, code: int, tid: int = 0, tail: str = "") -> None:
    """The `file:line -> code` breadcrumbs of an error returning up NCCL's stack."""
    for i, loc in enumerate(RETURN_CHAINS[key]):
        info(job, r, t + i * 0.0001, f"{loc} -> {code}{tail if i == 0 else ''}", tid)


def net_closed_msg(peer: Rank, recv: bool, v: NcclBuild) -> tuple[str, str]:
    """(source, message) for a socket whose peer process went away."""
    port = peer.port + 1
    if recv or v.minor >= 24:
        return (
            WARN_SITES.get(v.ver, WARN_SITES["2.27.7"]).get("closed", "misc/socket.cc:64"),
            f"socketProgress: Connection closed by remote peer {peer.host.name}<{port}>",
        )
    return (
        WARN_SITES["2.21.5"]["reset"],
        f"socketProgressOpt: Call to recv from {peer.host.ip}<{port}> failed : "
        "Connection reset by peer",
    )


def connect_retry_msg(v: NcclBuild, peer: Rank, attempt: int) -> str:
    if v.minor <= 23:
        return "Call to connect returned Connection refused, retrying"
    if v.minor <= 26:
        return (
            f"socketStartConnect: connect returned Connection refused, retrying "
            f"({attempt}/34) after sleep for {attempt * 100} msec"
        )
    return (
        f"socketStartConnect: connect to {peer.host.boot_ip}<{peer.port}> returned "
        f"Connection refused, retrying ({attempt}/34) after sleep for {attempt * 100} msec"
    )


def wc_msg(v: NcclBuild, peer: Rank, status: int, hca: str, length: int) -> str:
    """An IB work completion with an error status (12: retry exceeded, 5: flushed)."""
    vendor = 129 if status == 12 else 249
    where = f"peer {peer.host.ip}<{peer.port + 7}>"
    if v.minor <= 19:
        return (
            f"NET/IB : Got completion from {where} with error {status}, opcode 0, "
            f"len {length}, vendor err {vendor} (Send)"
        )
    if v.minor <= 21:
        return (
            f"NET/IB : Got completion from {where} with status={status} opcode=0 "
            f"len={length} vendor err {vendor} (Send)"
        )
    return (
        f"NET/IB: Got completion from {where} with status={status} opcode=0 len={length} "
        f"vendor err {vendor} (Send) hca {hca}"
    )
