"""`rankwatch alert` without Kafka: its configuration (file, environment, flags; secrets
masked), the alert content, Alertmanager's re-send and expiry bookkeeping, bad records, and the
command's one-line errors."""

from __future__ import annotations

import asyncio
import copy
import socket
from pathlib import Path
from typing import Any

import orjson
import pytest

from alert_services import DIAGNOSIS
from rankwatch.alert import content
from rankwatch.alert.config import ConfigError, load_alert_config
from rankwatch.alert.received import typed
from rankwatch.alert.service import AlertService
from rankwatch.alert.sinks import FiringSet, alertmanager_endpoint, iso
from rankwatch.cli import main


def test_flags_win_over_environment_over_file(tmp_path: Path) -> None:
    cfg_file = tmp_path / "alert.toml"
    cfg_file.write_text(
        'topic = "from-file"\ngroup_id = "file-group"\nsink_attempts = 2\n'
        'alertmanager_url = ["http://am-a:9093", "http://am-b:9093"]\n'
    )
    env = {"RANKWATCH_ALERT_GROUP_ID": "env-group", "RANKWATCH_SINK_ATTEMPTS": "5"}
    cfg = load_alert_config(cfg_file, overrides={"sink_attempts": 9}, environ=env)
    assert (cfg.topic, cfg.group_id, cfg.sink_attempts) == ("from-file", "env-group", 9)
    assert load_alert_config(cfg_file, environ=env).sink_attempts == 5
    assert cfg.alertmanager_url == ["http://am-a:9093", "http://am-b:9093"]
    assert alertmanager_endpoint("http://am/prefix/") == "http://am/prefix/api/v2/alerts"


def test_the_shipped_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "python/rankwatch/alert/example.toml"
    cfg = load_alert_config(example, environ={})
    assert len(cfg.alertmanager_url) == 2 and cfg.pagerduty_routing_key is None
    assert cfg.page_base() == "https://rankwatch.example.com"


def test_links_name_a_reachable_host() -> None:
    assert load_alert_config(environ={}).page_base() == "http://127.0.0.1:9465"
    wide = load_alert_config(overrides={"http_addr": "0.0.0.0:80"}, environ={})
    assert wide.page_base() == f"http://{socket.getfqdn()}:80"
    v6 = load_alert_config(overrides={"http_addr": "[::1]:9465"}, environ={})
    assert v6.page_base() == "http://[::1]:9465"


def test_the_daemons_topic_and_group_in_a_shared_environment_are_not_taken() -> None:
    daemon_env = {
        "RANKWATCH_TOPIC": "training-logs",
        "RANKWATCH_GROUP_ID": "rankwatch",
        "RANKWATCH_BOOTSTRAP_SERVERS": "kafka-1:9092",
    }
    cfg = load_alert_config(environ=daemon_env)
    assert (cfg.topic, cfg.group_id) == ("rankwatch.diagnoses", "rankwatch-alert")
    assert cfg.bootstrap_servers == "kafka-1:9092"  # the same connection is shared


