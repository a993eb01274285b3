"""End to end with real components: the dev Kafka broker, `rankwatch run`, `rankwatch alert`
with its Alertmanager sink pointed at an HA pair (one address down, one real Alertmanager whose
receiver is a local webhook) and its PagerDuty sink at the schema-checking stand-in. A failing
job replayed among healthy ones must give exactly one alert group at the receiver, with the
diagnosis's labels and annotations and a link to its incident page."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from alert_services import (
    Alertmanager,
    AlertProcess,
    PagerDuty,
    Receiver,
    alertmanager_binary,
    reap_alert_processes,
    serving,
)
from conftest import analyze_dir
from daemon_fixtures import (
    Daemon,
    committed_offsets,
    end_offsets,
    free_port,
    read_topic,
    wait_for,
    wait_settled,
)
from rankwatch import Catalog
from test_daemon_kafka import make_fleet, produce, replay

ROUTING_KEY = "e2eR0UT1NGKEY0123456789abcdefABC"


@pytest.fixture(autouse=True)
def no_member_left_running() -> Iterator[None]:
    yield
    reap_alert_processes()


def healthy(member: AlertProcess) -> bool:
    return found(member, "/healthz")


def owns_partitions(member: AlertProcess) -> bool:
    return found(member, "/readyz")


def found(member: AlertProcess, path: str) -> bool:
    try:
        return member.get(path)[0] == 200
    except OSError:
        return False


def caught_up(bootstrap: str, topic: str, group: str) -> bool:
    ends = end_offsets(bootstrap, topic)
    done = committed_offsets(bootstrap, topic, group)
    return all(done.get(p, 0) >= e for p, e in ends.items() if e > 0)


def test_a_failing_job_among_healthy_ones_gives_one_alert_group(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    if alertmanager_binary() is None:
        pytest.skip("prometheus-alertmanager not found: run scripts/setup-test-services.sh")
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 51, "per-rank"),
            ("healthy", 52, "per-rank"),
            ("healthy_noisy", 53, "per-node"),
        ],
    )
    (failing,) = [job for job, t in truths.items() if t.expect_diagnosis]
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 2)
    run_group, alert_group = f"run-{uuid.uuid4().hex[:8]}", f"alert-{uuid.uuid4().hex[:8]}"
    hook, pd = Receiver(), PagerDuty(statuses=[500])
    with serving(hook.app()) as hook_server, serving(pd.app()) as pd_server:
        am = Alertmanager(tmp_path / "alertmanager", f"{hook_server.url}/alerts").start()
        try:
            alert = AlertProcess(
                [
                    *("--bootstrap-servers", daemon_kafka, "--topic", out),
                    *("--group-id", alert_group),
                    *("--alertmanager-url", f"http://127.0.0.1:{free_port()}"),
                    *("--alertmanager-url", am.url),
                    *("--pagerduty-url", f"{pd_server.url}/v2/enqueue"),
                    *("--sink-attempts", "3", "--sink-backoff-ms", "50"),
                    *("--alert-resend-ms", "1000"),
                    *("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500"),
                ],
                log=tmp_path / "alert.log",
                env={"RANKWATCH_PAGERDUTY_ROUTING_KEY": ROUTING_KEY},
            ).start()
            daemon = daemon_factory("run", topic=[logs], output_topic=out, group_id=run_group)
            daemon.start()
            replay(daemon_kafka, logs, [tmp_path / "fleet" / job for job in truths])
            wait_settled(daemon_kafka, [logs], run_group, [daemon])
            wait_for(
                "rankwatch alert to commit every diagnosis",
                lambda: caught_up(daemon_kafka, out, alert_group),
                context=alert.log_text,
            )
            wait_for(
                "the receiver to be notified",
                lambda: hook.received,
                context=lambda: alert.log_text()[-3000:] + am.log_text(),
            )
            groups = am.get("/api/v2/alerts/groups")
            metrics = alert.metrics()
            pages, html = {}, {}
            for record in read_topic(daemon_kafka, out):
                did = record.json()["id"]
                pages[did] = alert.get(f"/incidents/{did}?format=json")
                html[did] = alert.get(f"/incidents/{did}")
            assert alert.stop() == 0
        finally:
            am.stop()
    check_alertmanager(groups, hook.bodies(), truths[failing], failing, alert.port, pages)
    assert metrics['rankwatch_alert_failed_total{sink="alertmanager-1"}'] >= 1
    assert metrics['rankwatch_alert_sent_total{sink="alertmanager-2"}'] >= 1
    assert metrics['rankwatch_alert_failed_total{sink="alertmanager-2"}'] == 0
    (did,) = pages
    assert html[did][0] == 200 and truths[failing].root_cause["line"] in html[did][1].decode()
    assert pd.invalid == [] and pd.accepted
    assert {e["dedup_key"] for e in pd.accepted} == {did}
    assert metrics['rankwatch_alert_retried_total{sink="pagerduty"}'] >= 1
    log = alert.log_text()
    assert ROUTING_KEY not in log and not any(ROUTING_KEY in name for name in metrics)
    assert "Traceback" not in log


def check_alertmanager(
    groups: list[dict[str, Any]],
    notifications: list[dict[str, Any]],
    truth: Any,
    job: str,
    port: int,
    pages: dict[str, tuple[int, bytes]],
) -> None:
    (did,) = pages
    status, body = pages[did]
    assert status == 200
    diagnosis = orjson.loads(body)
    rc = truth.root_cause
    assert len(groups) == 1, groups
    (alert,) = groups[0]["alerts"]
    labels = alert["labels"]
    assert labels == {
        "alertname": "NCCLFailure",
        "job": job,
        "signature": rc["signature"],
        "subsystem": diagnosis["signature"]["subsystem"],
        "severity": diagnosis["signature"]["severity"],
        "host": rc["host"],
        "rank": str(rc["rank"]),
    }
    notes = alert["annotations"]
    assert notes["diagnosis_id"] == did
    assert notes["fix"] == diagnosis["fix"] and notes["verify"] == diagnosis["verify"]
    assert job in notes["summary"] and rc["line"] in notes["description"]
    assert alert["generatorURL"] == f"http://127.0.0.1:{port}/incidents/{did}"
    assert alert["status"]["state"] == "active"
    keys = {n["groupKey"] for n in notifications}
    assert len(keys) == 1, keys
    fingerprints = {a["fingerprint"] for n in notifications for a in n["alerts"]}
    assert fingerprints == {alert["fingerprint"]}
    assert all(n["status"] == "firing" for n in notifications)


def test_offsets_move_only_after_delivery_and_a_restart_delivers_again(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    """At-least-once: while the webhook keeps failing, nothing is committed and a stop does
    not commit either; the next `rankwatch alert` of the group delivers the diagnosis."""
    truths = make_fleet(tmp_path / "fleet", [("oom_kill", 61, "per-rank")])
    (job,) = truths
    (diagnosis,) = analyze_dir(tmp_path / "fleet" / job, Catalog())[0]
    topic, group = fresh_topics("diagnoses", 1), f"alert-{uuid.uuid4().hex[:8]}"
    produce(
        daemon_kafka, topic, [(b"not a diagnosis", b"{"), (job.encode(), orjson.dumps(diagnosis))]
    )
    hook = Receiver(statuses=[503] * 10_000)
    with serving(hook.app()) as server:
        args = [
            *("--bootstrap-servers", daemon_kafka, "--topic", topic, "--group-id", group),
            *("--webhook-url", f"{server.url}/hook", "--sink-attempts", "100000"),
            *("--sink-backoff-ms", "50", "--sink-backoff-max-ms", "100"),
        ]
        first = AlertProcess(args, log=tmp_path / "alert-1.log").start()
        wait_for("the webhook to be retried", lambda: len(hook.received) >= 3)
        assert committed_offsets(daemon_kafka, topic, group) == {}
        metrics = first.metrics()
        assert metrics['rankwatch_alert_retried_total{sink="webhook-1"}'] >= 2
        assert metrics["rankwatch_alert_invalid_records_total"] == 1
        assert first.stop() == 0
        assert committed_offsets(daemon_kafka, topic, group) == {}

        with hook.lock:
            hook.statuses.clear()
            tried = len(hook.received)
        second = AlertProcess(args, log=tmp_path / "alert-2.log").start()
        wait_for(
            "the restarted member to deliver and commit",
            lambda: caught_up(daemon_kafka, topic, group),
            context=second.log_text,
        )
        metrics = second.metrics()
        assert second.stop() == 0
    assert metrics['rankwatch_alert_sent_total{sink="webhook-1"}'] == 1
    assert [without_page(r.json()) for r in hook.received[tried:]] == [diagnosis]


def without_page(body: dict[str, Any]) -> dict[str, Any]:
    """A webhook body less the incident page's URL the deliverer adds to the diagnosis."""
    page = body.pop("incident_page")
    assert page.endswith(f"/incidents/{body['id']}"), page
    return body


