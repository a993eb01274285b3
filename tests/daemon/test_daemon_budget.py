"""The daemon splits its one memory budget: the engine gets a share, and aiokafka's fetches,
the records per batch and the bookkeeping are bounded by the rest. Before, the engine got the
whole budget and the input consumer fetched up to aiokafka's 50 MiB per request on top, so a
burst read from a backlog held 2.2-3.3x a 50 MiB budget."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rankwatch.daemon import budget
from rankwatch.daemon.bounds import ENTRY_RESIDENT_BYTES, STRUCTURES, max_entries
from rankwatch.kafka.clients import input_consumer, reader_consumer
from rankwatch.settings.options import ConfigError
from rankwatch.settings.run import DaemonConfig, load_config

MIB = 1 << 20


def config(**overrides: Any) -> DaemonConfig:
    return load_config(None, overrides={"topic": ["in"], **overrides}, environ={})


def consumer_limits(cfg: DaemonConfig, build: Any) -> tuple[int, int]:
    """(fetch_max_bytes, max_partition_fetch_bytes) of a consumer built from `cfg`."""

    async def build_and_read() -> tuple[int, int]:
        consumer = build(cfg)
        return consumer._fetch_max_bytes, consumer._max_partition_fetch_bytes

    return asyncio.run(build_and_read())


@pytest.mark.parametrize("budget_mib", [50, 256, 1024])  # floors rule tiny budgets
def test_the_parts_of_the_daemon_add_up_to_its_budget(budget_mib: int) -> None:
    cfg = config(memory_budget_bytes=budget_mib * MIB)
    split = cfg.budget()
    assert cfg.engine_config().memory_budget_bytes == split.engine_bytes
    batches = budget.BATCHES_ALIVE * split.max_batch_records * budget.RECORD_RESIDENT_BYTES
    bookkeeping = STRUCTURES * max_entries(cfg.memory_budget_bytes) * ENTRY_RESIDENT_BYTES
    assert bookkeeping <= split.bookkeeping_bytes
    held = split.engine_bytes + split.fetch_max_bytes + batches + split.bookkeeping_bytes
    assert held + split.outbox_bytes <= cfg.memory_budget_bytes
    assert split.max_partition_fetch_bytes <= split.fetch_max_bytes
    # what one engine poll hands out is a part of the outbox's share, not more
    assert 0 < split.poll_bytes <= split.outbox_bytes // 2


@pytest.mark.parametrize("build", [input_consumer, reader_consumer])
def test_consumers_fetch_within_their_share_of_the_budget(build: Any) -> None:
    cfg = config(memory_budget_bytes=50 * MIB)
    fetch_max, per_partition = consumer_limits(cfg, build)
    assert fetch_max <= 5 * MIB  # a tenth of the budget, not aiokafka's 50 MiB
    assert per_partition <= fetch_max


def test_a_large_budget_keeps_the_usual_fetch_and_batch_sizes() -> None:
    split = config(memory_budget_bytes=1 << 30).budget()
    assert split.max_partition_fetch_bytes == 4 * MIB
    assert split.fetch_max_bytes == 50 * MIB
    assert split.max_batch_records == 10_000


def test_set_sizes_within_their_shares_are_kept() -> None:
    cfg = config(memory_budget_bytes=50 * MIB, max_partition_fetch_bytes=MIB, max_batch_records=200)
    assert cfg.budget().max_partition_fetch_bytes == MIB
    assert cfg.budget().max_batch_records == 200
    assert consumer_limits(cfg, input_consumer)[1] == MIB


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"max_partition_fetch_bytes": 16 * MIB}, "(16,777,216) is above its share"),
        ({"max_batch_records": 100_000}, "max_batch_records (100,000) is above"),
        ({"max_partition_fetch_bytes": 100}, "must be 0 (derived from memory_budget_bytes)"),
    ],
)
def test_sizes_above_their_share_are_explained(overrides: dict[str, int], says: str) -> None:
    with pytest.raises(ConfigError) as e:
        config(memory_budget_bytes=50 * MIB, **overrides)
    assert says in str(e.value)
    assert "Traceback" not in str(e.value)
