"""Daemon parts that need no broker: configuration, metrics exposition, the HTTP endpoints,
the published-diagnosis index, the job map and fleet statistics."""

from __future__ import annotations

import argparse
import asyncio
import logging
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry, Gauge

from daemon_fixtures import parse_metrics
from rankwatch.daemon.commands import register
from rankwatch.daemon.decision import verdict
from rankwatch.daemon.http import HttpServer
from rankwatch.daemon.jobs import JobMap, job_of_key, partition_of_origin
from rankwatch.daemon.metrics import BoundedLabel, DaemonMetrics
from rankwatch.daemon.published import PublishedIndex, content_hash
from rankwatch.daemon.publisher import diagnosis_record
from rankwatch.daemon.stats import (
    SinceError,
    TopicRead,
    fleet_stats,
    ledger_of,
    parse_since,
    read_records,
    render_stats,
    topic_stats,
)
from rankwatch.engine import REJECT_REASONS
from rankwatch.http_url import http_url
from rankwatch.settings.options import ConfigError
from rankwatch.settings.run import load_config, validate_config

# --- configuration ----------------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_config_file_env_and_flags_in_order_of_precedence(tmp_path: Path) -> None:
    cfg_file = write(
        tmp_path / "rw.toml",
        """
bootstrap_servers = "kafka-1:9092,kafka-2:9092"
topic = ["logs.a"]
settle_ms = 7000
ring_lines = 512
sasl_password = "hunter2"

[topics."logs.k8s"]
format = "fluent-bit"
job_path = ["kubernetes", "labels", "training.kubeflow.org/job-name"]
max_record_bytes = 4096
""",
    )
    env = {"RANKWATCH_SETTLE_MS": "8000", "RANKWATCH_OUTPUT_TOPIC": "diag.env"}
    cfg = load_config(cfg_file, environ=env, overrides={"settle_ms": 9000})
    assert cfg.settle_ms == 9000  # flag beats env beats file
    assert cfg.output_topic == "diag.env"
    assert cfg.ring_lines == 512
    assert cfg.input_topics() == ["logs.a", "logs.k8s"]
    k8s = cfg.topic_config("logs.k8s")
    assert k8s.format == "fluent-bit"
    assert k8s.job_path == ["kubernetes", "labels", "training.kubeflow.org/job-name"]
    assert k8s.max_record_bytes == 4096
    assert cfg.topic_config("logs.a").format == "canonical"
    engine = cfg.engine_config()
    assert (engine.settle_ms, engine.ring_lines) == (9000, 512)


