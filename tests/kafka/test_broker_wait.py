"""Liveness is not readiness (probe 2026-12-03, N8). The shipped liveness probes read /healthz,
which failed 30 s into a broker outage, and a daemon started without a broker exited 1: a broker
outage became a crash loop (CrashLoopBackOff, up to 5 minutes of blackout after the broker is
back). Now /healthz fails only when the loop stands still while Kafka answers; a broker outage
is /readyz and rankwatch_kafka_up. `rankwatch run` and `rankwatch alert` started while the
broker is down wait for it (saying so once) and start when it comes back."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from daemon_fixtures import (
    PORT,
    ROOT,
    Daemon,
    free_port,
    read_topic,
    wait_for,
    wait_settled,
)
from kafka_broker import halt_broker, resume_broker
from rankwatch.daemon.sdnotify import Notifier
from rankwatch.daemon.service import Daemon as Service
from rankwatch.settings.run import load_config
from test_delivery_faults import fail_job, produce

# --- what /healthz means, on the daemon's own state ------------------------------------------


@pytest.fixture
def service(catalog: Any) -> Iterator[Service]:
    cfg = load_config(None, overrides={"topic": ["in"]}, environ={})
    daemon = Service(cfg, catalog)
    daemon.started = True
    daemon.pos.owned = {object()}  # type: ignore[arg-type]
    yield daemon
    daemon.engine.close()


def live(daemon: Service) -> bool:
    return daemon.checks.live()[0]


def test_a_loop_that_stands_still_is_unhealthy_only_while_kafka_answers(service: Service) -> None:
    now = time.monotonic()
    service.last_alive = now - 120  # the loop has not turned for two minutes
    probe = service.probe
    probe.kafka_checked = now
    probe.kafka_up = True
    assert not live(service)  # wedged: Kafka answers, the loop does not move
    probe.kafka_up = False
    assert live(service)  # a broker outage: waiting, not wedged
    body = orjson.loads(service.checks.live()[1])
    assert body["status"] == "ok" and body["waiting"] == "broker unreachable"
    assert not service.checks.ready()[0]
    probe.kafka_up, probe.output_missing = True, True
    assert live(service)  # the output topic is gone: held, not wedged
    probe.output_missing = False
    probe.kafka_checked = now - 60
    probe.kafka_up = False
    assert not live(service)  # no recent probe: the event loop itself may be stuck
    service.connecting = True
    assert live(service)  # waiting for the broker at start
    assert "waiting for the broker" in orjson.loads(service.checks.ready()[1])["reasons"]


def test_systemd_hears_from_the_daemon_while_it_is_live_and_only_then(
    service: Service, tmp_path: Path
) -> None:
    """WATCHDOG=1 follows /healthz (a broker outage is no reason for systemd to kill the
    daemon); before READY, waiting for the broker extends the start timeout instead."""
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(0.05)
    service.notifier = Notifier({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})

    def heard(**state: Any) -> set[str]:
        for k, v in state.items():
            setattr(service.probe if hasattr(service.probe, k) else service, k, v)

        async def listen() -> set[str]:
            task = asyncio.create_task(service.checks.keep_alive())
            await asyncio.sleep(0.3)
            task.cancel()
            got: set[str] = set()
            with contextlib.suppress(OSError):
                while True:
                    got.update(sock.recv(4096).decode().split("\n"))
            return {g.split("=")[0] for g in got}

        return asyncio.run(listen())

    long_ago = time.monotonic() - 120
    assert heard(connecting=True, last_alive=long_ago) == {"EXTEND_TIMEOUT_USEC"}
    service.notifier.ready_sent = True
    outage = {"connecting": False, "kafka_up": False, "kafka_checked": time.monotonic()}
    assert heard(**outage) == {"WATCHDOG"}
    assert heard(kafka_up=True, kafka_checked=time.monotonic()) == set()  # wedged
    sock.close()


# --- started while the broker is down ---------------------------------------------------------


def start_alert(bootstrap: str, topic: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    args = [
        *("alert", "--bootstrap-servers", bootstrap, "--topic", topic),
        *("--group-id", f"a-{uuid.uuid4().hex[:8]}", "--http-addr", f"127.0.0.1:{port}"),
    ]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rankwatch.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
        )


def alert_probe(port: int, path: str) -> int:
    d = Daemon(config=Path("alert"), log=Path("alert"), metrics_port=port)
    try:
        return d.get(path)[0]
    except OSError:
        return 0


def test_run_and_alert_started_without_a_broker_wait_for_it(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("w", topic=[logs], output_topic=out, group_id=group)
    alert_port, alert_log = free_port(), tmp_path / "alert.log"
    halt_broker(PORT)
    alert: subprocess.Popen[bytes] | None = None
    try:
        d.start()
        alert = start_alert(daemon_kafka, out, alert_port, alert_log)
        wait_for(
            "the daemon to say what it waits for",
            lambda: "waiting for the Kafka broker" in d.log_text(),
            timeout_s=60,
            context=d.log_text,
        )
        time.sleep(8)  # several tries: still waiting, and said once
        assert d.running(), d.log_text()[-3000:]
        assert d.log_text().count("waiting for the Kafka broker") == 1, d.log_text()
        assert d.get("/healthz")[0] == 200
        ready, body = d.get("/readyz")
        assert ready == 503 and "waiting for the broker" in orjson.loads(body)["reasons"]
        assert d.metric("rankwatch_kafka_up") == 0
        assert alert.poll() is None, alert_log.read_text()
        assert alert_probe(alert_port, "/healthz") == 200
        assert "waiting for the Kafka broker" in alert_log.read_text()
    finally:
        resume_broker(PORT)
    try:
        d.wait_assigned()
        produce(daemon_kafka, logs, fail_job("after-the-wait"))
        wait_settled(daemon_kafka, [logs], group, [d])
        assert [r.json()["job"] for r in read_topic(daemon_kafka, out)] == ["after-the-wait"]
        wait_for("the daemon to be ready", lambda: d.get("/readyz")[0] == 200)
        wait_for("the alert member to be ready", lambda: alert_probe(alert_port, "/readyz") == 200)
        assert d.starts == 1 and d.stop() == 0
    finally:
        if alert is not None:
            alert.terminate()
            assert alert.wait(timeout=60) == 0, alert_log.read_text()
