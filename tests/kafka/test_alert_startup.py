"""`rankwatch alert` started before anything was ever diagnosed: the diagnoses topic does not
exist yet (`rankwatch run` creates it with its first diagnosis) and, on a fresh broker, neither
does the group coordinator. Both are expected states, not failures: the member says once, at
INFO, what it waits for, logs no ERROR, and delivers the first diagnosis within seconds of the
topic appearing (its metadata refresh interval, not aiokafka's five-minute default). The same
holds for `rankwatch run` and an input topic that a pipeline creates on its first write."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from alert_services import DIAGNOSIS, AlertProcess, Receiver, reap_alert_processes, serving
from daemon_fixtures import Daemon, read_topic, wait_for
from kafka_broker import create_topic
from test_daemon_kafka import base_settings, make_fleet, produce, replay

# The topic is found at the next metadata refresh; then the member joins the group and fetches.
# The bound is 10 s; what goes beyond the refresh is group join and delivery.
DELIVERY_BOUND_S = 10.0


@pytest.fixture(autouse=True)
def no_member_left_running() -> Iterator[None]:
    yield
    reap_alert_processes()


def test_a_topic_created_after_start_is_read_within_seconds_and_nothing_logs_error(
    daemon_kafka: str, tmp_path: Path
) -> None:
    topic = f"diagnoses-late-{uuid.uuid4().hex[:8]}"
    receiver = Receiver()
    with serving(receiver.app()) as hook:
        member = AlertProcess(
            [
                "--bootstrap-servers", daemon_kafka,
                "--topic", topic,
                "--group-id", f"alert-{uuid.uuid4().hex[:8]}",
                "--webhook-url", f"http://127.0.0.1:{hook.port}/hook",
                "--log-level", "info",
            ],
            tmp_path / "alert.log",
        ).start()  # fmt: skip
        time.sleep(8)  # the member has looked for the topic more than once

        create_topic(daemon_kafka, topic, 1, exist_ok=True)
        produce(daemon_kafka, topic, [(b"llama-7b", orjson.dumps(DIAGNOSIS))])
        created = time.monotonic()
        wait_for("the first alert", receiver.bodies, 400, member.log_text)
        took = time.monotonic() - created
        assert member.stop() == 0

    assert receiver.bodies()[0]["id"] == DIAGNOSIS["id"]
    assert took < DELIVERY_BOUND_S, f"first alert {took:.1f} s after the topic appeared"
    log = member.log_text()
    assert_waits_logged_at_info(log, topic)
    assert re.search(rf"topic {topic}: reading \d+ partition", log), log


def assert_waits_logged_at_info(log: str, topic: str) -> None:
    assert not re.search(r"\b(ERROR|Traceback)\b", log), log
    waits = [ln for ln in log.splitlines() if f"waiting for topic {topic}" in ln]
    assert len(waits) == 1 and " INFO " in waits[0], log


def test_run_reads_an_input_topic_created_after_it_started(
    daemon_kafka: str, tmp_path: Path, daemon_factory: Callable[..., Daemon]
) -> None:
    logs, out = (f"{kind}-late-{uuid.uuid4().hex[:8]}" for kind in ("logs", "diagnoses"))
    truths = make_fleet(tmp_path / "fleet", [("cuda_error", 1, "per-rank")])
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("late", **base_settings(logs, out, group)).start()
    wait_for("the daemon to wait for its topic", lambda: logs in d.log_text(), 60, d.log_text)
    time.sleep(3)

    replay(daemon_kafka, logs, [tmp_path / "fleet" / job for job in truths])
    wait_for("a diagnosis", lambda: read_topic(daemon_kafka, out), 120, d.log_text)
    assert d.stop() == 0
    assert_waits_logged_at_info(d.log_text(), logs)
