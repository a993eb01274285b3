"""An aiohttp app served on host:port in the running event loop: `rankwatch alert`'s pages and,
on a thread of its own, `rankwatch run`'s metrics and probes (`rankwatch.daemon.http`)."""

from __future__ import annotations

from aiohttp import web


class AppServer:
    """Runs an aiohttp app on host:port; `address` is where it actually listens (port 0 picks
    one)."""

    def __init__(self, app: web.Application) -> None:
        self.runner = web.AppRunner(app, access_log=None)
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port)
        await site.start()
        name = self.runner.addresses[0]
        self.address = (str(name[0]), int(name[1]))

    async def close(self) -> None:
        await self.runner.cleanup()