def test_secrets_and_url_credentials_are_masked(tmp_path: Path) -> None:
    env = {
        "RANKWATCH_PAGERDUTY_ROUTING_KEY": "pd-routing-key-secret",
        "RANKWATCH_WEBHOOK_SECRET": "hmac-secret",
        "RANKWATCH_WEBHOOK_URL": "https://user:pw@hooks.example/T0?token=tok",
    }
    cfg = load_alert_config(environ=env)
    shown = repr(cfg) + orjson.dumps(cfg.describe()).decode()
    for secret in ("pd-routing-key-secret", "hmac-secret", "pw", "token=tok", "T0"):
        assert secret not in shown
    assert "https://hooks.example/..." in shown


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"sink_attiempts": 3}, "unknown option"),
        ({"webhook_url": ["ftp://x"]}, r"expected an http\(s\) URL"),
        ({"webhook_url": ["http://hook:99999/x"]}, "not a valid URL"),
        ({"webhook_url": ["http://hook:abc/x"]}, "not a valid URL"),
        ({"alertmanager_url": ["http://[fe80::1/x"]}, "not a valid URL"),
        ({"webhook_url": ["http://a..b/x"]}, r"expected an http\(s\) URL"),
        ({"sink_attempts": 0}, "must be at least 1"),
        ({"http_addr": "off"}, "nothing to do"),
        ({"webhook_format": "xml"}, "not one of json, slack"),
    ],
)
def test_bad_settings_name_the_problem(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_alert_config(overrides=settings, environ={})


def test_unknown_file_key_suggests_the_right_one(tmp_path: Path) -> None:
    cfg_file = tmp_path / "a.toml"
    cfg_file.write_text("alertmanager_urls = []\n")
    with pytest.raises(ConfigError, match="did you mean 'alertmanager_url'"):
        load_alert_config(cfg_file, environ={})


def test_the_command_reports_bad_configuration_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["alert", "--http-addr", "off"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rankwatch: nothing to do") and err.count("\n") == 1
    assert main(["alert", "--webhook-url", "not a url"]) == 2


def test_labels_and_annotations() -> None:
    labels = content.alert_labels(typed(DIAGNOSIS))
    assert labels == {
        "alertname": "NCCLFailure",
        "job": "llama-7b",
        "signature": "pt_cuda_error",
        "subsystem": "cuda",
        "severity": "critical",
        "host": "node-002",
        "rank": "3",
    }
    notes = content.alert_annotations(typed(DIAGNOSIS))
    assert notes["diagnosis_id"] == DIAGNOSIS["id"]
    assert notes["summary"] == "llama-7b: rank 3 on node-002: CUDA error raised on a rank"
    assert "RuntimeError: CUDA error" in notes["description"]
    assert "5 ranks: 0-2,4-5" in notes["description"]
    unknown = copy.deepcopy(DIAGNOSIS)
    unknown["root_cause"] = {"rank": None, "host": None}
    unknown["signature"]["severity"] = "fatal"
    labels = content.alert_labels(typed(unknown))
    assert "rank" not in labels and labels["host"] == "unknown"
    assert labels["severity"] == "error"


def test_firing_alerts_are_resent_then_sent_resolved_once_they_expire() -> None:
    firing = FiringSet(resend_s=60, ttl_s=600)
    t0 = 1_800_000_000.0
    (alert,) = firing.update(DIAGNOSIS, "http://x/incidents/rw", now=t0)
    assert alert["startsAt"] == DIAGNOSIS["incident"]["start"]
    assert alert["endsAt"] == iso(t0 + 240)
    (alert,), expired = firing.due(now=t0 + 60)
    assert expired == [] and alert["endsAt"] == iso(t0 + 60 + 240)
    assert alert["generatorURL"] == "http://x/incidents/rw"
    firing.update(DIAGNOSIS, "http://x/incidents/rw", now=t0 + 500)  # an update keeps it fresh
    (alert,), expired = firing.due(now=t0 + 900)
    assert expired == [] and alert["endsAt"] == iso(t0 + 1100)
    (alert,), expired = firing.due(now=t0 + 1100)
    assert expired == [DIAGNOSIS["id"]] and alert["endsAt"] == iso(t0 + 1100)
    assert alert["startsAt"] == DIAGNOSIS["incident"]["start"]
    assert firing.due(now=t0 + 1200) == ([], [])


def test_a_new_root_cause_resolves_the_alert_with_the_old_labels() -> None:
    firing = FiringSet(resend_s=60, ttl_s=600)
    t0 = 1_800_000_000.0
    firing.update(DIAGNOSIS, "http://x/incidents/rw", now=t0)
    same_labels = {**DIAGNOSIS, "fix": "Reseat the GPU."}
    (alert,) = firing.update(same_labels, "http://x/incidents/rw", now=t0 + 10)
    assert alert["annotations"]["fix"] == "Reseat the GPU."
    moved = {**DIAGNOSIS, "root_cause": {**DIAGNOSIS["root_cause"], "rank": 9, "host": "node-004"}}
    old, new = firing.update(moved, "http://x/incidents/rw", now=t0 + 20)
    assert (old["labels"]["rank"], old["endsAt"]) == ("3", iso(t0 + 20))
    assert (new["labels"]["rank"], new["labels"]["host"]) == ("9", "node-004")
    assert new["endsAt"] == iso(t0 + 20 + 240) and new["startsAt"] == old["startsAt"]
    (again,), _ = firing.due(now=t0 + 80)
    assert again["labels"]["rank"] == "9"


@pytest.mark.parametrize(
    "value", [b"", b"not json", b"[1, 2]", b'{"id": 5, "job": "j"}', b'{"id": "x", "job": ""}']
)
def test_records_that_are_not_diagnoses_are_counted_and_skipped(value: bytes) -> None:
    service = AlertService(load_alert_config(environ={}))
    futures = asyncio.run(service.handle_record(value, 0))
    assert futures == [] and len(service.store) == 0
    assert service.metrics.registry.get_sample_value("rankwatch_alert_invalid_records_total") == 1


def test_a_redelivered_version_is_shown_once_and_old_ones_only_shown() -> None:
    service = AlertService(load_alert_config(environ={}))
    value = orjson.dumps(DIAGNOSIS)
    assert asyncio.run(service.handle_record(value, 0)) == []  # too old to alert on
    assert service.store.get(DIAGNOSIS["id"]) == DIAGNOSIS
    assert service.store.put(copy.deepcopy(DIAGNOSIS)) is False


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("confidence", "abc", "not a number"),
        ("confidence", True, "not a number"),
        ("collateral", [1, 2], "not a list of objects"),
        ("suspects", {"rank": 1}, "not a list of objects"),
        ("preceding_lines", "a line", "not a list"),
    ],
)
def test_a_diagnosis_with_a_field_of_the_wrong_type_is_refused(
    field: str, value: Any, message: str
) -> None:
    from rankwatch.alert.content import BadDiagnosis, check_diagnosis

    good = {"id": "rw-1", "job": "j", "confidence": 0.9, "collateral": [{"ranks": "1-3"}]}
    assert check_diagnosis(dict(good)) == good
    with pytest.raises(BadDiagnosis, match=message):
        check_diagnosis({**good, field: value})


