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
)

from rankwatch.daemon import kafka_clients
from rankwatch.daemon.config import DaemonConfig
from rankwatch.daemon.fitting import (
    VALUE_TRUNCATED_HEADER,
    fit_dead_letter,
    fit_diagnosis,
    record_size,
)
from rankwatch.daemon.metrics import DaemonMetrics

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
        try:
            fut = await self.producer.send(topic, value=value, key=key, headers=headers)
        except RECORD_ERRORS as e:
            self._skipped(what, "too_large", e)
            return False
        except KafkaError as e:
            raise PublishError(f"cannot send to {topic}: {e!r}") from e
        size = len(value or b"") + len(key or b"")
        sent = Sent(topic, value, key, headers, what, fut, size)
        self._pending.append(sent)
        self.queued_bytes += size
        if not self.transactional:
            fut.add_done_callback(functools.partial(self._answered, sent))
        return True

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
        old, self.producer = self.producer, kafka_clients.producer(self.cfg)
        try:
            await old.stop()
        except Exception as e:  # replaced anyway
            log.warning("closing the producer after a refused record failed: %r", e)
        try:
            await self.producer.start()
        except KafkaError as e:
            raise PublishError(f"cannot start a new producer: {e!r}") from e
        log.warning("producer renewed after a refused record")

    async def flush(self) -> None:
        """Waits until the broker acknowledged everything sent so far (not transactional).
        Refused records are skipped; what failed after them is sent again by a new producer;
        any other failure raises PublishError."""
        pending, self._pending = self._pending, []
        while pending:
            refused, failed, error = await self._outcomes(pending)
            if not failed:
                return
            if not refused:
                raise PublishError(f"{len(failed)} record(s) not delivered: {error!r}")
            await self._renew_producer()
            await self._send_again(failed)
            pending, self._pending = self._pending, []

    async def checkpoint(self, offsets: Mapping[Any, int], consumer: Any) -> None:
        """Makes everything sent so far durable, then commits `offsets` (next offset to read
        per partition). Raises PublishError if a send failed; Kafka errors of the commit
        propagate (e.g. CommitFailedError during a rebalance)."""
        if not self.transactional:
            await self.flush()
            if offsets:
                await consumer.commit(dict(offsets))
            return
        if not self._in_txn and not offsets:
            return
        await self._begin()
        try:
            await self._settle_transaction()
            if offsets:
                await self.producer.send_offsets_to_transaction(dict(offsets), self.cfg.group_id)
            await self.producer.commit_transaction()
        except Exception:
            await self._abort()
            raise
        self._in_txn = False
        self._release_all()

    def _release_all(self) -> None:
        for r in self._pending:
            self._release(r)
        self._pending.clear()

    async def _settle_transaction(self) -> None:
        """Waits for every record of the open transaction. After a refusal the transaction
        is aborted and the rest of it sent again in a new one, until none is refused."""
        while True:
            sent = list(self._pending)
            refused, failed, error = await self._outcomes(sent)
            if not refused and not failed:
                return
            if not refused:
                raise PublishError(f"{len(failed)} record(s) not delivered: {error!r}")
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
