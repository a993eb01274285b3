"""Local analysis: find the log files under the given paths, work out what each file is
(per-rank file, torchrun log-dir file, per-node console, mixed file, kernel log), and feed
them to the engine in large chunks."""

from __future__ import annotations

import gzip
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

from rankwatch.engine import Diagnosis, Engine

CHUNK_BYTES = 1 << 20
SKIP_SUFFIXES = {".json", ".toml", ".yaml", ".yml", ".py", ".pyc", ".so", ".png", ".jpg", ".pt"}

# Per-rank names: rank-3.log, rank_3.out, rank3.txt, Open MPI rank.3/stdout.
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)(?:\.[a-z]+)?$", re.IGNORECASE)
# torchrun --log-dir: .../attempt_<n>/<local_rank>/(stdout|stderr).log
_TORCHRUN = re.compile(r"attempt_(\d+)/(\d+)/(?:stdout|stderr)\.log$")


class InputError(Exception):
    """An input path is missing or unreadable (exit status 2)."""


@dataclass
class LogFile:
    path: Path
    job: str
    source_key: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    size: int = 0


@dataclass
class AnalyzeResult:
    diagnoses: list[Diagnosis]
    files: int
    bytes: int
    lines: int
    seconds: float
    skipped: list[str] = field(default_factory=list)
    stats: dict[str, object] = field(default_factory=dict)


def classify_path(path: Path, job: str, rank_pattern: re.Pattern[str] | None) -> LogFile:
    """Hints a file's path gives about whose lines it holds."""
    posix = path.as_posix()
    f = LogFile(path=path, job=job)
    m = _TORCHRUN.search(posix)
    if m:
        f.local_rank = int(m.group(2))
        f.source_key = str(path.parent)
        return f
    if rank_pattern is not None:
        m = rank_pattern.search(posix)
        if m:
            f.rank = int(m.group("rank"))
            f.source_key = f"rank:{f.rank}"
            return f
    # rank-3.log, or Open MPI's rank.3/stdout
    m = _RANK_NAME.search(path.name)
    if m is None and path.name in {"stdout", "stderr"}:
        m = _RANK_NAME.search(path.parent.name)
    if m is not None:
        f.rank = int(m.group(1))
        f.source_key = f"rank:{f.rank}"
    return f


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.suffix.lower() in SKIP_SUFFIXES or name.startswith("."):
                continue
            yield p


def discover(
    paths: Sequence[str | Path],
    job: str | None = None,
    rank_pattern: str | None = None,
) -> tuple[list[LogFile], list[str]]:
    """Expands PATHs into log files. Without `job`, each PATH is its own job named after it."""
    pattern = re.compile(rank_pattern) if rank_pattern else None
    if pattern is not None and "rank" not in pattern.groupindex:
        raise InputError("--rank-pattern needs a named group (?P<rank>...)")
    files: list[LogFile] = []
    skipped: list[str] = []
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise InputError(f"{p}: no such file or directory")
        if not os.access(p, os.R_OK):
            raise InputError(f"{p}: permission denied")
        name = job or (p.resolve().name if p.is_dir() else p.stem) or "job"
        candidates = [p] if p.is_file() else list(_walk(p))
        if p.is_dir() and not candidates:
            raise InputError(f"{p}: folder holds no log files")
        for c in candidates:
            try:
                size = c.stat().st_size
            except OSError as e:
                skipped.append(f"{c}: {e.strerror}")
                continue
            lf = classify_path(c, name, pattern)
            lf.size = size
            files.append(lf)
    return files, skipped


def _open(path: Path) -> IO[bytes]:
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return cast(IO[bytes], gzip.open(path, "rb"))
    return open(path, "rb")


def read_log_bytes(path: Path) -> bytes:
    """A whole log file (gzip-aware)."""
    with _open(path) as fh:
        return fh.read()


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
) -> AnalyzeResult:
    """Feeds every file to the engine and returns its diagnoses."""
    t0 = time.monotonic()
    total = sum(f.size for f in files)
    bar = Progress(total, progress and total > 50_000_000)
    skipped: list[str] = []
    fed = 0
    for f in files:
        stream = engine.open_stream(
            f.job,
            str(f.path),
            source_key=f.source_key,
            rank=f.rank,
            local_rank=f.local_rank,
        )
        try:
            with _open(f.path) as fh:
                while True:
                    chunk = fh.read(CHUNK_BYTES)
                    if not chunk:
                        break
                    engine.feed(stream, chunk)
                    fed += len(chunk)
                    bar.advance(len(chunk))
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            msg = f"{f.path}: {getattr(e, 'strerror', None) or e}"
            skipped.append(msg)
            if on_error:
                on_error(msg)
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
        stats=stats,
    )
