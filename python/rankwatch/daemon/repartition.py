"""The repartition stage: records of topics that are not partitioned by job (`repartition =
true`) are re-keyed by their job into an internal topic, so that all of a job reaches one
partition and one daemon of the analysis stage (Kafka Streams' repartition-topic pattern).

Every daemon is a member of the stage's own consumer group (`<group_id>-repartition`), so the
stage scales and fails over by Kafka's rebalancing like the analysis does. The job of each
record is found by the topic's own decoder in one Rust call per batch (`Decoder.jobs`), the
same decoding the analysis applies. Each record goes to the internal topic
`<group_id>-repartition-<topic>` (created at start with the input's partition count) in the
partition of its job, chosen as Kafka's default partitioner chooses it for a key. The record
is otherwise copied unchanged: value, key, headers and broker timestamp (the analysis falls
back to broker time for events without a time of their own), plus a `rankwatch-source`
header naming the input topic, partition and offset. Keeping the original key, rather than
making the job the key, means the analysis decodes exactly what the producer sent (a key may
carry the rank under `key_format = "job/rank"`). Records the decoder would reject go on
unchanged to the partition with their input partition's number, to be counted and
dead-lettered by the analysis as any rejected record is.

Input offsets are committed only after every record of the batch is acknowledged: at least
once. After a crash the next owner sends the uncommitted tail again. The analysis drops those
second copies (`CopyFilter`: per internal partition and input partition, a copy at or below
the highest input offset already read is one), so they repeat no line; were one to get
through, it would still add no diagnosis, since incident ids are deterministic."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import (
    CommitFailedError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordTooLargeError,
    TopicAlreadyExistsError,
)
from aiokafka.partitioner import murmur2
from prometheus_client import CollectorRegistry, Counter, Gauge

from rankwatch.daemon.feeding import header
from rankwatch.engine import Decoder
from rankwatch.kafka import clients as kafka_clients
from rankwatch.settings.run import DaemonConfig

log = logging.getLogger("rankwatch.daemon.repartition")

SOURCE_HEADER = "rankwatch-source"
# The internal topics take records up to this size (the input broker's limit is usually 1 MiB;
# a copy is a little larger than its original because of the source header).
MAX_MESSAGE_BYTES = 8 << 20
MAX_BATCH_BYTES = 1 << 20
TOPIC_WAIT_S = 10.0  # how often a missing input topic is looked for again
PARTITION_CACHE = 100_000  # jobs whose partition is remembered (cleared when full)


class RepartitionError(RuntimeError):
    """The stage cannot go on (the internal topic cannot be made, a send failed)."""


class RepartitionMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.records = Counter(
            "rankwatch_repartition_records",
            "records re-keyed by job into an internal repartition topic, by input topic",
            ["topic"],
            registry=r,
        )
        self.without_job = Counter(
            "rankwatch_repartition_records_without_job",
            "records passed on for the analysis to reject (no job, or undecodable)",
            ["topic"],
            registry=r,
        )
        self.skipped = Counter(
            "rankwatch_repartition_skipped",
            "records the broker refused even alone (logged with their offset and skipped)",
            registry=r,
        )
        self.lag = Gauge(
            "rankwatch_repartition_lag_records",
            "input records not yet re-keyed and committed, per owned partition",
            ["topic", "partition"],
            registry=r,
        )
        self.copies_dropped = Counter(
            "rankwatch_repartition_copies_dropped",
            "second copies of input records (sent again after a crash) dropped by the analysis",
            registry=r,
        )
        self.partitions = Gauge(
            "rankwatch_repartition_partitions_assigned",
            "input partitions whose repartitioning this daemon owns",
            registry=r,
        )


class CopyFilter:
    """Drops records of an internal topic that were forwarded before. The copies of one input
    partition reach an internal partition in input order, so a record whose input offset is
    not above the highest one already read from that input partition is a second copy."""

    def __init__(self) -> None:
        self.highest: dict[TopicPartition, dict[str, int]] = {}

    def fresh(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """The records of `records` (one fetch of internal partition `tp`) not read before."""
        seen = self.highest.setdefault(tp, {})
        out = []
        for r in records:
            source = _source(r)
            if source is None:
                out.append(r)
                continue
            where, offset = source
            if offset <= seen.get(where, -1):
                continue
            seen[where] = offset
            out.append(r)
        return out

    def forget(self, tps: set[TopicPartition]) -> None:
        for tp in tps:
            self.highest.pop(tp, None)


def _source(record: Any) -> tuple[str, int] | None:
    """(input topic/partition, offset) from the source header (the stage appends it last)."""
    for k, v in reversed(record.headers or ()):
        if k == SOURCE_HEADER:
            where, _, offset = bytes(v).decode(errors="replace").rpartition("/")
            return (where, int(offset)) if offset.isdigit() and where else None
    return None


def partition_for(job: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (and aiokafka's) gives the key `job`."""
    return int(murmur2(job) & 0x7FFFFFFF) % partitions


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, stage: Repartitioner) -> None:
        self.stage = stage

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.stage.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.stage.on_assigned(set(assigned))


