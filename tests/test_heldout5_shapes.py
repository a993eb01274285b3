"""Classes and shapes found in the fifth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, fifth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature

STUCK = (
    "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in "
    "monitoring enqueued collectives."
)


def test_first_pg_without_heartbeat_is_where_the_hang_shows(tmp_path: Path) -> None:
    first = (
        "[rank3]:[E1107 08:15:02.112233445 ProcessGroupNCCL.cpp:1380] [PG 1 (tp) Rank 3] "
        "First PG on this rank that detected no heartbeat of its watchdog."
    )
    text = (
        f"{first}\n"
        "[rank3]:[E1107 08:15:02.112299001 ProcessGroupNCCL.cpp:1420] [PG 1 (tp) Rank 3] "
        "Heartbeat monitor timed out! Process will be terminated after dumping debug info. "
        "workMetaList_.size()=4\n"
        f"[rank3]:[F1107 08:23:02.112400000 ProcessGroupNCCL.cpp:1230] [PG 1 (tp) Rank 3] {STUCK}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "pt_heartbeat_watchdog_stuck"
    assert root_line(diagnoses) == first


def test_a_proxy_connection_closed_at_teardown_is_no_failure(tmp_path: Path) -> None:
    text = "".join(
        f"gpu-a7:{400 + r}:{430 + r} [{r}] NCCL INFO comm 0x5590000{r} rank {r} nranks 2 "
        f"cudaDev {r} busId {r + 1}0000 - Init COMPLETE\n"
        for r in range(2)
    ) + "".join(
        f"gpu-a7:{400 + r}:{470 + r} [{r}] NCCL INFO [Service thread] Connection closed by "
        f"localRank {r}\n"
        for r in range(2)
    )
    assert diagnose(tmp_path, text) == []


def test_watchdog_timeout_beats_a_teardown_line_of_the_same_pod(tmp_path: Path) -> None:
    timeout = (
        "[rank1]:[E0303 14:02:11.500000001 ProcessGroupNCCL.cpp:570] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600021 milliseconds before timing out."
    )
    text = (
        f"{timeout}\n"
        "trainer-pod-x:88:95 [1] NCCL INFO [Service thread] Connection closed by localRank 1\n"
        "trainer-pod-x:88:90 [1] NCCL INFO comm 0x55aa01 rank 1 nranks 2 cudaDev 1 busId 3d000 "
        "- Abort COMPLETE\n"
    )
    assert root_line(diagnose(tmp_path, text)) == timeout


def test_shm_segment_named_only_by_torchs_last_error(tmp_path: Path) -> None:
    shm = "Error while creating shared memory segment /dev/shm/nccl-Tq84Lm (size 5767168)"
    text = (
        "torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled system error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.20.5\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error.\n"
        "Last error:\n"
        f"{shm}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_shm_segment_create_failed"
    assert root_line(diagnoses) == shm


def test_a_failed_fallocate_stays_ahead_of_the_segment_it_failed(tmp_path: Path) -> None:
    fallocate = (
        "node4:5120:5188 [2] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : "
        "No space left on device"
    )
    text = (
        f"{fallocate}\n"
        "node4:5120:5188 [2] NCCL INFO include/shm.h:41 -> 2\n"
        "node4:5120:5188 [2] include/shm.h:48 NCCL WARN Error while creating shared memory "
        "segment nccl-shm-recv-aa01-0-2-3 (size 4194656)\n"
    )
    assert root_line(diagnose(tmp_path, text)) == fallocate


def test_bare_warn_word_before_a_shm_failure(tmp_path: Path) -> None:
    warn = "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-abcde (size 9000)"
    text = (
        f"{warn}\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed "
        "or device error.\n"
    )
    assert root_line(diagnose(tmp_path, text)) == warn


def test_kernel_assertion_lines_name_the_failed_condition(tmp_path: Path) -> None:
    first = (
        "/opt/src/aten/native/cuda/ScatterGather.cu:365: scatter_kernel: block: [4,0,0], "
        "thread: [96,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size` failed."
    )
    text = (
        f"{first}\n"
        "/opt/src/aten/native/cuda/ScatterGather.cu:365: scatter_kernel: block: [4,0,0], "
        "thread: [97,0,0] Assertion `idx_dim >= 0 && idx_dim < index_size` failed.\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "cuda_kernel_assertion"
    assert root_line(diagnoses) == first


def test_thrust_error_code_is_a_cuda_error(tmp_path: Path) -> None:
    first = (
        "RuntimeError: radix_sort: failed to synchronize: cudaErrorAssert: "
        "device-side assert triggered"
    )
    text = (
        f"{first}\n"
        "terminate called after throwing an instance of 'c10::Error'\n"
        "  what():  CUDA error: device-side assert triggered\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "pt_cuda_error"
    assert root_line(diagnoses) == first


def test_ranks_without_times_keep_the_order_they_were_pasted_in(tmp_path: Path) -> None:
    def timeout(rank: int) -> str:
        return (
            f"[E ProcessGroupNCCL.cpp:475] [Rank {rank}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=7, OpType=ALLGATHER, Timeout(ms)=900000) ran for "
            f"90{rank}100 milliseconds before timing out."
        )

    text = f"{timeout(6)}\n{timeout(4)}\n{timeout(5)}\n"
    assert root_line(diagnose(tmp_path, text)) == timeout(6)
