"""Classes and shapes found in the fourth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, fourth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature


def pytorch_block(label: str, wrapper: str, detail: str, last_error: str) -> str:
    lines = [
        "Traceback (most recent call last):",
        '  File "/srv/job/train.py", line 88, in <module>',
        "    dist.barrier()",
        f"torch.distributed.DistBackendError: NCCL error in: {wrapper}",
        detail,
        "Last error:",
        last_error,
    ]
    return "".join(f"{label}{line}\n" for line in lines)


def test_last_error_socket_reset_beats_the_wrapper(tmp_path: Path) -> None:
    reset = (
        "socketProgressOpt: Call to recv from 10.77.0.15<41120> failed : Connection reset by peer"
    )
    text = pytorch_block(
        "",
        "/opt/torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process exited or there "
        "was a network error, NCCL version 2.20.5",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
        reset,
    )
    assert root_line(diagnose(tmp_path, text)) == reset


def test_last_error_shm_segment_under_rank_labels(tmp_path: Path) -> None:
    shm = "[rank5]: Error while creating shared memory segment /dev/shm/nccl-Zr3kPq (size 9437440)"
    text = pytorch_block(
        "[rank5]: ",
        "/opt/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2011, unhandled system error "
        "(run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error. ",
        "Error while creating shared memory segment /dev/shm/nccl-Zr3kPq (size 9437440)",
    )
    assert root_line(diagnose(tmp_path, text)) == shm


def test_ofi_request_completed_with_error(tmp_path: Path) -> None:
    ofi = (
        "[rank1]: NET/OFI Request 0x7f55c0a1e2b0 completed with error. RC: 103. "
        "Error: 4 (CANCELED). Completed length: 0"
    )
    text = pytorch_block(
        "[rank1]: ",
        "/opt/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3402, remote process exited "
        "or there was a network error, NCCL version 2.27.3",
        "ncclRemoteError: A call failed possibly due to a network error or a remote process "
        "exiting prematurely.",
        "NET/OFI Request 0x7f55c0a1e2b0 completed with error. RC: 103. Error: 4 (CANCELED). "
        "Completed length: 0",
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "ofi_request_completed_with_error"
    assert root_line(diagnoses) == ofi


def test_trace_tail_of_an_earlier_failure_is_not_the_root(tmp_path: Path) -> None:
    warn = (
        "ax-7:2231:2290 [1] transport/net_ib.cc:2108 NCCL WARN NET/IB : Got completion from "
        "peer 10.3.1.9<50331> with status=5 opcode=0 len=0 vendor err 249 (Recv)"
    )
    text = (
        "ax-7:2231:2290 [1] NCCL INFO proxy.cc:880 -> 6 [Progress Thread]\n"
        "\n"
        f"{warn}\n"
        "ax-7:2231:2290 [1] NCCL INFO transport/net.cc:1290 -> 6\n"
        "ax-7:2231:2290 [1] NCCL INFO proxy.cc:880 -> 6 [Progress Thread]\n"
    )
    assert root_line(diagnose(tmp_path, text)) == warn


def test_nccl_2_25_shared_memory_info_line_is_the_cause(tmp_path: Path) -> None:
    info = (
        "ws-2:8810:8810 [1] NCCL INFO ncclMaxSharedMem 90112 exceeds device/fn maxSharedMem 65536"
    )
    text = (
        "ws-2:8810:8810 [1] NCCL INFO cudaDriverVersion 12090\n"
        "ws-2:8810:8810 [1] NCCL INFO NCCL version 2.25.1+cuda12.4\n"
        f"{info}\n"
        "ws-2:8810:8810 [1] NCCL INFO NET/Socket : Using [0]enp3s0:192.168.7.20<0>\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_kernel_resources_exceeded"
    assert root_line(diagnoses) == info


def test_last_error_under_a_pdsh_label_and_a_timestamp_column(tmp_path: Path) -> None:
    reset = (
        "socketProgressOpt: Call to recv from 10.77.0.15<41120> failed : Connection reset by peer"
    )
    block = pytorch_block(
        "",
        "/opt/torch/csrc/distributed/c10d/NCCLUtils.hpp:275, remote process exited or there "
        "was a network error, NCCL version 2.20.5",
        "ncclRemoteError: A call failed possibly due to a network error.",
        reset,
    ).splitlines()
    for sub in ("pdsh", "stamped"):
        (tmp_path / sub).mkdir()
    labelled = "".join(f"gpu-node-12: {line}\n" for line in block)
    assert root_line(diagnose(tmp_path / "pdsh", labelled)) == f"gpu-node-12: {reset}"
    stamped = "".join(
        f"2026-05-02T11:40:{i:02d}.000000001Z {line}\n" for i, line in enumerate(block)
    )
    stamped_root = f"2026-05-02T11:40:{len(block) - 1:02d}.000000001Z {reset}"
    assert root_line(diagnose(tmp_path / "stamped", stamped)) == stamped_root


def test_elastic_failure_box_rows_behind_a_pdsh_label(tmp_path: Path) -> None:
    rows = [
        "  time      : 2026-04-11_08:15:40",
        "  host      : trn-b7",
        "  rank      : 3 (local_rank: 3)",
        "  exitcode  : -11 (pid: 77120)",
        "  error_file: <N/A>",
        "  traceback : Signal 11 (SIGSEGV) received by PID 77120",
        "============================================================",
    ]
    text = "".join(f"trn-b7: {row}\n" for row in rows)
    assert root_line(diagnose(tmp_path, text)) == "trn-b7:   exitcode  : -11 (pid: 77120)"
