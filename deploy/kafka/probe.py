#!/usr/bin/env python3
"""Readiness probe for the dev broker: standard library only, no client library needed.

Usage: probe.py HOST PORT [TIMEOUT_S]

Speaks just enough of the Kafka wire protocol to ask the broker for its metadata:
an ApiVersions v0 request (answered by every broker version) to learn which Metadata
versions it accepts, then a Metadata request for no topics. Exit 0 and print
"brokers=N controller=ID cluster=ID" when the broker lists at least one live broker;
exit 1 otherwise (connection refused, wrong protocol, broker not registered yet).
"""

from __future__ import annotations

import socket
import struct
import sys

API_METADATA = 3
API_VERSIONS = 18


class ProbeError(Exception):
    pass


def _request(sock: socket.socket, api_key: int, version: int, corr: int, body: bytes) -> bytes:
    client_id = b"dev-broker-probe"
    # Request header v1: api_key, api_version, correlation_id, client_id (nullable string).
    header = struct.pack(">hhih", api_key, version, corr, len(client_id)) + client_id
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    size = struct.unpack(">i", _read(sock, 4))[0]
    resp = _read(sock, size)
    (got,) = struct.unpack_from(">i", resp, 0)
    if got != corr:
        raise ProbeError(f"correlation id {got} != {corr}")
    return resp[4:]  # response header v0 is just the correlation id


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ProbeError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def _metadata_range(sock: socket.socket) -> tuple[int, int]:
    resp = _request(sock, API_VERSIONS, 0, 1, b"")
    err, n = struct.unpack_from(">hi", resp, 0)
    off = 6
    for _ in range(n):
        key, lo, hi = struct.unpack_from(">hhh", resp, off)
        off += 6
        if key == API_METADATA:
            return lo, hi
    raise ProbeError(f"broker does not list the Metadata API (ApiVersions error {err})")


def _string(buf: bytes, off: int) -> tuple[str | None, int]:
    (n,) = struct.unpack_from(">h", buf, off)
    off += 2
    if n < 0:
        return None, off
    return buf[off : off + n].decode("utf-8", "replace"), off + n


def probe(host: str, port: int, timeout: float) -> str:
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        lo, hi = _metadata_range(sock)
        # Versions 4..8 share the non-flexible layout parsed below.
        version = max(lo, 4)
        if version > min(hi, 8):
            raise ProbeError(f"no Metadata version in 4..8 (broker offers {lo}..{hi})")
        body = struct.pack(">ib", 0, 0)  # topics: empty array; allow_auto_topic_creation: false
        if version >= 8:
            body += struct.pack(">bb", 0, 0)  # include cluster/topic authorized operations
        resp = _request(sock, API_METADATA, version, 2, body)
        off = 4  # throttle_time_ms
        (n_brokers,) = struct.unpack_from(">i", resp, off)
        off += 4
        for _ in range(n_brokers):
            off += 4  # node_id
            _, off = _string(resp, off)  # host
            off += 4  # port
            _, off = _string(resp, off)  # rack
        cluster, off = _string(resp, off)
        (controller,) = struct.unpack_from(">i", resp, off)
        if n_brokers < 1:
            raise ProbeError("no live broker registered yet")
        return f"brokers={n_brokers} controller={controller} cluster={cluster}"


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    timeout = float(argv[3]) if len(argv) == 4 else 2.0
    try:
        print(probe(argv[1], int(argv[2]), timeout))
    except (OSError, ProbeError, struct.error) as exc:
        print(f"not ready: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
