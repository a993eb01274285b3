"""Which diagnoses go out, and when.

A diagnosis id the output topic has never seen is sent at once. An update of a published id is
held, and only the latest version of each held id is sent at the next checkpoint, so a large
incident that changes with every batch produces at most one update per commit interval. What
was already published (identical content, or a version rebuilt during a replay) is skipped;
see `PublishedIndex.decide`.

Back-pressure: the outbox's bytes are the diagnoses of the poll not yet offered, the held
updates and what the publisher keeps until the broker answered (`Publisher.queued_bytes`).
While the publisher's part is above the outbox's share of the budget (`daemon/budget.py`),
`offer` waits for acknowledgements before it sends the next diagnosis; the daemon feeds
nothing meanwhile (the feed task is the one waiting) and, after it, checkpoints early if the
outbox is still above the share (held updates, or a transaction's values, leave only then).
Acknowledgements never wait for the feed, so this cannot deadlock; the time spent waiting is
counted (`rankwatch_outbox_paused_seconds_total`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

import orjson

from rankwatch.daemon.jobs import JobMap
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.published import EARLIER, IDENTICAL, SETTLED, PublishedIndex
from rankwatch.daemon.publisher import Publisher
from rankwatch.engine import Diagnosis

log = logging.getLogger("rankwatch.daemon")


class Outbox:
    def __init__(
        self, index: PublishedIndex, jobmap: JobMap, metrics: DaemonMetrics, share: int
    ) -> None:
        self.index = index
        self.jobmap = jobmap
        self.metrics = metrics
        self.share = share  # bytes: the outbox's share of the budget
        self.publisher: Publisher | None = None
        # id -> (the latest version as JSON, its content hash); JSON because a burst can hold
        # thousands of updates until the checkpoint, and a decoded one is about 5x larger
        self.held: dict[str, tuple[bytes, str]] = {}
        self.held_bytes = 0
        self.peak_queued = 0  # the most `Publisher.queued_bytes` right after a send
        self._incoming: Iterable[Diagnosis] = ()

    @property
    def bytes(self) -> int:
        """What the outbox holds: the poll's diagnoses not yet offered, the held updates and
        the records the publisher keeps until answered."""
        queued = self.publisher.queued_bytes if self.publisher is not None else 0
        return int(getattr(self._incoming, "waiting_bytes", 0)) + self.held_bytes + queued

    @property
    def over_share(self) -> bool:
        """Above the share between two polls: the held updates leave, and (transactional) the
        publisher lets its values go, only at a checkpoint."""
        return self.bytes > self.share

    async def offer(self, diagnoses: Iterable[Diagnosis], replaying: Callable[[str], bool]) -> None:
        self._incoming = diagnoses
        try:
            await self._offer(diagnoses, replaying)
        finally:
            self._incoming = ()

    async def _offer(
        self, diagnoses: Iterable[Diagnosis], replaying: Callable[[str], bool]
    ) -> None:
        assert self.publisher is not None
        for full in diagnoses:
            self.jobmap.note_diagnosis(full)
            # decided on what will be published, so that the index (rebuilt from the topic
            # after a restart) sees the same content
            d = self.publisher.fit(full)
            did = str(d["id"])
            skip, chash = self.index.decide(d, replaying(str(full.get("job", ""))))
            if skip is not None:
                self.metrics.diagnoses_skipped.labels(skip).inc()
                if skip == EARLIER:  # rare: a restart re-fed what the killed one published
                    log.info("diagnosis %s: an earlier version, already published", did)
                if skip in (IDENTICAL, EARLIER):
                    self._unhold(did)  # back to a version the topic carries
                if skip == SETTLED:
                    self.index.remember(d, chash)  # published before the topic lost it
                continue
            if did in self.index:
                self._unhold(did)
                encoded = orjson.dumps(d)
                self.held[did] = (encoded, chash)
                self.held_bytes += len(encoded)
            else:
                await self._send(d, chash, "new")

    def _unhold(self, did: str) -> None:
        old = self.held.pop(did, None)
        if old is not None:
            self.held_bytes -= len(old[0])

    async def send_held(self) -> None:
        held, self.held = self.held, {}
        for did in list(held):
            encoded, chash = held.pop(did)
            self.held_bytes -= len(encoded)
            await self._send(orjson.loads(encoded), chash, "update")

    async def _make_room(self) -> None:
        """Waits for acknowledgements while the publisher holds more than the share."""
        assert self.publisher is not None
        if self.publisher.queued_bytes <= self.share:
            return
        t0 = time.monotonic()
        # set here, not by the loop's gauges: the loop does not run while the feed waits
        self.metrics.outbox_waiting.set(1)
        self.metrics.outbox_bytes.set(self.bytes)
        try:
            await self.publisher.wait_below(self.share)
        finally:
            self.metrics.outbox_waiting.set(0)
            self.metrics.outbox_paused.inc(time.monotonic() - t0)

    async def _send(self, d: Diagnosis, chash: str, kind: str) -> None:
        assert self.publisher is not None
        await self._make_room()
        sent = await self.publisher.send_diagnosis(d)
        self.peak_queued = max(self.peak_queued, self.publisher.queued_bytes)
        if not sent:
            return
        self.index.remember(d, chash)
        self.metrics.diagnoses_out.labels(kind).inc()
        self.metrics.fleet.published(d)
        root = d.get("root_cause") or {}
        log.info(
            "diagnosis %s (%s) job=%s rank=%s host=%s signature=%s",
            d["id"],
            kind,
            d.get("job"),
            root.get("rank"),
            root.get("host"),
            (d.get("signature") or {}).get("id"),
        )
