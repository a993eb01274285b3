"""The daemon's health: `/healthz` (live: not failed, and the loop moves or waits for Kafka),
`/readyz` (ready: started, the broker answers, the output topic takes what is published,
partitions are assigned), the broker probe behind `rankwatch_kafka_up`, and the systemd
keep-alive.

`BrokerProbe` owns what the broker last said; `Health` judges the daemon from the state the
daemon exposes (`DaemonState`) and that probe. Neither changes the daemon."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

import orjson
from aiokafka.errors import KafkaError

from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.positions import Positions
from rankwatch.daemon.publisher import Publisher
from rankwatch.daemon.sdnotify import Notifier
from rankwatch.daemon.source import Source
from rankwatch.settings.run import DaemonConfig

log = logging.getLogger("rankwatch.daemon")

KAFKA_PROBE_S = 5.0  # how often the broker is asked for metadata (rankwatch_kafka_up, /readyz)
KAFKA_PROBE_STALE_S = 4 * KAFKA_PROBE_S  # an answer older than this says nothing about now
KEEPALIVE_S = 5.0  # the longest gap between two sd_notify keep-alives


class BrokerProbe:
    """Asks the broker for cluster metadata every KAFKA_PROBE_S seconds: is it there, and is
    the output topic (once seen: a topic missing at start may be auto-created by the first
    publish)."""

    def __init__(self, cfg: DaemonConfig, metrics: DaemonMetrics) -> None:
        self.cfg = cfg
        self.metrics = metrics
        self.kafka_up = False
        self.kafka_checked = 0.0  # monotonic time of the last metadata answer or failure
        self.output_seen = False  # the output topic existed once (so it may go missing)
        self.output_missing = False

    def is_stale(self) -> bool:
        return time.monotonic() - self.kafka_checked > KAFKA_PROBE_STALE_S

    async def run(self, reader: Any) -> None:
        timeout_s = min(KAFKA_PROBE_S, self.cfg.request_timeout_ms / 1000)
        while True:
            try:
                topics = await asyncio.wait_for(reader.topics(), timeout_s)
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
                self.note_output_topic(self.cfg.output_topic in topics)
            await asyncio.sleep(KAFKA_PROBE_S)

    def note_output_topic(self, there: bool) -> None:
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


class DaemonState(Protocol):
    """What `Health` reads of the daemon."""

    cfg: DaemonConfig
    notifier: Notifier
    pos: Positions
    publisher: Publisher | None
    source: Source
    started: bool
    stopping: asyncio.Event
    failure: BaseException | None
    rebalancing: bool
    connecting: bool  # waiting for the broker at start
    last_alive: float  # monotonic time the loop last turned


class Health:
    def __init__(self, daemon: DaemonState, probe: BrokerProbe) -> None:
        self.daemon = daemon
        self.probe = probe

    def _loop_age_s(self) -> tuple[float, bool]:
        age = time.monotonic() - self.daemon.last_alive
        return age, age < max(30.0, 4 * self.daemon.cfg.poll_interval_ms / 1000)

    def _holding(self) -> object | None:
        publisher = self.daemon.publisher
        return publisher.holding if publisher is not None else None

    def waiting_on_kafka(self) -> str | None:
        """Why the loop may stand still without being wedged: it waits for the broker (at
        start, or unreachable at the last metadata request) or for the output topic. None
        when Kafka answered a recent request and nothing is held (then a loop that stands
        still is wedged). A probe that stopped answering is no excuse: the event loop itself
        may be what is stuck."""
        d, probe = self.daemon, self.probe
        if d.connecting:
            return "waiting for the broker"
        if probe.is_stale():
            return None
        if not probe.kafka_up:
            return "broker unreachable"
        if probe.output_missing:
            return f"output topic {d.cfg.output_topic} missing"
        holding = self._holding()
        return f"diagnoses held: {holding!r}" if holding is not None else None

    def live(self) -> tuple[bool, bytes]:
        """Live: not failed, and the loop moved recently or waits for Kafka. A broker outage
        or a missing output topic is no reason to restart the daemon (a new one would wait
        for the same broker): that is readiness (/readyz, rankwatch_kafka_up)."""
        d = self.daemon
        age, moving = self._loop_age_s()
        waiting = self.waiting_on_kafka()
        ok = d.failure is None and (moving or waiting is not None)
        body = {
            "status": "ok" if ok else "unhealthy",
            "started": d.started,
            "stopping": d.stopping.is_set(),
            "waiting": waiting,
            "partitions": len(d.pos.owned),
            "seconds_since_last_loop": round(age, 3),
            "failure": str(d.failure) if d.failure else None,
        }
        return ok, orjson.dumps(body) + b"\n"

    def ready(self) -> tuple[bool, bytes]:
        """Ready: started, the broker answered the last metadata request, the output topic is
        there and takes what is published, partitions are assigned (a member without
        partitions does no work, so it is not ready) and the loop moves."""
        d, probe = self.daemon, self.probe
        age, moving = self._loop_age_s()
        partitions = len(d.pos.owned)
        holding = self._holding()
        reasons = [
            why
            for bad, why in (
                (d.connecting, "waiting for the broker"),
                (not d.started and not d.connecting, "not started"),
                (d.failure is not None, "failed"),
                (d.stopping.is_set(), "stopping"),
                (d.started and not probe.kafka_up, "broker unreachable"),
                (probe.output_missing, "output topic missing"),
                (holding is not None, f"diagnoses held: {holding!r}"),
                (d.rebalancing or partitions == 0, "no partitions assigned"),
                (not moving, "loop stalled"),
            )
            if bad
        ]
        repartitioner = d.source.repartitioner
        if repartitioner is not None and d.failure is None:
            reasons += repartitioner.problems()
        body = {
            "status": "ready" if not reasons else "not ready",
            "reasons": reasons,
            "kafka_up": probe.kafka_up,
            "partitions": partitions,
            "seconds_since_last_loop": round(age, 3),
        }
        return not reasons, orjson.dumps(body) + b"\n"

    async def keep_alive(self) -> None:
        """Tells systemd the daemon lives for as long as /healthz says so: WATCHDOG=1 once
        READY, and before it an extension of the start timeout (waiting for the broker at
        start is not a failed start)."""
        notifier = self.daemon.notifier
        every_s = min(notifier.watchdog_every_s, KEEPALIVE_S)
        while True:
            if self.live()[0]:
                if notifier.ready_sent:
                    notifier.watchdog()
                else:
                    notifier.extend_start(3 * every_s)
            await asyncio.sleep(every_s)
