"""`rankwatch run`: one member of the consumer group, the wiring of four stages:

    source (source.py: the consumer and the repartition stage, what of a batch is new, offsets)
      -> engine (engine_worker.py: every engine call on one thread; feeding.py: a batch as input)
      -> publish decision (decision.py: published now, held to the checkpoint, or skipped)
      -> sink (publisher.py: diagnoses and dead letters, acknowledged before offsets move)

The loop fetches a batch, feeds each partition's records to the engine in one call, offers
what the engine polls to the decision, and checkpoints: held updates are sent, everything sent
is acknowledged, and only then are the offsets of what was fed committed (at least once,
DESIGN §3.4).

On assignment the daemon rebuilds the state of its new partitions by re-reading a replay window
before the committed offset (rebuild.py), and reads the output topic back (readback.py) so that
the decision knows what is already published. On revoke it checkpoints and, once the new
assignment is known, drops the jobs of the partitions it lost (jobs.py). Health: health.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from rankwatch import __version__
from rankwatch.catalog_loader import Catalog
from rankwatch.daemon import rawrecords
from rankwatch.daemon.allocator import TRIM_AFTER_BYTES, release_free_heap
from rankwatch.daemon.bounds import max_entries
from rankwatch.daemon.decision import Decision
from rankwatch.daemon.engine_worker import EngineWorker
from rankwatch.daemon.feeding import PartitionBatch
from rankwatch.daemon.health import BrokerProbe, Health
from rankwatch.daemon.http import HttpServer
from rankwatch.daemon.jobs import JobMap, partition_of_origin
from rankwatch.daemon.keying import decide_repartition
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.published import PublishedIndex
from rankwatch.daemon.publisher import Publisher, PublishError
from rankwatch.daemon.readback import ReadBack
from rankwatch.daemon.rebuild import plan_starts
from rankwatch.daemon.rejects import handle_rejects
from rankwatch.daemon.repartition import RepartitionError
from rankwatch.daemon.sdnotify import Notifier
from rankwatch.daemon.source import Source
from rankwatch.engine import REJECT_REASONS, Engine, FedRecords
from rankwatch.flight_recorder.daemon import FlightRecorderFeed
from rankwatch.http_url import http_url
from rankwatch.kafka import clients as kafka_clients
from rankwatch.kafka.broker_wait import start_when_reachable
from rankwatch.kafka.tail import TopicTail
from rankwatch.logging_setup import awaiting
from rankwatch.settings.options import AUTO
from rankwatch.settings.run import DaemonConfig, load_catalog

log = logging.getLogger("rankwatch.daemon")

HOUSEKEEPING_S = 60.0


class DaemonError(RuntimeError):
    """The daemon cannot go on (Kafka unreachable, a publish failed); exit status 1."""


def now_ms() -> int:
    return int(time.time() * 1000)


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
        self.source = Source(cfg, self.metrics)
        self.pos = self.source.pos
        self.metrics.memory_budget.set(cfg.budget().engine_bytes)
        self.max_batch_records = cfg.budget().max_batch_records
        retain_s = 2 * cfg.replay_window_ms / 1000 + 3600
        self.index = PublishedIndex(cfg.incident_horizon_ms, retain_s)
        self.jobmap = JobMap()
        self.max_entries = max_entries(cfg.memory_budget_bytes)  # per bookkeeping structure
        self.probe = BrokerProbe(cfg, self.metrics)
        self.checks = Health(self, self.probe)
        self.http = HttpServer(self.metrics.registry, self.checks.live, self.checks.ready)
        self.notifier = Notifier()
        self.connecting = False  # waiting for the broker at start
        self._kafka_probe: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self.reader: Any = None
        self.publisher: Publisher | None = None
        self.readback: ReadBack | None = None
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.failure: BaseException | None = None
        self.generation = 0  # bumped by every rebalance callback
        self.decision = Decision(
            self.index, self.metrics, cfg.budget().outbox_bytes, self.jobmap.note_diagnosis
        )
        self.poll_bytes = cfg.budget().poll_bytes
        self.metrics.outbox_share.set(self.decision.share)
        self._inflight: asyncio.Task[None] | None = None
        self.rebalancing = False  # revoked, not yet assigned: nothing is fed
        self.started = False
        self.last_alive = time.monotonic()
        self.last_commit = time.monotonic()
        self.last_housekeeping = time.monotonic()
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
        self._keepalive = asyncio.create_task(self.checks.keep_alive())
        try:
            if not await self._connect():
                return  # stopped while waiting for the broker
            self.decision.publisher = self.publisher
            self.started = True
            self._kafka_probe = asyncio.create_task(self.probe.run(self.reader))
            self.source.run_repartition(self._fail)
            self._start_flight_recorder()
            while not self.stopping.is_set() and self.failure is None:
                await self._step()
            # all the repartition stage read is forwarded before the analysis drains
            await self.source.stop_repartition()
            if self.failure is None:
                await self._drain()
        finally:
            await self._close()
        if self.failure is not None:
            raise DaemonError(str(self.failure)) from self.failure

    async def _decide_then_start(self) -> None:
        """Decides the `repartition = auto` topics from their records (keying.py), makes the
        repartition stage if a topic needs one, then starts the clients; all of it waits for
        the broker together."""
        cfg = self.cfg
        if any(cfg.topic_config(t).repartition == AUTO for t in cfg.input_topics()):
            self.cfg = await decide_repartition(cfg)
            self.source.set_topics(self.cfg)
        self.source.make_repartitioner(self.metrics.registry)
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
        self.source.consumer = kafka_clients.input_consumer(cfg)
        self.reader = kafka_clients.reader_consumer(cfg)
        kafka_log = logging.getLogger("aiokafka")
        level = kafka_log.level
        kafka_log.setLevel(max(level, logging.CRITICAL))  # a failed start is reported below
        try:
            await self.publisher.start()
            await self.reader.start()
            await self.source.consumer.start()
            rawrecords.install(self.source.consumer)
            repartitioner = self.source.repartitioner
            if repartitioner is not None:
                await repartitioner.start()  # makes the internal topics subscribed below
            topics = await self.reader.topics()
        except RepartitionError as e:
            raise DaemonError(str(e)) from None
        finally:
            kafka_log.setLevel(level)
        tail = TopicTail(self.reader, cfg.output_topic)
        self.readback = ReadBack(tail, self.index, self.metrics, self.notifier)
        for topic in [*cfg.input_topics(), cfg.output_topic]:
            if topic not in topics:
                awaiting(topic)
        self.probe.output_seen = cfg.output_topic in topics
        self.source.consumer.subscribe(cfg.analysis_topics(), listener=_Listener(self))
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

    async def _flush(self) -> bool:
        """Everything fed so far: diagnosed, published, acknowledged, offsets committed
        (False while delivery is held)."""
        await self._settle()
        await self._poll_and_publish()
        return await self._checkpoint(full=True)

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
        await self.source.cancel_repartition()
        await self._stop_clients()
        await self.http.close()
        self.engine.close()

    async def _stop_clients(self) -> None:
        """Closes the Kafka clients (also those of a start that failed part way)."""
        if self.source.repartitioner is not None:
            await self.source.repartitioner.close()
        clients = (
            ("consumer", self.source.consumer),
            ("reader", self.reader),
            ("producer", self.publisher),
        )
        for name, client in clients:
            if client is not None:
                try:
                    await client.stop()
                except Exception as e:
                    log.warning("closing the %s failed: %s", name, e)
        self.source.consumer = self.reader = self.publisher = None

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            log.error("%s", error)
            self.failure = error
        self.stopping.set()

    # --- the loop -------------------------------------------------------------------------
    #
    # Two stages overlap on the two cores: while the engine thread scans and correlates batch
    # N (GIL released), the event loop fetches and unpacks batch N+1. `_inflight` is the task
    # that feeds batch N and then polls and publishes; whoever takes the lock first waits for
    # it (`_settle`), so nothing else touches offsets or the producer while it runs.

    async def _step(self) -> None:
        generation = self.generation
        batch = await self.source.consumer.getmany(
            timeout_ms=self.cfg.poll_interval_ms, max_records=self.max_batch_records
        )
        async with self.lock:
            self.last_alive = time.monotonic()
            self.notifier.watchdog()
            try:
                await self._settle()
                if self.decision.over_share:
                    await self._relieve_outbox()
                rebalanced = generation != self.generation
                # between revoke and assign nothing is fed: refetched from the committed offsets
                parts = [] if self.rebalancing else self.source.accept(batch, rebalanced)
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
        key_format = self.source.decoders[tp.topic][0].key_format
        self.jobmap.note(tp, fed.keys, fed.headers, key_format)
        self.metrics.records_replayed.inc(part.replayed)
        self.metrics.records_in.inc(len(part.records) - part.replayed)
        assert self.publisher is not None
        copy = self.cfg.dead_letter_topic is not None
        await handle_rejects(part, fed.rejected, self.publisher, self.metrics, copy)
        self.source.fed(part, None in fed.keys)

    def _replaying(self, job: str) -> bool:
        return self.pos.replaying(self.jobmap.partitions_of(job))

    async def _poll_and_publish(self, hold: bool = True) -> None:
        """Diagnoses that became ready or changed, offered to the outbox. With `hold` (between
        checkpoints) an open incident diagnosed within the last settle window is not diagnosed
        again yet: a storm of thousands of ranks would have it rebuilt after every batch, and
        its update would wait for the checkpoint anyway (`Decision`). A checkpoint polls without
        `hold` first, so no update is held past the offsets of the records it derives from."""
        polled, more = 0, True
        held: set[TopicPartition] = set()
        while more:  # a burst in parts of at most `poll_bytes`, each published first
            diagnoses = await self.engine.poll_lazily(now_ms(), self.poll_bytes, hold)
            await self.decision.offer(diagnoses, self._replaying)
            polled, more = polled + diagnoses.total_bytes, diagnoses.more
            # every partition that fed a held job, as the engine saw them (the job map knows
            # a job by its keys and where it was first seen, not every partition it came on)
            for origin in diagnoses.held_origins:
                if (tp := partition_of_origin(origin)) is not None:
                    held.add(tp)
        self.pos.polled(held)
        if polled >= TRIM_AFTER_BYTES:
            release_free_heap()  # the burst's pages, decoded and dropped (allocator.py)

    async def _checkpoint(self, full: bool = False) -> bool:
        """Waits for every publish to be acknowledged, then commits the offsets of what the
        diagnoses polled so far reflect (in one transaction when transactional). False while
        delivery is held: nothing is committed and the input is paused (only what is held
        waits for the broker).

        The engine's re-diagnosis hold (`_poll_and_publish`) leaves a storm's incident
        undiagnosed for up to a settle window; the records fed since its last diagnosis are
        then not committed yet, on the partitions of its job (`Positions.polled`), so no
        update is held past the offsets of the records it derives from (at least once,
        DESIGN §3.4) without diagnosing the incident again at every checkpoint. `full` (a
        drain, a revoke), or a partition left behind for a settle window: everything is
        diagnosed now and everything fed is committed."""
        assert self.publisher is not None
        await self._settle()
        settle_s = max(self.cfg.settle_ms, self.cfg.commit_interval_ms) / 1000
        if full or self.pos.lagging(self.source.assigned(), settle_s):
            await self._poll_and_publish(hold=False)
        await self.decision.send_held()
        offsets = self.pos.to_commit(self.source.assigned(), reflected_only=True)
        try:
            delivered = await self.publisher.checkpoint(offsets, self.source.consumer)
        except CommitFailedError as e:
            log.info("commit deferred, the group is rebalancing: %s", e)
            return False
        except KafkaError as e:
            if self.cfg.transactional_id:
                raise PublishError(f"transaction failed: {e!r}") from e
            log.warning("commit failed, retrying later: %r", e)
            return False
        self.source.pause(not delivered)
        if not delivered:
            return False
        self.last_commit = time.monotonic()
        if offsets:
            self.metrics.commits.inc()
        self.pos.committed(offsets)
        return True

    async def _refresh_gauges(self) -> None:
        self.source.lag()
        # taken every loop (about 20 µs), so the gauges always match what was fed and polled
        stats = await self.engine.stats()
        self.metrics.update_engine(stats)
        held = int(stats.get("incidents", 0))
        self.metrics.incidents_pending.set(max(0, held - self.engine.diagnosed_count()))
        if self.publisher is not None:
            self.metrics.unacknowledged.set(self.publisher.unacknowledged)
            self.metrics.publish_held.set(self.publisher.held)
        self.metrics.held.set(len(self.decision.held))
        self.metrics.outbox_bytes.set(self.decision.bytes)
        self.metrics.outbox_peak.set(self.decision.peak_queued)
        self.metrics.loops.inc()
        self._bound_bookkeeping()
        if self.readback is not None:
            await self.readback.sync()
        mono = time.monotonic()
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
                    await self.source.consumer.seek_to_committed(*new)
            finally:
                self.last_alive = time.monotonic()
            if self.failure is None:
                self.notifier.ready(f"consuming {len(assigned)} partition(s)")

    async def _assign(self, assigned: set[TopicPartition]) -> None:
        self.metrics.rebalances.inc()
        lost = self.pos.owned - assigned
        new = assigned - self.pos.owned
        self.source.forget(lost | new)
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
        plan = await plan_starts(self.source.consumer, self.reader, new, self.cfg, now_ms())
        for tp, (start, replay_end) in plan.starts.items():
            self.source.consumer.seek(tp, start)
            self.pos.start(tp, start, replay_end)
        assert self.readback is not None
        t0 = time.monotonic()
        before = self.readback.tail.records_read
        # the suspect-host window reaches further back than the index needs
        fleet_since = now_ms() - self.cfg.suspect_window_ms
        await self.readback.read(
            since_ms=min(plan.earliest_ms, fleet_since), index_since=plan.earliest_ms
        )
        replay = sum(max(0, e - s) for s, e in plan.starts.values())
        log.info(
            "partitions assigned: %d new (re-reading %d records to rebuild state); "
            "%d published diagnoses known (%d read in %.2f s)",
            len(new),
            replay,
            len(self.index),
            self.readback.tail.records_read - before,
            time.monotonic() - t0,
        )
