"""Finding the log files under the PATHs a user gives, and what each file's path says about
whose lines it holds (rank, torchrun local rank, job).

Real folders are messy: only regular files are read (a FIFO or a link to `/dev/zero` would
block or never end), links that lead out of the given folder are not followed, a folder that
cannot be listed is reported, the same file reached twice is read once, and two PATHs with
the same folder name become two jobs (`logs`, `logs-2`) rather than one merged job."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rankwatch.flight_recorder import is_dump
from rankwatch.safe_text import printable

SKIP_SUFFIXES = {".json", ".toml", ".yaml", ".yml", ".py", ".pyc", ".so", ".png", ".jpg", ".pt"}
# The head of an `ncclras -f json` report (NCCL 2.28.7+): `{`, then its first keys.
_RAS_JSON_HEAD = re.compile(
    rb'^\s*\{\s*"nccl_version"\s*:\s*"[^"]*"\s*,.*?"communicators', re.DOTALL
)
# The first event of `ncclras -m -f json` (NCCL 2.29.2+), after the banner the client prints
# on stderr where that was captured too.
_RAS_MONITOR_JSON_HEAD = re.compile(
    rb'^(?:RAS Monitor Mode[^\n]*\n=*\n)?\s*\{\s*"timestamp"\s*:\s*"[^"]*"\s*,'
    rb'\s*"group"\s*:\s*"(?:LIFECYCLE|TRACE)"\s*,\s*"event"\s*:\s*"PEER_'
)


def is_ras_json(path: Path) -> bool:
    """Whether a file is an `ncclras -f json` report, by its content: a JSON object whose
    first key is `nccl_version` and which lists `communicators`, or the events of
    `ncclras -m -f json` (only the first 4 KiB are read). Such a file is read as a log: the
    engine's RAS rule reads the report or the events."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return _RAS_JSON_HEAD.match(head) is not None or _RAS_MONITOR_JSON_HEAD.match(head) is not None


# Per-rank names: rank-3.log, rank_3.out, rank3.txt, rank-3.log.gz, Open MPI rank.3/stdout.
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[-_.]?(\d+)(?:\.[a-z]+){0,2}$", re.IGNORECASE)
# torchrun --log-dir: .../attempt_<n>/<local_rank>/(stdout|stderr).log
_TORCHRUN = re.compile(r"attempt_(\d+)/(\d+)/(?:stdout|stderr)\.log$")
MAX_RANK = (1 << 32) - 1
MAX_LOCAL_RANK = (1 << 16) - 1


