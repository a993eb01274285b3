"""NCCL's lines while a process initialises: the process-level ones (ncclInit: environment,
bootstrap interface, network plugin) and one communicator's init (Init START, rings, trees,
channels, Init COMPLETE), stopping early where a scenario makes the init fail."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import bare, connect_retry_msg, info
from rankwatch.simulate.lines.pytorch import c10, pg_prefix, pg_prefix_intra
from rankwatch.simulate.lines.records import ROOT, mark

CPU_MASKS = ("00000000,0000ffff,ffffffff", "ffffffff,ffff0000,00000000")
_STEP = 0.0005


def process_init(job: Job, r: Rank, t: float) -> float:
    """Process-level NCCL lines (ncclInit); returns the time after them."""
    v = r.host.nccl
    h = r.host
    ifname = "^lo" if job.spec.culprit_on_docker0 else "eth0"
    msgs = [f"NCCL_SOCKET_IFNAME set by environment to {ifname}"]
    if job.transport == "IB":
        msgs.append("NCCL_IB_HCA set by environment to mlx5")
    if v.minor >= 24:
        msgs.append(f"Bootstrap: Using {h.iface}:{h.boot_ip}<0>")
    else:
        msgs.append(f"Bootstrap : Using {h.iface}:{h.boot_ip}<0>")
    if v.minor <= 18:
        msgs.append(
            "NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot "
            "open shared object file: No such file or directory"
        )
        msgs.append("NET/Plugin : No plugin found, using internal implementation")
    elif v.minor <= 21:
        msgs.append(
            "NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open shared object "
            "file: No such file or directory when loading libnccl-net.so"
        )
        msgs.append("NET/Plugin: Using internal network plugin.")
    elif v.minor <= 25:
        msgs.append("NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.")
    else:
        msgs.append("NET/Plugin: Could not find: libnccl-net.so. ")
    msgs.append(f"cudaDriverVersion {h.driver}")
    for i, m in enumerate(msgs):
        # The culprit's first line that shows the wrong interface is the root cause.
        root = (
            job.spec.culprit_on_docker0 and r.rank == job.culprit_rank and m.startswith("Bootstrap")
        )
        info(job, r, t + i * 0.0003, m, flag=mark(ROOT, 0) if root else 0)
    return t + len(msgs) * 0.0003 + 0.001


def _net_lines(job: Job, r: Rank, t: float) -> float:
    v = r.host.nccl
    h = r.host
    msgs: list[str] = []
    if job.transport == "IB":
        devs = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(max(job.per_host, 1)))
        ro = "[RO]" if v.minor >= 27 else ""
        msgs.append(f"NET/IB : Using {devs} {ro}; OOB {h.iface}:{h.boot_ip}<0>")
    else:
        msgs.append("Failed to open libibverbs.so[.1]")
        msgs.append("NET/IB : No device found.")
        msgs.append(f"NET/Socket : Using [0]{h.iface}:{h.boot_ip}<0>")
    if v.minor >= 27:
        name = "IB" if job.transport == "IB" else "Socket"
        msgs.append(f"Initialized NET plugin {name}")
    for i, m in enumerate(msgs):
        info(job, r, t + i * 0.0004, m)
    return t + len(msgs) * 0.0004 + 0.001


@dataclass(frozen=True, slots=True)
class _Comm:
    """One communicator as one rank sees it."""

    intra: bool  # the node-local one (else the default, global one)
    rank: int
    nranks: int
    comm: str
    ident: str  # `comm ... commId ...` as in Init START / COMPLETE


def _comm(job: Job, r: Rank, intra: bool) -> _Comm:
    if intra:
        rank, nranks = r.local, job.per_host
        comm, cid = r.comm_intra, job.intra_comm_ids[r.host.idx]
    else:
        rank, nranks, comm, cid = r.rank, job.world_size, r.comm, job.comm_id
    ident = (
        f"comm {comm} rank {rank} nranks {nranks} cudaDev {r.local} nvmlDev {r.local} "
        f"busId {r.bus} commId {cid}"
    )
    return _Comm(intra, rank, nranks, comm, ident)


def comm_init(job: Job, r: Rank, t: float, intra: bool, stage: str, first: bool) -> float:
    """NCCL lines of one communicator init; returns the time after them.

    stage: how far the init gets (bootstrap | transport | complete); first: the process's
    first communicator, which prints the network lines and starts the proxy threads.
    """
    c = _comm(job, r, intra)
    tt = _init_start(job, r, t, c, first)
    if stage == "bootstrap":
        return tt
    boot_s = job.rng.uniform(0.15, 0.9)
    tt = _topology(job, r, tt, c, boot_s, first)
    if stage == "transport":
        return tt
    tt = _connect(job, r, tt, c)
    return _init_complete(job, r, t, tt, c, boot_s)


def _init_start(job: Job, r: Rank, t: float, c: _Comm, first: bool) -> float:
    """Banner, network lines, Init START and connect retries."""
    v = r.host.nccl
    tt = t
    if first and (r.local == 0 if c.intra else r.rank == 0):
        if v.minor >= 27:
            info(job, r, tt, v.banner)
        else:
            odd = job.spec.culprit_nccl is not None and r.rank == job.culprit_rank
            bare(job, r, tt, v.banner, mark(ROOT, 0) if odd else 0)
        tt += _STEP
    if first:
        tt = _net_lines(job, r, tt)
    info(job, r, tt, f"Using network {job.transport}")
    tt += _STEP
    info(job, r, tt, f"{v.init_api}{c.ident} - Init START")
    tt += _STEP
    # drawn for every rank's default comm, also at p = 0: the draws that follow stay the same
    if not c.intra and job.rng.random() < job.spec.connect_retry_p:
        peer = job.ranks[(r.rank + 1) % job.world_size]
        for a in range(1, job.rng.randint(2, 4)):
            tt += a * 0.1
            info(job, r, tt, connect_retry_msg(v, peer, a))
    return tt


def _topology(job: Job, r: Rank, tt: float, c: _Comm, boot_s: float, first: bool) -> float:
    """Bootstrap done: affinity, rings, trees, and the proxy service threads."""
    v = r.host.nccl
    rng = job.rng
    g = job.per_host
    if v.minor >= 23:
        info(
            job,
            r,
            tt + boot_s,
            f"Bootstrap timings total {boot_s:.6f} (create {rng.uniform(2e-5, 6e-5):.6f}, "
            f"send {rng.uniform(1e-4, 4e-4):.6f}, recv {boot_s * 0.95:.6f}, "
            f"ring {rng.uniform(1e-3, 9e-3):.6f}, delay 0.000001)",
        )
    tt += boot_s
    info(job, r, tt, f"Setting affinity for GPU {r.local} to {CPU_MASKS[r.local * 2 // g]}")
    tt += _STEP
    if v.minor >= 20:
        nn = 1 if c.intra else job.nodes
        info(
            job,
            r,
            tt,
            f"comm {c.comm} rank {c.rank} nRanks {c.nranks} nNodes {nn} localRanks {g} "
            f"localRank {r.local} MNNVL 0",
        )
        tt += _STEP
    members = list(range(g)) if c.intra else list(range(job.world_size))
    info(job, r, tt, _ring_cached(job, c.intra, 0, members))
    info(job, r, tt + 0.0001, _ring_cached(job, c.intra, 1, members))
    tree = _tree(job, r, c.intra)
    info(job, r, tt + 0.0002, f"Trees [0] {tree} [1] {tree}")
    info(job, r, tt + 0.0003, "P2P Chunksize set to 131072")
    tt += 0.001
    if c.intra and r.host.idx == job.p2p_off_host and r.local in (1, 2):
        info(
            job,
            r,
            tt,
            "P2P is disabled between connected GPUs 1 and 2. You can repress this message "
            "with NCCL_IGNORE_DISABLED_P2P=1.",
        )
        tt += _STEP
    if first:
        core = 12 * (r.local * 2 // g) + r.local
        info(job, r, tt, f"[Proxy Service] Device {r.local} CPU core {core}", r.tid_svc)
        if v.minor >= 19:
            info(
                job,
                r,
                tt + 0.0001,
                f"[Proxy Service UDS] Device {r.local} CPU core {core + 1}",
                r.tid_uds,
            )
        tt += 0.001
    return tt


def _ring_line(ch: int, nch: int, members: Sequence[int]) -> str:
    w = len(str(len(members) - 1))
    parts = [f"Channel {ch:02d}/{nch:02d} :"]
    size = len(parts[0])
    for m in members:
        s = f" {m:>{w}}"
        if size + len(s) > 1000:
            parts.append(" ...")
            break
        parts.append(s)
        size += len(s)
    return "".join(parts)


def _ring_cached(job: Job, intra: bool, ch: int, members: Sequence[int]) -> str:
    key = (intra, ch, len(members))
    s = job.ring_memo.get(key)
    if s is None:
        s = _ring_line(ch, 2, members)
        job.ring_memo[key] = s
    return s


def _tree(job: Job, r: Rank, intra: bool) -> str:
    g = job.per_host
    if intra:
        me = r.local
        up = me - 1 if me > 0 else -1
        d0 = me + 1 if me < g - 1 else -1
        return f"{d0}/-1/-1->{me}->{up}"
    me = r.rank
    h = r.host.idx
    if r.local == 0:
        up = ((h - 1) // 2) * g if h > 0 else -1
        d0 = me + 1 if g > 1 else -1
        c1 = (2 * h + 1) * g if 2 * h + 1 < job.nodes else -1
        c2 = (2 * h + 2) * g if 2 * h + 2 < job.nodes else -1
        return f"{d0}/{c1}/{c2}->{me}->{up}"
    d0 = me + 1 if r.local < g - 1 else -1
    return f"{d0}/-1/-1->{me}->{me - 1}"


def _connect(job: Job, r: Rank, tt: float, c: _Comm) -> float:
    """Transport setup: GPU Direct RDMA, the channels' connections, `Connected all ...`."""
    v = r.host.nccl
    if not c.intra and job.transport == "IB":
        if v.minor <= 21:
            gdr = (
                f"GPU Direct RDMA Enabled for GPU {r.bus} / HCA {r.local} (distance 4 <= 5), read 1"
            )
        else:
            gdr = (
                f"GPU Direct RDMA Enabled for GPU {r.local} / HCA {r.local} "
                "(distance 4 <= 5), read 1 mode Default"
            )
        info(job, r, tt, gdr)
        tt += _STEP
    p2p = "P2P/CUMEM/read" if v.minor >= 19 else "P2P/IPC/read"
    if c.intra:
        _intra_channels(job, r, tt, p2p)
    else:
        _global_channels(job, r, tt, p2p)
    tt += 0.002
    if v.minor >= 24:
        info(job, r, tt, "Connected all rings, use ring PXN 0 GDR 1")
    else:
        info(job, r, tt, "Connected all rings")
    info(job, r, tt + 0.0001, "Connected all trees")
    info(job, r, tt + 0.0002, "threadThresholds 8/8/64 | 512/8/64 | 512 | 512")
    if v.minor >= 20:
        channels = (
            "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, "
            "2 p2p channels per peer"
        )
    else:
        channels = "2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"
    info(job, r, tt + 0.0003, channels)
    if v.minor >= 22:
        info(job, r, tt + 0.0004, "CC Off, workFifoBytes 1048576")
    return tt + 0.001


