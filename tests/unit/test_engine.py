"""The engine through its Python API: bad input, multi-line records, envelopes, memory bounds."""

from __future__ import annotations

from pathlib import Path

from conftest import analyze_dir
from rankwatch import Catalog, Engine, EngineConfig
from rankwatch.local import analyze_files, discover
from rankwatch.simulate import fleetgen

WARN = (
    "node-03:40213:40377 [5] misc/socket.cc:484 NCCL WARN socketStartConnect: "
    "Connect to 10.20.3.21<51844> failed : No route to host"
)


def feed_all(engine: Engine, job: str, chunks: list[bytes], **hints: object) -> None:
    s = engine.open_stream(job, f"{job}.log", **hints)  # type: ignore[arg-type]
    for c in chunks:
        engine.feed(s, c)
    engine.close_stream(s)


def test_bad_bytes_are_counted_and_never_crash(catalog: Catalog) -> None:
    engine = Engine(catalog, EngineConfig(max_line_bytes=4096))
    garbage = bytes(range(256)) * 50
    feed_all(
        engine,
        "junk",
        [
            b"\xff\xfe broken utf-8 \xc3\x28 here\n",
            garbage,
            b"x" * 100_000,  # one line, far over the limit, split across chunks
            b"y" * 100_000 + b"\n",
            b"\x00\x00\x00\n\r\n",
        ],
    )
    stats = engine.stats()
    assert stats["invalid_utf8_lines"] >= 1
    assert stats["truncated_lines"] >= 1
    assert engine.finish() == []


def test_lines_split_across_chunks_and_crlf_are_joined(catalog: Catalog) -> None:
    engine = Engine(catalog)
    data = (WARN + "\r\n").encode()
    feed_all(engine, "split", [data[:17], data[17:60], data[60:]], rank=5)
    [d] = engine.finish()
    assert d["root_cause"]["line"] == WARN
    assert d["root_cause"]["rank"] == 5


def test_multiline_record_stays_with_its_start(catalog: Catalog) -> None:
    lines = [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/app/train.py", line 88, in <module>',
        "[rank3]:     loss.backward()",
        "[rank3]: torch.distributed.DistBackendError: NCCL error in: "
        "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system "
        "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2",
        "[rank3]: ncclSystemError: System call (e.g. socket, malloc) or external library call "
        "failed or device error. ",
        "[rank3]: Last error:",
        "[rank3]: socketStartConnect: Connect to 10.0.0.2<44321> failed : Connection refused",
        "[rank3]:[W1130 12:00:09.000000000 ProcessGroupNCCL.cpp:1250] something later",
    ]
    engine = Engine(catalog)
    feed_all(engine, "ml", [("\n".join(lines) + "\n").encode()])
    [d] = engine.finish()
    record = d["root_cause"]["record"]
    assert lines[0] in record and lines[-2] in record
    assert lines[-1] not in record


def test_envelopes_and_prefixes_are_peeled(catalog: Catalog) -> None:
    for line in [
        "2026-03-14T09:22:05.412233870Z stdout F " + WARN,
        " 5: [default5]:" + WARN,
        "[1,13]<stdout>:" + WARN,
        "\x1b[36m(RayTrainWorker pid=40213, ip=10.20.3.7)\x1b[0m " + WARN,
        "[pod/llm7b-worker-13/pytorch] " + WARN,
    ]:
        got = catalog.test(line)
        assert got["message"].startswith("socketStartConnect"), line
        assert got["host"] == "node-03"
        assert any(h["id"] == "nccl_sock_connect_no_route" for h in got["hits"]), got


def test_cri_partial_lines_are_joined(catalog: Catalog) -> None:
    head, tail = WARN[:40], WARN[40:]
    data = (
        f"2026-03-14T09:22:05.1Z stdout P {head}\n2026-03-14T09:22:05.2Z stdout F {tail}\n"
    ).encode()
    engine = Engine(catalog)
    feed_all(engine, "cri", [data], rank=2)
    [d] = engine.finish()
    assert d["root_cause"]["line"] == WARN


