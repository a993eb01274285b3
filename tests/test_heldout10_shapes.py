"""Classes and shapes found in the tenth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, tenth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def test_agent_signal_by_number_glued_behind_a_progress_bar(tmp_path: Path) -> None:
    # The launching terminal went away: the agent names the signal by its number (1, SIGHUP),
    # printed straight behind a progress bar that ended without a newline.
    agent = (
        " 41%|####      | 812/1980 [3:02:11<4:21:40, 13.45s/it]W0412 03:11:09.114000 55123 "
        "/opt/env/lib/python3.11/site-packages/torch/distributed/elastic/agent/server/api.py:704]"
        " Received 1 death signal, shutting down workers"
    )
    text = (
        "{'loss': 0.4412, 'grad_norm': 1.27, 'learning_rate': 2.1e-05, 'epoch': 3.02}\n"
        "\n"
        f"{agent}\n"
        "W0412 03:11:09.120000 55123 /opt/env/lib/python3.11/site-packages/torch/distributed/"
        "elastic/multiprocessing/api.py:897] Sending process 55130 closing signal SIGHUP\n"
        "W0412 03:11:09.121000 55123 /opt/env/lib/python3.11/site-packages/torch/distributed/"
        "elastic/multiprocessing/api.py:897] Sending process 55131 closing signal SIGHUP\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "elastic_agent_signal"
    assert root_line(diagnoses) == agent
    assert root(diagnoses)["fields"]["signum"] == "1"


def test_agent_signal_by_number_in_rich_layout_beats_its_closing_signals(tmp_path: Path) -> None:
    # rich's console handler: time, level, message, and the source file at the right margin.
    agent = "[07:45:02] WARNING  Received 15 death signal, shutting down workers      api.py:731"
    text = (
        f"{agent}\n"
        "           WARNING  Sending process 9041 closing signal SIGTERM         api.py:700\n"
        "           WARNING  Sending process 9042 closing signal SIGTERM         api.py:700\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "elastic_agent_signal"
    assert root_line(diagnoses) == agent


def test_nccl_hang_check_naming_a_collective_mismatch_is_a_cause(tmp_path: Path) -> None:
    # NCCL 2.8/2.9's hang check; the poster kept only the device tag before the source file.
    line = (
        "[2] init.cc:1261 NCCL WARN Your program may be hanging, this may be caused by a "
        "collective mismatch around rank 5. Please check your collective calls at and around "
        "this rank."
    )
    diagnoses = diagnose(tmp_path, line + "\n")
    assert signature(diagnoses) == "nccl_collective_mismatch_hang"
    assert root_line(diagnoses) == line
    assert root(diagnoses)["fields"]["around_rank"] == "5"


def test_libmlx5_completion_dump_behind_a_ray_label_is_the_cause(tmp_path: Path) -> None:
    # The verbs provider prints its own CQE dump (hex words follow) before NCCL reports.
    mlx = "(Learner pid=7731, ip=10.40.2.17) mlx5: gpu-b07: got completion with error:"
    text = (
        "(Learner pid=7731, ip=10.40.2.17) sync tensor: encoder.layers.3.fc1.weight, "
        "dtype: torch.float16\n"
        f"{mlx}\n"
        "(Learner pid=7731, ip=10.40.2.17) 00000000 00000000 00000000 00000000\n"
        "(Learner pid=7731, ip=10.40.2.17) 00000000 00000000 00000000 00000000\n"
        "(Learner pid=7731, ip=10.40.2.17) RuntimeError: NCCL error: unhandled system error "
        "(run with NCCL_DEBUG=INFO for details)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "libmlx5_cqe_error"
    assert root_line(diagnoses) == mlx


def test_a_bare_nccl_warn_line_is_matched_like_a_headed_one(tmp_path: Path) -> None:
    # Posters paste the message with only the `NCCL WARN` marker left of the header.
    line = (
        "NCCL WARN NCCL cannot be captured in a graph if either it wasn't built with CUDA "
        "runtime >= 11.3 or if the installed CUDA driver < R465."
    )
    diagnoses = diagnose(tmp_path, line + "\n")
    assert signature(diagnoses) == "nccl_graph_capture_failed"
    assert root_line(diagnoses) == line


def test_a_run_whose_only_warnings_are_settings_stays_quiet(tmp_path: Path) -> None:
    # A healthy run: NCCL 2.28 init lines (an optional plugin not found) and the trainer's own
    # WARNING lines about checkpoint settings, then steps.
    text = (
        "gpu-n3:41007:41007 [4] NCCL INFO GIN/Plugin: Could not find: libnccl-gin.so\n"
        "gpu-n3:41007:41007 [4] NCCL INFO Assigned GIN plugin GIN_IB_PROXY to comm\n"
        "gpu-n3:41007:41007 [4] NCCL INFO Using network IB\n"
        "2026-03-02 10:14:07 | WARNING | trainer.ckpt | save_every=1 writes full weights at every "
        "save and can leave GPUs idle; consider save_every=final\n"
        "Steps:   3%|▎         | 1/32 [00:19<09:58, 19.31s/step]2026-03-02 10:14:27 | INFO | "
        "__main__ | step=1 loss=10.871\n"
    )
    assert diagnose(tmp_path, text) == []


def test_watchdog_lines_behind_child_stream_labels_name_the_lagging_rank(tmp_path: Path) -> None:
    # `accelerate test` echoes its child's output as `stdout: ` / `stderr: `. Rank 2 never
    # finished the first collective while rank 0 had moved on: rank 2's line is the root.
    behind = (
        "stderr: [E ProcessGroupNCCL.cpp:640] [Rank 2] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, Timeout(ms)=900000) ran for 904120 "
        "milliseconds before timing out."
    )
    text = (
        "stdout: Distributed environment: MULTI_GPU  Backend: nccl\n"
        "stdout: Num processes: 3\n"
        "stdout: \n"
        f"{behind}\n"
        "stderr: [E ProcessGroupNCCL.cpp:640] [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=2, OpType=ALLGATHER, Timeout(ms)=900000) ran for 904077 "
        "milliseconds before timing out.\n"
        "stderr: Traceback (most recent call last):\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == behind


def test_old_ib_collective_mismatch_among_framework_lines_is_the_cause(tmp_path: Path) -> None:
    # NCCL before 2.10 printed the IB size mismatch without request, tag or peer; the
    # framework's own lines and the error-return trace sit around it.
    warn = (
        "gpu-w4:7710:7790 [1] external/nccl_archive/src/transport/net_ib.cc:640 NCCL WARN "
        "NET/IB : collective mismatch error local size 65536 remote 8192 addr 7f00c1200000 "
        "rkey 51d seq 3/3"
    )
    text = (
        f"{warn}\n"
        "2021-03-02 10:11:12.100200: I trainer/comm.cc:88] done collective key 41 ncclResult 0\n"
        "gpu-w4:7710:7790 [1] NCCL INFO external/nccl_archive/src/transport/net.cc:455 -> 3\n"
        "gpu-w4:7710:7790 [1] NCCL INFO external/nccl_archive/src/transport.cc:160 -> 3 "
        "[Proxy Thread]\n"
        "2021-03-02 10:11:12.100400: I trainer/comm.cc:61] call AllReduce collective key 42\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ib_collective_size_mismatch"
    assert root_line(diagnoses) == warn


def test_xla_failing_to_load_nccl_is_the_cause_not_the_tpu_probe(tmp_path: Path) -> None:
    # XLA (JAX) loads libnccl at run time; absl's probe of other backends says INTERNAL too.
    internal = (
        "INTERNAL: external/xla/xla/service/gpu/nccl_utils.cc:140: NCCL operation "
        "ncclGetUniqueId(&id) failed: Unable to load NCCL library. Multi-GPU collectives will "
        "not work."
    )
    text = (
        "I0511 08:02:10.110200 139870001 xla_bridge.py:700] Unable to initialize backend 'tpu': "
        "INTERNAL: Failed to open libtpu.so: cannot open shared object file\n"
        "2025-05-11 08:03:40.552100: W external/xla/xla/service/gpu/runtime/support.cc:60] "
        "Intercepted XLA runtime error:\n"
        f"{internal}\n"
        "2025-05-11 08:03:40.552180: W external/xla/xla/service/gpu/runtime/support.cc:60] "
        "Intercepted XLA runtime error:\n"
        f"{internal}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_library_not_loaded"
    assert root_line(diagnoses) == internal
