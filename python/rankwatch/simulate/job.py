"""One job while it is generated: its parameters and fleet, every process's lines so far, the
processes' exits in time order (the event queue the teardown runs), and what the truth names."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rankwatch.simulate.fleet import Host, Rank, Schedule, build_fleet, choose_culprit
from rankwatch.simulate.lines.clock import Clock
from rankwatch.simulate.lines.records import Rec
from rankwatch.simulate.lines.versions import NCCL_BUILDS, PG_SOURCE_LINES, WATCHDOG_FUNC

if TYPE_CHECKING:
    from rankwatch.simulate.scenarios.spec import Scenario

LAYOUTS: tuple[str, ...] = ("per-rank", "per-node", "torchrun-logdir")

# kinds of queued events
WORKER_EXIT = 0
RDZV_LOST = 1  # the rendezvous store on node 0 went away
TRIGGER = 2  # a scheduled callback (a peer noticing a dead process)

# rank, host, catalog signature
Meta = tuple[int, str, str]


class Job:
    """A job being generated. Emitters (`lines`) append to its records; the scenario sets
    what the truth names; the teardown consumes its event queue; `layouts` writes it."""

    def __init__(
        self,
        spec: Scenario,
        ranks: int,
        gpus_per_node: int,
        layout: str,
        skew_s: float,
        seed: int,
        steps: int,
        job: str | None,
    ) -> None:
        per_host = _check_size(spec, ranks, gpus_per_node, layout, steps)
        self.spec = spec
        self.scenario = spec.name
        self.world_size = ranks
        self.per_host = per_host  # ranks (GPUs) per host
        self.nodes = ranks // per_host
        self.layout = layout
        self.seed = seed
        self.steps = steps
        self.name = job or f"llm-{spec.name.replace('_', '-')}-{seed:04d}"
        # one stream of randomness per (scenario, seed, size): layouts share every choice
        self.rng = random.Random(f"fleetgen:{spec.name}:{seed}:{ranks}:{per_host}")
        self.clock = Clock()
        self.transport = spec.transport
        self.nccl = NCCL_BUILDS[spec.nccl]
        self.pg_lines = PG_SOURCE_LINES[self.nccl.torch]
        self.watchdog_func = WATCHDOG_FUNC[self.nccl.torch]
        self._init_records()
        self.culprit_host, self.culprit_local = choose_culprit(spec, self.rng, self.nodes, per_host)
        self.p2p_off_host = (
            self.rng.randrange(self.nodes) if spec.noisy_fleet and per_host >= 3 else -1
        )
        self.culprit_rank = self.culprit_host * per_host + self.culprit_local
        skew = max(0.0, skew_s)
        fleet = build_fleet(spec, self.rng, self.nodes, per_host, skew, seed, self.culprit_host)
        self.hosts: list[Host] = fleet.hosts
        self.ranks: list[Rank] = fleet.ranks
        self.comm_id = fleet.comm_id
        self.intra_comm_ids = fleet.intra_comm_ids
        self.master_port = fleet.master_port
        self.schedule = Schedule.draw(self.rng, steps)

    def _init_records(self) -> None:
        n, nodes = self.world_size, self.nodes
        self.rank_recs: list[list[Rec]] = [[] for _ in range(n)]
        self.agent_recs: list[list[Rec]] = [[] for _ in range(nodes)]
        self.kernel_recs: dict[int, list[Rec]] = {}  # host index -> its kernel log, if any
        self.own_exit_t = [math.inf] * n  # when each worker exits of its own accord
        self.own_exit_code = [0] * n
        self.death_t = [math.inf] * n  # when it is gone (its own exit, or SIGTERMed)
        self.host_dead = [False] * nodes  # its agent has exited
        self.host_exit_t = [math.inf] * nodes
        self.events: list[tuple[float, int, int, int, int]] = []  # (t, seq, kind, host, rank)
        self.event_seq = 0
        self.triggers: dict[int, Callable[[], None]] = {}  # event seq -> callback
        # what a host's workers dying sets off on other hosts (the scenario's propagation)
        self.cascade: Callable[[int, float], None] | None = None
        self.located: dict[int, tuple[str, str]] = {}  # mark kind -> (file, line as written)
        self.root_meta: Meta | None = None
        self.first_meta: Meta | None = None
        self.alt_meta: Meta | None = None
        self.notes: list[str] = []
        self.ring_memo: dict[tuple[bool, int, int], str] = {}
        self.made_dirs: set[Path] = set()
        self.line_times: dict[str, list[float]] | None = None

    @property
    def culprit(self) -> Rank:
        return self.ranks[self.culprit_rank]

    def culprit_time(self) -> float:
        """When a failure after the last step strikes."""
        return self.schedule.last_step_t + self.rng.uniform(0.2, 1.2)

    # ---------------------------------------------------------------- the event queue

    def set_exit(self, r: Rank, t: float, code: int) -> None:
        """Worker r exits of its own accord at t with code, unless it already does earlier."""
        if t < self.own_exit_t[r.rank]:
            self.own_exit_t[r.rank] = t
            self.own_exit_code[r.rank] = code
            self.push(t, WORKER_EXIT, r.host.idx, r.rank)

    def push(self, t: float, kind: int, h: int, r: int) -> None:
        self.event_seq += 1
        heapq.heappush(self.events, (t, self.event_seq, kind, h, r))

    def trigger(self, t: float, r: Rank, fn: Callable[[], None]) -> None:
        """Run fn at t if rank r and its agent are still alive then."""
        self.event_seq += 1
        self.triggers[self.event_seq] = fn
        heapq.heappush(self.events, (t, self.event_seq, TRIGGER, r.host.idx, r.rank))


def _check_size(spec: Scenario, ranks: int, gpus_per_node: int, layout: str, steps: int) -> int:
    """Ranks per host; ValueError for a job the generator cannot lay out."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
    if ranks < 2:
        raise ValueError("ranks must be at least 2")
    gpn = min(gpus_per_node, ranks)
    if gpn < 1 or ranks % gpn:
        raise ValueError("ranks must be a multiple of gpus_per_node")
    if steps < 1:
        raise ValueError("steps must be at least 1")
    if spec.needs_two_hosts and ranks // gpn < 2:
        raise ValueError(f"scenario {spec.name} needs at least two hosts")
    return gpn