def test_secrets_are_never_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = load_config(
        write(tmp_path / "rw.toml", 'topic = ["t"]\nsasl_password = "hunter2"\n'), environ={}
    )
    assert cfg.sasl_password == "hunter2"
    assert "hunter2" not in repr(cfg)
    assert "hunter2" not in str(cfg.describe())
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("config: %s", cfg)
    assert "hunter2" not in caplog.text


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ('topic = ["t"]\nsetle_ms = 5\n', {}, "unknown key 'setle_ms' (did you mean 'settle_ms'?)"),
        ('topic = ["t"]\nsettle_ms = "soon"\n', {}, "settle_ms: expected an integer"),
        ('topic = ["t"]\nsettle_ms = -1\n', {}, "settle_ms: must be at least 0"),
        ('topic = ["t"]\n', {"RANKWATCH_RING_LINES": "many"}, "RANKWATCH_RING_LINES: expected"),
        ('topic = ["t"]\nformat = "xml"\n', {}, "'xml' is not one of"),
        ("", {}, "no input topic"),
        ('topic = ["t"]\noutput_topic = "t"\n', {}, "is also an input topic"),
        ('topic = ["t"]\nmetrics_addr = "9464"\n', {}, "expected host:port or 'off'"),
        ('topic = ["t"]\nbootstrap_servers = "kafka"\n', {}, "expected host:port"),
        ('topic = ["t"]\nsecurity_protocol = "SASL_SSL"\n', {}, "needs sasl_mechanism"),
        ('topic = ["t"]\n[topics.x]\njob_path = "a.b"\n', {}, "non-empty list of keys"),
        ('topic = ["t"]\n[topics.x]\nformt = "text"\n', {}, "did you mean 'format'"),
        ("topic = [", {}, "not valid TOML"),
    ],
)
def test_bad_config_is_one_clear_line(
    tmp_path: Path, text: str, env: dict[str, str], message: str
) -> None:
    path = write(tmp_path / "rw.toml", text)
    with pytest.raises(ConfigError) as err:
        load_config(path, environ=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_validate_config_checks_extra_catalogs(tmp_path: Path) -> None:
    good = write(tmp_path / "good.toml", 'topic = ["t"]\n')
    assert validate_config(good, use_env=False).input_topics() == ["t"]
    bad = write(tmp_path / "bad.toml", f'topic = ["t"]\ncatalog = ["{tmp_path / "none"}"]\n')
    with pytest.raises(ConfigError, match="no such catalog file or folder"):
        validate_config(bad, use_env=False)
    with pytest.raises(ConfigError, match="no such config file"):
        validate_config(tmp_path / "missing.toml")


def test_every_key_is_a_flag(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="rankwatch")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        [
            "run",
            "--bootstrap-servers",
            "b:1",
            "--topic",
            "x",
            "--topic",
            "y",
            "--settle-ms",
            "1500",
            "--no-check-crcs",
            "--job-path",
            '["kubernetes", "labels", "a.b/c"]',
            "--metrics-addr",
            "off",
        ]
    )
    from rankwatch.settings.flags import flag_values
    from rankwatch.settings.run import OPTIONS

    cfg = load_config(None, overrides=flag_values(args, OPTIONS), environ={})
    assert cfg.input_topics() == ["x", "y"]
    assert (cfg.settle_ms, cfg.check_crcs, cfg.metrics_listen()) == (1500, False, None)
    assert cfg.job_path == ["kubernetes", "labels", "a.b/c"]
    assert cfg.bootstrap_servers == "b:1"


# --- metrics and HTTP -------------------------------------------------------------------------


def test_metrics_exposition_format() -> None:
    m = DaemonMetrics(REJECT_REASONS, "9.9.9")
    m.rejected.labels("bad_json").inc(2)
    m.batch_seconds.observe(0.003)
    m.batch_seconds.observe(7.0)
    m.lag.labels("logs", "3").set(12)
    m.update_engine({"lines": 10, "bytes": 100, "hits_by_signature": {'x"y': 3}})
    text = m.render().decode()
    assert "# TYPE rankwatch_records_rejected_total counter" in text
    for reason in REJECT_REASONS:  # known series are exported as 0
        assert f'rankwatch_records_rejected_total{{reason="{reason}"}}' in text
    assert 'rankwatch_records_rejected_total{reason="bad_json"} 2.0' in text
    assert 'rankwatch_batch_duration_seconds_bucket{le="0.0025"} 0.0' in text
    assert 'rankwatch_batch_duration_seconds_bucket{le="0.005"} 1.0' in text
    assert 'rankwatch_batch_duration_seconds_bucket{le="+Inf"} 2.0' in text
    assert "rankwatch_batch_duration_seconds_count 2.0" in text
    assert 'rankwatch_consumer_lag_records{partition="3",topic="logs"} 12.0' in text
    assert "rankwatch_lines_in_total 10.0" in text
    assert 'rankwatch_signature_hits_total{signature="x\\"y"} 3.0' in text
    assert 'rankwatch_build_info{version="9.9.9"} 1.0' in text
    assert "_created" not in text
    for line in text.splitlines():
        if not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            assert name.startswith("rankwatch_"), line


