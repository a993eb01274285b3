"""systemd's notify protocol: one datagram per state change to the Unix socket named by
$NOTIFY_SOCKET (`READY=1`, `WATCHDOG=1`, `EXTEND_TIMEOUT_USEC=...`, `STATUS=...`,
`STOPPING=1`).

A few lines over a datagram socket instead of a dependency: the protocol is one `sendto`, and
the abstract-namespace form (`@name`) needs only the leading byte changed. Without
$NOTIFY_SOCKET (not started by systemd, or `Type=` is not `notify`) every call does nothing."""

from __future__ import annotations

import logging
import os
import socket
import time

log = logging.getLogger("rankwatch.daemon")


class Notifier:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        path = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + path[1:] if path.startswith("@") else path
        usec = env.get("WATCHDOG_USEC", "")
        # Ping twice per watchdog period, as sd_watchdog_enabled(3) advises; at most once a second
        # when systemd set no period (the pings are then only a sign of life).
        self.watchdog_every_s = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 else 1.0
        self._last_ping = 0.0
        self.ready_sent = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def send(self, *fields: str) -> bool:
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                s.sendto("\n".join(fields).encode(), self.address)
        except OSError as e:
            log.warning("sd_notify to %s failed: %s", self.address.replace("\0", "@"), e)
            return False
        return True

    def ready(self, status: str) -> None:
        if not self.ready_sent:
            self.ready_sent = self.send("READY=1", f"STATUS={status}")

    def watchdog(self) -> None:
        now = time.monotonic()
        if now - self._last_ping >= self.watchdog_every_s:
            self._last_ping = now
            self.send("WATCHDOG=1")

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def extend_start(self, seconds: float) -> None:
        """Before READY: the start is still under way, give it `seconds` more (systemd's
        TimeoutStartSec counts from now)."""
        if not self.ready_sent:
            self.send(f"EXTEND_TIMEOUT_USEC={int(seconds * 1e6)}")

    def stopping(self) -> None:
        self.send("STOPPING=1", "STATUS=draining and closing")
