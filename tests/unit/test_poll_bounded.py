"""One engine poll handed out every ready diagnosis at once: a burst of thousands of short
jobs read from a backlog gave polls of 1,105 diagnoses (7.6 MiB of JSON) while the engine held
its whole share, and the daemon's RSS peaked at 1.3x its 50 MiB budget. A poll is now bounded
by bytes (`poll_bytes`, half the outbox's share): the rest comes from the next call, which the
daemon makes at once after publishing, so nothing is dropped, reordered or delayed."""

from __future__ import annotations

import asyncio

import orjson

from rankwatch import Catalog, Engine, EngineConfig
from rankwatch.daemon.engine_worker import EngineWorker
from rankwatch.engine import Decoder

CAUSE = (
    "node{r}:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)
JOBS = 120


def burst(jobs: int) -> list[bytes]:
    """Short failing jobs, four ranks each, one of them printing the cause."""
    out = []
    for i in range(jobs):
        for r in range(4):
            line = CAUSE.format(r=r) if r == 2 else f"step 1 loss 2.5 tokens {r}"
            record = {"job": f"job-{i}", "rank": r, "host": f"pod-{r}", "ts": 1_000, "line": line}
            out.append(orjson.dumps(record))
    return out


def fed_engine() -> Engine:
    engine = Engine(Catalog(), EngineConfig(release_quiet_ms=20_000))
    engine.poll(1_000)
    values = burst(JOBS)
    n = len(values)
    engine.feed_records(Decoder(), "in/0", values, [None] * n, [None] * n, [1_000] * n)
    return engine


def by_job(docs: list[bytes]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for doc in docs:
        out.setdefault(str(orjson.loads(doc)["job"]), []).append(doc)
    return out


def test_a_poll_bounded_by_bytes_hands_out_a_burst_in_parts_losing_nothing() -> None:
    whole = list(fed_engine().poll_encoded(60_000))
    largest = max(len(d) for d in whole)
    assert len(whole) == 2 * JOBS  # each job's open diagnosis, then its final one
    engine = fed_engine()
    bound = 8 * largest
    parts: list[list[bytes]] = []
    while True:
        polled = engine.poll_encoded(60_000, bound)
        # at most one job's diagnoses (two) past the bound
        assert polled.waiting_bytes <= bound + 2 * largest
        parts.append(list(polled))
        if not polled.more:
            break
    assert len(parts) > JOBS * 2 * largest // bound // 2
    got = [d for part in parts for d in part]
    assert len(got) == len(whole)
    assert by_job(got) == by_job(whole)
    assert engine.stats()["jobs"] == 0


def test_the_worker_polls_lazily_within_a_bound() -> None:
    worker = EngineWorker(fed_engine())
    try:

        async def drain() -> tuple[int, int]:
            polls, seen = 0, 0
            while True:
                polled = await worker.poll_lazily(60_000, 4096)
                polls += 1
                seen += len(list(polled))
                if not polled.more:
                    return polls, seen

        polls, seen = asyncio.run(drain())
    finally:
        worker.close()
    assert seen == 2 * JOBS
    assert polls > 10
    assert worker.engine.stats()["jobs"] == 0  # every job released after its final one


def test_unbounded_poll_is_one_call() -> None:
    polled = fed_engine().poll_encoded(60_000)
    assert not polled.more
    assert len(polled) == 2 * JOBS
