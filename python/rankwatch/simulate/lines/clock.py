"""Host clocks: every timestamp a process prints uses its host's clock, which runs at true
time + the host's offset (the skew). NCCL INFO lines carry no timestamp."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

BASE = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
# True time 0 of every generated job, in Unix ms.
START_MS = int(BASE.timestamp() * 1000)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

# (c10 "MMDD", torchelastic "MMDD", "HH:MM:SS", "YYYY-MM-DD", journal "Mon DD HH:MM:SS")
_SecondFields = tuple[str, str, str, str, str]


class Clock:
    """Formats host-clock times (seconds after `BASE`) in each producer's timestamp format;
    caches the per-second fields, which thousands of ranks share."""

    __slots__ = ("_cache",)

    def __init__(self) -> None:
        self._cache: dict[int, _SecondFields] = {}

    def _sec(self, t: float) -> tuple[_SecondFields, int]:
        s = math.floor(t)
        ms = int((t - s) * 1000.0)
        v = self._cache.get(s)
        if v is None:
            d = BASE + timedelta(seconds=s)
            hms = f"{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
            v = (
                f"{d.month * 100 + d.day}",
                f"{d.month:02d}{d.day:02d}",
                hms,
                f"{d.year:04d}-{d.month:02d}-{d.day:02d}",
                f"{MONTHS[d.month - 1]} {d.day:02d} {hms}",
            )
            self._cache[s] = v
        return v, ms

    def c10(self, t: float, ns: int) -> str:
        """c10 logging (glog style, nanoseconds): `1130 12:00:00.123456789`."""
        f, _ = self._sec(t)
        return f"{f[0]} {f[2]}.{ns:09d}"

    def torchelastic(self, t: float) -> str:
        """TorchLogsFormatter: `1130 12:00:00.123000`."""
        f, ms = self._sec(t)
        return f"{f[1]} {f[2]}.{ms * 1000:06d}"

    def python_logging(self, t: float) -> str:
        """The training script's `logging` default: `2026-11-30 12:00:00,123`."""
        f, ms = self._sec(t)
        return f"{f[3]} {f[2]},{ms:03d}"

    def nccl_warn(self, t: float) -> str:
        """The prefix NCCL 2.26-2.29 puts before a WARN line."""
        f, _ = self._sec(t)
        return f"[{f[3]} {f[2]}] "

    def journal(self, t: float) -> str:
        return self._sec(t)[0][4]

    def child_failed(self, t: float) -> str:
        """The `time` field of a torchelastic ChildFailedError block."""
        f, _ = self._sec(t)
        return f"{f[3]}_{f[2]}"
