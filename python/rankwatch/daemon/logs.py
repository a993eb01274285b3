"""Logging for the daemon commands: one format, and aiokafka's chatter rate-limited (the same
message at most once per interval, as log-shipper instrumentation specs ask) or silenced for
the short-lived commands, whose failures are reported as one line by the command itself."""

from __future__ import annotations

import logging
import sys
import time

RATE_LIMIT_S = 10.0


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
    if level == "debug":
        kafka.setLevel(logging.DEBUG)
    else:
        kafka.setLevel(logging.WARNING)
        limit = RateLimit("aiokafka")
        for handler in logging.getLogger().handlers:
            handler.addFilter(limit)


def quiet_kafka() -> None:
    """For one-shot commands: aiokafka logs nothing; the command reports its own failure."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)
