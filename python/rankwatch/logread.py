"""Reading log files in bounded pieces: plain or gzip (any number of members), never more than
a chunk in memory, never blocking on something that is not a regular file.

A damaged gzip file yields what could be decompressed and then raises `PartialRead`, so that
the readable part is analyzed and the file is reported as partially read."""

from __future__ import annotations

import itertools
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path

CHUNK_BYTES = 1 << 20
GZIP_STEP_BYTES = 16 << 10
GZIP_MAGIC = b"\x1f\x8b"


class PartialRead(Exception):
    """The file's readable part was delivered; the rest could not be read (the reason)."""


class NotRegularFile(OSError):
    """The path is a FIFO, device, socket or folder: reading it could block or never end."""

    def __init__(self, path: Path) -> None:
        super().__init__(0, "not a regular file", str(path))


def _raw_chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    # O_NONBLOCK: a FIFO put where a file was found opens at once (and is refused below)
    # instead of waiting for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    with open(fd, "rb", buffering=0, closefd=True) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path)
        while chunk := fh.read(chunk_bytes):
            yield chunk


def _gunzip(raw: Iterator[bytes], first: bytes, chunk_bytes: int) -> Iterator[bytes]:
    """Decompresses gzip members one after another, at most `chunk_bytes` out per step. Input
    goes in in small steps: when zlib finds damage, only the last step's output is lost."""
    steps = (
        c[i : i + GZIP_STEP_BYTES]
        for c in itertools.chain([first], raw)
        for i in range(0, len(c), GZIP_STEP_BYTES)
    )
    d = _member()
    data, out, full = next(steps), 0, False
    while True:
        # `full`: the last step filled its output, so more may be pending without new input.
        while data or full:
            if d.eof:  # a member ended: another one follows, or zero padding
                if not data.strip(b"\0"):
                    break
                d = _member()
            try:
                piece = d.decompress(data, chunk_bytes)
            except zlib.error as e:
                raise PartialRead(f"corrupt gzip data after {out:,} bytes ({e})") from None
            out += len(piece)
            full = len(piece) == chunk_bytes
            if piece:
                yield piece
            data = d.unused_data if d.eof else d.unconsumed_tail
        nxt = next(steps, None)
        if nxt is None:
            break
        data = nxt
    if not d.eof:
        raise PartialRead(f"gzip file ends early, after {out:,} bytes")


def _member() -> zlib._Decompress:
    return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)


def read_chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The bytes of a log file (decompressed when it is gzip), in pieces of at most
    `chunk_bytes`. Raises OSError if it cannot be opened, PartialRead after the readable
    part of a damaged gzip file."""
    raw = _raw_chunks(path, chunk_bytes)
    first = next(raw, b"")
    if first[:2] == GZIP_MAGIC:
        yield from _gunzip(raw, first, chunk_bytes)
        return
    if first:
        yield first
    yield from raw


def line_blocks(chunks: Iterator[bytes], max_line_bytes: int) -> Iterator[bytes]:
    """Re-cuts `chunks` at line ends; a line longer than `max_line_bytes` that spans chunks
    is cut to that length, the rest of it dropped, so memory stays within one chunk."""
    carry = bytearray()
    dropping = False
    for chunk in chunks:
        start = 0
        if carry or dropping:
            nl = chunk.find(b"\n")
            head = chunk if nl < 0 else chunk[:nl]
            if not dropping:
                room = max_line_bytes - len(carry)
                carry += head[:room]
                dropping = len(head) > room
            if nl < 0:
                continue
            carry += b"\n"
            yield bytes(carry)
            carry.clear()
            dropping = False
            start = nl + 1
        end = chunk.rfind(b"\n") + 1
        if end > start:
            yield chunk[start:end]
        tail = chunk[max(end, start) :]
        carry += tail[:max_line_bytes]
        dropping = len(tail) > max_line_bytes
    if carry:
        yield bytes(carry)


def read_lines(path: Path, max_line_bytes: int) -> Iterator[bytes]:
    """The lines of a log file without their line ends, each cut to `max_line_bytes`."""
    for block in line_blocks(read_chunks(path), max_line_bytes):
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()
        for line in lines:
            yield line[:max_line_bytes].rstrip(b"\r")
