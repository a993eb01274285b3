"""`rankwatch run` against a real Kafka broker: fleets from rankwatch.simulate are loaded with
`rankwatch replay`, the daemon runs as `python -m rankwatch.cli run`, and the diagnoses topic,
the dead-letter topic, the group's committed offsets and /metrics are checked."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from daemon_fixtures import (
    ROOT,
    Daemon,
    KafkaRecord,
    committed_offsets,
    end_offsets,
    read_topic,
    wait_for,
    wait_settled,
)
from rankwatch.daemon.published import content_hash
from rankwatch.kafka.replay import (
    BatchSender,
    canonical_record,
    interleave,
    new_producer,
    replay_files,
)
from rankwatch.local import discover
from rankwatch.simulate import fleetgen

RANKS = 16


def make_fleet(root: Path, specs: list[tuple[str, int, str]]) -> dict[str, Any]:
    """Generates one job per (scenario, seed, layout) into root/<job>; returns job -> truth."""
    truths: dict[str, Any] = {}
    for scenario, seed, layout in specs:
        job = f"{scenario.replace('_', '-')}-{seed}"
        truths[job] = fleetgen.generate(
            scenario, root / job, ranks=RANKS, layout=layout, skew_s=2.0, seed=seed, job=job
        )
    return truths


def rankwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def replay(bootstrap: str, topic: str, dirs: list[Path], rate: float | None = None) -> int:
    files, _ = discover(dirs)
    result = asyncio.run(replay_files(files, topic, {"bootstrap_servers": bootstrap}, rate=rate))
    return result.records


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Sends (key, value) pairs in order, the way `rankwatch replay` batches them."""

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


def versions_by_id(records: list[KafkaRecord]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        d = r.json()
        out[d["id"]].append(d)
    return out


def check_diagnoses(records: list[KafkaRecord], truths: dict[str, Any]) -> dict[str, Any]:
    """Exactly one diagnosis id per failing job with the generator's root cause, none for
    healthy jobs, keys equal to the job, and no version published twice."""
    versions = versions_by_id(records)
    for r in records:
        assert r.key == r.json()["job"].encode()
        assert r.json()["schema"] == "rankwatch.diagnosis/1"
    ids_by_job: dict[str, set[str]] = defaultdict(set)
    for did, vs in versions.items():
        ids_by_job[vs[-1]["job"]].add(did)
    failing = {job for job, t in truths.items() if t.expect_diagnosis}
    assert set(ids_by_job) == failing, f"diagnosed jobs {sorted(ids_by_job)}"
    latest: dict[str, Any] = {}
    for job in failing:
        assert len(ids_by_job[job]) == 1, f"{job}: ids {ids_by_job[job]}"
        (did,) = ids_by_job[job]
        d = versions[did][-1]
        rc, want = d["root_cause"], truths[job].root_cause
        got = (rc["rank"], rc["host"], rc["line"], d["signature"]["id"])
        assert got == (want["rank"], want["host"], want["line"], want["signature"]), job
        latest[job] = d
    for did, vs in versions.items():
        hashes = [content_hash(v) for v in vs]
        assert all(a != b for a, b in itertools.pairwise(hashes)), (
            f"{did} published twice with the same content"
        )
    return latest


def base_settings(logs: str, out: str, group: str) -> dict[str, Any]:
    return {"topic": [logs], "output_topic": out, "group_id": group}


# --- (a) ----------------------------------------------------------------------------------------


def test_failing_and_healthy_jobs_interleaved_in_one_topic(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 1, "per-rank"),
            ("ib_link_down", 2, "torchrun-logdir"),
            ("desync", 3, "per-node"),
            ("healthy", 4, "per-rank"),
            ("healthy_noisy", 5, "torchrun-logdir"),
        ],
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    dirs = [str(tmp_path / "fleet" / job) for job in truths]
    proc = rankwatch("replay", *dirs, "--topic", logs, "--bootstrap-servers", daemon_kafka)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("sent ") and "of 5 job(s)" in proc.stdout

    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("a", **base_settings(logs, out, group)).start()
    wait_settled(daemon_kafka, [logs], group, [d])
    check_diagnoses(read_topic(daemon_kafka, out), truths)
    status, body = d.get("/healthz")
    assert status == 200 and orjson.loads(body)["status"] == "ok"
    m = d.metrics() or {}
    sent = int(proc.stdout.split()[1].replace(",", ""))
    assert m["rankwatch_records_in_total"] == sent
    assert m['rankwatch_diagnoses_out_total{kind="new"}'] == 3
    assert d.stop() == 0
    assert "drained: offsets committed" in d.log_text()

    # `rankwatch stats` reads the same topic
    stats = rankwatch("stats", "--bootstrap-servers", daemon_kafka, "--topic", out, "--json")
    assert stats.returncode == 0, stats.stderr
    doc = orjson.loads(stats.stdout)
    assert doc["incidents"] == 3 and doc["jobs"] == 3
    hosts = {t.root_cause["host"] for t in truths.values() if t.expect_diagnosis}
    assert {h["name"] for h in doc["by_host"]} == hosts


