"""Every dump format torch has written reads into the same checked values: 1.x (`seq_id`,
`pg_config` keyed by the numeric pg id), 2.x (`process_group`, `collective_seq_id`,
`p2p_seq_id`, `pg_config` by name with ranks as text, later dtypes and `pg_status`), and
the JSON form (counters as text, missing times as 0). Dumps are found by content."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fr_data import DATA, SCENARIOS, real_doc, write_dump

from rankwatch.flight_recorder import find_dumps, is_dump, load_dump
from rankwatch.flight_recorder.reader import check_dump, rank_from_name
from rankwatch.inputs import DumpFile, discover


def v14_entry(seq: int, numel: int) -> dict[str, Any]:
    """An entry as torch wrote it with format 1.4."""
    return {
        "record_id": seq,
        "pg_id": 0,
        "seq_id": seq,
        "op_id": seq,
        "profiling_name": "nccl:all_reduce",
        "time_created_ns": 1_700_000_000_000_000_000 + seq,
        "input_sizes": [[numel]],
        "output_sizes": [[numel]],
        "state": "completed",
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": True,
        "frames": [{"name": "step", "filename": "train.py", "line": 12}],
    }


def test_format_1_4() -> None:
    doc = {"version": "1.4", "pg_config": {0: [0, 1, 2, 3]}, "entries": [v14_entry(1, 8)]}
    d = check_dump(doc, "x", 2)
    [e] = d.entries
    assert (e.seq, e.pg, e.op_type, e.numel_in(), e.state) == (1, "0", "ALLREDUCE", 8, "completed")
    assert d.groups["0"].ranks == (0, 1, 2, 3)
    assert e.call_site() is not None and e.call_site().site() == "train.py:12 (step)"  # type: ignore[union-attr]


def test_format_1_1_without_pg_config() -> None:
    entry = v14_entry(3, 8)
    for key in ("record_id", "op_id"):
        entry.pop(key)
    d = check_dump({"version": "1.1", "entries": [entry]}, "x", 0)
    assert d.entries[0].seq == 3 and d.groups == {}


def test_format_2_10_pickle_and_json_agree() -> None:
    pk = load_dump(DATA / "size_mismatch" / "nccl_trace_rank_2")
    js = load_dump(DATA / "size_mismatch_json" / "fr_rank_2.json")
    assert pk.version == js.version == "2.10"
    assert [e.fingerprint() for e in pk.entries] == [e.fingerprint() for e in js.entries]
    assert [e.seq for e in pk.entries] == [e.seq for e in js.entries]
    assert js.status["0"].last_enqueued == 5  # written as "5" in JSON
    assert js.entries[-1].time_started_ns is None  # written as 0 in JSON
    assert pk.entries[-1].frames and not js.entries[-1].frames  # JSON has no stacks


def test_every_real_dump_reads() -> None:
    for scenario in SCENARIOS:
        for path in sorted((DATA / scenario).glob("nccl_trace_rank_*")):
            d = load_dump(path)
            assert d.rank == rank_from_name(path)
            assert d.entries and d.skipped_entries == 0
            assert all(e.pg == "0" and e.pg_desc == "default_pg" for e in d.entries)


def test_p2p_entry_peers() -> None:
    d = load_dump(DATA / "p2p_unmatched_nccl" / "nccl_trace_rank_0")
    send = d.entries[-1]
    assert (send.op, send.is_p2p, send.peers, send.p2p_seq) == ("send", True, (0, 3), 1)
    doc = real_doc()
    doc["entries"][-1]["profiling_name"] = "gloo:recv 3<-?"
    assert check_dump(doc, "x", 3).entries[-1].peers == (None, 3)


def test_found_by_content_not_name(tmp_path: Path) -> None:
    odd = write_dump(tmp_path / "whatever.bin", real_doc())
    (tmp_path / "rank-0.log").write_text("[rank0]: step 0 done\n")
    (tmp_path / "model.pkl").write_bytes(b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01.")
    assert is_dump(odd)
    assert not is_dump(tmp_path / "rank-0.log") and not is_dump(tmp_path / "model.pkl")
    found, problems = find_dumps([tmp_path])
    assert found == [odd] and problems == []
    dumps: list[DumpFile] = []
    files, _ = discover([tmp_path], dumps=dumps)
    assert [f.path.name for f in files] == ["model.pkl", "rank-0.log"]
    assert dumps == [DumpFile(odd, tmp_path.name)]


def test_json_dump_in_a_log_folder_is_found(tmp_path: Path) -> None:
    (tmp_path / "fr_rank_2.json").write_bytes(
        (DATA / "size_mismatch_json" / "fr_rank_2.json").read_bytes()
    )
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    (tmp_path / "rank-2.log").write_text("[rank2]: step 0 done\n")
    dumps: list[DumpFile] = []
    files, _ = discover([tmp_path], dumps=dumps)
    assert [f.path.name for f in files] == ["rank-2.log"]
    assert [d.path.name for d in dumps] == ["fr_rank_2.json"]


def test_rank_from_name() -> None:
    assert rank_from_name(Path("nccl_trace_rank_12")) == 12
    assert rank_from_name(Path("fr_rank_3.json")) == 3
    assert rank_from_name(Path("dump")) is None
    assert rank_from_name(Path("x_99999999999999")) is None
