"""The fault suite of issue 9: `rankwatch run` against the real broker of deploy/kafka while
the broker stops and comes back mid-stream, while the daemon is SIGKILLed twenty times in the
middle of a burst, with poison records in the stream, and with records the broker refuses
inside a transaction.

Every run is seeded; waits poll a condition with a generous deadline and nothing asserts a
duration (the durations are printed, for bench/RESULTS.md, with `pytest -s`).

What counts as a duplicate, i.e. what would page twice: a failing job with more than one
diagnosis id (two dedup keys for one incident), or a record on the diagnoses topic whose id and
content (`content_hash`, `status` included) equal those of an earlier record. An update under
the same id with new content (more collateral ranks, `open` -> `final`) is not a duplicate:
alert deliverers dedup on the id and the update carries news. Dead-letter copies are not
pages: after a SIGKILL they may be copied again (at least once), never lost.

The poison records themselves are tested on their own in test_delivery_faults.py; here they
ride along inside the outage and the SIGKILL burst."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from daemon_fixtures import (
    PORT,
    Daemon,
    KafkaRecord,
    committed_offsets,
    end_offsets,
    read_topic,
    wait_for,
    wait_settled,
)
from kafka_broker import create_topic, halt_broker, resume_broker
from rankwatch.daemon.fitting import HEADERS_TRIMMED_HEADER, record_size
from rankwatch.daemon.published import content_hash
from rankwatch.kafka.replay import canonical_record, interleave
from rankwatch.local import discover
from rankwatch.simulate import fleetgen

BROKER_MAX_MESSAGE_BYTES = 1_048_588  # the broker's default message.max.bytes
Record = tuple[bytes | None, bytes, list[tuple[str, bytes]]]


# --- inputs -------------------------------------------------------------------------------------


def make_fleet(root: Path, specs: list[tuple[str, int, str]], ranks: int) -> dict[str, Any]:
    """One job per (scenario, seed, layout) from the fleet generator; job -> truth."""
    truths: dict[str, Any] = {}
    for scenario, seed, layout in specs:
        job = f"{scenario.replace('_', '-')}-{seed}"
        truths[job] = fleetgen.generate(
            scenario,
            root / job,
            ranks=ranks,
            gpus_per_node=4,
            layout=layout,
            skew_s=2.0,
            seed=seed,
            job=job,
        )
    return truths


def burst_of(root: Path, truths: dict[str, Any]) -> list[Record]:
    """Every line of every job as canonical records keyed by job, jobs interleaved."""
    files, _ = discover([root / job for job in truths])
    return [(f.job.encode(), canonical_record(f, line), []) for f, line in interleave(files)]


def poison(key: bytes) -> Record:
    """A record the broker takes, just under its size limit: a 900 kB value that is not JSON
    plus a header that fills the rest (issue 9's poison pill)."""
    value = b"\x01not json " * 90_000
    room = BROKER_MAX_MESSAGE_BYTES - 32 - record_size(key, value, [("trace", b"")])
    return (key, value, [("trace", b"h" * room)])


def produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    """Sends the records in order (records up to the broker's limit allowed) and waits for
    every acknowledgement."""

    async def send() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            max_request_size=BROKER_MAX_MESSAGE_BYTES,
            linger_ms=5,
            acks="all",
        )
        await p.start()
        try:
            futures = [
                await p.send(topic, value, key=key, headers=headers)
                for key, value, headers in records
            ]
            await asyncio.gather(*futures)
        finally:
            await p.stop()

    asyncio.run(send())


# --- checks -------------------------------------------------------------------------------------


def duplicates(records: list[KafkaRecord]) -> list[str]:
    """Records whose (id, content) an earlier record of the topic already had."""
    seen: set[tuple[str, str]] = set()
    dups: list[str] = []
    for r in records:
        d = r.json()
        mark = (str(d["id"]), content_hash(d))
        if mark in seen:
            dups.append(f"{d['id']} ({d.get('status')}) at {r.partition}/{r.offset}")
        seen.add(mark)
    return dups


