"""Local analysis: feed the log files that `rankwatch.inputs.discover` found to the engine in
large chunks, and healthy-run logs to its baseline, all streamed in bounded pieces."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rankwatch.engine import Diagnosis, Engine
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
    files: int
    bytes: int
    lines: int
    seconds: float
    skipped: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    stats: dict[str, object] = field(default_factory=dict)


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
) -> AnalyzeResult:
    """Feeds every file to the engine and returns its diagnoses. A file that cannot be read
    is skipped (`on_error`); a damaged gzip file is analyzed as far as it could be read and
    reported (`on_partial`). Messages are "PATH: reason", PATH escaped for printing."""
    t0 = time.monotonic()
    total = sum(f.size for f in files)
    bar = Progress(total, progress and total > 50_000_000)
    skipped: list[str] = []
    partial: list[str] = []
    fed = 0
    for f in files:
        stream = engine.open_stream(
            f.job,
            f.origin,
            source_key=f.source_key,
            rank=f.rank,
            local_rank=f.local_rank,
        )
        try:
            for chunk in read_chunks(f.path):
                engine.feed(stream, chunk)
                fed += len(chunk)
                bar.advance(len(chunk))
        except PartialRead as e:
            _tell(f"{printable(f.path)}: {e}", partial, on_partial)
        except OSError as e:
            _tell(f"{printable(f.path)}: {e.strerror or e}", skipped, on_error)
        finally:
            engine.close_stream(stream)
    bar.close()
    diagnoses = engine.finish()
    stats = engine.stats()
    return AnalyzeResult(
        diagnoses=diagnoses,
        files=len(files),
        bytes=fed,
        lines=int(str(stats.get("lines", 0))),
        seconds=time.monotonic() - t0,
        skipped=skipped,
        partial=partial,
        stats=stats,
    )


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