# Names and types exported before the move to prometheus_client: dashboards and rules use them.
STABLE_METRICS = [
    ("rankwatch_build_info", "gauge"),
    ("rankwatch_records_in_total", "counter"),
    ("rankwatch_records_replayed_total", "counter"),
    ("rankwatch_lines_in_total", "counter"),
    ("rankwatch_bytes_in_total", "counter"),
    ("rankwatch_records_rejected_total", "counter"),
    ("rankwatch_dead_letter_records_total", "counter"),
    ("rankwatch_signature_hits_total", "counter"),
    ("rankwatch_incidents_open", "gauge"),
    ("rankwatch_incidents_pending", "gauge"),
    ("rankwatch_diagnoses_out_total", "counter"),
    ("rankwatch_diagnoses_skipped_total", "counter"),
    ("rankwatch_publish_unacknowledged_records", "gauge"),
    ("rankwatch_diagnosis_updates_held", "gauge"),
    ("rankwatch_consumer_lag_records", "gauge"),
    ("rankwatch_partitions_assigned", "gauge"),
    ("rankwatch_rebalances_total", "counter"),
    ("rankwatch_commits_total", "counter"),
    ("rankwatch_jobs", "gauge"),
    ("rankwatch_ring_memory_bytes", "gauge"),
    ("rankwatch_memory_budget_bytes", "gauge"),
    ("rankwatch_jobs_evicted_total", "counter"),
    ("rankwatch_jobs_released_total", "counter"),
    ("rankwatch_batch_duration_seconds", "histogram"),
    ("rankwatch_loop_iterations_total", "counter"),
    ("rankwatch_last_batch_timestamp_seconds", "gauge"),
]


def test_metric_names_and_types_stay_stable() -> None:
    text = DaemonMetrics(REJECT_REASONS, "0").render().decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE"))
    for name, kind in STABLE_METRICS:
        assert types.get(name) == kind, name


def _diag(did: str, job: str, host: str, sig: str = "pt_cuda_error") -> dict[str, Any]:
    return {
        "id": did,
        "job": job,
        "root_cause": {"host": host},
        "signature": {"id": sig, "subsystem": "cuda"},
    }


def test_fleet_metrics_count_incidents_once_and_find_suspects_in_the_window() -> None:
    m = DaemonMetrics(REJECT_REASONS, "0", suspect_window_s=3600)
    t0 = 1_000_000.0
    m.fleet.published(_diag("rw-1", "j1", "node-7"), t0)
    m.fleet.published(_diag("rw-1", "j1", "node-7", "nccl_ib_wc_retry_exceeded"), t0 + 1)
    m.fleet.published(_diag("rw-2", "j2", "node-7"), t0 + 2)
    m.fleet.published(_diag("rw-3", "j2", "node-1"), t0 + 3)
    p = parse_metrics(m.render().decode())
    assert p['rankwatch_incidents_total{signature="pt_cuda_error",subsystem="cuda"}'] == 3
    assert p['rankwatch_incidents_by_host_total{host="node-7"}'] == 2
    assert p['rankwatch_suspect_host_jobs{host="node-7"}'] == 2
    assert p["rankwatch_suspect_hosts"] == 1
    assert 'rankwatch_suspect_host_jobs{host="node-1"}' not in p
    m.fleet.refresh(t0 + 3601)  # rw-1 left the window: node-7 is no longer a suspect
    p = parse_metrics(m.render().decode())
    assert p["rankwatch_suspect_hosts"] == 0
    assert 'rankwatch_suspect_host_jobs{host="node-7"}' not in p


def test_suspects_follow_the_diagnoses_topic_but_counters_only_own_publishes() -> None:
    m = DaemonMetrics(REJECT_REASONS, "0", suspect_window_s=3600)
    now = time.time()
    m.fleet.published(_diag("rw-1", "j1", "node-7"), now)
    # published by another daemon of the group, read back from the diagnoses topic
    m.fleet.observe(orjson.dumps(_diag("rw-2", "j2", "node-7")), int(now * 1000))
    m.fleet.observe(b"not json", int(now * 1000))
    m.fleet.observe(orjson.dumps(_diag("rw-1", "j1", "node-7")), int(now * 1000))  # our own
    m.fleet.refresh(now)
    p = parse_metrics(m.render().decode())
    assert p['rankwatch_suspect_host_jobs{host="node-7"}'] == 2
    assert p['rankwatch_incidents_by_host_total{host="node-7"}'] == 1


def test_host_labels_are_bounded() -> None:
    label = BoundedLabel(2)
    assert [label(h) for h in ("a", "b", "c", "a", "d")] == ["a", "b", "other", "a", "other"]


