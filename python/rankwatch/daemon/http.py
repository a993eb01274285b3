"""`/metrics`, `/healthz` and `/readyz`: prometheus_client's WSGI exposition app (content
negotiation, gzip, `name[]` filters) behind a small router, served by a threading WSGI server on
a daemon thread so that a scrape never waits for the event loop.

The probe callbacks run on the server's threads; they only read a few attributes of the
daemon."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIEnvironment

Probe = Callable[[], tuple[bool, bytes]]


def http_url(host: str, port: int, path: str = "") -> str:
    """`http://host:port/path`, with an IPv6 address in brackets as URLs need it."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"


_STATUS = {
    200: "200 OK",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    503: "503 Service Unavailable",
}


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes and probes every few seconds would drown the daemon's log."""


class _Server(ThreadingWSGIServer):
    allow_reuse_address = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class HttpServer:
    def __init__(self, registry: CollectorRegistry, health: Probe, ready: Probe) -> None:
        self._metrics_app = make_wsgi_app(registry)
        self._probes = {"/healthz": health, "/health": health, "/readyz": ready}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        kind = _Server6 if ":" in host else _Server
        server = make_server(host, port, self._app, kind, handler_class=_QuietHandler)
        self._server = server
        sock = server.socket.getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        self._thread = threading.Thread(
            target=server.serve_forever, name="rankwatch-http", daemon=True
        )
        self._thread.start()

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()

    def _app(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = str(environ.get("PATH_INFO", "/"))
        method = str(environ.get("REQUEST_METHOD", "GET"))
        if method not in ("GET", "HEAD"):
            return _reply(start_response, 405, b"method not allowed\n")
        if path == "/metrics":
            body: Iterable[bytes] = self._metrics_app(environ, start_response)
            return body
        probe = self._probes.get(path)
        if probe is None:
            return _reply(start_response, 404, b"not found: try /metrics, /healthz or /readyz\n")
        ok, body_bytes = probe()
        return _reply(start_response, 200 if ok else 503, body_bytes, "application/json")


def _reply(
    start_response: StartResponse,
    status: int,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
) -> list[bytes]:
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
    start_response(_STATUS[status], headers)
    return [body]
