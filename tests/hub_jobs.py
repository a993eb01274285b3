"""Builds the failure-hub case (`shared/reference/failure-hub-entry.txt`) and its siblings as
log folders: a 32-rank job on 8 hosts (4 GPUs each) whose NCCL init fails on socket connects,
with host clocks skewed, in per-rank or per-node (torchrun `[defaultN]:`) layout.

Each variant says what went wrong, which lines the peers print, and what a correct diagnosis
names (the host, rank and line of the root cause, and the first occurrence of the failure).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

HOSTS = 8
GPUS = 4
WORLD = HOSTS * GPUS
ODD = 5  # the host at fault in every variant
EPOCH = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
# Host clock offsets in seconds (what each host's clock reads minus true time). The host of
# the true first occurrence (node-001) runs ahead, so its lines look later than they were.
SKEW = [0.0, 3.0, -0.4, 0.6, -1.2, 0.3, -0.7, 0.9]
NCCL_VERSION = "2.21.5"


@dataclass
class Variant:
    name: str
    # message the connecting peers print, with {addr} for the peer address
    peer_warn: str | None
    # iface/address the odd host uses (None: the same eth0 as everyone)
    odd_iface: tuple[str, str] | None = None
    # lines the odd host's local rank 0 prints before the failure (after its Using lines)
    odd_extra: list[str] = field(default_factory=list)
    # the peers are the odd host's own ranks (a local fault) instead of other hosts
    local_fault: bool = False
    expected_subsystem: str = "socket"


def host_ip(h: int) -> str:
    return f"10.10.{h}.{10 + h}"


VARIANTS: dict[str, Variant] = {
    "literal": Variant(
        "literal",
        "Connection failed : Network is unreachable",
        odd_iface=("docker0", "172.17.0.1"),
    ),
    "net_connect": Variant(
        "net_connect",
        "Net : Connect to {addr} failed : Network is unreachable",
        odd_iface=("docker0", "172.17.0.1"),
    ),
    "socket_start_connect": Variant(
        "socket_start_connect",
        "socketStartConnect: Connect to {addr} failed : Network is unreachable",
        odd_iface=("docker0", "172.17.0.1"),
    ),
    "poll_connect_227": Variant(
        "poll_connect_227",
        "socketPollConnect: connect to {addr} failed : Network is unreachable",
        odd_iface=("docker0", "172.17.0.1"),
    ),
    "refused": Variant(
        "refused", "socketStartConnect: Connect to {addr} failed : Connection refused"
    ),
    "no_route": Variant(
        "no_route", "socketStartConnect: Connect to {addr} failed : No route to host"
    ),
    "timed_out": Variant(
        "timed_out", "socketPollConnect: connect to {addr} failed : Connection timed out"
    ),
    "cannot_assign": Variant(
        "cannot_assign",
        "socketStartConnect: Connect to {addr} failed : Cannot assign requested address",
        local_fault=True,
    ),
    "link_local": Variant(
        "link_local",
        "socketStartConnect: Connect to {addr} failed : Network is unreachable",
        odd_iface=("ip6tnl0", "fe80::e866:19ff:fe1e:a688%ip6tnl0"),
    ),
    "missing_iface": Variant(
        "missing_iface",
        None,
        odd_extra=["NCCL_SOCKET_IFNAME set by environment to ib0"],
        expected_subsystem="bootstrap",
    ),
    "ib_transport": Variant(
        "ib_transport",
        "NET/IB : Got completion from peer {addr} with status=12 opcode=0 len=0 vendor err 129 "
        "(Send) localGid ::ffff:{ip} remoteGids::ffff:{peer_ip} hca mlx5_0",
        expected_subsystem="ib",
    ),
}


@dataclass
class Truth:
    variant: str
    host: str
    rank: int | None
    line_contains: str
    first_warning_host: str | None
    first_warning_rank: int | None


@dataclass
class _Proc:
    rank: int
    host: int
    local: int
    pid: int
    lines: list[tuple[float, str]] = field(default_factory=list)  # (true time, text)


class Job:
    def __init__(self, variant: Variant, seed: int = 7) -> None:
        self.v = variant
        self.rng = random.Random(seed)
        self.procs = [
            _Proc(rank=h * GPUS + g, host=h, local=g, pid=20_000 + 1_000 * h + 17 * g)
            for h in range(HOSTS)
            for g in range(GPUS)
        ]

    # -- line shapes ------------------------------------------------------------------------
    @staticmethod
    def hostname(h: int) -> str:
        return f"node-{h:03d}"

    def _clock(self, p: _Proc, t: float) -> datetime:
        return EPOCH + timedelta(seconds=t + SKEW[p.host])

    def nccl(self, p: _Proc, t: float, text: str, warn_at: str | None = None) -> None:
        head = f"{self.hostname(p.host)}:{p.pid}:{p.pid + 70} [{p.local}]"
        if warn_at is None:
            p.lines.append((t, f"{head} NCCL INFO {text}"))
        else:  # NCCL 2.26+ prints a timestamp before WARN lines
            stamp = self._clock(p, t).strftime("[%Y-%m-%d %H:%M:%S]")
            p.lines.append((t, f"{stamp} {head} {warn_at} NCCL WARN {text}"))

    def c10(self, p: _Proc, t: float, level: str, src: str, text: str) -> None:
        c = self._clock(p, t)
        stamp = f"{c:%m%d %H:%M:%S}.{c.microsecond * 1000:09d}"
        p.lines.append((t, f"[rank{p.rank}]:[{level}{stamp} {src}] {text}"))

    def py(self, p: _Proc, t: float, text: str) -> None:
        p.lines.append((t, f"[rank{p.rank}]: {text}"))

    # -- the run ------------------------------------------------------------------------------
    def iface_of(self, h: int) -> tuple[str, str]:
        if h == ODD and self.v.odd_iface is not None:
            return self.v.odd_iface
        return ("eth0", host_ip(h))

    def start(self, p: _Proc, t: float) -> float:
        pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {p.rank}] "
        self.c10(
            p,
            t,
            "I",
            "ProcessGroupNCCL.cpp:915",
            f"{pg}ProcessGroupNCCL initialization options: size: {WORLD}, global rank: {p.rank}, "
            "TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, "
            "PG Name: 0",
        )
        iface, ip = self.iface_of(p.host)
        t += 0.05
        if p.local == 0:
            p.lines.append((t, f"NCCL version {NCCL_VERSION}+cuda12.4"))
        for extra in self.v.odd_extra if p.host == ODD else []:
            self.nccl(p, t, extra)
        if p.host == ODD and self.v.name == "missing_iface":
            return t
        self.nccl(p, t + 0.001, f"Bootstrap : Using {iface}:{ip}<0>")
        self.nccl(
            p,
            t + 0.002,
            "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
        )
        self.nccl(p, t + 0.003, f"NET/Socket : Using [0]{iface}:{ip}<0>")
        self.nccl(p, t + 0.004, "Using network Socket")
        bus = f"{0x18 + 0x20 * p.local:x}000"
        self.nccl(
            p,
            t + 0.005,
            f"comm 0x7f{p.pid:06x}0 rank {p.rank} nranks {WORLD} cudaDev {p.local} "
            f"nvmlDev {p.local} busId {bus} commId 0x5f8c1b2e3a4d6f70 - Init START",
        )
        t += 0.01
        for ch in range(40):
            nxt = (p.rank + 1) % WORLD
            self.nccl(
                p, t, f"Channel {ch:02d}/24 :    0   1   2   3   4   5   6   7   8   9  10  11"
            )
            self.nccl(p, t, f"Trees [{ch}] {nxt}/-1/-1->{p.rank}->{(p.rank - 1) % WORLD}")
            how = "via P2P/CUMEM/read" if nxt // GPUS == p.host else "[send] via NET/Socket/0"
            self.nccl(
                p, t, f"Channel {ch:02d}/0 : {p.rank}[{p.local}] -> {nxt}[{nxt % GPUS}] {how}"
            )
            t += 0.002
        self.nccl(p, t, "P2P Chunksize set to 524288")
        return t

    def peers_of_odd(self) -> list[_Proc]:
        """The processes whose connections to the odd host fail first: the ring neighbours on
        node-004 and a tree peer on node-001 (whose clock runs ahead)."""
        if self.v.local_fault:
            return [p for p in self.procs if p.host == ODD]
        ring = [p for p in self.procs if p.host == ODD - 1][-2:]
        tree = [p for p in self.procs if p.host == 1][:1]
        return tree + ring

    def failure(self, p: _Proc, t: float) -> None:
        v = self.v
        assert v.peer_warn is not None
        target = ODD if not v.local_fault else (ODD + 1) % HOSTS
        _, tip = self.iface_of(target)
        addr = f"[{tip}]" if ":" in tip else tip
        addr = f"{addr}<{43000 + p.rank}>"
        text = v.peer_warn.format(addr=addr, ip=host_ip(p.host), peer_ip=tip)
        where = "transport/net_ib.cc:1696" if v.expected_subsystem == "ib" else "misc/socket.cc:484"
        self.nccl(p, t, text, warn_at=where)
        for i, frame in enumerate(["misc/socket.cc:567", "bootstrap.cc:288", "init.cc:1582"]):
            self.nccl(p, t + 0.0005 * (i + 1), f"{frame} -> 2")
        self.remote_error(p, t + 0.2, "ncclSystemError", text)

    def remote_error(self, p: _Proc, t: float, err: str, last: str) -> None:
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 187, in main',
            "    dist.barrier()",
            "torch.distributed.DistBackendError: NCCL error in: "
            "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027, "
            f"{err}, NCCL version {NCCL_VERSION}",
            "ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely."
            if err == "ncclRemoteError"
            else "ncclSystemError: System call (e.g. socket, malloc) or external library call "
            "failed or device error. ",
            "Last error:",
            last,
        ]
        for i, line in enumerate(lines):
            self.py(p, t + 0.0001 * i, line)

    def build(self) -> Truth:
        # Everyone enters init together: the PG init lines are a sync point for the clocks.
        ends = {p.rank: self.start(p, 1.0 + self.rng.uniform(0, 0.003)) for p in self.procs}
        t0 = max(ends.values()) + 2.0
        truth = self._missing_iface(t0) if self.v.peer_warn is None else self._peer_failures(t0)
        failed = {p.rank for p in self.procs if any("Traceback" in x for _, x in p.lines)}
        for p in self.procs:
            if p.rank not in failed:
                self.remote_error(
                    p,
                    t0 + 6 + 0.01 * p.rank,
                    "ncclRemoteError",
                    "socketProgress: Connection closed by remote peer",
                )
        return truth

    def _missing_iface(self, t0: float) -> Truth:
        odd = [p for p in self.procs if p.host == ODD]
        for p in odd:
            self.nccl(
                p,
                t0 - 1.0 + 0.01 * p.local,
                "Bootstrap : no socket interface found",
                warn_at="bootstrap.cc:48",
            )
        return Truth(
            self.v.name, self.hostname(ODD), odd[0].rank, "no socket interface found", None, None
        )

    def _peer_failures(self, t0: float) -> Truth:
        peers = self.peers_of_odd()
        for i, p in enumerate(peers):  # true order: the tree peer on node-001 first
            self.failure(p, t0 + 1.0 * i)
        first = peers[0]
        if self.v.local_fault:
            return Truth(
                self.v.name, self.hostname(first.host), first.rank, "Cannot assign", None, None
            )
        if self.v.odd_iface is not None:
            root = next(p for p in self.procs if p.host == ODD)
            line = f"Using {self.v.odd_iface[0]}:"
            return Truth(
                self.v.name,
                self.hostname(ODD),
                root.rank,
                line,
                self.hostname(first.host),
                first.rank,
            )
        return Truth(
            self.v.name, self.hostname(ODD), None, "", self.hostname(first.host), first.rank
        )

    # -- layouts ------------------------------------------------------------------------------
    def write(self, folder: Path, layout: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        if layout == "per-rank":
            for p in self.procs:
                text = "\n".join(line for _, line in sorted(p.lines, key=lambda x: x[0]))
                (folder / f"rank-{p.rank}.log").write_text(text + "\n")
            return
        for h in range(HOSTS):
            merged: list[tuple[float, int, str]] = []
            for p in self.procs:
                if p.host == h:
                    merged.extend((t, p.local, f"[default{p.local}]:{line}") for t, line in p.lines)
            merged.sort(key=lambda x: (x[0], x[1]))
            (folder / f"{self.hostname(h)}.log").write_text("\n".join(m[2] for m in merged) + "\n")


def make(folder: Path, variant: str, layout: str = "per-rank", seed: int = 7) -> Truth:
    job = Job(VARIANTS[variant], seed)
    truth = job.build()
    job.write(folder, layout)
    return truth
