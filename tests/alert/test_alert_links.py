"""Alerts link to their incident page: `--page-url` (where people reach the pages `rankwatch
alert` serves, e.g. behind an ingress) or else the address the pages are served on gives every
sink (webhook JSON, Slack text, PagerDuty, Alertmanager) the page's URL; with no pages served
and no page URL, no sink invents one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from alert_services import DIAGNOSIS
from rankwatch.alert import sinks
from rankwatch.alert.config import AlertConfig, load_alert_config
from rankwatch.alert.service import AlertService
from rankwatch.cli import build_parser

PAGE = "https://rankwatch.example/ops"
LINK = f"{PAGE}/incidents/{DIAGNOSIS['id']}"


def bodies(cfg: AlertConfig) -> dict[str, Any]:
    """What each kind of sink would send for DIAGNOSIS under `cfg`."""
    link = AlertService(cfg).link(DIAGNOSIS["id"])
    webhook = sinks.webhook_request("https://hook.example", DIAGNOSIS, link, secret=None)
    slack = sinks.webhook_request("https://hook.example", DIAGNOSIS, link, secret=None, fmt="slack")
    pagerduty = sinks.pagerduty_request("https://pd.example", DIAGNOSIS, "key", link)
    (alert,) = sinks.FiringSet(resend_s=60, ttl_s=600).update(DIAGNOSIS, link)
    return {
        "webhook": orjson.loads(webhook.body),
        "slack": orjson.loads(slack.body)["text"],
        "pagerduty": orjson.loads(pagerduty.body),
        "alertmanager": alert,
    }


def test_page_url_is_the_documented_name_and_external_url_still_works(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    for flag in ("--page-url", "--external-url"):
        args = parser.parse_args(["alert", flag, PAGE])
        cfg = load_alert_config(overrides={"page_url": args.page_url}, environ={})
        assert cfg.page_base() == PAGE
    with pytest.raises(SystemExit):
        parser.parse_args(["alert", "--help"])
    assert "--page-url URL, --external-url URL" in capsys.readouterr().out
    old_file = tmp_path / "alert.toml"
    old_file.write_text(f'external_url = "{PAGE}"\n')
    assert load_alert_config(old_file, environ={}).page_url == PAGE
    env = {"RANKWATCH_EXTERNAL_URL": "https://old.example", "RANKWATCH_PAGE_URL": PAGE}
    assert load_alert_config(environ=env).page_url == PAGE  # the documented name wins
    assert load_alert_config(environ={"RANKWATCH_EXTERNAL_URL": PAGE}).page_url == PAGE


def test_every_sink_carries_the_incident_page() -> None:
    got = bodies(load_alert_config(overrides={"page_url": PAGE + "/"}, environ={}))
    assert got["webhook"]["incident_page"] == LINK
    assert got["webhook"]["id"] == DIAGNOSIS["id"]  # still the diagnosis itself
    assert f"<{LINK}|Incident {DIAGNOSIS['id']}>" in got["slack"]
    assert got["pagerduty"]["links"] == [
        {"href": LINK, "text": f"rankwatch incident {DIAGNOSIS['id']}"}
    ]
    assert got["pagerduty"]["client_url"] == LINK
    assert got["pagerduty"]["payload"]["custom_details"]["incident_page"] == LINK
    assert got["alertmanager"]["generatorURL"] == LINK


def test_pages_served_without_a_page_url_are_linked_at_their_address() -> None:
    cfg = load_alert_config(overrides={"http_addr": "127.0.0.1:9999"}, environ={})
    got = bodies(cfg)
    link = f"http://127.0.0.1:9999/incidents/{DIAGNOSIS['id']}"
    assert got["webhook"]["incident_page"] == link
    assert got["alertmanager"]["generatorURL"] == link


def test_no_page_served_and_no_page_url_means_no_link() -> None:
    cfg = load_alert_config(
        overrides={"http_addr": "off", "webhook_url": ["https://hook.example"]}, environ={}
    )
    got = bodies(cfg)
    assert "incident_page" not in got["webhook"]
    assert "/incidents/" not in got["slack"]
    assert "links" not in got["pagerduty"] and "client_url" not in got["pagerduty"]
    assert "generatorURL" not in got["alertmanager"]
