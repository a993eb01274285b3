"""The collective table through `rankwatch analyze`: the rank whose collective has another
element count is the root, and the report shows the ranks side by side. (The other collective
shapes are cases in tests/cases/desync_mismatch/.) Every line is invented: other hosts, numbers
and text."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root
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
