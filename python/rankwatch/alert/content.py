"""What an alert says, taken from a diagnosis (`rankwatch.diagnosis/1`): the one-line summary,
Alertmanager labels and annotations, PagerDuty's fields and a Slack text. Every sink builds its
body from these, so the three say the same thing."""

from __future__ import annotations

from typing import Any

from rankwatch.report import Diagnosis

ALERT_NAME = "NCCLFailure"
SEVERITIES = ("critical", "error", "warning", "info")
PAGERDUTY_SUMMARY_MAX = 1024


class BadDiagnosis(ValueError):
    """A record on the diagnoses topic that is not a usable diagnosis."""


def check_diagnosis(value: Any) -> Diagnosis:
    """The diagnosis if `value` has what an alert needs (an id and a job); else BadDiagnosis."""
    if not isinstance(value, dict):
        raise BadDiagnosis("not a JSON object")
    for key in ("id", "job"):
        if not isinstance(value.get(key), str) or not value[key]:
            raise BadDiagnosis(f"no {key!r}")
    for key in ("root_cause", "signature"):
        if value.get(key) is not None and not isinstance(value[key], dict):
            raise BadDiagnosis(f"{key!r} is not an object")
    # What the sinks and the incident page read, in the types they read it as.
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


def part(d: Diagnosis, key: str) -> dict[str, Any]:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def severity(d: Diagnosis) -> str:
    value = str(part(d, "signature").get("severity") or "error").lower()
    return value if value in SEVERITIES else "error"


def summary(d: Diagnosis) -> str:
    text = d.get("summary")
    if isinstance(text, str) and text:
        return f"{d['job']}: {text}"
    return f"{d['job']}: {part(d, 'signature').get('title') or 'failure'}"


def root_line(d: Diagnosis) -> str:
    line = part(d, "root_cause").get("line")
    return str(line) if line is not None else ""


def collateral_text(d: Diagnosis) -> str:
    count = d.get("collateral_rank_count") or 0
    if not count:
        return "none"
    return f"{count} ranks: {d.get('collateral_ranks', '')}"


def description(d: Diagnosis) -> str:
    parts = [str(d.get("cause") or "")]
    line = root_line(d)
    if line:
        parts.append(f"Root-cause line: {line}")
    parts.append(f"Collateral: {collateral_text(d)}")
    return "\n".join(p for p in parts if p)


def alert_labels(d: Diagnosis) -> dict[str, str]:
    """Alertmanager labels: identity of the alert (what groups and deduplicates it)."""
    sig = part(d, "signature")
    rc = part(d, "root_cause")
    out = {
        "alertname": ALERT_NAME,
        "job": str(d["job"]),
        "signature": str(sig.get("id") or "unclassified"),
        "subsystem": str(sig.get("subsystem") or "unknown"),
        "severity": severity(d),
        "host": str(rc.get("host") or "unknown"),
    }
    if rc.get("rank") is not None:
        out["rank"] = str(rc["rank"])
    return out


def alert_annotations(d: Diagnosis) -> dict[str, str]:
    return {
        "summary": summary(d),
        "description": description(d),
        "fix": str(d.get("fix") or ""),
        "verify": str(d.get("verify") or ""),
        "diagnosis_id": str(d["id"]),
    }


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: `<!channel>`, `<@U123>` or `<url|label>` in a log line
    must not ping anyone or become a link (Slack's three control characters escaped)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_text(d: Diagnosis, link: str | None) -> str:
    lines = [f"*{slack_escape(clip(summary(d), 300))}*"]
    line = root_line(d)
    if line:
        lines.append("```" + slack_escape(clip(line, 1000).replace("```", "'''")) + "```")
    lines.append(f"Collateral: {slack_escape(collateral_text(d))}")
    if d.get("fix"):
        lines.append(f"Fix: {slack_escape(clip(str(d['fix']), 1000))}")
    if link:
        label = slack_escape(f"Incident {d['id']}").replace("|", "/")
        lines.append(f"<{link.replace('|', '%7C')}|{label}>")
    return "\n".join(lines)
