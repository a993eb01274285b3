"""Issue 24: a storm of thousands of ranks had its open incident diagnosed again (every rule over
every hit, rendered, hashed) on every poll, once per batch, and the daemon's stats counted the
engine's memory from scratch by part on every loop. A poll may now hold an open incident's
update for a settle window (`hold`), a poll without it diagnoses what waits (the daemon's,
before it commits offsets), and stats leave the breakdown out on request."""

from __future__ import annotations

import orjson

from rankwatch import Catalog, Engine, EngineConfig
from rankwatch.engine import Decoder

CAUSE = (
    "node{r}:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)
T0 = 100_000


def feed_rank(engine: Engine, rank: int, origin: str = "in/0") -> None:
    record = {"job": "storm", "rank": rank, "host": f"pod-{rank}", "ts": 1_000 + rank}
    value = orjson.dumps({**record, "line": CAUSE.format(r=rank)})
    engine.feed_records(Decoder(), origin, [value], [None], [None], [1_000])


def polled(engine: Engine, now_ms: int, hold: bool) -> list[bytes]:
    return list(engine.poll_encoded(now_ms, 0, hold))


def storm_engine() -> Engine:
    # due by wall time alone (max_wait_ms): every poll after it may diagnose
    engine = Engine(Catalog(), EngineConfig(settle_ms=5_000, max_wait_ms=1_000))
    feed_rank(engine, 0)
    assert polled(engine, T0, hold=True) == []  # opened, not yet due
    assert len(polled(engine, T0 + 1_000, hold=True)) == 1  # the first one is never held
    return engine


def test_a_holding_poll_waits_a_settle_window_and_one_without_hold_does_not() -> None:
    engine = storm_engine()
    feed_rank(engine, 1)
    assert polled(engine, T0 + 1_100, hold=True) == []  # held: diagnosed 100 ms ago
    flushed = polled(engine, T0 + 1_200, hold=False)
    assert len(flushed) == 1  # the held update, with the rank fed meanwhile
    assert polled(engine, T0 + 9_000, hold=True) == []  # nothing new since


def test_held_updates_come_once_the_settle_window_passed() -> None:
    engine = storm_engine()
    feed_rank(engine, 1)
    assert polled(engine, T0 + 5_999, hold=True) == []
    assert len(polled(engine, T0 + 6_000, hold=True)) == 1


def test_stats_without_the_breakdown_keep_the_running_count() -> None:
    engine = storm_engine()
    full = engine.stats()
    light = engine.stats(breakdown=False)
    assert "memory_breakdown" not in light
    assert light["memory_bytes"] == full["memory_bytes"] > 0
    assert sum(full["memory_breakdown"].values()) == full["memory_bytes"]


def test_a_holding_poll_names_the_jobs_it_held() -> None:
    engine = storm_engine()
    feed_rank(engine, 1)
    held = engine.poll_encoded(T0 + 1_100, 0, True)
    assert list(held) == [] and held.held_jobs == ["storm"]
    assert held.held_origins == ["in/0"]
    nothing_new = engine.poll_encoded(T0 + 1_200, 0, True)
    assert nothing_new.held_jobs == ["storm"]  # still waiting: its input changed
    flushed = engine.poll_encoded(T0 + 1_300, 0, False)
    assert len(list(flushed)) == 1 and flushed.held_jobs == []
    assert engine.poll_encoded(T0 + 1_400, 0, True).held_jobs == []


def test_a_holding_poll_names_every_origin_that_fed_a_held_job() -> None:
    # the job named in the record values, on two partitions: both wait for its diagnosis
    engine = storm_engine()
    feed_rank(engine, 1, "in/1")
    held = engine.poll_encoded(T0 + 1_100, 0, True)
    assert held.held_jobs == ["storm"] and sorted(held.held_origins) == ["in/0", "in/1"]