def test_ring_memory_stays_within_budget_on_4096_ranks(tmp_path: Path, catalog: Catalog) -> None:
    fleetgen.generate("cuda_error", tmp_path, ranks=4096, layout="per-rank", seed=2, steps=30)
    budget = 48 << 20
    cfg = EngineConfig(memory_budget_bytes=budget, ring_lines=256)
    diagnoses, stats = analyze_dir(tmp_path, catalog, cfg)
    # Counted by capacity, a table that doubles (4,096 sources) passes the budget for the
    # line that grew it, until that line's relief.
    assert stats["peak_memory_bytes"] <= budget * 1.05
    assert stats["memory_bytes"] <= budget
    assert stats["ring_shrinks"] >= 1, "the budget was meant to bind in this test"
    assert len(diagnoses) == 1


def test_catalog_examples_classify_as_documented(catalog: Catalog) -> None:
    import tomllib

    data = tomllib.loads(
        (Path(__file__).resolve().parents[1] / "data" / "catalog_examples.toml").read_text()
    )
    examples = data["example"]
    # Findings have no patterns: rules draw them from many lines (tests/cases/desync_mismatch/,
    # tests/diagnosis/test_collective_table.py).
    ids = {s["id"] for s in catalog.signatures() if not s.get("finding")}
    covered = {e["signature"] for e in examples}
    assert covered == ids, f"signatures without examples: {sorted(ids - covered)}"
    for e in examples:
        got = catalog.test(e["text"])
        hits = {h["id"]: h for h in got["hits"]}
        assert e["signature"] in hits, (e["signature"], e["text"], list(hits))
        for k, v in e.get("fields", {}).items():
            assert hits[e["signature"]]["fields"].get(k) == str(v), (e["signature"], k)


def test_baseline_diff_names_a_line_the_healthy_run_never_printed(
    tmp_path: Path, catalog: Catalog
) -> None:
    fleetgen.generate("wrong_iface", tmp_path / "bad", ranks=32, layout="per-rank", seed=4)
    fleetgen.generate("healthy", tmp_path / "good", ranks=32, layout="per-rank", seed=4)

    def run(baseline: Path | None) -> dict[str, object]:
        files, _ = discover([tmp_path / "bad"])
        engine = Engine(catalog)
        if baseline is not None:
            for f in discover([baseline])[0]:
                engine.add_baseline(f.path.read_bytes())
        [d] = analyze_files(engine, files).diagnoses
        return d

    d = run(tmp_path / "good")
    diff = d["baseline_diff"]
    assert isinstance(diff, dict)
    assert diff["line"] in [*d["preceding_lines"], d["root_cause"]["line"]]  # type: ignore[index, misc]
    assert run(tmp_path / "bad")["baseline_diff"] is None, "nothing differs from itself"
    assert "baseline_diff" not in run(None)


def oom_line(rank: int, second: int) -> str:
    return (
        f"[rank{rank}]:[E1130 12:00:{second:02d}.000000000 CUDACachingAllocator.cpp:1000] "
        f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 1.21 GiB is free."
    )


def two_ranks_with_the_same_fault(catalog: Catalog, seconds: tuple[int, int]) -> dict[str, object]:
    engine = Engine(catalog)
    for rank, host, second in ((3, "node-01", seconds[0]), (9, "node-02", seconds[1])):
        s = engine.open_stream("tie", f"rank-{rank}.log", rank=rank, host=host)
        text = f"2026-11-30 12:00:00,000 INFO step=1\n{oom_line(rank, second)}\n"
        engine.feed(s, text.encode())
        engine.close_stream(s)
    [d] = engine.finish()
    return d


def test_near_simultaneous_causes_are_reported_as_a_tie(catalog: Catalog) -> None:
    d = two_ranks_with_the_same_fault(catalog, (10, 10))
    assert d["tie"] is True
    alts = d["alternatives"]
    assert isinstance(alts, list) and alts and "tied" in alts[0]["why_not"]
    d = two_ranks_with_the_same_fault(catalog, (10, 40))
    assert d["tie"] is False
    assert d["root_cause"]["rank"] == 3  # type: ignore[index]


