"""`rankwatch replay` across a broker restart (probe 2026-12-03, N20): the broker answers
LeaderNotAvailable while it loads its partitions, and aiokafka fails the batch that waited out
the outage at that first answer. Replay exited 1 right when the broker was back; such a
retriable failure is now sent again (in order) for at most the outage wait before giving up.

A fake producer plays the restarting broker, so the failure comes every time (a real restart
shows it only when a batch waited longer than request_timeout_ms for a leader)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import LeaderNotAvailableError, NotLeaderForPartitionError

from rankwatch.kafka import batch_sender
from rankwatch.kafka.replay import BatchSender

PER_BATCH = 3


class FakeBatch:
    def __init__(self) -> None:
        self.values: list[bytes] = []
        self.closed = False

    def append(self, *, timestamp: Any, key: Any, value: bytes, headers: Any) -> object | None:
        if self.closed or len(self.values) >= PER_BATCH:
            return None
        self.values.append(value)
        return object()

    def close(self) -> None:
        self.closed = True


class RestartingBroker:
    """The producer's batch API against a broker that comes back: the first `failures`
    batches fail with a retriable error, as aiokafka fails them (the batch's future, or the
    hand-over of the batch after a failed one); later batches are written."""

    def __init__(self, failures: int, error: type[Exception] = LeaderNotAvailableError) -> None:
        self.failures = failures
        self.error = error
        self.written: dict[int, list[bytes]] = {}

    def create_batch(self) -> FakeBatch:
        return FakeBatch()

    async def send_batch(self, batch: FakeBatch, topic: str, partition: int) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.failures > 0:
            self.failures -= 1
            if self.failures % 2:  # the wait for the failed batch before it raises
                raise self.error()
            future.set_exception(self.error())
        else:
            self.written.setdefault(partition, []).extend(batch.values)
            future.set_result(None)
        return future


async def send_all(producer: RestartingBroker, values: list[bytes], **kw: Any) -> BatchSender:
    sender = BatchSender(producer, "t", [0, 1], **kw)
    for i, v in enumerate(values):
        await sender.add(b"job-%d" % (i % 3), v)
    await sender.flush()
    return sender


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batch_sender, "RETRY_BACKOFF_S", 0.01)


def test_batches_refused_while_the_broker_restarts_are_sent_again_in_order() -> None:
    values = [b"line-%03d" % i for i in range(40)]
    for error in (LeaderNotAvailableError, NotLeaderForPartitionError):
        broker = RestartingBroker(failures=4, error=error)
        sender = asyncio.run(send_all(broker, values, ack_timeout_s=30))
        assert sender.acknowledged() == len(values)
        written = [v for vs in broker.written.values() for v in vs]
        assert sorted(written) == values  # every record once
        for vs in broker.written.values():
            assert vs == sorted(vs)  # each partition in the order sent


def test_a_broker_that_does_not_come_back_fails_after_the_outage_wait() -> None:
    values = [b"line-%03d" % i for i in range(10)]
    broker = RestartingBroker(failures=10**6)
    with pytest.raises(LeaderNotAvailableError):
        asyncio.run(send_all(broker, values, ack_timeout_s=1.5))
    assert broker.written == {}
