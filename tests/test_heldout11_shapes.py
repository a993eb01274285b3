"""Classes and shapes found in the eleventh held-out set of real logs (bench/RESULTS.md,
"Held-out real cases, eleventh set"). Every line here is invented in our own words: other
hosts, numbers and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def test_a_container_column_before_the_nccl_header_is_peeled(tmp_path: Path) -> None:
    # A log viewer printed the container's name, a word and a space, before every line.
    warn = (
        "trainer job-31-master-0:7710:7790 [1] graph/rings.cc:38 NCCL WARN Error : ring 1 "
        "does not loop back to start (6 != 1)"
    )
    text = (
        "trainer job-31-master-0:7710:7790 [1] NCCL INFO Channel 01/02 : 0 2 5 6 0 2 5 6\n"
        f"{warn}\n"
        "trainer job-31-master-0:7710:7790 [1] NCCL INFO graph/connect.cc:312 -> 3\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ring_invalid"
    assert root_line(diagnoses) == warn
    assert root(diagnoses)["host"] == "job-31-master-0"


PROVIDER = (
    "libibverbs: Warning: no userspace device-specific driver found for "
    "/sys/class/infiniband_verbs/uverbs1"
)


def test_a_missing_verbs_provider_is_the_cause_of_a_failed_init(tmp_path: Path) -> None:
    # A container image without the adapter's verbs provider: libibverbs warns, then the
    # benchmark's own failure line is all that follows.
    text = (
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 67108864 step: 2(factor) warmup iters: 5\n"
        "#\n"
        "# Using devices\n"
        "#   Rank  0 Pid  40911 on   lab-gpu4 device  0 [0x00] Tesla T4\n"
        "#   Rank  1 Pid  40911 on   lab-gpu4 device  1 [0x00] Tesla T4\n"
        f"{PROVIDER}\n"
        "lab-gpu4: Test NCCL failure common.cu:802 'internal error'\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "ibverbs_provider_missing"
    assert root_line(diagnoses) == PROVIDER


def test_a_missing_verbs_provider_alone_is_no_failure(tmp_path: Path) -> None:
    # The same warning in a run that falls back to sockets and completes.
    text = (
        f"{PROVIDER}\n"
        "lab-gpu4:40911:40911 [0] NCCL INFO NET/IB : No device found.\n"
        "lab-gpu4:40911:40911 [0] NCCL INFO NET/Socket : Using [0]eth1:10.30.4.12<0>\n"
        "lab-gpu4:40911:40911 [0] NCCL INFO Using network Socket\n"
        "lab-gpu4:40911:40950 [0] NCCL INFO comm 0x55e1c0 rank 0 nranks 2 cudaDev 0 busId 3000 "
        "- Init COMPLETE\n"
        "lab-gpu4:40911:40951 [1] NCCL INFO comm 0x55e2d0 rank 1 nranks 2 cudaDev 1 busId 4000 "
        "- Init COMPLETE\n"
    )
    assert diagnose(tmp_path, text) == []


def test_open_mpis_signal_handler_names_the_crash(tmp_path: Path) -> None:
    # Open MPI's own handler: a banner, then the signal by name and number, then frames.
    signal_line = "[node-e9:30117] Signal: Segmentation fault (11)"
    text = (
        "all_gather_perf -b 16 -e 64M -f 2 -g 2\n"
        "[node-e9:30117] *** Process received signal ***\n"
        f"{signal_line}\n"
        "[node-e9:30117] Signal code: Address not mapped (1)\n"
        "[node-e9:30117] Failing at address: 0x18\n"
        "[node-e9:30117] [ 0] /lib/x86_64-linux-gnu/libc.so.6(+0x42520)[0x7f2a10842520]\n"
        "[node-e9:30117] [ 1] /opt/nccl/lib/libnccl.so.2(+0x4a1c0)[0x7f2a1104a1c0]\n"
        "[node-e9:30117] *** End of error message ***\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "native_signal_caught"
    assert root_line(diagnoses) == signal_line
    assert root(diagnoses)["fields"]["signal"] == "11"


def test_a_cuda_warning_naming_a_hardware_fault_is_the_cause(tmp_path: Path) -> None:
    # c10 warns when a cleanup call fails; the NCCL error after it is the consequence. The
    # test's own deliberate barrier failure printed before it is no fault of the GPU.
    warning = (
        "[W CUDAGuardImpl.h:115] Warning: CUDA warning: uncorrectable NVLink error detected "
        "during the execution (function destroyEvent)"
    )
    text = (
        "test_barrier_timeout (__main__.DistTests) ... [E ProcessGroupGloo.cpp:150] Rank 2 "
        "failed to pass monitoredBarrier in 200 ms\n"
        f"{warning}\n"
        "RuntimeError: NCCL error in: ../torch/lib/c10d/NCCLUtils.hpp:161, unhandled cuda error, "
        "NCCL version 2.9.6\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "pt_cuda_error"
    assert root_line(diagnoses) == warning
    assert root(diagnoses)["fields"]["error"] == (
        "uncorrectable NVLink error detected during the execution"
    )


def test_a_cuda_warning_at_driver_shutdown_is_no_failure(tmp_path: Path) -> None:
    text = (
        "epoch 3 done, loss 0.214\n"
        "[W CUDAGuardImpl.h:115] Warning: CUDA warning: driver shutting down "
        "(function destroyEvent)\n"
    )
    assert diagnose(tmp_path, text) == []
