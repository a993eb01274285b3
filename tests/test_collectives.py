"""The collective table through `rankwatch analyze`: what only a comparison of ranks shows
(mismatched collectives, a rank that never joined), in the shapes real logs have: per-rank
watchdog lines with torch's prefixes, NCCL's COLL traces with no failure line at all (the
fifteenth held-out set's rccl#429 shape), and the report's side-by-side table. Every line is
invented: other hosts, numbers and text."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature
from rankwatch.report import Style, render_diagnosis


def watchdog(rank: int, op: str, numel: int, minute: int = 30) -> str:
    return (
        f"[rank{rank}]:[E1203 14:{minute:02d}:11.402117300 ProcessGroupNCCL.cpp:632] "
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum=91, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
        "Timeout(ms)=1800000) ran for 1800093 milliseconds before timing out.\n"
    )


def test_the_rank_with_another_element_count_is_the_root(tmp_path: Path) -> None:
    text = "".join(watchdog(r, "ALLREDUCE", 4096) for r in (2, 1, 3))
    text += watchdog(0, "ALLREDUCE", 4104, minute=31)
    diagnoses = diagnose(tmp_path, text)
    assert root(diagnoses)["rank"] == 0
    assert diagnoses[0]["cause_signature"]["id"] == "collective_mismatch"
    [table] = diagnoses[0]["collectives"]
    assert (table["seq"], [r["ranks"] for r in table["rows"]]) == (91, ["1-3", "0"])
    report = render_diagnosis(diagnoses[0], Style(False), 0)
    assert "Collectives differ  PG 0 #91" in report
    assert "0      ALLREDUCE  4104" in report


def test_ranks_that_agree_leave_the_first_timeout_as_root(tmp_path: Path) -> None:
    text = "".join(watchdog(r, "ALLREDUCE", 4096) for r in (2, 1, 3, 0))
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses).startswith("[rank2]:")
    assert signature(diagnoses) == "pt_watchdog_timeout"
    assert diagnoses[0]["collectives"] == []


def trace(host: str, pid: int, dev: int, op: str, count: int, dtype: int, comm: str) -> str:
    return (
        f"{host}:{pid}:{pid} [{dev}] NCCL INFO {op}: opCount 1a7 sendbuff 0x7f2c1a400000 "
        f"recvbuff 0x7f2c1a400000 count {count} datatype {dtype} op 0 root 0 comm {comm} "
        "[nranks=4] stream 0x5610d2a3c0a0\n"
    )


def test_nccl_traces_that_disagree_are_a_failure_with_no_failure_line(tmp_path: Path) -> None:
    odd = trace("cn-12", 7713, 2, "AllGather", 1310720, 0, "0x5610c0ffee02")
    text = (
        trace("cn-12", 7711, 0, "AllReduce", 2048, 7, "0x5610c0ffee00")
        + trace("cn-12", 7712, 1, "AllReduce", 2048, 7, "0x5610c0ffee01")
        + odd
        + trace("cn-12", 7714, 3, "AllReduce", 2048, 7, "0x5610c0ffee03")
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == odd.rstrip("\n")
    assert diagnoses[0]["cause_signature"]["id"] == "collective_mismatch"


def test_agreeing_nccl_traces_make_no_diagnosis(tmp_path: Path) -> None:
    text = "".join(
        trace("cn-12", 7711 + d, d, "AllReduce", 2048, 7, f"0x5610c0ffee0{d}") for d in range(4)
    )
    assert diagnose(tmp_path, text) == []


def test_a_rank_busy_elsewhere_while_the_others_wait_is_the_root(tmp_path: Path) -> None:
    busy = "[rank0]:[I1203 14:00:40.118000000 trainer.py:310] saving checkpoint to /ckpt/step_1200"
    text = (
        "[rank0]:[I1203 13:59:58.002000000 trainer.py:288] step 1200 loss 2.0312\n"
        f"{busy}\n"
        "[rank0]:[I1203 14:26:05.771000000 trainer.py:318] checkpoint shard 61/64 written\n"
        + "".join(watchdog(r, "ALLREDUCE", 4096) for r in (1, 2, 3))
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == busy
    assert diagnoses[0]["cause_signature"]["id"] == "collective_not_reached"
    assert diagnoses[0]["facts"]["waiting_ranks"] == "1-3"


def test_a_rank_ahead_of_the_rest_in_a_hard_wrapped_console(tmp_path: Path) -> None:
    # A terminal that wraps at a fixed column cuts NumelOut; the cut value is not taken.
    def wrapped(rank: int, seq: int, op: str, numel: int) -> str:
        record = (
            f"[rank{rank}]:[E513 09:12:40.100200300 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
            f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
            f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)=1800000) ran for 1800040 "
            "milliseconds before timing out."
        )
        return record[:172] + "\n" + record[172:] + "\n"

    text = wrapped(2, 8811, "BROADCAST", 311000) + wrapped(1, 8811, "BROADCAST", 311000)
    odd = wrapped(0, 8813, "_ALLGATHER_BASE", 77)
    diagnoses = diagnose(tmp_path, text + odd)
    assert root_line(diagnoses) == odd.split("\n")[0]
    assert diagnoses[0]["facts"]["odd_values"].startswith("#8813 _ALLGATHER_BASE")
