"""Unkeyed input (`repartition = true`): records that carry their job only in the value, spread
over the partitions as Fluent Bit and Vector produce them, are re-keyed by job into the
internal topic `<group>-repartition-<topic>` before analysis, so that every daemon of a group
sees whole jobs: one diagnosis id per incident, naming the generator's root cause, with two
and three daemons, a rebalance mid-burst, and a SIGKILL of the member that repartitions.

Daemons are real `rankwatch run` processes on the real broker (tests/daemon_fixtures.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import CollectorRegistry

from daemon_fixtures import (
    ROOT,
    Daemon,
    KafkaRecord,
    committed_offsets,
    end_offsets,
    read_topic,
    wait_for,
    wait_settled,
    write_config,
)
from rankwatch import Catalog
from rankwatch.daemon.keying import Keying, count_unkeyed
from rankwatch.daemon.repartition import SOURCE_HEADER, CopyFilter, Repartitioner, partition_for
from rankwatch.engine import Decoder
from rankwatch.kafka.replay import BatchSender, canonical_record, interleave, new_producer
from rankwatch.local import discover
from rankwatch.settings.options import AUTO, ConfigError
from rankwatch.settings.run import DaemonConfig, TopicConfig, load_config
from rankwatch.simulate import fleetgen
from test_daemon_kafka import check_diagnoses, make_fleet

YEAR = fleetgen._BASE.year  # the generator's logs print times without a year


def unkeyed_burst(root: Path, truths: dict[str, Any]) -> list[bytes]:
    """Every line of every job as a shipper sends it: canonical values with the job only in
    the value and `ts` the time the shipper read the line (the line's own time, else that of
    the line before it in its file), lines of all files interleaved. Spread over partitions,
    a file's lines are no longer read in order, so lines without a time of their own need the
    record's time, as Fluent Bit's `@timestamp` and Vector's `timestamp` give it."""
    catalog = Catalog()
    files, _ = discover([root / job for job in truths])
    read_at: dict[Path, int | None] = {}
    out = []
    for f, line in interleave(files):
        own = orjson.loads(catalog._core.test_line(line.decode(errors="replace"), YEAR))["ts"]
        if own is not None:
            read_at[f.path] = int(datetime.fromisoformat(own).timestamp() * 1000)
        record = orjson.loads(canonical_record(f, line))
        record["ts"] = read_at.get(f.path)
        out.append(orjson.dumps(record))
    return out


def produce_unkeyed(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """Sends values without a key: each to the next partition in turn, so every rank of a
    job lands on every partition (a shipper's null-key partitioner does the same at random)."""

    async def send() -> None:
        producer = new_producer({"bootstrap_servers": bootstrap})
        await producer.start()
        try:
            sender = BatchSender(producer, topic, sorted(await producer.partitions_for(topic)))
            for value in values:
                await sender.add(None, value)
            await sender.flush()
        finally:
            await producer.stop()

    asyncio.run(send())


def resend(bootstrap: str, topic: str, records: list[KafkaRecord]) -> None:
    """Sends copies of `records` (key, value, headers, time) to their partitions again."""

    async def send() -> None:
        producer = new_producer({"bootstrap_servers": bootstrap})
        await producer.start()
        try:
            for r in records:
                await producer.send_and_wait(
                    topic,
                    r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers.items()),
                )
        finally:
            await producer.stop()

    asyncio.run(send())


