"""Which input partitions each job's records came from, so that the jobs of revoked partitions
can be dropped from the engine.

The job of a record is decided inside the engine (value field, then the job header, then the
key); this map sees the keys and job headers of every batch (keys name the job, or the job
and rank under `key_format = "job/rank"`), the jobs the engine first saw in each partition
batch, and the job and origin of every diagnosis."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from aiokafka import TopicPartition

from rankwatch.daemon.bounds import oldest_not_kept


def job_of_key(key: bytes, key_format: str = "job") -> str | None:
    """The job named by a record key, as the engine reads it under `key_format` (`job`: the
    whole key; `job/rank`: the part before a numeric last segment)."""
    try:
        text = key.decode().strip()
    except UnicodeDecodeError:
        return None
    if not text:
        return None
    job, sep, rank = text.rpartition("/")
    if key_format == "job/rank" and sep and job and rank.isdigit():
        return job
    return text


def job_of_header(value: bytes) -> str | None:
    try:
        text = value.decode().strip()
    except UnicodeDecodeError:
        return None
    return text or None


def partition_of_origin(origin: str) -> TopicPartition | None:
    """`topic/partition/...` (the origin the daemon passes to the engine) -> TopicPartition."""
    parts = origin.split("/", 2)
    if len(parts) >= 2 and parts[1].isdigit():
        return TopicPartition(parts[0], int(parts[1]))
    return None


class JobMap:
    def __init__(self) -> None:
        self.partitions: dict[str, set[TopicPartition]] = {}
        self.last_seen: dict[str, float] = {}  # least recently seen first

    def _add(self, job: str, tp: TopicPartition, now: float) -> None:
        self.partitions.setdefault(job, set()).add(tp)
        self.last_seen.pop(job, None)
        self.last_seen[job] = now

    def note(
        self,
        tp: TopicPartition,
        keys: Iterable[bytes | None],
        headers: Iterable[bytes | None],
        key_format: str = "job",
    ) -> None:
        now = time.monotonic()
        for k in set(keys):
            if k is not None and (job := job_of_key(k, key_format)) is not None:
                self._add(job, tp, now)
        for h in set(headers):
            if h is not None and (job := job_of_header(h)) is not None:
                self._add(job, tp, now)

    def note_jobs(self, tp: TopicPartition, jobs: Iterable[str]) -> None:
        """Jobs the engine first saw in a batch from `tp` (their identity may live only in
        the record values)."""
        now = time.monotonic()
        for job in jobs:
            self._add(job, tp, now)

    def note_diagnosis(self, diagnosis: dict[str, Any]) -> None:
        root = diagnosis.get("root_cause")
        origin = root.get("origin") if isinstance(root, dict) else None
        tp = partition_of_origin(origin) if isinstance(origin, str) else None
        if tp is not None:
            self._add(str(diagnosis.get("job", "")), tp, time.monotonic())

    def partitions_of(self, job: str) -> set[TopicPartition]:
        return self.partitions.get(job, set())

    def jobs_lost(self, lost: set[TopicPartition], kept: set[TopicPartition]) -> list[str]:
        """Jobs seen on a lost partition and on none of the kept ones; forgets them."""
        gone = [job for job, tps in self.partitions.items() if tps & lost and not tps & kept]
        for job in gone:
            del self.partitions[job]
            self.last_seen.pop(job, None)
        for tps in self.partitions.values():
            tps -= lost
        return gone

    def trim(self, max_jobs: int, keep: Callable[[str], bool]) -> int:
        """Forgets the least recently seen jobs past `max_jobs`, never one `keep` names (a
        job the engine holds: without its partitions it would survive a revoke in the engine
        and count as not replaying). Returns how many were forgotten."""
        excess = len(self.last_seen) - max_jobs
        if excess <= 0:
            return 0
        gone = oldest_not_kept(((job, job) for job in self.last_seen), excess, keep)
        for job in gone:
            del self.last_seen[job]
            self.partitions.pop(job, None)
        return len(gone)

    def prune(self, max_idle_s: float) -> int:
        """Forgets jobs without records for `max_idle_s` (bounded memory for long runs)."""
        cutoff = time.monotonic() - max_idle_s
        idle = [job for job, t in self.last_seen.items() if t < cutoff]
        for job in idle:
            self.partitions.pop(job, None)
            del self.last_seen[job]
        return len(idle)
