"""How a diagnosis reads (issue 26, item 4): suspects told apart by their pid and each line
said once, no `[None]` under Alternatives, one GPU for one process, and benign warnings after
everything that shows the failure in Collateral."""

from __future__ import annotations

from typing import Any

from conftest import GenerateAndAnalyze
from rankwatch import Engine
from rankwatch.report import Style, render_diagnosis

PLAIN = Style(color=False)


def diagnosis(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "rw-1",
        "job": "j",
        "confidence": 0.8,
        "signature": {"id": "xid_79", "title": "GPU has fallen off the bus"},
        "root_cause": {"rank": 3, "host": "node-1", "pid": 10, "line": "Xid 79"},
        "suspects": [{"rank": 3, "host": "node-1", "pid": 10, "score": 90, "reasons": ["x"]}],
    }
    return {**base, **parts}


def test_suspects_show_their_pid_and_a_repeated_line_once() -> None:
    same = {"host": "node-7", "score": 40, "reasons": ["printed a cause: nccl_ib_wc_flush"]}
    d = diagnosis()
    d["suspects"] += [{**same, "pid": 501}, {**same, "pid": 502}, dict(same), dict(same)]
    text = render_diagnosis(d, PLAIN)
    assert "on node-7 (pid 501)  score 40" in text and "on node-7 (pid 502)  score 40" in text
    assert text.count("on node-7  score 40") == 1 and "on node-7  score 40: " in text
    assert "(x2)" in text


def test_an_alternative_without_a_signature_shows_no_none() -> None:
    alts = [{"rank": 5, "host": "node-2", "signature": None, "why_not": "weaker evidence"}]
    text = render_diagnosis(diagnosis(alternatives=alts), PLAIN)
    assert "[None]" not in text
    assert "rank 5 on node-2: weaker evidence" in text


def test_suspects_carry_the_pid_of_their_process(
    generate_and_analyze: GenerateAndAnalyze,
) -> None:
    _, diagnoses = generate_and_analyze("xid79", ranks=64, layout="per-node", seed=0)
    suspects = diagnoses[0]["suspects"]
    assert len(suspects) > 1
    assert all(s["pid"] is not None for s in suspects if s["rank"] is not None), suspects


def test_one_process_shows_one_gpu() -> None:
    """Rank 1 prints an NCCL warning whose header names device 6, then its CUDA error (no
    device): the root cause and the first warning are one process and name one GPU."""
    lines = {
        0: [
            "[rank0]:[E1130 12:00:40.000000000 ProcessGroupNCCL.cpp:1715] [PG ID 0 PG GUID "
            "0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 5 PG "
            "status: last enqueued work: 5, last completed work: 4",
        ],
        1: [
            "2026-11-30 12:00:05 node-b:4242:4300 [6] transport/net_ib.cc:1696 NCCL WARN NET/IB "
            ": Got completion from peer 10.0.0.1<4444> with status=5 opcode=0 len=0 vendor err "
            "249 (Send)",
            "[rank1]:[E1130 12:00:10.000000000 ProcessGroupNCCL.cpp:1] RuntimeError: CUDA error: "
            "an illegal memory access was encountered",
        ],
    }
    engine = Engine()
    for rank, text in lines.items():
        s = engine.open_stream("j", f"rank-{rank}.log", rank=rank, local_rank=rank)
        engine.feed(s, ("\n".join(text) + "\n").encode())
    (d,) = engine.finish()
    rc, fw = d["root_cause"], d["first_warning"]
    assert (rc["rank"], fw["rank"], fw["pid"]) == (1, 1, rc["pid"])
    assert fw["device"] == rc["device"]
    text = render_diagnosis(d, PLAIN)
    assert text.count(f"GPU {rc['device']}, pid 4242") == 2


def test_benign_warnings_come_after_the_failure_in_collateral(
    generate_and_analyze: GenerateAndAnalyze,
) -> None:
    _, diagnoses = generate_and_analyze("xid79", ranks=64, layout="per-node", seed=0)
    collateral = diagnoses[0]["collateral"]
    barrier = [i for i, c in enumerate(collateral) if "currently unknown" in c.get("template", "")]
    classified = [i for i, c in enumerate(collateral) if c["signature"] != "unclassified"]
    assert barrier and classified
    assert min(barrier) > max(classified), [c["signature"] for c in collateral]


def test_a_finding_rooted_at_a_line_no_signature_knows_heads_the_report() -> None:
    finding = {"id": "busy_before_timeouts", "title": "The console's main process was busy"}
    d = diagnosis(
        signature={"id": "unclassified", "title": "Unclassified error"}, cause_signature=finding
    )
    header = render_diagnosis(d, PLAIN).splitlines()[1]
    assert "The console's main process was busy [busy_before_timeouts]" in header
    assert "Unclassified" not in render_diagnosis(d, PLAIN)


def test_a_finding_over_a_known_signature_is_its_because() -> None:
    finding = {"id": "collective_not_reached", "title": "A rank never reached the collective"}
    text = render_diagnosis(diagnosis(cause_signature=finding), PLAIN)
    assert "GPU has fallen off the bus [xid_79]" in text
    assert "because: A rank never reached the collective [collective_not_reached]" in text
