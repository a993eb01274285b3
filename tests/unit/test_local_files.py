"""`rankwatch analyze` reads the files in Rust on every core: the report must be the one that
feeding the same files one by one (the Python reader) gives, whatever the thread count, for
plain and gzip files alike."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from rankwatch import Catalog, Decoder, Engine, EngineConfig
from rankwatch.local import LogFile, Progress, _feed_files, analyze_files, discover
from rankwatch.logread import PartialRead, read_chunks
from rankwatch.simulate import fleetgen


def one_by_one(catalog: Catalog, files: list[LogFile], cfg: EngineConfig) -> dict[str, Any]:
    """What feeding each file's chunks from the Python reader gives."""
    engine = Engine(catalog, cfg)
    for f in files:
        stream = engine.open_stream(
            f.job, f.origin, source_key=f.source_key, rank=f.rank, local_rank=f.local_rank
        )
        try:
            for chunk in read_chunks(f.path):
                engine.feed(stream, chunk)
        except (PartialRead, OSError):
            pass
        engine.close_stream(stream)
    return summary(engine.finish(), engine.stats())


def summary(diagnoses: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("lines", "bytes", "blank_lines", "truncated_lines", "invalid_utf8_lines")
    counts = {k: stats[k] for k in keys}
    return {"diagnoses": diagnoses, "counts": counts, "hits": stats["hits_by_signature"]}


@pytest.fixture(scope="module")
def mixed_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing per-node job; a third of its files gzip, one of them cut short."""
    out = tmp_path_factory.mktemp("mixed") / "wrong-iface"
    fleetgen.generate("wrong_iface", out, ranks=64, layout="per-node", seed=3, steps=10)
    logs = sorted(p for p in out.iterdir() if p.suffix == ".log")
    for i, p in enumerate(logs):
        if i % 3 == 1:
            packed = gzip.compress(p.read_bytes())
            if i == 4:
                packed = packed[: len(packed) * 3 // 4]
            p.with_name(p.name + ".gz").write_bytes(packed)
            p.unlink()
    return out


@pytest.mark.parametrize("budget", [1 << 30, 1 << 20])
def test_any_thread_count_reports_what_one_by_one_feeding_does(
    mixed_job: Path, catalog: Catalog, budget: int
) -> None:
    files, _ = discover([mixed_job])
    cfg = EngineConfig(memory_budget_bytes=budget)
    want = one_by_one(catalog, files, cfg)
    assert want["diagnoses"], "the job fails: there is something to compare"
    for threads in (1, 2, 5):
        result = analyze_files(Engine(catalog, cfg), files, threads=threads)
        assert summary(result.diagnoses, result.stats) == want, threads
        assert len(result.partial) == 1 and "ends early" in result.partial[0]
        assert set(result.timing) == {"read", "decode", "apply", "wait"}


def test_progress_bar_feeding_gives_the_same_result(
    mixed_job: Path, catalog: Catalog, capsys: pytest.CaptureFixture[str]
) -> None:
    files, _ = discover([mixed_job])
    rows = [(bytes(f.path), f.job, f.origin, f.source_key, f.rank, f.local_rank) for f in files]
    quiet = Engine(catalog)
    shown = Engine(catalog)
    assert _feed_files(quiet, rows, 0, Progress(1, False)).bytes > 0
    fed = _feed_files(shown, rows, 0, Progress(1, True))
    assert fed.bytes == quiet.stats()["bytes"]
    assert quiet.finish() == shown.finish()
    assert "analyzing [" in capsys.readouterr().err


def test_threads_option_does_not_change_the_report(mixed_job: Path) -> None:
    def report(*extra: str) -> dict[str, Any]:
        r = subprocess.run(
            [sys.executable, "-m", "rankwatch.cli", "analyze", "--json", *extra, str(mixed_job)],
            capture_output=True,
            check=True,
        )
        doc: dict[str, Any] = orjson.loads(r.stdout)
        doc["input"].pop("seconds")
        return doc

    assert report("--threads", "1") == report() == report("--threads", "3")
    r = subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", "analyze", "--threads", "-1", str(mixed_job)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2 and "--threads" in r.stderr


def test_the_summary_counts_files_read_and_lines_cut(tmp_path: Path, catalog: Catalog) -> None:
    # A file gone between discovery and reading is skipped, and not counted as read; a line
    # longer than max_line_bytes is counted as cut.
    logs = tmp_path / "job"
    logs.mkdir()
    for r in range(3):
        (logs / f"rank-{r}.log").write_text(f"rank {r} step 1\n")
    (logs / "rank-0.log").write_text("x" * 70_000 + "\n")
    files, _ = discover([str(logs)], job="job")
    (logs / "rank-2.log").unlink()
    skipped: list[str] = []
    result = analyze_files(Engine(catalog, EngineConfig()), files, on_error=skipped.append)
    assert len(skipped) == 1 and "rank-2.log" in skipped[0]
    assert result.files == 2
    assert result.stats["truncated_lines"] == 1


@pytest.mark.parametrize("scenario", ["cuda_error", "oom_kill", "xid79"])
def test_per_node_files_concatenated_into_one_give_the_same_root_cause(
    tmp_path: Path, catalog: Catalog, scenario: str
) -> None:
    """torchrun's `[defaultN]:` names a process only within its node: in one file of all nodes'
    consoles the lines' global ranks and NCCL pids tell the processes apart, and an agent's
    line that names a pid is read on the node that ran it. Lines of the same file sent as text
    records of the job (no source) give the same root cause."""
    out = tmp_path / "job"
    truth = fleetgen.generate(scenario, out, ranks=32, layout="per-node", seed=1, steps=8)
    assert truth.root_cause is not None
    want = (truth.root_cause["rank"], truth.root_cause["host"])
    logs = sorted(p for p in out.iterdir() if p.suffix == ".log")
    assert len(logs) > 1
    one = tmp_path / "one"
    one.mkdir()
    (one / "all.log").write_bytes(b"".join(p.read_bytes() for p in logs))

    def root(diagnoses: list[dict[str, Any]]) -> tuple[object, object]:
        return diagnoses[0]["root_cause"]["rank"], diagnoses[0]["root_cause"]["host"]

    files, _ = discover([str(one)], job="j")
    assert root(analyze_files(Engine(catalog), files).diagnoses) == want
    lines = (one / "all.log").read_bytes().splitlines()
    engine = Engine(catalog)
    n = len(lines)
    keys: list[bytes | None] = [b"j"] * n
    assert engine.feed_records(Decoder("text"), "t/0", lines, keys, [None] * n, [None] * n) == []
    assert root(engine.finish()) == want
