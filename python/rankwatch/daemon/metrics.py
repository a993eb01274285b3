"""Every metric `rankwatch run` exports, on a `prometheus_client` registry of its own.

Totals the engine keeps (lines, bytes, signature hits, evictions) are copied from
`Engine.stats()` after each batch and exported by a collector as counters, so a scrape never
touches the engine. Fleet statistics: incidents by signature, subsystem and root-cause host
count what this daemon published (sum them over daemons); suspect hosts follow the whole
diagnoses topic, which every daemon reads, so each names the fleet's suspects (take the max
over daemons). Label values are bounded."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from rankwatch.daemon.decision import SKIP_REASONS as UNPUBLISHED_REASONS
from rankwatch.daemon.fleet import FleetLedger, Incident, read_diagnosis, suspects

# `_created` series double every counter's series count for a timestamp nobody here reads.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

MAX_HOST_SERIES = 200  # root-cause hosts with a series of their own; the rest count as "other"
MAX_SUSPECT_SERIES = 50  # suspect hosts exported by name, most jobs first
OTHER = "other"
BATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# Why a diagnosis or dead-letter copy was given up: larger than any request may be even after
# trimming, or refused by the broker for the record itself (not for an outage).
SKIP_REASONS = ("too_large", "refused")


class _EngineTotals(Collector):
    """Counters whose totals live in the engine: exported from the last `stats()` copy."""

    def __init__(self) -> None:
        self.stats: Mapping[str, object] = {}

    def _num(self, key: str) -> float:
        v = self.stats.get(key, 0)
        return float(v) if isinstance(v, int | float) else 0.0

    def collect(self) -> Iterable[CounterMetricFamily]:
        for name, key, text in (
            ("rankwatch_lines_in", "lines", "log lines fed to the engine (replays included)"),
            ("rankwatch_bytes_in", "bytes", "log bytes fed to the engine (replays included)"),
            ("rankwatch_jobs_evicted", "jobs_evicted", "jobs evicted to stay under the budget"),
            (
                "rankwatch_jobs_released",
                "jobs_released",
                "quiet jobs released after final diagnoses",
            ),
            (
                "rankwatch_ts_ahead_clamped",
                "ts_ahead_clamped",
                "lines whose time ran more than max_ts_ahead_ms ahead of the broker's",
            ),
        ):
            yield CounterMetricFamily(name, text, value=self._num(key))
        hits = CounterMetricFamily(
            "rankwatch_signature_hits",
            "signature hits, by signature (replays included)",
            labels=["signature"],
        )
        by_sig = self.stats.get("hits_by_signature")
        if isinstance(by_sig, dict):
            for sig, n in sorted(by_sig.items()):
                hits.add_metric([str(sig)], float(n))
        yield hits


class BoundedLabel:
    """Maps label values to at most `limit` distinct ones; later newcomers become "other"."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.known: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in self.known:
            return value
        if len(self.known) < self.limit:
            self.known.add(value)
            return value
        return OTHER


