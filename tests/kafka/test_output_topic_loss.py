"""The diagnoses topic deleted under a running daemon while the broker does not create topics
on first use (probe 2026-12-03, N7). The daemon used to block for request_timeout_ms, exit 1,
and exit 1 again on every restart until the topic was back; once it was, the restart's replay
published every diagnosis of the window again and alert consumers paged again.

Now a missing output topic is waited out like a broker outage: /readyz says not ready,
rankwatch_output_topic_missing is 1, /healthz says alive, the diagnosis is held and the input
offsets stay behind it (at least once). When the topic is back the held diagnosis is published
and the offsets move on; what was published before the loss is not announced again, neither by
the running daemon nor by a restarted one whose replay re-reads that input."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
from aiokafka.errors import KafkaError

from daemon_fixtures import (
    PORT,
    Daemon,
    committed_offsets,
    end_offsets,
    read_topic,
    wait_for,
    wait_settled,
)
from kafka_broker import create_topic, delete_topic, halt_broker, resume_broker
from test_delivery_faults import canonical, fail_job, produce


@contextlib.contextmanager
def broker_without_auto_create() -> Iterator[None]:
    """The test broker restarted (on its data) with auto.create.topics.enable=false for the
    block, then with its defaults again."""
    halt_broker(PORT)
    resume_broker(PORT, extra_props="auto.create.topics.enable=false")
    try:
        yield
    finally:
        halt_broker(PORT)
        resume_broker(PORT)


def probes(d: Daemon) -> tuple[int, dict[str, Any], int]:
    ready, body = d.get("/readyz")
    live, _ = d.get("/healthz")
    return ready, orjson.loads(body), live


def statuses(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    return [(r.json()["job"], r.json()["status"]) for r in read_topic(bootstrap, topic)]


def recreate(bootstrap: str, topic: str) -> None:
    """Makes the topic again (the broker may still be finishing its deletion)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            create_topic(bootstrap, topic, 1)
            return
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_deleted_output_topic_is_waited_out_and_nothing_published_before_is_announced_again(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    with broker_without_auto_create():
        logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
        group = f"g-{uuid.uuid4().hex[:8]}"
        d = daemon_factory(
            "t",
            topic=[logs],
            output_topic=out,
            group_id=group,
            settle_ms=1000,
            incident_horizon_ms=10_000,
            request_timeout_ms=10_000,
        ).start()
        # job "settled": diagnosed, then final (its event time moves past the horizon)
        later = canonical(
            "settled", 0, "node-a", "node-a:1:1 [0] NCCL INFO step 99", "2026-11-30T12:00:30Z"
        )
        produce(daemon_kafka, logs, fail_job("settled"))
        wait_for("the open diagnosis", lambda: statuses(daemon_kafka, out), context=d.log_text)
        produce(daemon_kafka, logs, [(b"settled", later, [])])
        wait_settled(daemon_kafka, [logs], group, [d])
        before = statuses(daemon_kafka, out)
        assert before == [("settled", "open"), ("settled", "final")], before

        delete_topic(daemon_kafka, out)
        produce(daemon_kafka, logs, fail_job("while-missing"))
        wait_for(
            "/readyz and the metric to report the missing topic",
            lambda: (
                "output topic missing" in probes(d)[1]["reasons"]
                and d.metric("rankwatch_output_topic_missing") == 1
            ),
            timeout_s=60,
            context=d.log_text,
        )
        wait_for(
            "the diagnosis of the new job to be held",
            lambda: d.metric("rankwatch_publish_held_records") >= 1,
            context=d.log_text,
        )
        # more input while held: not read, and nothing committed until the topic is back
        held_at = committed_offsets(daemon_kafka, logs, group)
        produce(daemon_kafka, logs, fail_job("queued"))
        time.sleep(12)  # longer than request_timeout_ms, after which it used to exit
        ready, body, live = probes(d)
        assert d.running(), d.log_text()[-3000:]
        assert ready == 503 and live == 200, body
        assert committed_offsets(daemon_kafka, logs, group) == held_at
        assert held_at != end_offsets(daemon_kafka, logs)

        recreate(daemon_kafka, out)
        wait_settled(daemon_kafka, [logs], group, [d])
        after = statuses(daemon_kafka, out)
        assert after == [("while-missing", "open"), ("queued", "open")], after
        wait_for("/readyz to recover", lambda: probes(d)[0] == 200, context=d.log_text)
        assert d.metric("rankwatch_output_topic_missing") == 0
        assert d.starts == 1 and d.stop() == 0

        # A restart re-reads the replay window: the final diagnosis of "settled" is known only
        # from the lost topic, and is not announced again.
        d.start()
        d.wait_assigned()
        produce(daemon_kafka, logs, fail_job("after-restart"))
        wait_settled(daemon_kafka, [logs], group, [d])
        final = statuses(daemon_kafka, out)
        assert final == [*after, ("after-restart", "open")], final
        assert d.metric('rankwatch_diagnoses_skipped_total{reason="settled"}') >= 1
        assert d.stop() == 0
