"""The daemon's producer side: diagnoses to the output topic, rejected records to the
dead-letter topic, and the checkpoint that makes both durable before offsets move on.

At-least-once mode: every send future is kept; a checkpoint awaits them all (the broker
acknowledged every diagnosis and dead-letter copy derived from the records before the offsets)
and only then commits the offsets through the consumer. Transactional mode: sends happen inside
a transaction; a checkpoint awaits them, adds the offsets with `send_offsets_to_transaction` and
commits the transaction, so diagnoses and offsets become visible together.

A record the broker refuses for itself (too large for the topic, corrupt) is logged with its
source offset, counted and skipped. The refusal also breaks the idempotent producer: it had
already numbered the refused batch, so every later batch to that partition fails with
OutOfOrderSequenceNumber. So after a refusal the producer is replaced (a new producer id, or the
same transactional id under a new epoch) and what failed after the refused record is sent again;
in a transaction, the transaction is aborted and everything else in it is sent again in a new
one, so no other record is lost or written twice.

A failure the broker may cure (it restarts and has no leader yet, or the output topic is
missing: deleted, with auto-create off) holds delivery instead of stopping the daemon, as a
broker outage does: the records are kept, `checkpoint` commits nothing and says so (False), and
a later checkpoint, once a back-off passed and the topic is there again, sends them again with a
new producer (the old one numbered its batches for partitions that may be gone). Meanwhile new
records are kept without being sent (`holding`).

The publisher counts the bytes it holds for records not yet released (`queued_bytes`): a
value is kept until the broker acknowledged it (at-least-once; after that only a failure
needs it again, and a failed one is sent again as a new record), or until the transaction
commits (transactional: an abort sends the whole rest again). `wait_below` lets the daemon
wait for acknowledgements while that count is above its share of the budget."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka.errors import (
    CorruptRecordException,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)

from rankwatch.daemon.fitting import (
    VALUE_TRUNCATED_HEADER,
    fit_dead_letter,
    fit_diagnosis,
    record_size,
)
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.kafka import clients as kafka_clients
from rankwatch.kafka.broker_wait import broker_unavailable
from rankwatch.settings.run import DaemonConfig

log = logging.getLogger("rankwatch.daemon")

DIAGNOSIS_SCHEMA = "rankwatch.diagnosis/1"
REJECT_HEADER = "rankwatch-reject-reason"
SOURCE_HEADER = "rankwatch-source"
TRUNCATED_HEADER = VALUE_TRUNCATED_HEADER
ID_HEADER = "rankwatch-diagnosis-id"
# Errors about one record, not about the broker or the connection: retrying cannot help, so
# the record is logged and skipped instead of stopping the partition.
RECORD_ERRORS = (
    MessageSizeTooLargeError,
    RecordTooLargeError,
    RecordListTooLargeError,
    CorruptRecordException,
)
REQUEST_MARGIN = 1024  # kept free below max_request_size for what the estimate may miss
MAX_DIAGNOSIS_KEY_BYTES = 1024  # a longer job name is cut in the key, with its hash after it
METADATA_WAIT_S = 5.0  # the most a send waits for a topic's partitions (aiokafka: 40 s)
HOLD_BACKOFF_S = 1.0  # the first wait before held records are sent again (doubles)
HOLD_BACKOFF_MAX_S = 30.0


class PublishError(RuntimeError):
    """A diagnosis or dead-letter copy could not be delivered (offsets were not committed)."""


@dataclass(eq=False)  # compared by identity: the same bytes may be sent twice on purpose
class Sent:
    """One record handed to the producer, kept until the broker answered for it."""

    topic: str
    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes]]
    what: str
    future: asyncio.Future[Any]
    size: int = 0  # bytes counted in `Publisher.queued_bytes` until released
    released: bool = False


def _is_refusal(outcome: object) -> bool:
    return isinstance(outcome, RECORD_ERRORS)


def _failed_with(error: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


def _undelivered(sent: Sent) -> bool:
    return not sent.future.done() or sent.future.cancelled() or sent.future.exception() is not None


def job_key(job: str) -> bytes:
    """The record key of a job's diagnoses: the job name, or for a name longer than
    MAX_DIAGNOSIS_KEY_BYTES its start, `#` and a hash of the whole name (still one key, and
    one partition, per job; a shipper's runaway job field does not make runaway keys)."""
    name = job.encode()
    if len(name) <= MAX_DIAGNOSIS_KEY_BYTES:
        return name
    digest = hashlib.blake2b(name, digest_size=16).hexdigest().encode()
    return name[: MAX_DIAGNOSIS_KEY_BYTES - len(digest) - 1] + b"#" + digest


def diagnosis_record(diagnosis: dict[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) of a diagnosis: keyed by job, the diagnosis as JSON with its schema."""
    if "schema" not in diagnosis:
        diagnosis = {"schema": DIAGNOSIS_SCHEMA, **diagnosis}
    return job_key(str(diagnosis.get("job", ""))), orjson.dumps(diagnosis)


def _id_headers(diagnosis: dict[str, Any]) -> list[tuple[str, bytes]]:
    return [(ID_HEADER, str(diagnosis.get("id", "")).encode())]


def _diagnosis_size(diagnosis: dict[str, Any]) -> int:
    key, value = diagnosis_record(diagnosis)
    return record_size(key, value, _id_headers(diagnosis))


def describe(diagnosis: dict[str, Any]) -> str:
    """A diagnosis in a log line: id, job and the record its root cause came from."""
    root = diagnosis.get("root_cause")
    origin = root.get("origin") if isinstance(root, dict) else None
    job = str(diagnosis.get("job"))[:200]
    return f"diagnosis {diagnosis.get('id')} of job {job!r} (source {origin})"


class Publisher:
    def __init__(self, cfg: DaemonConfig, metrics: DaemonMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.producer = kafka_clients.producer(cfg)
        self.budget = kafka_clients.max_request_size(cfg) - REQUEST_MARGIN
        self.transactional = bool(cfg.transactional_id)
        self._pending: list[Sent] = []
        self._in_txn = False
        self.queued_bytes = 0  # values held for records not yet released (module docstring)
        self.holding: BaseException | None = None  # why delivery is held (module docstring)
        self._retry_at = 0.0
        self._backoff_s = HOLD_BACKOFF_S

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        if self._in_txn:
            try:
                await self.producer.abort_transaction()
            except Exception as e:  # closing anyway
                log.warning("aborting the open transaction failed: %s", e)
            self._in_txn = False
        await self.producer.stop()

    async def _begin(self) -> None:
        if self.transactional and not self._in_txn:
            await self.producer.begin_transaction()
            self._in_txn = True

    def fit(self, diagnosis: dict[str, Any]) -> dict[str, Any]:
        """The diagnosis, or a bounded copy of it that fits one request (`truncated: true`)."""
        return fit_diagnosis(diagnosis, _diagnosis_size, self.budget)[0]

    async def send_diagnosis(self, diagnosis: dict[str, Any]) -> bool:
        """Sends the diagnosis (cut down if it does not fit); False if it had to be skipped."""
        await self._begin()
        diagnosis = self.fit(diagnosis)
        if diagnosis.get("truncated") is True:
            log.warning(
                "%s is over the %d-byte request budget: published cut down",
                describe(diagnosis),
                self.budget,
            )
            if self.metrics is not None:
                self.metrics.publish_trimmed.labels("diagnosis").inc()
        key, value = diagnosis_record(diagnosis)
        return await self._send(
            self.cfg.output_topic, value, key, _id_headers(diagnosis), describe(diagnosis)
        )

    async def send_dead_letter(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        reason: str,
        source: str,
    ) -> bool:
        """Copies a rejected record, trimmed to fit one request; False if none was sent."""
        topic = self.cfg.dead_letter_topic
        if topic is None:
            return False
        await self._begin()
        own = [(REJECT_HEADER, reason.encode()), (SOURCE_HEADER, source.encode())]
        copy = fit_dead_letter(
            key, value, headers, own, self.budget, self.cfg.dead_letter_max_bytes
        )
        if copy.trimmed and self.metrics is not None:
            self.metrics.publish_trimmed.labels("dead_letter").inc()
        return await self._send(
            topic, copy.value, copy.key, copy.headers, f"dead-letter copy of {source}"
        )

    async def _send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: list[tuple[str, bytes]],
        what: str,
    ) -> bool:
        fut = None
        if self.holding is None:
            try:
                await self._await_topic(topic)
                fut = await self.producer.send(topic, value=value, key=key, headers=headers)
            except RECORD_ERRORS as e:
                self._skipped(what, "too_large", e)
                return False
            except KafkaError as e:
                if not broker_unavailable(e):
                    raise PublishError(f"cannot send to {topic}: {e!r}") from e
                self._hold(e)
        if fut is None:  # kept to be sent again once delivery resumes
            fut = _failed_with(self.holding or PublishError("held"))
        size = len(value or b"") + len(key or b"")
        sent = Sent(topic, value, key, headers, what, fut, size)
        self._pending.append(sent)
        self.queued_bytes += size
        if not self.transactional:
            fut.add_done_callback(functools.partial(self._answered, sent))
        return True

    async def _await_topic(self, topic: str) -> None:
        """Waits a little for the topic's partitions: aiokafka would wait request_timeout_ms
        for a topic that is not there, holding the loop."""
        wait_s = min(METADATA_WAIT_S, self.cfg.request_timeout_ms / 1000)
        try:
            await asyncio.wait_for(self.producer.partitions_for(topic), wait_s)
        except TimeoutError:
            raise UnknownTopicOrPartitionError(f"topic {topic} not found") from None

    def _hold(self, error: BaseException) -> None:
        if self.holding is None:
            log.warning(
                "cannot deliver to Kafka now (%r): holding diagnoses and offsets, trying again "
                "with a back-off of up to %.0f s",
                error,
                HOLD_BACKOFF_MAX_S,
            )
        else:
            self._backoff_s = min(2 * self._backoff_s, HOLD_BACKOFF_MAX_S)
        self.holding = error
        self._retry_at = time.monotonic() + self._backoff_s

    def _resumed(self) -> None:
        if self.holding is not None:
            log.info("delivery resumed: the held records are acknowledged")
        self.holding = None
        self._backoff_s = HOLD_BACKOFF_S

    @property
    def held(self) -> int:
        """Records kept to be sent again (0 unless delivery is held)."""
        return sum(1 for r in self._pending if _undelivered(r)) if self.holding else 0

    async def _resume(self) -> bool:
        """Once the back-off passed: a new producer, the topics there, then sends the held
        records again. False while delivery stays held."""
        if time.monotonic() < self._retry_at:
            return False
        held = [r for r in self._pending if _undelivered(r)]
        try:
            await self._new_producer()
            for topic in {r.topic for r in held}:
                await self._await_topic(topic)
        except KafkaError as e:
            if not broker_unavailable(e):
                raise PublishError(f"cannot resume delivery: {e!r}") from e
            self._hold(e)
            return False
        self.holding = None
        self._pending = []
        for r in held:
            self._release(r)  # counted anew when sent again
        self._in_txn = False  # any transaction was the old producer's
        if self.transactional:
            await self._begin()
        await self._send_again(held)
        return self.holding is None

    def _answered(self, sent: Sent, fut: asyncio.Future[Any]) -> None:
        """At-least-once: the broker answered, so the value is no longer needed here (a failed
        record is sent again from the copy `flush` holds, counted anew)."""
        if not fut.cancelled() and fut.exception() is None:
            sent.value = None
        self._release(sent)

    def _release(self, sent: Sent) -> None:
        if not sent.released:
            sent.released = True
            self.queued_bytes -= sent.size

    async def wait_below(self, limit: int) -> None:
        """Waits for acknowledgements until `queued_bytes` is at most `limit`, or nothing more
        is awaiting an answer (transactional: values stay counted until the commit)."""
        while self.queued_bytes > limit:
            waiting = next((r.future for r in self._pending if not r.future.done()), None)
            if waiting is None:
                return
            await asyncio.wait([waiting])
            await asyncio.sleep(0)  # lets the done callbacks release what was answered

    async def _send_again(self, records: list[Sent]) -> None:
        for r in records:
            await self._send(r.topic, r.value, r.key, r.headers, r.what)

    def _skipped(self, what: str, reason: str, error: BaseException) -> None:
        log.error("skipped %s: %r", what, error)
        if self.metrics is not None:
            self.metrics.publish_skipped.labels(reason).inc()

    @property
    def unacknowledged(self) -> int:
        return sum(1 for r in self._pending if not r.future.done())

    async def _outcomes(self, sent: list[Sent]) -> tuple[list[Sent], list[Sent], BaseException]:
        """Waits for the broker's answers: (refused records, which are logged, counted and
        dropped; other failures; the first other error)."""
        results = await asyncio.gather(*(r.future for r in sent), return_exceptions=True)
        refused: list[Sent] = []
        failed: list[Sent] = []
        first: BaseException = PublishError("no error")
        for r, outcome in zip(sent, results, strict=True):
            if _is_refusal(outcome):
                assert isinstance(outcome, BaseException)
                self._skipped(r.what, "refused", outcome)
                refused.append(r)
            elif isinstance(outcome, BaseException):
                if not failed:
                    first = outcome
                failed.append(r)
        return refused, failed, first

    async def _renew_producer(self) -> None:
        """A new producer in place of one whose sequence numbers a refusal broke."""
        try:
            await self._new_producer()
        except KafkaError as e:
            raise PublishError(f"cannot start a new producer: {e!r}") from e
        log.warning("producer renewed after a refused record")

    async def _new_producer(self) -> None:
        old, self.producer = self.producer, kafka_clients.producer(self.cfg)
        try:
            await old.stop()
        except Exception as e:  # replaced anyway
            log.warning("closing the old producer failed: %r", e)
        await self.producer.start()

    async def flush(self) -> bool:
        """Waits until the broker acknowledged everything sent so far (not transactional):
        True. Refused records are skipped; what failed after them is sent again by a new
        producer. A failure the broker may cure holds delivery: False (module docstring).
        Any other failure raises PublishError."""
        if self.holding is not None and not await self._resume():
            return False
        pending, self._pending = self._pending, []
        while pending:
            refused, failed, error = await self._outcomes(pending)
            if not failed:
                break
            if not refused:
                if not broker_unavailable(error):
                    raise PublishError(f"{len(failed)} record(s) not delivered: {error!r}")
                self._hold(error)
                self._pending = failed + self._pending
                return False
            await self._renew_producer()
            await self._send_again(failed)
            pending, self._pending = self._pending, []
        self._resumed()
        return True

    async def checkpoint(self, offsets: Mapping[Any, int], consumer: Any) -> bool:
        """Makes everything sent so far durable, then commits `offsets` (next offset to read
        per partition): True. False while delivery is held (nothing committed). Raises
        PublishError if a send failed for good; Kafka errors of the commit propagate (e.g.
        CommitFailedError during a rebalance)."""
        if not self.transactional:
            if not await self.flush():
                return False
            if offsets:
                await consumer.commit(dict(offsets))
            return True
        if self.holding is not None and not await self._resume():
            return False
        if not self._in_txn and not offsets:
            return True
        await self._begin()
        try:
            if not await self._settle_transaction():
                return False
            if offsets:
                await self.producer.send_offsets_to_transaction(dict(offsets), self.cfg.group_id)
            await self.producer.commit_transaction()
        except Exception:
            await self._abort()
            raise
        self._in_txn = False
        self._release_all()
        self._resumed()
        return True

    def _release_all(self) -> None:
        for r in self._pending:
            self._release(r)
        self._pending.clear()

    async def _settle_transaction(self) -> bool:
        """Waits for every record of the open transaction: True. After a refusal the
        transaction is aborted and the rest of it sent again in a new one, until none is
        refused. A failure the broker may cure aborts it and holds the rest: False."""
        while True:
            sent = list(self._pending)
            refused, failed, error = await self._outcomes(sent)
            if not refused and not failed:
                return True
            if not refused:
                if not broker_unavailable(error):
                    raise PublishError(f"{len(failed)} record(s) not delivered: {error!r}")
                await self._abort()
                self._pending = sent  # all of it: the aborted transaction wrote none
                self._hold(error)
                return False
            gone = set(map(id, refused))
            rest = [r for r in sent if id(r) not in gone]
            await self._abort()
            await self._renew_producer()
            await self._begin()
            await self._send_again(rest)

    async def _abort(self) -> None:
        try:
            await self.producer.abort_transaction()
        except Exception as e:
            log.warning("aborting the transaction failed: %s", e)
        finally:
            self._in_txn = False
            self._release_all()
