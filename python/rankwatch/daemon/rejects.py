"""Records the engine rejected (not a log record, too large, no job): counted by reason and,
when a dead-letter topic is set, copied there by the sink with where they were first read.
Records of a replay were counted and copied when first read."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rankwatch.daemon.feeding import PartitionBatch
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.publisher import Publisher
from rankwatch.daemon.repartition import SOURCE_HEADER


def source_of(record: Any) -> str | None:
    """Where a record of a repartition topic was first read (topic/partition/offset)."""
    for k, v in record.headers or ():
        if k == SOURCE_HEADER:
            return bytes(v).decode(errors="replace")
    return None


async def handle_rejects(
    part: PartitionBatch,
    rejected: Sequence[tuple[int, str]],
    publisher: Publisher,
    metrics: DaemonMetrics,
    copy: bool,
) -> None:
    """Counts the rejected records of `part` (index, reason) and, with `copy`, sends each
    to the dead-letter topic."""
    tp = part.tp
    per_reason: dict[str, int] = {}  # one labelled update per reason and batch
    for i, reason in rejected:
        if i < part.replayed:
            continue  # counted and copied when it was first read
        per_reason[reason] = per_reason.get(reason, 0) + 1
        if copy:
            r = part.records[i]
            source = source_of(r) or f"{tp.topic}/{tp.partition}/{r.offset}"
            if await publisher.send_dead_letter(r.value, r.key, list(r.headers), reason, source):
                metrics.dead_letter.inc()
    for reason, n in per_reason.items():
        metrics.rejected.labels(reason).inc(n)
