"""Producing records in per-partition batches, the partition of a key as the Java client and
aiokafka choose it, with every batch kept until the broker acknowledged it.

A broker that restarts answers for a few seconds with retriable errors (LeaderNotAvailable,
NotLeaderForPartition, UnknownTopicOrPartition while it loads its partitions), and aiokafka
fails a batch that waited longer than `request_timeout_ms` for a leader at the first such
answer: right when the broker is back. Such a batch is sent again, in order, for at most
`ack_timeout_s` (the wait for an acknowledgement) from the first failure on, before the error
is raised. The partition's order holds: aiokafka appends a partition's next batch only once the
previous one was drained, and a failed one fails the wait for it, so the failed batches of a
partition are its last ones."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import KafkaError, KafkaTimeoutError
from aiokafka.partitioner import murmur2

RETRY_BACKOFF_S = 0.5  # the first wait before a failed batch is sent again (doubles)
RETRY_BACKOFF_MAX_S = 5.0
DEFAULT_ACK_TIMEOUT_S = 60.0  # how long retriable failures are retried without `ack_timeout_s`

Record = tuple[int | None, bytes | None, bytes, list[tuple[str, bytes]]]  # ts, key, value, headers


@dataclass(eq=False)
class Flight:
    """A batch handed to the producer: its records (to send again) and its delivery."""

    partition: int
    first: int  # the number of its first record, counted from the first one added
    records: list[Record]
    future: asyncio.Future[Any]


def _delivered(f: asyncio.Future[Any]) -> bool:
    return f.done() and not f.cancelled() and f.exception() is None


def _retriable(error: BaseException | None) -> bool:
    return isinstance(error, KafkaError) and bool(getattr(error, "retriable", False))


def _failed_retriably(f: asyncio.Future[Any]) -> bool:
    return f.done() and not f.cancelled() and _retriable(f.exception())


def _failed_with(error: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    future.exception()  # looked at: no "never retrieved" warning if it is dropped
    return future


class BatchSender:
    """Produces records in per-partition batches, keeping each batch until it was delivered
    so that `flush` can check delivery and a retriable failure is sent again (module doc)."""

    def __init__(
        self,
        producer: Any,
        topic: str,
        partitions: Sequence[int],
        ack_timeout_s: float | None = None,
    ) -> None:
        self.producer = producer
        # the client can wait for a broker that is gone without ever failing: bound each wait
        self.ack_timeout_s = ack_timeout_s
        self.topic = topic
        self.partitions = sorted(partitions)
        self._batches: dict[int, Any] = {}
        self._open: dict[int, list[Record]] = {}  # partition -> records of its open batch
        self._first: dict[int, int] = {}  # partition -> number of its open batch's first record
        self._flights: list[Flight] = []  # sent, not known to be delivered, in send order
        self._key_partition: dict[bytes, int] = {}
        self._rr = 0
        self.records = 0
        self.bytes = 0

    def partition_of(self, key: bytes | None) -> int:
        if key is None:
            self._rr += 1
            return self.partitions[self._rr % len(self.partitions)]
        p = self._key_partition.get(key)
        if p is None:
            p = self.partitions[(murmur2(key) & 0x7FFFFFFF) % len(self.partitions)]
            self._key_partition[key] = p
        return p

    async def add(
        self,
        key: bytes | None,
        value: bytes,
        *,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        p = self.partition_of(key)
        record: Record = (timestamp_ms, key, value, list(headers))
        if p not in self._batches:
            self._start_batch(p)
        if not self._append(p, record):
            await self._send(p)
            self._start_batch(p)
            if not self._append(p, record):
                raise ValueError(f"record of {len(value)} bytes does not fit in a batch")
        self.records += 1
        self.bytes += len(value)

    def _start_batch(self, partition: int) -> None:
        self._first[partition] = self.records
        self._open[partition] = []
        self._batches[partition] = self.producer.create_batch()

    def _append(self, partition: int, record: Record) -> bool:
        ts, key, value, headers = record
        if self._batches[partition].append(timestamp=ts, key=key, value=value, headers=headers):
            self._open[partition].append(record)
            return True
        return False

    def _build(self, records: list[Record]) -> Any:
        """A new batch of the records of one that failed (a batch is sent only once)."""
        batch = self.producer.create_batch()
        for ts, key, value, headers in records:
            batch.append(timestamp=ts, key=key, value=value, headers=headers)
        return batch

    async def _send(self, partition: int) -> None:
        batch = self._batches.pop(partition)
        records = self._open.pop(partition)
        future = await self._submit(partition, batch)
        self._flights.append(Flight(partition, self._first.pop(partition), records, future))
        if _failed_retriably(future) or len(self._flights) > 64:
            await self._check()  # at once: no later batch of the partition may overtake it

    async def _submit(self, partition: int, batch: Any) -> asyncio.Future[Any]:
        """Hands the batch to the producer; a retriable refusal (the broker restarting, or
        the batch before it failed) becomes its outcome, to be sent again."""
        batch.close()
        try:
            future: asyncio.Future[Any] = await self._bounded(
                self.producer.send_batch(batch, self.topic, partition=partition)
            )
        except KafkaError as e:
            if not _retriable(e):
                raise
            return _failed_with(e)
        return future

    async def _check(self) -> None:
        """Sends again what failed retriably, raises any other failure, and forgets what
        was delivered."""
        if any(_failed_retriably(f.future) for f in self._flights):
            await self._retry()
        for f in self._flights:
            if f.future.done():
                f.future.result()  # a failure stays listed: `acknowledged` must not pass it
        self._flights = [f for f in self._flights if not f.future.done()]

    async def flush(self) -> None:
        for p in list(self._batches):
            await self._send(p)
        for f in self._flights:
            await self._settled(f.future)
        await self._retry()
        for f in self._flights:
            f.future.result()
        self._flights = []

    async def _settled(self, future: asyncio.Future[Any]) -> None:
        """Waits for a delivery (at most `ack_timeout_s`); a retriable failure is left for
        `_retry`."""
        try:
            await self._bounded(asyncio.shield(future))
        except KafkaError as e:
            if not _retriable(e):
                raise

    async def _retry(self) -> None:
        """Sends the batches that failed retriably again, in their order, until they are
        delivered; raises the last failure once `ack_timeout_s` passed since this began."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.ack_timeout_s or DEFAULT_ACK_TIMEOUT_S)
        delay = RETRY_BACKOFF_S
        while failed := [f for f in self._flights if _failed_retriably(f.future)]:
            if loop.time() + delay > deadline:
                failed[0].future.result()  # the broker did not come back in time
            await asyncio.sleep(delay)
            delay = min(2 * delay, RETRY_BACKOFF_MAX_S)
            for f in failed:
                f.future = await self._submit(f.partition, self._build(f.records))
            for f in failed:
                await self._settled(f.future)

    async def _bounded(self, aw: Any) -> Any:
        try:
            return await asyncio.wait_for(aw, self.ack_timeout_s)
        except TimeoutError:
            raise KafkaTimeoutError(
                f"no answer from the broker in {self.ack_timeout_s:.0f} s"
            ) from None

    def acknowledged(self) -> int:
        """How many records, counted from the first one added, the broker acknowledged
        without a gap (every record belongs to one batch: open, in flight, failed or done)."""
        waiting = list(self._first.values())
        waiting += [f.first for f in self._flights if not _delivered(f.future)]
        return min(waiting, default=self.records)
