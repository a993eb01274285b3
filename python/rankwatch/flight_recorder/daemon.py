"""`rankwatch run --flight-recorder-dir DIR`: dumps written into DIR are read once a job's
set of dumps stopped changing (watch.py), analyzed, and their lines fed into the job's state
in the daemon's engine, where they join the job's log lines from Kafka in one diagnosis.

The folder is scanned every `flight_recorder_poll_ms`; when the `watchfiles` package is
installed, a change wakes the scan at once (inotify), else polling alone finds it. Reading
and analysis run on a worker thread; only the feed holds the daemon's loop lock."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from rankwatch.flight_recorder import analyze, read_dumps, render
from rankwatch.flight_recorder.watch import DumpWatcher, Fed
from rankwatch.safe_text import printable

log = logging.getLogger("rankwatch.daemon.flight_recorder")

Streams = list[tuple[int, str, bytes]]
FeedFn = Callable[[str, Sequence[tuple[int, str, bytes]]], Awaitable[None]]


def prepare(
    job: str, paths: list[Path], max_bytes: int, fed: Fed, memory_bytes: int | None = None
) -> tuple[Streams, int, int]:
    """Reads and analyzes one job's dumps; returns the streams of lines not fed before, the
    number of dumps read and of dumps skipped (each logged with its reason)."""
    dumps, problems, notes = read_dumps(paths, max_bytes, memory_bytes=memory_bytes)
    for m in problems:
        log.warning("job %s: skipped Flight Recorder dump %s", printable(job), m)
    for m in notes:
        log.info("job %s: %s", printable(job), m)
    if not dumps:
        return [], 0, len(problems)
    origin_of = {d.rank: printable(d.path, limit=None) for d in dumps}
    folder = printable(paths[0].parent, limit=None)
    streams: Streams = []
    for rank, rl in sorted(render(analyze(dumps)).items()):
        ordered = rl.text().decode().splitlines()
        fresh = fed.new(job, [f"{rank}\0{ln}" for ln in ordered])
        if not fresh:
            continue
        data = "".join(ln.split("\0", 1)[1] + "\n" for ln in fresh).encode()
        origin = origin_of.get(rank, f"{folder} (no dump of rank {rank})")
        streams.append((rank, origin, data))
    return streams, len(dumps), len(problems)


class FlightRecorderFeed:
    def __init__(
        self,
        root: str,
        poll_ms: int,
        quiet_ms: int,
        max_bytes: int,
        registry: CollectorRegistry,
        memory_bytes: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.memory_bytes = memory_bytes
        self.poll_s = poll_ms / 1000
        self.max_bytes = max_bytes
        self.watcher = DumpWatcher(self.root, quiet_ms)
        self.fed = Fed()
        self.dumps = Counter(
            "rankwatch_flight_recorder_dumps",
            "Flight Recorder dumps read from flight_recorder_dir, by result",
            ["result"],
            registry=registry,
        )
        self.lines = Counter(
            "rankwatch_flight_recorder_lines",
            "lines the Flight Recorder analysis fed into jobs",
            registry=registry,
        )
        self.wake = asyncio.Event()

    async def run(self, feed: FeedFn) -> None:
        """Scans until cancelled; `feed(job, streams)` hands a job's new lines to the engine."""
        if not self.root.is_dir():
            log.warning("flight_recorder_dir %s is not a folder (yet)", printable(self.root))
        log.info("watching %s for Flight Recorder dumps", printable(self.root))
        waker = asyncio.create_task(self._inotify())
        try:
            while True:
                await self.step(feed)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.poll_s)
                self.wake.clear()
        finally:
            waker.cancel()
            with contextlib.suppress(BaseException):
                await waker

    async def step(self, feed: FeedFn) -> None:
        ready = await asyncio.to_thread(self.watcher.scan)
        for job, paths in ready:
            streams, read, skipped = await asyncio.to_thread(
                prepare, job, paths, self.max_bytes, self.fed, self.memory_bytes
            )
            self.dumps.labels("read").inc(read)
            self.dumps.labels("skipped").inc(skipped)
            if streams:
                await feed(job, streams)
                lines = sum(data.count(b"\n") for _, _, data in streams)
                self.lines.inc(lines)
                log.info(
                    "job %s: %d Flight Recorder line(s) from %d dump(s) fed",
                    printable(job),
                    lines,
                    read,
                )

    async def _inotify(self) -> None:
        """Wakes the scan on a change, where `watchfiles` is installed (optional)."""
        try:
            watchfiles: Any = importlib.import_module("watchfiles")
        except ImportError:
            return
        while True:
            try:
                async for _ in watchfiles.awatch(self.root, recursive=True):
                    self.wake.set()
            except (OSError, RuntimeError) as e:  # the folder went away: poll on, retry
                log.debug("watchfiles on %s: %s", printable(self.root), e)
            await asyncio.sleep(self.poll_s)
