"""Classes and shapes found in the ninth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, ninth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature

NCCL_TESTS_HEADER = (
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 33554432 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    "#\n"
    "# Using devices\n"
    "#  Rank  0 Group  0 Pid  51022 on   lab-gpu2 device  0 [0x3b] NVIDIA A40\n"
    "#  Rank  1 Group  0 Pid  51022 on   lab-gpu2 device  1 [0x5e] NVIDIA A40\n"
)


def test_the_tests_own_nccl_failure_line_is_a_diagnosis_without_debug_output(
    tmp_path: Path,
) -> None:
    # Without NCCL_DEBUG, nccl-tests prints only NCCL's error class for the failed call.
    failure = "lab-gpu2: Test NCCL failure common.cu:1008 'unhandled system error'"
    text = f"{NCCL_TESTS_HEADER}{failure}\n .. lab-gpu2 pid 51022: Test failure common.cu:880\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_tests_nccl_failure"
    assert root_line(diagnoses) == failure


def test_a_missing_kernel_image_glued_to_the_first_result_row(tmp_path: Path) -> None:
    # nccl-tests prints its failure without a newline after the first result columns.
    failure = (
        "          16             4   float     sumlab-gpu2: Test CUDA failure common.cu:402 "
        "'no kernel image is available for execution on the device'"
    )
    text = (
        f"{NCCL_TESTS_HEADER}"
        "#       size         count    type   redop     time   algbw   busbw  error\n"
        f"{failure}\n"
        " .. lab-gpu2 pid 51022: Test failure common.cu:617\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "cuda_no_kernel_for_gpu"
    assert root_line(diagnoses) == failure


def test_nccls_own_failure_beats_the_test_line_printed_before_it(tmp_path: Path) -> None:
    # The test's line comes first on stdout, NCCL's debug output (a WARN and its trace)
    # after it: NCCL's line says what failed.
    warn = (
        "lab-gpu2:51022:51040 [0] graph/xml.cc:332 NCCL WARN Could not find real path of "
        "/sys/class/pci_bus/0000:3b/../../0000:3b:00.0"
    )
    text = (
        f"{NCCL_TESTS_HEADER}"
        "lab-gpu2: Test NCCL failure common.cu:1008 'unhandled system error'\n"
        "lab-gpu2:51022:51022 [0] NCCL INFO Bootstrap : Using eth0:10.44.0.7<0>\n"
        "\n"
        f"{warn}\n"
        "lab-gpu2:51022:51040 [0] NCCL INFO graph/xml.cc:469 -> 2\n"
        "lab-gpu2:51022:51040 [0] NCCL INFO graph/topo.cc:522 -> 2\n"
    )
    assert root_line(diagnose(tmp_path, text)) == warn


def test_open_mpi_timestamp_output_before_the_rank_tag(tmp_path: Path) -> None:
    # `mpirun --timestamp-output --tag-output` glues ctime() to the tag; the CUDA failure
    # behind it is the cause, the proxy service lines after it its consequence.
    stamp = "Tue Mar  3 07:05:09 2026"
    cuda = (
        f"{stamp}[1,2]<stdout>:gpu-c2:77120:77188 [2] transport.cc:154 NCCL WARN "
        "Cuda failure 'invalid argument'"
    )
    text = (
        f"{cuda}\n"
        f"{stamp}[1,2]<stdout>:gpu-c2:77120:77199 [2] proxy.cc:1485 NCCL WARN [Service thread] "
        "Error encountered progressing operation=Connect, res=3, closing connection\n"
        f"{stamp}[1,2]<stdout>:gpu-c2:77120:77199 [2] proxy.cc:1495 NCCL WARN [Service thread] "
        "Could not receive type from localRank 2, res=3, closed=0\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_cuda_failure"
    assert root_line(diagnoses) == cuda
    assert root(diagnoses)["host"] == "gpu-c2"


def test_a_failure_in_view_beats_a_trace_the_excerpt_opens_inside(tmp_path: Path) -> None:
    # The paste starts inside rank 1's trace (its WARN was cut off); rank 0 shows its WARN
    # and the trace after it.
    warn = (
        "[1,0]<stdout>:wsl-box:912:960 [0] graph/xml.cc:332 NCCL WARN Could not find real path "
        "of /sys/class/pci_bus/0000:0a/../../0000:0a:00.0"
    )
    text = (
        "[1,1]<stdout>:wsl-box:913:958 [1] NCCL INFO graph/xml.cc:469 -> 2\n"
        "[1,1]<stdout>:wsl-box:913:958 [1] NCCL INFO init.cc:540 -> 2\n"
        "[1,0]<stdout>:\n"
        f"{warn}\n"
        "[1,0]<stdout>:wsl-box:912:960 [0] NCCL INFO graph/xml.cc:469 -> 2\n"
        "[1,0]<stdout>:wsl-box:912:960 [0] NCCL INFO init.cc:540 -> 2\n"
    )
    assert root_line(diagnose(tmp_path, text)) == warn


def test_the_verbs_wrappers_open_failure_is_the_root_of_the_device_it_names(
    tmp_path: Path,
) -> None:
    # NCCL's verbs wrapper reports the failed open, then net_ib.cc names the device: one
    # failure in two lines (here pasted without their host:pid headers); the first is the root.
    first = "misc/ibvwrap.cc:212 NCCL WARN Call to ibv_open_device failed"
    text = (
        "NCCL INFO NCCL_IB_DISABLE set by environment to 0.\n"
        f"{first}\n"
        "transport/net_ib.cc:148 NCCL WARN NET/IB : Unable to open device mlx5_4\n"
        "NCCL INFO NET/IB : No device found.\n"
        "NCCL INFO NET/Socket : Using [0]eth1:10.12.0.31<0>\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ib_device_open_failed"
    assert root_line(diagnoses) == first
