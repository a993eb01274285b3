"""glibc malloc tuning for the daemon's process.

glibc gives each new thread its own arena, up to 8 per core: the engine thread, the event
loop, the executor threads of aiokafka's DNS look-ups, each keeps its own heap, and memory
freed in one cannot serve another. In a burst (thousands of jobs read from a backlog) that
held the daemon about 24 MiB above what two arenas need (105 vs 82 MiB above its baseline on
2,000 jobs under a 50 MiB budget). Two arenas: the event loop and the engine thread, which
run in parallel, each keep one; the rare other threads share. Only glibc has `mallopt`; on
any other C library this does nothing."""

from __future__ import annotations

import ctypes
import ctypes.util

M_ARENA_MAX = -8  # glibc <malloc.h>
ARENAS = 2


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Caps glibc's malloc arenas (call before starting threads); False if not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))
