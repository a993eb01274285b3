"""`rankwatch run`: one member of the consumer group. Fetch a batch, feed each partition's
records to the engine in one call, poll the engine, publish new or changed diagnoses, and
commit offsets only after the broker acknowledged what was published (see publisher.py).

On assignment the daemon rebuilds the state of its new partitions by re-reading a replay window
before the committed offset (rebuild.py), and refreshes its index of what is already on the
output topic (published.py) so that nothing is published twice. On revoke it checkpoints and,
once the new assignment is known, drops the jobs of the partitions it lost (jobs.py).

Offsets per partition: positions.py; which diagnoses go out when: outbox.py; a fetched batch
as engine input: feeding.py; the engine on its own thread: engine_worker.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Sequence
from typing import Any

import orjson
from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from rankwatch import __version__
from rankwatch.catalog_loader import Catalog
from rankwatch.daemon import kafka_clients, rawrecords
from rankwatch.daemon.allocator import TRIM_AFTER_BYTES, release_free_heap
from rankwatch.daemon.bounds import max_entries
from rankwatch.daemon.broker_wait import start_when_reachable
from rankwatch.daemon.config import AUTO, DaemonConfig, load_catalog
from rankwatch.daemon.engine_worker import EngineWorker
from rankwatch.daemon.feeding import PartitionBatch, prepare
from rankwatch.daemon.http import HttpServer, http_url
from rankwatch.daemon.jobs import JobMap, partition_of_origin
from rankwatch.daemon.keying import decide_repartition
from rankwatch.daemon.logs import awaiting
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.outbox import Outbox
from rankwatch.daemon.positions import Positions
from rankwatch.daemon.published import PublishedIndex
from rankwatch.daemon.publisher import Publisher, PublishError
from rankwatch.daemon.rebuild import plan_starts
from rankwatch.daemon.repartition import (
    SOURCE_HEADER,
    CopyFilter,
    Repartitioner,
    RepartitionError,
)
from rankwatch.daemon.sdnotify import Notifier
from rankwatch.daemon.tail import TopicTail
from rankwatch.engine import REJECT_REASONS, Decoder, Engine, FedRecords
from rankwatch.flight_recorder.daemon import FlightRecorderFeed

log = logging.getLogger("rankwatch.daemon")

HOUSEKEEPING_S = 60.0
FLEET_SYNC_S = 15.0  # how often the diagnoses topic is read on for the suspect-host metrics
FLEET_SYNC_LIMIT_S = 10.0  # the most one such read may hold the loop
KAFKA_PROBE_S = 5.0  # how often the broker is asked for metadata (rankwatch_kafka_up, /readyz)
KAFKA_PROBE_STALE_S = 4 * KAFKA_PROBE_S  # an answer older than this says nothing about now
KEEPALIVE_S = 5.0  # the longest gap between two sd_notify keep-alives


class DaemonError(RuntimeError):
    """The daemon cannot go on (Kafka unreachable, a publish failed); exit status 1."""


def now_ms() -> int:
    return int(time.time() * 1000)


def _source_of(record: Any) -> str | None:
    """Where a record of a repartition topic was first read (topic/partition/offset)."""
    for k, v in record.headers or ():
        if k == SOURCE_HEADER:
            return bytes(v).decode(errors="replace")
    return None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.daemon.on_revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.daemon.on_assigned(set(assigned))


class Daemon:
    def __init__(self, cfg: DaemonConfig, catalog: Catalog | None = None) -> None:
        self.cfg = cfg
        catalog = catalog if catalog is not None else load_catalog(cfg)
        self.engine = EngineWorker(Engine(catalog, cfg.engine_config()))
        self.metrics = DaemonMetrics(REJECT_REASONS, __version__, cfg.suspect_window_ms / 1000)
        self.decoders: dict[str, tuple[Decoder, str]] = {}
        self.repartitioner: Repartitioner | None = None
        self._repartition_task: asyncio.Task[None] | None = None
        self._set_topics(cfg)
        self._unkeyed_warned: set[str] = set()
        self.copies = CopyFilter()  # second copies the repartition stage sent after a crash
        self._fetched_end: dict[TopicPartition, int] = {}
        self.metrics.memory_budget.set(cfg.budget().engine_bytes)
        self.max_batch_records = cfg.budget().max_batch_records
        retain_s = 2 * cfg.replay_window_ms / 1000 + 3600
        self.index = PublishedIndex(cfg.incident_horizon_ms, retain_s)
        self.jobmap = JobMap()
        self.max_entries = max_entries(cfg.memory_budget_bytes)  # per bookkeeping structure
        self.http = HttpServer(self.metrics.registry, self.health, self.readiness)
        self.notifier = Notifier()
        self.kafka_up = False
        self.kafka_checked = 0.0  # monotonic time of the last metadata answer or failure
        self.connecting = False  # waiting for the broker at start
        self.output_seen = False  # the output topic existed once (so it may go missing)
        self.output_missing = False
        self._kafka_probe: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self.consumer: Any = None
        self.reader: Any = None
        self.publisher: Publisher | None = None
        self.tail: TopicTail | None = None
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.failure: BaseException | None = None
        self.generation = 0  # bumped by every rebalance callback
        self.pos = Positions()
        self.outbox = Outbox(self.index, self.jobmap, self.metrics, cfg.budget().outbox_bytes)
        self.poll_bytes = cfg.budget().poll_bytes
        self.metrics.outbox_share.set(self.outbox.share)
        self._inflight: asyncio.Task[None] | None = None
        self.rebalancing = False  # revoked, not yet assigned: nothing is fed
        self.started = False
        self.last_alive = time.monotonic()
        self.last_commit = time.monotonic()
        self.last_housekeeping = time.monotonic()
        self.last_fleet_sync = time.monotonic()
        self.flight_recorder: FlightRecorderFeed | None = None
        self._fr_task: asyncio.Task[None] | None = None
        if cfg.flight_recorder_dir:
            self.flight_recorder = FlightRecorderFeed(
                cfg.flight_recorder_dir,
                cfg.flight_recorder_poll_ms,
                cfg.flight_recorder_quiet_ms,
                cfg.max_dump_bytes,
                self.metrics.registry,
                # one job's dumps at a time, held only while they are analyzed: the share
                # the budget leaves as headroom
                memory_bytes=cfg.memory_budget_bytes // 10,
            )

    # --- lifecycle ------------------------------------------------------------------------

    def stop(self) -> None:
        """Asks the loop to stop fetching, drain and close (what SIGTERM/SIGINT do)."""
        if not self.stopping.is_set():
            log.info("stopping: draining and closing")
            self.notifier.stopping()
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    async def run(self) -> None:
        """Runs until `stop()`; raises DaemonError if it cannot go on."""
        listen = self.cfg.metrics_listen()
        if listen is not None:
            try:
                await self.http.start(*listen)
            except OSError as e:
                raise DaemonError(f"metrics_addr {self.cfg.metrics_addr}: {e.strerror}") from None
            log.info("metrics on %s", http_url(*(self.http.address or listen), "/metrics"))
        self._keepalive = asyncio.create_task(self._keep_alive())
        try:
            if not await self._connect():
                return  # stopped while waiting for the broker
            self.outbox.publisher = self.publisher
            self.started = True
            self._kafka_probe = asyncio.create_task(self._probe_kafka())
            self._start_repartition()
            self._start_flight_recorder()
            while not self.stopping.is_set() and self.failure is None:
                await self._step()
            await self._stop_repartition()  # all it read is forwarded before the analysis drains
            if self.failure is None:
                await self._drain()
        finally:
            await self._close()
        if self.failure is not None:
            raise DaemonError(str(self.failure)) from self.failure

    def _set_topics(self, cfg: DaemonConfig) -> None:
        """The decoders of the topics the analysis reads: an input topic, or the repartition
        topic of one, decoded as its input topic is."""
        self.cfg = cfg
        self.decoders = {}
        for topic, analysed in zip(cfg.input_topics(), cfg.analysis_topics(), strict=True):
            tc = cfg.topic_config(topic)
            # A repartitioned topic's records were spread over partitions and merged again:
            # a file's lines no longer arrive in order.
            in_order = analysed == topic
            self.decoders[analysed] = (tc.decoder(in_order), tc.job_header)

    async def _decide_then_start(self) -> None:
        """Decides the `repartition = auto` topics from their records (keying.py), makes the
        repartition stage if a topic needs one, then starts the clients; all of it waits for
        the broker together."""
        cfg = self.cfg
        if any(cfg.topic_config(t).repartition == AUTO for t in cfg.input_topics()):
            self._set_topics(await decide_repartition(cfg))
        if self.repartitioner is None and self.cfg.repartitioned_topics():
            self.repartitioner = Repartitioner(
                self.cfg,
                self.metrics.registry,
                {
                    t: self.decoders[self.cfg.repartition_topic(t)][0]
                    for t in self.cfg.repartitioned_topics()
                },
            )
        await self._start_clients()

    async def _connect(self) -> bool:
        """Starts the Kafka clients, waiting for the broker while it cannot be reached (see
        broker_wait.py); False if stopped first."""
        where = f"the Kafka broker at {self.cfg.bootstrap_servers}"
        self.connecting = True
        self.notifier.status(f"waiting for {where}")
        try:
            return await start_when_reachable(
                self._decide_then_start, self._stop_clients, self.stopping, where, log
            )
        except KafkaError as e:
            raise DaemonError(f"cannot reach Kafka at {self.cfg.bootstrap_servers}: {e}") from None
        finally:
            self.connecting = False

    async def _start_clients(self) -> None:
        cfg = self.cfg
        self.publisher = Publisher(cfg, self.metrics)
        self.consumer = kafka_clients.input_consumer(cfg)
        self.reader = kafka_clients.reader_consumer(cfg)
        kafka_log = logging.getLogger("aiokafka")
        level = kafka_log.level
        kafka_log.setLevel(max(level, logging.CRITICAL))  # a failed start is reported below
        try:
            await self.publisher.start()
            await self.reader.start()
            await self.consumer.start()
            rawrecords.install(self.consumer)
            if self.repartitioner is not None:
                await self.repartitioner.start()  # makes the internal topics subscribed below
            topics = await self.reader.topics()
        except RepartitionError as e:
            raise DaemonError(str(e)) from None
        finally:
            kafka_log.setLevel(level)
        self.tail = TopicTail(self.reader, cfg.output_topic)
        for topic in [*cfg.input_topics(), cfg.output_topic]:
            if topic not in topics:
                awaiting(topic)
        self.output_seen = cfg.output_topic in topics
        self.consumer.subscribe(cfg.analysis_topics(), listener=_Listener(self))
        log.info(
            "consuming %s as group %s from %s; diagnoses to %s%s%s",
            ", ".join(cfg.analysis_topics()),
            cfg.group_id,
            cfg.bootstrap_servers,
            cfg.output_topic,
            f"; rejects to {cfg.dead_letter_topic}" if cfg.dead_letter_topic else "",
            f"; transactional id {cfg.transactional_id}" if cfg.transactional_id else "",
        )

    def _start_flight_recorder(self) -> None:
        if self.flight_recorder is None:
            return
        task = asyncio.create_task(self.flight_recorder.run(self._feed_flight_recorder))
        task.add_done_callback(self._flight_recorder_done)
        self._fr_task = task

    def _flight_recorder_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("Flight Recorder watcher stopped: %r", task.exception())

    async def _feed_flight_recorder(
        self, job: str, streams: Sequence[tuple[int, str, bytes]]
    ) -> None:
        """A job's Flight Recorder lines into the engine, between two batches of records."""
        async with self.lock:
            await self._settle()
            await self.engine.feed_streams(job, streams)
            try:
                await self._poll_and_publish()
            except PublishError as e:
                self._fail(e)

    def _start_repartition(self) -> None:
        if self.repartitioner is None:
            return
        task = asyncio.create_task(self.repartitioner.run())
        task.add_done_callback(self._repartition_done)
        self._repartition_task = task

    def _repartition_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._fail(
                error
                if isinstance(error, RepartitionError)
                else RepartitionError(f"repartition stage failed: {error!r}")
            )

    async def _stop_repartition(self) -> None:
        if self.repartitioner is None or self._repartition_task is None:
            return
        self.repartitioner.stop()
        with contextlib.suppress(Exception):  # its failure was reported by _repartition_done
            await self._repartition_task

    async def _flush(self) -> bool:
        """Everything fed so far: diagnosed, published, acknowledged, offsets committed
        (False while delivery is held)."""
        await self._settle()
        await self._poll_and_publish()
        return await self._checkpoint()

    async def _drain(self) -> None:
        async with self.lock:
            try:
                drained = await self._flush()
            except PublishError as e:
                self._fail(e)
                return
        if drained:
            log.info("drained: offsets committed")
            return
        assert self.publisher is not None
        log.warning(
            "stopping with %d record(s) not delivered (%r): their offsets are not committed, "
            "so the next start reads their input again",
            self.publisher.held,
            self.publisher.holding,
        )

    async def _close(self) -> None:
        for task in (self._fr_task, self._kafka_probe, self._keepalive):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self._inflight is not None:  # only after a failure: its outcome no longer matters
            with contextlib.suppress(Exception):
                await self._inflight
        if self._repartition_task is not None and not self._repartition_task.done():
            self._repartition_task.cancel()
            with contextlib.suppress(BaseException):
                await self._repartition_task
        await self._stop_clients()
        await self.http.close()
        self.engine.close()

    async def _stop_clients(self) -> None:
        """Closes the Kafka clients (also those of a start that failed part way)."""
        if self.repartitioner is not None:
            await self.repartitioner.close()
        clients = (
            ("consumer", self.consumer),
            ("reader", self.reader),
            ("producer", self.publisher),
        )
        for name, client in clients:
            if client is not None:
                try:
                    await client.stop()
                except Exception as e:
                    log.warning("closing the %s failed: %s", name, e)
        self.consumer = self.reader = self.publisher = None

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            log.error("%s", error)
            self.failure = error
        self.stopping.set()

    # --- health ---------------------------------------------------------------------------

    def _loop_age_s(self) -> tuple[float, bool]:
        age = time.monotonic() - self.last_alive
        return age, age < max(30.0, 4 * self.cfg.poll_interval_ms / 1000)

    def waiting_on_kafka(self) -> str | None:
        """Why the loop may stand still without being wedged: it waits for the broker (at
        start, or unreachable at the last metadata request) or for the output topic. None
        when Kafka answered a recent request and nothing is held (then a loop that stands
        still is wedged). A probe that stopped answering is no excuse: the event loop itself
        may be what is stuck."""
        if self.connecting:
            return "waiting for the broker"
        if time.monotonic() - self.kafka_checked > KAFKA_PROBE_STALE_S:
            return None
        if not self.kafka_up:
            return "broker unreachable"
        if self.output_missing:
            return f"output topic {self.cfg.output_topic} missing"
        if self.publisher is not None and self.publisher.holding is not None:
            return f"diagnoses held: {self.publisher.holding!r}"
        return None

    def health(self) -> tuple[bool, bytes]:
        """Live: not failed, and the loop moved recently or waits for Kafka. A broker outage
        or a missing output topic is no reason to restart the daemon (a new one would wait
        for the same broker): that is readiness (/readyz, rankwatch_kafka_up)."""
        age, moving = self._loop_age_s()
        waiting = self.waiting_on_kafka()
        ok = self.failure is None and (moving or waiting is not None)
        body = {
            "status": "ok" if ok else "unhealthy",
            "started": self.started,
            "stopping": self.stopping.is_set(),
            "waiting": waiting,
            "partitions": len(self.pos.owned),
            "seconds_since_last_loop": round(age, 3),
            "failure": str(self.failure) if self.failure else None,
        }
        return ok, orjson.dumps(body) + b"\n"

    def readiness(self) -> tuple[bool, bytes]:
        """Ready: started, the broker answered the last metadata request, the output topic is
        there and takes what is published, partitions are assigned (a member without
        partitions does no work, so it is not ready) and the loop moves."""
        age, moving = self._loop_age_s()
        partitions = len(self.pos.owned)
        holding = self.publisher.holding if self.publisher is not None else None
        reasons = [
            why
            for bad, why in (
                (self.connecting, "waiting for the broker"),
                (not self.started and not self.connecting, "not started"),
                (self.failure is not None, "failed"),
                (self.stopping.is_set(), "stopping"),
                (self.started and not self.kafka_up, "broker unreachable"),
                (self.output_missing, "output topic missing"),
                (holding is not None, f"diagnoses held: {holding!r}"),
                (self.rebalancing or partitions == 0, "no partitions assigned"),
                (not moving, "loop stalled"),
            )
            if bad
        ]
        if self.repartitioner is not None and self.failure is None:
            reasons += self.repartitioner.problems()
        body = {
            "status": "ready" if not reasons else "not ready",
            "reasons": reasons,
            "kafka_up": self.kafka_up,
            "partitions": partitions,
            "seconds_since_last_loop": round(age, 3),
        }
        return not reasons, orjson.dumps(body) + b"\n"

    async def _probe_kafka(self) -> None:
        """Asks the broker for cluster metadata every KAFKA_PROBE_S seconds: is it there, and
        is the output topic (once seen: a topic missing at start may be auto-created by the
        first publish)."""
        timeout_s = min(KAFKA_PROBE_S, self.cfg.request_timeout_ms / 1000)
        while True:
            try:
                topics = await asyncio.wait_for(self.reader.topics(), timeout_s)
                up = True
            except (KafkaError, TimeoutError, OSError):
                topics, up = set(), False
            if up != self.kafka_up:
                log.log(
                    logging.INFO if up else logging.WARNING,
                    "broker %s",
                    "reachable" if up else "unreachable",
                )
            self.kafka_up = up
            self.kafka_checked = time.monotonic()
            self.metrics.kafka_up.set(1 if up else 0)
            if up:
                self._note_output_topic(self.cfg.output_topic in topics)
            await asyncio.sleep(KAFKA_PROBE_S)

    def _note_output_topic(self, there: bool) -> None:
        missing = self.output_seen and not there
        if missing != self.output_missing:
            log.log(
                logging.WARNING if missing else logging.INFO,
                "output topic %s %s",
                self.cfg.output_topic,
                "is missing: diagnoses are held until it is back" if missing else "is back",
            )
        self.output_missing = missing
        self.output_seen = self.output_seen or there
        self.metrics.output_topic_missing.set(1 if missing else 0)

    async def _keep_alive(self) -> None:
        """Tells systemd the daemon lives for as long as /healthz says so: WATCHDOG=1 once
        READY, and before it an extension of the start timeout (waiting for the broker at
        start is not a failed start)."""
        every_s = min(self.notifier.watchdog_every_s, KEEPALIVE_S)
        while True:
            if self.health()[0]:
                if self.notifier.ready_sent:
                    self.notifier.watchdog()
                else:
                    self.notifier.extend_start(3 * every_s)
            await asyncio.sleep(every_s)

    # --- the loop -------------------------------------------------------------------------
    #
    # Two stages overlap on the two cores: while the engine thread scans and correlates batch
    # N (GIL released), the event loop fetches and unpacks batch N+1. `_inflight` is the task
    # that feeds batch N and then polls and publishes; whoever takes the lock first waits for
    # it (`_settle`), so nothing else touches offsets or the producer while it runs.

    async def _step(self) -> None:
        generation = self.generation
        batch = await self.consumer.getmany(
            timeout_ms=self.cfg.poll_interval_ms, max_records=self.max_batch_records
        )
        async with self.lock:
            self.last_alive = time.monotonic()
            self.notifier.watchdog()
            try:
                await self._settle()
                if self.outbox.over_share:
                    await self._relieve_outbox()
                parts = self._accept(batch, rebalanced=generation != self.generation)
                if parts:
                    t0 = time.perf_counter()
                    fed = self.engine.submit_feed_many([p.feed_args() for p in parts])
                    self._inflight = asyncio.create_task(self._feed(parts, fed, t0))
                else:
                    await self._poll_and_publish()
                    await self._refresh_gauges()
                if time.monotonic() - self.last_commit >= self.cfg.commit_interval_ms / 1000:
                    await self._checkpoint()
            except PublishError as e:
                self._fail(e)

    async def _relieve_outbox(self) -> None:
        """What keeps the outbox above its share between polls (held updates; in a transaction,
        the values sent) leaves only at a checkpoint: take it now, before the next batch is
        fed (counted as time the feed waited)."""
        t0 = time.monotonic()
        await self._checkpoint()
        self.metrics.outbox_paused.inc(time.monotonic() - t0)

    async def _settle(self) -> None:
        """Waits for the batch being fed, polled and published (raises what it raised)."""
        task, self._inflight = self._inflight, None
        if task is not None:
            await task

    def _accept(
        self, batch: dict[TopicPartition, list[Any]], rebalanced: bool
    ) -> list[PartitionBatch]:
        parts: list[PartitionBatch] = []
        if self.rebalancing:
            return parts  # between revoke and assign: refetched from the committed offsets
        assigned = self._assigned()
        for tp, records in batch.items():
            if tp not in assigned or not records:
                continue
            expected = self.pos.expected(tp)
            if expected is not None:
                if records[0].offset < expected:  # already fed (refetched after a rebalance)
                    records = [r for r in records if r.offset >= expected]
                    if not records:
                        continue
                if rebalanced and records[0].offset != expected:
                    # fetched before a seek of the last rebalance: read again from our position
                    self.consumer.seek(tp, expected)
                    continue
            records = self._up_to_replay_end(tp, records)
            end = int(records[-1].offset) + 1
            if self.repartitioner is not None:
                records = self._first_copies(tp, records)
                if not records:  # only second copies: nothing to feed, nothing to wait for
                    self.pos.accepted(tp, end)
                    self.pos.fed(tp, end)
                    continue
                self._fetched_end[tp] = end  # past second copies dropped at the batch's end
            decoder, job_header = self.decoders[tp.topic]
            part = prepare(tp, records, decoder, job_header, self.pos.replay_end_of(tp))
            parts.append(part)
            self.pos.accepted(tp, end)  # the next fetch continues after this batch
        return parts

    def _up_to_replay_end(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """A batch in which the replay ends is fed only up to that end (the rest is fetched
        again): what the engine re-emits from replayed input must be judged as a replay
        (`PublishedIndex.decide`), not as news because new records came in the same batch."""
        replay_end = self.pos.replay_end_of(tp)
        if not records[0].offset < replay_end <= records[-1].offset:
            return records
        self.consumer.seek(tp, replay_end)
        return [r for r in records if r.offset < replay_end]

    def _first_copies(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        if self.cfg.source_topic(tp.topic) == tp.topic:
            return records  # a keyed input topic
        fresh = self.copies.fresh(tp, records)
        if len(fresh) < len(records):
            assert self.repartitioner is not None
            self.repartitioner.metrics.copies_dropped.inc(len(records) - len(fresh))
        return fresh

    def _assigned(self) -> set[TopicPartition]:
        """Owned partitions the consumer holds right now (during a rebalance its assignment
        changes before `on_assigned` runs)."""
        assigned: set[TopicPartition] = self.consumer.assignment()
        return self.pos.owned & assigned

    async def _feed(
        self,
        parts: list[PartitionBatch],
        fed: asyncio.Future[list[FedRecords]],
        t0: float,
    ) -> None:
        results = await fed
        for origin, jobs in self.engine.take_new_jobs():
            tp = partition_of_origin(origin)
            if tp is not None:
                self.jobmap.note_jobs(tp, jobs)
        for part, result in zip(parts, results, strict=True):
            await self._fed(part, result)
        await self._poll_and_publish()
        self.metrics.batch_seconds.observe(time.perf_counter() - t0)
        self.metrics.last_batch.set(time.time())
        await self._refresh_gauges()

    async def _fed(self, part: PartitionBatch, fed: FedRecords) -> None:
        """Bookkeeping after the engine took a partition batch: counts, dead letters, the
        offset to commit."""
        tp = part.tp
        self.jobmap.note(tp, fed.keys, fed.headers, self.decoders[tp.topic][0].key_format)
        self.metrics.records_replayed.inc(part.replayed)
        self.metrics.records_in.inc(len(part.records) - part.replayed)
        assert self.publisher is not None
        per_reason: dict[str, int] = {}  # one labelled update per reason and batch
        for i, reason in fed.rejected:
            if i < part.replayed:
                continue  # counted and copied when it was first read
            per_reason[reason] = per_reason.get(reason, 0) + 1
            if self.cfg.dead_letter_topic is not None:
                r = part.records[i]
                source = _source_of(r) or f"{tp.topic}/{tp.partition}/{r.offset}"
                if await self.publisher.send_dead_letter(
                    r.value, r.key, list(r.headers), reason, source
                ):
                    self.metrics.dead_letter.inc()
        for reason, n in per_reason.items():
            self.metrics.rejected.labels(reason).inc(n)
        if None in fed.keys:
            self._unkeyed(part)
        self.pos.fed(tp, max(part.end, self._fetched_end.pop(tp, 0)))

    def _unkeyed(self, part: PartitionBatch) -> None:
        """Records without a key on a topic read as partitioned by job: Kafka spreads them, so
        with more than one daemon a job's ranks may be analysed apart. Counted; said once
        per topic."""
        topic = part.tp.topic
        if topic not in self.cfg.input_topics():
            return  # an internal repartition topic: its records are placed by job
        self.metrics.unkeyed.labels(topic).inc(sum(1 for r in part.records if r.key is None))
        if topic in self._unkeyed_warned:
            return
        self._unkeyed_warned.add(topic)
        log.warning(
            "records of topic %s have no key: Kafka spreads them over partitions, so with more "
            "than one daemon a job's ranks may be diagnosed apart. Set `repartition = true` "
            "for this topic, or restart: `repartition = auto` decides from the records at "
            "start (counted in rankwatch_records_unkeyed_total; see the README, keying)",
            topic,
        )

    def _replaying(self, job: str) -> bool:
        return self.pos.replaying(self.jobmap.partitions_of(job))

    async def _poll_and_publish(self) -> None:
        polled, more = 0, True
        while more:  # a burst in parts of at most `poll_bytes`, each published first
            diagnoses = await self.engine.poll_lazily(now_ms(), self.poll_bytes)
            await self.outbox.offer(diagnoses, self._replaying)
            polled, more = polled + diagnoses.total_bytes, diagnoses.more
        if polled >= TRIM_AFTER_BYTES:
            release_free_heap()  # the burst's pages, decoded and dropped (allocator.py)

    async def _checkpoint(self) -> bool:
        """Waits for every publish to be acknowledged, then commits the offsets of what was
        fed (in one transaction when transactional). False while delivery is held: nothing
        is committed and the input is paused (only what is held waits for the broker)."""
        assert self.publisher is not None
        await self._settle()
        await self.outbox.send_held()
        offsets = self.pos.to_commit(self._assigned())
        try:
            delivered = await self.publisher.checkpoint(offsets, self.consumer)
        except CommitFailedError as e:
            log.info("commit deferred, the group is rebalancing: %s", e)
            return False
        except KafkaError as e:
            if self.cfg.transactional_id:
                raise PublishError(f"transaction failed: {e!r}") from e
            log.warning("commit failed, retrying later: %r", e)
            return False
        self._pause_input(not delivered)
        if not delivered:
            return False
        self.last_commit = time.monotonic()
        if offsets:
            self.metrics.commits.inc()
        self.pos.committed(offsets)
        return True

    def _pause_input(self, pause: bool) -> None:
        assigned = self._assigned()
        if pause:
            self.consumer.pause(*assigned)
        elif self.consumer.paused():
            self.consumer.resume(*self.consumer.paused())

    async def _refresh_gauges(self) -> None:
        for tp in self._assigned():
            hw = self.consumer.highwater(tp)
            if hw is not None:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(self.pos.lag(tp, hw))
        # taken every loop (about 20 µs), so the gauges always match what was fed and polled
        stats = await self.engine.stats()
        self.metrics.update_engine(stats)
        held = int(stats.get("incidents", 0))
        self.metrics.incidents_pending.set(max(0, held - self.engine.diagnosed_count()))
        if self.publisher is not None:
            self.metrics.unacknowledged.set(self.publisher.unacknowledged)
            self.metrics.publish_held.set(self.publisher.held)
        self.metrics.held.set(len(self.outbox.held))
        self.metrics.outbox_bytes.set(self.outbox.bytes)
        self.metrics.outbox_peak.set(self.outbox.peak_queued)
        self.metrics.loops.inc()
        self._bound_bookkeeping()
        mono = time.monotonic()
        if mono - self.last_fleet_sync >= FLEET_SYNC_S and self.tail is not None:
            self.last_fleet_sync = mono
            try:
                # bounded as a whole: a broker that holds the connection but answers nothing
                # (a long GC pause) would hold the loop here for request_timeout_ms
                await asyncio.wait_for(self._read_output(timeout_s=5.0), FLEET_SYNC_LIMIT_S)
            except (KafkaError, OSError, TimeoutError) as e:  # the next sync reads on
                log.warning("reading %s for fleet metrics failed: %r", self.cfg.output_topic, e)
        if mono - self.last_housekeeping >= HOUSEKEEPING_S:
            self.last_housekeeping = mono
            self.index.prune()
            self.jobmap.prune(2 * self.cfg.replay_window_ms / 1000 + 3600)

    def _bound_bookkeeping(self) -> None:
        """Bounds the per-job and per-diagnosis bookkeeping by count (bounds.py), sparing the
        jobs the engine holds, and the published index while a replay may still need it."""
        keep = self.engine.held_jobs.__contains__
        if not self.pos.replaying(self.pos.owned):
            self.index.trim(self.max_entries, keep)
        self.jobmap.trim(self.max_entries, keep)
        self.metrics.fleet.ledger.trim(self.max_entries, keep)
        self.metrics.fleet.catch_up()

    async def _read_output(
        self,
        *,
        since_ms: int | None = None,
        index_since: int | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        """Reads the diagnoses topic on from where it stopped (every daemon's publishes): what
        is published (PublishedIndex) and the suspect hosts."""
        assert self.tail is not None

        def handle(rec: Any) -> None:
            if index_since is None or rec.timestamp >= index_since:
                self.index.load(rec.value)
            self.metrics.fleet.observe(rec.value, int(rec.timestamp))
            self.notifier.watchdog()  # a long first read is progress, not a hang

        try:
            await self.tail.catch_up(handle, since_ms=since_ms, timeout_s=timeout_s)
        finally:
            self.metrics.fleet.refresh()

    # --- rebalancing ----------------------------------------------------------------------

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        self.generation += 1
        async with self.lock:
            if not self.started or self.failure is not None:
                return
            try:
                await self._flush()
            except PublishError as e:
                self._fail(e)
            self.rebalancing = True
            log.info("partitions revoked: %d", len(revoked))

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        self.generation += 1
        async with self.lock:
            if self.failure is not None:
                return
            new = assigned - self.pos.owned
            self.rebalancing = False
            try:
                await self._settle()
                await self._assign(assigned)
            except PublishError as e:
                self._fail(e)
            except (KafkaError, OSError) as e:
                # Read on from the committed offsets: no state rebuild this time.
                log.error("rebuilding state of new partitions failed: %r", e)
                self.pos.forget(new)
                with contextlib.suppress(KafkaError):
                    await self.consumer.seek_to_committed(*new)
            finally:
                self.last_alive = time.monotonic()
            if self.failure is None:
                self.notifier.ready(f"consuming {len(assigned)} partition(s)")

    async def _assign(self, assigned: set[TopicPartition]) -> None:
        self.metrics.rebalances.inc()
        lost = self.pos.owned - assigned
        new = assigned - self.pos.owned
        self.copies.forget(lost | new)  # new ones are rebuilt from their replay window
        for tp in lost | new:
            self._fetched_end.pop(tp, None)
        if lost:
            jobs = self.jobmap.jobs_lost(lost, assigned)
            await self.engine.drop_jobs(jobs)
            self.pos.forget(lost)
            for tp in lost:
                with contextlib.suppress(KeyError):
                    self.metrics.lag.remove(tp.topic, str(tp.partition))
            log.info("partitions lost: %d; dropped %d job(s)", len(lost), len(jobs))
        self.pos.owned = set(assigned)
        self.metrics.partitions.set(len(assigned))
        if not new:
            return
        plan = await plan_starts(self.consumer, self.reader, new, self.cfg, now_ms())
        for tp, (start, replay_end) in plan.starts.items():
            self.consumer.seek(tp, start)
            self.pos.start(tp, start, replay_end)
        assert self.tail is not None
        t0 = time.monotonic()
        before = self.tail.records_read
        # the suspect-host window reaches further back than the index needs
        fleet_since = now_ms() - self.cfg.suspect_window_ms
        await self._read_output(
            since_ms=min(plan.earliest_ms, fleet_since), index_since=plan.earliest_ms
        )
        replay = sum(max(0, e - s) for s, e in plan.starts.values())
        log.info(
            "partitions assigned: %d new (re-reading %d records to rebuild state); "
            "%d published diagnoses known (%d read in %.2f s)",
            len(new),
            replay,
            len(self.index),
            self.tail.records_read - before,
            time.monotonic() - t0,
        )
