"""The root cause names the GPU: from the failing NCCL line's own header when it has one."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root


def test_device_comes_from_the_failing_lines_header(tmp_path: Path) -> None:
    # An excerpt without the init lines that name each process's GPU: the WARN header's
    # `[5]` is the device of the thread that failed.
    text = (
        "trainer-3:7001:7090 [5] enqueue.cc:1451 NCCL WARN Cuda failure 'an illegal memory "
        "access was encountered'\n"
        "trainer-3:7001:7090 [5] NCCL INFO enqueue.cc:1480 -> 1\n"
    )
    rc = root(diagnose(tmp_path, text))
    assert rc["host"] == "trainer-3"
    assert rc["device"] == 5


def test_a_process_with_several_gpus_names_the_one_that_failed(tmp_path: Path) -> None:
    # One process drives two GPUs (its init lines name both); the failing thread's header
    # says which one failed.
    text = (
        "box-1:900:900 [0] NCCL INFO comm 0x55aa01 rank 0 nranks 2 cudaDev 0 busId 1b000 - "
        "Init COMPLETE\n"
        "box-1:900:900 [1] NCCL INFO comm 0x55aa02 rank 1 nranks 2 cudaDev 1 busId 3d000 - "
        "Init COMPLETE\n"
        "box-1:900:951 [0] proxy.cc:1520 NCCL WARN [Proxy Service 0] Failed to execute "
        "operation Connect from rank 0, retcode 3\n"
    )
    rc = root(diagnose(tmp_path, text))
    assert rc["device"] == 0
