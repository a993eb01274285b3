"""What was already published, the memory of the publish decision (`decision.py`): diagnosis
id -> content hash, rebuilt from the tail of the output topic at start and on assignment, so
that a restarted or rebalanced daemon never publishes the same diagnosis twice and publishes an
update under the same id only when the content changed.

Every version an id had on the topic counts, not only the latest: a daemon restarted after
SIGKILL re-feeds the records after its last commit, and its engine passes again through the
versions the previous incarnation published (and got acknowledged, or had in flight) from those
records before it died. Comparing with the latest version alone published each earlier one a
second time (issue 9, the SIGKILL x20 test under load).

The index is only as good as the topic it is read from. After the output topic was deleted and
made again (or its records expired) a restarted daemon knows nothing, and every diagnosis its
replay re-emits would look new (probe 2026-12-03, N7: 24 re-published, alerts paged again). A
`final` version re-emitted during a replay is never published: the group committed the input
that settled the incident, and offsets are committed only after the broker acknowledged every
diagnosis of that input, so this version was published before (it is remembered, as if read
from the topic). An `open` one that the index does not know is published, as before: it may
be an incident that was still settling at the last commit (nothing of it published yet), and
there is no telling the two apart without the topic. Its id is the one published before, so
consumers that dedup on the id (PagerDuty's dedup_key, Alertmanager's labels) update the alert
they have; and a recreated topic needs the state of every incident still open."""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from rankwatch.daemon.bounds import oldest_not_kept

# Fields that change without the diagnosis changing. None today: `status` going from open to
# final is news to every consumer (a settled diagnosis), so it is content.
VOLATILE_FIELDS: frozenset[str] = frozenset()

# Earlier versions remembered per id (the latest is `Entry.hash`), as 8-byte prefixes of their
# content hash in one bytes object: 32 versions cost 256 bytes. A restart can only replay
# versions published since the last commit (`commit_interval_ms`), far fewer than this.
EARLIER_VERSIONS = 32
_PREFIX = 8


def content_hash(diagnosis: dict[str, Any]) -> str:
    body = {k: v for k, v in diagnosis.items() if k not in VOLATILE_FIELDS}
    return hashlib.blake2b(
        orjson.dumps(body, option=orjson.OPT_SORT_KEYS), digest_size=16
    ).hexdigest()


def incident_start_ms(diagnosis: dict[str, Any]) -> int | None:
    incident = diagnosis.get("incident")
    start = incident.get("start") if isinstance(incident, dict) else None
    if not isinstance(start, str):
        return None
    try:
        return int(dt.datetime.fromisoformat(start).timestamp() * 1000)
    except ValueError:
        return None


def _prefix(chash: str) -> bytes:
    return bytes.fromhex(chash[: 2 * _PREFIX])


@dataclass(slots=True)
class Entry:
    hash: str
    job: str
    start_ms: int | None
    seen_s: float
    earlier: bytes = b""  # prefixes of the versions before `hash`, oldest first

    def had(self, chash: str) -> bool:
        """Whether `chash` is one of the earlier versions."""
        p, e = _prefix(chash), self.earlier
        return any(e[i : i + _PREFIX] == p for i in range(0, len(e), _PREFIX))

    def superseded_by(self, chash: str) -> bytes:
        """The earlier versions once `chash` becomes the latest, each once (the topic is read
        back after the daemon's own sends: the same versions come again, in order)."""
        if chash == self.hash:
            return self.earlier
        e, new = self.earlier, _prefix(chash)
        kept = [e[i : i + _PREFIX] for i in range(0, len(e), _PREFIX)]
        kept = [k for k in kept if k != new and k != _prefix(self.hash)] + [_prefix(self.hash)]
        return b"".join(kept[-EARLIER_VERSIONS:])


class PublishedIndex:
    """What the output topic carries: every version of each id, the incident starts by job,
    and the ids a replay suppressed for good (`shadowed`)."""

    def __init__(self, horizon_ms: int, retain_s: float) -> None:
        self.horizon_ms = horizon_ms
        self.retain_s = retain_s
        self.entries: dict[str, Entry] = {}
        self.by_job: dict[str, set[str]] = {}
        self.shadowed: set[str] = set()

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, diagnosis_id: object) -> bool:
        return diagnosis_id in self.entries

    def load(self, value: bytes | None) -> None:
        """Takes one record of the output topic (later versions replace earlier ones)."""
        if not value:
            return
        try:
            d = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if isinstance(d, dict) and isinstance(d.get("id"), str):
            self.remember(d)

    def remember(self, diagnosis: dict[str, Any], chash: str | None = None) -> None:
        did = str(diagnosis["id"])
        job = str(diagnosis.get("job", ""))
        chash = chash or content_hash(diagnosis)
        old = self.entries.get(did)
        earlier = old.superseded_by(chash) if old is not None else b""
        self._forget(did)  # re-inserted last: the entries stay oldest first
        self.entries[did] = Entry(chash, job, incident_start_ms(diagnosis), time.time(), earlier)
        self.by_job.setdefault(job, set()).add(did)

    def overlaps(self, diagnosis: dict[str, Any]) -> bool:
        """Whether a published incident of the diagnosis's job starts within the incident
        horizon of its incident's start."""
        start = incident_start_ms(diagnosis)
        if start is None:
            return False
        for other in self.by_job.get(str(diagnosis.get("job", "")), ()):
            e = self.entries[other]
            if e.start_ms is not None and abs(e.start_ms - start) <= self.horizon_ms:
                return True
        return False

    def prune(self) -> int:
        """Forgets entries older than the retention (they can no longer be replayed)."""
        cutoff = time.time() - self.retain_s
        old = [k for k, e in self.entries.items() if e.seen_s < cutoff]
        for k in old:
            self._forget(k)
        return len(old)

    def trim(self, max_entries: int, keep: Callable[[str], bool]) -> int:
        """Forgets the oldest entries past `max_entries`, never one whose job `keep` names
        (a job the engine still holds: forgetting its entry would publish its next version
        as new, or again in a replay). Returns how many were forgotten."""
        excess = len(self.entries) - max_entries
        if excess <= 0:
            return 0
        gone = oldest_not_kept(((did, e.job) for did, e in self.entries.items()), excess, keep)
        for did in gone:
            self._forget(did)
        return len(gone)

    def _forget(self, diagnosis_id: str) -> None:
        e = self.entries.pop(diagnosis_id, None)
        if e is None:
            return
        ids = self.by_job.get(e.job)
        if ids is not None:
            ids.discard(diagnosis_id)
            if not ids:
                del self.by_job[e.job]
