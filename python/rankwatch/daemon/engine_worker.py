"""The engine on its own thread. Every engine call goes through one worker thread, so calls are
serialised (the Rust engine is not re-entrant) and, because the engine releases the GIL, the
event loop keeps fetching from Kafka while a batch is being scanned and correlated."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson

from rankwatch._core import EncodedDiagnoses
from rankwatch.daemon.feeding import FeedArgs
from rankwatch.engine import Diagnosis, Engine, FedRecords

_T = TypeVar("_T")


class Polled:
    """The diagnoses of one poll, decoded one at a time by iteration; `waiting_bytes` is the
    JSON not yet handed out (counted in the outbox's share of the budget)."""

    def __init__(self, encoded: EncodedDiagnoses, note: Callable[[Diagnosis], None]) -> None:
        self._encoded = encoded
        self._note = note
        self.total_bytes = encoded.waiting_bytes
        # the poll stopped at its byte bound: more diagnoses are ready, poll again
        self.more = encoded.more
        # jobs whose incident the poll's hold left undiagnosed although their input changed
        self.held_jobs = encoded.held_jobs
        # the origins (`topic/partition`) of the records that fed them
        self.held_origins = encoded.held_origins

    @property
    def waiting_bytes(self) -> int:
        return self._encoded.waiting_bytes

    def __iter__(self) -> Iterator[Diagnosis]:
        return self

    def __next__(self) -> Diagnosis:
        d: Diagnosis = orjson.loads(next(self._encoded))
        self._note(d)
        return d


class EngineWorker:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rankwatch-engine")
        # job -> ids of the incidents the engine has diagnosed at least once (for the
        # "pending" gauge: incidents held minus incidents diagnosed)
        self._diagnosed: dict[str, set[str]] = {}
        # (origin, jobs) for jobs that first appeared in a batch fed from that origin; records
        # of one job share a partition, so this maps jobs whose identity lives in the value
        self._new_jobs: list[tuple[str, list[str]]] = []
        # jobs the engine held at the last `stats()` (their bookkeeping is never trimmed)
        self.held_jobs: frozenset[str] = frozenset()

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args))

    def submit_feed_many(self, batches: Sequence[FeedArgs]) -> asyncio.Future[list[FedRecords]]:
        """Starts one engine call per partition batch, all in one trip to the engine thread,
        right now (not when the event loop next runs), and returns its future."""
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(self._pool, self._feed_many, list(batches))

    def _feed_many(self, batches: list[FeedArgs]) -> list[FedRecords]:
        known = set(self.engine.jobs())
        out = []
        for args in batches:
            out.append(self.engine.feed_consumer_records(*args))
            now = set(self.engine.jobs())
            if now - known:
                self._new_jobs.append((args[1], sorted(now - known)))
            known = now
        return out

    async def feed_streams(self, job: str, streams: Sequence[tuple[int, str, bytes]]) -> None:
        """Feeds whole streams of one job, each (rank, origin, lines): one stream per rank,
        as the Flight Recorder's lines are fed (rankwatch.flight_recorder)."""
        await self._call(self._feed_streams, job, list(streams))

    def _feed_streams(self, job: str, streams: list[tuple[int, str, bytes]]) -> None:
        for rank, origin, data in streams:
            stream = self.engine.open_stream(job, origin, source_key=f"rank:{rank}", rank=rank)
            self.engine.feed(stream, data, int(time.time() * 1000))
            self.engine.close_stream(stream)

    def take_new_jobs(self) -> list[tuple[str, list[str]]]:
        """Jobs first seen since the last call, with the origin of the batch that showed them
        (call on the event loop after a feed completed)."""
        out, self._new_jobs = self._new_jobs, []
        return out

    async def poll(self, now_ms: int) -> list[Diagnosis]:
        diagnoses = await self._call(self.engine.poll, now_ms)
        for d in diagnoses:
            self.note_diagnosed(d)
        return diagnoses

    async def poll_lazily(self, now_ms: int, max_bytes: int = 0, hold: bool = False) -> Polled:
        """`poll`, decoding each diagnosis only when the iterator reaches it: a burst of
        thousands of jobs diagnosed at once is held as JSON, not as Python objects (about
        five times larger). `max_bytes` bounds the JSON of one call (`Polled.more`); `hold`
        lets an open incident diagnosed within the last settle window wait
        (`Engine.poll_encoded`)."""
        encoded = await self._call(self.engine.poll_encoded, now_ms, max_bytes, hold)
        return Polled(encoded, self.note_diagnosed)

    def note_diagnosed(self, d: Diagnosis) -> None:
        self._diagnosed.setdefault(str(d.get("job", "")), set()).add(str(d["id"]))

    async def stats(self) -> dict[str, Any]:
        """Engine statistics; also forgets the diagnosed ids of jobs the engine released or
        evicted, so that this map stays as small as the engine's state."""
        stats, held = await self._call(self._stats_and_jobs)
        self.held_jobs = frozenset(held)
        self._diagnosed = {job: ids for job, ids in self._diagnosed.items() if job in held}
        return stats

    def _stats_and_jobs(self) -> tuple[dict[str, Any], set[str]]:
        # no memory breakdown: taken on every loop, its count from scratch cost a fifth of a
        # storm's time; the budget is kept by the engine's running count
        return self.engine.stats(breakdown=False), set(self.engine.jobs())

    async def drop_jobs(self, jobs: Iterable[str]) -> None:
        names = list(jobs)
        for job in names:
            self._diagnosed.pop(job, None)
        await self._call(self._drop, names)

    def _drop(self, names: list[str]) -> None:
        for job in names:
            self.engine.drop_job(job)

    def diagnosed_count(self) -> int:
        return sum(len(ids) for ids in self._diagnosed.values())

    def close(self) -> None:
        self._pool.shutdown(wait=True)
