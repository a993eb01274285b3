"""Logging for the Kafka commands (`run`, `alert`, `replay`, `stats`, `simulate`): one format,
and aiokafka's chatter rate-limited (the same message at most once per interval, as log-shipper
instrumentation specs ask) or silenced for the short-lived commands, whose failures are
reported as one line by the command itself."""

from __future__ import annotations

import logging
import re
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


class ExpectedStates(logging.Filter):
    """aiokafka reports, at ERROR and WARNING, states that are normal while a broker or a topic
    is new: no group coordinator elected yet, a topic not created yet or without partition
    leaders yet. Each becomes one INFO line saying what is awaited (again only after
    `interval_s`); the client retries on its own, so these are not failures."""

    # (pattern of aiokafka's message template, what is awaited; %s is the template's topic)
    STATES = (
        (re.compile(r"Group Coordinator Request failed|Marking the coordinator dead"), ""),
        (re.compile(r"Topic %s (not found in cluster metadata|is not available during)"), "%s"),
        (re.compile(r"No partition metadata for topic"), "%s"),
    )

    def __init__(self, level: int, interval_s: float = 300.0) -> None:
        super().__init__()
        self.level = level  # the daemon's own: at WARNING and above, these lines are dropped
        self.interval_s = interval_s
        self.said: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == AWAITING.name:  # said by rankwatch itself: aiokafka need not repeat it
            self.said[record.getMessage()] = time.monotonic()
            return True
        if not record.name.startswith("aiokafka") or not isinstance(record.msg, str):
            return True
        awaited = self._awaited(record)
        if awaited is None:
            return True
        if self.level > logging.INFO:
            return False
        now = time.monotonic()
        if now - self.said.get(awaited, -self.interval_s) < self.interval_s:
            return False
        self.said[awaited] = now
        record.name, record.msg, record.args = AWAITING.name, awaited, None
        record.levelno, record.levelname = logging.INFO, "INFO"
        return True

    def _awaited(self, record: logging.LogRecord) -> str | None:
        for pattern, topic_arg in self.STATES:
            if not pattern.search(record.msg):
                continue
            if not topic_arg:
                return "waiting for the broker to elect the group coordinator"
            args = record.args if isinstance(record.args, tuple) else ()
            return _awaiting_topic(args[0] if args else "?")
        return None


AWAITING = logging.getLogger("rankwatch.kafka")


def _awaiting_topic(topic: object) -> str:
    return f"waiting for topic {topic} to be created"


def awaiting(topic: str) -> None:
    """Says, once, that `topic` does not exist yet and is waited for (a normal start-up state:
    pipelines and `rankwatch run` create topics on first write)."""
    AWAITING.info(_awaiting_topic(topic))


def _safe_value(value: object) -> object:
    return printable(value, limit=MAX_LOGGED_VALUE_CHARS) if isinstance(value, str) else value


def setup_logging(level: str) -> None:
    """For `rankwatch run`: the daemon's own logs at `level`; aiokafka's warnings and errors,
    rate-limited (all of it at debug)."""
    own_level = getattr(logging, level.upper())
    logging.basicConfig(
        level=own_level,
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
        expected, limit = ExpectedStates(own_level), RateLimit("aiokafka")
        for handler in handlers:
            handler.addFilter(expected)
            handler.addFilter(limit)
    safe = SafeMessage()
    for handler in handlers:
        handler.addFilter(safe)


def quiet_kafka() -> None:
    """For one-shot commands: aiokafka logs nothing; the command reports its own failure."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL + 1)
