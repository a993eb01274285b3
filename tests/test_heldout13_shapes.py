"""Classes and shapes found in the thirteenth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, thirteenth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature


def test_out_of_memory_beats_the_invalid_handles_that_follow_it(tmp_path: Path) -> None:
    # A launch that could not get memory leaves a stream or event uncreated; every later use of
    # it fails with 'invalid resource handle'. The allocation failure is the cause.
    oom = "gpu-r7:5121:5190 [3] enqueue.cc:61 NCCL WARN Cuda failure 'out of memory'"
    handle = "gpu-r7:5121:5190 [3] enqueue.cc:74 NCCL WARN Cuda failure 'invalid resource handle'"
    text = f"{oom}\n\n{handle}\n\n{oom}\n\n{handle}\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_cuda_failure_oom"
    assert root_line(diagnoses) == oom


def test_an_invalid_handle_alone_is_still_the_cause(tmp_path: Path) -> None:
    # With nothing before it (a library mismatch), the invalid handle is all there is.
    handle = (
        "node-k2:811:811 [1] enqueue.cc:402 NCCL WARN Cuda failure 400 'invalid resource handle'"
    )
    text = (
        "node-k2:811:811 [1] NCCL INFO Using network Socket\n"
        f"{handle}\n"
        "node-k2:811:811 [1] NCCL INFO enqueue.cc:410 -> 1\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_cuda_failure_invalid_handle"
    assert root_line(diagnoses) == handle


def test_an_nccl_tests_row_with_wrong_elements_is_the_root(tmp_path: Path) -> None:
    # No warning anywhere: the only evidence of corruption is the #wrong column of a result row.
    bad = (
        "     2097152        524288     float     sum      -1    911.4    2.30    4.31  "
        "118204    902.7    2.32    4.35  117956"
    )
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
        "     1048576        262144     float     sum      -1    488.0    2.15    4.03      0"
        "    481.2    2.18    4.09      0\n"
        f"{bad}\n"
        "# Out of bounds values : 236160 FAILED\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_tests_wrong_results"
    assert root_line(diagnoses) == bad


def test_a_clean_nccl_tests_table_is_no_failure(tmp_path: Path) -> None:
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong\n"
        "        1024           256     float     sum      -1    31.55    0.03    0.06      0"
        "    30.90    0.03    0.06      0\n"
        "     4194304       1048576     float     sum      -1    612.3    6.85   12.84      0"
        "    610.8    6.87   12.87      0\n"
        "# Out of bounds values : 0 OK\n"
        "# Avg bus bandwidth    : 3.71102\n"
    )
    assert diagnose(tmp_path, text) == []


def test_the_short_nvls_bind_failure_is_a_cause(tmp_path: Path) -> None:
    # Quoted alone, without 'of size N :' and without the CUDA error text.
    line = "  Failed to bind NVLink SHARP (NVLS) Multicast memory: CUDA error 401"
    diagnoses = diagnose(tmp_path, line + "\n")
    assert signature(diagnoses) == "nccl_nvls_bind_failed"


def test_nvls_proceeding_without_it_stays_no_failure(tmp_path: Path) -> None:
    line = (
        "trn-4:300:300 [2] NCCL INFO Failed to bind NVLink SHARP (NVLS) Multicast memory of "
        "size 4194304 : CUDA error 401 'the operation cannot be performed in the present state'. "
        "Proceeding without NVLS support."
    )
    assert diagnose(tmp_path, line + "\n") == []


def test_a_labelled_row_with_wrong_elements_is_still_found(tmp_path: Path) -> None:
    bad = (
        "node-e4:       8192          2048     float     sum      -1    40.12    0.20    0.38"
        "      0    39.88    0.21    0.38      12"
    )
    diagnoses = diagnose(tmp_path, bad + "\n")
    assert signature(diagnoses) == "nccl_tests_wrong_results"


def test_a_ring_channel_list_of_numbers_is_no_result_row(tmp_path: Path) -> None:
    # A long channel line is a row of integers too; it is context, not a failed check.
    line = "svc-0:4410:4466 [0] NCCL INFO Channel 00/02 : 0 2 5 7 12 13 0 2 5 7 12 13 0 2 5 7"
    assert diagnose(tmp_path, line + "\n") == []
