"""One sink's delivery machinery, shared by every kind of sink: a bounded queue, a few workers,
and per request a timeout, retries with exponential backoff and jitter on 429, 5xx and
connection errors, and metrics. An alert that is still not accepted after its retry budget (or
is refused with another 4xx) is counted and logged with its diagnosis id; it never blocks the
alerts behind it. Logs name the sink, never its URL or key."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass, field

import aiohttp

from rankwatch.alert.metrics import AlertMetrics

log = logging.getLogger("rankwatch.alert")

RETRY_STATUS = frozenset({408, 425, 429})
BODY_IN_LOG = 200


@dataclass(frozen=True)
class Request:
    """One HTTP POST to a sink."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    # Values that must never reach a log: an endpoint may echo the request in its error body.
    secrets: tuple[str, ...] = ()

    def redacted(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text


@dataclass(frozen=True)
class RetryPolicy:
    timeout_s: float = 10.0
    attempts: int = 6
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before try `attempt + 1`: doubling from `backoff_s`, half of it
        random (so a fleet of senders does not retry in step), at most `backoff_max_s`; a
        server's Retry-After is honoured up to the same cap."""
        step = min(self.backoff_max_s, self.backoff_s * float(2 ** (attempt - 1)))
        wait = step / 2 + random.uniform(0, step / 2)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.backoff_max_s))
        return wait


@dataclass
class _Item:
    diagnosis_id: str
    request: Request
    done: asyncio.Future[bool]


def _retry_after(headers: object) -> float | None:
    value = getattr(headers, "get", lambda _k: None)("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class Sink:
    """Delivers requests to one endpoint from a bounded queue with a few workers."""

    def __init__(
        self,
        name: str,
        session: aiohttp.ClientSession,
        policy: RetryPolicy,
        metrics: AlertMetrics,
        queue_size: int = 1000,
        concurrency: int = 4,
    ) -> None:
        self.name = name
        self.session = session
        self.policy = policy
        self.metrics = metrics
        self.queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=queue_size)
        self.concurrency = concurrency
        self._workers: list[asyncio.Task[None]] = []
        metrics.sink(name)

    def start(self) -> None:
        self._workers = [
            asyncio.create_task(self._work(), name=f"sink-{self.name}-{i}")
            for i in range(self.concurrency)
        ]

    async def stop(self, drain_s: float = 5.0) -> None:
        """Waits up to `drain_s` for queued alerts, then cancels the rest (their offsets stay
        uncommitted, so they are delivered again after a restart)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.join(), drain_s)
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []

    def submit(self, diagnosis_id: str, request: Request) -> asyncio.Future[bool]:
        """Queues a request; the future ends True when the endpoint accepted it, False when it
        was given up. A full queue gives the alert up at once (counted as dropped and failed,
        logged): one slow or dead sink must not hold back the others."""
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        try:
            self.queue.put_nowait(_Item(diagnosis_id, request, done))
        except asyncio.QueueFull:
            self.metrics.dropped.labels(sink=self.name).inc()
            done.set_result(self._give_up(diagnosis_id, f"queue full ({self.queue.maxsize})"))
        self.metrics.queued.labels(sink=self.name).set(self.queue.qsize())
        return done

    async def _work(self) -> None:
        while True:
            item = await self.queue.get()
            self.metrics.queued.labels(sink=self.name).set(self.queue.qsize())
            try:
                ok = await self.deliver(item.diagnosis_id, item.request)
                if not item.done.done():
                    item.done.set_result(ok)
            except asyncio.CancelledError:
                item.done.cancel()
                raise
            except Exception as e:  # a bug in a sink must not stop the others
                log.exception("sink %s: alert %s: unexpected error", self.name, item.diagnosis_id)
                self.metrics.failed.labels(sink=self.name).inc()
                if not item.done.done():
                    item.done.set_exception(e)
            finally:
                self.queue.task_done()

    async def deliver(self, diagnosis_id: str, request: Request) -> bool:
        """Posts with retries; True when accepted, False when given up (counted, logged)."""
        for attempt in range(1, self.policy.attempts + 1):
            retry_after: float | None = None
            started = time.monotonic()
            try:
                async with self.session.post(
                    request.url,
                    data=request.body,
                    headers=request.headers,
                    timeout=aiohttp.ClientTimeout(total=self.policy.timeout_s),
                    allow_redirects=False,
                ) as resp:
                    # Only what the log shows: a sink's answer can be any size.
                    body = await resp.content.read(BODY_IN_LOG)
                    status = resp.status
                    retry_after = _retry_after(resp.headers)
                shown = request.redacted(body.decode(errors="replace"))
                problem = f"HTTP {status}: {shown!r}"
            except (aiohttp.ClientError, TimeoutError) as e:
                status, problem = 0, f"{type(e).__name__}"
            finally:
                self.metrics.latency.labels(sink=self.name).observe(time.monotonic() - started)
            if 200 <= status < 300:
                self.metrics.sent.labels(sink=self.name).inc()
                return True
            retryable = status == 0 or status >= 500 or status in RETRY_STATUS
            if not retryable:
                return self._give_up(diagnosis_id, f"refused ({problem})")
            if attempt == self.policy.attempts:
                return self._give_up(diagnosis_id, f"{attempt} tries, last: {problem}")
            self.metrics.retried.labels(sink=self.name).inc()
            log.info(
                "sink %s: alert %s: try %d failed (%s), retrying",
                self.name,
                diagnosis_id,
                attempt,
                problem,
            )
            await asyncio.sleep(self.policy.delay(attempt, retry_after))
        return False

    def _give_up(self, diagnosis_id: str, why: str) -> bool:
        self.metrics.failed.labels(sink=self.name).inc()
        log.error("sink %s: alert %s NOT delivered: %s", self.name, diagnosis_id, why)
        return False
