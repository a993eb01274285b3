"""The three kinds of sink: how a diagnosis becomes a request for Alertmanager, PagerDuty's
Events API v2 and a webhook. Delivery itself (queue, retries, metrics) is `delivery.Sink`."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from rankwatch import diagnosis as rd
from rankwatch.alert import content
from rankwatch.alert.delivery import Request
from rankwatch.alert.received import AnyDiagnosis, AnyReceived, received, typed

log = logging.getLogger("rankwatch.alert")

JSON = {"Content-Type": "application/json"}
SIGNATURE_HEADER = "X-Rankwatch-Signature"
ALERTMANAGER_PATH = "/api/v2/alerts"


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def started_at(d: rd.Diagnosis, fallback: float) -> str:
    start = d.incident.start
    if start:
        try:
            datetime.fromisoformat(start.replace("Z", "+00:00"))
            return start
        except ValueError:
            pass
    return iso(fallback)


# --- Alertmanager -----------------------------------------------------------------------------


def alertmanager_endpoint(base_url: str) -> str:
    """`/api/v2/alerts` under the base URL Prometheus would be configured with (which may carry
    a path prefix, e.g. behind a reverse proxy)."""
    return base_url.rstrip("/") + ALERTMANAGER_PATH


@dataclass
class Firing:
    """An incident Alertmanager is told about until it expires."""

    diagnosis: rd.Diagnosis
    link: str | None
    starts_at: str
    updated: float  # time.time() of the last version seen


def alertmanager_alert(f: Firing, ends_at: float) -> dict[str, Any]:
    alert = {
        "labels": content.alert_labels(f.diagnosis),
        "annotations": content.alert_annotations(f.diagnosis),
        "startsAt": f.starts_at,
        "endsAt": iso(ends_at),
    }
    if f.link:
        alert["generatorURL"] = f.link
    return alert


def alertmanager_request(url: str, alerts: list[dict[str, Any]]) -> Request:
    return Request(alertmanager_endpoint(url), orjson.dumps(alerts), JSON)


class FiringSet:
    """The incidents to re-send while fresh: Alertmanager resolves an alert whose `endsAt` has
    passed, so a client re-sends firing alerts with `endsAt` a few intervals ahead, and sends
    `endsAt` = now once when the incident expires (no update for `ttl_s`)."""

    def __init__(self, resend_s: float, ttl_s: float, limit: int = 10_000) -> None:
        self.resend_s = resend_s
        self.ttl_s = ttl_s
        # At most this many; past it the one updated longest ago is no longer re-sent (it
        # ends in Alertmanager at its last endsAt).
        self.limit = limit
        self.firing: dict[str, Firing] = {}

    def restore(
        self, d: AnyDiagnosis, link: str | None, updated: float, now: float | None = None
    ) -> bool:
        """Takes back an incident a restart forgot (read again from the topic, last updated
        at `updated`), if still fresh and not known: it is re-sent from the next round on, and
        nothing is sent now. True when taken."""
        d = typed(d)
        now = time.time() if now is None else now
        if d.id in self.firing or now - updated >= self.ttl_s:
            return False
        self.firing[d.id] = Firing(d, link, started_at(d, updated), updated)
        self._bound()
        return True

    def _bound(self) -> None:
        while len(self.firing) > self.limit:
            oldest = min(self.firing, key=lambda did: self.firing[did].updated)
            log.warning("firing set full (%d): %s is no longer re-sent", self.limit, oldest)
            del self.firing[oldest]

    def update(
        self, d: AnyDiagnosis, link: str | None, now: float | None = None
    ) -> list[dict[str, Any]]:
        """Records a new version of a diagnosis; returns the alerts to send now: the firing
        one, preceded by the previous version resolved if the update changed its labels (a
        new root cause is another Alertmanager alert; the old one must not linger)."""
        d = typed(d)
        now = time.time() if now is None else now
        old = self.firing.get(d.id)
        starts = old.starts_at if old else started_at(d, now)
        f = Firing(d, link, starts, now)
        self.firing[d.id] = f
        self._bound()
        out = []
        if old is not None and content.alert_labels(old.diagnosis) != content.alert_labels(d):
            out.append(alertmanager_alert(old, now))
        out.append(alertmanager_alert(f, self.ends_at(f, now)))
        return out

    def ends_at(self, f: Firing, now: float) -> float:
        return min(now + 4 * self.resend_s, f.updated + self.ttl_s)

    def due(self, now: float | None = None) -> tuple[list[dict[str, Any]], list[str]]:
        """(alerts to send now, ids that expired with this send and are forgotten)."""
        now = time.time() if now is None else now
        alerts: list[dict[str, Any]] = []
        expired: list[str] = []
        for did, f in list(self.firing.items()):
            if now - f.updated >= self.ttl_s:
                alerts.append(alertmanager_alert(f, now))
                expired.append(did)
                del self.firing[did]
            else:
                alerts.append(alertmanager_alert(f, self.ends_at(f, now)))
        return alerts, expired


# --- PagerDuty --------------------------------------------------------------------------------


def pagerduty_event(d: rd.Diagnosis, routing_key: str, link: str | None) -> dict[str, Any]:
    """A `trigger` event; `dedup_key` is the diagnosis id, so an update of the diagnosis
    updates the same PagerDuty alert instead of opening another."""
    rc, sig = d.root_cause, d.signature
    payload: dict[str, Any] = {
        "summary": content.clip(content.summary(d), content.PAGERDUTY_SUMMARY_MAX - 1),
        "source": rc.host or d.job,
        "severity": content.severity(d),
        "component": sig.subsystem or "unknown",
        "group": d.job,
        "class": sig.id or "unclassified",
        "custom_details": {
            "diagnosis_id": d.id,
            "job": d.job,
            "root_cause": {
                "rank": rc.rank,
                "host": rc.host,
                "device": rc.device,
                "line": rc.line,
                # null, as before the typed read, for a diagnosis without a signature
                "signature": sig.id or None,
            },
            "collateral": content.collateral_text(d),
            "cause": d.cause,
            "fix": d.fix,
            "verify": d.verify,
            "incident_page": link,
        },
    }
    start = started_at(d, 0.0)
    if not start.startswith("1970"):
        payload["timestamp"] = start
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": d.id,
        "payload": payload,
        "client": "rankwatch",
    }
    if link:
        event["links"] = [{"href": link, "text": f"rankwatch incident {d.id}"}]
        event["client_url"] = link
    return event


def pagerduty_request(url: str, d: AnyDiagnosis, routing_key: str, link: str | None) -> Request:
    event = orjson.dumps(pagerduty_event(typed(d), routing_key, link))
    return Request(url, event, JSON, secrets=(routing_key,))


# --- webhook ----------------------------------------------------------------------------------


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_request(
    url: str, d: AnyReceived, link: str | None, *, secret: str | None, fmt: str = "json"
) -> Request:
    """The diagnosis JSON as published with its page's URL as `incident_page` (or
    `{"text": ...}` for Slack-compatible receivers), signed with HMAC-SHA256 of the body when
    a secret is set."""
    r = received(d)
    if fmt == "slack":
        body = orjson.dumps({"text": content.slack_text(r.diagnosis, link)})
    else:
        body = orjson.dumps({**r.doc, "incident_page": link} if link else r.doc)
    headers = dict(JSON)
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    return Request(url, body, headers)
