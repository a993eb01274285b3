"""The configuration of `rankwatch alert`, in the same scheme as `rankwatch run`: one TOML file,
`RANKWATCH_<KEY>` environment overrides, and a flag per key (flags win over the environment,
which wins over the file). The value kinds, parsing and error messages are the shared
scheme's (`rankwatch.settings.options`); this module only declares the keys of its own command.

Keys that mean something else for `rankwatch run` (`topic`, `group_id`, `client_id`) take their
environment value from `RANKWATCH_ALERT_<KEY>`, so that a daemon and its alert deliverer can
share one environment without the deliverer joining the daemon's consumer group."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rankwatch.http_url import http_url
from rankwatch.settings.connection import GROUP_MEMBER_KEYS, GroupMember
from rankwatch.settings.layers import layered_values
from rankwatch.settings.options import (
    ADDR,
    BOOL,
    CHOICE,
    INT,
    LIST,
    LOG_LEVELS,
    OPT_STR,
    ConfigError,
    Options,
    option,
)
from rankwatch.settings.options import env_name as scheme_env_name
from rankwatch.settings.run import DaemonConfig, load_config

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
WEBHOOK_FORMATS = ("json", "slack")


@dataclass
class AlertConfig(GroupMember):
    """Every option of `rankwatch alert` (the Kafka connection inherited, declared once);
    field metadata drives TOML keys, variables and flags."""

    # --- Kafka ----------------------------------------------------------------------------
    topic: str = option("rankwatch.diagnoses", "the diagnoses topic `rankwatch run` publishes to")
    group_id: str = option("rankwatch-alert", "consumer group of the alert deliverers")
    client_id: str = option("rankwatch-alert", "Kafka client id")  # its own default
    # --- incident pages and /metrics --------------------------------------------------------
    http_addr: str = option(
        "127.0.0.1:9465", "host:port of /incidents, /metrics and /healthz ('off')", kind=ADDR
    )
    page_url: str | None = option(
        None,
        "base URL people reach the incident pages at, e.g. behind an ingress; every alert "
        "links to <URL>/incidents/<id> (default: http://<http_addr>; no link when http_addr "
        "is off)",
        kind=OPT_STR,
        metavar="URL",
    )
    incidents_kept: int = option(1_000, "recent diagnoses kept for /incidents", kind=INT, minimum=1)
    incidents_since_ms: int = option(
        24 * 3_600_000,
        "on start, /incidents loads the diagnoses published this long ago (all partitions)",
        kind=INT,
        minimum=0,
    )
    # --- sinks ----------------------------------------------------------------------------
    alertmanager_url: list[str] = option(  # noqa: RUF009
        [], "Alertmanager base URL (repeatable: an HA pair)", kind=LIST, metavar="URL"
    )
    alert_resend_ms: int = option(
        60_000, "re-send firing alerts to Alertmanager this often", kind=INT, minimum=100
    )
    alert_ttl_ms: int = option(
        4 * 3_600_000,
        "an incident not updated for this long is sent resolved (endsAt) and forgotten",
        kind=INT,
        minimum=1_000,
    )
    pagerduty_url: str = option(PAGERDUTY_EVENTS_URL, "PagerDuty Events API v2 enqueue URL")
    pagerduty_routing_key: str | None = option(
        None,
        "PagerDuty integration (routing) key; enables the sink (never logged)",
        kind=OPT_STR,
        secret=True,
    )
    webhook_url: list[str] = option(  # noqa: RUF009
        [], "webhook URL (repeatable)", kind=LIST, metavar="URL"
    )
    webhook_secret: str | None = option(
        None,
        "sign webhook bodies: X-Rankwatch-Signature HMAC-SHA256 (never logged)",
        kind=OPT_STR,
        secret=True,
    )
    webhook_format: str = option(
        "json",
        "webhook body: the diagnosis JSON, or Slack-compatible text",
        kind=CHOICE,
        choices=WEBHOOK_FORMATS,
    )
    # --- delivery -------------------------------------------------------------------------
    sink_timeout_ms: int = option(10_000, "timeout of one HTTP request", kind=INT, minimum=1)
    sink_attempts: int = option(
        6, "tries per alert and sink before it is counted as failed", kind=INT, minimum=1
    )
    sink_backoff_ms: int = option(
        500, "first retry delay (doubles, with jitter)", kind=INT, minimum=0
    )
    sink_backoff_max_ms: int = option(30_000, "longest retry delay", kind=INT, minimum=0)
    sink_queue_size: int = option(1_000, "alerts waiting per sink", kind=INT, minimum=1)
    sink_concurrency: int = option(4, "requests in flight per sink", kind=INT, minimum=1)
    log_level: str = option("info", "log level", kind=CHOICE, choices=LOG_LEVELS)
    check_crcs: bool = option(True, "verify record CRCs", kind=BOOL)

    def http_listen(self) -> tuple[str, int] | None:
        if self.http_addr == "off":
            return None
        host, _, port = self.http_addr.rpartition(":")
        return host.strip("[]") or "127.0.0.1", int(port)

    def page_base(self, bound: tuple[str, int] | None = None) -> str | None:
        """Base URL of the incident pages (no trailing slash); None when nothing serves them."""
        if self.page_url:
            return self.page_url.rstrip("/")
        listen = bound or self.http_listen()
        if listen is None:
            return None
        host, port = listen
        if host in ("0.0.0.0", "::", ""):  # every interface: name the machine instead
            host = socket.getfqdn()
        return http_url(host, port)

    def kafka(self) -> DaemonConfig:
        """The connection settings as a daemon config, for `rankwatch.kafka.clients`."""
        values = {k: getattr(self, k) for k in GROUP_MEMBER_KEYS}
        return load_config(None, overrides=values, environ={}, check=False)

    def describe(self) -> dict[str, Any]:
        """The configuration for logs: secrets masked, URLs without user info."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("secret") and value is not None:
                value = "***"
            elif f.name in ("alertmanager_url", "webhook_url"):
                value = [redact_url(u) for u in value]
            elif f.name == "pagerduty_url":
                value = redact_url(value)
            out[f.name] = value
        return out

    def __repr__(self) -> str:
        return f"AlertConfig({self.describe()!r})"


