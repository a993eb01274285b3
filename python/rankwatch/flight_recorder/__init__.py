"""PyTorch Flight Recorder dumps as evidence.

A dump is one more producer of lines, like a kernel log: the dumps of a job are read and
checked (`reader`), analyzed across ranks per process group (`analysis`), and the result is
written as a few lines per rank (`render`) that the engine reads through its ordinary stream
API, one stream per dump with the rank as a hint and the dump's path as the origin. There the
catalog's `flight_recorder.toml` turns them into hits, so they take part in the same ranking,
report reasons and JSON as the job's log lines."""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rankwatch import _core
from rankwatch.flight_recorder.analysis import Analysis, Finding, analyze, rank_list
from rankwatch.flight_recorder.model import Dump, Entry
from rankwatch.flight_recorder.reader import (
    MAX_DUMP_BYTES,
    DumpError,
    load_dump,
    no_gc,
    sniff,
    taken_dump,
)
from rankwatch.flight_recorder.render import RankLines, render
from rankwatch.safe_text import printable

if TYPE_CHECKING:
    from rankwatch.engine import Engine

__all__ = [
    "MAX_DUMP_BYTES",
    "Analysis",
    "Dump",
    "DumpError",
    "Entry",
    "Finding",
    "FlightRecorderResult",
    "analyze",
    "feed_dumps",
    "find_dumps",
    "is_dump",
    "load_dump",
    "rank_list",
    "read_dumps",
    "render",
]

_GLOB_CHARS = frozenset("*?[")


def is_dump(path: Path) -> bool:
    """Whether a file is a Flight Recorder dump, by its content: a pickle whose first bytes
    name the dump's keys, or a JSON object that does (only the first 64 KiB are read, and
    only when the first byte says pickle or JSON)."""
    try:
        with open(path, "rb") as f:
            first = f.read(1)
            if first not in (b"\x80", b"{", b" ", b"\n", b"\t", b"\r"):
                return False
            return sniff(first + f.read(64 << 10)) is not None
    except OSError:
        return False


