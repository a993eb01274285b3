"""The diagnoses topic read back (every daemon's publishes, this one's included): what is
published, for the publish decision's memory (`PublishedIndex`), and the suspect hosts, for
the fleet metrics. Read from a window on assignment, and on from where it stopped every
FLEET_SYNC_S between batches."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka.errors import KafkaError

from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.published import PublishedIndex
from rankwatch.daemon.sdnotify import Notifier
from rankwatch.kafka.tail import TopicTail

log = logging.getLogger("rankwatch.daemon")

FLEET_SYNC_S = 15.0  # how often the diagnoses topic is read on for the suspect-host metrics
FLEET_SYNC_LIMIT_S = 10.0  # the most one such read may hold the loop


class ReadBack:
    def __init__(
        self, tail: TopicTail, index: PublishedIndex, metrics: DaemonMetrics, notifier: Notifier
    ) -> None:
        self.tail = tail
        self.index = index
        self.metrics = metrics
        self.notifier = notifier
        self.last_sync = time.monotonic()

    async def read(
        self,
        *,
        since_ms: int | None = None,
        index_since: int | None = None,
        timeout_s: float = 60.0,
    ) -> None:
        """Reads the topic on from where it stopped (from `since_ms` the first time); only
        records from `index_since` on go into the index."""

        def handle(rec: Any) -> None:
            if index_since is None or rec.timestamp >= index_since:
                self.index.load(rec.value)
            self.metrics.fleet.observe(rec.value, int(rec.timestamp))
            self.notifier.watchdog()  # a long first read is progress, not a hang

        try:
            await self.tail.catch_up(handle, since_ms=since_ms, timeout_s=timeout_s)
        finally:
            self.metrics.fleet.refresh()

    async def sync(self) -> None:
        """Reads on, if FLEET_SYNC_S passed since the last time (a failure is logged: the next
        sync reads on)."""
        mono = time.monotonic()
        if mono - self.last_sync < FLEET_SYNC_S:
            return
        self.last_sync = mono
        try:
            # bounded as a whole: a broker that holds the connection but answers nothing
            # (a long GC pause) would hold the loop here for request_timeout_ms
            await asyncio.wait_for(self.read(timeout_s=5.0), FLEET_SYNC_LIMIT_S)
        except (KafkaError, OSError, TimeoutError) as e:
            log.warning("reading %s for fleet metrics failed: %r", self.tail.topic, e)