class Repartitioner:
    """Consumes the repartitioned input topics in the stage's group and forwards each batch to
    the internal topics; `run()` until `stop()`."""

    def __init__(
        self, cfg: DaemonConfig, registry: CollectorRegistry, decoders: dict[str, Decoder]
    ) -> None:
        self.cfg = cfg
        self.topics = cfg.repartitioned_topics()
        self.decoders = {t: decoders[t] for t in self.topics}
        self.job_headers = {t: cfg.topic_config(t).job_header for t in self.topics}
        self.metrics = RepartitionMetrics(registry)
        self.consumer: Any = None
        self.producer: Any = None
        self.partitions: dict[str, int] = {}  # internal topic -> partition count
        self._job_partition: dict[tuple[str, bytes], int] = {}
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.generation = 0
        self.rebalancing = False  # between a revocation and the next assignment
        self.owned: set[TopicPartition] = set()
        self.uncommitted: dict[TopicPartition, int] = {}  # forwarded, not yet committed
        self.forwarded: dict[TopicPartition, int] = {}  # next input offset to forward
        self.last_alive = time.monotonic()
        self.started = False
        self.admin: Any = None
        self.pending = list(self.topics)  # input topics without an internal topic yet
        self.last_topic_check = 0.0

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Creates the internal topics of the input topics that exist, then joins the stage's
        group for those (`run` adds the others once they exist)."""
        cfg = self.cfg
        self.admin = AIOKafkaAdminClient(**kafka_clients.connection_kwargs(cfg))
        await self.admin.start()
        await self._ensure_topics()
        self.producer = AIOKafkaProducer(
            **kafka_clients.connection_kwargs(cfg),
            acks="all",
            enable_idempotence=True,
            linger_ms=cfg.linger_ms,
            max_batch_size=MAX_BATCH_BYTES,
            max_request_size=MAX_MESSAGE_BYTES,
            **(
                {"compression_type": cfg.compression_type} if cfg.compression_type != "none" else {}
            ),
        )
        self.consumer = AIOKafkaConsumer(
            **kafka_clients.connection_kwargs(cfg),
            group_id=cfg.repartition_group(),
            group_instance_id=(
                f"{cfg.group_instance_id}-repartition" if cfg.group_instance_id else None
            ),
            enable_auto_commit=False,
            auto_offset_reset="latest" if cfg.initial_offset == "latest" else "earliest",
            isolation_level=cfg.isolation_level,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            max_poll_interval_ms=cfg.max_poll_interval_ms,
            max_partition_fetch_bytes=cfg.budget().max_partition_fetch_bytes,
            fetch_max_bytes=cfg.budget().fetch_max_bytes,
            fetch_max_wait_ms=cfg.fetch_max_wait_ms,
            fetch_min_bytes=cfg.fetch_min_bytes,
            check_crcs=cfg.check_crcs,
        )
        await self.producer.start()
        await self.consumer.start()
        self._subscribe()
        self.started = True

    def _subscribe(self) -> None:
        ready = [t for t in self.topics if self.cfg.repartition_topic(t) in self.partitions]
        if ready:
            self.consumer.subscribe(ready, listener=_Listener(self))
            log.info(
                "repartitioning %s as group %s into %s",
                ", ".join(ready),
                self.cfg.repartition_group(),
                ", ".join(self.cfg.repartition_topic(t) for t in ready),
            )

    async def _ensure_topics(self) -> bool:
        """One pass over the topics still without an internal topic; True if one was made."""
        self.last_topic_check = time.monotonic()
        made = False
        for t in self.pending:
            if await self._ensure_topic(self.admin, t):
                made = True
        self.pending = [
            t for t in self.pending if self.cfg.repartition_topic(t) not in self.partitions
        ]
        if self.pending:
            log.warning(
                "input topic(s) %s do not exist yet: repartitioned once they do",
                ", ".join(self.pending),
            )
        return made

    async def _ensure_topic(self, admin: Any, topic: str) -> bool:
        """Creates the internal topic of `topic` with its partition count; False while the
        input topic does not exist."""
        internal = self.cfg.repartition_topic(topic)
        counts, replicas = await _partition_counts(admin, [topic, internal])
        if topic not in counts:
            return False
        if internal in counts:
            if counts[internal] != counts[topic]:
                log.warning(
                    "repartition topic %s has %d partitions, its input %s has %d: "
                    "jobs are spread over the %d",
                    internal,
                    counts[internal],
                    topic,
                    counts[topic],
                    counts[internal],
                )
            self.partitions[internal] = counts[internal]
            return True
        new = NewTopic(
            name=internal,
            num_partitions=counts[topic],
            replication_factor=replicas[topic],  # as durable as its input
            topic_configs={
                "retention.ms": str(self.cfg.repartition_retention_ms),
                "max.message.bytes": str(MAX_MESSAGE_BYTES),
                "cleanup.policy": "delete",
            },
        )
        resp = await admin.create_topics([new], timeout_ms=self.cfg.request_timeout_ms)
        for entry in resp.topic_errors:
            code = entry[1]
            if code not in (0, TopicAlreadyExistsError.errno):
                message = entry[2] if len(entry) > 2 else ""
                raise RepartitionError(f"cannot create repartition topic {internal}: {message}")
        log.info("repartition topic %s: %d partitions", internal, counts[topic])
        await _wait_for_leaders(admin, internal, counts[topic])
        self.partitions[internal] = counts[topic]
        return True

    def stop(self) -> None:
        self.stopping.set()

    async def run(self) -> None:
        """Forwards batches until `stop()`, then commits what was forwarded."""
        while not self.stopping.is_set():
            due = time.monotonic() - self.last_topic_check >= TOPIC_WAIT_S
            if self.pending and due and await self._ensure_topics():
                self._subscribe()
            if len(self.pending) == len(self.topics):  # nothing to read yet
                self.last_alive = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), self.cfg.poll_interval_ms / 1000)
                continue
            generation = self.generation
            batch = await self.consumer.getmany(
                timeout_ms=self.cfg.poll_interval_ms,
                max_records=self.cfg.budget().max_batch_records,
            )
            async with self.lock:
                self.last_alive = time.monotonic()
                if self.rebalancing:
                    continue  # of the old assignment: the new one reads from the committed offsets
                assigned = self.consumer.assignment()
                parts = {tp: rs for tp, rs in batch.items() if rs and tp in assigned}
                if parts:
                    await self._forward(parts)
                    if generation != self.generation:
                        self._continue_after(parts)
                await self._commit()
                self._refresh_lag()

    def _continue_after(self, parts: dict[TopicPartition, list[Any]]) -> None:
        """After a rebalance during the fetch, the batch may come from either assignment; the
        next fetch of each partition continues right after what was forwarded. (Dropping the
        batch instead lost it whenever the new assignment had fetched it: its position had
        already moved past it.) At worst this forwards a record twice, never skips one."""
        assigned = self.consumer.assignment()
        for tp, records in parts.items():
            if tp in assigned:
                self.consumer.seek(tp, records[-1].offset + 1)

    async def close(self) -> None:
        clients = (("consumer", self.consumer), ("producer", self.producer), ("admin", self.admin))
        for name, client in clients:
            if client is not None:
                try:
                    await (client.close() if name == "admin" else client.stop())
                except Exception as e:
                    log.warning("closing the repartition %s failed: %s", name, e)

    def problems(self) -> list[str]:
        """Why the stage is not ready (empty when it is)."""
        age = time.monotonic() - self.last_alive
        if not self.started:
            return ["repartition stage not started"]
        if age > max(30.0, 4 * self.cfg.poll_interval_ms / 1000):
            return ["repartition loop stalled"]
        return []

    # --- forwarding -----------------------------------------------------------------------

    async def _forward(self, parts: dict[TopicPartition, list[Any]]) -> None:
        """Sends every record of `parts` to its internal topic and waits for the acks."""
        futures: list[tuple[asyncio.Future[Any], list[tuple[TopicPartition, Any]]]] = []
        for tp, records in parts.items():
            internal = self.cfg.repartition_topic(tp.topic)
            targets = await asyncio.to_thread(self._targets, tp, records, internal)
            batches: dict[int, tuple[Any, list[tuple[TopicPartition, Any]]]] = {}
            for r, p in zip(records, targets, strict=True):
                entry = batches.get(p)
                if entry is None:
                    entry = batches[p] = (self.producer.create_batch(), [])
                if not _append(entry[0], tp, r):
                    futures.append(await self._send(entry, internal, p))
                    entry = batches[p] = (self.producer.create_batch(), [])
                    _append(entry[0], tp, r)
                entry[1].append((tp, r))
            for p, entry in batches.items():
                futures.append(await self._send(entry, internal, p))
            self.uncommitted[tp] = self.forwarded[tp] = records[-1].offset + 1
        for fut, sent in futures:
            try:
                await fut
            except (MessageSizeTooLargeError, RecordTooLargeError):
                await self._send_alone(sent)
            except KafkaError as e:
                raise RepartitionError(f"forwarding to the repartition topic failed: {e!r}") from e

    def _targets(self, tp: TopicPartition, records: Sequence[Any], internal: str) -> list[int]:
        """The internal partition of each record (its job's; the input partition's number
        for records the analysis will reject)."""
        job_header = self.job_headers[tp.topic]
        jobs = self.decoders[tp.topic].jobs(
            [r.value if r.value is not None else b"" for r in records],
            [r.key for r in records],
            [header(r.headers, job_header) if r.headers else None for r in records],
        )
        n = self.partitions[internal]
        cache = self._job_partition
        if len(cache) > PARTITION_CACHE:
            cache.clear()
        out = []
        without = 0
        for job in jobs:
            if job is None:
                without += 1
                out.append(tp.partition % n)
                continue
            p = cache.get((internal, job))
            if p is None:
                p = cache[(internal, job)] = partition_for(job, n)
            out.append(p)
        self.metrics.records.labels(tp.topic).inc(len(jobs) - without)
        if without:
            self.metrics.without_job.labels(tp.topic).inc(without)
        return out

    async def _send(
        self, entry: tuple[Any, list[tuple[TopicPartition, Any]]], topic: str, partition: int
    ) -> tuple[asyncio.Future[Any], list[tuple[TopicPartition, Any]]]:
        batch, sent = entry
        batch.close()
        return await self.producer.send_batch(batch, topic, partition=partition), sent

    async def _send_alone(self, sent: list[tuple[TopicPartition, Any]]) -> None:
        """A batch the broker refused as too large: each record on its own; one that is still
        refused is logged with its offset and skipped (no record may stop a partition)."""
        for tp, r in sent:
            internal = self.cfg.repartition_topic(tp.topic)
            partition = self._targets(tp, [r], internal)[0]
            batch = self.producer.create_batch()
            _append(batch, tp, r)
            try:
                fut, _ = await self._send((batch, []), internal, partition)
                await fut
            except (MessageSizeTooLargeError, RecordTooLargeError) as e:
                log.error(
                    "record %s/%d/%d skipped: the broker refuses it on %s (%r)",
                    tp.topic,
                    tp.partition,
                    r.offset,
                    internal,
                    e,
                )
                self.metrics.skipped.inc()

    async def _commit(self) -> None:
        offsets = {tp: o for tp, o in self.uncommitted.items() if tp in self.owned}
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except CommitFailedError as e:
            # the group rebalanced: the next owner forwards these again (at least once)
            log.info("repartition commit failed, the group is rebalancing: %s", e)
        except KafkaError as e:
            log.warning("repartition commit failed, retrying later: %r", e)
            return
        for tp in offsets:
            self.uncommitted.pop(tp, None)

    def _refresh_lag(self) -> None:
        for tp in self.owned:
            hw = self.consumer.highwater(tp)
            pos = self.forwarded.get(tp)
            if hw is not None and pos is not None:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(0, hw - pos))

    # --- rebalancing ----------------------------------------------------------------------

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.generation += 1
        self.rebalancing = True
        async with self.lock:
            await self._commit()

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.generation += 1
        async with self.lock:
            self.rebalancing = False
            for tp in self.owned - assigned:
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(tp.topic, str(tp.partition))
                self.uncommitted.pop(tp, None)
                self.forwarded.pop(tp, None)
            self.owned = set(assigned)
            self.metrics.partitions.set(len(assigned))
            self.last_alive = time.monotonic()
            if self.cfg.initial_offset == "window":
                await self._start_fresh_at_window(assigned)
            log.info("repartition partitions assigned: %d", len(assigned))

    async def _start_fresh_at_window(self, assigned: set[TopicPartition]) -> None:
        """Partitions the group never committed start one replay window before now, as the
        analysis of keyed input does."""
        fresh = [tp for tp in assigned if await self.consumer.committed(tp) is None]
        if not fresh:
            return
        since = int(time.time() * 1000) - self.cfg.replay_window_ms
        found = await self.consumer.offsets_for_times({tp: since for tp in fresh})
        ends = await self.consumer.end_offsets(fresh)
        for tp in fresh:
            hit = found.get(tp)
            self.consumer.seek(tp, hit.offset if hit is not None else ends[tp])


def _append(batch: Any, tp: TopicPartition, r: Any) -> bool:
    headers = [
        *(r.headers or ()),
        (SOURCE_HEADER, f"{tp.topic}/{tp.partition}/{r.offset}".encode()),
    ]
    meta = batch.append(timestamp=r.timestamp, key=r.key, value=r.value, headers=headers)
    return meta is not None


async def _partition_counts(admin: Any, topics: list[str]) -> tuple[dict[str, int], dict[str, int]]:
    """Partition count and replication factor of each topic that exists."""
    described = [
        d
        for d in await admin.describe_topics(topics)
        if d.get("error_code", 0) == 0 and d.get("partitions")
    ]
    counts = {d["topic"]: len(d["partitions"]) for d in described}
    replicas = {d["topic"]: max(1, len(d["partitions"][0].get("replicas", ()))) for d in described}
    return counts, replicas


async def _wait_for_leaders(admin: Any, topic: str, partitions: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        described = await admin.describe_topics([topic])
        parts = described[0]["partitions"] if described else []
        if len(parts) >= partitions and all(p["leader"] >= 0 for p in parts):
            return
        await asyncio.sleep(0.1)
    raise RepartitionError(f"repartition topic {topic} has no leader for every partition")
