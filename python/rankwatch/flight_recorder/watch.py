"""Flight Recorder dumps for the daemon: a folder that training jobs dump into (a
Kubernetes volume, a Lustre path) is scanned for dumps, each matched to its job by its path,
and a job's dumps are read once they stopped changing.

The job of a dump is the first folder under the watched one (`DIR/llm7b/nccl_trace_rank_3`,
`DIR/llm7b/attempt_0/...`), or for a dump directly in it, its name without the rank and
torch's default file name (`llm7b-nccl_trace_rank_3`, `llm7b_rank3.json` -> `llm7b`).

`scan()` is cheap to call often: it lists the folder (stat only), and returns the jobs whose
set of dumps changed and then stayed the same for `quiet_ms` (torch writes the dumps of all
ranks within moments of each other; reading them before the last one lands would analyze an
incomplete set). A job whose dumps change again later is returned again; `Fed` keeps which
lines a job was already given, so only new ones are fed."""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rankwatch.flight_recorder import is_dump

_DEFAULT_NAMES = re.compile(
    r"[-_.]*(?:nccl_trace_rank_|fr_trace_rank_|fr_trace_|nccl_trace_|fr_rank_|rank[-_]?)?"
    r"\d+(?:\.(?:json|pkl|pickle|bin))?$",
    re.IGNORECASE,
)
MAX_FILES = 100_000  # files looked at per scan; more are left for later scans


def job_of(root: Path, path: Path) -> str | None:
    """The job a dump under `root` belongs to (see the module doc); None if it names none."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return None
    if len(rel.parts) > 1:
        return rel.parts[0]
    name = _DEFAULT_NAMES.sub("", rel.name)
    return name or None


@dataclass
class _Seen:
    signature: tuple[tuple[str, int, int], ...]
    since: float
    fed: bool = False


@dataclass
class DumpWatcher:
    root: Path
    quiet_ms: int = 5_000
    _jobs: dict[str, _Seen] = field(default_factory=dict)
    _known: dict[str, tuple[int, int, bool]] = field(default_factory=dict)  # path -> dump?
    unmatched: int = 0  # dumps whose path names no job (counted, left alone)

    def _files(self) -> Iterator[Path]:
        count = 0
        for folder, dirs, files in os.walk(self.root):
            dirs.sort()
            for name in sorted(files):
                if name.startswith("."):
                    continue
                count += 1
                if count > MAX_FILES:
                    return
                yield Path(folder) / name

    def _dumps(self) -> dict[str, list[tuple[Path, int, int]]]:
        by_job: dict[str, list[tuple[Path, int, int]]] = {}
        unmatched = 0
        seen: set[str] = set()
        for p in self._files():
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            key = str(p)
            seen.add(key)
            known = self._known.get(key)
            if known is not None and known[:2] == (st.st_size, st.st_mtime_ns):
                dump = known[2]
            else:
                dump = is_dump(p)
                self._known[key] = (st.st_size, st.st_mtime_ns, dump)
            if not dump:
                continue
            job = job_of(self.root, p)
            if job is None:
                unmatched += 1
                continue
            by_job.setdefault(job, []).append((p, st.st_size, st.st_mtime_ns))
        for key in [k for k in self._known if k not in seen]:
            del self._known[key]
        self.unmatched = unmatched
        return by_job

    def scan(self, now: float | None = None) -> list[tuple[str, list[Path]]]:
        """Jobs whose dumps are ready to read: changed since they were last returned, and
        unchanged for `quiet_ms` since."""
        now = time.monotonic() if now is None else now
        ready: list[tuple[str, list[Path]]] = []
        current = self._dumps()
        for job, files in sorted(current.items()):
            sig = tuple(sorted((str(p), size, mtime) for p, size, mtime in files))
            seen = self._jobs.get(job)
            if seen is None or seen.signature != sig:
                self._jobs[job] = _Seen(sig, now)
                continue
            if not seen.fed and (now - seen.since) * 1000 >= self.quiet_ms:
                seen.fed = True
                ready.append((job, [p for p, _, _ in sorted(files)]))
        for job in [j for j in self._jobs if j not in current]:
            del self._jobs[job]
        return ready


@dataclass
class Fed:
    """Lines already fed per job, so that a job whose dumps changed gets only new lines."""

    max_jobs: int = 10_000
    lines: dict[str, set[str]] = field(default_factory=dict)

    def new(self, job: str, lines: list[str]) -> list[str]:
        known = self.lines.setdefault(job, set())
        fresh = [ln for ln in lines if ln not in known]
        known.update(fresh)
        while len(self.lines) > self.max_jobs:
            del self.lines[next(iter(self.lines))]
        return fresh