def topics_of(bootstrap: str) -> set[str]:
    async def names() -> set[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    return asyncio.run(names())


def settings(logs: str, out: str, group: str) -> dict[str, Any]:
    return {"topic": [logs], "output_topic": out, "group_id": group}


UNKEYED = {"repartition": True}


def wait_repartitioned(bootstrap: str, logs: str, group: str, daemons: list[Daemon]) -> str:
    """Waits until the stage committed every input record, then until the analysis settled
    on the internal topic; returns the internal topic."""
    internal = f"{group}-repartition-{logs}"

    def stage_done() -> bool:
        for d in daemons:
            if d.proc is not None and d.running():
                d.fail_if_dead()
        ends = end_offsets(bootstrap, logs)
        done = committed_offsets(bootstrap, logs, f"{group}-repartition")
        return all(done.get(p, 0) >= e for p, e in ends.items() if e > 0)

    wait_for(f"the repartition stage to commit every record of {logs}", stage_done)
    wait_settled(bootstrap, [internal], group, [d for d in daemons if d.running()])
    return internal


def wait_both_stages(daemons: list[Daemon], partitions: int = 4) -> None:
    """Every daemon owns partitions of both stages, and together they own all of each."""

    def shared() -> bool:
        ms = [d.metrics() or {} for d in daemons]
        for name in ("rankwatch_partitions_assigned", "rankwatch_repartition_partitions_assigned"):
            owned = [m.get(name, 0) for m in ms]
            if min(owned) == 0 or sum(owned) != partitions:
                return False
        return True

    wait_for(f"{len(daemons)} daemons to share the partitions of both stages", shared)


def copies_by_source(bootstrap: str, internal: str) -> Counter[bytes]:
    copies: Counter[bytes] = Counter()
    for r in read_topic(bootstrap, internal):
        copies[r.headers[SOURCE_HEADER]] += 1
    return copies


def not_copied(bootstrap: str, logs: str, copies: Counter[bytes]) -> list[str]:
    """The input records without a copy, as `partition:first-last` ranges."""
    gaps = []
    for partition, end in sorted(end_offsets(bootstrap, logs).items()):
        missing = [o for o in range(end) if f"{logs}/{partition}/{o}".encode() not in copies]
        while missing:
            run = 1
            while run < len(missing) and missing[run] == missing[0] + run:
                run += 1
            gaps.append(f"{partition}:{missing[0]}-{missing[run - 1]}")
            missing = missing[run:]
    return gaps


def test_unkeyed_input_with_two_daemons_gives_one_diagnosis_per_incident(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """Fails without the stage: each daemon diagnoses the ranks its partitions hold, so an
    incident gets two ids and one of them names a symptom on the wrong rank."""
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 41, "per-rank"),
            ("ib_link_down", 42, "per-node"),
            ("healthy", 43, "per-rank"),
        ],
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    daemons = [
        daemon_factory(name, **settings(logs, out, group), topics={logs: UNKEYED}).start()
        for name in ("a", "b")
    ]
    wait_both_stages(daemons)
    values = unkeyed_burst(tmp_path / "fleet", truths)
    produce_unkeyed(daemon_kafka, logs, values)
    internal = wait_repartitioned(daemon_kafka, logs, group, daemons)

    check_diagnoses(read_topic(daemon_kafka, out), truths)
    internal_records = read_topic(daemon_kafka, internal)
    assert len(internal_records) == len(values)
    # one job, one partition of the internal topic: the one Kafka's partitioner gives its name
    for r in internal_records:
        job = r.json()["job"].encode()
        assert r.partition == partition_for(job, 4), job
    repartitioned = sum(
        d.metric(f'rankwatch_repartition_records_total{{topic="{logs}"}}') for d in daemons
    )
    assert repartitioned == len(values)

    # what the stage sends again after a crash (the tail it had not committed) is dropped:
    # no line is read twice, so no diagnosis changes
    published = len(read_topic(daemon_kafka, out))
    tail = [r for r in internal_records if r.json()["job"] == "cuda-error-41"][-50:]
    resend(daemon_kafka, internal, tail)
    wait_settled(daemon_kafka, [internal], group, daemons)
    dropped = sum(d.metric("rankwatch_repartition_copies_dropped_total") for d in daemons)
    assert dropped == len(tail)
    assert len(read_topic(daemon_kafka, out)) == published
    # every member is asked before any stops: once one leaves, the other is rightly not ready
    # ("no partitions assigned") until the rebalance gives it their partitions
    for d in daemons:
        status, body = d.get("/readyz")
        assert status == 200, body
    for d in daemons:
        assert d.stop() == 0
        assert "have no key" not in d.log_text()


def test_three_daemons_with_a_rebalance_mid_burst(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 51, "per-rank"),
            ("oom_kill", 52, "per-node"),
            ("desync", 53, "torchrun-logdir"),
            ("healthy_noisy", 54, "per-rank"),
        ],
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = settings(logs, out, group)
    a, b, c = (
        daemon_factory(
            name,
            **config,
            topics={logs: UNKEYED},
            max_batch_records=200,
            # the analysis publishes in transactions; the stage stays at least once
            transactional_id=f"rw-{group}-{name}",
            isolation_level="read_committed",
        )
        for name in ("a", "b", "c")
    )
    a.start(), b.start()
    wait_both_stages([a, b])
    values = unkeyed_burst(tmp_path / "fleet", truths)
    third = len(values) // 3
    produce_unkeyed(daemon_kafka, logs, values[:third])
    c.start()  # joins both groups while the first third is being analysed
    produce_unkeyed(daemon_kafka, logs, values[third : 2 * third])
    wait_both_stages([a, b, c])
    produce_unkeyed(daemon_kafka, logs, values[2 * third :])
    wait_repartitioned(daemon_kafka, logs, group, [a, b, c])

    check_diagnoses(read_topic(daemon_kafka, out), truths)
    for d in (a, b, c):
        assert d.stop() == 0