def test_an_incident_fed_before_the_first_poll_becomes_ready_by_wall_clock(
    catalog: Catalog,
) -> None:
    """The engine learns the wall clock from `poll`; input fed before the first poll starts
    its max_wait_ms at that poll instead of never."""
    engine = Engine(catalog, EngineConfig(settle_ms=3_600_000, max_wait_ms=30_000))
    s = engine.open_stream("early", "rank-3.log", rank=3, host="node-01")
    engine.feed(s, f"{oom_line(3, 1)}\n".encode())  # the job goes silent: no watermark
    t0 = 1_800_000_000_000
    assert engine.poll(t0) == []
    assert engine.poll(t0 + 29_000) == []
    [d] = engine.poll(t0 + 30_000)
    assert d["job"] == "early" and d["root_cause"]["rank"] == 3


def test_engine_options_cross_the_binding_typed(catalog: Catalog) -> None:
    """Unknown options and negative or non-integer values are refused by name."""
    import pytest

    from rankwatch import _core

    assert Engine(catalog, EngineConfig(settle_ms=0)).config.settle_ms == 0
    for text, message in (
        ('{"settle_msec": 1}', "unknown field `settle_msec`"),
        ('{"settle_ms": -1}', "invalid value: integer `-1`"),
        ('{"ring_lines": "a"}', "invalid type: string"),
        ("[1]", "must be a JSON object"),
    ):
        with pytest.raises(ValueError, match=message):
            _core.Engine(catalog._core, text)


MMU_FAULT = (
    "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f12_00001000. "
    "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ"
)
XID_LINES = f"""\
[Mon Mar  2 09:00:05 2026] NVRM: Xid (PCI:0000:1b:00): 43, pid=4101, Ch 00000008
[Mon Mar  2 11:30:41 2026] NVRM: Xid (PCI:0000:9c:00): 31, pid=5530, Ch 00000010, {MMU_FAULT}
[Mon Mar  2 14:02:17 2026] NVRM: Xid (PCI:0000:9c:00): 31, pid=6012, Ch 00000010, {MMU_FAULT}
"""


def diagnose_text(catalog: Catalog, text: str) -> list[dict[str, object]]:
    engine = Engine(catalog)
    s = engine.open_stream("xids", "dmesg.log")
    engine.feed(s, text.encode())
    engine.close_stream(s)
    return engine.finish()


def test_equally_confident_diagnoses_come_stronger_then_earlier_first(catalog: Catalog) -> None:
    """Incidents hours apart, diagnosed with the same confidence: the stronger cause (Xid 31
    over the weaker Xid 43 before it), then the earlier incident, whatever their ids."""
    starts = [d["incident"]["start"] for d in diagnose_text(catalog, XID_LINES)]  # type: ignore[index]
    assert starts == [
        "2026-03-02T11:30:41.000Z",
        "2026-03-02T14:02:17.000Z",
        "2026-03-02T09:00:05.000Z",
    ]


def test_an_incidents_id_survives_a_catalog_that_grew(tmp_path: Path) -> None:
    """The id names the signature, not its place in the catalog: a signature added in front
    of it leaves the ids of a restarted daemon's diagnoses as they were published."""
    fault = tmp_path / "b_fault.toml"
    fault.write_text(
        '[[signature]]\nid = "test_fault"\ntitle = "t"\nsubsystem = "python"\nrole = "cause"\n'
        "severity = \"error\"\npatterns = ['^Fatal test fault']\n"
        'cause = "c"\nfix = "f"\nverify = "v"\n'
    )
    earlier = tmp_path / "a_other.toml"
    earlier.write_text(fault.read_text().replace("test_fault", "other").replace("Fatal", "Other"))
    text = "[2026-03-02 10:00:00] Fatal test fault in step 7\n"
    alone = Catalog([fault], include_builtin=False, use_cache=False)
    grown = Catalog([earlier, fault], include_builtin=False, use_cache=False)
    [a] = diagnose_text(alone, text)
    [b] = diagnose_text(grown, text)
    assert a["signature"]["id"] == b["signature"]["id"] == "test_fault"  # type: ignore[index]
    assert a["id"] == b["id"]