class InputError(Exception):
    """An input path is missing, unreadable or holds nothing to read (exit status 2)."""

    def __init__(self, message: str, skipped: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.skipped = list(skipped)


@dataclass(slots=True)
class LogFile:
    path: Path
    job: str
    source_key: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    size: int = 0

    @property
    def origin(self) -> str:
        """The file's name as the engine and reports show it (escaped, never cut)."""
        return printable(self.path, limit=None)


@dataclass
class DumpFile:
    """A Flight Recorder dump found among a job's files (by content, not by name)."""

    path: Path
    job: str


@dataclass
class _Found:
    """What discovery has gathered so far."""

    files: list[LogFile] = field(default_factory=list)
    dumps: list[DumpFile] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seen_roots: set[Path] = field(default_factory=set)
    seen_files: set[str] = field(default_factory=set)
    jobs: dict[str, Path] = field(default_factory=dict)

    def skip(self, path: Path | str, why: str) -> None:
        self.skipped.append(f"{printable(path)}: {why}")


def _number(text: str | None, maximum: int) -> int | None:
    if text is None or not text.isascii() or not text.isdigit():
        return None
    value = int(text)
    return value if value <= maximum else None


def classify_path(path: Path, job: str, rank_pattern: re.Pattern[str] | None) -> LogFile:
    """Hints a file's path gives about whose lines it holds."""
    posix = path.as_posix()
    f = LogFile(path=path, job=job)
    m = _TORCHRUN.search(posix)
    if m and (local := _number(m.group(2), MAX_LOCAL_RANK)) is not None:
        f.local_rank = local
        f.source_key = printable(path.parent, limit=None)
        return f
    if rank_pattern is not None:
        m = rank_pattern.search(posix)
        value = m.group("rank") if m else None
        if value is not None:  # (an optional group that took no part falls through)
            f.rank = _number(value, MAX_RANK)
            if f.rank is None:
                raise InputError(
                    f"--rank-pattern matched {printable(path)} but its rank group captured "
                    f"{value!r}, not a rank number"
                )
            f.source_key = f"rank:{f.rank}"
            return f
    # rank-3.log, or Open MPI's rank.3/stdout
    m = _RANK_NAME.search(path.name)
    if m is None and path.name in {"stdout", "stderr"}:
        m = _RANK_NAME.search(path.parent.name)
    if m is not None:
        f.rank = _number(m.group(1), MAX_RANK)
        if f.rank is not None:
            f.source_key = f"rank:{f.rank}"
    return f


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def _real(path: Path) -> Path | None:
    """Where `path` leads, links followed; None for a link loop."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):  # Python 3.11 reports a loop as RuntimeError
        return None


def _is_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True, slots=True)
class _Candidate:
    """A file to read: its path as found, its size, and where it really is (links followed),
    so that a file reached through two PATHs is read once."""

    path: Path
    size: int
    real: str


def _entry_file(
    entry: os.DirEntry[str], folder_real: str, root: Path, found: _Found
) -> _Candidate | None:
    """A directory entry that is a file to read; None (reported when it is not an ordinary
    omission) otherwise. `folder_real` is where the entry's folder really is: an entry that
    is not a link is there under its own name, so only links need resolving (resolving
    every file cost most of the time to list a 2,000-file folder)."""
    path = Path(entry.path)
    real = os.path.join(folder_real, entry.name)
    if entry.is_symlink():
        target = _real(path)
        if target is None:
            found.skip(path, "link loop")
            return None
        if not _is_inside(target, root):
            found.skip(path, f"link to {printable(target)}, outside {printable(root)}")
            return None
        real = str(target)
    try:
        st = entry.stat()
    except OSError as e:
        found.skip(path, _why(e))
        return None
    if stat.S_ISDIR(st.st_mode):
        return None  # a linked folder inside the root: its files are read where they are
    if path.suffix.lower() in SKIP_SUFFIXES and not (
        path.suffix.lower() == ".json"
        and (is_dump(path) or is_ras_json(path))  # a Flight Recorder dump, an ncclras report
    ):
        return None
    if not stat.S_ISREG(st.st_mode):
        found.skip(path, "not a regular file")
        return None
    return _Candidate(path, st.st_size, real)


def _walk(top: Path, found: _Found) -> Iterator[_Candidate]:
    """Regular files under `top`, folder by folder in name order, without recursion (a tree
    a thousand folders deep must not exhaust the stack) and without following links out."""
    root = _real(top) or top
    stack = [(str(top), str(root))]
    while stack:
        folder, folder_real = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as e:
            found.skip(folder, f"folder not read: {_why(e)}")
            continue
        subfolders = []
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    subfolders.append((entry.path, os.path.join(folder_real, entry.name)))
                    continue
            except OSError as e:
                found.skip(entry.path, _why(e))
                continue
            if entry.name.startswith("."):
                continue
            hit = _entry_file(entry, folder_real, root, found)
            if hit is not None:
                yield hit
        stack.extend(reversed(subfolders))


def _job_name(p: Path, is_dir: bool, job: str | None, found: _Found) -> tuple[str, str | None]:
    """The job of PATH `p`, and a note when its natural name was already taken."""
    if job is not None:
        return job, None
    base = printable(((_real(p) or p).name if is_dir else p.stem) or "job")
    name, n = base, 1
    while name in found.jobs:
        n += 1
        name = f"{base}-{n}"
    found.jobs[name] = p
    if name == base:
        return name, None
    return name, (
        f"{printable(p)} is job {name}: job {base} is {printable(found.jobs[base])} "
        "(use --job to merge them)"
    )


def _candidates(p: Path, found: _Found) -> tuple[list[_Candidate], bool] | None:
    """The files one PATH stands for and whether it is a folder; None if it holds nothing."""
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{printable(p)}: no such file or directory", found.skipped) from None
    except OSError as e:
        raise InputError(f"{printable(p)}: {_why(e)}", found.skipped) from None
    if stat.S_ISDIR(st.st_mode):
        if not os.access(p, os.R_OK | os.X_OK):
            raise InputError(f"{printable(p)}: permission denied", found.skipped)
        return list(_walk(p, found)), True
    if not stat.S_ISREG(st.st_mode):
        found.skip(p, "not a regular file")
        return None
    if not os.access(p, os.R_OK):
        raise InputError(f"{printable(p)}: permission denied", found.skipped)
    return [_Candidate(p, st.st_size, str(_real(p) or p))], False


def discover(
    paths: Sequence[str | Path],
    job: str | None = None,
    rank_pattern: str | None = None,
    note: Callable[[str], None] | None = None,
    dumps: list[DumpFile] | None = None,
) -> tuple[list[LogFile], list[str]]:
    """Expands PATHs into log files and the list of what was skipped and why. Without `job`,
    each PATH is its own job named after it; `note` hears about renamed jobs and repeats.
    Flight Recorder dumps among the files are never read as logs: with `dumps` given they
    are added to it (with their job), and a PATH that holds only dumps is not an error."""
    pattern = _compile_rank_pattern(rank_pattern)
    if job is not None and not job.strip():
        raise InputError("--job must not be empty")
    tell = note or (lambda _: None)
    found = _Found()
    for raw in paths:
        if not str(raw):
            raise InputError("an empty PATH ('') names no file; use . for this folder")
        p = Path(raw)
        real = _real(p)
        if real is not None and real in found.seen_roots:
            tell(f"{printable(p)} was given twice; read once")
            continue
        found.seen_roots.add(real or p)
        listed = _candidates(p, found)
        if listed is None:
            continue
        candidates, is_dir = listed
        if is_dir and not candidates:
            raise InputError(f"{printable(p)}: folder holds no log files", found.skipped)
        logs_before, dumps_before = len(found.files), len(found.dumps)
        _add_files(p, candidates, is_dir, job, pattern, found, tell)
        only_dumps = len(found.files) == logs_before and len(found.dumps) > dumps_before
        if is_dir and only_dumps and dumps is None:
            raise InputError(
                f"{printable(p)}: folder holds Flight Recorder dumps but no log files",
                found.skipped,
            )
    if dumps is not None:
        dumps.extend(found.dumps)
    if not found.files and not found.dumps:
        raise InputError("no log files to read", found.skipped)
    if pattern is not None and not any(pattern.search(f.path.as_posix()) for f in found.files):
        raise InputError(f"--rank-pattern {pattern.pattern!r} matches no input file's path")
    return found.files, found.skipped


def _add_files(
    p: Path,
    candidates: list[_Candidate],
    is_dir: bool,
    job: str | None,
    pattern: re.Pattern[str] | None,
    found: _Found,
    tell: Callable[[str], None],
) -> None:
    name, renamed = _job_name(p, is_dir, printable(job) if job is not None else None, found)
    if renamed:
        tell(renamed)
    repeats = 0
    for c in candidates:
        if c.real in found.seen_files:
            repeats += 1
            continue
        found.seen_files.add(c.real)
        if is_dump(c.path):
            found.dumps.append(DumpFile(c.path, name))
            continue
        lf = classify_path(c.path, name, pattern)
        lf.size = c.size
        found.files.append(lf)
    if repeats:
        tell(f"{printable(p)}: {repeats} file(s) already read through another PATH; read once")


def _compile_rank_pattern(text: str | None) -> re.Pattern[str] | None:
    if not text:
        return None
    try:
        pattern = re.compile(text)
    except re.error as e:
        raise InputError(f"--rank-pattern {text!r} is not a valid regex: {e}") from None
    if "rank" not in pattern.groupindex:
        raise InputError("--rank-pattern needs a named group (?P<rank>...)")
    return pattern
