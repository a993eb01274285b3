"""The URL of something served over HTTP, for links and log lines."""

from __future__ import annotations


def http_url(host: str, port: int, path: str = "") -> str:
    """`http://host:port/path`, with an IPv6 address in brackets as URLs need it."""
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}{path}"
