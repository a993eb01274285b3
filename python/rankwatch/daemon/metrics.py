"""A small Prometheus registry (counters, gauges, histograms with labels) rendered in the text
exposition format 0.0.4, plus the daemon's own metric set. Standard library only."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

LabelValues = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


class Metric:
    kind = "untyped"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help
        self.label_names = tuple(labels)

    def samples(self) -> Iterable[str]:
        raise NotImplementedError

    def render(self) -> str:
        head = f"# HELP {self.name} {self.help}\n# TYPE {self.name} {self.kind}\n"
        return head + "".join(s + "\n" for s in self.samples())


class _Valued(Metric):
    def __init__(
        self,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        known: Iterable[LabelValues] = (),
    ) -> None:
        super().__init__(name, help, labels)
        self.values: dict[LabelValues, float] = {}
        for k in known:  # series known in advance are exported as 0
            self.values[k] = 0.0
        if not labels:
            self.values[()] = 0.0

    def set(self, value: float, *labels: str) -> None:
        self.values[labels] = float(value)

    def get(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def remove(self, *labels: str) -> None:
        self.values.pop(labels, None)

    def samples(self) -> Iterable[str]:
        for key in sorted(self.values):
            yield f"{self.name}{_labels(self.label_names, key)} {_fmt(self.values[key])}"


class Counter(_Valued):
    kind = "counter"

    def inc(self, amount: float = 1.0, *labels: str) -> None:
        self.values[labels] = self.values.get(labels, 0.0) + amount


class Gauge(_Valued):
    kind = "gauge"


class Histogram(Metric):
    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        super().__init__(name, help)
        self.bounds = sorted(buckets)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def samples(self) -> Iterable[str]:
        running = 0
        for bound, n in zip([*self.bounds, math.inf], self.counts, strict=True):
            running += n
            yield f'{self.name}_bucket{{le="{_fmt(bound)}"}} {running}'
        yield f"{self.name}_sum {_fmt(self.sum)}"
        yield f"{self.name}_count {self.count}"


_M = TypeVar("_M", bound=Metric)


class Registry:
    def __init__(self) -> None:
        self.metrics: list[Metric] = []

    def add(self, metric: _M) -> _M:
        self.metrics.append(metric)
        return metric

    def render(self) -> bytes:
        return "".join(m.render() for m in self.metrics).encode()


class DaemonMetrics:
    """Every metric `rankwatch run` exports. Engine totals are copied in from `Engine.stats()`
    after each batch (`update_engine`), so a scrape never touches the engine."""

    def __init__(self, reject_reasons: Sequence[str], version: str) -> None:
        r = self.registry = Registry()
        info = r.add(Gauge("rankwatch_build_info", "build information", ["version"]))
        info.set(1, version)
        self.records_in = r.add(
            Counter("rankwatch_records_in_total", "input records read (replayed ones excluded)")
        )
        self.records_replayed = r.add(
            Counter(
                "rankwatch_records_replayed_total",
                "input records re-read to rebuild state after an assignment",
            )
        )
        self.lines_in = r.add(
            Counter("rankwatch_lines_in_total", "log lines fed to the engine (replays included)")
        )
        self.bytes_in = r.add(
            Counter("rankwatch_bytes_in_total", "log bytes fed to the engine (replays included)")
        )
        self.rejected = r.add(
            Counter(
                "rankwatch_records_rejected_total",
                "input records rejected, by reason (replayed ones excluded)",
                ["reason"],
                [(x,) for x in reject_reasons],
            )
        )
        self.dead_letter = r.add(
            Counter(
                "rankwatch_dead_letter_records_total", "records copied to the dead-letter topic"
            )
        )
        self.hits = r.add(
            Counter(
                "rankwatch_signature_hits_total",
                "signature hits, by signature (replays included)",
                ["signature"],
            )
        )
        self.incidents_open = r.add(
            Gauge("rankwatch_incidents_open", "incidents held by the engine")
        )
        self.incidents_pending = r.add(
            Gauge(
                "rankwatch_incidents_pending",
                "incidents held by the engine that have no diagnosis yet",
            )
        )
        self.diagnoses_out = r.add(
            Counter(
                "rankwatch_diagnoses_out_total",
                "diagnoses published (first versions and updates)",
                ["kind"],
                [("new",), ("update",)],
            )
        )
        self.diagnoses_skipped = r.add(
            Counter(
                "rankwatch_diagnoses_skipped_total",
                "diagnoses not published because they were already published, by reason",
                ["reason"],
                [("identical",), ("replay",), ("overlap",)],
            )
        )
        self.unacknowledged = r.add(
            Gauge(
                "rankwatch_publish_unacknowledged_records",
                "diagnoses and dead-letter copies sent but not yet acknowledged by the broker",
            )
        )
        self.held = r.add(
            Gauge(
                "rankwatch_diagnosis_updates_held",
                "updates of published diagnoses waiting for the next checkpoint",
            )
        )
        self.lag = r.add(
            Gauge(
                "rankwatch_consumer_lag_records",
                "records between the high watermark and the daemon's position",
                ["topic", "partition"],
            )
        )
        self.partitions = r.add(
            Gauge("rankwatch_partitions_assigned", "input partitions owned by this daemon")
        )
        self.rebalances = r.add(
            Counter("rankwatch_rebalances_total", "partition assignments received")
        )
        self.commits = r.add(Counter("rankwatch_commits_total", "offset commits"))
        self.jobs = r.add(Gauge("rankwatch_jobs", "jobs held by the engine"))
        self.memory = r.add(
            Gauge("rankwatch_ring_memory_bytes", "engine memory: rings, hits and snapshots")
        )
        self.memory_budget = r.add(
            Gauge("rankwatch_memory_budget_bytes", "configured engine memory budget")
        )
        self.jobs_evicted = r.add(
            Counter("rankwatch_jobs_evicted_total", "jobs evicted to stay under the budget")
        )
        self.batch_seconds = r.add(
            Histogram(
                "rankwatch_batch_duration_seconds",
                "time from a fetched batch to its diagnoses being sent",
                [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
            )
        )
        self.loops = r.add(
            Counter(
                "rankwatch_loop_iterations_total",
                "fetch-feed-poll-publish iterations (advances at least every poll_interval_ms)",
            )
        )
        self.last_batch = r.add(
            Gauge(
                "rankwatch_last_batch_timestamp_seconds",
                "wall time the last input batch was processed",
            )
        )

    def update_engine(self, stats: Mapping[str, object]) -> None:
        def num(key: str) -> float:
            v = stats.get(key, 0)
            return float(v) if isinstance(v, int | float) else 0.0

        self.lines_in.set(num("lines"))
        self.bytes_in.set(num("bytes"))
        self.incidents_open.set(num("incidents"))
        self.jobs.set(num("jobs"))
        self.memory.set(num("memory_bytes"))
        self.memory_budget.set(num("memory_budget_bytes"))
        self.jobs_evicted.set(num("jobs_evicted"))
        hits = stats.get("hits_by_signature")
        if isinstance(hits, dict):
            for sig, n in hits.items():
                self.hits.set(float(n), str(sig))

    def render(self) -> bytes:
        return self.registry.render()
