"""The fleet of one generated job: hosts, their ranks, the culprit, and the job's schedule.

global rank = host index * ranks per host + local rank, cudaDev = local rank; one torchrun
agent per host. Everything here is drawn from the job's random stream, in a fixed order, so the
same (scenario, seed, size) gives the same fleet in every layout."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rankwatch.simulate.lines.versions import NCCL_BUILDS, NcclBuild

if TYPE_CHECKING:
    from rankwatch.simulate.scenarios.spec import Scenario

BUSES = ("18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000")
_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789_"


@dataclass(slots=True)
class Host:
    idx: int
    name: str
    ip: str
    offset: float  # its clock runs at true time + offset
    mono0: float  # its monotonic clock at true time 0 (the sub-second part of c10 stamps)
    agent_pid: int
    nccl: NcclBuild
    driver: int
    iface: str  # the interface NCCL bootstraps on
    boot_ip: str
    suffix: str  # torchelastic's random log-folder suffix
    ranks: list[int]

    def local_time(self, t: float) -> float:
        """True time t on this host's clock."""
        return t + self.offset


@dataclass(slots=True)
class Rank:
    rank: int
    local: int
    host: Host
    pid: int
    tid_svc: int  # NCCL proxy service thread
    tid_uds: int  # its UDS thread
    tid_prog: int  # proxy progress thread
    tid_async: int  # IB async event thread
    bus: str
    comm: str  # the default communicator's address
    comm_intra: str  # the node-local communicator's
    port: int
    bases: tuple[int, int, int, int, int]  # load addresses: c10, torch_cuda, c10_cuda, stdc++, libc

    def mono_ns(self, t: float) -> int:
        """The nanoseconds a c10 line printed at true time t shows."""
        return int(((self.host.mono0 + t) % 1.0) * 1e9)


@dataclass(frozen=True, slots=True)
class Fleet:
    hosts: list[Host]
    ranks: list[Rank]
    comm_id: str  # the default communicator's commId, one for the whole job
    intra_comm_ids: list[str]  # one per host
    master_port: int


def choose_culprit(spec: Scenario, rng: random.Random, nodes: int, g: int) -> tuple[int, int]:
    """(host index, local rank) of the rank the failure is injected into."""
    if nodes >= 4:
        host = rng.randint(2, nodes - 2)
    elif nodes >= 2:
        host = rng.randint(1, nodes - 1)
    else:
        host = 0
    if spec.culprit_bus is not None and spec.culprit_bus in BUSES[:g]:
        local = BUSES.index(spec.culprit_bus)
    elif spec.host_wide:
        local = 0  # the whole host is odd; its lowest rank carries the evidence
    else:
        local = rng.randrange(g)
    if host == 0 and local == 0:
        local = 1
    return host, local


def build_fleet(
    spec: Scenario,
    rng: random.Random,
    nodes: int,
    g: int,
    skew: float,
    seed: int,
    culprit_host: int,
) -> Fleet:
    width = max(3, len(str(nodes)))
    hosts: list[Host] = []
    ranks: list[Rank] = []
    for h in range(nodes):
        host = _host(spec, rng, h, width, skew, seed, culprit_host)
        hosts.append(host)
        ranks.extend(_ranks_of(rng, host, g))
    comm_id = f"0x{rng.getrandbits(64):016x}"
    intra_comm_ids = [f"0x{rng.getrandbits(64):016x}" for _ in range(nodes)]
    return Fleet(hosts, ranks, comm_id, intra_comm_ids, rng.randint(29400, 29600))