class FleetMetrics:
    """Incidents by signature/subsystem and root-cause host, and suspect hosts in a window."""

    def __init__(self, r: CollectorRegistry, window_s: float) -> None:
        self.window_s = window_s
        self.ledger = FleetLedger()
        # the time of the last publish whose suspects are not computed yet (see `published`)
        self._stale_at: float | None = None
        self.host_label = BoundedLabel(MAX_HOST_SERIES)
        self.incidents = Counter(
            "rankwatch_incidents",
            "incidents diagnosed and published by this daemon, by signature and subsystem",
            ["signature", "subsystem"],
            registry=r,
        )
        self.by_host = Counter(
            "rankwatch_incidents_by_host",
            f"incidents by root-cause host (the first {MAX_HOST_SERIES} hosts seen by name, "
            f'later ones as "{OTHER}")',
            ["host"],
            registry=r,
        )
        self.suspect_jobs = Gauge(
            "rankwatch_suspect_host_jobs",
            "jobs in which a suspect host initiated incidents within the window "
            f"(the {MAX_SUSPECT_SERIES} with most jobs)",
            ["host"],
            registry=r,
        )
        self.suspect_count = Gauge(
            "rankwatch_suspect_hosts",
            "hosts that initiated incidents in two or more jobs within the window",
            registry=r,
        )
        Gauge(
            "rankwatch_suspect_window_seconds",
            "the window suspect hosts are counted in",
            registry=r,
        ).set(window_s)
        self._exported: set[str] = set()

    def observe(self, value: bytes | None, record_ms: int) -> None:
        """A record of the diagnoses topic, from any daemon: it counts for the suspect hosts
        (the counters only count what this daemon published, so that sums add up)."""
        d = read_diagnosis(value)
        if d is not None:
            self.ledger.add(d, record_ms)

    def published(self, diagnosis: Mapping[str, object], now_s: float | None = None) -> None:
        now_s = time.time() if now_s is None else now_s
        new = self.ledger.add(diagnosis, int(now_s * 1000))
        if new is not None:
            self._count(new)
        # the suspect gauges walk the whole ledger: once per loop (`catch_up`), not per publish
        self._stale_at = now_s

    def catch_up(self) -> None:
        """Recomputes the suspect gauges if anything was published since they last were."""
        if self._stale_at is not None:
            self.refresh(self._stale_at)

    def _count(self, inc: Incident) -> None:
        self.incidents.labels(inc.signature, inc.subsystem).inc()
        if inc.host is not None:
            self.by_host.labels(self.host_label(inc.host)).inc()

    def refresh(self, now_s: float | None = None) -> None:
        """Recomputes the suspect gauges for the window ending now (drops older incidents)."""
        now_s = time.time() if now_s is None else now_s
        self._stale_at = None
        since_ms = int((now_s - self.window_s) * 1000)
        self.ledger.prune(since_ms)
        found = suspects(self.ledger.since(since_ms))
        self.suspect_count.set(len(found))
        shown = {s.host: len(s.jobs) for s in found[:MAX_SUSPECT_SERIES]}
        for host in self._exported - shown.keys():
            self.suspect_jobs.remove(host)
        for host, n in shown.items():
            self.suspect_jobs.labels(host).set(n)
        self._exported = set(shown)


