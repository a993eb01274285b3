"""Dumps are untrusted: a pickle that tries to run code, a truncated file, a huge file,
references that multiply, wrong types in every field. Each is reported as "PATH: reason"
and skipped (or, for one bad entry, the entry is left out and counted); nothing runs,
nothing crashes."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pytest
from fr_data import DATA, Analyze, real_doc, write_dump

from rankwatch.flight_recorder import DumpError, load_dump, read_dumps
from rankwatch.flight_recorder.reader import check_dump


def code_running_pickles(marker: Path) -> dict[str, bytes]:
    """Pickles that would create `marker` if any unpickler ran them as written."""
    cmd = f"touch {marker}".encode()
    arg = b"X" + len(cmd).to_bytes(4, "little") + cmd
    return {
        # protocol 2: GLOBAL os.system, the argument, TUPLE1, REDUCE
        "global_reduce": b"\x80\x02cos\nsystem\n" + arg + b"\x85R.",
        # protocol 4: STACK_GLOBAL, then REDUCE, inside what looks like a dump
        "stack_global": (
            b"\x80\x04}\x8c\x07entries]\x8c\x07version\x8c\x02os\x8c\x06system\x93"
            + arg
            + b"\x85Rs."
        ),
        # INST (protocol 0) and OBJ
        "inst": b"(" + b"S'" + cmd + b"'\nios\nsystem\n.",
        "obj": b"\x80\x02(cos\nsystem\n" + arg + b"o.",
        # BUILD with a __setstate__ reached through a class
        "build": b"\x80\x02cbuiltins\nset\n)R}b.",
        # an extension code (copyreg's registry)
        "ext": b"\x80\x02\x82\x01.",
        # a persistent id
        "persid": b"\x80\x02X\x01\x00\x00\x00xQ.",
    }


@pytest.mark.parametrize("name", sorted(code_running_pickles(Path("x"))))
def test_pickles_that_try_to_run_code_are_refused(tmp_path: Path, name: str) -> None:
    marker = tmp_path / "ran"
    data = code_running_pickles(marker)[name]
    # make each one look like a dump to the sniffer, so that it reaches the unpickler
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data[:2] + data[2:] + b"entries version pg_config")
    with pytest.raises(DumpError) as e:
        load_dump(path)
    assert not marker.exists(), "the pickle ran code"
    assert "refused" in str(e.value) or "malformed" in str(e.value) or "dump" in str(e.value)


def test_global_reduce_is_refused_by_name(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    doc = {"version": "2.10", "entries": [], "pg_config": {}}
    payload = pickle.dumps(doc, protocol=2)[:-1]  # drop STOP, add a code-running tail
    path = tmp_path / "nccl_trace_rank_1"
    path.write_bytes(payload + b"0" + code_running_pickles(marker)["global_reduce"][2:])
    with pytest.raises(DumpError, match=r"refused pickle: refers to os\.system"):
        load_dump(path)
    assert not marker.exists()


def test_truncated_dump(tmp_path: Path) -> None:
    data = (DATA / "hang" / "nccl_trace_rank_0").read_bytes()
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DumpError, match="truncated"):
        load_dump(path)


def test_two_gigabyte_file_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "nccl_trace_rank_0"
    with open(path, "wb") as f:
        f.write(b"\x80\x02}q\x00(X\x07\x00\x00\x00entries")
        f.truncate(2 << 30)  # sparse: costs no disk
    t0 = time.monotonic()
    with pytest.raises(DumpError, match=r"over the .* limit"):
        load_dump(path)
    assert time.monotonic() - t0 < 1.0


def test_shared_references_cannot_multiply_the_work(tmp_path: Path) -> None:
    """A million entries that are one object: two bytes each in the pickle."""
    entry = real_doc()["entries"][-1]
    entry["input_sizes"] = [[1] * 60] * 60
    doc = {"version": "2.10", "pg_config": {}, "entries": [entry] * 1_000_000}
    path = write_dump(tmp_path / "nccl_trace_rank_0", doc)
    assert path.stat().st_size < 4_000_000
    t0 = time.monotonic()
    with pytest.raises(DumpError, match="same data over and over"):
        load_dump(path)
    assert time.monotonic() - t0 < 10


def test_not_a_dump_named_directly(tmp_path: Path) -> None:
    path = tmp_path / "rank_0.log"
    path.write_text("[rank0]: hello\n")
    with pytest.raises(DumpError, match="not a Flight Recorder dump"):
        load_dump(path)


def test_damaged_json(tmp_path: Path) -> None:
    path = tmp_path / "fr_rank_0.json"
    path.write_text('{"version": "2.10", "pg_config": {}, "entries": [{"profiling_name": ')
    with pytest.raises(DumpError, match="damaged JSON"):
        load_dump(path)


WRONG = [1.5, "text", None, [["x"]], {"a": 1}, True, -1, [1, 2]]


@pytest.mark.parametrize("field", sorted(real_doc()["entries"][-1]))
def test_wrong_types_in_every_entry_field(field: str) -> None:
    """Every field of a real entry set to values of other types: either the entry is left
    out and counted with a reason, or (for fields the analysis does not read, and a value
    the field may take) it is kept; never an exception."""
    base = real_doc()
    for bad in WRONG:
        doc = real_doc()
        doc["entries"][-1][field] = bad
        d = check_dump(doc, "d", 0)
        assert len(d.entries) + d.skipped_entries == len(base["entries"])
        if d.skipped_entries:
            assert d.entry_problems and d.entry_problems[0].startswith(
                f"entry {len(base['entries']) - 1}:"
            )


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda d: d.update(entries="many"), "entries is str"),
        (lambda d: d.pop("entries"), "no entries list"),
        (lambda d: d.update(version=2.1), "version is float"),
        (lambda d: d.update(pg_config=[1, 2]), "pg_config is list"),
        (lambda d: d.update(pg_config={"0": "ranks"}), "pg_config holds an entry"),
        (lambda d: d.update(pg_config={0: "x"}), r"pg_config\[0\] is not a list of ranks"),
        (lambda d: d.update(entries=[1, "x", None]), "no usable entry"),
    ],
)
def test_wrong_types_at_the_top(change: Any, reason: str) -> None:
    doc = real_doc()
    change(doc)
    with pytest.raises(DumpError, match=reason):
        check_dump(doc, "d", 0)
    with pytest.raises(DumpError):
        check_dump([doc], "d", 0)


def test_hostile_folder_through_the_command(tmp_path: Path, fr_analyze: Analyze) -> None:
    """A job folder with good dumps and every kind of bad one: the good ones are analyzed,
    each bad one is named with its reason on stderr, the exit status is 0."""
    job = tmp_path / "job"
    job.mkdir()
    for rank in range(6):
        (job / f"nccl_trace_rank_{rank}").write_bytes(
            (DATA / "hang" / f"nccl_trace_rank_{rank}").read_bytes()
        )
    marker = tmp_path / "ran"
    (job / "nccl_trace_rank_7").write_bytes(code_running_pickles(marker)["stack_global"])
    data = (DATA / "hang" / "nccl_trace_rank_0").read_bytes()
    (job / "nccl_trace_rank_8").write_bytes(data[:300])
    with open(job / "nccl_trace_rank_9", "wb") as f:
        f.write(b"\x80\x02}q\x00(X\x07\x00\x00\x00entries")
        f.truncate(2 << 30)
    code, report, err = fr_analyze("--flight-recorder", job)
    assert code == 0, err
    assert not marker.exists()
    assert "Traceback" not in err
    skipped = report["input"]["flight_recorder"]["skipped"]
    assert [s.split(":")[0].rsplit("_", 1)[1] for s in skipped] == ["7", "8", "9"], skipped
    for rank in "789":
        assert f"nccl_trace_rank_{rank}: " in err
    [d] = report["diagnoses"]
    assert (d["signature"]["id"], d["root_cause"]["rank"]) == ("fr_collective_not_scheduled", 5)


def test_entries_left_out_are_noted(tmp_path: Path) -> None:
    doc = real_doc()
    doc["entries"][0]["input_sizes"] = "1024"
    path = write_dump(tmp_path / "nccl_trace_rank_0", doc)
    dumps, problems, notes = read_dumps([path])
    assert not problems and len(dumps) == 1
    assert notes == [f"{path}: 1 entries left out (entry 0: input_sizes is not a list of shapes)"]
