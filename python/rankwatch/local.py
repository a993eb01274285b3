"""Local analysis: the engine reads the log files that `rankwatch.inputs.discover` found (on
every core, in one call), and healthy-run logs go to its baseline, all in bounded pieces."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rankwatch._core import FeedProgress
from rankwatch.engine import Diagnosis, Engine, FedFiles, FileToFeed
from rankwatch.inputs import InputError, LogFile, classify_path, discover
from rankwatch.logread import PartialRead, line_blocks, read_chunks
from rankwatch.safe_text import printable

__all__ = [
    "AnalyzeResult",
    "InputError",
    "LogFile",
    "analyze_files",
    "classify_path",
    "discover",
    "feed_baseline",
]


@dataclass
class AnalyzeResult:
    diagnoses: list[Diagnosis]
    files: int  # files read (skipped ones not counted)
    bytes: int
    lines: int
    seconds: float
    skipped: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    stats: dict[str, object] = field(default_factory=dict)
    # Seconds reading, decoding (summed over threads), applying, waiting for the threads.
    timing: dict[str, float] = field(default_factory=dict)


# Hand-written: rich.progress draws another bar than `analyzing [###---]`, which tests read.
class Progress:
    """A one-line progress bar on stderr, shown only for large inputs on a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = max(total, 1)
        self.enabled = enabled
        self.done = 0
        self.start = time.monotonic()
        self.last = 0.0

    def advance(self, n: int) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.2:
            return
        self.last = now
        frac = min(self.done / self.total, 1.0)
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        rate = self.done / max(now - self.start, 1e-6) / 1e6
        sys.stderr.write(
            f"\ranalyzing [{bar}] {frac * 100:5.1f}%  {self.done / 1e6:,.0f}/"
            f"{self.total / 1e6:,.0f} MB  {rate:,.0f} MB/s"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 90 + "\r")
            sys.stderr.flush()


def analyze_files(
    engine: Engine,
    files: Sequence[LogFile],
    progress: bool = False,
    on_error: Callable[[str], None] | None = None,
    on_partial: Callable[[str], None] | None = None,
    threads: int = 0,
) -> AnalyzeResult:
    """Feeds every file to the engine and returns its diagnoses. The engine reads the files
    itself, on `threads` threads (0: one per core), with the same result as one by one. A
    file that cannot be read is skipped (`on_error`); a damaged gzip file is analyzed as far
    as it could be read and reported (`on_partial`). Messages are "PATH: reason", PATH
    escaped for printing."""
    t0 = time.monotonic()
    total = sum(f.size for f in files)
    bar = Progress(total, progress and total > 50_000_000)
    rows = [
        (os.fsencode(f.path), f.job, f.origin, f.source_key, f.rank, f.local_rank) for f in files
    ]
    fed = _feed_files(engine, rows, threads, bar)
    skipped: list[str] = []
    partial: list[str] = []
    for index, kind, reason in fed.problems:
        message = f"{printable(files[index].path)}: {reason}"
        if kind == "partial":
            _tell(message, partial, on_partial)
        else:
            _tell(message, skipped, on_error)
    diagnoses = engine.finish()
    stats = engine.stats()
    return AnalyzeResult(
        diagnoses=diagnoses,
        files=len(files) - len(skipped),
        bytes=fed.bytes,
        lines=int(str(stats.get("lines", 0))),
        seconds=time.monotonic() - t0,
        skipped=skipped,
        partial=partial,
        stats=stats,
        timing=fed.timing,
    )


def _feed_files(engine: Engine, rows: list[FileToFeed], threads: int, bar: Progress) -> FedFiles:
    """`engine.feed_files`; with the progress bar shown, on a thread while this one draws it
    (the call releases the GIL)."""
    if not bar.enabled:
        return engine.feed_files(rows, threads)
    counter = FeedProgress()
    result: list[FedFiles] = []
    failed: list[BaseException] = []

    def feed() -> None:
        try:
            result.append(engine.feed_files(rows, threads, counter))
        except BaseException as e:  # handed to the caller's thread below
            failed.append(e)

    worker = threading.Thread(target=feed, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.2)
        bar.advance(counter.bytes - bar.done)
    bar.close()
    if failed:
        raise failed[0]
    return result[0]


def _tell(message: str, into: list[str], callback: Callable[[str], None] | None) -> None:
    into.append(message)
    if callback is not None:
        callback(message)


def feed_baseline(
    engine: Engine,
    files: Sequence[LogFile],
    on_error: Callable[[str], None] | None = None,
) -> None:
    """Adds healthy-run files to the engine's baseline, whole lines at a time, one chunk in
    memory (a gzip bomb given as a baseline costs time, not memory)."""
    max_line = engine.config.max_line_bytes
    for f in files:
        try:
            for block in line_blocks(read_chunks(f.path), max_line):
                engine.add_baseline(block)
        except PartialRead as e:
            _tell(f"{printable(f.path)}: partially read: {e}", [], on_error)
        except OSError as e:
            _tell(f"{printable(f.path)}: {e.strerror or e}", [], on_error)


def read_log_bytes(path: Path) -> bytes:
    """A whole log file (gzip-aware), for tests and small files only."""
    return b"".join(read_chunks(path))
