"""The typed Python face of the Rust engine."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

import orjson

from rankwatch import _core
from rankwatch.catalog_loader import Catalog

Diagnosis = dict[str, Any]
# A file for `Engine.feed_files`: path (bytes), job, origin, source key, rank, local rank.
FileToFeed = tuple[bytes, str, str, str | None, int | None, int | None]


def _this_year() -> int:
    return _dt.datetime.now(_dt.UTC).year


@dataclass(frozen=True)
class EngineConfig:
    """Engine limits and windows. Units are in the names."""

    ring_lines: int = 256
    ring_bytes: int = 64 * 1024
    memory_budget_bytes: int = 1 << 30
    settle_ms: int = 5_000
    incident_horizon_ms: int = 20 * 60_000
    max_wait_ms: int = 30_000
    max_line_bytes: int = 16 * 1024
    preceding_lines: int = 100
    max_hits_per_job: int = 200_000
    clock_uncertainty_ms: int = 1_500
    release_quiet_ms: int = 60 * 60_000
    max_sources_per_job: int = 100_000
    max_ts_ahead_ms: int = 60_000
    ras_report_bytes: int = 16 << 20  # an NCCL RAS report is read whole up to this size
    default_year: int = field(default_factory=_this_year)

    def to_json(self) -> str:
        return orjson.dumps(dataclasses.asdict(self)).decode()


RECORD_FORMATS = tuple(_core.Decoder.formats())
REJECT_REASONS = tuple(_core.Decoder.reject_reasons())
# How a record key names the job: the whole key, or `job/rank` with a numeric rank after the
# last `/`. Whole is the default because job names such as `sweep/2` or the Slurm array job
# `1234/7` end like a rank; only a producer that promises the convention gets it.
KEY_FORMATS = ("job", "job/rank")


@dataclass(frozen=True)
class FedFiles:
    """What `Engine.feed_files` did: bytes fed; for each file not read to the end, (index,
    "unreadable" or "partial", reason); seconds spent reading, decoding (summed over the
    threads), applying and waiting for the threads."""

    bytes: int
    problems: list[tuple[int, str, str]]
    timing: dict[str, float]


@dataclass(frozen=True)
class FedRecords:
    """What `Engine.feed_consumer_records` did with a partition batch: (index, reason) of
    each rejected record, the distinct record keys, and the distinct values of the job header
    among records that have headers (None: headers, but not that one)."""

    rejected: list[tuple[int, str]]
    keys: set[bytes | None]
    headers: set[bytes | None]


class Decoder:
    """How to read record values of one topic: a format preset and optional field paths.
    The record key names the job (`key_format="job"`) or the job and rank (`"job/rank"`).

    Paths are lists of keys (`["kubernetes", "labels", "training.kubeflow.org/job-name"]`).
    `in_order=False` says a source's records may arrive out of the order its lines were
    written (spread over partitions and merged again): a line that prints no time is then
    placed by its record's time rather than after its process's last printed line."""

    def __init__(
        self,
        format: str = "canonical",
        *,
        job_path: list[str] | None = None,
        rank_path: list[str] | None = None,
        host_path: list[str] | None = None,
        ts_path: list[str] | None = None,
        line_path: list[str] | None = None,
        source_path: list[str] | None = None,
        job_header: str = "job",
        max_record_bytes: int = 1 << 20,
        key_format: str = "job",
        in_order: bool = True,
    ) -> None:
        if format not in RECORD_FORMATS:
            raise ValueError(
                f"unknown record format {format!r}; one of {', '.join(RECORD_FORMATS)}"
            )
        if key_format not in KEY_FORMATS:
            raise ValueError(f"unknown key format {key_format!r}; one of {', '.join(KEY_FORMATS)}")
        spec: dict[str, Any] = {
            "format": format,
            "job_header": job_header,
            "max_record_bytes": max_record_bytes,
            "key_format": key_format,
            "in_order": in_order,
        }
        for name, value in (
            ("job_path", job_path),
            ("rank_path", rank_path),
            ("host_path", host_path),
            ("ts_path", ts_path),
            ("line_path", line_path),
            ("source_path", source_path),
        ):
            if value is not None:
                spec[name] = list(value)
        self.format = format
        self.key_format = key_format
        self._core = _core.Decoder(orjson.dumps(spec).decode())

    def jobs(
        self, values: list[bytes], keys: list[bytes | None], headers: list[bytes | None]
    ) -> list[bytes | None]:
        """The job of each record exactly as `Engine.feed_records` decodes it (UTF-8), or
        None where it would reject the record. Parallel lists as `feed_records` takes them."""
        return self._core.jobs(values, keys, headers)


class Engine:
    """Streams of log bytes in, diagnoses out. One Rust call per chunk, GIL released."""

    def __init__(self, catalog: Catalog | None = None, config: EngineConfig | None = None) -> None:
        self.catalog = catalog if catalog is not None else Catalog()
        self.config = config or EngineConfig()
        self._core = _core.Engine(self.catalog._core, self.config.to_json())

    def open_stream(
        self,
        job: str,
        origin: str,
        *,
        source_key: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        host: str | None = None,
    ) -> int:
        """Declares a stream of lines (a file, a record source) and what is known about it."""
        return self._core.open_stream(job, origin, source_key, rank, local_rank, host)

    def feed(self, stream: int, data: bytes, ingest_ms: int | None = None) -> None:
        self._core.feed(stream, data, ingest_ms)

    def feed_records(
        self,
        decoder: Decoder,
        origin: str,
        values: list[bytes],
        keys: list[bytes | None],
        headers: list[bytes | None],
        timestamps: list[int | None],
    ) -> list[tuple[int, str]]:
        """Decodes and feeds a batch of Kafka records in one call (GIL released).

        The lists are parallel: value, key, job header value, broker timestamp in ms.
        Returns (index, reason) for every record that was rejected."""
        return self._core.feed_records(decoder._core, origin, values, keys, headers, timestamps)

    def feed_files(
        self,
        files: list[FileToFeed],
        threads: int = 0,
        progress: _core.FeedProgress | None = None,
    ) -> FedFiles:
        """Reads (gzip too), decodes and feeds whole files in one call, GIL released:
        decoding and scanning on `threads` threads (0: one per core), lines applied in file
        order, so the result is the same as feeding them one by one. Each file is (path as
        bytes, job, origin, source key, rank, local rank)."""
        fed, problems, timing = self._core.feed_files(files, threads, progress)
        return FedFiles(fed, problems, dict(timing))

    def feed_consumer_records(
        self, decoder: Decoder, origin: str, records: list[Any], job_header: str
    ) -> FedRecords:
        """`feed_records` for a partition batch of aiokafka `ConsumerRecord`s: value (None
        is empty), key, timestamp and the first `job_header` header are read in Rust, which
        also collects the distinct keys and job-header values (so the caller need not walk
        the records)."""
        rejected, keys, headers = self._core.feed_consumer_records(
            decoder._core, origin, records, job_header
        )
        return FedRecords(rejected, set(keys), set(headers))

    def close_stream(self, stream: int) -> None:
        self._core.close_stream(stream)

    def poll(self, now_ms: int) -> list[Diagnosis]:
        """Diagnoses that became ready (or changed) since the last poll."""
        result: list[Diagnosis] = orjson.loads(self._core.poll(now_ms))
        return result

    def poll_encoded(
        self, now_ms: int, max_bytes: int = 0, hold: bool = False
    ) -> _core.EncodedDiagnoses:
        """`poll`, each diagnosis as its own JSON document, handed out one at a time (the
        documents not yet handed out stay in Rust: `waiting_bytes`). With `max_bytes` (0: no
        bound) the poll stops once its documents reach that size (at least one job's); the
        rest come, in order, from the next call (`more`). With `hold`, an open incident
        diagnosed within the last settle window of wall time is not diagnosed again yet (a
        storm of ranks would have it rebuilt on every poll); a poll without `hold` diagnoses
        it with everything fed so far."""
        return self._core.poll_each(now_ms, max_bytes, hold)

    def finish(self) -> list[Diagnosis]:
        """Ends the input and returns a diagnosis for every incident, most likely first."""
        result: list[Diagnosis] = orjson.loads(self._core.finish())
        result.sort(key=_most_likely_first)
        return result

    def add_baseline(self, data: bytes) -> None:
        """Adds log bytes of a healthy run; diagnoses then name the first line of the failing
        process that the healthy run never printed (`baseline_diff`)."""
        self._core.add_baseline(data)

    def jobs(self) -> list[str]:
        """Names of the jobs the engine holds state for."""
        return self._core.jobs()

    def drop_job(self, job: str) -> None:
        self._core.drop_job(job)

    def stats(self, breakdown: bool = True) -> dict[str, Any]:
        """The engine's counters. `memory_bytes` is kept as the engine goes; `breakdown` also
        counts it from scratch by part (`memory_breakdown`), a walk over every job's hits and
        lines: leave it out where stats are taken on every batch."""
        result: dict[str, Any] = orjson.loads(self._core.stats_json(breakdown))
        return result


def _most_likely_first(d: Diagnosis) -> tuple[float, float, bool, str, str]:
    """Higher confidence first; between equals the stronger evidence (the best suspect's
    score), then the earlier incident (one without a time last), then the id, so that the
    order never hangs on the ids' hashes alone."""
    suspects = d.get("suspects") or []
    best = max((float(s.get("score", 0.0)) for s in suspects), default=0.0)
    incident = d.get("incident") or {}
    start = incident.get("start")
    return (
        -float(d.get("confidence", 0.0)),
        -best,
        start is None,
        str(start or ""),
        str(d.get("id", "")),
    )
