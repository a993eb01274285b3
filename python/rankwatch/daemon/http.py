"""`rankwatch run`'s HTTP on aiohttp. `HttpServer` is `rankwatch run`'s `/metrics`, `/healthz` and
`/readyz`: prometheus_client's aiohttp handler (content negotiation, gzip, `name[]` filters)
behind a small router, served from a thread with an event loop of its own so that a scrape or
a probe never waits for the daemon's loop.

The probe callbacks run on the server's thread; they only read a few attributes of the
daemon."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.aiohttp import make_aiohttp_handler

from rankwatch.app_server import AppServer

Probe = Callable[[], tuple[bool, bytes]]


class HttpServer:
    def __init__(self, registry: CollectorRegistry, health: Probe, ready: Probe) -> None:
        self._metrics = make_aiohttp_handler(registry)
        self._probes = {"/healthz": health, "/health": health, "/readyz": ready}
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._server = AppServer(app)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        loop = self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=loop.run_forever, name="rankwatch-http", daemon=True)
        self._thread.start()
        try:
            await self._on_thread(self._server.start(host, port))
        except BaseException:
            await self.close()
            raise
        self.address = self._server.address

    async def close(self) -> None:
        if self._loop is None or self._thread is None:
            return
        try:
            await self._on_thread(self._server.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            await asyncio.to_thread(self._thread.join)
            self._loop.close()
            self._loop = self._thread = None

    async def _on_thread(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="method not allowed\n")
        if request.path == "/metrics":
            return await self._metrics(request)
        probe = self._probes.get(request.path)
        if probe is None:
            return web.Response(status=404, text="not found: try /metrics, /healthz or /readyz\n")
        ok, body = probe()
        return web.Response(body=body, status=200 if ok else 503, content_type="application/json")
