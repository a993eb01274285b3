"""Metrics of `rankwatch alert`, in a prometheus_client registry of its own (per process, so
tests and an embedding program can run several). Sink labels are names like `pagerduty` or
`webhook-1`, never URLs or keys."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST


class AlertMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.diagnoses = Counter(
            "rankwatch_alert_diagnoses", "diagnosis records read from the topic", registry=r
        )
        self.invalid = Counter(
            "rankwatch_alert_invalid_records",
            "records on the diagnoses topic that are not diagnoses (skipped)",
            registry=r,
        )
        self.sent = Counter("rankwatch_alert_sent", "alerts a sink accepted", ["sink"], registry=r)
        self.failed = Counter(
            "rankwatch_alert_failed",
            "alerts not delivered: refused, past the retry budget, or the queue was full",
            ["sink"],
            registry=r,
        )
        self.dropped = Counter(
            "rankwatch_alert_dropped",
            "alerts given up at once because the sink's queue was full (also in failed)",
            ["sink"],
            registry=r,
        )
        self.retried = Counter(
            "rankwatch_alert_retried",
            "retries after 429, 5xx or a connection error",
            ["sink"],
            registry=r,
        )
        self.latency = Histogram(
            "rankwatch_alert_request_seconds",
            "time of one HTTP request to a sink",
            ["sink"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.queued = Gauge(
            "rankwatch_alert_queue_depth", "alerts waiting for a sink", ["sink"], registry=r
        )
        self.firing = Gauge(
            "rankwatch_alert_incidents_firing",
            "incidents re-sent to Alertmanager until they expire",
            registry=r,
        )
        self.stale = Counter(
            "rankwatch_alert_stale_diagnoses",
            "diagnoses older than alert_ttl_ms when read: shown on the pages, not alerted",
            registry=r,
        )
        self.commits = Counter(
            "rankwatch_alert_offset_commits", "offset commits after delivery", registry=r
        )

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def sink(self, name: str) -> None:
        """Creates the sink's series at zero, so dashboards see them before the first alert."""
        for metric in (self.sent, self.failed, self.retried, self.dropped):
            metric.labels(sink=name)
        self.queued.labels(sink=name).set(0)
