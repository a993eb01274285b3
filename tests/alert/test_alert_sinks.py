"""The sinks against real local HTTP servers: a PagerDuty Events API v2 stand-in that enforces
the request schema and answers 202, 429 and 500 as scripted, and a webhook receiver. Checks
retries and their budget, that a failing alert does not hold up the others, dedup keys, HMAC
signatures, the Slack text, and that secrets reach neither logs nor /metrics."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import pytest

from alert_services import PagerDuty, Receiver, serving
from daemon_fixtures import free_port, parse_metrics
from rankwatch.alert.config import load_alert_config
from rankwatch.alert.service import AlertService

ROUTING_KEY = "R0UT1NGKEY0123456789abcdefABCDEF"
WEBHOOK_SECRET = "w3bh00k-s3cr3t-value"
FAST = {"sink_backoff_ms": 20, "sink_backoff_max_ms": 200, "sink_timeout_ms": 5000}


@pytest.fixture(scope="module")
def diagnoses(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    import fleetgen
    from conftest import analyze_dir
    from rankwatch import Catalog

    root = tmp_path_factory.mktemp("jobs")
    out = []
    for scenario, seed in (("cuda_error", 11), ("wrong_iface", 12)):
        job = f"{scenario}-{seed}"
        fleetgen.generate(scenario, root / job, ranks=16, seed=seed, job=job)
        found, _ = analyze_dir(root / job, Catalog())
        assert len(found) == 1
        out.append(found[0])
    return out


def run_service(
    settings: dict[str, Any], body: Callable[[AlertService], Awaitable[Any]]
) -> tuple[Any, dict[str, float], bytes]:
    """Starts the sinks of a service configured by `settings`, runs `body`, stops; returns
    (what body returned, parsed /metrics, raw /metrics)."""
    cfg = load_alert_config(
        overrides={"http_addr": f"127.0.0.1:{free_port()}", **FAST, **settings}, environ={}
    )
    service = AlertService(cfg)

    async def go() -> Any:
        await service.start_sinks()
        try:
            return await body(service)
        finally:
            for sink in service._sinks():
                await sink.stop()
            assert service.session is not None
            await service.session.close()

    result = asyncio.run(go())
    raw = service.metrics.render()
    return result, parse_metrics(raw.decode()), raw


async def deliver(service: AlertService, d: dict[str, Any]) -> list[bool]:
    return list(await asyncio.gather(*await service.dispatch(d)))


def test_pagerduty_retries_429_and_500_then_is_accepted(diagnoses: list[dict[str, Any]]) -> None:
    d = diagnoses[0]
    pd = PagerDuty(statuses=[429, 500])
    with serving(pd.app()) as server:
        settings = {
            "pagerduty_url": f"{server.url}/v2/enqueue",
            "pagerduty_routing_key": ROUTING_KEY,
            "page_url": "https://rankwatch.example/",
        }
        result, m, _ = run_service(settings, lambda s: deliver(s, d))
    assert result == [True]
    assert pd.invalid == [] and pd.requests == 3 and len(pd.accepted) == 1
    event = pd.accepted[0]
    assert event["event_action"] == "trigger" and event["dedup_key"] == d["id"]
    payload = event["payload"]
    assert payload["source"] == d["root_cause"]["host"]
    assert payload["severity"] == d["signature"]["severity"]
    assert d["job"] in payload["summary"] and len(payload["summary"]) < 1024
    details = payload["custom_details"]
    assert details["root_cause"]["line"] == d["root_cause"]["line"]
    assert details["root_cause"]["rank"] == d["root_cause"]["rank"]
    assert details["collateral"].startswith(f"{d['collateral_rank_count']} ranks")
    assert details["fix"] == d["fix"] and details["verify"] == d["verify"]
    link = f"https://rankwatch.example/incidents/{d['id']}"
    assert details["incident_page"] == link and event["links"][0]["href"] == link
    assert m['rankwatch_alert_sent_total{sink="pagerduty"}'] == 1
    assert m['rankwatch_alert_retried_total{sink="pagerduty"}'] == 2
    assert m['rankwatch_alert_failed_total{sink="pagerduty"}'] == 0
    assert m['rankwatch_alert_request_seconds_count{sink="pagerduty"}'] == 3


def test_an_update_retriggers_the_same_dedup_key_and_long_summaries_are_clipped(
    diagnoses: list[dict[str, Any]],
) -> None:
    d = diagnoses[1]
    update = copy.deepcopy(d)
    update["summary"] = "x" * 5000
    update["collateral_rank_count"] = 7
    pd = PagerDuty()

    async def body(service: AlertService) -> list[bool]:
        return await deliver(service, d) + await deliver(service, update)

    with serving(pd.app()) as server:
        settings = {
            "pagerduty_url": f"{server.url}/v2/enqueue",
            "pagerduty_routing_key": ROUTING_KEY,
        }
        result, _, _ = run_service(settings, body)
    assert result == [True, True] and pd.invalid == []
    assert [e["dedup_key"] for e in pd.accepted] == [d["id"], d["id"]]
    assert [e["event_action"] for e in pd.accepted] == ["trigger", "trigger"]
    assert len(pd.accepted[1]["payload"]["summary"]) <= 1024


def test_an_alert_past_its_retry_budget_is_counted_logged_and_blocks_nothing(
    diagnoses: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    bad, good = diagnoses
    pd = PagerDuty(failing_keys={bad["id"]})

    async def body(service: AlertService) -> tuple[bool, bool, str]:
        (bad_done,) = await service.dispatch(bad)
        (good_done,) = await service.dispatch(good)
        first, _ = await asyncio.wait({bad_done, good_done}, return_when=asyncio.FIRST_COMPLETED)
        order = "good first" if good_done in first else "bad first"
        return await bad_done, await good_done, order

    caplog.set_level(logging.INFO, logger="rankwatch.alert")
    with serving(pd.app()) as server:
        settings = {
            "pagerduty_url": f"{server.url}/v2/enqueue",
            "pagerduty_routing_key": ROUTING_KEY,
            "sink_attempts": 4,
            "sink_backoff_ms": 300,
            "sink_backoff_max_ms": 1000,
        }
        result, m, raw = run_service(settings, body)
    assert result == (False, True, "good first")
    assert [e["dedup_key"] for e in pd.accepted] == [good["id"]]
    assert m['rankwatch_alert_failed_total{sink="pagerduty"}'] == 1
    assert m['rankwatch_alert_retried_total{sink="pagerduty"}'] == 3
    assert m['rankwatch_alert_sent_total{sink="pagerduty"}'] == 1
    given_up = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(given_up) == 1 and bad["id"] in given_up[0] and "NOT delivered" in given_up[0]
    assert ROUTING_KEY not in caplog.text and ROUTING_KEY.encode() not in raw


def test_a_refused_event_is_not_retried(diagnoses: list[dict[str, Any]]) -> None:
    pd = PagerDuty()
    with serving(pd.app()) as server:
        settings = {"pagerduty_url": f"{server.url}/v2/enqueue", "pagerduty_routing_key": "short"}
        result, m, _ = run_service(settings, lambda s: deliver(s, diagnoses[0]))
    assert result == [False] and pd.requests == 1
    assert pd.invalid == [["routing_key must be a 32-character integration key"]]
    assert m['rankwatch_alert_retried_total{sink="pagerduty"}'] == 0
    assert m['rankwatch_alert_failed_total{sink="pagerduty"}'] == 1


def test_webhook_json_is_signed_and_slack_mode_sends_text(
    diagnoses: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    d = diagnoses[0]
    caplog.set_level(logging.DEBUG, logger="rankwatch.alert")
    hook, slack = Receiver(statuses=[503]), Receiver()
    with serving(hook.app()) as a, serving(slack.app()) as b:
        signed = {"webhook_url": [f"{a.url}/hook"], "webhook_secret": WEBHOOK_SECRET}
        result, m, raw = run_service(signed, lambda s: deliver(s, d))
        assert result == [True]
        text = {"webhook_url": [f"{b.url}/slack"], "webhook_format": "slack"}
        result, _, _ = run_service(text, lambda s: deliver(s, d))
        assert result == [True]
    assert len(hook.received) == 2  # 503, then accepted
    last = hook.received[-1]
    sent = orjson.loads(last.body)
    assert sent.pop("incident_page").endswith(f"/incidents/{d['id']}") and sent == d
    want = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), last.body, hashlib.sha256).hexdigest()
    assert last.headers["X-Rankwatch-Signature"] == want
    assert m['rankwatch_alert_retried_total{sink="webhook-1"}'] == 1
    (msg,) = slack.received
    assert "X-Rankwatch-Signature" not in msg.headers
    body = msg.json()
    assert set(body) == {"text"}
    assert d["root_cause"]["line"] in body["text"] and f"/incidents/{d['id']}|" in body["text"]
    assert WEBHOOK_SECRET not in caplog.text and WEBHOOK_SECRET.encode() not in raw


def test_connection_errors_are_retried_then_counted(diagnoses: list[dict[str, Any]]) -> None:
    closed = f"http://127.0.0.1:{free_port()}/hook"
    settings = {"webhook_url": [closed], "sink_attempts": 3}
    result, m, _ = run_service(settings, lambda s: deliver(s, diagnoses[0]))
    assert result == [False]
    assert m['rankwatch_alert_retried_total{sink="webhook-1"}'] == 2
    assert m['rankwatch_alert_failed_total{sink="webhook-1"}'] == 1
    assert m['rankwatch_alert_sent_total{sink="webhook-1"}'] == 0


def test_a_full_queue_gives_the_alert_up_at_once_counted_and_logged(
    diagnoses: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    first, second = diagnoses
    third = {**first, "id": "rw-third", "summary": "third"}
    gate = threading.Event()
    hook = Receiver(gate=gate)

    async def body(service: AlertService) -> tuple[list[bool], list[bool]]:
        sink = service.webhooks[0][1]
        waiting = await service.dispatch(first)
        while sink.queue.qsize():  # the one worker took it and is held by the receiver
            await asyncio.sleep(0.01)
        waiting += await service.dispatch(second)  # fills the queue of one
        (dropped,) = await service.dispatch(third)
        at_once = [dropped.done() and dropped.result()]
        gate.set()
        return at_once, list(await asyncio.gather(*waiting))

    caplog.set_level(logging.INFO, logger="rankwatch.alert")
    with serving(hook.app()) as server:
        settings = {
            "webhook_url": [f"{server.url}/hook"],
            "sink_queue_size": 1,
            "sink_concurrency": 1,
        }
        (at_once, results), m, _ = run_service(settings, body)
    assert at_once == [False] and results == [True, True]
    assert [r.json()["id"] for r in hook.received] == [first["id"], second["id"]]
    assert m['rankwatch_alert_dropped_total{sink="webhook-1"}'] == 1
    assert m['rankwatch_alert_failed_total{sink="webhook-1"}'] == 1
    assert m['rankwatch_alert_sent_total{sink="webhook-1"}'] == 2
    assert m['rankwatch_alert_queue_depth{sink="webhook-1"}'] == 0
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["sink webhook-1: alert rw-third NOT delivered: queue full (1)"]


def test_an_echoing_error_body_shows_neither_the_routing_key_nor_more_than_a_line(
    diagnoses: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    # A proxy's error page that echoes the request, then streams on (64 MiB): the log shows
    # a short excerpt with the key masked, and delivery does not read the rest.
    from aiohttp import web

    async def echo(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=400)
        await resp.prepare(request)
        await resp.write(await request.read())
        for _ in range(64):
            await resp.write(b"x" * (1 << 20))
        return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", echo)
    caplog.set_level(logging.INFO, logger="rankwatch.alert")
    with serving(app) as server:
        settings = {
            "pagerduty_url": f"{server.url}/v2/enqueue",
            "pagerduty_routing_key": ROUTING_KEY,
        }
        result, m, _ = run_service(settings, lambda s: deliver(s, diagnoses[0]))
    assert result == [False]
    assert m['rankwatch_alert_failed_total{sink="pagerduty"}'] == 1
    assert ROUTING_KEY not in caplog.text
    (refused,) = [r.getMessage() for r in caplog.records if "NOT delivered" in r.getMessage()]
    assert "***" in refused and len(refused) < 600


def test_slack_text_shows_log_text_literally() -> None:
    from rankwatch.alert.content import slack_text
    from rankwatch.alert.received import typed

    d: dict[str, Any] = {
        "id": "rw-1|x",
        "job": "j",
        "signature": {"title": "t"},
        "root_cause": {"line": "NCCL WARN <!channel> connect to 10.0.0.1<2311> & <@U01>"},
        "collateral": [],
    }
    text = slack_text(typed(d), "https://rw.example/incidents/rw-1%7Cx")
    assert "<!channel>" not in text and "<@U01>" not in text
    assert "&lt;!channel&gt; connect to 10.0.0.1&lt;2311&gt; &amp; &lt;@U01&gt;" in text
    assert text.endswith("<https://rw.example/incidents/rw-1%7Cx|Incident rw-1/x>")


def test_a_diagnosis_older_than_the_ttl_is_counted_and_warned_not_alerted(
    diagnoses: list[dict[str, Any]], caplog: pytest.LogCaptureFixture
) -> None:
    import time

    hook = Receiver()
    with serving(hook.app()) as server:
        settings = {"webhook_url": [f"{server.url}/hook"], "alert_ttl_ms": 60_000}
        old_ms = int(time.time() * 1000) - 3_600_000

        async def read_old(s: AlertService) -> list[Any]:
            return await s.handle_record(orjson.dumps(diagnoses[0]), old_ms)

        futures, m, _ = run_service(settings, read_old)
    assert futures == [] and hook.received == []
    assert m["rankwatch_alert_stale_diagnoses_total"] == 1
    assert any(
        r.levelno == logging.WARNING and "not alerted" in r.getMessage() for r in caplog.records
    )
