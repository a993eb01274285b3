"""`rankwatch stats`: fleet statistics from the diagnoses topic — incidents by signature,
subsystem and host, and suspect nodes: hosts that initiated incidents in two or more jobs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from rankwatch.daemon.tail import TopicTail

STATS_SCHEMA = "rankwatch.fleet-stats/1"
SUSPECT_MIN_JOBS = 2


def latest_versions(values: Iterable[bytes | None]) -> dict[str, dict[str, Any]]:
    """The last published version of every diagnosis id (records that are not diagnoses are
    ignored)."""
    latest: dict[str, dict[str, Any]] = {}
    for value in values:
        if not value:
            continue
        try:
            d = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(d, dict) and isinstance(d.get("id"), str):
            latest[d["id"]] = d
    return latest


def _ranked(counter: Counter[str]) -> list[dict[str, Any]]:
    return [
        {"name": k, "incidents": n} for k, n in sorted(counter.items(), key=lambda x: (-x[1], x[0]))
    ]


def fleet_stats(diagnoses: Iterable[dict[str, Any]]) -> dict[str, Any]:
    by_signature: Counter[str] = Counter()
    by_subsystem: Counter[str] = Counter()
    by_host: Counter[str] = Counter()
    host_jobs: dict[str, set[str]] = {}
    jobs: set[str] = set()
    total = 0
    for d in diagnoses:
        total += 1
        job = str(d.get("job", ""))
        jobs.add(job)
        sig = d.get("signature") or {}
        by_signature[str(sig.get("id") or "unclassified")] += 1
        by_subsystem[str(sig.get("subsystem") or "unknown")] += 1
        host = (d.get("root_cause") or {}).get("host")
        if host:
            by_host[str(host)] += 1
            host_jobs.setdefault(str(host), set()).add(job)
    suspects = [
        {"host": h, "jobs": sorted(js), "incidents": by_host[h]}
        for h, js in sorted(host_jobs.items(), key=lambda x: (-len(x[1]), x[0]))
        if len(js) >= SUSPECT_MIN_JOBS
    ]
    return {
        "schema": STATS_SCHEMA,
        "incidents": total,
        "jobs": len(jobs),
        "by_signature": _ranked(by_signature),
        "by_subsystem": _ranked(by_subsystem),
        "by_host": _ranked(by_host),
        "suspect_nodes": suspects,
    }


async def read_diagnoses(reader: Any, topic: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """Every diagnosis on `topic` (last version of each id), read with a group-less consumer."""
    values: list[bytes | None] = []
    tail = TopicTail(reader, topic)
    await tail.catch_up(lambda rec: values.append(rec.value), timeout_s=timeout_s)
    return list(latest_versions(values).values())


def render_stats(stats: dict[str, Any], top: int = 20) -> str:
    lines = [f"{stats['incidents']} incident(s) in {stats['jobs']} job(s)"]
    for title, key in (
        ("by signature", "by_signature"),
        ("by subsystem", "by_subsystem"),
        ("by initiating host", "by_host"),
    ):
        rows = stats[key]
        if not rows:
            continue
        lines.append("")
        lines.append(title + ":")
        width = max(len(r["name"]) for r in rows[:top])
        for r in rows[:top]:
            lines.append(f"  {r['name']:<{width}}  {r['incidents']:>6}")
        if len(rows) > top:
            lines.append(f"  ... {len(rows) - top} more")
    lines.append("")
    suspects = stats["suspect_nodes"]
    if suspects:
        lines.append(f"suspect nodes (initiated incidents in >= {SUSPECT_MIN_JOBS} jobs):")
        for s in suspects:
            lines.append(
                f"  {s['host']}  {len(s['jobs'])} jobs, {s['incidents']} incidents: "
                + ", ".join(s["jobs"][:10])
                + (" ..." if len(s["jobs"]) > 10 else "")
            )
    else:
        lines.append("no suspect nodes")
    return "\n".join(lines)
