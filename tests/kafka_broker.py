"""Helpers for tests that need a real Kafka broker (plain functions, no pytest fixtures).

The broker is the single-node Apache Kafka 4.x of ``deploy/kafka/dev-broker`` (KRaft,
127.0.0.1 only). Typical conftest use::

    from kafka_broker import create_topic, ensure_broker, stop_broker

    @pytest.fixture(scope="session")
    def kafka_bootstrap() -> Iterator[str]:
        bootstrap = ensure_broker()          # first call: starts with empty storage
        yield bootstrap
        stop_broker()

* ``ensure_broker`` starts the broker at most once per process and port, always with
  ``--fresh`` (empty storage in ``deploy/kafka/.run/<port>/data``), so every test run
  starts clean even if an earlier run left a broker behind.
* One port is one broker: parallel test processes (pytest-xdist workers) must each use
  their own port, e.g. ``19092 + worker index``, or share one broker started beforehand.
* The first start on a machine downloads the jars with Maven (about 20 s); later starts
  take about 5-10 s on 2 cores.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_DIR = REPO_ROOT / "deploy" / "kafka"
DEV_BROKER = KAFKA_DIR / "dev-broker"
DEFAULT_PORT = 19092

_T = TypeVar("_T")
_started: dict[int, str] = {}
_lock = threading.Lock()


class BrokerError(RuntimeError):
    """dev-broker failed; the message carries its stderr (and where the broker log is)."""


def _dev_broker(
    *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DEV_BROKER), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **(env or {})},
    )


def broker_log(port: int = DEFAULT_PORT) -> Path:
    """Path of the broker's log file for ``port`` (useful in failure messages)."""
    return KAFKA_DIR / ".run" / str(port) / "broker.log"


