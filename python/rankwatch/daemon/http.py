"""`/metrics` and `/healthz` over a minimal asyncio HTTP/1.1 server (standard library only).

Each connection serves one request and is closed; enough for Prometheus scrapes and probes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger("rankwatch.daemon")

CONTENT_METRICS = "text/plain; version=0.0.4; charset=utf-8"
MAX_HEAD_BYTES = 16 * 1024
READ_TIMEOUT_S = 5.0

Health = Callable[[], tuple[bool, bytes]]


class HttpServer:
    def __init__(self, metrics: Callable[[], bytes], health: Health) -> None:
        self._metrics = metrics
        self._health = health
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._handle, host, port)
        sock = self._server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            if len(head) > MAX_HEAD_BYTES:
                await self._reply(writer, 431, b"request header too large\n")
                return
            parts = head.split(b"\r\n", 1)[0].split()
            if len(parts) != 3:
                await self._reply(writer, 400, b"bad request\n")
                return
            method, target = parts[0].decode("latin-1"), parts[1].decode("latin-1")
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await self._reply(writer, 405, b"method not allowed\n", head_only=False)
                return
            head_only = method == "HEAD"
            if path == "/metrics":
                await self._reply(writer, 200, self._metrics(), CONTENT_METRICS, head_only)
            elif path in ("/healthz", "/health"):
                ok, body = self._health()
                await self._reply(writer, 200 if ok else 503, body, "application/json", head_only)
            else:
                await self._reply(writer, 404, b"not found: try /metrics or /healthz\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except ConnectionError:
            pass
        except Exception:  # a scrape must never take the daemon down
            log.exception("metrics server: request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @staticmethod
    async def _reply(
        writer: asyncio.StreamWriter,
        status: int,
        body: bytes,
        content_type: str = "text/plain; charset=utf-8",
        head_only: bool = False,
    ) -> None:
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            405: "Method Not Allowed",
            431: "Request Header Fields Too Large",
            503: "Service Unavailable",
        }[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        if not head_only:
            writer.write(body)
        await writer.drain()
