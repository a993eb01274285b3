"""The daemon as operators see it, against real components: a real Prometheus (Debian's
`prometheus`) scrapes a real `rankwatch run` fed by a replayed fleet, with the shipped scrape
config and alerting rules, and every query of the shipped Grafana dashboard must return series;
`rankwatch stats` names the suspect hosts the metrics name; /readyz is ready only with
partitions; sd_notify reaches a real Unix datagram socket."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.errors import KafkaError

from daemon_fixtures import Daemon, free_port, parse_metrics, wait_for, wait_settled
from deploy_checks import ALERT_DELIVERER_METRICS, dashboard_queries, need
from rankwatch.simulate import fleetgen
from test_daemon_kafka import RANKS, base_settings, make_fleet, rankwatch

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "deploy" / "prometheus"


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return orjson.loads(r.read())


def _query(base: str, expr: str) -> dict[str, Any]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        doc: dict[str, Any] = _get_json(url)
    except urllib.error.HTTPError as e:
        doc = orjson.loads(e.read())
    return doc


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """`start(target)` runs Prometheus with the shipped config and rules, scraping the daemon
    at `target` every second; returns its base URL."""
    need("prometheus")
    procs: list[subprocess.Popen[bytes]] = []

    def start(target: str) -> str:
        text = (PROM / "prometheus.yml").read_text()
        assert "127.0.0.1:9464" in text and "rules/rankwatch.rules.yml" in text
        text = text.replace("127.0.0.1:9464", target).replace("15s", "1s")
        text = text.replace("rules/rankwatch.rules.yml", str(PROM / "rules/rankwatch.rules.yml"))
        cfg = tmp_path / "prometheus.yml"
        cfg.write_text(text)
        port = free_port()
        log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={cfg}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    return int(r.status) == 200
            except OSError:
                return False

        wait_for("prometheus to be ready", ready)
        return base

    yield start
    for p in procs:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def _substitute(expr: str) -> str:
    """Grafana's variables as Grafana would fill them for a short, 1 s-scraped window."""
    return (
        expr.replace("$__rate_interval", "20s")
        .replace("$__range", "10m")
        .replace("$instance", ".*")
    )


def test_dashboard_queries_return_series_from_a_real_prometheus(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
    prometheus: Callable[[str], str],
) -> None:
    # Two jobs whose root cause is the same host (same scenario and seed) make it a suspect.
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("ib_link_down", 7, "per-node"),
            ("cuda_error", 3, "per-rank"),
            ("healthy", 4, "per-rank"),
        ],
    )
    (job_a,) = [j for j, t in truths.items() if t.scenario == "ib_link_down"]
    job_b = "ib-link-down-again"
    twin = fleetgen.generate(
        "ib_link_down", tmp_path / "twin" / job_b, ranks=RANKS, layout="torchrun-logdir", seed=7
    )
    suspect = truths[job_a].root_cause["host"]
    assert twin.root_cause is not None and twin.root_cause["host"] == suspect
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 1)
    dirs = [str(tmp_path / "fleet" / j) for j in truths] + [str(tmp_path / "twin" / job_b)]
    sent = rankwatch("replay", *dirs, "--topic", logs, "--bootstrap-servers", daemon_kafka)
    assert sent.returncode == 0, sent.stderr

    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("obs", **base_settings(logs, out, group)).start()
    base = prometheus(f"127.0.0.1:{d.metrics_port}")
    wait_settled(daemon_kafka, [logs], group, [d])
    m = d.metrics() or {}
    suspect_jobs = {
        j for j, t in truths.items() if t.root_cause and t.root_cause["host"] == suspect
    }
    suspect_jobs.add(job_b)
    assert m[f'rankwatch_suspect_host_jobs{{host="{suspect}"}}'] == len(suspect_jobs)
    assert m["rankwatch_kafka_up"] == 1

    # `rankwatch stats` counts the same incidents and names the same suspects.
    stats = rankwatch("stats", "--bootstrap-servers", daemon_kafka, "--topic", out, "--json")
    assert stats.returncode == 0, stats.stderr
    doc = orjson.loads(stats.stdout)
    exported = {
        k.split('"')[1]: v for k, v in m.items() if k.startswith("rankwatch_suspect_host_jobs{")
    }
    assert {s["host"]: len(s["jobs"]) for s in doc["suspect_nodes"]} == exported
    assert {s["host"]: set(s["jobs"]) for s in doc["suspect_nodes"]}[suspect] == suspect_jobs
    by_sig = {
        k.split('signature="')[1].split('"')[0]: v
        for k, v in m.items()
        if k.startswith("rankwatch_incidents_total{")
    }
    assert {r["name"]: r["incidents"] for r in doc["by_signature"]} == by_sig

    # Prometheus scraped the daemon long enough for rates over 20 s windows.
    def scraped() -> bool:
        r = _query(base, 'count_over_time(rankwatch_records_in_total{job="rankwatch"}[1m])')
        return bool(r["data"]["result"]) and float(r["data"]["result"][0]["value"][1]) >= 25

    wait_for("prometheus to hold 25 scrapes", scraped, timeout_s=120)
    empty = []
    for title, expr in dashboard_queries():
        doc = _query(base, _substitute(expr))
        assert doc.get("status") == "success", (title, expr, doc)
        ours = not any(name in expr for name in ALERT_DELIVERER_METRICS)
        if ours and not doc["data"]["result"]:
            empty.append((title, expr))
    assert not empty, f"dashboard queries without series: {empty}"

    rules = _get_json(f"{base}/api/v1/rules")["data"]["groups"]
    loaded = [r for g in rules for r in g["rules"]]
    assert len(loaded) >= 8 and all(r["health"] == "ok" for r in loaded), loaded
    firing = _get_json(f"{base}/api/v1/alerts")["data"]["alerts"]
    assert any(
        a["labels"]["alertname"] == "RankwatchSuspectHost" and a["labels"]["host"] == suspect
        for a in firing
    ), firing
    assert d.stop() == 0


