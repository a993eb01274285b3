"""Waiting for the broker at start (`rankwatch run` and `rankwatch alert`).

A daemon that exits when the broker is away at start turns a broker outage into a crash loop
(Kubernetes' CrashLoopBackOff keeps it down for up to 5 minutes after the broker is back).
Instead it says once what it waits for, tries again with a growing back-off, and starts as
soon as the broker answers; /readyz says not ready meanwhile, /healthz says alive.

Only failures that a broker coming back can cure are waited out: connection failures (aiokafka
reports a broker it cannot bootstrap from, for any reason, as one), retriable broker answers
and timeouts. Anything else is raised."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaError, KafkaTimeoutError

BACKOFF_S = 1.0
BACKOFF_MAX_S = 30.0


def broker_unavailable(error: BaseException) -> bool:
    """Whether `error` says the broker cannot be reached or answer now (not a bad request)."""
    if isinstance(error, KafkaTimeoutError | TimeoutError | OSError):
        return True
    return isinstance(error, KafkaError) and bool(getattr(error, "retriable", False))


async def start_when_reachable(
    start: Callable[[], Awaitable[None]],
    undo: Callable[[], Awaitable[None]],
    stopping: asyncio.Event,
    what: str,
    log: logging.Logger,
) -> bool:
    """Runs `start` until it succeeds; after a failure the broker may cure, `undo` cleans up
    what it began and the next try follows a back-off (doubling up to BACKOFF_MAX_S). Returns
    False if `stopping` was set first. The wait is logged once at WARNING, its end at INFO."""
    delay = BACKOFF_S
    waited = False
    while not stopping.is_set():
        try:
            await start()
        except Exception as e:
            if not broker_unavailable(e):
                raise
            await undo()
            if not waited:
                log.warning(
                    "waiting for %s: %s; trying again with a back-off of up to %.0f s",
                    what,
                    e,
                    BACKOFF_MAX_S,
                )
            waited = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), delay)
            delay = min(2 * delay, BACKOFF_MAX_S)
            continue
        if waited:
            log.info("%s answers: starting", what)
        return True
    return False