def test_a_restart_takes_back_fresh_incidents_without_sending_them() -> None:
    firing = FiringSet(resend_s=60, ttl_s=600)
    t0 = 1_800_000_000.0
    assert firing.restore(DIAGNOSIS, "http://x/incidents/rw", updated=t0 - 100, now=t0)
    stale = {**DIAGNOSIS, "id": "rw-old"}
    assert not firing.restore(stale, "http://x/incidents/rw-old", updated=t0 - 700, now=t0)
    assert not firing.restore(DIAGNOSIS, "http://x/incidents/rw", updated=t0, now=t0)
    (alert,), expired = firing.due(now=t0 + 60)
    assert expired == [] and alert["endsAt"] == iso(t0 + 60 + 240)
    # It expires from the time of its last version, not from the restart.
    (alert,), expired = firing.due(now=t0 + 500)
    assert expired == [DIAGNOSIS["id"]] and alert["endsAt"] == iso(t0 + 500)


def test_the_firing_set_keeps_the_most_recently_updated_incidents() -> None:
    firing = FiringSet(resend_s=60, ttl_s=600, limit=2)
    t0 = 1_800_000_000.0
    for i in range(3):
        firing.update({**DIAGNOSIS, "id": f"rw-{i}"}, "http://x", now=t0 + i)
    assert sorted(firing.firing) == ["rw-1", "rw-2"]


def test_a_diagnosis_with_odd_fields_still_alerts_and_is_forwarded_whole() -> None:
    """What check_diagnosis accepts is alerted on; a field of another type than the contract's
    reads as its default, and the webhook forwards the record as it came (a field a newer
    engine added included)."""
    from rankwatch.alert.received import receive
    from rankwatch.alert.sinks import webhook_request

    odd = {**DIAGNOSIS, "root_cause": {"rank": "3", "host": "node-2"}, "added_later": {"x": 1}}
    r = receive(copy.deepcopy(odd))
    labels = content.alert_labels(r.diagnosis)
    assert labels["host"] == "node-2" and "rank" not in labels
    body = webhook_request("https://hook.example", r, None, secret=None).body
    assert orjson.loads(body) == odd
    service = AlertService(load_alert_config(environ={}))
    assert asyncio.run(service.handle_record(orjson.dumps(odd), 0)) == []  # shown, too old
    assert service.store.get(DIAGNOSIS["id"]) == odd
    assert service.metrics.registry.get_sample_value("rankwatch_alert_invalid_records_total") == 0
