"""A quiet job gets its final diagnoses and its state released, so that a long-running engine
fed many short jobs holds only the recent ones (issue 9: closed jobs never released)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from rankwatch.catalog_loader import Catalog
from rankwatch.engine import Engine, EngineConfig
from rankwatch.settings.run import load_config

CAUSE = (
    b"node12:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    b"172.17.0.1<39275> failed : Network is unreachable\n"
)
QUIET_MS = 60_000
STEP_MS = 1_000


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog()


def stats(engine: Engine) -> dict[str, Any]:
    result: dict[str, Any] = orjson.loads(engine._core.stats_json())
    return result


def short_job(engine: Engine, name: str, now_ms: int) -> list[dict[str, Any]]:
    stream = engine.open_stream(name, f"{name}/rank0.log", rank=0)
    engine.feed(stream, b"[rank0]: step 1 loss 2.5\n" + CAUSE, now_ms)
    engine.close_stream(stream)
    return engine.poll(now_ms)


def test_ten_thousand_successive_short_jobs_stay_bounded(catalog: Catalog) -> None:
    engine = Engine(catalog, EngineConfig(release_quiet_ms=QUIET_MS))
    held_max, memory_max, finals = 0, 0, set()
    now = 1_000
    for i in range(10_000):
        for d in short_job(engine, f"job-{i}", now):
            if d["status"] == "final":
                finals.add(d["job"])
        s = stats(engine)
        held_max = max(held_max, s["jobs"])
        memory_max = max(memory_max, s["memory_bytes"])
        now += STEP_MS
    single = Engine(catalog, EngineConfig(release_quiet_ms=QUIET_MS))
    short_job(single, "one", 1_000)
    one_job = stats(single)["memory_bytes"]
    assert one_job > 0
    # Only the jobs of the last quiet window are held.
    assert held_max <= QUIET_MS // STEP_MS + 2, held_max
    assert memory_max <= (QUIET_MS // STEP_MS + 2) * max(one_job, 1) * 2
    for d in engine.poll(now + QUIET_MS):
        if d["status"] == "final":
            finals.add(d["job"])
    s = stats(engine)
    assert (s["jobs"], s["jobs_released"], s["jobs_evicted"]) == (0, 10_000, 0)
    # Nothing of any job is left, only the engine's own (empty) tables.
    parts = s["memory_breakdown"]
    assert {k: v for k, v in parts.items() if k != "streams"} == dict.fromkeys(
        parts.keys() - {"streams"}, 0
    )
    assert s["memory_bytes"] == parts["streams"] < 1 << 20  # the jobs table keeps its buckets
    assert len(finals) == 10_000  # every job got its final diagnosis before it was let go


def test_without_release_jobs_accumulate(catalog: Catalog) -> None:
    engine = Engine(catalog, EngineConfig(release_quiet_ms=0))
    for i in range(200):
        short_job(engine, f"job-{i}", 1_000 + i * STEP_MS)
    engine.poll(10 * 3_600_000)
    s = stats(engine)
    assert (s["jobs"], s["jobs_released"]) == (200, 0)


def test_a_released_job_seen_again_starts_afresh(catalog: Catalog) -> None:
    engine = Engine(catalog, EngineConfig(release_quiet_ms=QUIET_MS))
    short_job(engine, "again", 1_000)
    engine.poll(1_000 + QUIET_MS)
    assert engine.jobs() == []
    short_job(engine, "again", 2_000 + QUIET_MS)
    assert engine.jobs() == ["again"]
    assert any(d["job"] == "again" for d in engine.finish())


def test_daemon_config_passes_the_option_through(tmp_path: Path) -> None:
    path = tmp_path / "rw.toml"
    path.write_text('topic = ["t"]\nrelease_quiet_ms = 120000\n')
    assert load_config(path, environ={}).engine_config().release_quiet_ms == 120_000
    env = {"RANKWATCH_RELEASE_QUIET_MS": "0"}
    assert load_config(path, environ=env).engine_config().release_quiet_ms == 0
    default = load_config(None, environ={"RANKWATCH_TOPIC": "t"}).release_quiet_ms
    assert default == EngineConfig().release_quiet_ms == 3_600_000
