"""Classes and shapes found in the twelfth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, twelfth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def test_xla_nccl_call_failure_before_the_first_timed_line_is_the_root(tmp_path: Path) -> None:
    # XLA prints a header, then the error on its own line; the excerpt cut the first header's
    # date, so the first error has no time while its repeats do.
    first = (
        "INTERNAL: xla/service/gpu/nccl_clique.cc:212: NCCL operation "
        "ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled system error"
    )
    text = (
        "W xla/service/gpu/runtime/support.cc:58] Intercepted XLA runtime error:\n"
        f"{first}\n"
        "2025-02-11 08:14:52.401123: E xla/pjrt/pjrt_stream_executor_client.cc:2777] Execution "
        "of replica 2 failed: INTERNAL: Failed to execute XLA Runtime executable: run time error: "
        "custom call 'xla.gpu.all_reduce' failed: xla/service/gpu/nccl_clique.cc:212: NCCL "
        "operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled system error.\n"
        "2025-02-11 08:14:52.402871: W xla/service/gpu/runtime/support.cc:58] Intercepted XLA "
        "runtime error:\n"
        f"{first}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "xla_nccl_call_failed"
    assert root_line(diagnoses) == first
    assert root(diagnoses)["fields"]["nccl_call"] == "ncclCommInitRank"


def test_xla_group_end_failure_comes_before_the_python_traceback(tmp_path: Path) -> None:
    failed = (
        "2025-06-30 21:07:44.019311: E xla/pjrt/pjrt_stream_executor_client.cc:2502] Execution "
        "of replica 0 failed: INTERNAL: Failed to execute XLA Runtime executable: run time error: "
        "custom call 'xla.gpu.all_reduce' failed: xla/service/gpu/nccl_all_reduce_thunk.cc:301: "
        "NCCL operation ncclGroupEnd() failed: unhandled cuda error."
    )
    text = (
        f"{failed}\n"
        "Traceback (most recent call last):\n"
        '  File "<stdin>", line 1, in <module>\n'
        '  File "/opt/env/lib/python3.11/site-packages/jax/_src/api.py", line 1794, in cache_miss\n'
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "xla_nccl_call_failed"
    assert root_line(diagnoses) == failed


def test_torch1_numbered_nccl_error_in_what_beats_the_terminate_line(tmp_path: Path) -> None:
    what = "  what():  NCCL Error 2: unhandled system error"
    text = (
        "Epoch 3:  12%|#2        | 88/713 [00:41<04:52]\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        f"{what}\n"
        "Aborted (core dumped)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "pt_nccl_error_in"
    assert root_line(diagnoses) == what
    assert root(diagnoses)["fields"]["nccl_error"] == "unhandled system error"


def test_paddle1_nccl_text_at_its_source_location_is_recognised(tmp_path: Path) -> None:
    what = "  what():  unhandled system error at [/build/paddle/fluid/platform/nccl_helper.h:104]"
    text = (
        "2020-02-17 06:41:09.221903, iter: 120031, lr: 0.000500, 'loss': 12.771, time: 0.904\n"
        "terminate called after throwing an instance of 'paddle::platform::EnforceNotMet'\n"
        f"{what}\n"
        "PaddlePaddle Call Stacks:\n"
        "0       0x7f31c00d1e80p void paddle::platform::EnforceNotMet::Init<char const*>(char "
        "const*, char const*, int) + 352\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "paddle_nccl_error"
    assert root_line(diagnoses) == what


def test_paddle2_external_error_summary_is_recognised(tmp_path: Path) -> None:
    summary = (
        "ExternalError:  Nccl error, unhandled system error  "
        "(at /build/paddle/fluid/platform/collective_helper.cc:71)"
    )
    text = (
        "----------------------\n"
        "Error Message Summary:\n"
        "----------------------\n"
        f"{summary}\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "tools/train.py", line 88, in <module>\n'
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "paddle_nccl_error"
    assert root_line(diagnoses) == summary


def test_open_file_limit_before_a_collective_timeout_is_the_cause(tmp_path: Path) -> None:
    limit = (
        "(RolloutWorker pid=40211) Failed to register fd for the object store: Too many open files"
    )
    text = (
        f"{limit}\n"
        "(FSDPActor pid=40377) [rank3]:[E514 02:10:47.558120311 ProcessGroupNCCL.cpp:632] "
        "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, "
        "OpType=_ALLGATHER_BASE, NumelIn=4194304, NumelOut=33554432, Timeout(ms)=600000) ran "
        "for 600047 milliseconds before timing out.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "process_fd_limit_exhausted"
    assert root_line(diagnoses) == limit


def test_custom_allreduce_peer_access_failure_is_a_cause(tmp_path: Path) -> None:
    failed = (
        "Failed: Cuda error /src/kernels/custom_all_reduce.cuh:311 'peer access is not "
        "supported between these two devices'"
    )
    text = (
        "[07:22:15 TP0] Init torch distributed begin.\n"
        "[07:22:15 TP1] Init torch distributed begin.\n"
        f"{failed}\n"
        f"{failed}\n"
        "[rank0]:[W611 07:22:16.104557201 CudaIPCTypes.cpp:16] Producer process has been "
        "terminated before all shared CUDA tensors released. See Note [Sharing CUDA tensors]\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "custom_allreduce_cuda_error"
    assert root_line(diagnoses) == failed
    assert root(diagnoses)["fields"]["error"].startswith("peer access is not supported")


def test_custom_allreduce_failure_behind_a_host_label_is_a_cause(tmp_path: Path) -> None:
    failed = (
        "infer-b3: Failed: Cuda error /src/kernels/custom_all_reduce.cuh:311 'peer access is "
        "not supported between these two devices'"
    )
    text = f"infer-b3: [07:22:15 TP1] Init torch distributed begin.\n{failed}\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "custom_allreduce_cuda_error"
    assert root_line(diagnoses) == failed


def test_nccl27_ipc_handle_open_failure_beats_another_ranks_runtime_error(tmp_path: Path) -> None:
    warn = (
        "(pid=51822) trainer-7:51822:52090 [0] transport/p2p.cc:238 NCCL WARN failed to open "
        "CUDA IPC handle : 217 peer access is not supported between these two devices"
    )
    text = (
        "RuntimeError: NCCL error in: /opt/torch/lib/c10d/ProcessGroupNCCL.cpp:784, unhandled "
        "cuda error, NCCL version 2.7.8\n"
        "(pid=51822) trainer-7:51822:52090 [0] NCCL INFO Channel 00 : 1[41000] -> 0[3e000] via "
        "P2P/IPC\n"
        "(pid=51822) \n"
        f"{warn}\n"
        "(pid=51822) trainer-7:51822:52090 [0] NCCL INFO transport.cc:68 -> 1\n"
        "(pid=51822) trainer-7:51822:52090 [0] NCCL INFO init.cc:766 -> 1\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ipc_handle_open_failed"
    assert root_line(diagnoses) == warn
    assert root(diagnoses)["fields"]["cuda_code"] == "217"


def test_xla_nccl_failure_on_another_rank_is_explained_by_the_nccl_cause(tmp_path: Path) -> None:
    # XLA's wrapper is what every other rank prints once one rank's NCCL call failed: it must
    # read as a consequence of that cause, as torch's and Paddle's wrappers do.
    text = (
        "[rank0]:trn-node-3:5120:5188 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: "
        "Connect to 10.20.1.14<50321> failed : Software caused connection abort\n"
        "[rank1]:2025-03-04 10:02:11.840022: E xla/pjrt/pjrt_stream_executor_client.cc:2777] "
        "Execution of replica 1 failed: INTERNAL: xla/service/gpu/nccl_clique.cc:212: NCCL "
        "operation ncclCommInitRank(&comm, nranks, id, rank) failed: unhandled system error.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_sock_connect_failed"
    collateral = {c["signature"]: c for c in diagnoses[0]["collateral"]}
    assert collateral["xla_nccl_call_failed"]["explained_by_root_cause"] is True