def test_a_hung_sink_holds_back_neither_the_other_sinks_nor_later_alerts(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    """One webhook never answers; the other gets every alert, a later one included, while
    the first is still retrying. Offsets wait for both (at-least-once)."""
    truths = make_fleet(tmp_path / "fleet", [("oom_kill", 62, "per-rank")])
    (job,) = truths
    (diagnosis,) = analyze_dir(tmp_path / "fleet" / job, Catalog())[0]
    later = {**diagnosis, "id": diagnosis["id"] + "-later", "job": job + "-later"}
    topic, group = fresh_topics("diagnoses", 1), f"alert-{uuid.uuid4().hex[:8]}"
    produce(daemon_kafka, topic, [(job.encode(), orjson.dumps(diagnosis))])
    hung = Receiver(gate=threading.Event())
    ok = Receiver()
    with serving(hung.app()) as dead, serving(ok.app()) as live:
        args = [
            *("--bootstrap-servers", daemon_kafka, "--topic", topic, "--group-id", group),
            *("--webhook-url", f"{dead.url}/hook", "--webhook-url", f"{live.url}/hook"),
            *("--sink-attempts", "100000", "--sink-timeout-ms", "500"),
            *("--sink-backoff-ms", "50", "--sink-backoff-max-ms", "100"),
        ]
        member = AlertProcess(args, log=tmp_path / "alert.log").start()
        try:
            wait_for("the first alert at the live sink", lambda: len(ok.bodies()) == 1)
            produce(daemon_kafka, topic, [(later["job"].encode(), orjson.dumps(later))])
            wait_for(
                "the later alert at the live sink while the other still hangs",
                lambda: len(ok.bodies()) == 2,
                context=member.log_text,
            )
            metrics = member.metrics()
            assert metrics['rankwatch_alert_sent_total{sink="webhook-2"}'] == 2
            assert metrics.get('rankwatch_alert_sent_total{sink="webhook-1"}', 0) == 0
            assert committed_offsets(daemon_kafka, topic, group) == {}
            assert member.stop() == 0
        finally:
            hung.gate.set()
    assert [b["id"] for b in ok.bodies()] == [diagnosis["id"], later["id"]]


def test_a_restarted_member_keeps_telling_alertmanager_what_fires(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    """The firing set lives in memory; after a restart the member takes back the incidents
    that are still fresh from the topic, or Alertmanager would resolve them."""
    truths = make_fleet(tmp_path / "fleet", [("oom_kill", 63, "per-rank")])
    (job,) = truths
    (diagnosis,) = analyze_dir(tmp_path / "fleet" / job, Catalog())[0]
    topic, group = fresh_topics("diagnoses", 1), f"alert-{uuid.uuid4().hex[:8]}"
    produce(daemon_kafka, topic, [(job.encode(), orjson.dumps(diagnosis))])
    am = Receiver()

    def sent_ids() -> list[str]:
        return [a["annotations"]["diagnosis_id"] for body in am.bodies() for a in body]

    with serving(am.app()) as server:
        args = [
            *("--bootstrap-servers", daemon_kafka, "--topic", topic, "--group-id", group),
            *("--alertmanager-url", server.url, "--alert-resend-ms", "500"),
        ]
        first = AlertProcess(args, log=tmp_path / "alert-1.log").start()
        wait_for("a re-send", lambda: sent_ids().count(diagnosis["id"]) >= 2)
        wait_for("the commit", lambda: caught_up(daemon_kafka, topic, group))
        assert first.stop() == 0
        before = len(sent_ids())
        second = AlertProcess(args, log=tmp_path / "alert-2.log").start()
        wait_for(
            "the restarted member to re-send",
            lambda: diagnosis["id"] in sent_ids()[before:],
            context=second.log_text,
        )
        assert second.stop() == 0


def test_every_member_serves_every_incident_page(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    """Alerts link to any member (behind a load balancer): the one without partitions of the
    group serves the pages too, from its group-less reader."""
    truths = make_fleet(tmp_path / "fleet", [("cuda_oom", 71, "per-rank")])
    (job,) = truths
    (diagnosis,) = analyze_dir(tmp_path / "fleet" / job, Catalog())[0]
    topic, group = fresh_topics("diagnoses", 1), f"alert-{uuid.uuid4().hex[:8]}"
    hook = Receiver()
    with serving(hook.app()) as server:
        args = [
            *("--bootstrap-servers", daemon_kafka, "--topic", topic, "--group-id", group),
            *("--webhook-url", f"{server.url}/hook"),
        ]
        members = [AlertProcess(args, log=tmp_path / f"alert-{i}.log").start() for i in (1, 2)]
        wait_for("a member to own the partition", lambda: any(owns_partitions(m) for m in members))
        produce(daemon_kafka, topic, [(job.encode(), orjson.dumps(diagnosis))])
        path = f"/incidents/{diagnosis['id']}?format=json"
        for m in members:
            wait_for("the page on every member", lambda m=m: found(m, path), context=m.log_text)
            assert orjson.loads(m.get(path)[1]) == diagnosis
        # The member without a partition is alive (no restart would help it), not assigned.
        assert all(healthy(m) for m in members)
        # each member learns its assignment on its next fetch: a rebalance settles first
        wait_for("one member to own the partition", lambda: sum(map(owns_partitions, members)) == 1)
        wait_for("the delivery", lambda: caught_up(daemon_kafka, topic, group))
        assert [m.stop() for m in members] == [0, 0]
    assert [without_page(r.json()) for r in hook.received] == [diagnosis]
