"""Bounded fuzzing of the Python surface (Hypothesis): the Engine's feed and feed_records, and
`rankwatch analyze` on generated file trees, never raise; the hand-made corpus in
tests/data/fuzz/ is replayed through the same paths. Example counts are small for CI; multiply
them with RANKWATCH_FUZZ_SCALE=50 for a longer local run. CI sets RANKWATCH_FUZZ_FIXED=1 (as
scripts/test.sh does) so that its run tries the same inputs every time; a local run without it
draws new ones."""

from __future__ import annotations

import gzip
import io
import itertools
import os
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankwatch.catalog_loader import Catalog
from rankwatch.cli import main
from rankwatch.engine import RECORD_FORMATS, REJECT_REASONS, Decoder, Engine, EngineConfig

CORPUS = Path(__file__).resolve().parents[1] / "data" / "fuzz"

# Pieces of real prefixes, so that generated lines reach the decoder's deeper layers.
FRAGMENTS = [
    "[rank3]:",
    "[default5]:",
    " 5: ",
    "[1,13]<stdout>:",
    "node-07:40213:40213 [5] ",
    "NCCL WARN ",
    "NCCL INFO ",
    "misc/socket.cc:484 ",
    "socketStartConnect: Connect to 172.17.0.1<39275> failed : Network is unreachable",
    "[E314 09:22:05.407719231 ProcessGroupNCCL.cpp:632] ",
    "[PG ID 0 PG GUID 0(default_pg) Rank 13] Watchdog caught collective operation timeout",
    "E0314 09:32:05.771000 40190 api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 40213)",
    "2026-03-14T09:22:05.412233870Z stdout P ",
    "2026-03-14T09:22:05.412233870Z stderr F ",
    "\x1b[36m(RayTrainWorker pid=40213, ip=10.20.3.7)\x1b[0m ",
    " [repeated 7x across cluster]",
    "Traceback (most recent call last):",
    "RuntimeError: ",
    "é",
    "😀",
    "\t",
    "\r",
]
SCALE = int(os.environ.get("RANKWATCH_FUZZ_SCALE", "1"))
FIXED = os.environ.get("RANKWATCH_FUZZ_FIXED") == "1"


def bounded(examples: int) -> settings:
    return settings(
        max_examples=examples * SCALE,
        derandomize=FIXED,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


lines = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=16)), max_size=8).map(
    "".join
)
log_text = st.lists(lines, max_size=20).map("\n".join).map(lambda s: s.encode("utf-8", "replace"))
log_bytes = st.one_of(log_text, log_text, st.binary(max_size=400))
opt_bytes = st.one_of(st.none(), st.binary(max_size=10), st.text(max_size=10).map(str.encode))

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    lines,
)
json_keys = st.one_of(
    st.sampled_from(["job", "rank", "host", "ts", "line", "source", "log", "message", "time"]),
    st.text(max_size=6),
)
json_values = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(json_keys, inner, max_size=6)
    ),
    max_leaves=20,
)


def to_record(value: object) -> bytes:
    # orjson refuses NaN/inf and huge ints in strict mode; fall back to repr bytes then.
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return repr(value).encode()


record_values = st.one_of(json_values.map(to_record), log_bytes)


@pytest.fixture(scope="module")
def new_engine() -> Callable[[], Engine]:
    catalog = Catalog()
    config = EngineConfig(max_line_bytes=64, memory_budget_bytes=8 << 20)
    return lambda: Engine(catalog, config)


@bounded(60)
@given(data=log_bytes, cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=5))
def test_engine_feed_takes_any_bytes_in_any_chunks(
    new_engine: Callable[[], Engine], data: bytes, cuts: list[int]
) -> None:
    engine = new_engine()
    stream = engine.open_stream("job", "file.log")
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    for a, b in itertools.pairwise(edges):
        engine.feed(stream, data[a:b], 1_000)
    engine.close_stream(stream)
    engine.poll(60_000)
    for diagnosis in engine.finish():
        assert diagnosis["job"] == "job"
    stats = orjson.loads(engine._core.stats_json())
    assert stats["bytes"] == len(data)


@bounded(60)
@given(
    batch=st.lists(st.tuples(record_values, opt_bytes, opt_bytes), max_size=10),
    fmt=st.sampled_from(RECORD_FORMATS),
)
def test_feed_records_decodes_or_rejects_each_record(
    new_engine: Callable[[], Engine],
    batch: list[tuple[bytes, bytes | None, bytes | None]],
    fmt: str,
) -> None:
    engine = new_engine()
    values = [v for v, _, _ in batch]
    keys = [k for _, k, _ in batch]
    headers = [h for _, _, h in batch]
    rejected = engine.feed_records(Decoder(fmt), "topic/0", values, keys, headers, [1] * len(batch))
    indexes = [i for i, _ in rejected]
    assert indexes == sorted(set(indexes))
    assert all(0 <= i < len(batch) for i in indexes)
    assert {reason for _, reason in rejected} <= set(REJECT_REASONS)
    engine.poll(60_000)
    engine.finish()


def analyze(tree: Path, *extra: str) -> tuple[int, str]:
    out, err = io.TextIOWrapper(io.BytesIO()), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["analyze", "-q", *extra, str(tree)])
    return code, err.getvalue()


name_part = st.sampled_from(
    ["rank0", "rank13", "node-07", "worker", "ünï", "a b", ".hidden", "x", "rank999999999999"]
)
suffix = st.sampled_from([".log", ".txt", ".out", ".gz", ".log.gz", "", ".json"])
file_path = st.tuples(st.lists(name_part, min_size=0, max_size=2), name_part, suffix)
content = st.one_of(log_bytes, log_bytes.map(gzip.compress), st.just(b""))
trees = st.lists(st.tuples(file_path, content), min_size=1, max_size=5)


def write_tree(root: Path, files: list[tuple[tuple[list[str], str, str], bytes]]) -> None:
    for (dirs, stem, ext), data in files:
        folder = root.joinpath(*dirs)
        path = folder / f"{stem}{ext}"
        # A generated file name may already be a folder (or the other way round): skip it.
        if any(p.is_file() for p in [folder, *folder.parents] if p != root) or path.is_dir():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


@bounded(25)
@given(files=trees, as_json=st.booleans())
def test_analyze_on_generated_trees_exits_cleanly(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    files: list[tuple[tuple[list[str], str, str], bytes]],
    as_json: bool,
) -> None:
    monkeypatch.setenv("RANKWATCH_DEBUG", "1")  # a bug raises here instead of exit 1
    root = tmp_path_factory.mktemp("tree")
    write_tree(root, files)
    code, err = analyze(root, *(["--json"] if as_json else []))
    assert code in (0, 2), err
    assert "internal error" not in err


def test_corpus_replays_through_the_python_surface(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_engine: Callable[[], Engine]
) -> None:
    monkeypatch.setenv("RANKWATCH_DEBUG", "1")
    files = sorted(CORPUS.iterdir())
    assert len(files) >= 5
    engine = new_engine()
    for f in files:
        data = f.read_bytes()
        stream = engine.open_stream("corpus", f.name)
        for i in range(0, len(data), 97):
            engine.feed(stream, data[i : i + 97])
        engine.close_stream(stream)
        for fmt in RECORD_FORMATS:
            values = data.split(b"\n")
            engine.feed_records(
                Decoder(fmt),
                "t/0",
                values,
                [b"corpus/1"] * len(values),
                [None] * len(values),
                [None] * len(values),
            )
    engine.finish()
    code, err = analyze(CORPUS, "--json")
    assert code in (0, 2), err
