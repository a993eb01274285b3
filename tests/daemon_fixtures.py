"""Fixtures and helpers for the daemon tests: a real Kafka broker (tests/kafka_broker.py), topics
of their own per test, `rankwatch run` as a subprocess, its /metrics, and reading topics back.

Import into tests/conftest.py with ``from daemon_fixtures import *``. The broker listens on
127.0.0.1:$RANKWATCH_TEST_KAFKA_PORT (default: kafka_broker.DEFAULT_PORT, so other Kafka tests
of the session share it) and is started fresh once per session.
Nothing here measures time: waits poll a condition and fail with a message after a generous
deadline, so a slow machine is slow, not flaky.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from kafka_broker import DEFAULT_PORT, broker_log, create_topic, ensure_broker, stop_broker

__all__ = [
    "Daemon",
    "KafkaRecord",
    "committed_offsets",
    "daemon_factory",
    "daemon_kafka",
    "end_offsets",
    "fresh_topics",
    "read_topic",
    "wait_for",
    "wait_settled",
]

PORT = int(os.environ.get("RANKWATCH_TEST_KAFKA_PORT", str(DEFAULT_PORT)))
WAIT_S = float(os.environ.get("RANKWATCH_TEST_WAIT_S", "120"))
ROOT = Path(__file__).resolve().parent.parent

_METRIC = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


@pytest.fixture(scope="session")
def daemon_kafka() -> Iterator[str]:
    """Bootstrap address of a fresh single-node broker for the whole session."""
    bootstrap = ensure_broker(PORT)
    yield bootstrap
    stop_broker(PORT)


@pytest.fixture
def fresh_topics(daemon_kafka: str, request: pytest.FixtureRequest) -> Callable[..., str]:
    """`fresh_topics("logs", partitions=4)` -> a new topic named after the test."""
    base = re.sub(r"[^a-zA-Z0-9]+", "-", request.node.name)[:60]

    def make(kind: str, partitions: int = 1) -> str:
        name = f"{base}.{kind}.{uuid.uuid4().hex[:6]}"
        create_topic(daemon_kafka, name, partitions)
        return name

    return make


def wait_for(
    what: str,
    condition: Callable[[], Any],
    timeout_s: float = WAIT_S,
    context: Callable[[], str] | None = None,
) -> Any:
    """Polls `condition` until it returns something truthy; fails naming `what` (plus
    `context()`, e.g. daemon logs) otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            extra = context() if context is not None else ""
            pytest.fail(f"gave up waiting for: {what} ({broker_hint()})\n{extra}")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- reading Kafka ----------------------------------------------------------------------------


@dataclass
class KafkaRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    timestamp: int

    def json(self) -> Any:
        assert self.value is not None
        return orjson.loads(self.value)


async def _read_topic(bootstrap: str, topic: str) -> list[KafkaRecord]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed"
    )
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        parts = cluster.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        if not tps:
            return []
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[KafkaRecord] = []
        todo = [tp for tp in tps if ends[tp] > 0]
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=500)
            for tp, recs in batch.items():
                out.extend(
                    KafkaRecord(
                        tp.partition, r.offset, r.key, r.value, dict(r.headers), r.timestamp
                    )
                    for r in recs
                    if r.offset < ends[tp]
                )
            todo = [tp for tp in todo if await consumer.position(tp) < ends[tp]]
        out.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
        return out
    finally:
        await consumer.stop()


def read_topic(bootstrap: str, topic: str) -> list[KafkaRecord]:
    """Every committed record of `topic`, in broker-time order."""
    return asyncio.run(_read_topic(bootstrap, topic))


async def _offsets(bootstrap: str, topic: str, group: str | None) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        tps = [TopicPartition(topic, p) for p in sorted(cluster.partitions_for_topic(topic) or ())]
        if group is None:
            ends = await consumer.end_offsets(tps)
            return {tp.partition: int(o) for tp, o in ends.items()}
    finally:
        await consumer.stop()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group, partitions=tps)
        return {tp.partition: int(m.offset) for tp, m in got.items() if m.offset >= 0}
    finally:
        await admin.close()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    return asyncio.run(_offsets(bootstrap, topic, None))