def test_http_server_serves_metrics_health_and_readiness() -> None:
    registry = CollectorRegistry()
    Gauge("rankwatch_up", "up", registry=registry).set(1)
    state = {"healthy": True, "ready": False}

    async def main() -> dict[str, tuple[int, bytes, str]]:
        server = HttpServer(
            registry,
            lambda: (state["healthy"], b'{"ok":1}'),
            lambda: (state["ready"], b'{"ready":0}'),
        )
        await server.start("127.0.0.1", 0)
        assert server.address is not None
        host, port = server.address
        base = f"http://{host}:{port}"

        def get(path: str, method: str = "GET") -> tuple[int, bytes, str]:
            req = urllib.request.Request(base + path, method=method)
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    return int(r.status), bytes(r.read()), str(r.headers["Content-Type"])
            except urllib.error.HTTPError as e:
                return int(e.code), bytes(e.read()), str(e.headers["Content-Type"])

        out = {}
        for key, path, method in (
            ("metrics", "/metrics", "GET"),
            ("health", "/healthz", "GET"),
            ("unready", "/readyz", "GET"),
            ("missing", "/nope", "GET"),
            ("post", "/metrics", "POST"),
        ):
            out[key] = await asyncio.to_thread(get, path, method)
        state.update(healthy=False, ready=True)
        out["sick"] = await asyncio.to_thread(get, "/healthz")
        out["ready"] = await asyncio.to_thread(get, "/readyz")
        await server.close()
        return out

    out = asyncio.run(main())
    status, body, ctype = out["metrics"]
    assert status == 200 and "text/plain; version=0.0.4" in ctype
    assert b"rankwatch_up 1.0" in body
    assert out["health"][:2] == (200, b'{"ok":1}')
    assert out["unready"][:2] == (503, b'{"ready":0}')
    assert out["missing"][0] == 404 and out["post"][0] == 405
    assert out["sick"][0] == 503 and out["ready"][0] == 200


# --- what was published -----------------------------------------------------------------------


def diagnosis(did: str, job: str, start: str, **extra: Any) -> dict[str, Any]:
    return {
        "schema": "rankwatch.diagnosis/1",
        "id": did,
        "job": job,
        "status": "open",
        "incident": {"start": start},
        "root_cause": {"rank": 3, "host": "node-1", "origin": "logs/2/rank:3"},
        **extra,
    }


def test_index_skips_identical_and_publishes_real_updates() -> None:
    idx = PublishedIndex(horizon_ms=20 * 60_000, retain_s=3600)
    d1 = diagnosis("rw-1", "j", "2026-11-30T12:00:00.000Z", confidence=0.5)
    assert verdict(idx, d1, replaying=False)[0] is None
    idx.remember(d1)
    assert verdict(idx, dict(d1), replaying=False)[0] == "identical"
    final = {**d1, "status": "final"}  # settled: news to every consumer, so it is published
    assert verdict(idx, final, replaying=False)[0] is None
    better = {**d1, "confidence": 0.9}
    assert verdict(idx, better, replaying=False)[0] is None  # an update, same id
    assert verdict(idx, better, replaying=True)[0] == "replay"  # rebuilt from less input
    # the replay window cut the incident, so it got another start and id: suppressed for good
    cut = diagnosis("rw-2", "j", "2026-11-30T12:04:00.000Z")
    assert verdict(idx, cut, replaying=True)[0] == "overlap"
    assert verdict(idx, cut, replaying=False)[0] == "overlap"
    later = diagnosis("rw-3", "j", "2026-11-30T13:00:00.000Z")  # a new incident
    assert verdict(idx, later, replaying=True)[0] is None
    other_job = diagnosis("rw-4", "k", "2026-11-30T12:00:00.000Z")
    assert verdict(idx, other_job, replaying=True)[0] is None


