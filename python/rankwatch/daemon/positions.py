"""Per input partition the daemon owns: where reading continues, what the engine has taken
(what may be committed once its diagnoses are acknowledged), and where the re-read that
rebuilds state after an assignment ends."""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka import TopicPartition


class Positions:
    def __init__(self) -> None:
        self.owned: set[TopicPartition] = set()
        self.next_offset: dict[TopicPartition, int] = {}  # next record to accept from a fetch
        self.taken: dict[TopicPartition, int] = {}  # next record the engine has not taken
        self.replay_end: dict[TopicPartition, int] = {}  # records below it are re-reads
        self.dirty: set[TopicPartition] = set()  # taken moved past the last commit

    def start(self, tp: TopicPartition, offset: int, replay_end: int) -> None:
        """A new partition is read from `offset`; records below `replay_end` were processed
        before (by this group) and only rebuild state."""
        self.next_offset[tp] = offset
        self.taken[tp] = offset
        self.replay_end[tp] = replay_end

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.next_offset.pop(tp, None)
            self.taken.pop(tp, None)
            self.replay_end.pop(tp, None)
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

    def to_commit(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self.taken[tp] for tp in self.dirty if tp in assigned}

    def committed(self, offsets: Iterable[TopicPartition]) -> None:
        self.dirty.difference_update(offsets)

    def lag(self, tp: TopicPartition, highwater: int) -> int:
        return max(0, highwater - self.taken.get(tp, highwater))
