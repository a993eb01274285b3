"""Back-pressure on the diagnosis outbox: the bytes the publisher keeps for diagnoses the broker
has not yet acknowledged stay within the outbox's share of the budget (plus the one diagnosis
that crossed it), whatever the burst. Before, every diagnosis sent stayed in the publisher until
the next checkpoint, so a burst read from a backlog queued thousands of ~7 KB versions with
nothing slowing the feed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from daemon_fixtures import Daemon, read_topic, wait_settled
from rankwatch.daemon import budget
from rankwatch.daemon.config import load_config
from test_daemon_kafka import produce

BUDGET = 16 << 20  # the outbox's share is its floor, 1 MiB
JOBS = 400
CAUSE = (
    "node{r}:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)


def burst(jobs: int) -> list[tuple[bytes, bytes]]:
    """Short failing jobs of 8 ranks, three lines and a cause line per rank, keyed by job."""
    out = []
    for i in range(jobs):
        job = f"job-{i}"
        for rank in range(8):
            for s in range(3):
                line = f"[rank{rank}]: step {s} loss 2.{s} lr 3e-4"
                value = {"job": job, "rank": rank, "ts": 1_000 + s, "line": line}
                out.append((job.encode(), orjson.dumps(value)))
            cause = {"job": job, "rank": rank, "ts": 1_010, "line": CAUSE.format(r=rank)}
            out.append((job.encode(), orjson.dumps(cause)))
    return out


def test_the_publisher_keeps_at_most_the_outbox_share_while_a_burst_is_fed(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    share = load_config(
        None, overrides={"topic": [logs], "memory_budget_bytes": BUDGET}, environ={}
    ).budget()
    assert share.outbox_bytes == budget.MIN_OUTBOX_BYTES
    produce(daemon_kafka, logs, burst(JOBS))
    group = f"g-{out}"
    # a long commit interval: what the publisher keeps is bounded by acknowledgements, not
    # by how often the daemon checkpoints
    d = daemon_factory(
        "burst",
        topic=[logs],
        output_topic=out,
        group_id=group,
        initial_offset="earliest",
        memory_budget_bytes=BUDGET,
        commit_interval_ms=10_000,
        settle_ms=0,
        release_quiet_ms=60_000,
    ).start()
    wait_settled(daemon_kafka, [logs], group, [d])
    m: dict[str, Any] = d.metrics() or {}
    published = read_topic(daemon_kafka, out)
    jobs = {r.json()["job"] for r in published}
    assert len(jobs) == JOBS  # nothing lost, nothing stuck behind the pause
    total = sum(len(r.value or b"") + len(r.key or b"") for r in published)
    largest = max(len(r.value or b"") + len(r.key or b"") for r in published)
    assert total > 2 * share.outbox_bytes  # the burst is larger than the share
    assert m["rankwatch_outbox_share_bytes"] == share.outbox_bytes
    peak = m["rankwatch_outbox_publisher_peak_bytes"]
    assert 0 < peak <= share.outbox_bytes + largest, (peak, share.outbox_bytes, largest)
    assert d.stop() == 0


def test_a_poll_hands_its_diagnoses_to_python_one_at_a_time() -> None:
    """`poll_encoded` returned every diagnosis of a burst as Python bytes at once, while the
    Rust strings they were copied from were still alive: twice the burst's JSON (7 MB per
    poll in the 10,000-job burst). Now the documents stay in Rust until handed out; measured
    with tracemalloc (exact Python allocation sizes, no timing)."""
    import tracemalloc

    from rankwatch import Catalog, Engine, EngineConfig
    from rankwatch.engine import Decoder

    engine = Engine(Catalog(), EngineConfig(release_quiet_ms=600_000))
    engine.poll(1_000)
    values = [v for _, v in burst(200)]
    n = len(values)
    engine.feed_records(Decoder(), "in/0", values, [None] * n, [None] * n, [1_000] * n)
    tracemalloc.start()
    try:
        docs = engine.poll_encoded(30_000)
        total = docs.waiting_bytes
        held_by_python = tracemalloc.get_traced_memory()[0]
        sizes = []
        for doc in docs:
            sizes.append(len(doc))
            assert docs.waiting_bytes == total - sum(sizes)
            del doc
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(sizes) == 200 and sum(sizes) == total
    assert held_by_python < total // 20, (held_by_python, total)
    assert peak < total // 10, (peak, total)