def test_index_loads_the_output_topic_and_the_hash_ignores_status() -> None:
    d = diagnosis("rw-9", "j", "2026-11-30T12:00:00.000Z")
    key, value = diagnosis_record(d)
    assert key == b"j" and orjson.loads(value)["schema"] == "rankwatch.diagnosis/1"
    idx = PublishedIndex(horizon_ms=1000, retain_s=3600)
    for v in (b"not json", b"[1]", None, value):
        idx.load(v)
    assert len(idx) == 1 and "rw-9" in idx
    assert content_hash(d) != content_hash({**d, "status": "final"})
    assert content_hash(d) != content_hash({**d, "job": "other"})
    assert idx.prune() == 0


def test_job_map_drops_only_jobs_of_lost_partitions() -> None:
    assert job_of_key(b"llm-7/12") == "llm-7/12"
    assert job_of_key(b"llm-7/12", "job/rank") == "llm-7"
    assert job_of_key(b"a/b", "job/rank") == "a/b"
    assert job_of_key(b"a/b/c") == "a/b/c"
    assert job_of_key(b"  ") is None
    assert partition_of_origin("logs.k8s/3/rank:1") == TopicPartition("logs.k8s", 3)
    jm = JobMap()
    t0, t1 = TopicPartition("logs", 0), TopicPartition("logs", 1)
    jm.note(t0, [b"a", b"a/1", None], [None])
    jm.note(t1, [b"b"], [b"c"])
    jm.note_diagnosis({"job": "d", "root_cause": {"origin": "logs/1/rank:0"}})
    assert jm.partitions_of("a") == {t0}
    assert sorted(jm.jobs_lost({t1}, {t0})) == ["b", "c", "d"]
    assert jm.partitions_of("b") == set()
    assert jm.jobs_lost({t1}, {t0}) == []


# --- fleet statistics -------------------------------------------------------------------------


def test_stats_count_records_that_are_not_diagnoses_and_say_when_the_topic_is_empty() -> None:
    log = orjson.dumps({"job": "j1", "rank": 0, "line": "NCCL WARN x"})
    diag = orjson.dumps({"id": "rw-1", "job": "j1", "signature": {"id": "s", "subsystem": "x"}})
    read = read_records([(log, 1), (b"garbage", 2), (None, 3), (diag, 4), (diag, 5)])
    assert (read.records, read.not_diagnoses, len(read.ledger)) == (5, 3, 1)
    text = render_stats(topic_stats(read))
    assert "3 record(s) on the topic were not diagnoses" in text
    empty = render_stats(topic_stats(TopicRead()))
    assert "the topic is empty" in empty
    assert "buckets" not in empty.splitlines()[0]  # no trend of nothing


def test_stats_read_diagnoses_by_the_contract() -> None:
    """A record with an id that does not decode as a diagnosis (a field of another type) is not
    counted as one, nor is one without an id."""
    good = {"id": "rw-1", "job": "j1", "root_cause": {"host": "node-1"}}
    odd = {"id": "rw-2", "job": "j1", "suspects": {"rank": 1}}
    read = read_records([(orjson.dumps(d), 1) for d in (good, odd, {"job": "j1"})])
    assert (read.records, read.not_diagnoses, len(read.ledger)) == (3, 2, 1)


