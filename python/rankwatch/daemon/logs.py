"""Logging for the daemon commands: one format, and aiokafka's chatter rate-limited (the same
message at most once per interval, as log-shipper instrumentation specs ask) or silenced for
the short-lived commands, whose failures are reported as one line by the command itself."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from rankwatch.safe_text import printable

RATE_LIMIT_S = 10.0
# Values logged come from records (job names, hosts): each is cut to this many characters.
MAX_LOGGED_VALUE_CHARS = 256
MAX_LOGGED_MESSAGE_CHARS = 8192


class RateLimit(logging.Filter):
    """Lets each message template of the loggers under `prefix` through at most once per
    `interval_s` (a handler filter: logger filters do not see records of child loggers)."""

    def __init__(self, prefix: str, interval_s: float = RATE_LIMIT_S) -> None:
        super().__init__()
        self.prefix = prefix
        self.interval_s = interval_s
        self.last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.prefix):
            return True
        key = (record.name, record.msg)
        now = time.monotonic()
        if now - self.last.get(key, -self.interval_s) < self.interval_s:
            return False
        self.last[key] = now
        return True


class SafeMessage(logging.Filter):
    """Makes each message one printable line: string arguments (a job name taken from a
    record) are escaped and cut, then the whole message is escaped, so that a `\\n` in a
    value cannot forge a log line and a 100 KB job name does not make a 100 KB line."""

    def filter(self, record: logging.LogRecord) -> bool:
        args: Any = record.args
        if isinstance(args, tuple):
            record.args = tuple(_safe_value(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _safe_value(v) for k, v in args.items()}
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return True  # a bad format string: the handler reports it as logging does
        record.msg = printable(message, limit=MAX_LOGGED_MESSAGE_CHARS)
        record.args = None
        return True


def _safe_value(value: object) -> object:
    return printable(value, limit=MAX_LOGGED_VALUE_CHARS) if isinstance(value, str) else value


def setup_logging(level: str) -> None:
    """For `rankwatch run`: the daemon's own logs at `level`; aiokafka's warnings and errors,
    rate-limited (all of it at debug)."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
        force=True,
    )
    kafka = logging.getLogger("aiokafka")
    handlers = logging.getLogger().handlers
    if level == "debug":
        kafka.setLevel(logging.DEBUG)
    else:
        kafka.setLevel(logging.WARNING)
        limit = RateLimit("aiokafka")
        for handler in handlers:
            handler.addFilter(limit)
    safe = SafeMessage()
    for handler in handlers:
        handler.addFilter(safe)


def quiet_kafka() -> None:
    """For one-shot commands: aiokafka logs nothing; the command reports its own failure."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)
