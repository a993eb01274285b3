"""The daemon's own per-job and per-diagnosis bookkeeping (published-diagnosis index, job map,
fleet ledger) is bounded by count within the memory budget, not only by time: 10,000 short
jobs inside the time windows grew the daemon ~12 KiB per job, past twice a 50 MiB budget."""

from __future__ import annotations

from typing import Any

from aiokafka import TopicPartition

from rankwatch.daemon.bounds import max_entries
from rankwatch.daemon.config import load_config
from rankwatch.daemon.fleet import FleetLedger
from rankwatch.daemon.jobs import JobMap
from rankwatch.daemon.published import PublishedIndex
from rankwatch.daemon.service import Daemon

BUDGET = 50 << 20


def diagnosis(i: int) -> dict[str, Any]:
    return {
        "id": f"d-{i}",
        "job": f"job-{i}",
        "incident": {"start": "2026-01-01T00:00:00+00:00"},
        "signature": {"id": "nccl.socket", "subsystem": "nccl"},
        "root_cause": {"host": f"host-{i % 7}", "origin": f"in/0/{i}"},
    }


def test_bound_grows_with_the_budget_and_has_a_floor() -> None:
    assert max_entries(1 << 16) == 256
    assert 256 < max_entries(BUDGET) < max_entries(256 << 20) < max_entries(1 << 30)


def test_published_index_keeps_the_newest_entries_up_to_its_bound() -> None:
    index = PublishedIndex(horizon_ms=60_000, retain_s=3600, max_entries=100)
    for i in range(1000):
        index.remember(diagnosis(i))
    assert len(index) == 100
    assert "d-999" in index and "d-900" in index and "d-899" not in index
    assert set(index.by_job) == {f"job-{i}" for i in range(900, 1000)}
    index.remember(diagnosis(900))  # published again: now the newest
    index.remember(diagnosis(1000))
    assert "d-900" in index and "d-901" not in index
    assert len(index.by_job) == 100


def test_job_map_forgets_the_least_recently_seen_jobs_past_its_bound() -> None:
    jobs = JobMap(max_jobs=50)
    tp = TopicPartition("in", 0)
    jobs.note_jobs(tp, [f"job-{i}" for i in range(500)])
    jobs.note_jobs(tp, ["job-450"])  # seen again
    jobs.note_jobs(tp, ["job-new"])
    assert len(jobs.partitions) == len(jobs.last_seen) == 50
    assert jobs.partitions_of("job-450") == {tp} and jobs.partitions_of("job-new") == {tp}
    assert jobs.partitions_of("job-451") == set()


def test_fleet_ledger_drops_the_first_seen_incidents_past_its_bound() -> None:
    ledger = FleetLedger(max_incidents=10)
    for i in range(100):
        ledger.add(diagnosis(i), seen_ms=i)
    assert len(ledger) == 10
    assert [i.id for i in ledger.since(None)] == [f"d-{i}" for i in range(90, 100)]
    assert len(FleetLedger()) == 0  # `rankwatch stats` reads the whole topic: unbounded


def test_daemon_bounds_its_bookkeeping_under_its_budget() -> None:
    cfg = load_config(None, overrides={"memory_budget_bytes": BUDGET, "topic": ["in"]}, environ={})
    daemon = Daemon(cfg)
    try:
        n = max_entries(BUDGET) * 3
        for i in range(n):
            d = diagnosis(i)
            daemon.index.remember(d)
            daemon.jobmap.note_diagnosis(d)
            daemon.metrics.fleet.published(d, now_s=1.0e9 + i)
        bound = max_entries(BUDGET)
        assert len(daemon.index) == bound
        assert len(daemon.jobmap.last_seen) == bound
        assert len(daemon.metrics.fleet.ledger) == bound
    finally:
        daemon.engine.close()