def test_fleet_stats_counts_latest_versions_and_finds_suspect_nodes() -> None:
    def d(did: str, job: str, host: str, sig: str, sub: str) -> bytes:
        return orjson.dumps(
            {
                "id": did,
                "job": job,
                "root_cause": {"host": host},
                "signature": {"id": sig, "subsystem": sub},
            }
        )

    hour = 3_600_000
    t0 = 1_800_000_000_000
    records = [
        (d("rw-0", "j0", "node-7", "pt_cuda_error", "cuda"), t0 - 30 * hour),  # before --since
        (d("rw-1", "j1", "node-7", "nccl_ib_async_event", "ib"), t0),
        (d("rw-1", "j1", "node-7", "nccl_ib_wc_retry_exceeded", "ib"), t0 + hour),  # update
        (d("rw-2", "j2", "node-7", "pt_cuda_error", "cuda"), t0 + 2 * hour),
        (d("rw-3", "j3", "node-1", "pt_cuda_error", "cuda"), t0 + 7 * hour),
        (b"garbage", t0),
    ]
    ledger = ledger_of(records)
    assert len(ledger) == 4
    since = parse_since("8h", now_s=(t0 + 8 * hour) / 1000)
    assert since == t0
    stats = fleet_stats(ledger, since_ms=since, now_ms=t0 + 8 * hour, buckets=4)
    assert stats["incidents"] == 3 and stats["jobs"] == 3
    assert stats["by_signature"][0] == {
        "name": "pt_cuda_error",
        "incidents": 2,
        "trend": [0, 1, 0, 1],
    }
    sigs = {r["name"]: r["incidents"] for r in stats["by_signature"]}
    assert sigs["nccl_ib_wc_retry_exceeded"] == 1 and "nccl_ib_async_event" not in sigs
    assert stats["by_host"][0] == {"name": "node-7", "incidents": 2, "trend": [1, 1, 0, 0]}
    assert stats["suspect_nodes"] == [{"host": "node-7", "jobs": ["j1", "j2"], "incidents": 2}]
    text = render_stats(stats)
    assert "suspect nodes" in text and "node-7  2 jobs" in text and "█" in text
    # the same incidents through the daemon's metrics name the same suspects
    m = DaemonMetrics(REJECT_REASONS, "0", suspect_window_s=8 * 3600)
    for value, ts in sorted(records, key=lambda r: r[1]):
        if value != b"garbage":
            m.fleet.published(orjson.loads(value), ts / 1000)
    m.fleet.refresh((t0 + 8 * hour) / 1000)
    p = parse_metrics(m.render().decode())
    exported = {k: v for k, v in p.items() if k.startswith("rankwatch_suspect_host_jobs{")}
    expected = {
        f'rankwatch_suspect_host_jobs{{host="{s["host"]}"}}': len(s["jobs"])
        for s in stats["suspect_nodes"]
    }
    assert exported == expected
    # only the window counts: two days back, node-7 had incidents in three jobs
    wide = fleet_stats(ledger, since_ms=parse_since("2d", now_s=(t0 + 8 * hour) / 1000))
    assert wide["suspect_nodes"][0]["jobs"] == ["j0", "j1", "j2"]
    with pytest.raises(SinceError, match="expected a duration"):
        parse_since("yesterday")
    assert parse_since("2026-11-30T12:00:00Z") == 1_796_040_000_000


def test_positions_commit_only_what_the_engine_took_past_the_replay() -> None:
    from rankwatch.daemon.positions import Positions

    t0, t1 = TopicPartition("logs", 0), TopicPartition("logs", 1)
    pos = Positions()
    pos.owned = {t0, t1}
    pos.start(t0, 100, replay_end=150)  # re-reads 100..149 to rebuild state
    pos.start(t1, 7, replay_end=7)
    pos.accepted(t0, 120)
    assert pos.expected(t0) == 120
    assert pos.to_commit({t0, t1}) == {}  # nothing taken yet
    pos.fed(t0, 120)
    assert pos.replaying([t0]) and pos.to_commit({t0, t1}) == {}  # re-reads are not committed
    pos.fed(t0, 160)
    pos.fed(t1, 9)
    assert not pos.replaying([t0])
    assert pos.to_commit({t0}) == {t0: 160}  # t1 is not held by the consumer right now
    pos.committed([t0])
    assert pos.to_commit({t0, t1}) == {t1: 9}
    assert pos.lag(t1, 20) == 11
    pos.forget([t1])
    assert pos.to_commit({t0, t1}) == {} and pos.expected(t1) is None


