"""The daemon's own per-job and per-diagnosis bookkeeping (published-diagnosis index, job map,
fleet ledger) is bounded by count within the memory budget, not only by time: 10,000 short
jobs inside the time windows grew the daemon ~12 KiB per job, past twice a 50 MiB budget.
The bound never forgets a job the engine still holds (that would publish its next version
again), and the suspect-host gauges walk the fleet ledger once per loop, not per publish."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from rankwatch.daemon.bounds import max_entries
from rankwatch.daemon.decision import IDENTICAL, verdict
from rankwatch.daemon.fleet import FleetLedger, Incident
from rankwatch.daemon.jobs import JobMap
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.published import PublishedIndex
from rankwatch.daemon.service import REJECT_REASONS, Daemon
from rankwatch.engine import Decoder
from rankwatch.settings.run import load_config
from test_memory_bound import records

BUDGET = 50 << 20


def diagnosis(i: int, job: str | None = None) -> dict[str, Any]:
    return {
        "id": f"d-{i}",
        "job": job or f"job-{i}",
        "incident": {"start": "2026-01-01T00:00:00+00:00"},
        "signature": {"id": "nccl.socket", "subsystem": "nccl"},
        "root_cause": {"host": f"host-{i % 7}", "origin": f"in/0/{i}"},
    }


def nothing_kept(job: str) -> bool:
    return False


def test_bound_grows_with_the_budget_and_has_a_floor() -> None:
    assert max_entries(1 << 16) == 256
    assert 256 < max_entries(BUDGET) < max_entries(256 << 20) < max_entries(1 << 30)


def test_published_index_keeps_the_newest_entries_up_to_its_bound() -> None:
    index = PublishedIndex(horizon_ms=60_000, retain_s=3600)
    for i in range(1000):
        index.remember(diagnosis(i))
    assert index.trim(100, nothing_kept) == 900
    assert len(index) == 100
    assert "d-999" in index and "d-900" in index and "d-899" not in index
    assert set(index.by_job) == {f"job-{i}" for i in range(900, 1000)}
    index.remember(diagnosis(900))  # published again: now the newest
    index.remember(diagnosis(1000))
    index.trim(100, nothing_kept)
    assert "d-900" in index and "d-901" not in index
    assert len(index.by_job) == 100


def test_job_map_forgets_the_least_recently_seen_jobs_past_its_bound() -> None:
    jobs = JobMap()
    tp = TopicPartition("in", 0)
    jobs.note_jobs(tp, [f"job-{i}" for i in range(500)])
    jobs.note_jobs(tp, ["job-450"])  # seen again
    jobs.note_jobs(tp, ["job-new"])
    jobs.trim(50, nothing_kept)
    assert len(jobs.partitions) == len(jobs.last_seen) == 50
    assert jobs.partitions_of("job-450") == {tp} and jobs.partitions_of("job-new") == {tp}
    assert jobs.partitions_of("job-451") == set()


def test_fleet_ledger_drops_the_first_seen_incidents_past_its_bound() -> None:
    ledger = FleetLedger()
    for i in range(100):
        ledger.add(diagnosis(i), seen_ms=i)
    ledger.trim(10, nothing_kept)
    assert len(ledger) == 10
    assert [i.id for i in ledger.since(None)] == [f"d-{i}" for i in range(90, 100)]


def test_the_bound_spares_every_entry_of_a_kept_job() -> None:
    index, jobs, ledger = PublishedIndex(60_000, 3600), JobMap(), FleetLedger()
    tp = TopicPartition("in", 0)
    for i in range(300):
        d = diagnosis(i, job="live" if i % 3 == 0 else None)
        index.remember(d)
        jobs.note_diagnosis(d)
        ledger.add(d, seen_ms=i)
    live = {"live"}.__contains__
    index.trim(10, live)
    jobs.trim(10, live)
    ledger.trim(10, live)
    assert {f"d-{i}" for i in range(0, 300, 3)} <= set(index.entries)
    assert jobs.partitions_of("live") == {tp}
    assert {i.id for i in ledger.since(None) if i.job == "live"} == set(index.by_job["live"])


def test_the_daemon_never_forgets_what_it_published_for_a_job_the_engine_holds() -> None:
    """A job still in the engine keeps its index entry, its partitions and its ledger entry
    however many other jobs pass the bound: its next identical version is not published again
    (with the entry forgotten it would be: `decide` returns no skip), and a revoke of its
    partition still drops it from the engine."""
    cfg = load_config(None, overrides={"memory_budget_bytes": BUDGET, "topic": ["in"]}, environ={})
    daemon = Daemon(cfg)

    async def scenario() -> None:
        values = records("live", range(4), cause_rank=2)
        batch = [
            ConsumerRecord("in", 0, o, 1_000, 0, None, v, None, -1, len(v), ())
            for o, v in enumerate(values)
        ]
        await daemon.engine.poll(1_000)
        await daemon.engine.submit_feed_many([(Decoder(), "in/0", batch, "")])
        [live] = await daemon.engine.poll(30_000)  # past the settle time, not the release
        assert live["job"] == "live"
        daemon.index.remember(live)
        daemon.jobmap.note_diagnosis(live)
        daemon.jobmap.note_jobs(TopicPartition("in", 0), ["live"])
        daemon.metrics.fleet.published(live, now_s=1.0e9)
        for i in range(max_entries(BUDGET) * 3):  # released jobs, all published later
            d = diagnosis(i)
            daemon.index.remember(d)
            daemon.jobmap.note_diagnosis(d)
            daemon.metrics.fleet.published(d, now_s=1.0e9 + i)
        await daemon.engine.stats()  # as each loop does, then bounds the bookkeeping
        daemon._bound_bookkeeping()
        bound = max_entries(BUDGET)
        assert verdict(daemon.index, live, replaying=False)[0] == IDENTICAL
        assert daemon.jobmap.partitions_of("live") == {TopicPartition("in", 0)}
        assert live["id"] in {i.id for i in daemon.metrics.fleet.ledger.since(None)}
        assert len(daemon.index) == len(daemon.jobmap.last_seen) == bound
        assert len(daemon.metrics.fleet.ledger) == bound
        assert "live" in daemon.jobmap.jobs_lost({TopicPartition("in", 0)}, set())

    try:
        asyncio.run(scenario())
    finally:
        daemon.engine.close()


class CountingLedger(FleetLedger):
    """A real ledger that counts the walks over all its incidents."""

    def __init__(self) -> None:
        super().__init__()
        self.walks = 0

    def since(self, since_ms: int | None) -> list[Incident]:
        self.walks += 1
        return super().since(since_ms)


def test_suspect_hosts_are_recomputed_once_per_loop_not_once_per_publish() -> None:
    """Each publish walked the whole ledger: quadratic in the jobs of a burst."""
    m = DaemonMetrics(REJECT_REASONS, "0", suspect_window_s=86_400)
    ledger = m.fleet.ledger = CountingLedger()
    for i in range(1_000):
        m.fleet.published(diagnosis(i), now_s=1.0e9 + i)
    text = m.render().decode()
    assert ledger.walks == 1
    assert "rankwatch_suspect_hosts 7.0" in text  # 7 hosts, each in two jobs or more
    m.render()
    assert ledger.walks == 1  # nothing published since