class DaemonMetrics:
    def __init__(
        self,
        reject_reasons: Sequence[str],
        version: str,
        suspect_window_s: float = 86_400.0,
    ) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        Info("rankwatch_build", "build information", registry=r).info({"version": version})
        self.engine_totals = _EngineTotals()
        r.register(self.engine_totals)
        self.fleet = FleetMetrics(r, suspect_window_s)
        self.kafka_up = Gauge(
            "rankwatch_kafka_up", "1 when the last broker metadata request succeeded", registry=r
        )
        self.output_topic_missing = Gauge(
            "rankwatch_output_topic_missing",
            "1 while the diagnoses topic, seen before, is missing (diagnoses are held)",
            registry=r,
        )
        self.publish_held = Gauge(
            "rankwatch_publish_held_records",
            "diagnoses and dead-letter copies whose delivery failed with a retriable error, "
            "held to be sent again (offsets are not committed past them)",
            registry=r,
        )
        self.records_in = Counter(
            "rankwatch_records_in", "input records read (replayed ones excluded)", registry=r
        )
        self.records_replayed = Counter(
            "rankwatch_records_replayed",
            "input records re-read to rebuild state after an assignment",
            registry=r,
        )
        self.unkeyed = Counter(
            "rankwatch_records_unkeyed",
            "records without a key on an input topic read as keyed by job (repartition off or "
            "decided off at start): with several daemons their jobs may be diagnosed apart",
            ["topic"],
            registry=r,
        )
        self.rejected = Counter(
            "rankwatch_records_rejected",
            "input records rejected, by reason (replayed ones excluded)",
            ["reason"],
            registry=r,
        )
        for reason in reject_reasons:  # known series are exported as 0
            self.rejected.labels(reason)
        self.dead_letter = Counter(
            "rankwatch_dead_letter_records",
            "records copied to the dead-letter topic",
            registry=r,
        )
        self.incidents_open = Gauge(
            "rankwatch_incidents_open", "incidents held by the engine", registry=r
        )
        self.incidents_pending = Gauge(
            "rankwatch_incidents_pending",
            "incidents held by the engine that have no diagnosis yet",
            registry=r,
        )
        self.diagnoses_out = Counter(
            "rankwatch_diagnoses_out",
            "diagnoses published (first versions and updates)",
            ["kind"],
            registry=r,
        )
        for kind in ("new", "update"):
            self.diagnoses_out.labels(kind)
        self.diagnoses_skipped = Counter(
            "rankwatch_diagnoses_skipped",
            "diagnoses not published because they were already published, by reason",
            ["reason"],
            registry=r,
        )
        for reason in UNPUBLISHED_REASONS:
            self.diagnoses_skipped.labels(reason)
        self.publish_trimmed = Counter(
            "rankwatch_publish_trimmed",
            "diagnoses and dead-letter copies cut down to fit the producer's request size",
            ["kind"],
            registry=r,
        )
        self.publish_skipped = Counter(
            "rankwatch_publish_skipped",
            "diagnoses and dead-letter copies given up (logged with their source), by reason",
            ["reason"],
            registry=r,
        )
        for kind in ("diagnosis", "dead_letter"):
            self.publish_trimmed.labels(kind)
        for reason in SKIP_REASONS:
            self.publish_skipped.labels(reason)
        self.unacknowledged = Gauge(
            "rankwatch_publish_unacknowledged_records",
            "diagnoses and dead-letter copies sent but not yet acknowledged by the broker",
            registry=r,
        )
        self.outbox_bytes = Gauge(
            "rankwatch_outbox_bytes",
            "diagnoses on their way out: not yet offered, held for the checkpoint, or kept by "
            "the publisher until the broker answered (bytes of JSON)",
            registry=r,
        )
        self.outbox_peak = Gauge(
            "rankwatch_outbox_publisher_peak_bytes",
            "the most bytes the publisher kept for unanswered records since the start",
            registry=r,
        )
        self.outbox_share = Gauge(
            "rankwatch_outbox_share_bytes",
            "the outbox's share of memory_budget_bytes: above it the feed waits",
            registry=r,
        )
        self.outbox_paused = Counter(
            "rankwatch_outbox_paused_seconds",
            "time the feed waited for the broker to acknowledge diagnoses (outbox above its "
            "share), including early checkpoints",
            registry=r,
        )
        self.outbox_waiting = Gauge(
            "rankwatch_outbox_waiting",
            "1 while the feed waits for the broker to acknowledge diagnoses (the publisher "
            "holds more than the outbox's share), else 0",
            registry=r,
        )
        self.held = Gauge(
            "rankwatch_diagnosis_updates_held",
            "updates of published diagnoses waiting for the next checkpoint",
            registry=r,
        )
        self.lag = Gauge(
            "rankwatch_consumer_lag_records",
            "records between the high watermark and the daemon's position",
            ["topic", "partition"],
            registry=r,
        )
        self.partitions = Gauge(
            "rankwatch_partitions_assigned", "input partitions owned by this daemon", registry=r
        )
        self.rebalances = Counter(
            "rankwatch_rebalances", "partition assignments received", registry=r
        )
        self.commits = Counter("rankwatch_commits", "offset commits", registry=r)
        self.jobs = Gauge("rankwatch_jobs", "jobs held by the engine", registry=r)
        self.memory = Gauge(
            "rankwatch_ring_memory_bytes", "engine memory: rings, hits and snapshots", registry=r
        )
        self.memory_budget = Gauge(
            "rankwatch_memory_budget_bytes", "configured engine memory budget", registry=r
        )
        self.batch_seconds = Histogram(
            "rankwatch_batch_duration_seconds",
            "time from a fetched batch to its diagnoses being sent",
            buckets=BATCH_BUCKETS,
            registry=r,
        )
        self.loops = Counter(
            "rankwatch_loop_iterations",
            "fetch-feed-poll-publish iterations (advances at least every poll_interval_ms)",
            registry=r,
        )
        self.last_batch = Gauge(
            "rankwatch_last_batch_timestamp_seconds",
            "wall time the last input batch was processed",
            registry=r,
        )

    def update_engine(self, stats: Mapping[str, object]) -> None:
        self.engine_totals.stats = stats

        def num(key: str) -> float:
            v = stats.get(key, 0)
            return float(v) if isinstance(v, int | float) else 0.0

        self.incidents_open.set(num("incidents"))
        self.jobs.set(num("jobs"))
        self.memory.set(num("memory_bytes"))
        if "memory_budget_bytes" in stats:
            self.memory_budget.set(num("memory_budget_bytes"))

    def render(self) -> bytes:
        self.fleet.catch_up()
        return prometheus_client.generate_latest(self.registry)
