"""Where newly assigned partitions start, so that the engine's state is rebuilt.

With a committed offset C the daemon re-reads from the first record whose broker time is at
least `replay_window_ms` before the record at C-1 (the last one the group processed), up to
C: those records rebuild incidents that were still open; their diagnoses, if already
published, are not published again. Without a committed offset, `initial_offset` decides:
the replay window before now (the default), the earliest or the latest offset."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition

from rankwatch.kafka.tail import timestamps_before
from rankwatch.settings.run import DaemonConfig


@dataclass
class StartPlan:
    # partition -> (first offset to read, offset from which records are new)
    starts: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    # earliest broker time the plan re-reads from (bounds the read-back of the output topic)
    earliest_ms: int = 0


async def _offsets_at(
    consumer: Any, times: dict[TopicPartition, int], fallback: dict[TopicPartition, int]
) -> dict[TopicPartition, int]:
    if not times:
        return {}
    found = await consumer.offsets_for_times(times)
    return {tp: (found[tp].offset if found.get(tp) else fallback[tp]) for tp in times}


async def plan_starts(
    consumer: Any,
    reader: Any,
    partitions: Iterable[TopicPartition],
    cfg: DaemonConfig,
    now_ms: int,
) -> StartPlan:
    tps = sorted(partitions)
    window = cfg.replay_window_ms
    committed: dict[TopicPartition, int | None] = {}
    for tp in tps:
        committed[tp] = await consumer.committed(tp)
    ends = await consumer.end_offsets(tps)
    with_commit = {tp: c for tp, c in committed.items() if c is not None}
    last_ts = await timestamps_before(reader, with_commit)

    plan = StartPlan(earliest_ms=now_ms - window)
    times: dict[TopicPartition, int] = {}
    for tp in with_commit:
        t = min(last_ts.get(tp, now_ms), now_ms) - window
        times[tp] = t
        plan.earliest_ms = min(plan.earliest_ms, t)
    fresh = [tp for tp in tps if committed[tp] is None]
    if cfg.initial_offset == "window":
        times.update({tp: now_ms - window for tp in fresh})
    found = await _offsets_at(consumer, times, ends)

    for tp, c in with_commit.items():
        start = min(found[tp], c)
        plan.starts[tp] = (start, c)
    if fresh:
        if cfg.initial_offset == "earliest":
            begins = await consumer.beginning_offsets(fresh)
            base = {tp: begins[tp] for tp in fresh}
        elif cfg.initial_offset == "latest":
            base = {tp: ends[tp] for tp in fresh}
        else:
            base = {tp: found[tp] for tp in fresh}
        for tp in fresh:
            plan.starts[tp] = (base[tp], base[tp])  # nothing was processed before: all new
    return plan