OPTIONS: Options = {f.name: f for f in dataclasses.fields(AlertConfig)}
OWN_ENV_KEYS = ("topic", "group_id", "client_id")
# Earlier names of keys, still read from files, the environment and flags.
ALIASES = {"external_url": "page_url"}


def env_name(key: str) -> str:
    """`RANKWATCH_<KEY>`, or `RANKWATCH_ALERT_<KEY>` for keys `rankwatch run` uses otherwise."""
    return scheme_env_name(f"alert_{key}" if key in OWN_ENV_KEYS else key)


def redact_url(url: str) -> str:
    """Scheme and host only, for logs: user info, path and query may all carry a token (a
    Slack webhook's path is its secret)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    rest = "/..." if parts.path.strip("/") or parts.query else ""
    return f"{parts.scheme}://{host}{rest}"


def _env_names() -> list[tuple[str, str]]:
    """(key, variable) for every key, an alias's variable before the key's own (which wins)."""
    old = [(key, env_name(alias)) for alias, key in ALIASES.items()]
    return old + [(key, env_name(key)) for key in OPTIONS]


def load_alert_config(
    path: str | Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> AlertConfig:
    """Defaults, then the TOML file, then `RANKWATCH_<KEY>`, then `overrides` (typed values
    from flags). Raises ConfigError naming the source of a bad value."""
    env = os.environ if environ is None else environ
    values, _ = layered_values(OPTIONS, path, env, _env_names(), overrides, aliases=ALIASES)
    cfg = AlertConfig(**values)
    check_alert_config(cfg)
    return cfg


def _check_url(url: str, where: str) -> None:
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError as e:
        raise ConfigError(f"{where}: not a valid URL ({e})") from None
    host = parts.hostname or ""
    # An IPv6 literal is bracketed in the URL; a name needs non-empty labels (`a..b` has not).
    name_ok = ":" in host or all(host.split("."))
    if parts.scheme not in ("http", "https") or not host or not name_ok or port == 0:
        raise ConfigError(f"{where}: expected an http(s) URL, got {redact_url(url)!r}")


def check_alert_config(cfg: AlertConfig) -> None:
    """Rules that involve more than one key, and URL shapes."""
    for url in cfg.alertmanager_url:
        _check_url(url, "alertmanager_url")
    for url in cfg.webhook_url:
        _check_url(url, "webhook_url")
    _check_url(cfg.pagerduty_url, "pagerduty_url")
    if cfg.page_url is not None:
        _check_url(cfg.page_url, "page_url")
    if cfg.heartbeat_interval_ms >= cfg.session_timeout_ms:
        raise ConfigError("heartbeat_interval_ms must be below session_timeout_ms")
    if cfg.sink_backoff_max_ms < cfg.sink_backoff_ms:
        raise ConfigError("sink_backoff_max_ms must be at least sink_backoff_ms")
    has_sink = cfg.alertmanager_url or cfg.webhook_url or cfg.pagerduty_routing_key
    if not has_sink and cfg.http_addr == "off":
        raise ConfigError(
            "nothing to do: no sink (--alertmanager-url, --pagerduty-routing-key, "
            "--webhook-url) and no incident pages (http_addr is off)"
        )
    try:
        cfg.kafka()
    except ConfigError as e:
        raise ConfigError(f"kafka settings: {e}") from None