def test_sigkill_of_the_repartitioning_member_loses_and_duplicates_nothing(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 61, "per-rank"),
            ("ib_link_down", 62, "per-node"),
            ("cuda_oom", 63, "per-rank"),
            ("healthy", 64, "per-node"),
        ],
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = {**settings(logs, out, group), "max_batch_records": 100, "commit_interval_ms": 100}
    # both daemons are members of both groups; the one owning more of the stage is killed
    a = daemon_factory("a", **config, topics={logs: UNKEYED}).start()
    a.wait_assigned()
    b = daemon_factory("b", **config, topics={logs: UNKEYED}).start()
    wait_for(
        "b to own analysis partitions",
        lambda: b.metric("rankwatch_partitions_assigned") > 0,
    )
    values = unkeyed_burst(tmp_path / "fleet", truths)
    half = len(values) // 2
    produce_unkeyed(daemon_kafka, logs, values[:half])
    stage = f"{group}-repartition"
    wait_for(
        "the repartition stage to forward part of the burst",
        lambda: sum(committed_offsets(daemon_kafka, logs, stage).values()) > 0,
    )
    killed = max((a, b), key=lambda d: d.metric("rankwatch_repartition_partitions_assigned"))
    assert killed.metric("rankwatch_repartition_partitions_assigned") > 0
    killed.kill()  # mid-burst: what it forwarded but had not committed is forwarded again
    produce_unkeyed(daemon_kafka, logs, values[half:])
    killed.start()
    internal = wait_repartitioned(daemon_kafka, logs, group, [a, b])

    check_diagnoses(read_topic(daemon_kafka, out), truths)
    copies = copies_by_source(daemon_kafka, internal)
    assert not_copied(daemon_kafka, logs, copies) == []  # every input record reached it
    assert len(copies) == len(values)
    twice = sum(n - 1 for n in copies.values())
    dropped = sum(d.metric("rankwatch_repartition_copies_dropped_total") for d in (a, b))
    print(f"records forwarded twice after the kill: {twice}; second copies dropped: {dropped}")
    for d in (a, b):
        assert d.stop() == 0