def test_positions_commit_only_what_the_polls_reflect() -> None:
    """Issue 24: a poll that holds a job's update leaves the partitions that fed the job
    where they were; only what the polls reflect is committed (at least once)."""
    from rankwatch.daemon.positions import Positions

    t0, t1 = TopicPartition("logs", 0), TopicPartition("logs", 1)
    pos = Positions()
    pos.start(t0, 0, replay_end=0)
    pos.start(t1, 0, replay_end=0)
    pos.fed(t0, 10)
    pos.fed(t1, 10)
    pos.polled(set())
    pos.fed(t0, 20)
    pos.fed(t1, 20)
    pos.polled({t0})  # a job fed from t0 was held
    assert pos.to_commit({t0, t1}, reflected_only=True) == {t0: 10, t1: 20}
    assert pos.to_commit({t0, t1}) == {t0: 20, t1: 20}  # a full checkpoint's
    pos.committed({t0: 10, t1: 20})
    assert pos.to_commit({t0, t1}, reflected_only=True) == {}  # t0's 10..19 wait
    assert pos.lagging({t0, t1}, -1.0) and not pos.lagging({t0, t1}, 3600.0)
    pos.polled(set())
    assert pos.to_commit({t0, t1}, reflected_only=True) == {t0: 20}
    pos.committed({t0: 20})
    assert pos.to_commit({t0, t1}) == {} and not pos.lagging({t0, t1}, -1.0)


def test_the_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "python/rankwatch/daemon/example.toml"
    cfg = validate_config(example, use_env=False)
    assert cfg.input_topics() == ["logs.torchrun", "logs.k8s", "logs.slurm", "logs.vector"]
    assert cfg.topic_config("logs.slurm").decoder().key_format == "job/rank"
    assert cfg.topic_config("logs.k8s").decoder().key_format == "job"
    assert cfg.topic_config("logs.vector").max_record_bytes == 262_144
    assert cfg.metrics_listen() == ("0.0.0.0", 9464)


def test_kafka_client_chatter_is_rate_limited(capsys: pytest.CaptureFixture[str]) -> None:
    from rankwatch.logging_setup import setup_logging

    root, kafka = logging.getLogger(), logging.getLogger("aiokafka")
    handlers, level, kafka_level = root.handlers[:], root.level, kafka.level
    try:
        setup_logging("info")
        fetcher = logging.getLogger("aiokafka.consumer.fetcher")
        for node in range(50):
            fetcher.error("Failed fetch messages from %s: %s", node, "NodeNotReadyError")
        logging.getLogger("rankwatch.daemon").info("one")
        logging.getLogger("rankwatch.daemon").info("two")
        err = capsys.readouterr().err
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        kafka.setLevel(kafka_level)
    assert err.count("Failed fetch messages") == 1
    assert "one" in err and "two" in err


def consumer_record(offset: int, value: bytes) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord("logs", 0, offset, 1_000, 0, None, value, None, -1, len(value), ())


def test_jobs_named_only_in_values_are_mapped_to_their_partition(catalog: Any) -> None:
    from rankwatch.daemon.engine_worker import EngineWorker
    from rankwatch.engine import Decoder, Engine

    worker = EngineWorker(Engine(catalog))
    try:
        dec = Decoder("canonical")
        values = [orjson.dumps({"job": f"value-only-{i}", "line": "INFO ok"}) for i in range(3)]
        recs = [consumer_record(i, v) for i, v in enumerate(values)]
        batches = [
            (dec, "logs/1", recs[:2], "job"),
            (dec, "logs/3", recs[2:] + recs[:1], "job"),
        ]
        worker._feed_many(batches)
        seen = worker.take_new_jobs()
        assert seen == [("logs/1", ["value-only-0", "value-only-1"]), ("logs/3", ["value-only-2"])]
        assert worker.take_new_jobs() == []
        jm = JobMap()
        for origin, jobs in seen:
            tp = partition_of_origin(origin)
            assert tp is not None
            jm.note_jobs(tp, jobs)
        assert jm.partitions_of("value-only-2") == {TopicPartition("logs", 3)}
        lost = jm.jobs_lost({TopicPartition("logs", 1)}, {TopicPartition("logs", 3)})
        assert set(lost) == {"value-only-0", "value-only-1"}
    finally:
        worker.close()


def test_urls_bracket_ipv6_hosts() -> None:
    """Probe F24: the daemon logged `metrics on http://::1:29473/metrics`."""
    assert http_url("::1", 29473, "/metrics") == "http://[::1]:29473/metrics"
    assert http_url("[::1]", 80) == "http://[::1]:80"
    assert http_url("10.0.0.1", 9464, "/metrics") == "http://10.0.0.1:9464/metrics"
