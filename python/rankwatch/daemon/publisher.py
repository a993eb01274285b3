"""The daemon's producer side: diagnoses to the output topic, rejected records to the
dead-letter topic, and the checkpoint that makes both durable before offsets move on.

At-least-once mode: every send future is kept; a checkpoint awaits them all (the broker
acknowledged every diagnosis and dead-letter copy derived from the records before the offsets)
and only then commits the offsets through the consumer. Transactional mode: sends happen inside
a transaction; a checkpoint adds the offsets with `send_offsets_to_transaction` and commits the
transaction, so diagnoses and offsets become visible together."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from aiokafka.errors import KafkaError

from rankwatch.daemon import kafka_clients
from rankwatch.daemon.config import DaemonConfig

log = logging.getLogger("rankwatch.daemon")

DIAGNOSIS_SCHEMA = "rankwatch.diagnosis/1"
REJECT_HEADER = "rankwatch-reject-reason"
SOURCE_HEADER = "rankwatch-source"
TRUNCATED_HEADER = "rankwatch-truncated-from-bytes"
ID_HEADER = "rankwatch-diagnosis-id"


class PublishError(RuntimeError):
    """A diagnosis or dead-letter copy could not be delivered (offsets were not committed)."""


def diagnosis_record(diagnosis: dict[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) of a diagnosis: keyed by job, the diagnosis as JSON with its schema."""
    if "schema" not in diagnosis:
        diagnosis = {"schema": DIAGNOSIS_SCHEMA, **diagnosis}
    return str(diagnosis.get("job", "")).encode(), orjson.dumps(diagnosis)


class Publisher:
    def __init__(self, cfg: DaemonConfig) -> None:
        self.cfg = cfg
        self.producer = kafka_clients.producer(cfg)
        self.transactional = bool(cfg.transactional_id)
        self._pending: list[asyncio.Future[Any]] = []
        self._in_txn = False

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

    async def send_diagnosis(self, diagnosis: dict[str, Any]) -> None:
        await self._begin()
        key, value = diagnosis_record(diagnosis)
        headers = [(ID_HEADER, str(diagnosis.get("id", "")).encode())]
        await self._send(self.cfg.output_topic, value, key, headers)

    async def send_dead_letter(
        self,
        value: bytes | None,
        key: bytes | None,
        headers: Sequence[tuple[str, bytes]],
        reason: str,
        source: str,
    ) -> None:
        topic = self.cfg.dead_letter_topic
        if topic is None:
            return
        await self._begin()
        extra = [(REJECT_HEADER, reason.encode()), (SOURCE_HEADER, source.encode())]
        limit = self.cfg.dead_letter_max_bytes
        if value is not None and len(value) > limit:
            extra.append((TRUNCATED_HEADER, str(len(value)).encode()))
            value = value[:limit]
        await self._send(topic, value, key, [*headers, *extra])

    async def _send(
        self, topic: str, value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes]]
    ) -> None:
        try:
            fut = await self.producer.send(topic, value=value, key=key, headers=headers)
        except KafkaError as e:
            raise PublishError(f"cannot send to {topic}: {e!r}") from e
        self._pending.append(fut)

    @property
    def unacknowledged(self) -> int:
        return sum(1 for f in self._pending if not f.done())

    async def flush(self) -> None:
        """Waits until the broker acknowledged everything sent so far."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        results = await asyncio.gather(*pending, return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise PublishError(f"{len(errors)} record(s) not delivered: {errors[0]!r}")

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
            if offsets:
                await self.producer.send_offsets_to_transaction(dict(offsets), self.cfg.group_id)
            await self.producer.commit_transaction()
        except Exception:
            await self._abort()
            raise
        self._in_txn = False
        self._pending.clear()

    async def _abort(self) -> None:
        try:
            await self.producer.abort_transaction()
        except Exception as e:
            log.warning("aborting the transaction failed: %s", e)
        finally:
            self._in_txn = False
            self._pending.clear()
