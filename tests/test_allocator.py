"""The daemon caps glibc's malloc arenas (each thread's own heap held ~24 MiB more in a burst);
counted from glibc's own `malloc_stats`, in a fresh process whose threads each allocate."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent(
    """
    import ctypes, sys, threading
    from rankwatch.daemon.allocator import limit_arenas
    if sys.argv[1] == "limited":
        assert limit_arenas()
    together = threading.Barrier(6)  # all alive at once: no thread reuses another's arena
    def work():
        keep = [bytearray(4096) for _ in range(200)]  # from malloc, not pymalloc
        together.wait()
    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ctypes.CDLL(None).malloc_stats()
    """
)


def arenas(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode], capture_output=True, text=True, check=True
    )
    return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_the_daemon_keeps_at_most_two_malloc_arenas() -> None:
    assert arenas("default") > 2  # each thread got its own: the cap is what bounds them
    assert arenas("limited") <= 2
