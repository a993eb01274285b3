"""The cross-rank analysis in Rust gives exactly what the Python rules it replaced gave
(`reference_analysis`, kept for this): on every checked-in scenario, and on generated
dumps with gaps, coalesced batches, several groups, p2p, missing dumps and every state."""

from __future__ import annotations

import random
from typing import Any

from flight_recorder import reference_analysis
from flight_recorder.fr_data import DATA, SCENARIOS
from rankwatch.flight_recorder import analyze, find_dumps, read_dumps, render
from rankwatch.flight_recorder.model import Dump, Entries
from rankwatch.flight_recorder.reader import check_dump

T0 = 1_800_000_000_000_000_000


def same_analysis(dumps: list[Dump]) -> None:
    got = analyze(dumps)
    want = reference_analysis.analyze(dumps)
    # compared field by field, as the findings print them
    assert [vars(f) for f in got.findings] == [vars(f) for f in want.findings]
    assert [vars(s) for s in got.shown] == [vars(s) for s in want.shown]
    assert (got.groups, got.ranks) == (want.groups, want.ranks)
    # Rendering never fails, a rank with a gap at the mismatched sequence id included.
    want_lines = {r: rl.lines for r, rl in render(want).items()}
    assert {r: rl.lines for r, rl in render(got).items()} == want_lines


def test_checked_in_scenarios() -> None:
    for scenario in SCENARIOS:
        paths, problems = find_dumps([DATA / scenario])
        dumps, problems, _ = read_dumps(paths)
        assert dumps and not problems
        same_analysis(dumps)


def _entry(rng: random.Random, seq: int, pg: str, ranks: int) -> dict[str, Any]:
    p2p = rng.random() < 0.15
    if p2p:
        peer = rng.randrange(ranks + 1)  # one past the group: a peer that is no member
        op = rng.choice(
            [f"send {rng.randrange(ranks)}->{peer}", f"recv {rng.randrange(ranks)}<-{peer}"]
        )
    else:
        op = rng.choice(["all_reduce"] * 6 + ["broadcast", "barrier"])
    numel = rng.choice([8, 8, 8, 8, 16])
    return {
        "pg_id": int(pg),
        "process_group": (pg, f"pg{pg}"),
        "collective_seq_id": seq,
        "p2p_seq_id": rng.randrange(3) if p2p else 0,
        "profiling_name": f"nccl:{op}",
        "time_created_ns": T0 + seq * 1000 + rng.randrange(5) if rng.random() < 0.9 else None,
        "input_sizes": [[numel]] if op != "barrier" else [],
        "output_sizes": [[numel]] if op != "barrier" else [],
        "input_dtypes": [rng.choice(["Float", "Float", "Float", "BFloat16"])],
        "output_dtypes": ["Float"],
        "state": rng.choice(["completed"] * 5 + ["started", "scheduled"]),
        "is_p2p": p2p if rng.random() < 0.9 else None,
        "frames": [{"filename": "train.py", "name": "step", "line": seq}],
    }


def _job(rng: random.Random) -> list[Dump]:
    ranks = rng.randrange(1, 7)
    pgs = ["0", "1", "2"][: rng.randrange(1, 4)]
    dumps = []
    for rank in range(ranks):
        if rng.random() < 0.1:
            continue  # no dump from this rank
        entries = []
        for pg in pgs:
            last = rng.randrange(0, 9)
            for seq in range(rng.randrange(0, 3), last):
                if rng.random() < 0.1:
                    continue  # a gap
                for _ in range(2 if rng.random() < 0.1 else 1):  # a coalesced batch
                    entries.append(_entry(rng, seq, pg, ranks))
        rng.shuffle(entries) if rng.random() < 0.1 else None
        if not entries:
            continue
        members = list(range(ranks + (1 if rng.random() < 0.2 else 0)))
        config = {pg: {"name": pg, "desc": f"pg{pg}", "ranks": str(members)} for pg in pgs}
        doc = {
            "version": "2.4",
            "pg_config": config if rng.random() < 0.8 else {},
            "entries": entries,
        }
        dumps.append(check_dump(doc, f"nccl_trace_rank_{rank}", rank))
    if dumps and rng.random() < 0.1:
        dumps.append(dumps[0])  # the same rank twice
    return dumps


def test_generated_jobs() -> None:
    found = 0
    for seed in range(400):
        dumps = _job(random.Random(seed))
        same_analysis(dumps)
        found += bool(analyze(dumps).findings)
    assert found > 100  # the generator makes jobs with findings, not only healthy ones


def test_entries_kept_in_rust_read_back_the_same() -> None:
    doc = {"version": "2.4", "entries": [_entry(random.Random(s), s, "0", 4) for s in range(50)]}
    d = check_dump(doc, "nccl_trace_rank_0", 0)
    assert isinstance(d.entries, Entries)
    listed = list(d.entries)
    assert Entries.of(listed) == listed == d.entries
    assert d.entries[-1] == listed[-1] and d.entries[1:3] == listed[1:3]