def check_incidents(records: list[KafkaRecord], truths: dict[str, Any]) -> dict[str, int]:
    """Every failing job has exactly one id whose latest version names the generator's root
    cause; healthy jobs have none; nothing is a duplicate. Returns counts for the report."""
    ids_by_job: dict[str, set[str]] = defaultdict(set)
    latest: dict[str, dict[str, Any]] = {}
    for r in records:
        d = r.json()
        assert r.key == str(d["job"]).encode()
        ids_by_job[str(d["job"])].add(str(d["id"]))
        latest[str(d["id"])] = d
    failing = {job for job, t in truths.items() if t.expect_diagnosis}
    lost = sorted(failing - set(ids_by_job))
    assert not lost, f"lost incidents: {lost}"
    assert set(ids_by_job) == failing, f"diagnosed healthy jobs: {set(ids_by_job) - failing}"
    for job in failing:
        assert len(ids_by_job[job]) == 1, f"{job}: {len(ids_by_job[job])} ids"
        (did,) = ids_by_job[job]
        rc, want = latest[did]["root_cause"], truths[job].root_cause
        got = (rc["rank"], rc["host"], rc["line"], latest[did]["signature"]["id"])
        assert got == (want["rank"], want["host"], want["line"], want["signature"]), job
    dups = duplicates(records)
    assert not dups, f"published twice with the same content: {dups}"
    return {"incidents": len(failing), "lost": len(lost), "duplicates": len(dups)}


