"""Shapes and classes found in real logs held out from tuning (bench/RESULTS.md, "Held-out real
cases"). Every line here is invented in our own words: other hosts, numbers and text."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root


def test_watchdog_timeout_printed_behind_a_progress_bar(tmp_path: Path) -> None:
    bar = "Epoch 2:  41%|████      | 7310/17800 [3:10:02<4:32:41,  1.56s/it, loss=0.93]"
    text = (
        f"{bar}[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4410, OpType=ALLGATHER, Timeout(ms)=600000) ran for 600412 "
        "milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4410, OpType=ALLGATHER, Timeout(ms)=600000) ran for 600533 "
        "milliseconds before timing out.\n"
    )
    rc = root(diagnose(tmp_path, text))
    assert rc["rank"] == 1
    assert rc["line"].startswith(bar)


def test_watchdog_sequence_numbers_of_different_groups_name_no_laggard(tmp_path: Path) -> None:
    # Thousands of collectives apart: not one process group, so rank 6 is not "behind".
    text = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=8811, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800270 "
        "milliseconds before timing out.\n"
        "[E ProcessGroupNCCL.cpp:475] [Rank 6] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=2051, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800311 "
        "milliseconds before timing out.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root(diagnoses)["rank"] == 2
    reasons = [r for s in diagnoses[0]["suspects"] for r in s["reasons"]]
    assert not any("behind the others" in r for r in reasons)


def test_ib_completion_error_in_the_form_before_nccl_2_10(tmp_path: Path) -> None:
    warn = (
        "gpu-b7:311:402 [2] transport/net_ib.cc:812 NCCL WARN NET/IB : Got completion with "
        "error 12, opcode 0, len 0, vendor err 129"
    )
    text = f"{warn}\ngpu-b7:311:402 [2] NCCL INFO transport/net_ib.cc:1034 -> 2\n"
    diagnoses = diagnose(tmp_path, text)
    assert diagnoses[0]["signature"]["id"] == "nccl_ib_wc_retry_exceeded"
    assert root(diagnoses)["line"] == warn


def test_cuda_out_of_memory_is_the_cause_of_the_failed_nccl_allocation(tmp_path: Path) -> None:
    oom = "trn-04:5512:5590 [1] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'"
    text = (
        "trn-04:5510:5588 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed "
        "by remote peer trn-04<40117>\n"
        f"{oom}\n"
        "trn-04:5512:5590 [1] include/alloc.h:185 NCCL WARN Failed to CUDA calloc 4194304 bytes\n"
        "trn-04:5512:5590 [1] NCCL INFO transport/p2p.cc:204 -> 1\n"
    )
    assert root(diagnose(tmp_path, text))["line"] == oom


IFNAME_LINE = "gpu-a12:4411:4411 [1] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens9f7"
NO_ADDRESS = (
    "gpu-a12:4410:4498 [0] NCCL WARN ncclSocketInit: connecting to address  with family "
    "41012 is neither AF_INET(2) nor AF_INET6(10)"
)


def test_socket_ifname_that_matches_no_interface_is_the_root(tmp_path: Path) -> None:
    text = f"{IFNAME_LINE}\n{NO_ADDRESS}\ngpu-a12:4410:4498 [0] NCCL INFO bootstrap.cc:92 -> 3\n"
    diagnoses = diagnose(tmp_path, text)
    assert root(diagnoses)["line"] == IFNAME_LINE
    assert diagnoses[0]["first_warning"]["line"] == NO_ADDRESS


def test_socket_ifname_that_was_used_is_not_blamed(tmp_path: Path) -> None:
    using = "gpu-a12:4411:4411 [1] NCCL INFO Bootstrap : Using ens9f7:10.40.2.12<0>"
    text = f"{IFNAME_LINE}\n{using}\n{NO_ADDRESS}\n"
    assert root(diagnose(tmp_path, text))["line"] == NO_ADDRESS
