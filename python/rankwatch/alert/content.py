"""What an alert says, taken from a diagnosis (`rankwatch.diagnosis/1`): the one-line summary,
Alertmanager labels and annotations, PagerDuty's fields and a Slack text. Every sink builds its
body from these, so the three say the same thing."""

from __future__ import annotations

from typing import Any

from rankwatch import diagnosis as rd
from rankwatch.diagnosis import BadDiagnosis

ALERT_NAME = "NCCLFailure"
SEVERITIES = ("critical", "error", "warning", "info")
PAGERDUTY_SUMMARY_MAX = 1024


def check_diagnosis(value: Any) -> dict[str, Any]:
    """The diagnosis if `value` has what an alert needs (an id and a job); else BadDiagnosis."""
    if not isinstance(value, dict):
        raise BadDiagnosis("not a JSON object")
    for key in ("id", "job"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise BadDiagnosis(f"no {key!r}")
    for key in ("root_cause", "signature"):
        if value.get(key) is not None and not isinstance(value[key], dict):
            raise BadDiagnosis(f"{key!r} is not an object")
    for key in ("confidence", "collateral_rank_count"):
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise BadDiagnosis(f"{key!r} is not a number")
    for key in ("collateral", "suspects", "alternatives"):
        v = value.get(key)
        if v is not None and not (isinstance(v, list) and all(isinstance(x, dict) for x in v)):
            raise BadDiagnosis(f"{key!r} is not a list of objects")
    if value.get("preceding_lines") is not None and not isinstance(value["preceding_lines"], list):
        raise BadDiagnosis("'preceding_lines' is not a list")
    return value


def severity(d: rd.Diagnosis) -> str:
    value = (d.signature.severity or "error").lower()
    return value if value in SEVERITIES else "error"


def summary(d: rd.Diagnosis) -> str:
    return f"{d.job}: {d.summary or d.signature.title or 'failure'}"


def root_line(d: rd.Diagnosis) -> str:
    return d.root_cause.line or ""


def collateral_text(d: rd.Diagnosis) -> str:
    count = d.collateral_rank_count
    if not count:
        return "none"
    return f"{count} ranks: {d.collateral_ranks}"


def description(d: rd.Diagnosis) -> str:
    parts = [d.cause or ""]
    line = root_line(d)
    if line:
        parts.append(f"Root-cause line: {line}")
    parts.append(f"Collateral: {collateral_text(d)}")
    return "\n".join(p for p in parts if p)


def alert_labels(d: rd.Diagnosis) -> dict[str, str]:
    """Alertmanager labels: identity of the alert (what groups and deduplicates it)."""
    sig, rc = d.signature, d.root_cause
    out = {
        "alertname": ALERT_NAME,
        "job": d.job,
        "signature": sig.id or "unclassified",
        "subsystem": sig.subsystem or "unknown",
        "severity": severity(d),
        "host": rc.host or "unknown",
    }
    if rc.rank is not None:
        out["rank"] = str(rc.rank)
    return out


def alert_annotations(d: rd.Diagnosis) -> dict[str, str]:
    return {
        "summary": summary(d),
        "description": description(d),
        "fix": d.fix or "",
        "verify": d.verify or "",
        "diagnosis_id": d.id,
    }


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: `<!channel>`, `<@U123>` or `<url|label>` in a log line
    must not ping anyone or become a link (Slack's three control characters escaped)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(d: rd.Diagnosis, link: str | None) -> str:
    lines = [f"*{slack_escape(clip(summary(d), 300))}*"]
    line = root_line(d)
    if line:
        lines.append("```" + slack_escape(clip(line, 1000).replace("```", "'''")) + "```")
    lines.append(f"Collateral: {slack_escape(collateral_text(d))}")
    if d.fix:
        lines.append(f"Fix: {slack_escape(clip(d.fix, 1000))}")
    if link:
        label = slack_escape(f"Incident {d.id}").replace("|", "/")
        lines.append(f"<{link.replace('|', '%7C')}|{label}>")
    return "\n".join(lines)
