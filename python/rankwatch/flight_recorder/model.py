"""What a Flight Recorder dump holds, once read and checked: plain typed values only."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, overload

from rankwatch import _core

# Stack frames whose file lies under one of these are torch's own, not the user's code.
_TORCH_PARTS = ("/torch/", "\\torch\\", "/site-packages/torch", "<frozen ", "/threading.py")


class Frame(NamedTuple):
    filename: str
    line: int
    name: str

    def site(self) -> str:
        """`file.py:LINE (function)`, the file as written in the dump."""
        return f"{self.filename}:{self.line} ({self.name})"


class Entry(NamedTuple):
    """One recorded operation of one rank, as the dump states it.

    `seq` is the collective sequence id (`collective_seq_id`, `seq_id` before format 2.0);
    `p2p_seq` the point-to-point one (None before 2.0). `op` is the operation as torch names
    it in `profiling_name` (`all_reduce`, `send`); `peers` is (src, dst) in group ranks for
    send/recv. Sizes are one shape per tensor. `state` is scheduled, started or completed.
    Times are nanoseconds since the epoch, None when the dump has none."""

    pos: int  # position in the dump's entry list
    record_id: int
    pg: str  # the process group's name (its key in pg_config)
    pg_desc: str
    pg_id: int | None  # the process-local id the watchdog prints as `PG ID`
    seq: int
    p2p_seq: int | None
    is_p2p: bool
    op: str
    backend: str
    peers: tuple[int | None, int | None] | None
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str
    retired: bool | None
    time_created_ns: int | None
    time_started_ns: int | None
    time_completed_ns: int | None
    timeout_ms: int | None
    frames: tuple[Frame, ...]
    fp: tuple[object, ...] = ()  # fingerprint(), computed once by the reader

    @property
    def op_type(self) -> str:
        """The operation as the watchdog prints OpType (ALLREDUCE, BROADCAST, SEND)."""
        return _OP_TYPES.get(self.op, self.op.lstrip("_").replace("_", "").upper())

    def fingerprint(self) -> tuple[object, ...]:
        """What every rank of a group must agree on at one sequence id."""
        if self.fp:
            return self.fp
        return (self.op, self.input_sizes, self.output_sizes, self.input_dtypes, self.output_dtypes)

    def numel_in(self) -> int:
        return sum(_numel(s) for s in self.input_sizes)

    def numel_out(self) -> int:
        return sum(_numel(s) for s in self.output_sizes)

    def dtype(self) -> str:
        dtypes = dict.fromkeys(self.input_dtypes + self.output_dtypes)
        return "/".join(dtypes) if dtypes else "-"

    def call_site(self) -> Frame | None:
        """The first stack frame outside torch: the line of the user's code that issued it."""
        for f in self.frames:
            if not any(p in f.filename for p in _TORCH_PARTS):
                return f
        return None

    def time_ns(self) -> int | None:
        return self.time_created_ns


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


_OP_TYPES = {
    "all_reduce": "ALLREDUCE",
    "allreduce": "ALLREDUCE",
    "allreduce_coalesced": "ALLREDUCE_COALESCED",
    "broadcast": "BROADCAST",
    "reduce": "REDUCE",
    "all_gather": "ALLGATHER",
    "_all_gather_base": "_ALLGATHER_BASE",
    "all_gather_into_tensor_coalesced": "ALLGATHER_COALESCED",
    "reduce_scatter": "REDUCE_SCATTER",
    "_reduce_scatter_base": "_REDUCE_SCATTER_BASE",
    "reduce_scatter_tensor_coalesced": "REDUCE_SCATTER_COALESCED",
    "gather": "GATHER",
    "scatter": "SCATTER",
    "all_to_all": "ALLTOALL",
    "all_to_all_base": "ALLTOALL_BASE",
    "alltoall": "ALLTOALL",
    "alltoall_base": "ALLTOALL_BASE",
    "barrier": "BARRIER",
    "send": "SEND",
    "recv": "RECV",
    "coalesced": "COALESCED",
}


class Entries(Sequence[Entry]):
    """A dump's checked entries as `rankwatch-core` keeps them (compact, each shared value
    once); an `Entry` is built when one is read. The cross-rank analysis reads `table`
    without building any. Equal to any sequence of the same entries."""

    __slots__ = ("table",)
    _CHUNK = 4096

    def __init__(self, table: _core.FrEntries) -> None:
        self.table = table

    @classmethod
    def of(cls, entries: Sequence[Entry]) -> Entries:
        """Entries the Python reader checked, kept the same way."""
        return cls(_core.FrEntries.from_entries(entries))

    def __len__(self) -> int:
        return len(self.table)

    @overload
    def __getitem__(self, index: int) -> Entry: ...
    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...
    def __getitem__(self, index: int | slice) -> Entry | list[Entry]:
        n = len(self.table)
        if isinstance(index, slice):
            return self.take(range(n)[index])
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError("entry index out of range")
        return self.take([i])[0]

    def take(self, index: Sequence[int]) -> list[Entry]:
        """The entries at these positions, built in one call."""
        got: list[Entry] = self.table.take(list(index), Entry, Frame)
        return got

    def __iter__(self) -> Iterator[Entry]:
        n = len(self.table)
        for start in range(0, n, self._CHUNK):
            yield from self.take(range(start, min(n, start + self._CHUNK)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Entries) and other.table is self.table:
            return True
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{len(self)} Flight Recorder entries>"


@dataclass
class GroupConfig:
    """A process group as one dump describes it: name, description and global ranks."""

    name: str
    desc: str
    ranks: tuple[int, ...] | None


@dataclass
class GroupStatus:
    """`pg_status` of one group (format 2.4 on): the rank's own progress counters."""

    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass
class Dump:
    """One rank's dump, checked: every value used later has its type."""

    path: str
    rank: int
    version: str
    entries: Entries
    groups: dict[str, GroupConfig] = field(default_factory=dict)
    status: dict[str, GroupStatus] = field(default_factory=dict)
    host: str | None = None
    skipped_entries: int = 0  # entries that failed a check, counted and left out
    dropped_entries: int = 0  # the oldest entries, not kept within the memory budget
    entry_problems: list[str] = field(default_factory=list)  # the first few, for the report