def report(title: str, figures: dict[str, Any]) -> None:
    print(f"\n[fault suite] {title}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


FAST_SETTLE = {"settle_ms": 5000, "max_wait_ms": 3000}


# --- a refusal inside a transaction -------------------------------------------------------------


TS = "2026-11-30T12:00:00Z"
CUDA_FAILURE = (
    "{host}:202:202 [0] transport/net_ib.cc:123 NCCL WARN Cuda failure "
    "'an illegal memory access was encountered'"
)
CUDA_FAILURE_SIGNATURE = "nccl_cuda_failure"


def canonical(job: str, rank: int, host: str, line: str) -> bytes:
    return orjson.dumps({"job": job, "rank": rank, "host": host, "ts": TS, "line": line})


def failing_job(job: str) -> list[Record]:
    """Two ranks; rank 1 (on node-b) reports a CUDA failure."""
    return [
        (job.encode(), canonical(job, 1, "node-b", CUDA_FAILURE.format(host="node-b")), []),
        (job.encode(), canonical(job, 0, "node-a", "node-a:1:1 [0] NCCL INFO step 9"), []),
    ]


@pytest.mark.parametrize("transactional", [True, False], ids=["transaction", "idempotent"])
def test_a_record_the_broker_refuses_is_skipped_and_the_rest_is_written_once(
    transactional: bool,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """The dead-letter topic takes at most 2 kB per record. In one fetched batch (one
    transaction when transactional): two small bad records whose copies fit, between them a
    50 kB bad record whose copy the broker refuses, then a failing job. The refused copy is
    logged with its source offset, counted and skipped. The refusal broke the producer's
    sequence numbers for that partition, so the copy after it failed too (it was lost, or,
    in a transaction, the daemon stopped): it is sent again by a new producer (in a new
    transaction, with everything else the aborted one held), so each good copy and the
    diagnosis are written exactly once, and the offsets move on."""
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    dlq = f"{logs}.small-dead"
    create_topic(daemon_kafka, dlq, 1, configs={"max.message.bytes": "2048"})
    records: list[Record] = [
        (b"bad-a", b"{nope", []),
        (b"bad-big", b"{" * 50_000, []),
        (b"bad-c", b"[1, 2, 3]", []),
        *failing_job("in-the-transaction"),
    ]
    produce(daemon_kafka, logs, records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory(
        "t",
        topic=[logs],
        output_topic=out,
        group_id=group,
        dead_letter_topic=dlq,
        **({"transactional_id": f"rw-{group}"} if transactional else {}),
    ).start()
    wait_settled(daemon_kafka, [logs], group, [d])

    copies = read_topic(daemon_kafka, dlq)
    assert sorted(c.headers["rankwatch-source"] for c in copies) == [
        f"{logs}/0/0".encode(),
        f"{logs}/0/2".encode(),
    ]
    assert [r.json()["job"] for r in read_topic(daemon_kafka, out)] == ["in-the-transaction"]
    assert d.metric('rankwatch_publish_skipped_total{reason="refused"}') == 1
    assert f"skipped dead-letter copy of {logs}/0/1" in d.log_text()
    assert committed_offsets(daemon_kafka, logs, group) == end_offsets(daemon_kafka, logs)
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0


def failing_job_on(job: str, host: str) -> list[Record]:
    """`failing_job` with the failing rank on `host`."""
    line = CUDA_FAILURE.format(host=host)
    return [
        (job.encode(), canonical(job, 1, host, line), []),
        (job.encode(), canonical(job, 0, "node-a", "node-a:1:1 [0] NCCL INFO step 9"), []),
    ]


def test_a_diagnosis_the_broker_refuses_inside_a_transaction_is_skipped_and_the_rest_commit(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """The diagnoses topic takes at most 8 kB per record. Two jobs read together: the
    diagnosis of the one whose host name is 3,000 characters (about 23 kB) is refused, the
    other (about 2 kB) is committed once; a job that comes after still reaches the topic (the
    refusal no longer breaks the producer)."""
    logs = fresh_topics("logs")
    out = f"{logs}.small-out"
    create_topic(daemon_kafka, out, 1, configs={"max.message.bytes": "8192"})
    produce(
        daemon_kafka,
        logs,
        [*failing_job_on("wide", "w" * 3000), *failing_job_on("small", "node-b")],
    )
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory(
        "t", topic=[logs], output_topic=out, group_id=group, transactional_id=f"rw-{group}"
    ).start()
    wait_settled(daemon_kafka, [logs], group, [d])
    produce(daemon_kafka, logs, failing_job_on("after", "node-c"))
    wait_settled(daemon_kafka, [logs], group, [d])

    jobs = [r.json()["job"] for r in read_topic(daemon_kafka, out)]
    assert sorted(jobs) == ["after", "small"], jobs
    assert d.metric('rankwatch_publish_skipped_total{reason="refused"}') >= 1
    skipped = [ln for ln in d.log_text().splitlines() if "skipped diagnosis" in ln]
    assert skipped and all(f"'wide' (source {logs}/0/" in ln for ln in skipped), skipped
    assert committed_offsets(daemon_kafka, logs, group) == end_offsets(daemon_kafka, logs)
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0


# --- the broker stops and comes back mid-stream -------------------------------------------------


@contextlib.contextmanager
def broker_down() -> Iterator[None]:
    """The test broker stopped for the block, then started again on its data and port (also
    when the block fails, so the tests after it still have their broker)."""
    halt_broker(PORT)
    try:
        yield
    finally:
        resume_broker(PORT)


def readyz(d: Daemon) -> tuple[int, dict[str, Any]]:
    try:
        status, body = d.get("/readyz")
    except OSError:
        return 0, {}
    return status, orjson.loads(body)


def diagnosed_jobs(bootstrap: str, topic: str) -> set[str]:
    return {str(r.json()["job"]) for r in read_topic(bootstrap, topic)}


def records_truth(job: str) -> Any:
    """The truth of `failing_job(job)`."""
    return fleetgen.Truth(
        job=job,
        scenario="cuda_error",
        ranks=2,
        layout="records",
        expect_diagnosis=True,
        root_cause={
            "rank": 1,
            "host": "node-b",
            "line": CUDA_FAILURE.format(host="node-b"),
            "signature": CUDA_FAILURE_SIGNATURE,
        },
        first_warning=None,
        host_offsets_s={},
        notes="",
    )


@pytest.mark.parametrize("transactional", [False, True], ids=["idempotent", "transaction"])
def test_a_broker_outage_mid_stream_loses_nothing_and_health_tells_the_truth(
    transactional: bool,
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """The first half of a fleet's lines (plus a poison record and a job whose incident
    closes by wall clock 8 s after it was read) is consumed; the broker stops, keeping its
    data. During the outage /readyz says not ready (broker unreachable), rankwatch_kafka_up
    is 0 and /healthz says alive (an outage is no reason to restart the daemon). The broker
    comes back on the same port and data; the second half follows. Every incident is
    diagnosed once with the right root cause, the daemon never exited, and it is ready again."""
    truths = make_fleet(
        tmp_path / "fleet",
        [
            ("cuda_error", 51, "per-rank"),
            ("ib_link_down", 52, "per-node"),
            ("desync", 53, "torchrun-logdir"),
            ("healthy_noisy", 54, "per-rank"),
        ],
        ranks=8,
    )
    for job in ("before-the-outage", "cut-by-the-outage"):
        truths[job] = records_truth(job)
    burst = burst_of(tmp_path / "fleet", {j: t for j, t in truths.items() if t.ranks == 8})
    half = len(burst) // 2
    logs, out, dlq = fresh_topics("logs", 2), fresh_topics("diagnoses"), fresh_topics("dead")
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory(
        "o",
        topic=[logs],
        output_topic=out,
        group_id=group,
        dead_letter_topic=dlq,
        max_wait_ms=8000,
        # the outage is shorter than this, so a publish pending during it is delivered after
        request_timeout_ms=120_000,
        **({"transactional_id": f"rw-{group}"} if transactional else {}),
    ).start()
    d.wait_assigned()
    wait_for("the daemon to be ready", lambda: readyz(d)[0] == 200, context=d.log_text)
    # a diagnosis on the topic first, so the producer knows the topic's leader when the
    # outage begins (as any daemon that has published before)
    produce(daemon_kafka, logs, failing_job("before-the-outage"))
    wait_for(
        "a first diagnosis",
        lambda: "before-the-outage" in diagnosed_jobs(daemon_kafka, out),
        context=d.log_text,
    )
    produce(
        daemon_kafka,
        logs,
        [*burst[:half], poison(b"poison-1"), *failing_job("cut-by-the-outage")],
    )
    first = end_offsets(daemon_kafka, logs)
    wait_for(
        "the daemon to commit the first half",
        lambda: committed_offsets(daemon_kafka, logs, group) == first,
        context=d.log_text,
    )

    t_halt = time.monotonic()
    with broker_down():
        stopped_s = time.monotonic() - t_halt
        pending_at_stop = "job=cut-by-the-outage" not in d.log_text()

        def outage_seen() -> bool:
            status, body = readyz(d)
            kafka_up = (d.metrics() or {}).get("rankwatch_kafka_up")
            return status == 503 and kafka_up == 0 and bool(body)

        wait_for("/readyz and rankwatch_kafka_up to report the outage", outage_seen, timeout_s=60)
        not_ready_s = time.monotonic() - t_halt
        _, body = readyz(d)
        assert "broker unreachable" in body["reasons"] and body["kafka_up"] is False
        status, live = d.get("/healthz")
        assert status == 200 and orjson.loads(live)["status"] == "ok"
        # max_wait_ms closes that incident by wall clock while the broker is away: its
        # diagnosis is handed to the producer during the outage
        wait_for(
            "the diagnosis of the job read just before the outage to be sent",
            lambda: "job=cut-by-the-outage" in d.log_text(),
            timeout_s=60,
            context=d.log_text,
        )
        sent_during_s = time.monotonic() - t_halt

    t_back = time.monotonic()
    outage_s = t_back - t_halt
    wait_for(
        "/readyz and rankwatch_kafka_up to recover",
        lambda: readyz(d)[0] == 200 and d.metric("rankwatch_kafka_up") == 1,
        context=d.log_text,
    )
    ready_again_s = time.monotonic() - t_back
    produce(daemon_kafka, logs, [*burst[half:], poison(b"poison-2")])
    wait_for(
        "the diagnosis of the job read just before the outage",
        lambda: "cut-by-the-outage" in diagnosed_jobs(daemon_kafka, out),
        context=d.log_text,
    )
    diagnosis_after_s = time.monotonic() - t_back
    wait_settled(daemon_kafka, [logs], group, [d])

    figures = check_incidents(read_topic(daemon_kafka, out), truths)
    copies = read_topic(daemon_kafka, dlq)
    assert sorted(c.key for c in copies) == [b"poison-1", b"poison-2"]
    assert all(HEADERS_TRIMMED_HEADER in c.headers for c in copies)
    assert d.running() and d.starts == 1, d.log_text()[-3000:]
    assert d.stop() == 0
    report(
        "broker outage",
        {
            **figures,
            "broker_stop_s": round(stopped_s, 1),
            "outage_s": round(outage_s, 1),
            "not_ready_after_s": round(not_ready_s, 1),
            "ready_again_after_s": round(ready_again_s, 1),
            "diagnosis_pending_when_broker_stopped": pending_at_stop,
            "diagnosis_sent_during_outage_at_s": round(sent_during_s, 1),
            "diagnosis_after_recovery_s": round(diagnosis_after_s, 1),
        },
    )


# --- SIGKILL x20 mid-burst ----------------------------------------------------------------------

KILLS = 20
FAILING = (
    "cuda_error",
    "ib_link_down",
    "cuda_oom",
    "desync",
    "oom_kill",
    "xid79",
    "shm_full",
    "wrong_iface",
    "xid79",  # not version_mismatch: with two hosts no version is the odd one out
    "cuda_error",
    "ib_link_down",
    "cuda_oom",
)
LAYOUTS = ("per-rank", "per-node", "torchrun-logdir")


def test_twenty_sigkills_mid_burst_lose_no_incident_and_page_nothing_twice(
    tmp_path: Path,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """A burst of 12 failing and 3 healthy jobs (plus three poison records) arrives in 21
    slices; after each of the first 20 the daemon is started and SIGKILLed at a seeded random
    moment (sometimes before it owns its partitions, mostly while it reads, feeds, publishes
    or commits). The daemon is a static group member (group_instance_id, as a StatefulSet pod
    is), so a restart takes its partitions back without waiting out the session. At the end:
    every incident diagnosed under one id with the true root cause, nothing published twice,
    healthy jobs silent, every poison record dead-lettered at least once."""
    rng = random.Random(9020)
    specs = [(s, 60 + i, LAYOUTS[i % 3]) for i, s in enumerate(FAILING)]
    specs += [
        ("healthy", 80, "per-rank"),
        ("healthy_noisy", 81, "per-node"),
        ("healthy", 82, "torchrun-logdir"),
    ]
    truths = make_fleet(tmp_path / "fleet", specs, ranks=8)
    burst = burst_of(tmp_path / "fleet", truths)
    for n in range(3):
        burst.insert(rng.randrange(len(burst)), poison(f"poison-{n}".encode()))
    cuts = [len(burst) * i // (KILLS + 1) for i in range(KILLS + 2)]
    slices = [burst[a:b] for a, b in itertools.pairwise(cuts)]

    logs, out, dlq = fresh_topics("logs", 4), fresh_topics("diagnoses", 2), fresh_topics("dead")
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory(
        "k",
        topic=[logs],
        output_topic=out,
        group_id=group,
        group_instance_id="fault-suite-0",
        dead_letter_topic=dlq,
        max_batch_records=100,
        commit_interval_ms=100,
    )
    t0 = time.monotonic()
    killed_owning = 0
    for part in slices[:KILLS]:
        produce(daemon_kafka, logs, part)
        d.start()
        if rng.random() < 0.75:
            d.wait_assigned()
            killed_owning += 1
        time.sleep(rng.uniform(0.0, 1.5))
        d.kill()
    produce(daemon_kafka, logs, slices[KILLS])
    t_last = time.monotonic()
    d.start()
    wait_settled(daemon_kafka, [logs], group, [d])
    settle_s = time.monotonic() - t_last

    records = read_topic(daemon_kafka, out)
    figures = check_incidents(records, truths)
    copies = read_topic(daemon_kafka, dlq)
    assert {c.key for c in copies} == {f"poison-{n}".encode() for n in range(3)}
    assert d.stop() == 0
    report(
        "SIGKILL x20",
        {
            "kills": KILLS,
            "killed_while_owning_partitions": killed_owning,
            "records": len(burst),
            **figures,
            "diagnosis_records": len(records),
            "dead_letter_copies": len(copies),
            "whole_run_s": round(time.monotonic() - t0, 1),
            "settled_after_last_start_s": round(settle_s, 1),
        },
    )