def ensure_broker(port: int = DEFAULT_PORT, *, timeout: float = 300.0) -> str:
    """Start a fresh broker on 127.0.0.1:``port`` once per process; return its bootstrap string.

    The first call for a port runs ``dev-broker start --port PORT --fresh`` (which wipes the
    storage, restarting a broker left running by an earlier run); later calls in the same
    process return the cached address without touching the broker. ``timeout`` covers a
    first-time jar download. Raises BrokerError if the broker does not come up.
    """
    with _lock:
        if port in _started:
            return _started[port]
        try:
            proc = _dev_broker("start", "--port", str(port), "--fresh", timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise BrokerError(
                f"dev-broker start --port {port} took over {timeout:.0f}s; see {broker_log(port)}"
            ) from exc
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise BrokerError(
                f"dev-broker start --port {port} failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()}\nbroker log: {broker_log(port)}"
            )
        bootstrap = lines[-1].strip()
        _started[port] = bootstrap
        return bootstrap


def stop_broker(port: int = DEFAULT_PORT, *, timeout: float = 120.0) -> None:
    """Stop the broker on ``port`` (SIGTERM, then SIGKILL); a no-op if none is running."""
    with _lock:
        _started.pop(port, None)
        proc = _dev_broker("stop", "--port", str(port), timeout=timeout)
        if proc.returncode != 0:
            raise BrokerError(
                f"dev-broker stop --port {port} failed (exit {proc.returncode}):\n"
                f"{proc.stderr.strip()}"
            )


def halt_broker(port: int = DEFAULT_PORT, *, timeout: float = 120.0) -> None:
    """Stop the broker on ``port`` but keep its data, for an outage that `resume_broker`
    ends; the session still counts it as started (same address afterwards)."""
    proc = _dev_broker("stop", "--port", str(port), timeout=timeout)
    if proc.returncode != 0:
        raise BrokerError(f"dev-broker stop --port {port} failed:\n{proc.stderr.strip()}")


def resume_broker(
    port: int = DEFAULT_PORT, *, timeout: float = 300.0, extra_props: str = ""
) -> str:
    """Start the broker on ``port`` again on the data it had (no ``--fresh``): topics,
    committed offsets and groups survive, as after a real outage. ``extra_props`` are server
    properties for this start (``KAFKA_DEV_EXTRA_PROPS``, e.g. a setting that cannot change
    while the broker runs); without them the broker runs with its defaults again."""
    env = {"KAFKA_DEV_EXTRA_PROPS": extra_props} if extra_props else None
    proc = _dev_broker("start", "--port", str(port), timeout=timeout, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise BrokerError(
            f"dev-broker start --port {port} (keeping data) failed (exit {proc.returncode}):\n"
            f"{proc.stderr.strip()}\nbroker log: {broker_log(port)}"
        )
    with _lock:
        _started[port] = lines[-1].strip()
    return _started[port]


def broker_running(port: int = DEFAULT_PORT) -> bool:
    """True if dev-broker reports a broker running on ``port``."""
    return _dev_broker("status", "--port", str(port), timeout=60.0).returncode == 0


async def create_topic_async(
    bootstrap: str,
    name: str,
    partitions: int,
    *,
    exist_ok: bool = False,
    configs: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create topic ``name`` (replication factor 1) and wait until every partition has a leader.

    Raises ``aiokafka.errors.TopicAlreadyExistsError`` if the topic exists, unless
    ``exist_ok``; other broker errors are raised as the matching aiokafka error class.
    """
    # aiokafka ships no type information (no py.typed).
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
    from aiokafka.errors import TopicAlreadyExistsError, for_code  # type: ignore[import-untyped]

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    await admin.start()
    try:
        topic = NewTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=1,
            topic_configs=configs or {},
        )
        resp = await admin.create_topics([topic], timeout_ms=int(timeout * 1000))
        for entry in resp.topic_errors:
            code = entry[1]
            if code == 0 or (exist_ok and code == TopicAlreadyExistsError.errno):
                continue
            message = entry[2] if len(entry) > 2 else None
            raise for_code(code)(f"create_topic {name!r}: {message}")

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            described = await admin.describe_topics([name])
            parts = described[0]["partitions"] if described else []
            if (
                described
                and described[0]["error_code"] == 0
                and len(parts) >= partitions
                and all(p["leader"] >= 0 for p in parts)
            ):
                return
            if loop.time() > deadline:
                raise TimeoutError(f"topic {name!r} has no leader for every partition yet")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def delete_topic_async(bootstrap: str, name: str, *, timeout: float = 30.0) -> None:
    """Delete topic ``name`` and wait until the broker no longer lists it."""
    from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    await admin.start()
    try:
        await admin.delete_topics([name], timeout_ms=int(timeout * 1000))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while name in await admin.list_topics():
            if loop.time() > deadline:
                raise TimeoutError(f"topic {name!r} is still listed after its deletion")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


def delete_topic(bootstrap: str, name: str, *, timeout: float = 30.0) -> None:
    """Blocking wrapper of :func:`delete_topic_async`."""
    _run(delete_topic_async(bootstrap, name, timeout=timeout))


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    *,
    exist_ok: bool = False,
    configs: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Blocking wrapper of :func:`create_topic_async`.

    Safe to call from synchronous code and from inside a running event loop (async tests):
    there it runs in a helper thread with its own loop. In async code prefer
    ``await create_topic_async(...)``.
    """
    _run(
        create_topic_async(
            bootstrap, name, partitions, exist_ok=exist_ok, configs=configs, timeout=timeout
        )
    )


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[_T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="kafka_broker-create_topic")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


if __name__ == "__main__":  # manual check: python tests/kafka_broker.py [PORT]
    import sys

    _port = int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PORT
    print(ensure_broker(_port), "running" if broker_running(_port) else "NOT running")


def broker_pid(port: int = DEFAULT_PORT) -> int:
    """Process id of the broker on ``port`` (to SIGSTOP/SIGCONT it: a broker that accepts
    connections but answers nothing, as in a long GC pause)."""
    return int((KAFKA_DIR / ".run" / str(port) / "broker.pid").read_text().strip())
