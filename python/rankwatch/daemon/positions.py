"""Per input partition the daemon owns: where reading continues, what the engine has taken,
how much of that the diagnoses polled so far reflect (what may be committed once they are
acknowledged), and where the re-read that rebuilds state after an assignment ends."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from aiokafka import TopicPartition


class Positions:
    def __init__(self) -> None:
        self.owned: set[TopicPartition] = set()
        self.next_offset: dict[TopicPartition, int] = {}  # next record to accept from a fetch
        self.taken: dict[TopicPartition, int] = {}  # next record the engine has not taken
        self.replay_end: dict[TopicPartition, int] = {}  # records below it are re-reads
        self.dirty: set[TopicPartition] = set()  # taken moved past the last commit
        # next record not yet reflected by a poll: a poll that held a job's incident (the
        # engine's re-diagnosis hold) leaves its partitions where they were
        self.reflected: dict[TopicPartition, int] = {}
        self.reflected_at: dict[TopicPartition, float] = {}  # monotonic time it last caught up
        self.committed_at: dict[TopicPartition, int] = {}  # the last offset committed here

    def start(self, tp: TopicPartition, offset: int, replay_end: int) -> None:
        """A new partition is read from `offset`; records below `replay_end` were processed
        before (by this group) and only rebuild state."""
        self.next_offset[tp] = offset
        self.taken[tp] = offset
        self.replay_end[tp] = replay_end
        self.reflected[tp] = offset
        self.reflected_at[tp] = time.monotonic()

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.next_offset.pop(tp, None)
            self.taken.pop(tp, None)
            self.replay_end.pop(tp, None)
            self.reflected.pop(tp, None)
            self.reflected_at.pop(tp, None)
            self.committed_at.pop(tp, None)
            self.dirty.discard(tp)

    def expected(self, tp: TopicPartition) -> int | None:
        return self.next_offset.get(tp)

    def accepted(self, tp: TopicPartition, end: int) -> None:
        """A batch up to `end` (exclusive) was handed to the engine."""
        self.next_offset[tp] = end

    def fed(self, tp: TopicPartition, end: int) -> None:
        """The engine took the records up to `end`; they may be committed at the next
        checkpoint (re-reads below the replay end never are: they are committed already)."""
        self.taken[tp] = end
        if end > self.replay_end.get(tp, 0):
            self.dirty.add(tp)

    def replay_end_of(self, tp: TopicPartition) -> int:
        return self.replay_end.get(tp, 0)

    def replaying(self, tps: Iterable[TopicPartition]) -> bool:
        """True while any of `tps` has not been read past its replay end."""
        return any(self.taken.get(tp, 0) <= self.replay_end.get(tp, 0) for tp in tps)

    def polled(self, held: set[TopicPartition]) -> None:
        """A poll diagnosed everything taken so far except the held incidents of jobs fed
        from `held`."""
        now = time.monotonic()
        for tp, taken in self.taken.items():
            if tp not in held:
                self.reflected[tp] = taken
                self.reflected_at[tp] = now

    def lagging(self, assigned: set[TopicPartition], older_than_s: float) -> bool:
        """Whether a partition with records to commit has had some not reflected by any
        poll for `older_than_s`."""
        limit = time.monotonic() - older_than_s
        return any(
            self.reflected.get(tp, 0) < self.taken[tp] and self.reflected_at.get(tp, 0) < limit
            for tp in self.dirty
            if tp in assigned
        )

    def to_commit(
        self, assigned: set[TopicPartition], reflected_only: bool = False
    ) -> dict[TopicPartition, int]:
        """Offsets to commit: of what was taken, or (`reflected_only`) of what the polls so
        far reflect (never below an offset committed before)."""
        out = {}
        for tp in self.dirty:
            if tp not in assigned:
                continue
            end = self.taken[tp]
            if reflected_only:
                end = min(end, self.reflected.get(tp, end))
                if end <= self.replay_end.get(tp, 0) or end <= self.committed_at.get(tp, 0):
                    continue
            out[tp] = end
        return out

    def committed(self, offsets: Mapping[TopicPartition, int] | Iterable[TopicPartition]) -> None:
        """The offsets were committed (partitions alone: at what was taken)."""
        if not isinstance(offsets, Mapping):
            offsets = {tp: self.taken[tp] for tp in offsets if tp in self.taken}
        for tp, end in offsets.items():
            self.committed_at[tp] = end
            if end >= self.taken.get(tp, end):
                self.dirty.discard(tp)

    def lag(self, tp: TopicPartition, highwater: int) -> int:
        return max(0, highwater - self.taken.get(tp, highwater))
