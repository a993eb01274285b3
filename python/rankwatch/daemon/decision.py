"""The publish decision: for each diagnosis the engine emits, whether it is published now,
held until the next checkpoint, or skipped. This module is the one place that answers
"publish this diagnosis?"; the index of what the output topic carries (`published.py`) is
its memory, the publisher (`publisher.py`) its sink.

The rules (`verdict`), on the diagnosis as it will be published (cut to fit one request, so
that the index, rebuilt from the topic after a restart, sees the same content):

- an id the topic never carried is published at once;
- an update of a published id is held, and only the latest version of each held id is sent at
  the next checkpoint, so a large incident that changes with every batch produces at most one
  update per commit interval;
- skipped: a version the topic carries (`identical`) or carried before (`earlier`: a daemon
  restarted after SIGKILL re-feeds the input after its last commit and passes again through
  the versions it published); while the partitions of the job replay their window, any
  version of a known id (`replay`: the published one came from at least as much input), an
  unknown id whose incident overlaps a published one of the same job (`overlap`: the replay
  window cut the incident, so it got another start; suppressed for good), and an unknown id
  whose replayed input already settled it (`settled`: a `final` version's input was
  committed, and offsets are committed only after every diagnosis of that input was
  acknowledged, so it was published before; see `published.py`).

Interface (`Decision`): `offer(diagnoses, replaying)` after every engine poll;
`send_held()` at a checkpoint, before its offsets are committed; `bytes` and `over_share` for
back-pressure; `held` and `peak_queued` for the gauges.

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
from typing import TYPE_CHECKING, Any

import orjson

from rankwatch.daemon.published import PublishedIndex, content_hash
from rankwatch.engine import Diagnosis

if TYPE_CHECKING:
    from rankwatch.daemon.metrics import DaemonMetrics
    from rankwatch.daemon.publisher import Publisher

log = logging.getLogger("rankwatch.daemon")

IDENTICAL, EARLIER, REPLAY, OVERLAP = "identical", "earlier", "replay", "overlap"
SETTLED = "settled"  # a final version re-emitted by a replay (module docstring)
SKIP_REASONS = (IDENTICAL, EARLIER, REPLAY, OVERLAP, SETTLED)


def verdict(
    index: PublishedIndex, diagnosis: dict[str, Any], replaying: bool
) -> tuple[str | None, str]:
    """(skip reason, or None to publish; the content hash) for a diagnosis as it will be
    published, `replaying` while the partitions of its job replay their window."""
    did = str(diagnosis["id"])
    chash = content_hash(diagnosis)
    entry = index.entries.get(did)
    if entry is not None:
        if entry.hash == chash:
            return IDENTICAL, chash
        if replaying:
            return REPLAY, chash
        if entry.had(chash):
            return EARLIER, chash
        return None, chash
    if did in index.shadowed:
        return OVERLAP, chash
    if replaying and diagnosis.get("status") == "final":
        return SETTLED, chash
    if replaying and index.overlaps(diagnosis):
        index.shadowed.add(did)
        return OVERLAP, chash
    return None, chash


class Decision:
    """The decision stage: owns the held updates and, through `index`, what was published.
    `seen` is told of every diagnosis offered (the job bookkeeping)."""

    def __init__(
        self,
        index: PublishedIndex,
        metrics: DaemonMetrics,
        share: int,
        seen: Callable[[Diagnosis], None],
    ) -> None:
        self.index = index
        self.metrics = metrics
        self.share = share  # bytes: the outbox's share of the budget
        self.seen = seen
        self.publisher: Publisher | None = None  # the sink, once the clients started
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
        """Decides each diagnosis of a poll (`replaying(job)`: its partitions replay)."""
        self._incoming = diagnoses
        try:
            for full in diagnoses:
                self.seen(full)
                await self._decide(full, replaying(str(full.get("job", ""))))
        finally:
            self._incoming = ()

    async def _decide(self, full: Diagnosis, replaying: bool) -> None:
        assert self.publisher is not None
        d = self.publisher.fit(full)
        did = str(d["id"])
        skip, chash = verdict(self.index, d, replaying)
        if skip is not None:
            self._skipped(d, skip, chash)
        elif did in self.index:
            self._hold(did, d, chash)
        else:
            await self._send(d, chash, "new")

    def _skipped(self, d: dict[str, Any], skip: str, chash: str) -> None:
        did = str(d["id"])
        self.metrics.diagnoses_skipped.labels(skip).inc()
        if skip == EARLIER:  # rare: a restart re-fed what the killed one published
            log.info("diagnosis %s: an earlier version, already published", did)
        if skip in (IDENTICAL, EARLIER):
            self._unhold(did)  # back to a version the topic carries
        if skip == SETTLED:
            self.index.remember(d, chash)  # published before the topic lost it

    def _hold(self, did: str, d: dict[str, Any], chash: str) -> None:
        self._unhold(did)
        encoded = orjson.dumps(d)
        self.held[did] = (encoded, chash)
        self.held_bytes += len(encoded)

    def _unhold(self, did: str) -> None:
        old = self.held.pop(did, None)
        if old is not None:
            self.held_bytes -= len(old[0])

    async def send_held(self) -> None:
        """Sends the latest version of every held update (at a checkpoint)."""
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

    async def _send(self, d: dict[str, Any], chash: str, kind: str) -> None:
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