def _intra_channels(job: Job, r: Rank, tt: float, p2p: str) -> None:
    nxt = (r.local + 1) % job.per_host
    for c in range(2):
        if job.per_host > 1:
            info(job, r, tt + c * 0.0002, _p2p_channel(job, c, r, r.local, nxt, nxt, p2p))


def _global_channels(job: Job, r: Rank, tt: float, p2p: str) -> None:
    prev = job.ranks[(r.rank - 1) % job.world_size]
    nxt = job.ranks[(r.rank + 1) % job.world_size]
    netname = f"NET/IB/{r.local}/GDRDMA" if job.transport == "IB" else "NET/Socket/0"
    uses_net = False
    for c in range(2):
        ts = tt + c * 0.0003
        if prev.host is not r.host:
            uses_net = True
            info(
                job,
                r,
                ts,
                f"Channel {c:02d}/0 : {prev.rank}[{prev.local}] -> {r.rank}[{r.local}] "
                f"[receive] via {netname}",
            )
        if nxt.host is not r.host:
            uses_net = True
            info(
                job,
                r,
                ts + 0.0001,
                f"Channel {c:02d}/0 : {r.rank}[{r.local}] -> {nxt.rank}[{nxt.local}] "
                f"[send] via {netname}",
            )
        elif nxt.rank != r.rank:
            info(job, r, ts + 0.0001, _p2p_channel(job, c, r, r.rank, nxt.rank, nxt.local, p2p))
    if uses_net:
        core = 12 * (r.local * 2 // job.per_host) + r.local + 2
        info(job, r, tt + 0.001, f"[Proxy Progress] Device {r.local} CPU core {core}", r.tid_prog)


def _p2p_channel(job: Job, c: int, r: Rank, me: int, peer: int, peer_local: int, p2p: str) -> str:
    if r.host.idx == job.p2p_off_host and (r.local, peer_local) == (1, 2):
        return f"Channel {c:02d} : {me}[{r.local}] -> {peer}[{peer_local}] via SHM/direct/direct"
    return f"Channel {c:02d}/0 : {me}[{r.local}] -> {peer}[{peer_local}] via {p2p}"


def _init_complete(job: Job, r: Rank, t: float, tt: float, c: _Comm, boot_s: float) -> float:
    """Init timings, Init COMPLETE, and torch's `ProcessGroupNCCL created` line."""
    v = r.host.nccl
    rng = job.rng
    if v.minor >= 22:
        total = tt - t
        info(
            job,
            r,
            tt,
            f"Init timings - {v.init_api.strip()}: rank {c.rank} nranks {c.nranks} total "
            f"{total:.2f} (kernels {rng.uniform(0.1, 0.2):.2f}, alloc 0.01, bootstrap "
            f"{boot_s:.2f}, allgathers {rng.uniform(0.01, 0.05):.2f}, topo "
            f"{rng.uniform(0.1, 0.3):.2f}, graphs 0.01, connections "
            f"{rng.uniform(0.05, 0.4):.2f}, rest 0.02)",
        )
    info(job, r, tt + 0.0001, f"{v.init_api}{c.ident} - Init COMPLETE")
    tt += 0.0005
    pg = pg_prefix_intra(r) if c.intra else pg_prefix(r)
    c10(
        job,
        r,
        tt,
        "I",
        job.pg_lines["created"],
        f"{pg}ProcessGroupNCCL created ncclComm_ {c.comm} on CUDA device: {r.local}",
    )
    return tt + 0.001
