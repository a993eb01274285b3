"""The cross-rank analysis on dumps built for one question each (NCCL-style states, which
Gloo does not keep): the completion wavefront, unmatched recvs, ties, ring buffers that no
longer reach back, groups other than the default one, missing dumps."""

from __future__ import annotations

from typing import Any

from rankwatch.flight_recorder import analyze, render
from rankwatch.flight_recorder.analysis import rank_list
from rankwatch.flight_recorder.model import Dump
from rankwatch.flight_recorder.reader import check_dump

T0 = 1_800_000_000_000_000_000


def entry(
    seq: int,
    op: str = "all_reduce",
    numel: int = 1024,
    state: str = "completed",
    pg: tuple[str, str] = ("0", "default_pg"),
    p2p: int = 0,
    site: str = "train.py",
) -> dict[str, Any]:
    return {
        "record_id": seq * 10 + p2p,
        "pg_id": int(pg[0]),
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": p2p,
        "op_id": seq,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": T0 + seq * 1_000_000 + p2p,
        "input_sizes": [[numel]],
        "output_sizes": [[numel]],
        "input_dtypes": ["Float"],
        "output_dtypes": ["Float"],
        "state": state,
        "retired": state == "completed",
        "is_p2p": op.startswith(("send", "recv")),
        "frames": [
            {
                "name": "all_reduce",
                "filename": "/x/torch/distributed/distributed_c10d.py",
                "line": 1,
            },
            {"name": "step", "filename": site, "line": seq},
        ],
    }


def dump(rank: int, entries: list[dict[str, Any]], ranks: str = "[0, 1, 2, 3]") -> Dump:
    doc = {
        "version": "2.4",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": ranks}},
        "entries": entries,
    }
    return check_dump(doc, f"nccl_trace_rank_{rank}", rank)


def kinds(dumps: list[Dump]) -> list[tuple[str, int, list[int]]]:
    return [(f.kind, f.seq, f.culprits) for f in analyze(dumps).findings]


def test_healthy_has_no_finding() -> None:
    dumps = [dump(r, [entry(s) for s in range(1, 6)]) for r in range(4)]
    assert kinds(dumps) == []


def test_first_mismatch_wins_and_majority_decides() -> None:
    dumps = [
        dump(
            r,
            [
                entry(1),
                entry(2, numel=7 if r == 3 else 8),
                entry(3, "broadcast" if r == 1 else "all_reduce"),
            ],
        )
        for r in range(4)
    ]
    [f] = analyze(dumps).findings
    assert (f.kind, f.seq, f.culprits, f.other_ranks, f.tie) == (
        "mismatch",
        2,
        [3],
        [0, 1, 2],
        False,
    )


def test_two_equal_sides_are_a_tie() -> None:
    dumps = [dump(r, [entry(1, numel=1 if r < 2 else 2)], "[0, 1, 2, 3]") for r in range(4)]
    [f] = analyze(dumps).findings
    assert f.tie and f.culprits == [2, 3]
    lines = render(analyze(dumps))
    assert "no majority says which side is wrong" in lines[2].text().decode()


def test_completion_wavefront() -> None:
    """Rank 2 is inside collective #5 like everyone, but never completed #4."""
    dumps = []
    for r in range(4):
        es = [entry(s) for s in range(1, 4)]
        es.append(entry(4, state="started" if r == 2 else "completed"))
        es.append(entry(5, state="started"))
        dumps.append(dump(r, es))
    assert kinds(dumps) == [("behind", 4, [2])]
    text = render(analyze(dumps))[2].text().decode()
    assert (
        "rank 2 is behind: its last completed collective of process group 0 (default_pg) is #3"
        in text
    )


def test_not_scheduled_only_when_someone_waits() -> None:
    stuck = [
        dump(
            r,
            [entry(s, state="completed" if s < 3 else "started") for s in range(1, 4 if r else 3)],
        )
        for r in range(4)
    ]
    assert kinds(stuck) == [("not_scheduled", 3, [0])]
    done = [dump(r, [entry(s) for s in range(1, 4 if r else 3)]) for r in range(4)]
    assert kinds(done) == []  # everyone completed #3: nobody is waiting (dumped mid-run)


def test_missing_dump_of_a_stuck_group() -> None:
    dumps = [dump(r, [entry(1), entry(2, state="started")]) for r in (0, 2, 3)]
    [f] = analyze(dumps).findings
    assert (f.kind, f.seq, f.culprits, f.other_ranks) == ("no_dump", 2, [1], [0, 2, 3])
    assert (
        "rank 1 wrote no dump while rank(s) 0,2-3 wait in collective #2"
        in render(analyze(dumps))[1].text().decode()
    )


def test_unmatched_recv_blames_the_sender() -> None:
    d0 = dump(0, [entry(1)])
    d1 = dump(1, [entry(1), entry(1, "recv 1<-0", numel=64, state="started", p2p=1)])
    d2 = dump(2, [entry(1)])
    d3 = dump(3, [entry(1)])
    [f] = analyze([d0, d1, d2, d3]).findings
    assert (f.kind, f.culprits, f.peer) == ("unmatched_recv", [0], 1)
    text = render(analyze([d0, d1, d2, d3]))[0].text().decode()
    assert "rank 1 waits to receive 64 Float elements from rank 0 (recv #1" in text


def test_matched_sends_and_recvs_are_quiet() -> None:
    d0 = dump(0, [entry(1), entry(1, "send 0->1", p2p=1), entry(1, "send 0->1", p2p=2)])
    d1 = dump(1, [entry(1), entry(1, "recv 1<-0", p2p=1), entry(1, "recv 1<-0", p2p=2)])
    assert kinds([d0, d1, dump(2, [entry(1)]), dump(3, [entry(1)])]) == []


def test_ring_that_no_longer_reaches_back_is_not_a_missing_recv() -> None:
    old_send = entry(1, "send 0->1", p2p=1)
    old_send["time_created_ns"] = T0 - 10**12
    d0 = dump(0, [old_send, entry(2)])
    d1 = dump(1, [entry(2)])
    assert kinds([d0, d1, dump(2, [entry(2)]), dump(3, [entry(2)])]) == []


def test_groups_are_analyzed_apart() -> None:
    tp = ("5", "tp")
    dumps = []
    for r in range(4):
        es = [entry(s) for s in range(1, 4)]
        es += [entry(s, pg=tp, numel=3 if r == 1 else 4) for s in range(1, 3)]
        dumps.append(dump(r, es))
    [f] = analyze(dumps).findings
    assert (f.kind, f.pg, f.pg_desc, f.seq, f.culprits) == ("mismatch", "5", "tp", 1, [1])
    assert "process group 5 (tp)" in render(analyze(dumps))[1].text().decode()


def test_lines_without_time_still_render() -> None:
    es = [entry(1), entry(2, numel=9)]
    for e in es:
        e.pop("time_created_ns")
    dumps = [dump(r, es if r == 0 else [entry(1), entry(2)]) for r in range(3)]
    text = render(analyze(dumps))[0].text().decode()
    assert text.startswith("[rank0]: Flight Recorder: ")


def test_rank_list() -> None:
    assert rank_list([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert rank_list([]) == ""
