"""Classes and shapes found in the sixth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, sixth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, signature

PAD = " " * 57


def test_a_line_padded_to_the_terminal_width_still_matches_its_signature(tmp_path: Path) -> None:
    # pdsh/DeepSpeed output pasted from a terminal pads every line with spaces; signatures
    # anchored at the end of the message (`failed$`) must still match.
    warn = (
        "trn-b4: trn-b4:7712:7790 [2] misc/ibvwrap.cc:301 NCCL WARN Call to ibv_create_qp "
        f"failed{PAD}"
    )
    text = (
        "trn-b4: trn-b4:7712:7712 [2] NCCL INFO NET/IB : Using [0]mlx5_3:1/IB ; "
        f"OOB ib0:10.9.0.4<0>{PAD}\n"
        f"{warn}\n"
        f"trn-b4: trn-b4:7712:7790 [2] NCCL INFO transport/net_ib.cc:611 -> 2{PAD}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ibv_call_failed"
    assert root(diagnoses)["line"] == warn


def test_field_values_do_not_keep_the_padding(tmp_path: Path) -> None:
    text = (
        "gw-3: Last error:\n"
        f"gw-3: Net : Call to recv from 10.20.0.8<41177> failed : Connection refused{PAD}\n"
    )
    rc = root(diagnose(tmp_path, text))
    assert rc["fields"]["error"] == "Connection refused"


def test_a_watchdog_record_wrapped_after_timeout_is_still_a_watchdog_timeout(
    tmp_path: Path,
) -> None:
    # A console wrapped each record after "timeout: ": the WorkNCCL part sits on its own line.
    first = (
        "train-x.node-07 [stderr] [rank5]:[E311 04:10:12.100200300 ProcessGroupNCCL.cpp:612] "
        "[Rank 5] Watchdog caught collective operation timeout: "
    )
    text = (
        f"{first}\n"
        "WorkNCCL(SeqNum=912, OpType=ALLGATHER, NumelIn=4, NumelOut=32, Timeout(ms)=300000) ran "
        "for 300021 milliseconds before timing out.\n"
        "train-x.node-07 [stderr] [rank6]:[E311 04:10:12.100400500 ProcessGroupNCCL.cpp:612] "
        "[Rank 6] Watchdog caught collective operation timeout: \n"
        "WorkNCCL(SeqNum=912, OpType=ALLGATHER, NumelIn=4, NumelOut=32, Timeout(ms)=300000) ran "
        "for 300025 milliseconds before timing out.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "pt_watchdog_timeout"
    assert root(diagnoses)["line"] == first


PADDLE_NCCL_ERROR = "OSError: (External) NCCL error(2), unhandled system error."


def test_paddles_nccl_error_is_a_wrapper_not_a_user_exception(tmp_path: Path) -> None:
    # PaddlePaddle raises every failed NCCL call as an OSError "(External) NCCL error(N)";
    # NCCL's own WARN before it is the failure, as with torch's DistBackendError.
    warn = (
        "gpu-h2:3311:3390 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        "10.7.0.3<40112> failed : Connection refused"
    )
    text = (
        "I0412 10:00:01.100000  3311 nccl_context.cc:74] init nccl context nranks: 2 local "
        "rank: 0 gpu id: 0 ring id: 0\n"
        f"{warn}\n"
        "gpu-h2:3311:3390 [0] NCCL INFO bootstrap.cc:98 -> 2\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "    dist.init_parallel_env()\n"
        f"{PADDLE_NCCL_ERROR}\n"
        "  [Hint: Please search for the error code(2) on website to get the official advice "
        "about NCCL Error.] (at /paddle/paddle/fluid/platform/collective_helper.cc:110)\n"
    )
    assert root(diagnose(tmp_path, text))["line"] == warn


def test_paddles_nccl_error_alone_names_itself(tmp_path: Path) -> None:
    text = (
        '  File "/opt/py/paddle/distributed/collective.py", line 301, in barrier\n'
        "    task = group.process_group.barrier()\n"
        f"{PADDLE_NCCL_ERROR}\n"
        "LAUNCH INFO 2024-03-01 08:00:02,001 Exit code 1\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "paddle_nccl_error"
    assert root(diagnoses)["line"] == PADDLE_NCCL_ERROR


def test_an_oserror_of_user_code_is_still_a_python_exception(tmp_path: Path) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "prep.py", line 12, in <module>\n'
        "OSError: [Errno 28] No space left on device: '/scratch/shard-0041.bin'\n"
    )
    assert signature(diagnose(tmp_path, text)) == "py_exception"


def test_a_pdsh_last_error_block_is_put_on_its_labelled_host(tmp_path: Path) -> None:
    # pdsh labels the PyTorch NCCL error block of one node; another node's NCCL lines follow.
    text = (
        "gw-3: Last error:\n"
        "gw-3: Net : Call to recv from 10.20.0.8<41177> failed : Connection refused\n"
        "gw-1: gw-1:5120:5188 [2] NCCL INFO Channel 00 : 2[61000] -> 1[42000] via SHM/direct\n"
        "gw-1: gw-1:5120:5188 [2] NCCL INFO Channel 01 : 2[61000] -> 1[42000] via SHM/direct\n"
    )
    rc = root(diagnose(tmp_path, text))
    assert rc["line"].startswith("gw-3: Net : Call to recv")
    assert rc["host"] == "gw-3"
