"""`rankwatch stats`: fleet statistics from the diagnoses topic — incidents by signature,
subsystem and root-cause host with their trend over the window, and suspect nodes: hosts that
initiated incidents in two or more jobs. Counting and the suspect rule are fleet.py's, the same
the daemon's metrics use."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rankwatch.daemon.fleet import (
    SUSPECT_MIN_JOBS,
    FleetLedger,
    Incident,
    read_diagnosis,
    suspects,
)
from rankwatch.kafka.tail import TopicTail

STATS_SCHEMA = "rankwatch.fleet-stats/1"  # later fields were only added
TREND_BUCKETS = 8
SPARKS = "▁▂▃▄▅▆▇█"
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


class SinceError(ValueError):
    """--since is neither a duration nor a timestamp."""


def parse_since(text: str, now_s: float | None = None) -> int:
    """`30m`, `24h`, `7d` (ago) or an ISO 8601 time -> epoch milliseconds."""
    now_s = time.time() if now_s is None else now_s
    m = _DURATION.match(text.strip())
    if m:
        return int((now_s - float(m.group(1)) * _UNIT_S[m.group(2)]) * 1000)
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SinceError(
            f"--since {text!r}: expected a duration (30m, 24h, 7d) or an ISO time "
            "(2026-11-30T12:00:00Z)"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


@dataclass
class TopicRead:
    """What a read of the diagnoses topic found: the ledger, and how many records there were
    and how many of them were not diagnoses (the log topic given by mistake, garbage)."""

    ledger: FleetLedger = field(default_factory=FleetLedger)
    records: int = 0
    not_diagnoses: int = 0


def read_records(records: Iterable[tuple[bytes | None, int]]) -> TopicRead:
    """Diagnoses (value, record time in ms), oldest first -> the latest version of each id,
    first seen when its first version was published. Other records are counted and skipped."""
    read = TopicRead()
    for value, ts_ms in records:
        read.records += 1
        d = read_diagnosis(value)
        if d is None:
            read.not_diagnoses += 1
            continue
        read.ledger.add(d, ts_ms)
    return read


def ledger_of(records: Iterable[tuple[bytes | None, int]]) -> FleetLedger:
    return read_records(records).ledger


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _Buckets:
    def __init__(self, start_ms: int, end_ms: int, n: int) -> None:
        self.start_ms = start_ms
        self.n = n
        self.width_ms = max(1, -(-(end_ms - start_ms) // n))

    def index(self, ms: int) -> int:
        return min(self.n - 1, max(0, (ms - self.start_ms) // self.width_ms))


def _ranked(incidents: Sequence[Incident], key: str, buckets: _Buckets) -> list[dict[str, Any]]:
    counts: Counter[str] = Counter()
    trends: dict[str, list[int]] = {}
    for inc in incidents:
        name = getattr(inc, key)
        if name is None:
            continue
        counts[name] += 1
        trends.setdefault(name, [0] * buckets.n)[buckets.index(inc.first_seen_ms)] += 1
    order = sorted(counts.items(), key=lambda x: (-x[1], x[0]))
    return [{"name": k, "incidents": n, "trend": trends[k]} for k, n in order]


def fleet_stats(
    ledger: FleetLedger,
    since_ms: int | None = None,
    now_ms: int | None = None,
    buckets: int = TREND_BUCKETS,
) -> dict[str, Any]:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    incidents = ledger.since(since_ms)
    start_ms = since_ms
    if start_ms is None:
        start_ms = min((i.first_seen_ms for i in incidents), default=now_ms)
    grid = _Buckets(start_ms, max(now_ms, start_ms + 1), buckets)
    return {
        "schema": STATS_SCHEMA,
        "since": _iso(start_ms),
        "until": _iso(now_ms),
        "trend_bucket_seconds": round(grid.width_ms / 1000, 3),
        "incidents": len(incidents),
        "jobs": len({i.job for i in incidents}),
        "by_signature": _ranked(incidents, "signature", grid),
        "by_subsystem": _ranked(incidents, "subsystem", grid),
        "by_host": _ranked(incidents, "host", grid),
        "suspect_nodes": [
            {"host": s.host, "jobs": list(s.jobs), "incidents": s.incidents}
            for s in suspects(incidents)
        ],
    }


def topic_stats(
    read: TopicRead, since_ms: int | None = None, buckets: int = TREND_BUCKETS
) -> dict[str, Any]:
    """fleet_stats of a topic read, with how many records it held and how many of them were
    not diagnoses (so the log topic given by mistake is not taken for a healthy fleet)."""
    stats = fleet_stats(read.ledger, since_ms=since_ms, buckets=buckets)
    stats["records_read"] = read.records
    stats["records_not_diagnoses"] = read.not_diagnoses
    return stats


async def read_topic(reader: Any, topic: str, timeout_s: float = 60.0) -> TopicRead:
    """Every diagnosis on `topic`, read from the beginning with a group-less consumer (an
    incident whose first version is older than --since must not count as new)."""
    records: list[tuple[bytes | None, int]] = []
    tail = TopicTail(reader, topic)
    await tail.catch_up(lambda rec: records.append((rec.value, rec.timestamp)), timeout_s=timeout_s)
    records.sort(key=lambda r: r[1])
    return read_records(records)


def _headline(stats: dict[str, Any]) -> str:
    head = (
        f"{stats['incidents']} incident(s) in {stats['jobs']} job(s) "
        f"from {stats['since']} to {stats['until']}"
    )
    if not stats["by_signature"]:
        return head
    buckets = len(stats["by_signature"][0]["trend"])
    span = _span(stats["trend_bucket_seconds"])
    return f"{head} (trends: {buckets} buckets of {span}, oldest first)"


def sparkline(counts: Sequence[int]) -> str:
    top = max(counts, default=0)
    if top == 0:
        return SPARKS[0] * len(counts)
    return "".join(SPARKS[round(c / top * (len(SPARKS) - 1))] for c in counts)


def direction(counts: Sequence[int]) -> str:
    """`rising`, `falling` or `steady`: the later half of the window against the earlier."""
    half = len(counts) // 2
    early, late = sum(counts[:half]), sum(counts[len(counts) - half :])
    if late > early * 1.5 and late - early >= 2:
        return "rising"
    if early > late * 1.5 and early - late >= 2:
        return "falling"
    return "steady"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g}{unit}"
    return f"{seconds:.3g}s"


def render_stats(stats: dict[str, Any], top: int = 20) -> str:
    lines = [_headline(stats)]
    if stats.get("records_read") == 0:
        lines.append("the topic is empty: no diagnosis has been published to it yet")
    skipped = stats.get("records_not_diagnoses", 0)
    if skipped:
        lines.append(f"{skipped} record(s) on the topic were not diagnoses and were skipped")
    for title, key in (
        ("by signature", "by_signature"),
        ("by subsystem", "by_subsystem"),
        ("by initiating host", "by_host"),
    ):
        rows = stats[key]
        if not rows:
            continue
        lines += ["", title + ":"]
        width = max(len(r["name"]) for r in rows[:top])
        for r in rows[:top]:
            lines.append(
                f"  {r['name']:<{width}}  {r['incidents']:>6}  {sparkline(r['trend'])}  "
                f"{direction(r['trend'])}"
            )
        if len(rows) > top:
            lines.append(f"  ... {len(rows) - top} more")
    lines.append("")
    found = stats["suspect_nodes"]
    if not found:
        lines.append("no suspect nodes")
        return "\n".join(lines)
    lines.append(f"suspect nodes (initiated incidents in >= {SUSPECT_MIN_JOBS} jobs):")
    for s in found:
        jobs = ", ".join(s["jobs"][:10]) + (" ..." if len(s["jobs"]) > 10 else "")
        lines.append(f"  {s['host']}  {len(s['jobs'])} jobs, {s['incidents']} incidents: {jobs}")
    return "\n".join(lines)