def test_readiness_needs_partitions_and_sd_notify_reaches_the_socket(
    tmp_path: Path,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs", 1), fresh_topics("diagnoses", 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    sock_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(sock_path))
        notify.settimeout(0.2)
        a = daemon_factory("a", **base_settings(logs, out, group))
        a.extra_env = {"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "1000000"}
        a.start()
        a.wait_assigned()
        messages: list[str] = []

        def drain() -> None:
            while True:
                try:
                    messages.extend(notify.recv(4096).decode().split("\n"))
                except TimeoutError:
                    return

        def notified(*wanted: str) -> Callable[[], bool]:
            def check() -> bool:
                drain()
                return all(w in messages for w in wanted)

            return check

        wait_for("READY=1 and WATCHDOG=1 on NOTIFY_SOCKET", notified("READY=1", "WATCHDOG=1"))
        assert any(m.startswith("STATUS=consuming 1 partition") for m in messages), messages

        def readyz(d: Daemon) -> tuple[int, dict[str, Any]]:
            status, body = d.get("/readyz")
            return status, orjson.loads(body)

        wait_for("a to be ready", lambda: readyz(a)[0] == 200)
        # One partition, two members: the one without a partition is live but not ready.
        b = daemon_factory("b", **base_settings(logs, out, group)).start()
        wait_for("b to answer", lambda: b.metrics() is not None)
        time.sleep(1)

        def one_ready() -> bool:
            states = [readyz(d) for d in (a, b)]
            return sorted(s for s, _ in states) == [200, 503]

        wait_for("exactly one of two members to be ready", one_ready)
        (idle,) = [d for d in (a, b) if readyz(d)[0] == 503]
        _, body = readyz(idle)
        assert body["reasons"] == ["no partitions assigned"] and body["kafka_up"] is True
        assert idle.get("/healthz")[0] == 200
        assert b.stop() == 0
        drain()
        messages.clear()
        assert a.stop() == 0
        drain()
        assert "STOPPING=1" in messages, messages


def test_kafka_probe_marks_the_broker_down_and_up(daemon_kafka: str, tmp_path: Path) -> None:
    """The probe behind rankwatch_kafka_up and /readyz, with real clients: one bootstrapped
    at a port where nothing listens, then one at the test broker."""
    from aiokafka import TopicPartition

    from rankwatch.daemon.service import Daemon as Service
    from rankwatch.kafka import clients as kafka_clients
    from rankwatch.settings.run import load_config

    async def probe_with(bootstrap: str) -> tuple[float, tuple[bool, bytes]]:
        cfg = load_config(
            None,
            overrides={
                "bootstrap_servers": bootstrap,
                "topic": ["t"],
                "metrics_addr": "off",
                "request_timeout_ms": 2000,
            },
        )
        service = Service(cfg)
        service.started = True
        service.pos.owned = {TopicPartition("t", 0)}
        service.reader = kafka_clients.reader_consumer(cfg)
        try:
            with contextlib.suppress(KafkaError):
                await service.reader.start()
            task = asyncio.create_task(service.probe.run(service.reader))
            await asyncio.sleep(3)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            value = parse_metrics(service.metrics.render().decode())["rankwatch_kafka_up"]
            return value, service.checks.ready()
        finally:
            await service.reader.stop()
            service.engine.close()

    down, (ready, body) = asyncio.run(probe_with(f"127.0.0.1:{free_port()}"))
    assert down == 0 and not ready
    assert orjson.loads(body)["reasons"] == ["broker unreachable"]
    up, (ready, body) = asyncio.run(probe_with(daemon_kafka))
    assert up == 1 and ready, body