def committed_offsets(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets ({} while the group coordinator is not ready yet)."""
    try:
        return asyncio.run(_offsets(bootstrap, topic, group))
    except KafkaError:
        return {}


# --- the daemon as a process ------------------------------------------------------------------


def parse_metrics(text: str) -> dict[str, float]:
    """`name{labels}` -> value, for every sample of a Prometheus text exposition."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _METRIC.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


@dataclass
class Daemon:
    """`python -m rankwatch.cli run --config FILE` in the background."""

    config: Path
    log: Path
    metrics_port: int
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def start(self) -> Daemon:
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        env = {**os.environ, **self.extra_env}
        with open(self.log, "ab") as log:
            log.write(f"--- start {self.starts}\n".encode())
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rankwatch.cli", "run", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env=env,
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.metrics_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def metrics(self) -> dict[str, float] | None:
        """The current /metrics, or None while the daemon does not answer yet."""
        if not self.running():
            self.fail_if_dead()
        try:
            status, body = self.get("/metrics")
        except (OSError, urllib.error.URLError):
            return None
        return parse_metrics(body.decode()) if status == 200 else None

    def metric(self, name: str) -> float:
        m = self.metrics() or {}
        return m.get(name, 0.0)

    def fail_if_dead(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail(f"daemon exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_assigned(self) -> None:
        wait_for(
            f"daemon {self.config.name} to own partitions",
            lambda: (self.metrics() or {}).get("rankwatch_partitions_assigned", 0) > 0,
        )

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM, then wait for the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"daemon did not exit after SIGTERM:\n{self.log_text()[-4000:]}")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, str):
        return orjson.dumps(v).decode()
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(v)


def write_config(path: Path, settings: dict[str, Any], topics: dict[str, dict[str, Any]]) -> None:
    lines = [f"{k} = {toml_value(v)}" for k, v in settings.items()]
    for name, table in topics.items():
        lines.append(f"\n[topics.{orjson.dumps(name).decode()}]")
        lines.extend(f"{k} = {toml_value(v)}" for k, v in table.items())
    path.write_text("\n".join(lines) + "\n")


# Settings that make a test run quick on 2 cores without changing what is tested.
FAST = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "commit_interval_ms": 200,
    "poll_interval_ms": 100,
    "max_wait_ms": 3000,
    "settle_ms": 5000,
    "linger_ms": 2,
    "log_level": "info",
}


@pytest.fixture
def daemon_factory(daemon_kafka: str, tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """`daemon_factory(name, topic=[...], output_topic=..., **settings, topics={...})` -> a
    Daemon (not started); every daemon still running at the end of the test is killed."""
    made: list[Daemon] = []

    def make(name: str, topics: dict[str, dict[str, Any]] | None = None, **settings: Any) -> Daemon:
        port = free_port()
        cfg = tmp_path / f"{name}.toml"
        merged = {
            "bootstrap_servers": daemon_kafka,
            "metrics_addr": f"127.0.0.1:{port}",
            **FAST,
            **settings,
        }
        write_config(cfg, merged, topics or {})
        d = Daemon(config=cfg, log=tmp_path / f"{name}.log", metrics_port=port)
        made.append(d)
        return d

    yield make
    for d in made:
        if d.running():
            d.kill()


def broker_hint() -> str:
    return f"broker log: {broker_log(PORT)}"


def wait_settled(bootstrap: str, topics: list[str], group: str, daemons: list[Daemon]) -> None:
    """Waits until the group committed every record of `topics` and then, two loops later,
    every daemon has no incident without a diagnosis and no unacknowledged publish."""

    def caught_up() -> bool:
        for topic in topics:
            ends = end_offsets(bootstrap, topic)
            done = committed_offsets(bootstrap, topic, group)
            if any(done.get(p, 0) < e for p, e in ends.items() if e > 0):
                return False
        return True

    def logs() -> str:
        return "\n".join(f"--- {d.log.name}\n{d.log_text()[-3000:]}" for d in daemons)

    wait_for(
        f"group {group} to commit every record of {', '.join(topics)}", caught_up, context=logs
    )
    marks = [d.metric("rankwatch_loop_iterations_total") for d in daemons]

    def quiet() -> bool:
        for d, mark in zip(daemons, marks, strict=True):
            m = d.metrics()
            if m is None or m.get("rankwatch_loop_iterations_total", 0) < mark + 2:
                return False
            if m.get("rankwatch_incidents_pending", 1) > 0:
                return False
            if m.get("rankwatch_publish_unacknowledged_records", 1) > 0:
                return False
            if m.get("rankwatch_diagnosis_updates_held", 1) > 0:
                return False
        return True

    wait_for(
        "daemons to diagnose every incident and get every publish acknowledged", quiet, context=logs
    )
