"""Fleet statistics shared by `rankwatch stats` and the daemon's metrics, so both count the same
incidents and name the same suspect hosts.

An incident is counted once, under the last published version of its diagnosis, at the time
its first version was published (the Kafka record time on the diagnoses topic, or the wall time
the daemon sent it). A suspect host initiated incidents in `SUSPECT_MIN_JOBS` or more distinct
jobs inside the window."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from rankwatch import diagnosis as rd
from rankwatch.daemon.bounds import oldest_not_kept

SUSPECT_MIN_JOBS = 2
UNCLASSIFIED = "unclassified"
UNKNOWN_SUBSYSTEM = "unknown"


@dataclass(frozen=True, slots=True)
class Incident:
    id: str
    job: str
    signature: str
    subsystem: str
    host: str | None
    first_seen_ms: int


@dataclass(frozen=True)
class Suspect:
    host: str
    jobs: tuple[str, ...]
    incidents: int


def read_diagnosis(value: bytes | None) -> rd.Diagnosis | None:
    """The diagnosis a record of the diagnoses topic holds; None for anything else (not JSON,
    not a diagnosis, no id: the log topic given by mistake, garbage)."""
    if not value:
        return None
    try:
        d = rd.decode(value)
    except rd.BadDiagnosis:
        return None
    return d if d.id else None


def incident_of(diagnosis: rd.Diagnosis, first_seen_ms: int) -> Incident:
    """The fleet view of one diagnosis."""
    sig = diagnosis.signature
    return Incident(
        id=diagnosis.id,
        job=diagnosis.job,
        signature=sig.id or UNCLASSIFIED,
        subsystem=sig.subsystem or UNKNOWN_SUBSYSTEM,
        host=diagnosis.root_cause.host or None,
        first_seen_ms=first_seen_ms,
    )


class FleetLedger:
    """The latest version of every incident, keyed by diagnosis id, with its first-seen time
    (first seen first)."""

    def __init__(self) -> None:
        self._by_id: dict[str, Incident] = {}

    def add(self, diagnosis: rd.Diagnosis | Mapping[str, Any], seen_ms: int) -> Incident | None:
        """Records a (new or updated) diagnosis; returns the incident when its id is new. A
        diagnosis as parsed JSON (the daemon's own) is read first; one that is not a
        diagnosis, or has no id, is not recorded."""
        if not isinstance(diagnosis, rd.Diagnosis):
            try:
                diagnosis = rd.from_dict(diagnosis)
            except rd.BadDiagnosis:
                return None
        if not diagnosis.id:
            return None
        inc = incident_of(diagnosis, seen_ms)
        old = self._by_id.get(inc.id)
        if old is not None:
            inc = replace(inc, first_seen_ms=old.first_seen_ms)
        self._by_id[inc.id] = inc
        return inc if old is None else None

    def since(self, since_ms: int | None) -> list[Incident]:
        return [i for i in self._by_id.values() if since_ms is None or i.first_seen_ms >= since_ms]

    def prune(self, before_ms: int) -> int:
        old = [k for k, i in self._by_id.items() if i.first_seen_ms < before_ms]
        for k in old:
            del self._by_id[k]
        return len(old)

    def trim(self, max_incidents: int, keep: Callable[[str], bool]) -> int:
        """Forgets the first-seen incidents past `max_incidents`, never one of a job `keep`
        names (a job the engine holds: its next version would be counted as a new incident).
        Returns how many were forgotten."""
        excess = len(self._by_id) - max_incidents
        if excess <= 0:
            return 0
        gone = oldest_not_kept(((did, inc.job) for did, inc in self._by_id.items()), excess, keep)
        for did in gone:
            del self._by_id[did]
        return len(gone)

    def __len__(self) -> int:
        return len(self._by_id)


def suspects(incidents: Iterable[Incident], min_jobs: int = SUSPECT_MIN_JOBS) -> list[Suspect]:
    """Hosts that initiated incidents in `min_jobs` or more jobs: most jobs first, then name."""
    jobs: dict[str, set[str]] = {}
    counts: dict[str, int] = {}
    for i in incidents:
        if i.host is None:
            continue
        jobs.setdefault(i.host, set()).add(i.job)
        counts[i.host] = counts.get(i.host, 0) + 1
    found = [
        Suspect(host=h, jobs=tuple(sorted(js)), incidents=counts[h])
        for h, js in jobs.items()
        if len(js) >= min_jobs
    ]
    return sorted(found, key=lambda s: (-len(s.jobs), -s.incidents, s.host))
