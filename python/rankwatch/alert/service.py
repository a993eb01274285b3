"""`rankwatch alert`: one member of its own consumer group on the diagnoses topic. Per fetched
batch: keep each diagnosis for the incident pages and hand it to every sink, then fetch the next
batch at once. A batch's offsets are committed when every sink accepted or gave up (counted and
logged) each of its alerts, and only after every batch before it: at-least-once delivery, and
a slow or dead sink delays commits, never another sink's alerts. Alertmanager also gets the
firing incidents again every `alert_resend_ms` until they expire (sinks.FiringSet).

The incident pages are fed apart from the group: a group-less reader follows every partition of
the topic, so any member behind a load balancer serves any incident an alert links to."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections import deque
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

from rankwatch.alert import sinks
from rankwatch.alert.config import AlertConfig
from rankwatch.alert.delivery import RetryPolicy, Sink
from rankwatch.alert.metrics import AlertMetrics
from rankwatch.alert.received import AnyReceived, receive, received
from rankwatch.alert.server import make_app
from rankwatch.alert.store import IncidentStore
from rankwatch.app_server import AppServer
from rankwatch.diagnosis import BadDiagnosis
from rankwatch.kafka.broker_wait import start_when_reachable
from rankwatch.kafka.clients import METADATA_REFRESH_MS, connection_kwargs, reader_consumer
from rankwatch.kafka.tail import TopicTail

log = logging.getLogger("rankwatch.alert")

MAX_BATCH_RECORDS = 500
# Batches handed to the sinks and not yet committed, at most (then the oldest is waited for).
MAX_PENDING_BATCHES = 64
# /healthz fails when the consumer loop has not turned for this long.
LOOP_STALL_S = 60.0
# Alerts per re-send request to Alertmanager (thousands firing make one request per chunk).
RESEND_CHUNK = 100
PAGES_REFRESH_S = 1.0


class AlertError(RuntimeError):
    """`rankwatch alert` cannot go on (Kafka unreachable, port taken); exit status 1."""


class AlertService:
    def __init__(self, cfg: AlertConfig) -> None:
        self.cfg = cfg
        self.metrics = AlertMetrics()
        self.store = IncidentStore(cfg.incidents_kept)  # what /incidents shows
        self.delivered = IncidentStore(cfg.incidents_kept)  # versions already handed to sinks
        self.firing = sinks.FiringSet(cfg.alert_resend_ms / 1000, cfg.alert_ttl_ms / 1000)
        self.http = AppServer(make_app(self.store, self.metrics, self))
        self.policy = RetryPolicy(
            timeout_s=cfg.sink_timeout_ms / 1000,
            attempts=cfg.sink_attempts,
            backoff_s=cfg.sink_backoff_ms / 1000,
            backoff_max_s=cfg.sink_backoff_max_ms / 1000,
        )
        self.session: aiohttp.ClientSession | None = None
        self.alertmanagers: list[tuple[str, Sink]] = []
        self.pagerduty: Sink | None = None
        self.webhooks: list[tuple[str, Sink]] = []
        self.consumer: Any = None
        self.connecting = False  # waiting for the broker at start
        self.stopping = asyncio.Event()
        self.assigned = False
        self.last_loop: float | None = None  # monotonic time of the consumer loop's last turn
        # Batches handed to the sinks and not committed yet, oldest first: each batch's
        # offsets and its alerts' futures.
        self.pending: deque[tuple[dict[TopicPartition, int], asyncio.Future[Any]]] = deque()
        self.base_url = cfg.page_base()

    # --- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        self.stopping.set()

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)

    # --- probes -------------------------------------------------------------------------------

    def live(self) -> tuple[bool, dict[str, Any]]:
        """The consumer loop turned within LOOP_STALL_S (it turns every fetch, 0.5 s idle), or
        it waits for the broker at start (a restart would wait for the same broker)."""
        if self.connecting:
            return True, {"status": "waiting for the broker", "partitions_assigned": False}
        if self.last_loop is None:
            return False, {"status": "starting"}
        age = time.monotonic() - self.last_loop
        ok = age < LOOP_STALL_S
        body = {"status": "ok" if ok else "stalled", "seconds_since_last_loop": round(age, 3)}
        return ok, {**body, "partitions_assigned": self.assigned}

    def owns_partitions(self) -> tuple[bool, dict[str, Any]]:
        return self.assigned, {"status": "ready" if self.assigned else "no partitions assigned"}

    def link(self, did: str) -> str | None:
        """The incident's page, if one is served or a page URL is configured."""
        if self.base_url is None:
            return None
        return f"{self.base_url}/incidents/{quote(did, safe='')}"

    def _sinks(self) -> list[Sink]:
        out = [s for _, s in self.alertmanagers] + [s for _, s in self.webhooks]
        return out + ([self.pagerduty] if self.pagerduty else [])

    async def start_sinks(self) -> None:
        session = self.session = aiohttp.ClientSession()
        cfg = self.cfg

        def make(name: str) -> Sink:
            return Sink(
                name, session, self.policy, self.metrics, cfg.sink_queue_size, cfg.sink_concurrency
            )

        self.alertmanagers = [
            (url, make(f"alertmanager-{i}")) for i, url in enumerate(cfg.alertmanager_url, 1)
        ]
        self.webhooks = [(url, make(f"webhook-{i}")) for i, url in enumerate(cfg.webhook_url, 1)]
        if cfg.pagerduty_routing_key:
            self.pagerduty = make("pagerduty")
        for sink in self._sinks():
            sink.start()

    async def run(self) -> None:
        listen = self.cfg.http_listen()
        if listen is not None:
            try:
                await self.http.start(*listen)
            except OSError as e:
                raise AlertError(f"http_addr {self.cfg.http_addr}: {e.strerror}") from None
            self.base_url = self.cfg.page_base(self.http.address)
            log.info("incident pages on %s/incidents", self.base_url)
        await self.start_sinks()
        tasks: list[asyncio.Task[None]] = []
        try:
            if not await self._start_consumer():
                return  # stopped while waiting for the broker
            if self.alertmanagers:
                tasks.append(asyncio.create_task(self._resend_loop(), name="alertmanager-resend"))
            if listen is not None or self.alertmanagers:
                # the pages, and the firing set a restart must take back
                tasks.append(asyncio.create_task(self._follow_pages(), name="incident-pages"))
            await self._consume()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._close()

    async def _start_consumer(self) -> bool:
        """Joins the group, waiting for the broker while it cannot be reached (see
        kafka/broker_wait.py); False if stopped first."""
        where = f"the Kafka broker at {self.cfg.bootstrap_servers}"
        self.connecting = True
        try:
            started = await start_when_reachable(
                self._open_consumer, self._close_consumer, self.stopping, where, log
            )
        except KafkaError as e:
            raise AlertError(f"cannot reach Kafka at {self.cfg.bootstrap_servers}: {e}") from None
        finally:
            self.connecting = False
        if started:
            log.info("reading %s as group %s", self.cfg.topic, self.cfg.group_id)
        return started

    async def _close_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                await consumer.stop()

    async def _open_consumer(self) -> None:
        cfg = self.cfg
        self.consumer = AIOKafkaConsumer(
            **connection_kwargs(cfg.kafka()),
            group_id=cfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            check_crcs=cfg.check_crcs,
            metadata_max_age_ms=METADATA_REFRESH_MS,
        )
        await self.consumer.start()
        self.consumer.subscribe([cfg.topic])

    def _note_assignment(self) -> None:
        partitions = self.consumer.assignment()
        if partitions and not self.assigned:
            log.info("topic %s: reading %d partition(s)", self.cfg.topic, len(partitions))
        self.assigned = bool(partitions)

    async def _close(self) -> None:
        for sink in self._sinks():
            await sink.stop()
        if self.consumer is not None:
            with contextlib.suppress(KafkaError):
                await self.consumer.stop()
        if self.session is not None:
            await self.session.close()
        await self.http.close()
        log.info("stopped")

    # --- consuming ----------------------------------------------------------------------------

    async def _consume(self) -> None:
        while not self.stopping.is_set():
            self.last_loop = time.monotonic()
            fetch = asyncio.ensure_future(
                self.consumer.getmany(timeout_ms=500, max_records=MAX_BATCH_RECORDS)
            )
            stop = asyncio.ensure_future(self.stopping.wait())
            await asyncio.wait({fetch, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not fetch.done():
                fetch.cancel()
                break
            try:
                batch: dict[TopicPartition, list[Any]] = fetch.result()
            except KafkaError as e:
                log.warning("fetch failed: %s", e)
                continue
            self._note_assignment()
            if batch:
                await self._handle_batch(batch)
            else:
                await self._commit_settled()
        await self._commit_settled()
        if self.pending:
            log.info(
                "stopping before the sinks finished: offsets of %d batch(es) not committed",
                len(self.pending),
            )

    async def _handle_batch(self, batch: dict[TopicPartition, list[Any]]) -> None:
        waiting: list[asyncio.Future[bool]] = []
        offsets: dict[TopicPartition, int] = {}
        for tp, records in batch.items():
            for rec in records:
                waiting += await self.handle_record(rec.value, rec.timestamp)
                offsets[tp] = rec.offset + 1
        settled = asyncio.gather(*waiting, return_exceptions=True)
        self.pending.append((offsets, settled))
        await self._commit_settled()
        # Bound what waits on a slow sink: past this many batches, wait for the oldest.
        while len(self.pending) > MAX_PENDING_BATCHES and not self.stopping.is_set():
            if not await self._settled(self.pending[0][1]):
                return
            await self._commit_settled()

    async def _commit_settled(self) -> None:
        """Commits the offsets of the oldest batches whose alerts every sink finished with."""
        offsets: dict[TopicPartition, int] = {}
        while self.pending and self.pending[0][1].done():
            offsets.update(self.pending.popleft()[0])
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
            self.metrics.commits.inc()
        except (CommitFailedError, KafkaError) as e:
            # the partitions moved: their new owner delivers these again (at-least-once)
            log.warning("offset commit failed, the records will be delivered again: %s", e)

    async def _settled(self, done: asyncio.Future[Any]) -> bool:
        """Waits until `done` (every sink finished with a batch): True, or a stop was asked
        (False: the batch is delivered again after a restart, at-least-once)."""
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait({done, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        return done.done()

    async def handle_record(
        self, value: bytes | None, timestamp_ms: int
    ) -> list[asyncio.Future[bool]]:
        """Stores one diagnosis and queues it to every sink; the futures end when each sink
        accepted or gave up. Bad records are counted and skipped."""
        try:
            r = receive(orjson.loads(value or b""))
        except (orjson.JSONDecodeError, BadDiagnosis) as e:
            self.metrics.invalid.inc()
            log.warning("skipped a record that is not a diagnosis: %s", e)
            return []
        self.metrics.diagnoses.inc()
        self.store.put_new(r)  # at once; versions in order come from _follow_pages
        if not self.delivered.put(r):
            return []
        age_s = time.time() - timestamp_ms / 1000
        if age_s > self.cfg.alert_ttl_ms / 1000:
            # A consumer that was down or lagging (a hung sink, a weekend) must not page for
            # stale incidents, but must not drop them unseen either.
            self.metrics.stale.inc()
            log.warning(
                "diagnosis %s is %.0f s old (alert_ttl_ms %d): shown, not alerted",
                r.id,
                age_s,
                self.cfg.alert_ttl_ms,
            )
            return []
        return await self.dispatch(r)

    async def dispatch(self, d: AnyReceived) -> list[asyncio.Future[bool]]:
        r = received(d)
        did, link = r.id, self.link(r.id)
        futures: list[asyncio.Future[bool]] = []
        if self.alertmanagers:
            alerts = self.firing.update(r.diagnosis, link)
            self.metrics.firing.set(len(self.firing.firing))
            for url, sink in self.alertmanagers:
                futures.append(sink.submit(did, sinks.alertmanager_request(url, alerts)))
        if self.pagerduty is not None and self.cfg.pagerduty_routing_key:
            req = sinks.pagerduty_request(
                self.cfg.pagerduty_url, r.diagnosis, self.cfg.pagerduty_routing_key, link
            )
            futures.append(self.pagerduty.submit(did, req))
        for url, sink in self.webhooks:
            req = sinks.webhook_request(
                url, r, link, secret=self.cfg.webhook_secret, fmt=self.cfg.webhook_format
            )
            futures.append(sink.submit(did, req))
        log.info("diagnosis %s of job %s queued to %d sink(s)", did, r.diagnosis.job, len(futures))
        return futures

    async def _follow_pages(self) -> None:
        """Keeps /incidents current with every partition of the topic (not only this member's),
        starting `incidents_since_ms` back."""
        reader = reader_consumer(self.cfg.kafka())
        tail = TopicTail(reader, self.cfg.topic)
        since_ms = int(time.time() * 1000) - self.cfg.incidents_since_ms
        started = False
        try:
            while True:
                try:
                    if not started:
                        await reader.start()
                        started = True
                    await tail.catch_up(self._show, since_ms=since_ms, timeout_s=30)
                except KafkaError as e:
                    log.warning("reading %s for the incident pages failed: %s", self.cfg.topic, e)
                await asyncio.sleep(PAGES_REFRESH_S)
        finally:
            with contextlib.suppress(KafkaError):
                await reader.stop()

    def _show(self, record: Any) -> None:
        # a bad record is counted by the group consumer, which reads the same records
        with contextlib.suppress(orjson.JSONDecodeError, BadDiagnosis):
            r = receive(orjson.loads(record.value or b""))
            self.store.put(r)
            # A restart forgot what Alertmanager was being told: take back what is still
            # fresh, or Alertmanager resolves it once its endsAt passes.
            if self.alertmanagers and self.firing.restore(
                r.diagnosis, self.link(r.id), record.timestamp / 1000
            ):
                self.metrics.firing.set(len(self.firing.firing))

    async def _resend_loop(self) -> None:
        while True:
            await asyncio.sleep(self.firing.resend_s)
            alerts, expired = self.firing.due()
            self.metrics.firing.set(len(self.firing.firing))
            for did in expired:
                log.info("incident %s expired: sent resolved to Alertmanager", did)
            if not alerts:
                continue
            for start in range(0, len(alerts), RESEND_CHUNK):
                chunk = alerts[start : start + RESEND_CHUNK]
                ids = [a["annotations"]["diagnosis_id"] for a in chunk]
                more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
                what = f"re-send of {len(ids)} alert(s): {', '.join(ids[:5])}{more}"
                for url, sink in self.alertmanagers:
                    sink.submit(what, sinks.alertmanager_request(url, chunk))
