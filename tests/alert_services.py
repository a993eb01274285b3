"""Real services for the `rankwatch alert` tests, all on 127.0.0.1: an HTTP receiver that
records what it is sent (a webhook, or Alertmanager's webhook receiver), a PagerDuty Events API
v2 stand-in that enforces the request schema and answers a script of statuses, a real
Alertmanager (Debian's `prometheus-alertmanager`), `rankwatch alert` as a process, and headless
Chromium driven over the DevTools protocol."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from daemon_fixtures import ROOT, free_port, parse_metrics, wait_for

ARTIFACTS = ROOT / "tests" / "artifacts"
PAGERDUTY_SEVERITIES = {"critical", "error", "warning", "info"}
PAGERDUTY_ACTIONS = {"trigger", "acknowledge", "resolve"}
ISO_8601 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")

# A diagnosis as `rankwatch run` publishes it, for the alert tests to send.
DIAGNOSIS: dict[str, Any] = {
    "schema": "rankwatch.diagnosis/1",
    "id": "rw-0123456789abcdef",
    "job": "llama-7b",
    "summary": "rank 3 on node-002: CUDA error raised on a rank",
    "signature": {"id": "pt_cuda_error", "subsystem": "cuda", "severity": "critical"},
    "root_cause": {"rank": 3, "host": "node-002", "line": "RuntimeError: CUDA error"},
    "cause": "A kernel faulted.",
    "fix": "Run compute-sanitizer.",
    "verify": "Rerun.",
    "collateral_rank_count": 5,
    "collateral_ranks": "0-2,4-5",
    "incident": {"start": "2026-11-30T12:01:09.212Z"},
}


# --- HTTP servers in a thread of their own ---------------------------------------------------


class ThreadedServer:
    """An aiohttp app served from a background thread, so that both plain and asyncio tests
    (and subprocesses) can talk to it."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._runner: web.AppRunner | None = None

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self._runner = web.AppRunner(self.app, access_log=None)
        self.loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = int(self._runner.addresses[0][1])
        self._ready.set()
        self.loop.run_forever()

    def start(self) -> ThreadedServer:
        self._thread.start()
        assert self._ready.wait(30), "test server did not start"
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def down() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(down(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(30)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; answers `statuses` in order, then 200."""

    statuses: list[int] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: threading.Event | None = None  # when set: hold every request until the gate opens

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        while self.gate is not None and not self.gate.is_set():
            await asyncio.sleep(0.01)
        with self.lock:
            self.received.append(Received(request.path, dict(request.headers), body))
            status = self.statuses.pop(0) if self.statuses else 200
        return web.Response(status=status, text="ok\n")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self.handle)
        return app

    def bodies(self) -> list[Any]:
        with self.lock:
            return [r.json() for r in self.received]


def pagerduty_errors(event: Any) -> list[str]:
    """What PagerDuty's Events API v2 would reject in `event` (empty when valid)."""
    if not isinstance(event, dict):
        return ["event must be a JSON object"]
    errors = []
    key = event.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("routing_key must be a 32-character integration key")
    action = event.get("event_action")
    if action not in PAGERDUTY_ACTIONS:
        errors.append(f"event_action must be one of {sorted(PAGERDUTY_ACTIONS)}")
    dedup = event.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
        errors.append("dedup_key must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errors.append("dedup_key is required to acknowledge or resolve")
    if action == "trigger":
        errors += _payload_errors(event.get("payload"))
    for name in ("links", "images"):
        items = event.get(name, [])
        if not isinstance(items, list) or not all(
            isinstance(i, dict) and isinstance(i.get("href" if name == "links" else "src"), str)
            for i in items
        ):
            errors.append(f"{name} must be a list of objects with an href/src")
    for name in ("client", "client_url"):
        if name in event and not isinstance(event[name], str):
            errors.append(f"{name} must be a string")
    allowed = {"routing_key", "event_action", "dedup_key", "payload", "links", "images"}
    extra = set(event) - allowed - {"client", "client_url"}
    if extra:
        errors.append(f"unknown fields {sorted(extra)}")
    return errors


def _payload_errors(payload: Any) -> list[str]:
    if not isinstance(payload, dict):
        return ["payload is required to trigger"]
    errors = []
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary or len(summary) > 1024:
        errors.append("payload.summary must be 1 to 1024 characters")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errors.append("payload.source is required")
    if payload.get("severity") not in PAGERDUTY_SEVERITIES:
        errors.append("payload.severity must be critical, error, warning or info")
    ts = payload.get("timestamp")
    if ts is not None and not ISO_8601.match(ts):
        errors.append("payload.timestamp must be ISO 8601")
    for name in ("component", "group", "class"):
        if name in payload and not isinstance(payload[name], str):
            errors.append(f"payload.{name} must be a string")
    if "custom_details" in payload and not isinstance(payload["custom_details"], dict | str):
        errors.append("payload.custom_details must be an object")
    return errors


@dataclass
class PagerDuty:
    """PagerDuty's enqueue endpoint as far as a client can tell: 400 for invalid events, else
    the next status of `statuses` (then 202) with PagerDuty's response bodies."""

    statuses: list[int] = field(default_factory=list)
    failing_keys: set[str] = field(default_factory=set)  # always 500 for these dedup keys
    accepted: list[dict[str, Any]] = field(default_factory=list)
    requests: int = 0
    invalid: list[list[str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def enqueue(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self.lock:
            self.requests += 1
            if request.content_type != "application/json":
                self.invalid.append(["Content-Type must be application/json"])
                return web.json_response({"status": "invalid event"}, status=400)
            try:
                event = orjson.loads(body)
            except orjson.JSONDecodeError:
                self.invalid.append(["body is not JSON"])
                return web.json_response({"status": "invalid event"}, status=400)
            errors = pagerduty_errors(event)
            if errors:
                self.invalid.append(errors)
                return web.json_response(
                    {
                        "status": "invalid event",
                        "message": "Event object is invalid",
                        "errors": errors,
                    },
                    status=400,
                )
            if event.get("dedup_key") in self.failing_keys:
                status = 500
            else:
                status = self.statuses.pop(0) if self.statuses else 202
            if status == 202:
                self.accepted.append(event)
                return web.json_response(
                    {
                        "status": "success",
                        "message": "Event processed",
                        "dedup_key": event.get("dedup_key"),
                    },
                    status=202,
                )
        if status == 429:
            return web.json_response({"status": "throttle event"}, status=429)
        return web.Response(status=status, text="internal error")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v2/enqueue", self.enqueue)
        return app


@contextlib.contextmanager
def serving(app: web.Application) -> Iterator[ThreadedServer]:
    server = ThreadedServer(app).start()
    try:
        yield server
    finally:
        server.stop()


# --- Alertmanager -----------------------------------------------------------------------------

ALERTMANAGER_CONFIG = """\
route:
  receiver: hook
  group_by: [alertname, job]
  group_wait: 1s
  group_interval: 1h
  repeat_interval: 4h
receivers:
  - name: hook
    webhook_configs:
      - url: {url}
        send_resolved: false
"""


def alertmanager_binary() -> str | None:
    return shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@dataclass
class Alertmanager:
    """A real Alertmanager on 127.0.0.1 (clustering off) whose only receiver is `hook_url`."""

    workdir: Path
    hook_url: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "alertmanager.log"

    def start(self) -> Alertmanager:
        binary = alertmanager_binary()
        assert binary, "prometheus-alertmanager is not installed (scripts/setup-test-services.sh)"
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "alertmanager.yml"
        config.write_text(ALERTMANAGER_CONFIG.format(url=self.hook_url))
        self.port = free_port()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--cluster.listen-address=",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_for("Alertmanager to be ready", self.ready, context=self.log_text)
        return self

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"alertmanager exited:\n{self.log_text()}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=5) as r:
                return int(r.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return orjson.loads(r.read())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- `rankwatch alert` as a process -----------------------------------------------------------


# Every AlertProcess started, so that a test that fails before stopping one does not leave
# it running (see `reap_alert_processes`).
STARTED: list[AlertProcess] = []


def reap_alert_processes() -> None:
    """Kills what tests started and did not stop."""
    while STARTED:
        proc = STARTED.pop().proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()


@dataclass
class AlertProcess:
    """`python -m rankwatch.cli alert ARGS` in the background, its incident pages on a port of
    its own."""

    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AlertProcess:
        cmd = [sys.executable, "-m", "rankwatch.cli", "alert", *self.args]
        cmd += ["--http-addr", f"127.0.0.1:{self.port}"]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env={**os.environ, **self.env},
            )
        STARTED.append(self)
        return self

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return int(r.status), bytes(r.read())
        except urllib.error.HTTPError as e:
            return int(e.code), bytes(e.read())

    def metrics(self) -> dict[str, float]:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"rankwatch alert exited:\n{self.log_text()}")
        try:
            status, body = self.get("/metrics")
        except (OSError, urllib.error.URLError):
            return {}
        return parse_metrics(body.decode()) if status == 200 else {}

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(
                f"rankwatch alert did not stop:\n{self.log_text()[-3000:]}"
            ) from None


# --- headless Chromium ------------------------------------------------------------------------


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    """Headless Chromium with one page, driven over the DevTools protocol (aiohttp websocket)."""

    def __init__(self, binary: str, profile: Path) -> None:
        self.port = free_port()
        self.log = profile.parent / "chromium.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--no-first-run",
                    "--window-size=1280,900",
                    f"--remote-debugging-port={self.port}",
                    "--remote-debugging-address=127.0.0.1",
                    f"--user-data-dir={profile}",
                    "about:blank",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self._ids = iter(range(1, 1 << 30))
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.session: aiohttp.ClientSession | None = None

    async def connect(self) -> None:
        self.session = aiohttp.ClientSession()
        deadline = time.monotonic() + 60
        while True:
            try:
                async with self.session.get(f"http://127.0.0.1:{self.port}/json/list") as r:
                    targets = await r.json(content_type=None)
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    break
            except aiohttp.ClientError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"chromium did not start:\n{self.log.read_text()[-3000:]}")
            await asyncio.sleep(0.2)
        self.ws = await self.session.ws_connect(pages[0]["webSocketDebuggerUrl"], max_msg_size=0)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        assert self.ws is not None
        ident = next(self._ids)
        await self.ws.send_str(
            orjson.dumps({"id": ident, "method": method, "params": params}).decode()
        )
        while True:
            msg = orjson.loads(await asyncio.wait_for(self.ws.receive_str(), 60))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result

    async def load(self, url: str) -> None:
        await self.call("Page.enable")
        await self.call("Page.navigate", url=url)
        await self.until(
            "document.readyState === 'complete' && location.href === " + orjson.dumps(url).decode()
        )

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def until(self, expression: str, timeout_s: float = 60) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"page never satisfied: {expression}")
            await asyncio.sleep(0.1)

    async def screenshot(self, path: Path) -> bytes:
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        data = base64.b64decode(shot["data"])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return data

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