def _host(
    spec: Scenario,
    rng: random.Random,
    h: int,
    width: int,
    skew: float,
    seed: int,
    culprit_host: int,
) -> Host:
    off = round(rng.uniform(-skew, skew), 3)
    culprit = h == culprit_host
    if culprit and spec.injects_failure:
        # even seeds: the culprit's clock runs behind, so it looks earliest
        off = (
            -round(rng.uniform(0.6, 1.0) * skew, 3)
            if seed % 2 == 0
            else round(rng.uniform(-skew, skew), 3)
        )
    nccl = NCCL_BUILDS[spec.culprit_nccl or spec.nccl] if culprit else NCCL_BUILDS[spec.nccl]
    driver = 12040 if nccl.minor <= 21 else 12080
    if nccl.minor >= 27:
        driver = 12090
    if spec.noisy_fleet and h % 3 == 2:
        driver = 12080
    ip = f"10.20.{h // 250}.{h % 250 + 4}"
    docker = spec.culprit_on_docker0 and culprit
    return Host(
        idx=h,
        name=f"node-{h + 1:0{width}d}",
        ip=ip,
        offset=off,
        mono0=rng.uniform(2.0e5, 9.0e6),
        agent_pid=rng.randint(20000, 60000),
        nccl=nccl,
        driver=driver,
        iface="docker0" if docker else "eth0",
        boot_ip="172.17.0.1" if docker else ip,
        suffix="".join(rng.choice(_ALNUM) for _ in range(6)),
        ranks=[],
    )


def _ranks_of(rng: random.Random, host: Host, g: int) -> list[Rank]:
    pid = host.agent_pid + rng.randint(14, 40)

    def lib() -> int:  # load address of a shared library in one process
        return 0x7F0000000000 + (rng.getrandbits(28) << 12)

    ranks: list[Rank] = []
    for lr in range(g):
        r = host.idx * g + lr
        host.ranks.append(r)
        bus = BUSES[lr] if lr < len(BUSES) else f"{0x1B + lr * 0x10:x}000"
        tid0 = pid + rng.randint(120, 180)
        ranks.append(
            Rank(
                rank=r,
                local=lr,
                host=host,
                pid=pid,
                tid_svc=tid0,
                tid_uds=tid0 + 1,
                tid_prog=tid0 + rng.randint(30, 60),
                tid_async=tid0 + rng.randint(2, 9),
                bus=bus,
                comm=f"0x{rng.randint(0x55D000000000, 0x55FFFFFFFFFF) & ~0xF:x}",
                comm_intra=f"0x{rng.randint(0x55D000000000, 0x55FFFFFFFFFF) & ~0xF:x}",
                port=rng.randint(32768, 60999),
                bases=(lib(), lib(), lib(), lib(), lib()),
            )
        )
        pid += rng.randint(1, 3)
    return ranks


@dataclass(frozen=True, slots=True)
class Schedule:
    """When things happen on the true clock, and the training loop's numbers."""

    rendezvous_t: float
    pg_init_t: float  # init_process_group
    step_s: float
    collectives_per_step: int  # on the default process group
    seq0: int  # default-PG collectives before the first step
    numel: int  # elements of the stuck allreduce
    loss0: float
    tokens_per_s: int
    steps: int

    @classmethod
    def draw(cls, rng: random.Random, steps: int) -> Schedule:
        rendezvous_t = 4.0 + rng.uniform(0.0, 0.5)
        return cls(
            rendezvous_t=rendezvous_t,
            pg_init_t=rendezvous_t + rng.uniform(7.0, 10.0),
            step_s=rng.uniform(1.6, 3.2),
            collectives_per_step=rng.randint(2, 6),
            seq0=rng.randint(3, 40),
            numel=rng.choice((6553600, 13107200, 26214400, 52428800)),
            loss0=rng.uniform(9.5, 11.0),
            tokens_per_s=rng.randint(28000, 64000),
            steps=steps,
        )

    def step_t(self, k: int) -> float:
        """When step k's line is logged."""
        return self.pg_init_t + 12.0 + k * self.step_s

    @property
    def last_step_t(self) -> float:
        """Just after the last step: when a failure after training strikes."""
        return self.step_t(self.steps) + 0.05

    @property
    def stuck_seq(self) -> int:
        """SeqNum of the collective that hangs after the last step."""
        return self.seq0 + self.steps * self.collectives_per_step + 1
