"""Classes and shapes found in the second held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, second set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, signature


def test_driver_older_than_the_cuda_runtime(tmp_path: Path) -> None:
    line = (
        "CUDA failure common.cu:733 'CUDA driver version is insufficient for CUDA runtime version'"
    )
    text = (
        "# nThread 1 nGpus 4 minBytes 64 maxBytes 1048576 step: 2(factor) warmup iters: 5\n"
        "node-a3:901:901 [0] misc/ibvwrap.cc:66 NCCL WARN Failed to open libibverbs.so[.1]\n"
        f"{line}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "cuda_driver_too_old"
    assert root(diagnoses)["line"] == line


def test_driver_too_old_reported_by_a_thc_check(tmp_path: Path) -> None:
    check = (
        "THCudaCheck FAIL file=/opt/build/ext/gpu_util.cc line=57 error=35 : CUDA driver "
        "version is insufficient for CUDA runtime version"
    )
    text = f'{check}\n{check}\nTraceback (most recent call last):\n  File "fit.py", line 3\n'
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "cuda_driver_too_old"
    assert root(diagnoses)["line"] == check


def test_c10d_connect_timeout_with_host_colon_port_beats_the_rendezvous_wrapper(
    tmp_path: Path,
) -> None:
    timeout = (
        "[E socket.cpp:812] [c10d] The client socket has timed out after 90s while trying to "
        "connect to 10.20.30.40:29411"
    )
    text = (
        f"{timeout}\n"
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to "
        "the C10d store has failed. See inner exception for details.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "store_client_connect_timeout"
    assert root(diagnoses)["line"] == timeout


def test_old_nccl_mismatched_collective_warning(tmp_path: Path) -> None:
    warn = (
        "enqueue.cc:412 NCCL WARN Mismatched collective detected, please check your collective "
        "calls at and around rank 12. You can use NCCL_DEBUG=INFO to see more"
    )
    diagnoses = diagnose(tmp_path, warn + "\n")
    assert signature(diagnoses) == "nccl_mismatched_collective"
    assert root(diagnoses)["line"] == warn


def test_torch_collective_fingerprint_mismatch(tmp_path: Path) -> None:
    line = (
        "[rank3]: RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=77, OpType=BROADCAST, TensorShape=[8]), "
        "but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=77, "
        "OpType=ALLREDUCE, TensorShape=[8])."
    )
    diagnoses = diagnose(tmp_path, line + "\n")
    assert signature(diagnoses) == "pt_collective_mismatch"
    assert root(diagnoses)["line"] == line


def test_signal_handler_bus_error_among_nccl_info_lines(tmp_path: Path) -> None:
    crash = "[gpu-node-2:7702 :0:7715] Caught signal 7 (Bus error: nonexistent physical address)"
    text = (
        "gpu-node-2:7702:7710 [3] NCCL INFO Channel 04/0 : 3[3] -> 2[2] via P2P/IPC/read\n"
        f"{crash}\n"
        "gpu-node-2:7701:7709 [2] NCCL INFO Channel 04/0 : 2[2] -> 1[1] via P2P/IPC/read\n"
        "==== backtrace (tid:   7715) ====\n"
        " 0 0x00000000000512a0 killpg()  ???:0\n"
        "=================================\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "native_signal_caught"
    assert root(diagnoses)["line"] == crash


def test_libfabric_cannot_allocate_a_completion_queue(tmp_path: Path) -> None:
    alloc = (
        "libfabric:3301:1700000000::efa:cq:efa_cq_open():120<warn> Unable to create extended "
        "CQ: Cannot allocate memory"
    )
    text = (
        f"{alloc}\n"
        "node-9:3301:3350 [2] nccl_ofi_init:301 NCCL WARN NET/OFI Couldn't open CQ. RC: -12, "
        "ERROR: Cannot allocate memory\n"
        "node-9:3301:3350 [2] NCCL INFO Using network Socket\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "ofi_device_resource_enomem"
    assert root(diagnoses)["line"] == alloc


def test_libfabric_efa_transfer_error_to_a_peer(tmp_path: Path) -> None:
    err = (
        "libfabric:88120:1710000000::efa:cq:efa_rdm_rxe_handle_error():611<warn> err: 113, "
        "message: Unreachable remote My EFA addr: fi_addr_efa://[fe80::1:2ff:fe3:4]:0:11 "
        "My host id: i-0aaa Peer EFA addr: fi_addr_efa://[fe80::5:6ff:fe7:8]:0:22 "
        "Peer host id: i-0bbb (113)"
    )
    text = f"{err}\nip-10-0-0-5:88120:88200 [1] NCCL INFO Channel 00/0 : 0[1] -> 8[1] [send]\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "ofi_efa_transfer_error"
    assert root(diagnoses)["line"] == err


def test_nccl_2_2_warning_without_the_nccl_marker(tmp_path: Path) -> None:
    # NCCL 2.2 printed `host:pid:tid [dev] file:line WARN msg`; the first WARN is harmless.
    socket = (
        "f00dcafe1234:812:812 [0] include/socket.h:299 WARN Socket creation failed : Address "
        "family not supported by protocol"
    )
    text = (
        f"f00dcafe1234:812:812 [0] misc/ibvwrap.cu:63 WARN Failed to open libibverbs.so\n{socket}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_sock_create_failed"
    assert root(diagnoses)["line"] == socket
