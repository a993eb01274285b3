"""The five scenarios of real dumps (torch 2.15, Gloo, tests/data/flight_recorder), diagnosed
from the dumps alone, from dumps and logs together (one diagnosis), and from the logs alone
where they suffice.

What Gloo did in each run (from its console logs) and what the dumps show:
- size_mismatch: rank 2 all-reduced 2,048 floats where the others used 1,024; Gloo aborted
  rank 1 (it received more than it expected), which therefore wrote no dump.
- skipped: rank 1 skipped the loss all-reduce of step 2 and all-reduced its next gradients
  while the others all-reduced the loss; rank 0 aborted without a dump.
- hang: rank 5 stopped before step 3 (a checkpoint); the others wait in collective #7.
- p2p_unmatched: rank 0 sends to rank 3, which never posts the recv. Gloo records no
  send/recv, so its dumps only show rank 0 missing from the next barrier;
  p2p_unmatched_nccl is the same run as ProcessGroupNCCL records it (synthetic, derived).
- healthy: no diagnosis."""

from __future__ import annotations

from typing import Any

import pytest
from fr_data import DATA, Analyze

# scenario -> (signature, root-cause rank) from the dumps, alone or with the logs
EXPECTED = {
    "size_mismatch": ("fr_collective_mismatch", 2),
    "skipped": ("fr_collective_mismatch", 1),
    "hang": ("fr_collective_not_scheduled", 5),
    "p2p_unmatched": ("fr_collective_not_scheduled", 0),  # all that Gloo's dumps can show
    "p2p_unmatched_nccl": ("fr_p2p_unmatched_send", 3),
}


def one(report: dict[str, Any]) -> dict[str, Any]:
    diagnoses = report["diagnoses"]
    assert len(diagnoses) == 1, [d["signature"]["id"] for d in diagnoses]
    d: dict[str, Any] = diagnoses[0]
    return d


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_dumps_alone(fr_analyze: Analyze, scenario: str) -> None:
    code, report, err = fr_analyze("--flight-recorder", DATA / scenario)
    assert code == 0, err
    d = one(report)
    signature, rank = EXPECTED[scenario]
    assert (d["signature"]["id"], d["root_cause"]["rank"]) == (signature, rank)
    assert d["root_cause"]["origin"].startswith(str(DATA / scenario / f"nccl_trace_rank_{rank}"))
    assert "Flight Recorder:" in d["root_cause"]["line"]
    assert report["input"]["flight_recorder"]["dumps"] >= 3


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_dumps_with_logs_make_one_diagnosis(fr_analyze: Analyze, scenario: str) -> None:
    code, report, err = fr_analyze(DATA / scenario)
    assert code == 0, err
    d = one(report)
    assert (d["signature"]["id"], d["root_cause"]["rank"]) == EXPECTED[scenario]
    # the logs' own lines of the same incident are collateral of the Flight Recorder's cause
    collateral = {c["signature"] for c in d["collateral"]}
    assert collateral - {"fr_rank_entry"}, collateral
    for c in d["collateral"]:  # (an error line no signature knows is never "explained")
        assert c["explained_by_root_cause"] or c["signature"] == "unclassified", c
    assert report["input"]["files"] >= 4


def test_healthy_run_has_no_diagnosis(fr_analyze: Analyze) -> None:
    for args in (("--flight-recorder", DATA / "healthy"), (DATA / "healthy",)):
        code, report, err = fr_analyze(*args)
        assert code == 0, err
        assert report["diagnoses"] == []
        assert report["input"]["flight_recorder"]["dumps"] == 4


def test_mismatch_facts_name_both_sides_and_the_call_site(fr_analyze: Analyze) -> None:
    d = one(fr_analyze("--flight-recorder", DATA / "size_mismatch")[1])
    f = d["facts"]
    assert (f["seq"], f["op_type"], f["numel_in"], f["dtype"]) == (
        "5",
        "ALLREDUCE",
        "2048",
        "Float",
    )
    assert (f["other_ranks"], f["other_numel_in"]) == ("0,3", "1024")
    assert f["call_site"] == "/workspace/make_dumps.py:50 (train_step)"
    assert f["missing_dumps"] == "1"  # rank 1 was aborted by Gloo before it could dump
    assert "/workspace/make_dumps.py:50 (train_step) on rank 2" in d["fix"]
    assert "2048 Float elements to ALLREDUCE while the other ranks passed 1024" in d["fix"]
    assert "collective #5 of process group 0" in d["verify"]


def test_skipped_collective_shows_both_call_sites(fr_analyze: Analyze) -> None:
    d = one(fr_analyze("--flight-recorder", DATA / "skipped")[1])
    f = d["facts"]
    assert f["call_site"] == "/workspace/make_dumps.py:50 (train_step)"  # its next gradients
    assert f["other_call_site"] == "/workspace/make_dumps.py:55 (train_step)"  # the loss
    assert (f["numel_in"], f["other_numel_in"]) == ("1024", "1")


def test_hang_names_where_the_rank_stopped(fr_analyze: Analyze) -> None:
    d = one(fr_analyze("--flight-recorder", DATA / "hang")[1])
    f = d["facts"]
    assert (f["seq"], f["last_enqueued"], f["waiting_ranks"]) == ("7", "6", "0-4")
    assert "after /workspace/make_dumps.py:55 (train_step)" in d["fix"]
    assert d["collateral_ranks"] == "0-4"


def test_json_dumps_read_like_pickles(fr_analyze: Analyze) -> None:
    code, report, err = fr_analyze("--flight-recorder", DATA / "size_mismatch_json")
    assert code == 0, err
    d = one(report)
    assert (d["signature"]["id"], d["root_cause"]["rank"]) == ("fr_collective_mismatch", 2)
    assert d["root_cause"]["origin"].endswith("fr_rank_2.json:2")


def test_logs_alone_where_they_suffice(fr_analyze: Analyze) -> None:
    """The NCCL watchdog's SeqNum says who is behind, not why: alone, the logs blame rank 0
    (stuck in its send), the dumps blame rank 3 (which never posted the recv); together one
    diagnosis, the dumps' rank, with the watchdog lines as its collateral."""
    logs = DATA / "p2p_unmatched_nccl" / "logs"
    d = one(fr_analyze(logs)[1])
    assert (d["signature"]["id"], d["root_cause"]["rank"]) == ("pt_watchdog_timeout", 0)
    both = one(fr_analyze(DATA / "p2p_unmatched_nccl")[1])
    assert both["root_cause"]["rank"] == 3
    assert {"pt_watchdog_timeout"} <= {c["signature"] for c in both["collateral"]}


def test_glob_and_single_file(fr_analyze: Analyze) -> None:
    code, report, _ = fr_analyze("--flight-recorder", str(DATA / "hang" / "nccl_trace_rank_*"))
    assert code == 0
    assert one(report)["root_cause"]["rank"] == 5
    code, report, err = fr_analyze(
        DATA / "hang" / "logs", "--flight-recorder", DATA / "hang" / "nccl_trace_rank_5"
    )
    assert code == 0, err
    assert report["input"]["flight_recorder"]["dumps"] == 1


def test_dumps_given_for_several_jobs_need_a_job_name(fr_analyze: Analyze) -> None:
    code, _, err = fr_analyze(
        DATA / "hang" / "logs", DATA / "skipped" / "logs", "--flight-recorder", DATA / "hang"
    )
    assert code == 2
    assert "--job" in err and "Traceback" not in err
