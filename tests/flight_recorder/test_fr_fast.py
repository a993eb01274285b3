"""The Rust reader of pickled dumps (the fast path) gives exactly what the Python reader
gives, and leaves every dump it does not take to the Python reader."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from flight_recorder.fr_data import DATA, real_doc
from flight_recorder.test_fr_hostile import WRONG, code_running_pickles
from rankwatch import _core
from rankwatch.flight_recorder import MAX_DUMP_BYTES, load_dump, read_dumps
from rankwatch.flight_recorder.model import Dump
from rankwatch.flight_recorder.reader import (
    _decode,
    _fast_pickle,
    _rank_of,
    check_dump,
    taken_dump,
)

PICKLES = sorted(p for p in DATA.glob("*/nccl_trace_rank_*") if p.read_bytes()[:1] == b"\x80")


def slow(data: bytes, path: Path, keep_last: int | None = None) -> Dump:
    doc = _decode(data, "pickle")
    return check_dump(doc, str(path), _rank_of(doc, path), len(data) + 100_000, keep_last)


def fast(data: bytes, path: Path, keep_last: int | None = None) -> Dump | None:
    return _fast_pickle(data, path, None, len(data) + 100_000, keep_last)


def same(a: Dump, b: Dump) -> None:
    assert a == b
    for x, y in zip(a.entries, b.entries, strict=True):
        assert type(x) is type(y)
        assert [type(f) for f in x.frames] == [type(f) for f in y.frames]
        assert x.fingerprint() == y.fingerprint()


def test_checked_in_dumps_read_the_same() -> None:
    assert len(PICKLES) >= 20
    for path in PICKLES:
        data = path.read_bytes()
        got = fast(data, path)
        assert got is not None, path
        same(got, slow(data, path))
        for keep in (1, 3, 64):
            kept = fast(data, path, keep)
            assert kept is not None
            same(kept, slow(data, path, keep))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_python_pickles_of_every_protocol_read_the_same(tmp_path: Path, protocol: int) -> None:
    doc = real_doc("p2p_unmatched_nccl", 0)
    doc["rank"] = 3
    doc["entries"][0]["time_created_ns"] = 1 << 62
    doc["entries"][0]["input_sizes"] = [[-5, 0, 1 << 40]]
    doc["entries"][1]["process_group"] = ["é" * 5000, "x"]
    doc["entries"][1]["frames"] = [{"filename": "ü" * 4100, "name": "f", "line": -3}] * 300
    path = tmp_path / "nccl_trace_rank_0"
    data = pickle.dumps(doc, protocol=protocol)
    got = fast(data, path)
    assert got is not None
    assert got.rank == 3
    same(got, slow(data, path))


def test_wrong_types_in_every_field_are_left_to_the_python_reader(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    for field in sorted(real_doc()["entries"][-1]):
        for bad in WRONG:
            doc: dict[str, Any] = real_doc()
            doc["entries"][-1][field] = bad
            data = pickle.dumps(doc, protocol=2)
            reference = slow(data, path)
            got = fast(data, path)
            if got is not None:  # only a value the Python checks accept too
                assert not reference.skipped_entries, (field, bad)
                same(got, reference)
            else:
                assert reference.skipped_entries, (field, bad)


def test_code_running_pickles_are_not_taken(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "nccl_trace_rank_0"
    for data in code_running_pickles(marker).values():
        assert fast(data + b"entries version pg_config", path) is None
    assert not marker.exists()


def test_truncated_and_bombs_are_not_taken(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    data = (DATA / "hang" / "nccl_trace_rank_0").read_bytes()
    for n in range(0, len(data), 97):
        assert fast(data[:n], path) is None
    entry = real_doc()["entries"][-1]
    entry["input_sizes"] = [[1] * 60] * 60
    doc = {"version": "2.10", "pg_config": {}, "entries": [entry] * 1_000_000}
    assert fast(pickle.dumps(doc, protocol=2), path) is None


def test_load_dump_uses_it(tmp_path: Path) -> None:
    path = DATA / "hang" / "nccl_trace_rank_0"
    same(load_dump(path), slow(path.read_bytes(), path))


def test_files_read_in_one_call_match_the_reader_and_leave_the_rest(tmp_path: Path) -> None:
    """`fr_read_files` (the batch `read_dumps` uses): every clean pickle is taken as the
    Python reader takes it; hostile, odd and JSON files are left to that reader, which then
    says why, and nothing runs."""
    marker = tmp_path / "ran"
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    odd: list[Path] = []
    for i, data in enumerate(code_running_pickles(marker).values()):
        odd.append(hostile / f"nccl_trace_rank_{100 + i}")
        odd[-1].write_bytes(data + b"entries version pg_config")
    truncated = (DATA / "hang" / "nccl_trace_rank_0").read_bytes()
    odd.append(hostile / "nccl_trace_rank_200")
    odd[-1].write_bytes(truncated[: len(truncated) // 2])
    odd.append(hostile / "nccl_trace_rank_201")
    with open(odd[-1], "wb") as f:
        f.write(b"\x80\x02}q\x00(X\x07\x00\x00\x00entries")
        f.truncate(2 << 30)  # sparse, over the size limit
    odd.append(hostile)  # a folder
    odd.append(tmp_path / "absent")
    paths = [*PICKLES, *odd]
    for keep in (None, 3):
        got = _core.fr_read_files([str(p) for p in paths], keep, MAX_DUMP_BYTES, 2)
        assert [g is not None for g in got] == [True] * len(PICKLES) + [False] * len(odd)
        for path, g in zip(PICKLES, got, strict=False):
            assert g is not None
            same(taken_dump(g, path), slow(path.read_bytes(), path, keep))
    dumps, problems, _ = read_dumps(paths, memory_bytes=None)
    assert len(dumps) == len(PICKLES) and len(problems) == len(odd)
    assert not marker.exists()
