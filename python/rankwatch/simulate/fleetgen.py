"""Fleet log generator: the logs a failed (or healthy) PyTorch/NCCL job leaves behind.

``generate(scenario, out_dir, ...)`` writes the per-process log files of an N-rank torchrun
job in one of three layouts, plus ``truth.json`` naming the root-cause line (rank, host, the
exact line as written, the catalog signature id and the file it is in). Every line is built
from the real NCCL / c10 / torchelastic / excepthook formats described in
``shared/reference/nccl-messages.md`` and ``log-formats.md``; only hosts (``node-001`` ...),
addresses (``10.20.x.y``), pids, tids, bus ids and pointers are invented.

Model of the job (the same in every scenario):
  * one torchrun agent per host (TorchLogsFormatter lines, rendezvous, failure handling);
  * global rank = node_index * gpus_per_node + local_rank, cudaDev = local_rank;
  * two NCCL communicators per process: the default (global) one and a node-local one from
    ``dist.new_subgroups()`` (hybrid sharding). NCCL prints its version banner once per
    process, from the first communicator in which the process is rank 0, so the banner shows
    up on each host's local rank 0 only;
  * every host clock runs at true time + an offset drawn from [-skew_s, +skew_s]; every
    timestamp a process prints uses its host's clock. NCCL INFO lines carry no timestamp.

Failures follow the timing windows of nccl-messages.md section 3.2 item 9: watchdog timeouts
Timeout(ms)=600000 after the stuck collective was enqueued, SIGABRT about 60 s after the
timeout lines, IB retry-exceeded about 30 s after a link stops, the agent SIGTERMs the other
local workers when one exits, and when the agent that hosts the rendezvous store (node 0)
exits, the agents still running fail with ``RendezvousConnectionError``.

CLI (`rankwatch simulate` wraps the same generator; see `rankwatch simulate --help`)::

    python -m rankwatch.simulate.fleetgen --scenario desync --ranks 64 --layout per-node --out DIR
    python -m rankwatch.simulate.fleetgen --all --ranks 64 --out DIR --check
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

__all__ = ["LAYOUTS", "SCENARIOS", "START_MS", "Truth", "check_truth", "generate", "main"]

SCENARIOS: tuple[str, ...] = (
    "wrong_iface",
    "ib_link_down",
    "cuda_error",
    "oom_kill",
    "desync",
    "version_mismatch",
    "shm_full",
    "cuda_oom",
    "xid79",
    "healthy",
    "healthy_noisy",
)
LAYOUTS: tuple[str, ...] = ("per-rank", "per-node", "torchrun-logdir")


@dataclass
class Truth:
    """What the generator injected; written as ``truth.json`` next to the logs.

    ``root_cause`` / ``first_warning`` hold ``rank``, ``host``, ``line`` (verbatim, as written
    in the file, without the newline), ``signature`` (catalog id) and ``file`` (path of the
    file holding ``line``, relative to the output folder). ``first_warning`` may carry
    ``equivalent``: entries of the same shape for lines of the same event that are
    indistinguishable in time from the logs (wrong_iface: rank 0's bootstrap root and the ring
    predecessor fail within milliseconds, without timestamps).
    """

    job: str
    scenario: str
    ranks: int
    layout: str
    expect_diagnosis: bool
    root_cause: dict[str, Any] | None
    first_warning: dict[str, Any] | None
    host_offsets_s: dict[str, float]
    notes: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------------------------
# constants

_BASE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
# True time 0 of every generated job, in Unix ms.
START_MS = int(_BASE.timestamp() * 1000)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_SITE = "/usr/local/lib/python3.11/site-packages"
_LIBDIR = f"{_SITE}/torch/lib"
_PGSRC = "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"
_PGN = "ProcessGroupNCCL.cpp"
_BUSES = ("18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000")
_XID_BUS = "9a000"
_SHM_SIZE = 9637892
_TIMEOUT_MS = 600000
_DUMP_WAIT_S = 60.0
_IB_RETRY_S = 30.0
_HEARTBEAT_S = 480.0
_NVRM_LOAD = (
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.08  Tue Nov 26 20:24:05 UTC 2024"
)
_CPU_MASKS = ("00000000,0000ffff,ffffffff", "ffffffff,ffff0000,00000000")

_OUT = 0  # stdout of a worker (NCCL lines)
_ERR = 1  # stderr of a worker (c10, Python, logging)
_ROOT = 0
_FIRST = 1
_ALT = 2  # a line as good as first_warning (same event, no observable order)

# (true time, stream, text, mark); text may hold several lines; mark = 0 or _mark(kind, line)
Rec = tuple[float, int, str, int]

_SYS_ERR = "unhandled system error (run with NCCL_DEBUG=INFO for details)"
_REMOTE_ERR = "remote process exited or there was a network error"
_USAGE_ERR = "invalid usage (run with NCCL_DEBUG=WARN for details)"
_DETAIL = {
    _SYS_ERR: "ncclSystemError: System call (e.g. socket, malloc) or external library call "
    "failed or device error. ",
    _REMOTE_ERR: "ncclRemoteError: A call failed possibly due to a network error or a remote "
    "process exiting prematurely.",
    _USAGE_ERR: "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
}
_CUDA_HINTS = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)
_DUMP_MSG = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used "
    "across ranks, the order of collectives is not same for all ranks or the scheduled "
    "collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock "
    "or other reasons such as network errors or bugs in the communications library (e.g. "
    "NCCL), etc. "
)
_HEARTBEAT_MSG = (
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


@dataclass(frozen=True, slots=True)
class _Nccl:
    ver: str
    cuda: str
    torch: str

    @property
    def minor(self) -> int:
        return int(self.ver.split(".")[1])

    @property
    def code(self) -> int:
        a, b, c = (int(x) for x in self.ver.split("."))
        return a * 10000 + b * 100 + c

    @property
    def banner(self) -> str:
        return f"NCCL version {self.ver}+cuda{self.cuda}"

    @property
    def init_api(self) -> str:
        """What precedes ``comm %p rank ...`` in Init START/COMPLETE."""
        if self.minor <= 20:
            return ""
        if self.minor <= 22:
            return "ncclCommInitRank "
        return "ncclCommInitRankConfig "


_NCCL = {
    "2.18.3": _Nccl("2.18.3", "12.2", "2.5"),
    "2.21.5": _Nccl("2.21.5", "12.4", "2.5"),
    "2.26.2": _Nccl("2.26.2", "12.2", "2.7"),
    "2.27.7": _Nccl("2.27.7", "12.9", "2.9"),
}

# file:line of NCCL WARN sites and of the first `-> N` return-code breadcrumbs, per version
_WSRC: dict[str, dict[str, str]] = {
    "2.18.3": {"mismatch": "init.cc:601"},
    "2.21.5": {
        "connect": "misc/socket.cc:484",
        "closed": "misc/socket.cc:47",
        "reset": "misc/socket.cc:51",
        "async": "transport/net_ib.cc:90",
        "wc": "transport/net_ib.cc:1696",
        "mismatch": "init.cc:683",
    },
    "2.26.2": {"closed": "misc/socket.cc:64", "wc": "transport/net_ib.cc:2332"},
    "2.27.7": {
        "closed": "misc/socket.cc:64",
        "shm_extend": "misc/shmutils.cc:97",
        "shm_seg": "misc/shmutils.cc:153",
        "wc": "transport/net_ib.cc:2362",
    },
}
_CHAINS: dict[str, tuple[str, ...]] = {
    "connect": (
        "misc/socket.cc:565",
        "misc/socket.cc:668",
        "bootstrap.cc:274",
        "init.cc:1387",
        "init.cc:1628",
        "init.cc:1664",
    ),
    "root": ("misc/socket.cc:565", "misc/socket.cc:668", "bootstrap.cc:181"),
    "closed": (
        "misc/socket.cc:752",
        "bootstrap.cc:92",
        "bootstrap.cc:574",
        "init.cc:1126",
        "init.cc:1628",
        "init.cc:1664",
    ),
    "net_closed": ("misc/socket.cc:829", "transport/net_socket.cc:584", "transport/net.cc:1339"),
    "wc": ("transport/net_ib.cc:1706", "transport/net.cc:1329"),
    "shm": (
        "misc/shmutils.cc:161",
        "transport/shm.cc:134",
        "transport.cc:43",
        "transport.cc:167",
        "init.cc:1270",
        "init.cc:1822",
    ),
    "mismatch": ("init.cc:684", "init.cc:1628", "init.cc:1664"),
}

# ProcessGroupNCCL.cpp line numbers per torch build (shape matters, not the exact numbers)
_PT: dict[str, dict[str, int]] = {
    "2.5": {
        "opts": 877,
        "envs": 895,
        "created": 2196,
        "barrier": 4131,
        "timeout": 616,
        "timeout_raise": 618,
        "faildet": 1715,
        "stack": 1757,
        "firstpg": 1750,
        "dumpsig": 1741,
        "some": 623,
        "take": 629,
        "term": 1601,
        "wd_raise": 1604,
        "err_raise": 1969,
        "desync": 1729,
        "heart": 1423,
        "fatal": 1452,
        "destroy": 1250,
        "check": 2335,
    },
    "2.7": {
        "opts": 947,
        "envs": 958,
        "created": 2711,
        "barrier": 4813,
        "timeout": 632,
        "timeout_raise": 635,
        "faildet": 2017,
        "stack": 670,
        "firstpg": 2028,
        "dumpsig": 1784,
        "some": 684,
        "take": 698,
        "term": 1895,
        "wd_raise": 1899,
        "err_raise": 2347,
        "desync": 2042,
        "heart": 1423,
        "fatal": 1463,
        "destroy": 1496,
        "check": 3356,
    },
    "2.9": {
        "opts": 1012,
        "envs": 1025,
        "created": 2932,
        "barrier": 5092,
        "timeout": 685,
        "timeout_raise": 688,
        "faildet": 2129,
        "stack": 720,
        "firstpg": 2140,
        "dumpsig": 1893,
        "some": 736,
        "take": 750,
        "term": 2070,
        "wd_raise": 2074,
        "err_raise": 2459,
        "desync": 2154,
        "heart": 1551,
        "fatal": 1590,
        "destroy": 1567,
        "check": 3528,
    },
}
_WD_FUNC = {"2.5": "ncclCommWatchdog", "2.7": "ncclCommWatchdog", "2.9": "run"}

# scenario -> (NCCL version of the job, inter-node transport, communicator order)
_SCEN: dict[str, tuple[str, str, bool]] = {
    "wrong_iface": ("2.21.5", "Socket", True),
    "ib_link_down": ("2.21.5", "IB", True),
    "cuda_error": ("2.26.2", "IB", True),
    "oom_kill": ("2.26.2", "Socket", True),
    "desync": ("2.27.7", "IB", True),
    "version_mismatch": ("2.21.5", "IB", True),
    "shm_full": ("2.27.7", "IB", False),
    "cuda_oom": ("2.26.2", "IB", True),
    "xid79": ("2.27.7", "IB", True),
    "healthy": ("2.21.5", "Socket", True),
    "healthy_noisy": ("2.27.7", "IB", True),
}
_MULTI_HOST = ("wrong_iface", "ib_link_down", "version_mismatch")


def _mark(kind: int, line: int) -> int:
    return (line << 2) | (kind + 1)


def _unmark(mark: int) -> tuple[int, int]:
    return (mark & 3) - 1, mark >> 2


class _Clock:
    """Formats host-clock times; caches the per-second fields."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[int, tuple[str, str, str, str, str]] = {}

    def _sec(self, t: float) -> tuple[tuple[str, str, str, str, str], int]:
        s = math.floor(t)
        ms = int((t - s) * 1000.0)
        v = self._cache.get(s)
        if v is None:
            d = _BASE + timedelta(seconds=s)
            hms = f"{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
            v = (
                f"{d.month * 100 + d.day}",
                f"{d.month:02d}{d.day:02d}",
                hms,
                f"{d.year:04d}-{d.month:02d}-{d.day:02d}",
                f"{_MONTHS[d.month - 1]} {d.day:02d} {hms}",
            )
            self._cache[s] = v
        return v, ms

    def c10(self, t: float, ns: int) -> str:
        f, _ = self._sec(t)
        return f"{f[0]} {f[2]}.{ns:09d}"

    def tl(self, t: float) -> str:
        f, ms = self._sec(t)
        return f"{f[1]} {f[2]}.{ms * 1000:06d}"

    def app(self, t: float) -> str:
        f, ms = self._sec(t)
        return f"{f[3]} {f[2]},{ms:03d}"

    def warn(self, t: float) -> str:
        f, _ = self._sec(t)
        return f"[{f[3]} {f[2]}] "

    def journal(self, t: float) -> str:
        return self._sec(t)[0][4]

    def cfe(self, t: float) -> str:
        f, _ = self._sec(t)
        return f"{f[3]}_{f[2]}"


