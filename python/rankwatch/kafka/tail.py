"""Reading topics by assignment, outside the consumer group: the recent tail of a topic (the
diagnoses already published), and the broker timestamp of the record before an offset."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import TopicPartition

log = logging.getLogger("rankwatch.daemon")

FETCH_TIMEOUT_MS = 200


async def topic_partitions(consumer: Any, topic: str) -> list[TopicPartition]:
    """The partitions of `topic` (empty if it does not exist), from fresh metadata."""
    # `consumer.partitions_for_topic` only knows topics the consumer already tracks, and
    # `consumer.topics()` returns names only: ask the client for fresh cluster metadata.
    cluster = await consumer._client.fetch_all_metadata()
    parts = cluster.partitions_for_topic(topic)
    return [TopicPartition(topic, p) for p in sorted(parts or ())]


class TopicTail:
    """Reads one topic forward from where it last stopped: the first call starts at `since_ms`
    (broker time) or at the beginning, later calls only read what is new."""

    def __init__(self, consumer: Any, topic: str) -> None:
        self.consumer = consumer
        self.topic = topic
        self.positions: dict[TopicPartition, int] = {}
        self.records_read = 0

    async def catch_up(
        self,
        handle: Callable[[Any], None],
        *,
        since_ms: int | None = None,
        timeout_s: float = 60.0,
    ) -> bool:
        """Calls `handle(record)` for every record up to the current end (the last stable
        offset when reading committed). Returns False if the end was not reached in time."""
        tps = await topic_partitions(self.consumer, self.topic)
        if not tps:
            self.positions.clear()  # gone: a topic made again starts its offsets over
            return True
        fresh = [tp for tp in tps if tp not in self.positions]
        if fresh:
            if since_ms is None:
                starts = await self.consumer.beginning_offsets(fresh)
            else:
                found = await self.consumer.offsets_for_times({tp: since_ms for tp in fresh})
                ends = await self.consumer.end_offsets(fresh)
                starts = {tp: (found[tp].offset if found[tp] else ends[tp]) for tp in fresh}
            self.positions.update(starts)
        ends = await self.consumer.end_offsets(tps)
        ahead = [tp for tp in tps if self.positions[tp] > ends[tp]]
        if ahead:  # deleted and made again between two reads: its offsets started over
            log.info("%s was made again: reading it from its start", self.topic)
            self.positions.update(await self.consumer.beginning_offsets(ahead))
        todo = [tp for tp in tps if self.positions[tp] < ends[tp]]
        if not todo:
            return True
        self.consumer.assign(todo)
        for tp in todo:
            self.consumer.seek(tp, self.positions[tp])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while todo:
            batch = await self.consumer.getmany(*todo, timeout_ms=FETCH_TIMEOUT_MS)
            for tp, records in batch.items():
                for rec in records:
                    if rec.offset < ends[tp]:
                        handle(rec)
                        self.records_read += 1
                        # kept per record: a read cancelled below reads none of them again
                        self.positions[tp] = rec.offset + 1
            for tp in todo:
                self.positions[tp] = min(await self.consumer.position(tp), ends[tp])
            todo = [tp for tp in todo if self.positions[tp] < ends[tp]]
            if todo and loop.time() > deadline:
                log.warning(
                    "reading %s: end not reached in %.0f s (%d partitions behind)",
                    self.topic,
                    timeout_s,
                    len(todo),
                )
                return False
        return True


async def timestamps_before(
    consumer: Any,
    offsets: Mapping[TopicPartition, int],
    *,
    timeout_s: float = 10.0,
) -> dict[TopicPartition, int]:
    """Broker timestamp (ms) of the record just before each offset; partitions where none can
    be read in time (offset 0, deleted by retention, a transaction marker) are left out."""
    want = {tp: off - 1 for tp, off in offsets.items() if off > 0}
    if not want:
        return {}
    consumer.assign(list(want))
    for tp, off in want.items():
        consumer.seek(tp, off)
    found: dict[TopicPartition, int] = {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    pending = set(want)
    while pending and loop.time() < deadline:
        batch = await consumer.getmany(*pending, timeout_ms=FETCH_TIMEOUT_MS, max_records=1)
        for tp, records in batch.items():
            if records:
                found[tp] = int(records[0].timestamp)
                pending.discard(tp)
                consumer.pause(tp)
    consumer.resume(*want)
    return found