# --- (b) ----------------------------------------------------------------------------------------


def test_two_daemons_share_the_partitions_and_publish_each_incident_once(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    first = make_fleet(
        tmp_path / "first",
        [("cuda_error", 11, "per-rank"), ("oom_kill", 12, "per-node"), ("healthy", 13, "per-rank")],
    )
    second = make_fleet(
        tmp_path / "second",
        [
            ("xid79", 14, "per-rank"),
            ("shm_full", 15, "torchrun-logdir"),
            ("healthy", 16, "per-node"),
        ],
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    settings = base_settings(logs, out, group)

    # A alone diagnoses the first half; B then joins: A hands over partitions, B rebuilds
    # their state from the replay window and must not publish A's diagnoses again.
    replay(daemon_kafka, logs, [tmp_path / "first" / j for j in first])
    a = daemon_factory("a", **settings).start()
    wait_settled(daemon_kafka, [logs], group, [a])
    b = daemon_factory("b", **settings).start()
    b.wait_assigned()
    wait_for(
        "both daemons to own partitions after the rebalance",
        lambda: (
            a.metric("rankwatch_partitions_assigned") > 0
            and b.metric("rankwatch_partitions_assigned") > 0
            and a.metric("rankwatch_partitions_assigned")
            + b.metric("rankwatch_partitions_assigned")
            == 4
        ),
    )
    replay(daemon_kafka, logs, [tmp_path / "second" / j for j in second])
    wait_settled(daemon_kafka, [logs], group, [a, b])

    truths = {**first, **second}
    check_diagnoses(read_topic(daemon_kafka, out), truths)
    assert b.metric("rankwatch_records_replayed_total") > 0  # B rebuilt state
    published = sum(
        d.metric(f'rankwatch_diagnoses_out_total{{kind="{k}"}}')
        for d in (a, b)
        for k in ("new", "update")
    )
    assert published == len(read_topic(daemon_kafka, out))
    assert a.stop() == 0 and b.stop() == 0


# --- (c) ----------------------------------------------------------------------------------------


def test_sigkill_mid_burst_loses_nothing_and_duplicates_nothing(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 21, "per-rank"),
            ("ib_link_down", 22, "per-node"),
            ("cuda_oom", 23, "per-rank"),
            ("desync", 24, "torchrun-logdir"),
            ("healthy_noisy", 25, "per-rank"),
            ("healthy", 26, "per-node"),
        ],
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    # the burst: every line of every job, interleaved; its first half goes out before the
    # kill, the second half while the daemon is down
    files, _ = discover([tmp_path / "fleet" / j for j in truths])
    burst = [(f.job.encode(), canonical_record(f, line)) for f, line in interleave(files)]
    half = len(burst) // 2
    produce(daemon_kafka, logs, burst[:half])

    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory(
        "d", **base_settings(logs, out, group), max_batch_records=200, commit_interval_ms=100
    ).start()
    first = end_offsets(daemon_kafka, logs)
    wait_for(
        "the daemon to commit the first half",
        lambda: all(
            committed_offsets(daemon_kafka, logs, group).get(p, 0) >= end
            for p, end in first.items()
        ),
    )
    d.kill()  # whatever it had not published or committed since is lost with it
    produce(daemon_kafka, logs, burst[half:])
    d.start()  # same config, same group: rebuilds from the replay window
    wait_settled(daemon_kafka, [logs], group, [d])

    records = read_topic(daemon_kafka, out)
    check_diagnoses(records, truths)
    assert d.metric("rankwatch_records_replayed_total") > 0
    assert d.stop() == 0
    assert d.log_text().count("partitions assigned") == 2


# --- (d) ----------------------------------------------------------------------------------------


def test_bad_records_are_counted_dead_lettered_and_never_stop_the_stream(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(tmp_path / "fleet", [("cuda_error", 31, "per-rank")])
    (job,) = truths
    logs, text_logs = fresh_topics("logs", 2), fresh_topics("text", 1)
    out, dlq = fresh_topics("diagnoses", 1), fresh_topics("dead", 1)
    bad: list[tuple[str, bytes, bytes, bytes]] = [  # (topic, key, value, expected reason)
        (logs, b"j-bad/1", b'{"job": "j-bad", "line": "unterminated', b"bad_json"),
        (logs, b"j-bad/2", b"\xff\xfe\xfd not utf-8 \xc3\x28", b"not_utf8"),
        (logs, b"j-bad/3", orjson.dumps({"job": "j-bad", "line": "x" * 9000}), b"oversized"),
        (logs, b"j-bad/4", b"[1, 2, 3]", b"not_an_object"),
        (text_logs, b"j-bin", bytes(range(32)) * 8, b"binary"),
    ]

    async def produce_bad() -> None:
        p = AIOKafkaProducer(bootstrap_servers=daemon_kafka)
        await p.start()
        try:
            for topic, key, value, _ in bad:
                await p.send_and_wait(topic, value, key=key, headers=[("trace", b"t-1")])
        finally:
            await p.stop()

    asyncio.run(produce_bad())  # before the job's records: they must still be processed
    replay(daemon_kafka, logs, [tmp_path / "fleet" / job])
    asyncio.run(produce_bad())  # and after them

    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory(
        "d",
        **base_settings(logs, out, group),
        dead_letter_topic=dlq,
        max_record_bytes=8192,
        topics={text_logs: {"format": "text"}},
    ).start()
    wait_settled(daemon_kafka, [logs, text_logs], group, [d])

    check_diagnoses(read_topic(daemon_kafka, out), truths)
    m = d.metrics() or {}
    for reason in ("bad_json", "not_utf8", "oversized", "not_an_object", "binary"):
        assert m[f'rankwatch_records_rejected_total{{reason="{reason}"}}'] == 2, reason
    assert m["rankwatch_dead_letter_records_total"] == 10
    dead = read_topic(daemon_kafka, dlq)
    assert len(dead) == 10
    copies = sorted(
        (r.headers["rankwatch-reject-reason"], r.key, r.value, r.headers["trace"]) for r in dead
    )
    expected = sorted((reason, key, value, b"t-1") for _, key, value, reason in bad * 2)
    assert copies == expected
    assert all(r.headers["rankwatch-source"].count(b"/") == 2 for r in dead)
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0


# --- transactions -------------------------------------------------------------------------------


def test_transactional_publishing_commits_diagnoses_with_offsets(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(
        tmp_path / "fleet", [("ib_link_down", 41, "per-rank"), ("healthy", 42, "per-rank")]
    )
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 1)
    replay(daemon_kafka, logs, [tmp_path / "fleet" / j for j in truths])
    group = f"g-{uuid.uuid4().hex[:8]}"
    settings = base_settings(logs, out, group)
    d = daemon_factory("t", **settings, transactional_id=f"rw-{group}").start()
    wait_settled(daemon_kafka, [logs], group, [d])
    wait_for(
        "the transactional diagnosis to be committed",
        lambda: len(read_topic(daemon_kafka, out)) >= 1,
    )
    check_diagnoses(read_topic(daemon_kafka, out), truths)
    assert d.stop() == 0
    # a restart with the same transactional id rebuilds state and publishes nothing new
    d.start()
    d.wait_assigned()
    wait_settled(daemon_kafka, [logs], group, [d])
    assert d.metric("rankwatch_records_replayed_total") > 0
    assert d.metric('rankwatch_diagnoses_skipped_total{reason="identical"}') >= 1
    check_diagnoses(read_topic(daemon_kafka, out), truths)
    assert d.stop() == 0


# --- a job that goes silent -------------------------------------------------------------------


def test_a_job_that_goes_silent_is_diagnosed_by_the_processing_time_bound(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """The cause is the last thing the job says: its event time never passes start + settle,
    so only `max_wait_ms` of wall time closes the incident."""
    logs, out = fresh_topics("logs", 1), fresh_topics("diagnoses", 1)
    ts = "2026-11-30T12:00:00Z"
    lines = [
        (
            0,
            "node-a:101:101 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
            "busId 1000 commId 0x9 - Init COMPLETE",
        ),
        (
            1,
            "node-b:202:202 [0] NCCL INFO comm 0x1 rank 1 nranks 2 cudaDev 0 nvmlDev 0 "
            "busId 1000 commId 0x9 - Init COMPLETE",
        ),
        (
            1,
            "node-b:202:202 [0] transport/net_ib.cc:123 NCCL WARN Cuda failure "
            "'an illegal memory access was encountered'",
        ),
    ]

    async def produce() -> None:
        p = AIOKafkaProducer(bootstrap_servers=daemon_kafka)
        await p.start()
        try:
            for rank, line in lines:
                host = line.split(":")[0]
                value = {"job": "quiet", "rank": rank, "host": host, "ts": ts, "line": line}
                await p.send_and_wait(logs, orjson.dumps(value), key=b"quiet")
        finally:
            await p.stop()

    asyncio.run(produce())
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("q", **base_settings(logs, out, group), settle_ms=60_000).start()
    wait_settled(daemon_kafka, [logs], group, [d])
    (record,) = read_topic(daemon_kafka, out)
    diagnosis = record.json()
    assert diagnosis["job"] == "quiet"
    assert (diagnosis["root_cause"]["rank"], diagnosis["root_cause"]["host"]) == (1, "node-b")
    assert diagnosis["signature"]["id"] == "nccl_cuda_failure"
    assert d.stop() == 0