def test_a_batch_fetched_across_a_rebalance_is_forwarded(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    """The group rebalances while every fetch waits and this member keeps its partition, the
    new assignment having fetched the batch already (its position is past it). Dropping such
    a batch to "read it again from the committed offsets" lost it: one batch per rebalance."""
    logs = fresh_topics("logs", 1)
    values = [
        orjson.dumps({"job": f"j{i % 3}", "rank": i % 8, "line": f"l {i}"}) for i in range(500)
    ]
    produce_unkeyed(daemon_kafka, logs, values)
    group = f"g-{uuid.uuid4().hex[:8]}"
    path = tmp_path / "stage.toml"
    settings_ = {**settings(logs, "unused", group), "bootstrap_servers": daemon_kafka}
    write_config(
        path,
        {
            **settings_,
            "max_batch_records": 100,
            "initial_offset": "earliest",
            "poll_interval_ms": 100,
        },
        {logs: UNKEYED},
    )
    asyncio.run(forward_with_a_rebalance_in_every_fetch(load_config(path, environ={}), logs))

    internal = f"{group}-repartition-{logs}"
    copies = copies_by_source(daemon_kafka, internal)
    assert not_copied(daemon_kafka, logs, copies) == []
    assert sum(copies.values()) == len(values)  # nothing sent twice either


async def forward_with_a_rebalance_in_every_fetch(cfg: Any, logs: str) -> None:
    decoders = {t: cfg.topic_config(t).decoder() for t in cfg.repartitioned_topics()}
    stage = Repartitioner(cfg, CollectorRegistry(), decoders)
    await stage.start()
    fetch = stage.consumer.getmany

    async def fetch_across_a_rebalance(*args: Any, **kwargs: Any) -> Any:
        batch = await fetch(*args, **kwargs)
        if batch:  # the callbacks of a rebalance that left this member its partitions
            kept = set(stage.consumer.assignment())
            await stage.on_revoked(kept)
            await stage.on_assigned(kept)
        return batch

    stage.consumer.getmany = fetch_across_a_rebalance
    task = asyncio.create_task(stage.run())
    tp = TopicPartition(logs, 0)
    try:
        for _ in range(600):
            if task.done() or await stage.consumer.committed(tp) == 500:
                break
            await asyncio.sleep(0.1)
    finally:
        stage.stop()
        await task
        await stage.close()


def test_keyed_input_does_not_create_a_repartition_topic(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(tmp_path / "fleet", [("cuda_error", 71, "per-rank")])
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("k", **settings(logs, out, group)).start()
    d.wait_assigned()
    values = unkeyed_burst(tmp_path / "fleet", truths)
    (job,) = truths
    produce_keyed = [(job.encode(), v) for v in values]
    from test_daemon_kafka import produce

    produce(daemon_kafka, logs, produce_keyed)
    wait_settled(daemon_kafka, [logs], group, [d])
    check_diagnoses(read_topic(daemon_kafka, out), truths)
    assert not [t for t in topics_of(daemon_kafka) if t.startswith(f"{group}-repartition")]
    assert committed_offsets(daemon_kafka, logs, f"{group}-repartition") == {}
    assert "repartitioning" not in d.log_text()
    assert d.stop() == 0


def test_unkeyed_records_on_a_topic_read_as_keyed_are_warned_about(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    truths = make_fleet(tmp_path / "fleet", [("healthy", 81, "per-rank")])
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("w", **settings(logs, out, group)).start()
    d.wait_assigned()
    produce_unkeyed(daemon_kafka, logs, unkeyed_burst(tmp_path / "fleet", truths))
    wait_settled(daemon_kafka, [logs], group, [d])
    text = d.log_text()
    assert text.count("have no key") == 1, text[-3000:]
    assert "repartition = true" in text
    assert d.metric(f'rankwatch_records_unkeyed_total{{topic="{logs}"}}') > 0
    assert d.stop() == 0


def test_by_default_a_topic_that_holds_unkeyed_records_is_repartitioned(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """Probe F23: without `repartition`, unkeyed input read by two daemons gave 3-4 ids per
    incident, most with a wrong root cause. `repartition = auto` (the default) reads the last
    records of each partition at start, sees them unkeyed and re-keys the topic."""
    truths = make_fleet(
        tmp_path / "fleet", [("cuda_error", 91, "per-rank"), ("ib_link_down", 92, "per-node")]
    )
    logs, out = fresh_topics("logs", 4), fresh_topics("diagnoses", 2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    values = unkeyed_burst(tmp_path / "fleet", truths)
    produce_unkeyed(daemon_kafka, logs, values)
    daemons = [daemon_factory(name, **settings(logs, out, group)).start() for name in ("a", "b")]
    wait_repartitioned(daemon_kafka, logs, group, daemons)
    check_diagnoses(read_topic(daemon_kafka, out), truths)
    for d in daemons:
        assert "re-keying it by job through the repartition stage" in d.log_text()
        assert d.stop() == 0


# --- configuration and decoding (no broker) -----------------------------------------------------


@dataclass
class Sampled:
    """A record as the sample reads it (aiokafka's ConsumerRecord has these fields)."""

    value: bytes
    key: bytes | None
    partition: int
    headers: tuple[tuple[str, bytes], ...] = ()


def test_the_sample_counts_records_not_partitioned_by_their_job() -> None:
    topic = TopicConfig()
    value = orjson.dumps({"job": "j1", "rank": 0, "line": "x"})
    keyed = [Sampled(value, b"j1", 2), Sampled(value, b"j1", 2)]
    assert count_unkeyed(keyed, topic)[:2] == (2, 0)
    without_key = [Sampled(value, None, 1), Sampled(value, b"j1", 1)]
    assert count_unkeyed(without_key, topic)[:2] == (2, 1)
    # keyed by something else: the job shows on two partitions
    by_host = [Sampled(value, b"node-1", 0), Sampled(value, b"node-2", 3)]
    with_job, unkeyed, example = count_unkeyed(by_host, topic)
    assert (with_job, unkeyed) == (2, 2) and "on 2 partitions" in example
    assert count_unkeyed([Sampled(b"not json", None, 0)], topic)[:2] == (0, 0)


def test_repartition_is_auto_unless_set() -> None:
    def cfg(**env: str) -> DaemonConfig:
        return load_config(environ={"RANKWATCH_TOPIC": "t", **env})

    assert cfg().topic_config("t").repartition == AUTO
    assert cfg(RANKWATCH_REPARTITION="auto").repartition == AUTO
    assert cfg(RANKWATCH_REPARTITION="false").repartition is False
    assert cfg().repartitioned_topics() == []  # undecided: read as it is
    with pytest.raises(ConfigError, match='true or false or "auto"'):
        load_config(overrides={"repartition": "sometimes", "topic": ["t"]}, environ={})
    assert Keying("t", partitions=1, sampled=5, unkeyed=5).needs_repartition is False
    assert Keying("t", partitions=4, sampled=5, unkeyed=1).needs_repartition is True
    assert Keying("t", partitions=4).needs_repartition is False  # nothing to tell by yet


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "rw.toml"
    p.write_text(text)
    return p


def test_repartition_is_a_per_topic_and_top_level_option(tmp_path: Path) -> None:
    cfg = load_config(
        write(
            tmp_path,
            'group_id = "rw"\ntopic = ["keyed"]\n'
            '[topics."logs.k8s"]\nformat = "fluent-bit"\nrepartition = true\n',
        ),
        environ={},
    )
    assert cfg.repartitioned_topics() == ["logs.k8s"]
    assert cfg.analysis_topics() == ["keyed", "rw-repartition-logs.k8s"]
    assert cfg.source_topic("rw-repartition-logs.k8s") == "logs.k8s"
    assert cfg.repartition_group() == "rw-repartition"
    everywhere = load_config(
        write(tmp_path, 'topic = ["a", "b"]\n'), environ={"RANKWATCH_REPARTITION": "true"}
    )
    assert everywhere.repartitioned_topics() == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('group_id = "my group"\ntopic = ["t"]\nrepartition = true\n', "not a valid Kafka topic"),
        (
            'topic = ["t"]\nrepartition = true\nrepartition_retention_ms = 600000\n'
            "replay_window_ms = 600000\n",
            "must be above replay_window_ms",
        ),
        ('topic = ["t"]\n[topics.t]\nrepartition = "yes"\n', "expected true or false"),
    ],
)
def test_bad_repartition_settings_are_refused_by_validate(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text), environ={})
    proc = subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", "validate", "--config", str(tmp_path / "rw.toml")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH_")},
        check=False,
    )
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_help_documents_repartitioning() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", "run", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert "--repartition" in proc.stdout and "--repartition-retention-ms" in proc.stdout