@dataclass(slots=True)
class _Host:
    idx: int
    name: str
    ip: str
    offset: float
    mono0: float
    agent_pid: int
    nccl: _Nccl
    driver: int
    iface: str
    boot_ip: str
    suffix: str
    ranks: list[int]


@dataclass(slots=True)
class _Rank:
    rank: int
    local: int
    host: _Host
    pid: int
    tid_svc: int
    tid_uds: int
    tid_prog: int
    tid_async: int
    bus: str
    comm: str
    comm_intra: str
    port: int
    bases: tuple[int, int, int, int, int]


# --------------------------------------------------------------------------------------------
# the generator


class _Gen:
    def __init__(
        self,
        scenario: str,
        ranks: int,
        gpus_per_node: int,
        layout: str,
        skew_s: float,
        seed: int,
        steps: int,
        job: str | None,
    ) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
        if layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
        if ranks < 2:
            raise ValueError("ranks must be at least 2")
        gpn = min(gpus_per_node, ranks)
        if gpn < 1 or ranks % gpn:
            raise ValueError("ranks must be a multiple of gpus_per_node")
        if steps < 1:
            raise ValueError("steps must be at least 1")
        self.nodes = ranks // gpn
        if scenario in _MULTI_HOST and self.nodes < 2:
            raise ValueError(f"scenario {scenario} needs at least two hosts")
        self.scenario = scenario
        self.n = ranks
        self.g = gpn
        self.layout = layout
        self.skew = max(0.0, skew_s)
        self.seed = seed
        self.steps = steps
        self.job = job or f"llm-{scenario.replace('_', '-')}-{seed:04d}"
        # one stream of randomness per (scenario, seed, size): layouts share every choice
        self.rng = random.Random(f"fleetgen:{scenario}:{seed}:{ranks}:{gpn}")
        self.clock = _Clock()
        ver, self.transport, self.intra_first = _SCEN[scenario]
        self.nccl = _NCCL[ver]
        self.pt = _PT[self.nccl.torch]
        self.wd_func = _WD_FUNC[self.nccl.torch]

        self.hosts: list[_Host] = []
        self.ranks: list[_Rank] = []
        self.recs: list[list[Rec]] = [[] for _ in range(ranks)]
        self.arecs: list[list[Rec]] = [[] for _ in range(self.nodes)]
        self.krecs: dict[int, list[Rec]] = {}
        self.nat_t = [math.inf] * ranks
        self.nat_code = [0] * ranks
        self.death = [math.inf] * ranks
        self.exitc = [0] * ranks
        self.host_dead = [False] * self.nodes
        self.host_exit = [math.inf] * self.nodes
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.triggers: dict[int, Callable[[], None]] = {}
        self.seqctr = 0
        self.cascade: Callable[[int, float], None] | None = None
        self.located: dict[int, tuple[str, str]] = {}
        self.root_meta: tuple[int, str, str] | None = None  # rank, host, signature
        self.first_meta: tuple[int, str, str] | None = None
        self.alt_meta: tuple[int, str, str] | None = None
        self.notes: list[str] = []
        self.ring_memo: dict[tuple[bool, int, int], str] = {}
        self.p2p_off_host = -1
        self.made_dirs: set[Path] = set()
        self.line_times: dict[str, list[float]] | None = None

        self._choose_culprit()
        self._build_fleet()
        self._timeline()

    # ---------------------------------------------------------------- fleet

    def _choose_culprit(self) -> None:
        rng = self.rng
        if self.nodes >= 4:
            self.ch = rng.randint(2, self.nodes - 2)
        elif self.nodes >= 2:
            self.ch = rng.randint(1, self.nodes - 1)
        else:
            self.ch = 0
        if self.scenario == "xid79" and _XID_BUS in _BUSES[: self.g]:
            self.cl = _BUSES.index(_XID_BUS)
        elif self.scenario in ("wrong_iface", "version_mismatch"):
            self.cl = 0  # the whole host is odd; its lowest rank carries the evidence
        else:
            self.cl = rng.randrange(self.g)
        if self.ch == 0 and self.cl == 0:
            self.cl = 1
        if self.scenario == "healthy_noisy" and self.g >= 3:
            self.p2p_off_host = rng.randrange(self.nodes)
        self.cr = self.ch * self.g + self.cl

    def _build_fleet(self) -> None:
        rng = self.rng
        width = max(3, len(str(self.nodes)))
        alnum = "abcdefghijklmnopqrstuvwxyz0123456789_"
        for h in range(self.nodes):
            off = round(rng.uniform(-self.skew, self.skew), 3)
            if h == self.ch and self.scenario not in ("healthy", "healthy_noisy"):
                # even seeds: the culprit's clock runs behind, so it looks earliest
                off = (
                    -round(rng.uniform(0.6, 1.0) * self.skew, 3)
                    if self.seed % 2 == 0
                    else round(rng.uniform(-self.skew, self.skew), 3)
                )
            nccl = self.nccl
            if self.scenario == "version_mismatch" and h == self.ch:
                nccl = _NCCL["2.18.3"]
            driver = 12040 if nccl.minor <= 21 else 12080
            if nccl.minor >= 27:
                driver = 12090
            if self.scenario == "healthy_noisy" and h % 3 == 2:
                driver = 12080
            ip = f"10.20.{h // 250}.{h % 250 + 4}"
            docker = self.scenario == "wrong_iface" and h == self.ch
            host = _Host(
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
                suffix="".join(rng.choice(alnum) for _ in range(6)),
                ranks=[],
            )
            self.hosts.append(host)
            pid = host.agent_pid + rng.randint(14, 40)

            def lib() -> int:  # load address of a shared library in one process
                return 0x7F0000000000 + (rng.getrandbits(28) << 12)

            for lr in range(self.g):
                r = h * self.g + lr
                host.ranks.append(r)
                bus = _BUSES[lr] if lr < len(_BUSES) else f"{0x1B + lr * 0x10:x}000"
                tid0 = pid + rng.randint(120, 180)
                self.ranks.append(
                    _Rank(
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
        self.comm_id = f"0x{rng.getrandbits(64):016x}"
        self.intra_ids = [f"0x{rng.getrandbits(64):016x}" for _ in range(self.nodes)]
        self.master_port = rng.randint(29400, 29600)

    def _timeline(self) -> None:
        rng = self.rng
        self.t_rdzv = 4.0 + rng.uniform(0.0, 0.5)
        self.t_pg = self.t_rdzv + rng.uniform(7.0, 10.0)
        self.step_dt = rng.uniform(1.6, 3.2)
        self.cps = rng.randint(2, 6)  # default-PG collectives per step
        self.seq0 = rng.randint(3, 40)  # default-PG collectives before the first step
        self.numel = rng.choice((6553600, 13107200, 26214400, 52428800))
        self.loss0 = rng.uniform(9.5, 11.0)
        self.tps = rng.randint(28000, 64000)

    # ---------------------------------------------------------------- emit helpers

    def _h(self, r: _Rank, t: float) -> float:
        return t + r.host.offset

    def _ns(self, r: _Rank, t: float) -> int:
        return int(((r.host.mono0 + t) % 1.0) * 1e9)

    def info(
        self, r: _Rank, t: float, msg: str, tid: int = 0, dev: int = -1, mark: int = 0
    ) -> None:
        self.recs[r.rank].append(
            (
                t,
                _OUT,
                f"{r.host.name}:{r.pid}:{tid or r.pid} [{r.local if dev < 0 else dev}] "
                f"NCCL INFO {msg}",
                mark,
            )
        )

    def bare(self, r: _Rank, t: float, text: str, mark: int = 0) -> None:
        self.recs[r.rank].append((t, _OUT, text, mark))

    def warn(
        self,
        r: _Rank,
        t: float,
        src: str,
        msg: str,
        tid: int = 0,
        dev: int = -1,
        mark: int = -1,
        nccl: _Nccl | None = None,
    ) -> None:
        v = nccl or r.host.nccl
        ts = self.clock.warn(self._h(r, t)) if 26 <= v.minor <= 29 else ""
        text = (
            f"\n{ts}{r.host.name}:{r.pid}:{tid or r.pid} [{r.local if dev < 0 else dev}] "
            f"{src} NCCL WARN {msg}"
        )
        self.recs[r.rank].append((t, _OUT, text, _mark(mark, 1) if mark >= 0 else 0))

    def chain(self, r: _Rank, t: float, key: str, code: int, tid: int = 0, tail: str = "") -> None:
        for i, loc in enumerate(_CHAINS[key]):
            self.info(r, t + i * 0.0001, f"{loc} -> {code}{tail if i == 0 else ''}", tid)

    def c10(
        self,
        r: _Rank,
        t: float,
        sev: str,
        line: int,
        msg: str,
        mark: int = 0,
        src: str = _PGN,
        prefix: bool = True,
    ) -> None:
        rp = f"[rank{r.rank}]:" if prefix else ""
        ts = self.clock.c10(self._h(r, t), self._ns(r, t))
        self.recs[r.rank].append((t, _ERR, f"{rp}[{sev}{ts} {src}:{line}] {msg}", mark))

    def err(self, r: _Rank, t: float, text: str, mark: int = 0) -> None:
        self.recs[r.rank].append((t, _ERR, text, mark))

    def excepthook(self, r: _Rank, t: float, lines: Sequence[str], mark_at: int = -1) -> None:
        pre = f"[rank{r.rank}]: "
        text = "\n".join(pre + ln if ln else "" for ln in lines)
        self.err(r, t, text, _mark(_ROOT, mark_at) if mark_at >= 0 else 0)

    def app(self, r: _Rank, t: float, level: str, msg: str) -> None:
        self.err(r, t, f"{self.clock.app(self._h(r, t))} {level} {msg}")

    def tl(self, h: _Host, t: float, lvl: str, src: str, msg: str, mark: int = 0) -> None:
        pre = f"{lvl}{self.clock.tl(t + h.offset)} {h.agent_pid} {src}]"
        text = "\n".join(f"{pre} {ln}" for ln in msg.split("\n"))
        self.arecs[h.idx].append((t, _ERR, text, mark))

    def agent_raw(self, h: _Host, t: float, text: str) -> None:
        self.arecs[h.idx].append((t, _ERR, text, 0))

    def kern(self, h: _Host, t: float, msg: str, mark: int = 0) -> None:
        self.krecs.setdefault(h.idx, []).append(
            (t, _OUT, f"{self.clock.journal(t + h.offset)} {h.name} kernel: {msg}", mark)
        )

    def pgpfx(self, r: _Rank) -> str:
        return f"[PG ID 0 PG GUID 0(default_pg) Rank {r.rank}] "

    def pgpfx_intra(self, r: _Rank) -> str:
        pg = r.host.idx + 1
        return f"[PG ID {pg} PG GUID {pg} Rank {r.local}] "

    def frames(self, r: _Rank, kind: str) -> list[str]:
        c10, tc, cu, std, libc = r.bases
        lc10 = f"{_LIBDIR}/libc10.so"
        ltc = f"{_LIBDIR}/libtorch_cuda.so"
        lcu = f"{_LIBDIR}/libc10_cuda.so"
        lstd = "/lib/x86_64-linux-gnu/libstdc++.so.6"
        llibc = "/lib/x86_64-linux-gnu/libc.so.6"
        wd = (
            "c10d::ProcessGroupNCCL::Watchdog::runLoop()"
            if self.wd_func == "run"
            else "c10d::ProcessGroupNCCL::watchdogHandler()"
        )
        spec: list[tuple[str, int, int, str]] = [
            ("c10::Error::Error(c10::SourceLocation, std::string)", 0x98, c10, lc10)
        ]
        if kind == "timeout":
            spec += [
                (
                    "c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::"
                    "duration<long, std::ratio<1l, 1000l> > >)",
                    0x2AC,
                    tc,
                    ltc,
                ),
                (wd, 0x8F8, tc, ltc),
            ]
        elif kind == "ncclerr":
            spec += [
                (
                    "c10d::ProcessGroupNCCL::checkForNCCLErrorsInternal(std::shared_ptr<c10d::"
                    "NCCLComm>&)",
                    0x4A8,
                    tc,
                    ltc,
                ),
                ("c10d::ProcessGroupNCCL::WorkNCCL::checkAndSetException()", 0x7E, tc, ltc),
                (wd, 0x238, tc, ltc),
            ]
        elif kind == "cuda":
            spec += [
                (
                    "c10::detail::torchCheckFail(char const*, char const*, unsigned int, "
                    "std::string const&)",
                    0x6B,
                    c10,
                    lc10,
                ),
                (
                    "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, "
                    "int, bool)",
                    0x3C2,
                    cu,
                    lcu,
                ),
                (
                    "c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const",
                    0x52,
                    tc,
                    ltc,
                ),
                ("c10d::ProcessGroupNCCL::WorkNCCL::isCompleted()", 0x58, tc, ltc),
                (wd, 0x1F8, tc, ltc),
            ]
        else:  # the outer rethrow
            spec += [
                ("<unknown function>", 0x11C2671, tc, ltc),
                ("<unknown function>", 0xE37D8A, tc, ltc),
            ]
        if kind != "run":
            spec.append(("c10d::ProcessGroupNCCL::ncclCommWatchdog()", 0x14D, tc, ltc))
        spec += [
            ("<unknown function>", 0xDC253, std, lstd),
            ("<unknown function>", 0x94AC3, libc, llibc),
            ("clone", 0x44, libc, llibc),
        ]
        out: list[str] = []
        for i, (sym, off, base, lib) in enumerate(spec):
            # named symbols sit at a fixed place inside their library; unknown ones are
            # already library-relative
            at = 0 if sym.startswith("<") else (zlib.crc32(sym.encode()) % 0x1800000) & ~0xF
            out.append(f"frame #{i}: {sym} + {off:#x} ({base + at + off:#x} in {lib})")
        return out

    # ---------------------------------------------------------------- NCCL text by version

    def net_closed_msg(self, peer: _Rank, recv: bool, v: _Nccl) -> tuple[str, str]:
        """(source, message) for a socket whose peer process went away."""
        port = peer.port + 1
        if recv or v.minor >= 24:
            return (
                _WSRC.get(v.ver, _WSRC["2.27.7"]).get("closed", "misc/socket.cc:64"),
                f"socketProgress: Connection closed by remote peer {peer.host.name}<{port}>",
            )
        return (
            _WSRC["2.21.5"]["reset"],
            f"socketProgressOpt: Call to recv from {peer.host.ip}<{port}> failed : "
            "Connection reset by peer",
        )

    def connect_retry_msg(self, v: _Nccl, peer: _Rank, attempt: int) -> str:
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

    def wc_msg(self, v: _Nccl, peer: _Rank, status: int, hca: str, length: int) -> str:
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

    # ---------------------------------------------------------------- baseline

    def startup(self, r: _Rank, t0: float) -> None:
        """Python-side lines before init_process_group."""
        rng = self.rng
        if r.local == 0 or rng.random() < 0.5:
            self.err(
                r,
                t0 + rng.uniform(0.5, 2.5),
                "/workspace/train.py:118: FutureWarning: `torch.cuda.amp.GradScaler(args...)` "
                "is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.\n"
                "  scaler = torch.cuda.amp.GradScaler()",
            )

    def pg_init(self, r: _Rank, t: float) -> None:
        v = r.host.nccl
        pt = self.pt
        desync = 1 if self.scenario == "desync" else 0
        self.c10(
            r,
            t,
            "I",
            pt["opts"],
            f"{self.pgpfx(r)}ProcessGroupNCCL initialization options: size: {self.n}, "
            f"global rank: {r.rank}, TIMEOUT(ms): {_TIMEOUT_MS}, USE_HIGH_PRIORITY_STREAM: 0, "
            "SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0",
        )
        self.c10(
            r,
            t + 0.0002,
            "I",
            pt["envs"],
            f"{self.pgpfx(r)}ProcessGroupNCCL environments: NCCL version: {v.ver}, "
            "TORCH_NCCL_ASYNC_ERROR_HANDLING: 3, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, "
            f"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 15000, TORCH_NCCL_DESYNC_DEBUG: {desync}, "
            "TORCH_NCCL_ENABLE_TIMING: 0, TORCH_NCCL_BLOCKING_WAIT: 0, "
            "TORCH_DISTRIBUTED_DEBUG: OFF, TORCH_NCCL_ENABLE_MONITORING: 1, "
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, TORCH_NCCL_TRACE_BUFFER_SIZE: 0, "
            "TORCH_NCCL_COORD_CHECK_MILSEC: 1000, TORCH_NCCL_NAN_CHECK: 0, "
            "TORCH_NCCL_CUDA_EVENT_CACHE: 1, TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN: 1",
        )
        self.c10(
            r,
            t + self.rng.uniform(0.03, 0.08),
            "I",
            pt["opts"],
            f"{self.pgpfx_intra(r)}ProcessGroupNCCL initialization options: size: {self.g}, "
            f"global rank: {r.rank}, TIMEOUT(ms): {_TIMEOUT_MS}, USE_HIGH_PRIORITY_STREAM: 0, "
            f"SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: {r.host.idx + 1}",
        )

    def barrier_warning(self, r: _Rank, t: float) -> None:
        if self.nccl.torch == "2.5":
            msg = (
                f"{self.pgpfx(r)} using GPU {r.local} to perform barrier as devices used by this "
                "process are currently unknown. This can potentially cause a hang if this rank "
                "to GPU mapping is incorrect.Specify device_ids in barrier() to force use of a "
                "particular device,or call init_process_group() with a device_id."
            )
        else:
            msg = (
                f"{self.pgpfx(r)} using GPU {r.local} as device used by this process is "
                "currently unknown. This can potentially cause a hang if this rank to GPU "
                "mapping is incorrect. You can pecify device_id in init_process_group() to "
                "force use of a particular device."
            )
        self.c10(r, t, "W", self.pt["barrier"], msg)

    def nccl_proc_init(self, r: _Rank, t: float) -> float:
        """Process-level NCCL lines (ncclInit); returns the time after them."""
        v = r.host.nccl
        h = r.host
        ifname = "^lo" if self.scenario == "wrong_iface" else "eth0"
        msgs = [f"NCCL_SOCKET_IFNAME set by environment to {ifname}"]
        if self.transport == "IB":
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
            msgs.append(
                "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."
            )
        else:
            msgs.append("NET/Plugin: Could not find: libnccl-net.so. ")
        msgs.append(f"cudaDriverVersion {h.driver}")
        for i, m in enumerate(msgs):
            # The culprit's first line that shows the wrong interface is the root cause.
            root = (
                self.scenario == "wrong_iface" and r.rank == self.cr and m.startswith("Bootstrap")
            )
            self.info(r, t + i * 0.0003, m, mark=_mark(_ROOT, 0) if root else 0)
        return t + len(msgs) * 0.0003 + 0.001

    def net_lines(self, r: _Rank, t: float) -> float:
        v = r.host.nccl
        h = r.host
        msgs: list[str] = []
        if self.transport == "IB":
            devs = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(max(self.g, 1)))
            ro = "[RO]" if v.minor >= 27 else ""
            msgs.append(f"NET/IB : Using {devs} {ro}; OOB {h.iface}:{h.boot_ip}<0>")
        else:
            msgs.append("Failed to open libibverbs.so[.1]")
            msgs.append("NET/IB : No device found.")
            msgs.append(f"NET/Socket : Using [0]{h.iface}:{h.boot_ip}<0>")
        if v.minor >= 27:
            name = "IB" if self.transport == "IB" else "Socket"
            msgs.append(f"Initialized NET plugin {name}")
        for i, m in enumerate(msgs):
            rec_text = f"{h.name}:{r.pid}:{r.pid} [{r.local}] NCCL INFO {m}"
            self.recs[r.rank].append((t + i * 0.0004, _OUT, rec_text, 0))
        return t + len(msgs) * 0.0004 + 0.001

    def ring_line(self, ch: int, nch: int, members: Sequence[int]) -> str:
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

    def tree(self, r: _Rank, intra: bool) -> str:
        g = self.g
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
            c1 = (2 * h + 1) * g if 2 * h + 1 < self.nodes else -1
            c2 = (2 * h + 2) * g if 2 * h + 2 < self.nodes else -1
            return f"{d0}/{c1}/{c2}->{me}->{up}"
        d0 = me + 1 if r.local < g - 1 else -1
        return f"{d0}/-1/-1->{me}->{me - 1}"

    def comm_init(self, r: _Rank, t: float, intra: bool, stage: str, first: bool) -> float:
        """NCCL lines of one communicator init. stage: bootstrap | transport | complete."""
        v = r.host.nccl
        rng = self.rng
        g = self.g
        step = 0.0005
        tt = t
        if first and (r.local == 0 if intra else r.rank == 0):
            if v.minor >= 27:
                self.info(r, tt, v.banner)
            else:
                mark = 0
                if self.scenario == "version_mismatch" and r.rank == self.cr:
                    mark = _mark(_ROOT, 0)
                self.bare(r, tt, v.banner, mark)
            tt += step
        if first:
            tt = self.net_lines(r, tt)
        if intra:
            rank, nranks, comm, cid = r.local, g, r.comm_intra, self.intra_ids[r.host.idx]
        else:
            rank, nranks, comm, cid = r.rank, self.n, r.comm, self.comm_id
        self.info(r, tt, f"Using network {self.transport}")
        tt += step
        ident = (
            f"comm {comm} rank {rank} nranks {nranks} cudaDev {r.local} nvmlDev {r.local} "
            f"busId {r.bus} commId {cid}"
        )
        self.info(r, tt, f"{v.init_api}{ident} - Init START")
        tt += step
        retry_p = {"healthy": 0.08, "healthy_noisy": 0.3}.get(self.scenario, 0.0)
        if not intra and rng.random() < retry_p:
            peer = self.ranks[(r.rank + 1) % self.n]
            for a in range(1, rng.randint(2, 4)):
                tt += a * 0.1
                self.info(r, tt, self.connect_retry_msg(v, peer, a))
        if stage == "bootstrap":
            return tt
        boot_s = rng.uniform(0.15, 0.9)
        if v.minor >= 23:
            self.info(
                r,
                tt + boot_s,
                f"Bootstrap timings total {boot_s:.6f} (create {rng.uniform(2e-5, 6e-5):.6f}, "
                f"send {rng.uniform(1e-4, 4e-4):.6f}, recv {boot_s * 0.95:.6f}, "
                f"ring {rng.uniform(1e-3, 9e-3):.6f}, delay 0.000001)",
            )
        tt += boot_s
        self.info(r, tt, f"Setting affinity for GPU {r.local} to {_CPU_MASKS[r.local * 2 // g]}")
        tt += step
        if v.minor >= 20:
            nn = 1 if intra else self.nodes
            self.info(
                r,
                tt,
                f"comm {comm} rank {rank} nRanks {nranks} nNodes {nn} localRanks {g} "
                f"localRank {r.local} MNNVL 0",
            )
            tt += step
        members = list(range(g)) if intra else list(range(self.n))
        ring0 = self.ring_cache(intra, 0, members)
        ring1 = self.ring_cache(intra, 1, members)
        self.info(r, tt, ring0)
        self.info(r, tt + 0.0001, ring1)
        tree = self.tree(r, intra)
        self.info(r, tt + 0.0002, f"Trees [0] {tree} [1] {tree}")
        self.info(r, tt + 0.0003, "P2P Chunksize set to 131072")
        tt += 0.001
        if intra and r.host.idx == self.p2p_off_host and r.local in (1, 2):
            self.info(
                r,
                tt,
                "P2P is disabled between connected GPUs 1 and 2. You can repress this message "
                "with NCCL_IGNORE_DISABLED_P2P=1.",
            )
            tt += step
        if first:
            core = 12 * (r.local * 2 // g) + r.local
            self.info(r, tt, f"[Proxy Service] Device {r.local} CPU core {core}", r.tid_svc)
            if v.minor >= 19:
                self.info(
                    r,
                    tt + 0.0001,
                    f"[Proxy Service UDS] Device {r.local} CPU core {core + 1}",
                    r.tid_uds,
                )
            tt += 0.001
        if stage == "transport":
            return tt
        if not intra and self.transport == "IB":
            if v.minor <= 21:
                gdr = (
                    f"GPU Direct RDMA Enabled for GPU {r.bus} / HCA {r.local} "
                    "(distance 4 <= 5), read 1"
                )
            else:
                gdr = (
                    f"GPU Direct RDMA Enabled for GPU {r.local} / HCA {r.local} "
                    "(distance 4 <= 5), read 1 mode Default"
                )
            self.info(r, tt, gdr)
            tt += step
        p2p = "P2P/CUMEM/read" if v.minor >= 19 else "P2P/IPC/read"
        if intra:
            nxt = (r.local + 1) % g
            for c in range(2):
                if g > 1:
                    self.info(
                        r,
                        tt + c * 0.0002,
                        self.p2p_channel(c, r, r.local, nxt, nxt, p2p),
                    )
        else:
            prev = self.ranks[(r.rank - 1) % self.n]
            nxt_r = self.ranks[(r.rank + 1) % self.n]
            netname = f"NET/IB/{r.local}/GDRDMA" if self.transport == "IB" else "NET/Socket/0"
            uses_net = False
            for c in range(2):
                ts = tt + c * 0.0003
                if prev.host is not r.host:
                    uses_net = True
                    self.info(
                        r,
                        ts,
                        f"Channel {c:02d}/0 : {prev.rank}[{prev.local}] -> {r.rank}[{r.local}] "
                        f"[receive] via {netname}",
                    )
                if nxt_r.host is not r.host:
                    uses_net = True
                    self.info(
                        r,
                        ts + 0.0001,
                        f"Channel {c:02d}/0 : {r.rank}[{r.local}] -> {nxt_r.rank}[{nxt_r.local}] "
                        f"[send] via {netname}",
                    )
                elif nxt_r.rank != r.rank:
                    self.info(
                        r,
                        ts + 0.0001,
                        self.p2p_channel(c, r, r.rank, nxt_r.rank, nxt_r.local, p2p),
                    )
            if uses_net:
                core = 12 * (r.local * 2 // g) + r.local + 2
                self.info(
                    r, tt + 0.001, f"[Proxy Progress] Device {r.local} CPU core {core}", r.tid_prog
                )
        tt += 0.002
        if v.minor >= 24:
            self.info(r, tt, "Connected all rings, use ring PXN 0 GDR 1")
        else:
            self.info(r, tt, "Connected all rings")
        self.info(r, tt + 0.0001, "Connected all trees")
        self.info(r, tt + 0.0002, "threadThresholds 8/8/64 | 512/8/64 | 512 | 512")
        if v.minor >= 20:
            ch = (
                "2 coll channels, 2 collnet channels, 0 nvls channels, 2 p2p channels, "
                "2 p2p channels per peer"
            )
        else:
            ch = "2 coll channels, 0 nvls channels, 2 p2p channels, 2 p2p channels per peer"
        self.info(r, tt + 0.0003, ch)
        if v.minor >= 22:
            self.info(r, tt + 0.0004, "CC Off, workFifoBytes 1048576")
        tt += 0.001
        if v.minor >= 22:
            total = tt - t
            self.info(
                r,
                tt,
                f"Init timings - {v.init_api.strip()}: rank {rank} nranks {nranks} total "
                f"{total:.2f} (kernels {rng.uniform(0.1, 0.2):.2f}, alloc 0.01, bootstrap "
                f"{boot_s:.2f}, allgathers {rng.uniform(0.01, 0.05):.2f}, topo "
                f"{rng.uniform(0.1, 0.3):.2f}, graphs 0.01, connections "
                f"{rng.uniform(0.05, 0.4):.2f}, rest 0.02)",
            )
        self.info(r, tt + 0.0001, f"{v.init_api}{ident} - Init COMPLETE")
        tt += 0.0005
        pg = self.pgpfx_intra(r) if intra else self.pgpfx(r)
        self.c10(
            r,
            tt,
            "I",
            self.pt["created"],
            f"{pg}ProcessGroupNCCL created ncclComm_ {comm} on CUDA device: {r.local}",
        )
        return tt + 0.001

    def p2p_channel(self, c: int, r: _Rank, me: int, peer: int, peer_local: int, p2p: str) -> str:
        if r.host.idx == self.p2p_off_host and (r.local, peer_local) == (1, 2):
            return (
                f"Channel {c:02d} : {me}[{r.local}] -> {peer}[{peer_local}] via SHM/direct/direct"
            )
        return f"Channel {c:02d}/0 : {me}[{r.local}] -> {peer}[{peer_local}] via {p2p}"

    def ring_cache(self, intra: bool, ch: int, members: Sequence[int]) -> str:
        memo = self.ring_memo
        key = (intra, ch, len(members))
        s = memo.get(key)
        if s is None:
            s = self.ring_line(ch, 2, members)
            memo[key] = s
        return s

    def baseline(self, r: _Rank, global_stage: str = "complete") -> float:
        """Startup, PG init and both communicator inits; returns the end time.

        When the default communicator fails (global_stage != "complete"), its init stops at
        the given stage and the function returns the time where the failure happens.
        """
        rng = self.rng
        t0 = self.t_rdzv + rng.uniform(0.1, 0.4)
        self.startup(r, t0)
        t = self.t_pg + rng.uniform(0.0, 0.18)
        self.pg_init(r, t)
        t = self.t_pg + 0.35 + rng.uniform(0.0, 0.05)
        t = self.nccl_proc_init(r, t)
        if self.intra_first:
            t = self.comm_init(r, t, True, "complete", True)
            t = max(t, self.t_pg + 2.4) + rng.uniform(0.0, 0.04)
            self.barrier_warning(r, t)
            t = self.comm_init(r, t + 0.002, False, global_stage, False)
        else:
            self.barrier_warning(r, t)
            t = self.comm_init(r, t + 0.002, False, global_stage, True)
            if global_stage == "complete":
                t = self.comm_init(r, max(t, self.t_pg + 2.6), True, "complete", False)
        return t

    def training(self, r: _Rank, upto: int | None = None) -> None:
        rng = self.rng
        t_ready = self.t_pg + 3.4 + rng.uniform(0.0, 0.1)
        self.app(
            r,
            t_ready,
            "INFO",
            f"rank={r.rank} local_rank={r.local} world_size={self.n} device=cuda:{r.local} "
            "model=llama-7b seq_len=4096 micro_batch=2",
        )
        if rng.random() < 0.3:
            self.err(
                r,
                t_ready + rng.uniform(0.1, 0.5),
                f"{_SITE}/torch/utils/data/dataloader.py:624: UserWarning: This DataLoader will "
                "create 16 worker processes in total. Our suggested max number of worker in "
                "current system is 12, which is smaller than what this DataLoader is going to "
                "create. Please be aware that excessive worker creation might get DataLoader "
                "running slow or even freeze, lower the worker number to avoid potential "
                "slowness/freeze if necessary.\n  warnings.warn(",
            )
        last = self.steps if upto is None else upto
        for k in range(1, last + 1):
            t = self.t_step(k) + rng.uniform(0.0, 0.04)
            loss = 2.0 + (self.loss0 - 2.0) * math.exp(-k / 6.0) + rng.uniform(-0.02, 0.02)
            tps = self.tps + rng.randint(-900, 900)
            self.app(r, t, "INFO", f"step={k} loss={loss:.4f} tokens/s={tps}")

    def t_step(self, k: int) -> float:
        return self.t_pg + 12.0 + k * self.step_dt

    @property
    def t_last(self) -> float:
        return self.t_step(self.steps) + 0.05

    @property
    def seq_stuck(self) -> int:
        return self.seq0 + self.steps * self.cps + 1

    # ---------------------------------------------------------------- failure paths

    def set_exit(self, r: _Rank, t: float, code: int) -> None:
        if t < self.nat_t[r.rank]:
            self.nat_t[r.rank] = t
            self.nat_code[r.rank] = code
            self.push(t, 0, r.host.idx, r.rank)

    def push(self, t: float, kind: int, h: int, r: int) -> None:
        self.seqctr += 1
        heapq.heappush(self.heap, (t, self.seqctr, kind, h, r))

    def trigger(self, t: float, r: _Rank, fn: Callable[[], None]) -> None:
        self.seqctr += 1
        self.triggers[self.seqctr] = fn
        heapq.heappush(self.heap, (t, self.seqctr, 2, r.host.idx, r.rank))

    def abort_lines(
        self,
        r: _Rank,
        t: float,
        inner: Sequence[str],
        raise_from: str,
        raise_kind: str,
    ) -> None:
        """`... watchdog thread terminated with exception` + libstdc++ terminate (SIGABRT)."""
        pt = self.pt
        head = f"{self.pgpfx(r)}Process group watchdog thread terminated with exception: "
        body = [
            *inner[1:],
            f"Exception raised from {raise_from} (most recent call first):",
            *self.frames(r, raise_kind),
        ]
        self.c10(r, t, "E", pt["term"], head + inner[0] + "\n" + "\n".join(body))
        outer = [
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            f"  what():  {head}{inner[0]}",
            *body,
            f"Exception raised from {self.wd_func} at {_PGSRC}:{pt['wd_raise']} "
            "(most recent call first):",
            *self.frames(r, "run"),
        ]
        self.err(r, t + 0.0005, "\n".join(outer))
        self.set_exit(r, t + 0.002 + self.rng.uniform(0.0, 0.05), -6)

    def watchdog_timeout(self, r: _Rank, t_enq: float, desync: list[str] | None = None) -> None:
        pt = self.pt
        rng = self.rng
        s = self.seq_stuck
        ran = _TIMEOUT_MS + rng.randint(3, 99)
        t = t_enq + ran / 1000.0
        work = (
            f"WorkNCCL(SeqNum={s}, OpType=ALLREDUCE, NumelIn={self.numel}, "
            f"NumelOut={self.numel}, Timeout(ms)={_TIMEOUT_MS})"
        )
        caught = (
            f"[Rank {r.rank}] Watchdog caught collective operation timeout: {work} ran for "
            f"{ran} milliseconds before timing out."
        )
        self.c10(r, t, "E", pt["timeout"], caught)
        if desync is not None:
            kind_line = next(i for i, ln in enumerate(desync) if f"[{self.cr}]" in ln)
            self.c10(
                r,
                t + 0.0004,
                "E",
                pt["desync"],
                self.pgpfx(r) + "\n" + "\n".join(desync),
                mark=_mark(_ROOT, kind_line + 1),
            )
        self.c10(
            r,
            t + 0.001,
            "E",
            pt["faildet"],
            f"{self.pgpfx(r)} failure detected by watchdog at work sequence id: {s} PG status: "
            f"last enqueued work: {s}, last completed work: {s - 1}",
        )
        self.c10(
            r,
            t + 0.0012,
            "E",
            pt["stack"],
            "Stack trace of the failed collective not found, potentially because FlightRecorder "
            "is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero "
            "value.",
        )
        self.c10(
            r,
            t + 0.0015,
            "E",
            pt["firstpg"],
            f"{self.pgpfx(r)}First PG on this rank to signal dumping.",
        )
        self.c10(
            r,
            t + 0.002,
            "E",
            pt["dumpsig"],
            f"{self.pgpfx(r)}Received a dump signal due to a collective timeout from this local "
            f"rank and we will try our best to dump the debug info. Last enqueued NCCL work: {s}, "
            f"last completed NCCL work: {s - 1}.{_DUMP_MSG}",
        )
        ta = t + _DUMP_WAIT_S + rng.uniform(0.0, 0.08)
        self.c10(
            r,
            ta,
            "E",
            pt["some"],
            f"[Rank {r.rank}] Some NCCL operations have failed or timed out. Due to the "
            "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
            "corrupted/incomplete data.",
        )
        self.c10(
            r,
            ta + 0.0002,
            "E",
            pt["take"],
            f"[Rank {r.rank}] To avoid data inconsistency, we are taking the entire process down.",
        )
        self.abort_lines(
            r, ta + 0.0005, [caught], f"checkTimeout at {_PGSRC}:{pt['timeout_raise']}", "timeout"
        )

    def watchdog_ncclerr(self, r: _Rank, t: float, last_err: str) -> None:
        pt = self.pt
        s = self.seq_stuck
        v = r.host.nccl
        self.c10(
            r,
            t,
            "E",
            pt["faildet"],
            f"{self.pgpfx(r)} failure detected by watchdog at work sequence id: {s} PG status: "
            f"last enqueued work: {s}, last completed work: {s - 1}",
        )
        ta = t + _DUMP_WAIT_S + self.rng.uniform(0.0, 0.08)
        self.c10(
            r,
            ta,
            "E",
            pt["some"],
            f"[Rank {r.rank}] Some NCCL operations have failed or timed out. Due to the "
            "asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
            "corrupted/incomplete data.",
        )
        self.c10(
            r,
            ta + 0.0002,
            "E",
            pt["take"],
            f"[Rank {r.rank}] To avoid data inconsistency, we are taking the entire process down.",
        )
        inner = [
            f"NCCL error: {_REMOTE_ERR}, NCCL version {v.ver}",
            _DETAIL[_REMOTE_ERR],
            "Last error:",
            last_err,
        ]
        self.abort_lines(
            r,
            ta + 0.0005,
            inner,
            f"checkForNCCLErrorsInternal at {_PGSRC}:{pt['err_raise']}",
            "ncclerr",
        )

    def init_exception(self, r: _Rank, t: float, err: str, last_err: str, nccl_ver: str) -> None:
        """DistBackendError from the comm init under dist.barrier(); the worker exits 1."""
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 301, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 187, in main',
            "    dist.barrier()",
            f'  File "{_SITE}/torch/distributed/c10d_logger.py", line 81, in wrapper',
            "    return func(*args, **kwargs)",
            "           ^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/torch/distributed/distributed_c10d.py", line 4635, in barrier',
            "    work = group.barrier(opts=opts)",
            "           ^^^^^^^^^^^^^^^^^^^^^^^^",
            f"torch.distributed.DistBackendError: NCCL error in: {_PGSRC}:{self.pt['check']}, "
            f"{err}, NCCL version {nccl_ver}",
            _DETAIL[err],
            "Last error:",
            last_err,
        ]
        self.excepthook(r, t, lines)
        self.destroy_warning(r, t + 0.05)
        self.set_exit(r, t + 0.08 + self.rng.uniform(0.0, 0.2), 1)

    def destroy_warning(self, r: _Rank, t: float) -> None:
        self.c10(
            r,
            t,
            "W",
            self.pt["destroy"],
            "Warning: WARNING: destroy_process_group() was not called before program exit, which "
            "can leak resources. For more info, please see "
            "https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())",
        )

    # ---------------------------------------------------------------- agents

    def agent_start(self, h: _Host) -> None:
        rng = self.rng
        t = rng.uniform(0.0, 1.2)
        run = "torch/distributed/run.py:792"
        self.tl(
            h,
            t,
            "W",
            run,
            "\n*****************************************\nSetting OMP_NUM_THREADS environment "
            "variable for each process to be 1 in default, to avoid your system being "
            "overloaded, please further tune the variable for optimal performance in your "
            "application as needed. \n*****************************************",
        )
        logdir = (
            f"/logs/{self.job}"
            if self.layout == "torchrun-logdir"
            else f"/tmp/torchelastic_{h.suffix[::-1]}"
        )
        cfg = (
            "Starting elastic_operator with launch configs:\n"
            "  entrypoint       : train.py\n"
            f"  min_nodes        : {self.nodes}\n"
            f"  max_nodes        : {self.nodes}\n"
            f"  nproc_per_node   : {self.g}\n"
            f"  run_id           : {self.job}\n"
            "  rdzv_backend     : c10d\n"
            f"  rdzv_endpoint    : {self.hosts[0].name}:29400\n"
            "  rdzv_configs     : {'timeout': 900}\n"
            "  max_restarts     : 0\n"
            "  monitor_interval : 0.1\n"
            f"  log_dir          : {logdir}\n"
            "  metrics_cfg      : {}\n"
        )
        self.tl(h, t + 0.002, "I", "torch/distributed/launcher/api.py:194", cfg)
        las = "torch/distributed/elastic/agent/server/local_elastic_agent.py"
        api = "torch/distributed/elastic/agent/server/api.py"
        self.tl(
            h, t + 0.004, "I", f"{las}:240", f"log directory set to: {logdir}/{self.job}_{h.suffix}"
        )
        self.tl(
            h, t + 0.005, "I", f"{api}:870", "[default] starting workers for entrypoint: python3"
        )
        self.tl(h, t + 0.006, "I", f"{api}:677", "[default] Rendezvous'ing worker group")
        node = f"{h.name}_{h.agent_pid}_0"
        dyn = "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"
        self.tl(
            h,
            t + 0.2,
            "I",
            f"{dyn}:1144",
            f"The node '{node}' attempts to join the next round of the rendezvous '{self.job}'.",
        )
        tj = self.t_rdzv - rng.uniform(0.05, 0.3)
        self.tl(
            h,
            tj,
            "I",
            f"{dyn}:1181",
            f"The node '{node}' has joined round 0 of the rendezvous '{self.job}' as rank {h.idx} "
            f"in a world of size {self.nodes}.",
        )
        ranks = [self.ranks[r].rank for r in h.ranks]
        res = (
            "[default] Rendezvous complete for workers. Result:\n"
            "  restart_count=0\n"
            f"  master_addr={self.hosts[0].name}\n"
            f"  master_port={self.master_port}\n"
            f"  group_rank={h.idx}\n"
            f"  group_world_size={self.nodes}\n"
            f"  local_ranks={list(range(self.g))}\n"
            f"  role_ranks={ranks}\n"
            f"  global_ranks={ranks}\n"
            f"  role_world_sizes={[self.n] * self.g}\n"
            f"  global_world_sizes={[self.n] * self.g}\n"
        )
        tr = self.t_rdzv + rng.uniform(0.0, 0.05)
        self.tl(h, tr, "I", f"{api}:525", res)
        self.tl(h, tr + 0.001, "I", f"{api}:685", "[default] Starting worker group")
        self.tl(h, tr + 0.002, "I", f"{las}:298", "use_agent_store: True")
        self.tl(
            h,
            tr + 0.003,
            "I",
            f"{las}:192",
            "Environment variable 'TORCHELASTIC_ENABLE_FILE_TIMER' not found. Do not start "
            "FileTimerServer.",
        )
        self.tl(
            h,
            tr + 0.004,
            "I",
            f"{las}:236",
            "Environment variable 'TORCHELASTIC_HEALTH_CHECK_PORT' not found. Do not start health "
            "check.",
        )

    def agent_success(self, h: _Host, t: float) -> None:
        api = "torch/distributed/elastic/agent/server/api.py"
        self.tl(
            h,
            t,
            "I",
            f"{api}:879",
            "[default] worker group successfully finished. Waiting 300 seconds for other agents "
            "to finish.",
        )
        self.tl(
            h,
            t + 0.001,
            "I",
            f"{api}:932",
            "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other "
            "agents to finish",
        )
        self.tl(
            h,
            t + 1.2,
            "I",
            f"{api}:946",
            f"Done waiting for other agents. Elapsed: {1.2 + self.rng.uniform(0, 0.3):.4f} seconds",
        )

    def _torchrun_tb(self) -> list[str]:
        return [
            "Traceback (most recent call last):",
            '  File "/usr/local/bin/torchrun", line 8, in <module>',
            "    sys.exit(main())",
            "             ^^^^^^",
            f'  File "{_SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", '
            "line 355, in wrapper",
            "    return f(*args, **kwargs)",
            "           ^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/torch/distributed/run.py", line 892, in main',
            "    run(args)",
            f'  File "{_SITE}/torch/distributed/run.py", line 883, in run',
            "    elastic_launch(",
            f'  File "{_SITE}/torch/distributed/launcher/api.py", line 139, in __call__',
            "    return launch_agent(self._config, self._entrypoint, list(args))",
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        ]

    def host_failure(self, h: _Host, t1: float) -> None:
        """The agent of h saw a worker exit at t1: SIGTERM the rest, report, exit."""
        rng = self.rng
        poll = t1 + rng.uniform(0.005, 0.1)
        alive = [r for r in h.ranks if self.death[r] == math.inf]
        failed = sorted((r for r in alive if self.nat_t[r] <= poll), key=lambda r: self.nat_t[r])
        termed = [r for r in alive if r not in failed]
        mp = "torch/distributed/elastic/multiprocessing/api.py"
        for r in failed:
            self.death[r] = self.nat_t[r]
            self.exitc[r] = self.nat_code[r]
        t = poll
        for r in termed:
            self.tl(
                h,
                t,
                "W",
                f"{mp}:897",
                f"Sending process {self.ranks[r].pid} closing signal SIGTERM",
            )
            self.death[r] = t + rng.uniform(0.02, 0.6)
            self.exitc[r] = -15
            t += 0.0004
        # every failure of one poll carries the same timestamp; the first in local-rank
        # order is logged (and reported as the root cause)
        first = min(failed, key=lambda r: self.ranks[r].local)
        fr = self.ranks[first]
        mark = 0
        if self.scenario == "oom_kill" and first == self.cr:
            mark = _mark(_ROOT, 0)
        t_failed = max((self.death[r] for r in termed), default=t) + 0.01
        self.tl(
            h,
            t_failed,
            "E",
            f"{mp}:869",
            f"failed (exitcode: {self.nat_code[first]}) local_rank: {fr.local} (pid: {fr.pid}) "
            "of binary: /usr/bin/python3",
            mark=mark,
        )
        stamp = self.clock.cfe(poll + h.offset)
        blocks: list[str] = []
        for idx, r in enumerate(sorted(failed)):
            rr = self.ranks[r]
            code = self.nat_code[r]
            if code < 0:
                sig = {-6: "SIGABRT", -9: "SIGKILL", -15: "SIGTERM"}.get(code, "SIGSEGV")
                tb = f"Signal {-code} ({sig}) received by PID {rr.pid}"
            else:
                tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
            blocks.append(
                f"[{idx}]:\n"
                f"  time      : {stamp}\n"
                f"  host      : {h.name}.cluster.local\n"
                f"  rank      : {r} (local_rank: {rr.local})\n"
                f"  exitcode  : {code} (pid: {rr.pid})\n"
                "  error_file: <N/A>\n"
                f"  traceback : {tb}"
            )
        root_i = 0  # equal timestamps: the first failure in rank order is reported as root
        others = [b for i, b in enumerate(blocks) if i != root_i]
        tb_lines = [
            *self._torchrun_tb(),
            f'  File "{_SITE}/torch/distributed/launcher/api.py", line 270, in launch_agent',
            "    raise ChildFailedError(",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "=" * 60,
            "train.py FAILED",
            "-" * 60,
            "Failures:",
            "\n".join(others) if others else "  <NO_OTHER_FAILURES>",
            "-" * 60,
            "Root Cause (first observed failure):",
            blocks[root_i],
            "=" * 60,
        ]
        self.agent_raw(h, t_failed + rng.uniform(0.2, 0.6), "\n".join(tb_lines))
        self.host_dead[h.idx] = True
        self.host_exit[h.idx] = t_failed + 0.7

    def host_rdzv_error(self, h: _Host, t: float) -> None:
        """The rendezvous store on node 0 went away: the agent shuts down its workers."""
        rng = self.rng
        mp = "torch/distributed/elastic/multiprocessing/api.py"
        api = "torch/distributed/elastic/agent/server/api.py"
        self.tl(h, t, "I", f"{api}:727", "[default] Stopping worker group")
        tt = t + 0.001
        for r in h.ranks:
            if self.death[r] != math.inf:
                continue
            self.tl(
                h,
                tt,
                "W",
                f"{mp}:897",
                f"Sending process {self.ranks[r].pid} closing signal SIGTERM",
            )
            self.death[r] = tt + rng.uniform(0.02, 0.6)
            self.exitc[r] = -15
            tt += 0.0004
        c10r = "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"
        dyn = "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"
        lines = [
            "Traceback (most recent call last):",
            f'  File "{_SITE}/{c10r}", line 113, in _call_store',
            "    return getattr(self._store, store_op)(*args, **kwargs)",
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            *self._torchrun_tb(),
            f'  File "{_SITE}/torch/distributed/launcher/api.py", line 261, in launch_agent',
            "    result = agent.run()",
            "             ^^^^^^^^^^^",
            f'  File "{_SITE}/torch/distributed/elastic/metrics/api.py", line 138, in wrapper',
            "    result = f(*args, **kwargs)",
            "             ^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/{api}", line 711, in run',
            "    result = self._invoke_run(role)",
            "             ^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/{api}", line 906, in _invoke_run',
            "    num_nodes_waiting = rdzv_handler.num_nodes_waiting()",
            "                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/{dyn}", line 1263, in num_nodes_waiting',
            "    self._state_holder.sync()",
            f'  File "{_SITE}/{dyn}", line 437, in sync',
            "    get_response = self._backend.get_state()",
            "                   ^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/{c10r}", line 75, in get_state',
            '    base64_state: bytes = self._call_store("get", self._key)',
            "                          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/{c10r}", line 115, in _call_store',
            "    raise RendezvousConnectionError(",
            "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection "
            "to the C10d store has failed. See inner exception for details.",
        ]
        self.agent_raw(h, tt + 0.7, "\n".join(lines))
        self.host_dead[h.idx] = True
        self.host_exit[h.idx] = tt + 0.8

    def run_fleet(self) -> None:
        """Process worker exits in time order: agents, SIGTERM, cascades, rendezvous loss."""
        for h in self.hosts:
            ts = [self.nat_t[r] for r in h.ranks if self.nat_t[r] < math.inf]
            if ts:
                self.push(min(ts), 0, h.idx, -1)
        rdzv_pushed = False
        while self.heap:
            t, sq, kind, hi, ri = heapq.heappop(self.heap)
            h = self.hosts[hi]
            if kind == 2:
                fn = self.triggers.pop(sq)
                if not self.host_dead[hi] and self.death[ri] == math.inf:
                    fn()
                continue
            if self.host_dead[hi]:
                continue
            if kind == 1:
                self.host_rdzv_error(h, t)
                continue
            alive = [r for r in h.ranks if self.death[r] == math.inf]
            t1 = min(self.nat_t[r] for r in alive)
            if t1 > t + 1e-9:
                continue
            self.host_failure(h, t1)
            if self.cascade is not None:
                self.cascade(hi, max(self.death[r] for r in h.ranks))
            if hi == 0 and not rdzv_pushed:
                rdzv_pushed = True
                for o in self.hosts:
                    if not self.host_dead[o.idx]:
                        self.push(self.host_exit[0] + self.rng.uniform(0.3, 1.5), 1, o.idx, -1)

    # ---------------------------------------------------------------- scenarios

    def build(self) -> None:
        for h in self.hosts:
            self.agent_start(h)
        getattr(self, f"s_{self.scenario}")()

    def _timeouts_for_all(self, skip: Iterable[int] = (), desync: list[str] | None = None) -> None:
        skip_set = set(skip)
        t_enq0 = self.t_last + self.rng.uniform(0.25, 0.6)
        for r in self.ranks:
            if r.rank in skip_set:
                continue
            t_enq = t_enq0 + self.rng.uniform(0.0, 0.06)
            self.watchdog_timeout(r, t_enq, desync if r.rank == 0 else None)

    def _full_baseline(self, upto_culprit: int | None = None) -> None:
        for r in self.ranks:
            self.baseline(r)
            self.training(r, upto_culprit if r.rank == self.cr else None)

    def _culprit_time(self) -> float:
        return self.t_last + self.rng.uniform(0.2, 1.2)

    def _rail_peers(self) -> list[_Rank]:
        out: list[_Rank] = []
        for dh in (-1, 1):
            oh = (self.ch + dh) % self.nodes
            if oh != self.ch:
                p = self.ranks[oh * self.g + self.cl]
                if p not in out:
                    out.append(p)
        return out

    def s_wrong_iface(self) -> None:
        rng = self.rng
        H, g = self.ch, self.g
        fail_t: dict[int, float] = {}
        for r in self.ranks:
            fail_t[r.rank] = self.baseline(r, "bootstrap")
        first = H * g  # rank whose docker0 address others must reach
        victim = self.ranks[first - 1]  # its bootstrap-ring predecessor
        cul = self.ranks[first]
        r0 = self.ranks[0]
        t_b = max(fail_t.values()) + rng.uniform(0.05, 0.2)
        t_root = t_b + rng.uniform(0.0, 0.02)
        t_prev = t_b + rng.uniform(0.0, 0.02)
        v = self.nccl
        src = _WSRC["2.21.5"]["connect"]
        msg_root = (
            f"socketStartConnect: Connect to 172.17.0.1<{cul.port}> failed : Network is unreachable"
        )
        ring_port = cul.port + rng.randint(1, 400)  # its bootstrap-ring listener
        msg_prev = (
            f"socketStartConnect: Connect to 172.17.0.1<{ring_port}> failed : Network is "
            "unreachable"
        )
        tid_root = r0.pid + 89
        root_first = t_root <= t_prev
        self.warn(
            r0, t_root, src, msg_root, tid=tid_root, dev=0, mark=_FIRST if root_first else _ALT
        )
        self.chain(r0, t_root + 0.0002, "root", 2, tid=tid_root)
        self.warn(victim, t_prev, src, msg_prev, mark=_ALT if root_first else _FIRST)
        self.chain(victim, t_prev + 0.0002, "connect", 2)
        self.init_exception(victim, t_prev + 0.01, _SYS_ERR, msg_prev, v.ver)
        self.root_meta = (cul.rank, cul.host.name, "nccl_iface_unreachable")
        fw, alt = (r0, victim) if root_first else (victim, r0)
        self.first_meta = (fw.rank, fw.host.name, "nccl_sock_connect_failed")
        self.alt_meta = (alt.rank, alt.host.name, "nccl_sock_connect_failed")
        self.notes.append(
            f"{cul.host.name} picked docker0 (172.17.0.1) for bootstrap and NET/Socket; the "
            f"bootstrap root (rank 0) and rank {victim.rank} cannot reach it. Hosts before it "
            "fail one by one through the bootstrap ring; hosts from it on hang waiting for the "
            "root and are shut down when the rendezvous store on node 0 disappears."
        )

        def cascade(hi: int, t_dead: float) -> None:
            # only the hosts before the culprit have a connected bootstrap ring
            if hi == 0 or hi > H:
                return
            prev_h = self.hosts[hi - 1]
            b = self.ranks[prev_h.ranks[-1]]
            dead_peer = self.ranks[hi * g]
            t = t_dead + rng.uniform(0.02, 0.3)

            def fire(b: _Rank = b, dead_peer: _Rank = dead_peer, t: float = t) -> None:
                s, m = self.net_closed_msg(dead_peer, False, b.host.nccl)
                self.warn(b, t, s, m)
                self.chain(b, t + 0.0002, "closed", 6)
                self.init_exception(b, t + 0.01, _REMOTE_ERR, m, b.host.nccl.ver)

            self.trigger(t, b, fire)

        self.cascade = cascade
        self.run_fleet()

    def s_ib_link_down(self) -> None:
        rng = self.rng
        self._full_baseline()
        cul = self.ranks[self.cr]
        T = self._culprit_time()
        hca = f"mlx5_{cul.local}"
        self.warn(
            cul,
            T,
            _WSRC["2.21.5"]["async"],
            f"NET/IB : {hca}:1 Got async event : port error",
            tid=cul.tid_async,
            dev=0,
            mark=_ROOT,
        )
        self.root_meta = (cul.rank, cul.host.name, "nccl_ib_async_event")
        peers = self._rail_peers()
        v = self.nccl
        length = 524288
        last = ""
        for p in peers:
            tp = T + _IB_RETRY_S + rng.uniform(-1.5, 1.5)
            m12 = self.wc_msg(v, cul, 12, f"mlx5_{p.local}", length)
            self.warn(p, tp, _WSRC["2.21.5"]["wc"], m12, tid=p.tid_prog)
            self.chain(p, tp + 0.0001, "wc", 6, tid=p.tid_prog)
            self.info(p, tp + 0.0003, "proxy.cc:903 -> 6 [Progress Thread]", p.tid_prog)
            for k in range(rng.randint(2, 3)):
                m5 = self.wc_msg(v, cul, 5, f"mlx5_{p.local}", 0)
                self.warn(p, tp + 0.001 + k * 0.0005, _WSRC["2.21.5"]["wc"], m5, tid=p.tid_prog)
                last = m5
            self.watchdog_ncclerr(p, tp + rng.uniform(0.05, 0.2), last)
        # the culprit's own QPs go to error too
        tc = T + _IB_RETRY_S + rng.uniform(-1.0, 1.0)
        if peers:
            m12 = self.wc_msg(v, peers[-1], 12, hca, length)
            self.warn(cul, tc, _WSRC["2.21.5"]["wc"], m12, tid=cul.tid_prog)
            m5 = self.wc_msg(v, peers[0], 5, hca, 0)
            self.warn(cul, tc + 0.001, _WSRC["2.21.5"]["wc"], m5, tid=cul.tid_prog)
            self.watchdog_ncclerr(cul, tc + rng.uniform(0.05, 0.2), m5)
        self._timeouts_for_all()
        self.notes.append(
            f"{hca} port 1 on {cul.host.name} (rank {cul.rank}) went down at true "
            f"t={T:.3f}s; its rail peers {[p.rank for p in peers]} see status=12 about 30 s "
            "later and status=5 flushes; everyone else times out."
        )
        self.run_fleet()

    def s_cuda_error(self) -> None:
        rng = self.rng
        self._full_baseline()
        cul = self.ranks[self.cr]
        T = self._culprit_time()
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 301, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 262, in main',
            "    total_loss += loss.item()",
            "                  ^^^^^^^^^^^",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            *_CUDA_HINTS,
            "",
        ]
        self.excepthook(cul, T, lines, mark_at=6)
        self.destroy_warning(cul, T + 0.2)
        self.set_exit(cul, T + 0.35, 1)
        self.root_meta = (cul.rank, cul.host.name, "pt_cuda_error")
        v = self.nccl
        for p in self._rail_peers():
            tp = T + _IB_RETRY_S + rng.uniform(-1.0, 2.0)
            m12 = self.wc_msg(v, cul, 12, f"mlx5_{p.local}", 1048576)
            self.warn(p, tp, _WSRC["2.26.2"]["wc"], m12, tid=p.tid_prog)
            self.chain(p, tp + 0.0001, "wc", 6, tid=p.tid_prog)
            self.info(p, tp + 0.0003, "proxy.cc:929 -> 6 [Progress Thread]", p.tid_prog)
            self.watchdog_ncclerr(p, tp + rng.uniform(0.05, 0.2), m12)
        self._timeouts_for_all(skip=[cul.rank])
        self.notes.append(
            f"rank {cul.rank} on {cul.host.name} hit an illegal memory access at true "
            f"t={T:.3f}s and exited 1; its IB rail peers report status=12 ~30 s later; the "
            "rest time out."
        )
        self.run_fleet()

    def s_oom_kill(self) -> None:
        rng = self.rng
        self._full_baseline()
        cul = self.ranks[self.cr]
        h = cul.host
        T = self._culprit_time()
        self.set_exit(cul, T, -9)
        self.root_meta = (cul.rank, h.name, "elastic_worker_killed")
        if self.layout == "per-rank":
            self.kern(
                h,
                -3100.0,
                _NVRM_LOAD,
            )
            self.kern(
                h,
                T - 0.04,
                "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
                "order=0, oom_score_adj=0",
            )
            self.kern(
                h,
                T - 0.03,
                "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
                f"global_oom,task_memcg=/system.slice/slurmstepd.scope,task=python3,pid={cul.pid},"
                "uid=1000",
            )
            self.kern(
                h,
                T - 0.02,
                f"Out of memory: Killed process {cul.pid} (python3) total-vm:1095736240kB, "
                "anon-rss:1002345120kB, file-rss:123456kB, shmem-rss:2097152kB, UID:1000 "
                "pgtables:1987654kB oom_score_adj:0",
            )
        self.notes.append(
            f"rank {cul.rank} (pid {cul.pid}) on {h.name} was SIGKILLed by the kernel OOM killer "
            f"at true t={T:.3f}s with no last words; the agent reports exitcode -9; socket "
            "neighbours on the adjacent hosts see the connection close; the rest time out."
        )
        g = self.g

        def cascade(hi: int, t_dead: float) -> None:
            if hi != self.ch or self.nodes < 2:
                return
            pairs = [
                (self.ranks[((hi - 1) % self.nodes) * g + g - 1], self.ranks[hi * g], False),
                (self.ranks[((hi + 1) % self.nodes) * g], self.ranks[hi * g + g - 1], True),
            ]
            seen: set[int] = set()
            for b, dead, recv in pairs:
                if b.host.idx == hi or b.rank in seen:
                    continue
                seen.add(b.rank)
                t = self.death[dead.rank] + rng.uniform(0.001, 0.03)

                def fire(b: _Rank = b, dead: _Rank = dead, recv: bool = recv, t: float = t) -> None:
                    s, m = self.net_closed_msg(dead, recv, b.host.nccl)
                    self.warn(b, t, s, m, tid=b.tid_prog)
                    self.chain(b, t + 0.0002, "net_closed", 6, tid=b.tid_prog)
                    self.info(b, t + 0.0005, "proxy.cc:929 -> 6 [Progress Thread]", b.tid_prog)
                    self.watchdog_ncclerr(b, t + rng.uniform(0.05, 0.2), m)

                self.trigger(t, b, fire)

        self.cascade = cascade
        self._timeouts_for_all(skip=[cul.rank])
        self.run_fleet()

    def s_desync(self) -> None:
        self._full_baseline()
        cul = self.ranks[self.cr]
        s = self.seq_stuck
        others = [r for r in range(self.n) if r != cul.rank]
        report = [
            f"\t - [0] Timeout at collective: ALLREDUCE, #{s}",
            "\t - To our best knowledge, the lagging/dead/mismatched ranks that caused the "
            "desync are:",
            f"\t     [{cul.rank}] finished collective #{s - 1}, but didn't join collective "
            f"#{s} (count from 1)",
            "\t - Snapshot of ranks' latest states:",
            f"\t   #{s} started ranks:",
            f"\t     [{', '.join(map(str, others))}] started ALLREDUCE",
            f"\t   #{s - 1} finished ranks:",
            f"\t     [{cul.rank}] finished ALLREDUCE",
        ]
        self.root_meta = (cul.rank, cul.host.name, "pt_desync_report")
        self._timeouts_for_all(skip=[cul.rank], desync=report)
        self.notes.append(
            f"rank {cul.rank} on {cul.host.name} hung on the CPU side after step {self.steps} "
            f"and never enqueued SeqNum={s}; every other rank times out on SeqNum={s}; rank 0 "
            "(TORCH_NCCL_DESYNC_DEBUG=1) names it in the desync report; it is SIGTERMed by its "
            "agent."
        )
        self.run_fleet()

    def s_version_mismatch(self) -> None:
        rng = self.rng
        fail_t = [self.baseline(r, "bootstrap") for r in self.ranks]
        t_det = max(fail_t) + rng.uniform(0.2, 0.5)
        odd = self.ranks[self.cr]
        old = odd.host.nccl
        for r in self.ranks:
            v = r.host.nccl
            if r.host is odd.host:
                other, over = 0, self.nccl.code
            else:
                other, over = odd.rank, old.code
            msg = (
                f"Mismatched NCCL version detected : rank {r.rank} version {v.code} "
                f"rank {other} version {over}"
            )
            t = t_det + rng.uniform(0.0, 0.03)
            self.warn(r, t, _WSRC[v.ver]["mismatch"], msg)
            self.chain(r, t + 0.0002, "mismatch", 5)
            self.init_exception(r, t + 0.01, _USAGE_ERR, msg, v.ver)
        self.root_meta = (odd.rank, odd.host.name, "nccl_version_banner")
        self.notes.append(
            f"{odd.host.name} loaded NCCL {old.ver} while the job uses {self.nccl.ver}; the "
            "node-local communicators initialise fine, the default one fails on every rank "
            "with invalid usage. The banner is printed by each host's local rank 0 only."
        )
        self.run_fleet()

    def s_shm_full(self) -> None:
        rng = self.rng
        cul = self.ranks[self.cr]
        # every rank blocks in the default communicator's transport setup
        ends = {r.rank: self.baseline(r, "transport") for r in self.ranks}
        T = ends[cul.rank] + rng.uniform(0.01, 0.05)
        seg = "/dev/shm/nccl-" + "".join(
            rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
            for _ in range(6)
        )
        src = _WSRC["2.27.7"]
        self.warn(
            cul,
            T,
            src["shm_extend"],
            f"Error: failed to extend {seg} to {_SHM_SIZE} bytes, error: No space left on device "
            "(28)",
            mark=_ROOT,
        )
        m2 = (
            f"Error while creating shared memory segment {seg} (size {_SHM_SIZE}), error: No "
            "space left on device (28)"
        )
        self.warn(cul, T + 0.0003, src["shm_seg"], m2)
        self.chain(cul, T + 0.0005, "shm", 2)
        self.init_exception(cul, T + 0.01, _SYS_ERR, m2, self.nccl.ver)
        self.root_meta = (cul.rank, cul.host.name, "nccl_shm_extend_failed")
        for lr in cul.host.ranks:
            if lr == cul.rank:
                continue
            p = self.ranks[lr]
            tp = T + rng.uniform(0.005, 0.06)
            m = (
                f"Error while attaching to shared memory segment {seg} (size {_SHM_SIZE}), "
                "error: No such file or directory (2)"
            )
            self.warn(p, tp, src["shm_seg"], m)
            self.chain(p, tp + 0.0003, "shm", 2)
            self.init_exception(p, tp + 0.01, _SYS_ERR, m, self.nccl.ver)
        self.notes.append(
            f"/dev/shm of {cul.host.name} is full: rank {cul.rank} cannot extend its NCCL "
            "segment during the default communicator's transport setup, its local peers fail to "
            "attach, and the loss propagates around the bootstrap ring."
        )
        g = self.g

        def cascade(hi: int, t_dead: float) -> None:
            if self.nodes < 2:
                return
            for dh, recv in ((1, True), (-1, False)):
                oh = (hi + dh) % self.nodes
                if self.host_dead[oh] or oh == hi:
                    continue
                b = self.ranks[oh * g] if recv else self.ranks[oh * g + g - 1]
                dead = self.ranks[hi * g + g - 1] if recv else self.ranks[hi * g]
                t = t_dead + rng.uniform(0.05, 0.4)

                def fire(b: _Rank = b, dead: _Rank = dead, recv: bool = recv, t: float = t) -> None:
                    s, m = self.net_closed_msg(dead, recv, b.host.nccl)
                    self.warn(b, t, s, m)
                    self.chain(b, t + 0.0002, "closed", 6)
                    self.init_exception(b, t + 0.01, _REMOTE_ERR, m, b.host.nccl.ver)

                self.trigger(t, b, fire)

        self.cascade = cascade
        self.run_fleet()

    def s_cuda_oom(self) -> None:
        rng = self.rng
        self._full_baseline()
        cul = self.ranks[self.cr]
        T = self._culprit_time()
        total = 79.10
        free = round(rng.uniform(0.4, 1.9), 2)
        used = round(total - free, 2)
        alloc = round(used - rng.uniform(2.5, 4.0), 2)
        reserved = round(rng.uniform(0.8, 2.4), 2)
        oom = (
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
            f"{cul.local} has a total capacity of {total:.2f} GiB of which {free:.2f} GiB is "
            f"free. Process {cul.pid} has {used:.2f} GiB memory in use. Of the allocated memory "
            f"{alloc:.2f} GiB is allocated by PyTorch, and {reserved:.2f} GiB is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 301, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 249, in main',
            "    loss = model(**batch).loss",
            "           ^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/torch/nn/modules/module.py", line 1751, in _wrapped_call_impl',
            "    return self._call_impl(*args, **kwargs)",
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            f'  File "{_SITE}/torch/nn/modules/module.py", line 1762, in _call_impl',
            "    return forward_call(*args, **kwargs)",
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            '  File "/workspace/model.py", line 412, in forward',
            "    logits = self.lm_head(hidden_states).float()",
            "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
            oom,
        ]
        self.excepthook(cul, T, lines, mark_at=len(lines) - 1)
        self.destroy_warning(cul, T + 0.15)
        self.set_exit(cul, T + 0.3, 1)
        self.root_meta = (cul.rank, cul.host.name, "pt_cuda_oom")
        self._timeouts_for_all(skip=[cul.rank])
        self.notes.append(
            f"rank {cul.rank} on {cul.host.name} ran out of GPU memory at true t={T:.3f}s and "
            "exited 1; everybody else times out 10 minutes later."
        )
        self.run_fleet()

    def s_xid79(self) -> None:
        rng = self.rng
        self._full_baseline()
        cul = self.ranks[self.cr]
        h = cul.host
        T = self._culprit_time()
        bdf = f"0000:{cul.bus[:2]}:00"
        self.kern(
            h, -3100.0, "nvidia-nvlink: Nvlink Core is being initialized, major device number 509"
        )
        self.kern(
            h,
            -3099.8,
            _NVRM_LOAD,
        )
        uuid = "-".join(f"{rng.getrandbits(n * 4):0{n}x}" for n in (8, 4, 4, 4, 12))
        self.kern(h, T, f"NVRM: GPU at PCI:{bdf}: GPU-{uuid}")
        self.kern(
            h, T + 0.0001, f"NVRM: GPU Board Serial Number: 16543210{rng.randint(10000, 99999)}"
        )
        self.kern(
            h,
            T + 0.0002,
            f"NVRM: Xid (PCI:{bdf}): 79, pid={cul.pid}, name=python3, GPU has fallen off the bus.",
            mark=_mark(_ROOT, 0),
        )
        self.kern(h, T + 0.0003, f"NVRM: GPU {bdf}.0: GPU has fallen off the bus.")
        self.root_meta = (cul.rank, h.name, "xid_79")
        crash = (self.seed // 2) % 2 == 0
        if crash:
            tc = T + rng.uniform(0.3, 2.0)
            inner = ["CUDA error: unspecified launch failure", *_CUDA_HINTS, ""]
            self.abort_lines(
                cul,
                tc,
                inner,
                "c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43",
                "cuda",
            )
        else:
            th = T + _HEARTBEAT_S + rng.uniform(0.0, 8.0)
            self.c10(
                cul,
                th,
                "E",
                self.pt["heart"],
                self.pgpfx(cul) + _HEARTBEAT_MSG.format(s=int(_HEARTBEAT_S)),
            )
            self.c10(
                cul,
                th + 0.5,
                "F",
                self.pt["fatal"],
                f"{self.pgpfx(cul)}Terminating the process after attempting to dump debug info, "
                "due to ProcessGroupNCCL watchdog hang.",
            )
            self.set_exit(cul, th + 0.52, -6)
        self._timeouts_for_all(skip=[cul.rank])
        self.notes.append(
            f"GPU {bdf} (busId {cul.bus}, rank {cul.rank}) on {h.name} fell off the bus at true "
            f"t={T:.3f}s; the rank "
            + ("fails with a CUDA error" if crash else "hangs until the heartbeat monitor kills it")
            + "; the other hosts time out."
        )
        self.run_fleet()

    def _healthy_common(self, noisy: bool) -> None:
        rng = self.rng
        for r in self.ranks:
            self.baseline(r)
            self.training(r)
            if noisy and rng.random() < 0.05:
                tw = self.t_step(2) + rng.uniform(0.1, 0.5)
                stamp = self.clock.tl(self._h(r, tw))
                pre = f"[rank{r.rank}]:W{stamp} {r.pid} torch/_dynamo/convert_frame.py:964]"
                self.err(
                    r,
                    tw,
                    f"{pre} [0/8] torch._dynamo hit config.recompile_limit (8)\n"
                    f"{pre} [0/8]    function: 'forward' (/workspace/model.py:388)\n"
                    f"{pre} [0/8]    last reason: 0/7: tensor 'L['input_ids']' size mismatch at "
                    "index 1. expected 4096, actual 3968\n"
                    f"{pre} [0/8] To log all recompilation reasons, use "
                    'TORCH_LOGS="recompiles".',
                )
            t_end = self.t_last + rng.uniform(0.5, 1.0)
            if r.rank == 0:
                self.app(
                    r,
                    t_end - 0.3,
                    "INFO",
                    f"training done: {self.steps} steps in {self.steps * self.step_dt:.1f}s",
                )
            for k, (comm, intra) in enumerate(((r.comm_intra, True), (r.comm, False))):
                rank = r.local if intra else r.rank
                nranks = self.g if intra else self.n
                self.info(
                    r,
                    t_end + k * 0.01,
                    f"comm {comm} rank {rank} nranks {nranks} cudaDev {r.local} busId {r.bus} - "
                    "Destroy COMPLETE",
                )
            self.nat_t[r.rank] = t_end + 0.3
            self.death[r.rank] = t_end + 0.3 + rng.uniform(0.0, 0.2)
        for h in self.hosts:
            t = max(self.death[r] for r in h.ranks) + rng.uniform(0.01, 0.1)
            self.agent_success(h, t)

    def s_healthy(self) -> None:
        self._healthy_common(False)
        self.notes.append("clean run with harmless warnings; no diagnosis expected")

    def s_healthy_noisy(self) -> None:
        self._healthy_common(True)
        self.notes.append(
            "clean run with two CUDA driver versions, P2P-disabled INFO, connect retries and "
            "dynamo recompile warnings; no diagnosis expected"
        )

    # ---------------------------------------------------------------- writing

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        lay = self.layout
        if lay == "per-rank":
            for r in self.ranks:
                self._write_file(out, f"rank-{r.rank}.log", [(self._alive(r), "")])
            for h in self.hosts:
                self._write_file(out, f"agent-{h.name}.log", [(self.arecs[h.idx], "")])
        elif lay == "per-node":
            for h in self.hosts:
                parts: list[tuple[list[Rec], str]] = [
                    (self._alive(self.ranks[r]), f"[default{self.ranks[r].local}]:")
                    for r in h.ranks
                ]
                parts.append((self.arecs[h.idx], ""))
                self._write_file(out, f"{h.name}.log", parts)
        else:
            for h in self.hosts:
                base = f"{h.name}/{self.job}_{h.suffix}/attempt_0"
                for ri in h.ranks:
                    r = self.ranks[ri]
                    recs = self._alive(r)
                    self._write_file(
                        out,
                        f"{base}/{r.local}/stdout.log",
                        [([x for x in recs if x[1] == _OUT], "")],
                    )
                    self._write_file(
                        out,
                        f"{base}/{r.local}/stderr.log",
                        [([x for x in recs if x[1] == _ERR], "")],
                    )
                self._write_file(out, f"{h.name}/agent.log", [(self.arecs[h.idx], "")])
        for hi, recs in self.krecs.items():
            self._write_file(out, f"dmesg-{self.hosts[hi].name}.log", [(recs, "")])

    def _alive(self, r: _Rank) -> list[Rec]:
        d = self.death[r.rank]
        recs = self.recs[r.rank]
        if d == math.inf:
            return recs
        return [x for x in recs if x[0] <= d]

    def _write_file(self, out: Path, rel: str, parts: list[tuple[list[Rec], str]]) -> None:
        merged: list[tuple[float, int, str, int, str]] = []
        for recs, pre in parts:
            merged.extend((t, i, text, mark, pre) for i, (t, _s, text, mark) in enumerate(recs))
        merged.sort(key=lambda x: x[0])
        chunks: list[str] = []
        times: list[float] = []
        for t, _i, text, mark, pre in merged:
            if pre:
                chunks.append(pre + text.replace("\n", "\n" + pre))
            else:
                chunks.append(text)
            times.extend([t] * (text.count("\n") + 1))
            if mark:
                kind, idx = _unmark(mark)
                line = text.split("\n")[idx]
                self.located[kind] = (rel, pre + line)
        path = out / rel
        if path.parent not in self.made_dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.made_dirs.add(path.parent)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            if chunks:
                f.write("\n".join(chunks))
                f.write("\n")
        if self.line_times is not None:
            self.line_times[rel] = times

    def truth(self) -> Truth:
        def entry(kind: int, meta: tuple[int, str, str] | None) -> dict[str, Any] | None:
            if meta is None:
                return None
            loc = self.located.get(kind)
            if loc is None:
                raise RuntimeError(f"{self.scenario}: marked line was not written (kind {kind})")
            return {
                "rank": meta[0],
                "host": meta[1],
                "line": loc[1],
                "signature": meta[2],
                "file": loc[0],
            }

        first = entry(_FIRST, self.first_meta)
        alt = entry(_ALT, self.alt_meta)
        if first is not None and alt is not None:
            # printed within milliseconds on different hosts without timestamps: which one
            # came first cannot be told from the logs, so both are acceptable
            first["equivalent"] = [alt]
        return Truth(
            job=self.job,
            scenario=self.scenario,
            ranks=self.n,
            layout=self.layout,
            expect_diagnosis=self.root_meta is not None,
            root_cause=entry(_ROOT, self.root_meta),
            first_warning=first,
            host_offsets_s={h.name: h.offset for h in self.hosts},
            notes=" ".join(self.notes),
        )


# --------------------------------------------------------------------------------------------
# public API


def generate(
    scenario: str,
    out_dir: Path,
    ranks: int = 64,
    gpus_per_node: int = 8,
    layout: str = "per-rank",
    skew_s: float = 5.0,
    seed: int = 0,
    steps: int = 20,
    job: str | None = None,
    line_times: dict[str, list[float]] | None = None,
) -> Truth:
    """Write the logs of one scenario into ``out_dir`` (plus ``truth.json``) and return the truth.

    Use an empty ``out_dir``: files of an earlier run with another layout are not removed.
    ``line_times``, when given, receives for each file written (its path relative to
    ``out_dir``) the true time of every line in it, in seconds after ``START_MS`` on the
    true clock (host clocks run at true time + ``host_offsets_s``): the moments a log
    shipper could read them, for feeding the lines as timed records.
    """
    gen = _Gen(scenario, ranks, gpus_per_node, layout, skew_s, seed, steps, job)
    gen.line_times = line_times
    gen.build()
    out_dir = Path(out_dir)
    gen.write(out_dir)
    truth = gen.truth()
    (out_dir / "truth.json").write_text(truth.to_json(), encoding="utf-8")
    return truth


def check_truth(out_dir: Path, truth: Truth) -> list[str]:
    """Problems with ``truth``: the marked lines must be lines of their ``file``.

    Also reports (as ``note:`` entries) other files that contain the same line verbatim.
    """
    problems: list[str] = []
    files = [p for p in Path(out_dir).rglob("*.log") if p.is_file()]
    entries: list[tuple[str, dict[str, Any] | None]] = [
        ("root_cause", truth.root_cause),
        ("first_warning", truth.first_warning),
    ]
    if truth.first_warning:
        entries += [
            ("first_warning.equivalent", e) for e in truth.first_warning.get("equivalent", [])
        ]
    for name, entry in entries:
        if entry is None:
            continue
        line = str(entry["line"])
        target = Path(out_dir) / str(entry["file"])
        if not target.is_file():
            problems.append(f"{name}: file {entry['file']} missing")
            continue
        if line not in target.read_text(encoding="utf-8").split("\n"):
            problems.append(f"{name}: line not found in {entry['file']}")
        others = [
            str(p.relative_to(out_dir))
            for p in files
            if p != target and line in p.read_text(encoding="utf-8").split("\n")
        ]
        if others:
            problems.append(f"note: {name} line also in {len(others)} other file(s): {others[:3]}")
    if truth.expect_diagnosis and truth.root_cause is None:
        problems.append("expect_diagnosis without root_cause")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--scenario", choices=SCENARIOS)
    ap.add_argument("--all", action="store_true", help="every scenario into OUT/<scenario>/")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--layout", choices=LAYOUTS, default="per-rank")
    ap.add_argument("--skew-s", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--job", default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--check", action="store_true", help="verify truth.json against the files")
    args = ap.parse_args(argv)
    if not args.all and not args.scenario:
        ap.error("give --scenario or --all")
    todo = list(SCENARIOS) if args.all else [args.scenario]
    rc = 0
    for sc in todo:
        out = args.out / sc if args.all else args.out
        t0 = time.perf_counter()
        truth = generate(
            sc,
            out,
            ranks=args.ranks,
            gpus_per_node=args.gpus_per_node,
            layout=args.layout,
            skew_s=args.skew_s,
            seed=args.seed,
            steps=args.steps,
            job=args.job,
        )
        dt = time.perf_counter() - t0
        rcause = truth.root_cause
        where = f"rank {rcause['rank']} {rcause['host']} {rcause['file']}" if rcause else "-"
        print(f"{sc:18s} {args.layout:16s} {args.ranks:6d} ranks {dt:7.2f}s  root: {where}")
        if args.check:
            for p in check_truth(out, truth):
                print(f"    {p}")
                if not p.startswith("note:"):
                    rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
