"""Loaded into the daemon by `memory_bench.py --sample` (on its PYTHONPATH, never by the
product): a thread that reads RSS every 20 ms and, at each new peak, writes where the bytes
are to $RANKWATCH_PEAK_FILE: glibc's heaps (in use, free but resident, mmapped) from
mallinfo2 (summed over all arenas)."""

from __future__ import annotations

import ctypes
import json
import os
import threading
import time

FIELDS = (
    "arena",
    "ordblks",
    "smblks",
    "hblks",
    "hblkhd",
    "usmblks",
    "fsmblks",
    "uordblks",
    "fordblks",
    "keepcost",
)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in FIELDS]


def _rss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _sample(path: str) -> None:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    peak = 0
    while True:
        rss = _rss_kib()
        if rss > peak:
            peak = rss
            m = libc.mallinfo2()
            out = {
                "rss_mib": rss / 1024,
                "heap_in_use_mib": m.uordblks / 2**20,
                "heap_free_mib": m.fordblks / 2**20,
                "heap_top_free_mib": m.keepcost / 2**20,
                "mmapped_mib": m.hblkhd / 2**20,
                "time": time.time(),
            }
            with open(path, "w") as fh:
                json.dump(out, fh)
        time.sleep(0.02)


_PATH = os.environ.get("RANKWATCH_PEAK_FILE")
if _PATH:
    threading.Thread(target=_sample, args=(_PATH,), daemon=True, name="peak-sampler").start()