def test_validate_names_the_repartition_topics(tmp_path: Path) -> None:
    path = write(tmp_path, 'group_id = "rw"\ntopic = ["a", "b"]\n[topics.b]\nrepartition = true\n')
    proc = subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("RANKWATCH_")},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "b re-keyed by job through rw-repartition-b" in proc.stdout


def test_decoder_jobs_match_what_the_engine_decodes() -> None:
    fb = Decoder("fluent-bit")
    labelled = orjson.dumps(
        {
            "log": "x\n",
            "kubernetes": {"labels": {"training.kubeflow.org/job-name": "llm7b"}, "host": "n1"},
        }
    )
    unlabelled = orjson.dumps({"log": "x\n", "kubernetes": {"host": "n1"}})
    jobs = fb.jobs(
        [labelled, unlabelled, unlabelled, unlabelled, b"{not json", orjson.dumps({"no": "log"})],
        [b"pod-7", None, b"from-key", None, b"k", b"k"],
        [None, b"from-header", b"from-header", None, None, None],
    )
    # the value wins, then the job header, then the key; None where the engine rejects
    assert jobs == [b"llm7b", b"from-header", b"from-header", None, None, None]
    slurm = Decoder("text", key_format="job/rank")
    assert slurm.jobs([b"line"], [b"1234/7"], [None]) == [b"1234"]
    with pytest.raises(ValueError, match="differ in length"):
        fb.jobs([labelled], [], [])


@dataclass
class Copy:
    offset: int
    headers: tuple[tuple[str, bytes], ...]


def copy(offset: int, source: str | None) -> Copy:
    headers = (("job", b"j"),) + (((SOURCE_HEADER, source.encode()),) if source else ())
    return Copy(offset, headers)


def test_second_copies_are_dropped_per_internal_and_input_partition() -> None:
    filt = CopyFilter()
    p0, p1 = TopicPartition("internal", 0), TopicPartition("internal", 1)
    first = [copy(0, "logs/0/10"), copy(1, "logs/1/10"), copy(2, "logs/0/11"), copy(3, None)]
    assert filt.fresh(p0, first) == first
    # the stage crashed after sending logs/0 up to 11 without committing: sent again from 10
    again = [copy(4, "logs/0/10"), copy(5, "logs/0/11"), copy(6, "logs/0/12"), copy(7, "x/1")]
    assert [c.offset for c in filt.fresh(p0, again)] == [6, 7]
    # another internal partition keeps its own account; a topic named a/b/c parses too
    assert [c.offset for c in filt.fresh(p1, [copy(0, "logs/0/10"), copy(1, "a/b/3/4")])] == [0, 1]
    assert [c.offset for c in filt.fresh(p1, [copy(2, "a/b/3/4")])] == []
    filt.forget({p0})
    assert filt.fresh(p0, again) == again  # rebuilt from the replay window after assignment
