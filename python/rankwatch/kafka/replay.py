"""`rankwatch replay`: loads log files into a Kafka topic as canonical records, keyed by job.

Files are found and named the way `rankwatch analyze` does (`rankwatch.inputs.discover`: each
PATH is a job unless `--job`; ranks from file names, torchrun and Open MPI layouts). Lines of
all files are interleaved one by one, each file in its own order, like ranks writing at once.
A record is `{"job", "rank", "host", "ts", "line", "source"}`: `ts` is null (the engine reads
the time printed on the line; the Kafka timestamp, now, is the fallback), `source` names the
file's stream so that lines of different files never share a stream: a path relative to the
folder that holds the job's files (diagnosis origins never show where the files were read
from, a temporary folder say), or `rank:N`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from rankwatch.inputs import LogFile
from rankwatch.kafka.batch_sender import BatchSender
from rankwatch.logread import PartialRead, read_lines

MAX_BATCH_BYTES = 512 * 1024
# Longer lines are cut (the engine keeps at most `max_line_bytes` of a line anyway), so that a
# runaway line never makes a record the broker refuses.
MAX_LINE_BYTES = 256 * 1024


@dataclass
class ReplayResult:
    records: int
    bytes: int
    files: int
    jobs: int
    seconds: float
    skipped: int = 0


class ReplayFailed(Exception):
    """Delivery failed. The first `acknowledged` records of the send order (which is the same
    for the same files) are on the topic, so a rerun that skips them sends no duplicate."""

    def __init__(self, acknowledged: int, sent: int, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.acknowledged = acknowledged
        self.sent = sent
        self.cause = cause


def stream_names(files: Sequence[LogFile]) -> list[str]:
    """The `source` of each file: its stream key or path, relative to the deepest folder that
    holds all files of its job (`rank:N` keys stay as they are)."""
    roots: dict[str, str] = {}
    for job in {f.job for f in files}:
        parents = [os.path.abspath(f.path.parent) for f in files if f.job == job]
        roots[job] = os.path.commonpath(parents)
    names = []
    for f in files:
        key = f.source_key or str(f.path)
        if key.startswith("rank:"):
            names.append(key)
            continue
        rel = os.path.relpath(os.path.abspath(key), roots[f.job])
        names.append(f.path.name if rel == "." else rel)
    return names


def canonical_record(f: LogFile, line: bytes, source: str | None = None) -> bytes:
    return orjson.dumps(
        {
            "job": f.job,
            "rank": f.rank,
            "host": None,
            "ts": None,
            "line": line[:MAX_LINE_BYTES].decode("utf-8", "replace"),
            "source": source if source is not None else f.source_key or f.origin,
        }
    )


def interleave(
    files: Sequence[LogFile], on_error: Callable[[str], None] | None = None
) -> Iterator[tuple[LogFile, bytes]]:
    """Non-blank lines of all files, one from each file in turn, each file in its order. Each
    line is read with at most MAX_LINE_BYTES of it in memory; a file that fails is reported to
    `on_error` ("PATH: reason", partially read gzip files after their readable lines) and the
    others go on."""
    active = [(f, read_lines(f.path, MAX_LINE_BYTES)) for f in files]
    while active:
        still = []
        for f, it in active:
            try:
                for line in it:
                    if line.strip():
                        yield f, line
                        still.append((f, it))
                        break
            except PartialRead as e:
                _report(on_error, f"{f.origin}: partially read: {e}")
            except OSError as e:
                _report(on_error, f"{f.origin}: {e.strerror or e}")
        active = still


def _report(on_error: Callable[[str], None] | None, message: str) -> None:
    if on_error is not None:
        on_error(message)


def new_producer(connection: dict[str, Any]) -> Any:
    return AIOKafkaProducer(
        **connection,
        acks="all",
        enable_idempotence=True,
        linger_ms=20,
        max_batch_size=MAX_BATCH_BYTES,
        max_request_size=max(1 << 20, MAX_BATCH_BYTES * 2),
    )


async def replay_files(
    files: Sequence[LogFile],
    topic: str,
    connection: dict[str, Any],
    *,
    rate: float | None = None,
    on_error: Callable[[str], None] | None = None,
    skip: int = 0,
) -> ReplayResult:
    """Sends every line of `files` to `topic`, but the first `skip` records (what an earlier
    run reported as acknowledged); `rate` caps lines per second; files that cannot be read
    (or only in part) are reported to `on_error`. Raises ReplayFailed if delivery fails
    after it began."""
    t0 = time.monotonic()
    producer = new_producer(connection)
    try:
        await producer.start()
        partitions = await producer.partitions_for(topic)
        timeout_s = 2 * connection.get("request_timeout_ms", 40_000) / 1000 + 5
        sender = BatchSender(producer, topic, sorted(partitions), ack_timeout_s=timeout_s)
        try:
            await _send_lines(sender, files, skip, rate, on_error, t0)
        except KafkaError as e:
            raise ReplayFailed(skip + sender.acknowledged(), skip + sender.records, e) from e
    finally:
        with contextlib.suppress(TimeoutError):  # a producer stuck on a gone broker is left
            await asyncio.wait_for(producer.stop(), 30)
    return ReplayResult(
        records=sender.records,
        bytes=sender.bytes,
        files=len(files),
        jobs=len({f.job for f in files}),
        seconds=time.monotonic() - t0,
        skipped=skip,
    )


async def _send_lines(
    sender: BatchSender,
    files: Sequence[LogFile],
    skip: int,
    rate: float | None,
    on_error: Callable[[str], None] | None,
    t0: float,
) -> None:
    check_every = max(1, int(rate / 50)) if rate else 0
    sources = {id(f): name for f, name in zip(files, stream_names(files), strict=True)}
    for n, (f, line) in enumerate(interleave(files, on_error)):
        if n < skip:
            continue
        await sender.add(f.job.encode(), canonical_record(f, line, sources[id(f)]))
        if rate and sender.records % check_every == 0:
            ahead = sender.records / rate - (time.monotonic() - t0)
            if ahead > 0:
                await sender.flush()
                await asyncio.sleep(ahead)
    await sender.flush()
