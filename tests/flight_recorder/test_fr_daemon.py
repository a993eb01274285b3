"""`rankwatch run --flight-recorder-dir DIR` against the real test broker: dumps that land
in the folder are matched to their job by path, and join the job's log records from Kafka
in one diagnosis; a job with dumps and no logs is diagnosed too; bad dumps are counted."""

from __future__ import annotations

import asyncio
import datetime as dt
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from daemon_fixtures import Daemon, read_topic, wait_for
from flight_recorder.fr_data import DATA
from rankwatch.flight_recorder.watch import DumpWatcher, Fed, job_of
from rankwatch.kafka.replay import BatchSender, new_producer


def test_job_of_a_dump_path(tmp_path: Path) -> None:
    assert job_of(tmp_path, tmp_path / "llm7b" / "nccl_trace_rank_3") == "llm7b"
    assert job_of(tmp_path, tmp_path / "llm7b" / "attempt_0" / "x_3") == "llm7b"
    assert job_of(tmp_path, tmp_path / "llm7b-nccl_trace_rank_3") == "llm7b"
    assert job_of(tmp_path, tmp_path / "sweep_12_rank3.json") == "sweep_12"
    assert job_of(tmp_path, tmp_path / "nccl_trace_rank_3") is None
    assert job_of(tmp_path, Path("/elsewhere/x")) is None


def test_watcher_waits_for_the_dumps_to_settle(tmp_path: Path) -> None:
    w = DumpWatcher(tmp_path, quiet_ms=1000)
    job = tmp_path / "j"
    job.mkdir()
    (job / "notes.txt").write_text("not a dump\n")
    shutil.copy(DATA / "hang" / "nccl_trace_rank_0", job)
    assert w.scan(now=0.0) == []  # new: wait
    assert w.scan(now=0.5) == []  # still settling
    shutil.copy(DATA / "hang" / "nccl_trace_rank_1", job)
    assert w.scan(now=0.9) == []  # changed: wait again
    [(name, paths)] = w.scan(now=2.0)
    assert name == "j" and [p.name for p in paths] == ["nccl_trace_rank_0", "nccl_trace_rank_1"]
    assert w.scan(now=9.0) == []  # returned once
    shutil.copy(DATA / "hang" / "nccl_trace_rank_5", job)
    assert w.scan(now=10.0) == []
    assert [n for n, _ in w.scan(now=11.5)] == ["j"]  # a later dump: returned again
    fed = Fed()
    assert fed.new("j", ["a", "b"]) == ["a", "b"]
    assert fed.new("j", ["b", "c"]) == ["c"]


def _records(job: str) -> list[tuple[bytes, bytes]]:
    """The NCCL watchdog lines of p2p_unmatched_nccl as canonical records with their time
    (the log lines carry the same moments as the dumps)."""
    out = []
    for path in sorted((DATA / "p2p_unmatched_nccl" / "logs").glob("rank-*.log")):
        rank = int(path.stem.split("-")[1])
        dump = pickle.loads((DATA / "p2p_unmatched_nccl" / f"nccl_trace_rank_{rank}").read_bytes())
        ts = dump["entries"][-1]["time_created_ns"] / 1e9 + 4.004
        stamp = dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds")
        for line in path.read_text().splitlines():
            value = {"job": job, "rank": rank, "ts": stamp.replace("+00:00", "Z"), "line": line}
            out.append((job.encode(), orjson.dumps(value)))
    return out


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    async def send() -> None:
        producer = new_producer({"bootstrap_servers": bootstrap})
        await producer.start()
        try:
            sender = BatchSender(producer, topic, sorted(await producer.partitions_for(topic)))
            for key, value in records:
                await sender.add(key, value)
            await sender.flush()
        finally:
            await producer.stop()

    asyncio.run(send())


def test_daemon_joins_dumps_with_logs_and_diagnoses_dumps_alone(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs"), fresh_topics("out")
    fr = tmp_path / "fr"
    fr.mkdir()
    d = daemon_factory(
        "fr",
        topic=[logs],
        output_topic=out,
        group_id=f"{logs}-group",
        flight_recorder_dir=str(fr),
        flight_recorder_poll_ms=200,
        flight_recorder_quiet_ms=500,
    ).start()
    d.wait_assigned()
    _produce(daemon_kafka, logs, _records("p2p-7"))
    # job p2p-7: its folder; job hang-3: dumps directly in the folder, named after the job
    shutil.copytree(
        DATA / "p2p_unmatched_nccl", fr / "p2p-7", ignore=shutil.ignore_patterns("logs")
    )
    for f in sorted((DATA / "hang").glob("nccl_trace_rank_*")):
        shutil.copy(f, fr / f"hang-3-{f.name}")
    (fr / "hang-3-nccl_trace_rank_9").write_bytes(b"\x80\x02}X\x07\x00\x00\x00entries")  # cut

    def latest() -> dict[str, Any]:
        got: dict[str, Any] = {}
        for r in read_topic(daemon_kafka, out):
            doc = r.json()
            got[doc["job"]] = doc
        return got

    def both() -> dict[str, Any] | None:
        got = latest()
        # the job's logs may be published before its dumps are read: the update that joins
        # them follows within a settle window (the engine holds re-diagnosis that long)
        if not {"p2p-7", "hang-3"} <= set(got):
            return None
        p2p = got["p2p-7"]
        logs_joined = any(c["signature"] == "pt_watchdog_timeout" for c in p2p["collateral"])
        if logs_joined and p2p["signature"]["id"].startswith("fr_"):
            return got
        return None

    got = wait_for("diagnoses of both jobs", both, context=d.log_text)
    joined, alone = got["p2p-7"], got["hang-3"]
    assert (joined["signature"]["id"], joined["root_cause"]["rank"]) == (
        "fr_p2p_unmatched_send",
        3,
    )
    assert joined["root_cause"]["origin"].startswith(str(fr / "p2p-7" / "nccl_trace_rank_3"))
    assert (alone["signature"]["id"], alone["root_cause"]["rank"]) == (
        "fr_collective_not_scheduled",
        5,
    )
    ids = {r.json()["id"] for r in read_topic(daemon_kafka, out) if r.json()["job"] == "p2p-7"}
    assert len(ids) == 1, "one diagnosis for the job's logs and dumps"
    m = d.metrics() or {}
    assert m.get('rankwatch_flight_recorder_dumps_total{result="read"}') == 10
    assert m.get('rankwatch_flight_recorder_dumps_total{result="skipped"}') == 1
    assert "hang-3-nccl_trace_rank_9: truncated pickle" in d.log_text()
    assert d.stop() == 0
