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


THRESHOLDS = textwrap.dedent(
    """
    import ctypes, sys
    from rankwatch.daemon.allocator import fix_thresholds
    if sys.argv[1] == "fixed":
        assert fix_thresholds()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    class MI2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
        ).split()]
    libc.mallinfo2.restype = MI2
    libc.free(libc.malloc(4 << 20))  # a fetch buffer, mmapped and freed
    before = libc.mallinfo2().hblks
    keep = [libc.malloc(512 << 10) for _ in range(8)]  # after it: heap or mmap?
    print(libc.mallinfo2().hblks - before)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_freeing_a_large_buffer_does_not_move_large_blocks_into_the_heap() -> None:
    """glibc's sliding threshold: after a freed 4 MiB mmapped block, 512 KiB blocks come from
    the heap, where their pages stay resident once freed; with fixed thresholds they are
    mmapped (and unmapped when freed)."""

    def mmapped(mode: str) -> int:
        cmd = [sys.executable, "-c", THRESHOLDS, mode]
        return int(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)

    assert mmapped("default") == 0
    assert mmapped("fixed") == 8


HUGE_PAGES = textwrap.dedent(
    """
    import sys
    from rankwatch.daemon.allocator import avoid_huge_pages
    if sys.argv[1] == "avoided":
        assert avoid_huge_pages()
    status = open("/proc/self/status").read()
    print(next(l for l in status.splitlines() if l.startswith("THP_enabled:")).split()[1])
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")
def test_the_daemon_process_takes_no_transparent_huge_pages() -> None:
    """The kernel reports the switch in /proc/<pid>/status (`THP_enabled: 0` once set)."""

    def enabled(mode: str) -> str:
        cmd = [sys.executable, "-c", HUGE_PAGES, mode]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()

    assert enabled("default") == "1"
    assert enabled("avoided") == "0"
