"""glibc malloc tuning for the daemon's process.

glibc gives each new thread its own arena, up to 8 per core: the engine thread, the event
loop, the executor threads of aiokafka's DNS look-ups, each keeps its own heap, and memory
freed in one cannot serve another. In a burst (thousands of jobs read from a backlog) that
held the daemon about 24 MiB above what two arenas need (105 vs 82 MiB above its baseline on
2,000 jobs under a 50 MiB budget). Two arenas: the event loop and the engine thread, which
run in parallel, each keep one; the rare other threads share. Only glibc has `mallopt`; on
any other C library this does nothing.

After a large release (a poll's burst of diagnoses decoded, published and dropped) glibc
keeps the freed pages resident: at the peak of a 10,000-job burst under a 50 MiB budget,
mallinfo2 counted 13-35 MiB free inside the heaps. `release_free_heap` (malloc_trim) hands
the whole free pages back; the daemon calls it after a poll of at least `TRIM_AFTER_BYTES`.

The engine's allocator (mimalloc) asks the kernel for transparent huge pages on its arenas.
The daemon frees a batch's blocks many times a second and its allocator hands idle pages back
(a short purge delay keeps resident memory near the budget), so the kernel faulted and zeroed
a fresh 2 MiB page again and again: a fifth of the daemon's CPU under a failure storm in a
`perf` profile. `avoid_huge_pages` turns them off for the daemon's process (Linux's
`PR_SET_THP_DISABLE`): a fault then zeroes only the 4 KiB page it touches. `analyze`, which
holds one job's lines at once and frees little, keeps them."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_ARENA_MAX = -8  # glibc <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
ARENAS = 2
# Fixed, not glibc's sliding default: freeing one mmapped block (a 4 MiB fetch buffer) raises
# the mmap threshold to its size and the trim threshold to twice that, after which every
# buffer up to 4 MiB comes from the heaps and up to 8 MiB free stays at their tops.
MMAP_THRESHOLD_BYTES = 128 << 10
TRIM_THRESHOLD_BYTES = 128 << 10
TRIM_AFTER_BYTES = 1 << 20
PR_SET_THP_DISABLE = 41  # <linux/prctl.h>


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


_LIBC = _libc()


def limit_arenas(arenas: int = ARENAS) -> bool:
    """Caps glibc's malloc arenas (call before starting threads); False if not glibc."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, arenas))


def fix_thresholds() -> bool:
    """Fixes glibc's mmap and trim thresholds (see MMAP_THRESHOLD_BYTES); False if not glibc."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    mmap = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    trim = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return bool(mmap and trim)


def release_free_heap() -> bool:
    """Returns the free pages of every malloc heap to the system (glibc's `malloc_trim`);
    False if not glibc or nothing was released."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return bool(trim(0))


def avoid_huge_pages() -> bool:
    """Turns transparent huge pages off for this process and the children it starts; False
    where the kernel has no such switch (not Linux, or older than 3.15)."""
    prctl = getattr(_LIBC, "prctl", None)
    if prctl is None or not sys.platform.startswith("linux"):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return bool(prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0)