def find_dumps(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """The dump files that PATHs (files, folders searched recursively, glob patterns) stand
    for, and "PATH: reason" for what could not be used. A file named directly must be a
    dump; in a folder, files that are not dumps are passed over silently."""
    found: list[Path] = []
    problems: list[str] = []
    seen: set[str] = set()

    def add(p: Path) -> None:
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            found.append(p)

    for raw in paths:
        text = str(raw)
        p = Path(text)
        if not os.path.lexists(p) and _GLOB_CHARS & set(text):
            matches = sorted(glob.glob(text, recursive=True))
            if not matches:
                problems.append(f"{printable(text)}: no file matches this pattern")
            for m in matches:
                mp = Path(m)
                if mp.is_dir():
                    found_in, probs = _walk_dumps(mp)
                    problems.extend(probs)
                    for f in found_in:
                        add(f)
                elif is_dump(mp):
                    add(mp)
            continue
        try:
            st = os.stat(p)
        except OSError as e:
            problems.append(f"{printable(p)}: {e.strerror or e}")
            continue
        if stat.S_ISDIR(st.st_mode):
            found_in, probs = _walk_dumps(p)
            problems.extend(probs)
            for f in found_in:
                add(f)
        elif stat.S_ISREG(st.st_mode):
            add(p)  # named directly: load_dump says why, if it is not one
        else:
            problems.append(f"{printable(p)}: not a regular file")
    return found, problems


def _walk_dumps(top: Path) -> tuple[list[Path], list[str]]:
    out: list[Path] = []
    problems: list[str] = []
    for folder, dirs, files in os.walk(
        top,
        onerror=lambda e: problems.append(
            f"{printable(e.filename)}: folder not read: {e.strerror}"
        ),
    ):
        dirs.sort()
        for name in sorted(files):
            if name.startswith("."):
                continue
            p = Path(folder) / name
            try:
                if not stat.S_ISREG(os.lstat(p).st_mode):
                    continue
            except OSError:
                continue
            if is_dump(p):
                out.append(p)
    return out, problems


@dataclass
class FlightRecorderResult:
    """What reading and analyzing a job's dumps gave."""

    dumps: list[Dump]
    analysis: Analysis | None
    problems: list[str] = field(default_factory=list)  # "PATH: reason", dumps not used
    notes: list[str] = field(default_factory=list)  # "PATH: N entries skipped: ..."
    lines: int = 0  # lines fed to the engine


# What one checked entry is charged against the memory budget. Measured when entries were
# Python tuples (1,024 dumps of 2,000 entries took about 1.6 GB); kept in Rust, packed, they
# take 104 bytes and their share of the values they refer to, so the charge is conservative,
# and left as it was.
BYTES_PER_ENTRY = 800
MIN_ENTRIES_KEPT = 64
# Threads that read, decode and check dumps at once (in Rust, without the GIL).
READER_THREADS = min(4, os.cpu_count() or 1)


def read_dumps(
    paths: Sequence[Path],
    max_bytes: int = MAX_DUMP_BYTES,
    on_problem: Callable[[str], None] | None = None,
    memory_bytes: int | None = None,
) -> tuple[list[Dump], list[str], list[str]]:
    """Loads every dump; returns the dumps, the problems ("PATH: reason", each dump not
    used) and notes (dumps used with some entries left out). With `memory_bytes`, each dump
    keeps only its newest entries, as many as its share of that budget holds (never fewer
    than 64): a stuck job is decided at its last collectives. Dumps are read by a few
    threads at once (decoding and checking run without the GIL), so one decoded dump per
    thread is held besides (at most `max_bytes` of file each)."""
    dumps: list[Dump] = []
    problems: list[str] = []
    notes: list[str] = []
    keep = None
    if memory_bytes is not None and paths:
        keep = max(MIN_ENTRIES_KEPT, memory_bytes // BYTES_PER_ENTRY // len(paths))

    def load(p: Path) -> Dump | DumpError:
        try:
            return load_dump(p, max_bytes, keep_last=keep)
        except DumpError as e:
            return e

    with no_gc():  # millions of entries and no cycles: the collector would only rescan them
        # clean pickled dumps are read, decoded and checked in Rust on a few threads; what it
        # leaves (JSON, anything odd or hostile) is read here, where the reason is given
        fast = _core.fr_read_files(list(paths), keep, max_bytes, READER_THREADS)
        for p, got in zip(paths, fast, strict=True):
            loaded: Dump | DumpError
            if got is None:
                loaded = load(p)
            else:
                try:
                    loaded = taken_dump(got, p)
                except DumpError as e:
                    loaded = e
            _take_one(p, loaded, dumps, problems, notes, on_problem)
    dropped = [d for d in dumps if d.dropped_entries]
    if dropped:
        notes.append(
            f"{len(dropped)} dump(s) hold more entries than the memory budget keeps: the "
            f"newest {keep:,} of each were analyzed"
        )
    ranks: dict[int, Dump] = {}
    for d in dumps:
        if d.rank in ranks:
            notes.append(
                f"{printable(d.path)}: rank {d.rank} also dumped to "
                f"{printable(ranks[d.rank].path)}; the later file is used"
            )
        ranks[d.rank] = d
    return dumps, problems, notes


def _take_one(
    p: Path,
    got: Dump | DumpError,
    dumps: list[Dump],
    problems: list[str],
    notes: list[str],
    on_problem: Callable[[str], None] | None,
) -> None:
    if isinstance(got, DumpError):
        message = f"{printable(p)}: {got}"
        problems.append(message)
        if on_problem is not None:
            on_problem(message)
        return
    if got.skipped_entries:
        notes.append(
            f"{printable(p)}: {got.skipped_entries} entries left out "
            f"({'; '.join(got.entry_problems)})"
        )
    dumps.append(got)


def feed_dumps(
    engine: Engine,
    job: str,
    dumps: Sequence[Dump],
    missing_origin: str,
) -> tuple[Analysis, int]:
    """Analyzes the job's dumps and feeds the resulting lines to the engine: one stream per
    rank, its dump's path as the origin (`missing_origin` for a rank that wrote none).
    Returns the analysis and the number of lines fed."""
    with no_gc():
        analysis = analyze(dumps)
        per_rank = render(analysis)
    origin_of = {d.rank: printable(d.path, limit=None) for d in dumps}
    lines = 0
    for rank in sorted(per_rank):
        rl: RankLines = per_rank[rank]
        origin = origin_of.get(rank, f"{missing_origin} (no dump of rank {rank})")
        stream = engine.open_stream(job, origin, source_key=f"rank:{rank}", rank=rank)
        data = rl.text()
        engine.feed(stream, data)
        engine.close_stream(stream)
        lines += len(rl.lines)
    return analysis, lines
