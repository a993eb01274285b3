"""Reports in which one process says which ranks the others wait for: Horovod's stall
inspector in its three shapes (a `Missing ranks:` block of `RANK: [tensors]` lines; before
that `<tensor> [missing ranks: …]`; in the oldest releases only `[ready ranks: …]`, whose
complement is the missing set). The missing rank is the root cause even though it printed
nothing; the report's line is the evidence. Lines invented in the shapes of real reports
(horovod #530, #1012, a stall_inspector.cc bug report)."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def rank_lines(ranks: range, text: str) -> str:
    return "".join(f"[1,{r}]<stderr>:{text}\n" for r in ranks)


def test_the_rank_missing_from_old_ready_lists_is_the_root(tmp_path: Path) -> None:
    report = "Stalled ops: HorovodBroadcast_resnet_conv1_kernel_0 [ready ranks: 4, 0, 3, 1, 5]"
    text = rank_lines(range(6), "INFO:tensorflow:Restoring parameters from /ckpt/model") + (
        f"{report}\nHorovodBroadcast_resnet_conv1_bias_0 [ready ranks: 4, 0, 3, 1, 5], \n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == report
    assert signature(diagnoses) == "horovod_stall_missing_ranks"
    assert root(diagnoses)["rank"] == 2


def test_missing_ranks_named_by_the_coordinator(tmp_path: Path) -> None:
    report = (
        "[1,0]<stderr>:[2020-01-02 03:04:05.678901: W horovod/common/operations.cc:588] "
        "HorovodBroadcast_dense_kernel_0 [missing ranks: 3]"
    )
    text = rank_lines(range(4), "step 0 done") + report + "\n"
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == report
    assert root(diagnoses)["rank"] == 3


def test_the_current_missing_ranks_block(tmp_path: Path) -> None:
    text = (
        "[2024-05-06 07:08:09.123456: W /src/horovod/common/stall_inspector.cc:107] One or more "
        "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
        "are waiting for remainder of ranks for more than 60 seconds. This may indicate that "
        "different ranks are trying to submit different tensors or that only subset of ranks "
        "is submitting tensors, which will cause deadlock. \n"
        "Missing ranks:\n"
        "6: [DistributedOptimizer_Allreduce/HorovodAllreduce_grads_0]\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == "6: [DistributedOptimizer_Allreduce/HorovodAllreduce_grads_0]"
    assert root(diagnoses)["rank"] == 6
