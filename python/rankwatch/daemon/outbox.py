"""Which diagnoses go out, and when.

A diagnosis id the output topic has never seen is sent at once. An update of a published id is
held, and only the latest version of each held id is sent at the next checkpoint, so a large
incident that changes with every batch produces at most one update per commit interval. What
was already published (identical content, or a version rebuilt during a replay) is skipped;
see `PublishedIndex.decide`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import orjson

from rankwatch.daemon.jobs import JobMap
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.published import IDENTICAL, PublishedIndex
from rankwatch.daemon.publisher import Publisher
from rankwatch.engine import Diagnosis

log = logging.getLogger("rankwatch.daemon")


class Outbox:
    def __init__(self, index: PublishedIndex, jobmap: JobMap, metrics: DaemonMetrics) -> None:
        self.index = index
        self.jobmap = jobmap
        self.metrics = metrics
        self.publisher: Publisher | None = None
        # id -> (the latest version as JSON, its content hash); JSON because a burst can hold
        # thousands of updates until the checkpoint, and a decoded one is about 5x larger
        self.held: dict[str, tuple[bytes, str]] = {}

    async def offer(self, diagnoses: Iterable[Diagnosis], replaying: Callable[[str], bool]) -> None:
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
                if skip == IDENTICAL:
                    self.held.pop(did, None)  # back to what was published
                continue
            if did in self.index:
                self.held[did] = (orjson.dumps(d), chash)
            else:
                await self._send(d, chash, "new")

    async def send_held(self) -> None:
        held, self.held = self.held, {}
        for encoded, chash in held.values():
            await self._send(orjson.loads(encoded), chash, "update")

    async def _send(self, d: Diagnosis, chash: str, kind: str) -> None:
        assert self.publisher is not None
        if not await self.publisher.send_diagnosis(d):
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
