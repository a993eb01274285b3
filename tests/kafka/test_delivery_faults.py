"""Delivery faults of `rankwatch run` (issue 9): no single input record may stop a partition,
a settled diagnosis reaches the topic as `final`, and a record key is the whole job name unless
the topic says keys carry ranks. The Kafka tests run the daemon against a real broker; the
fitting rules are also checked on their own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from daemon_fixtures import (
    Daemon,
    committed_offsets,
    end_offsets,
    read_topic,
    wait_for,
    wait_settled,
)
from kafka_broker import create_topic
from rankwatch.daemon.fitting import (
    HEADERS_TRIMMED_HEADER,
    VALUE_TRUNCATED_HEADER,
    fit_dead_letter,
    fit_diagnosis,
    record_size,
)
from rankwatch.daemon.publisher import REQUEST_MARGIN

BROKER_MAX_MESSAGE_BYTES = 1_048_588  # the broker's default message.max.bytes
BUDGET = (1 << 20) - REQUEST_MARGIN  # the daemon's request budget with default settings
TS = "2026-11-30T12:00:00Z"
CUDA_FAILURE = (
    "{host}:202:202 [0] transport/net_ib.cc:123 NCCL WARN Cuda failure "
    "'an illegal memory access was encountered'"
)


def produce(
    bootstrap: str,
    topic: str,
    records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]],
) -> None:
    """Sends (key, value, headers) one by one, allowing records up to the broker's limit."""

    async def send() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=BROKER_MAX_MESSAGE_BYTES)
        await p.start()
        try:
            for key, value, headers in records:
                await p.send_and_wait(topic, value, key=key, headers=headers)
        finally:
            await p.stop()

    asyncio.run(send())


def canonical(job: str, rank: int, host: str, line: str, ts: str = TS) -> bytes:
    return orjson.dumps({"job": job, "rank": rank, "host": host, "ts": ts, "line": line})


def oom_line(rank: int) -> str:
    """A cause line without a host in it, so the engine takes the host from the record."""
    return (
        f"[rank{rank}]:[E1130 12:00:01.000000000 CUDACachingAllocator.cpp:1000] "
        f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 1.21 GiB is free."
    )


def settings(logs: str, out: str, group: str, **more: Any) -> dict[str, Any]:
    return {"topic": [logs], "output_topic": out, "group_id": group, **more}


def fail_job(job: str) -> list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]]:
    """A two-rank job whose rank 1 reports a CUDA failure, then rank 0 goes on."""
    return [
        (job.encode(), canonical(job, 1, "node-b", CUDA_FAILURE.format(host="node-b")), []),
        (job.encode(), canonical(job, 0, "node-a", "node-a:1:1 [0] NCCL INFO step 9", ts=TS), []),
    ]


# --- the fitting rules on their own -----------------------------------------------------------


def test_a_dead_letter_copy_of_a_record_near_the_broker_limit_fits() -> None:
    value, header = b"\x01not json " * 90_000, b"h" * 148_000
    own = [("rankwatch-reject-reason", b"bad_json"), ("rankwatch-source", b"logs/0/17")]
    assert record_size(b"k", value, [("trace", header)]) <= BROKER_MAX_MESSAGE_BYTES
    copy = fit_dead_letter(b"k", value, [("trace", header)], own, BUDGET, 900_000)
    assert record_size(copy.key, copy.value, copy.headers) <= BUDGET
    headers = dict(copy.headers)
    assert copy.value == value[: len(copy.value or b"")] and len(copy.value or b"") == 900_000
    assert headers["rankwatch-reject-reason"] == b"bad_json"
    assert headers["rankwatch-source"] == b"logs/0/17"
    assert header.startswith(headers["trace"]) and len(headers["trace"]) < len(header)
    assert headers[HEADERS_TRIMMED_HEADER] == str(len("trace") + len(header) + 10).encode()
    assert VALUE_TRUNCATED_HEADER not in headers
    assert copy.trimmed


def test_a_small_dead_letter_copy_is_left_whole() -> None:
    own = [("rankwatch-reject-reason", b"bad_json")]
    copy = fit_dead_letter(b"k", b"{nope", [("trace", b"t-1")], own, BUDGET, 900_000)
    assert (copy.key, copy.value, copy.headers, copy.trimmed) == (
        b"k",
        b"{nope",
        [("trace", b"t-1"), *own],
        False,
    )


def test_a_diagnosis_built_from_huge_fields_is_cut_to_fit() -> None:
    hosts = [f"{i:02d}-" + "h" * 100_000 for i in range(40)]
    d = {
        "id": "rw-1",
        "job": "wide",
        "status": "open",
        "root_cause": {"rank": 1, "host": hosts[1], "line": "x" * 50_000},
        "collateral": [{"rank": i, "host": h} for i, h in enumerate(hosts)],
    }

    def size(x: dict[str, Any]) -> int:
        return len(orjson.dumps(x))

    assert size(d) > 4_000_000
    fitted, cut = fit_diagnosis(d, size, BUDGET)
    assert cut and fitted["truncated"] is True and size(fitted) <= BUDGET
    assert (fitted["id"], fitted["job"], fitted["root_cause"]["rank"]) == ("rw-1", "wide", 1)
    assert fitted["root_cause"]["host"].startswith("01-hhh")
    small = {"id": "rw-2", "job": "j", "status": "open"}
    assert fit_diagnosis(small, size, BUDGET) == (small, False)


# --- against the broker -------------------------------------------------------------------------


def test_a_record_near_the_size_limit_is_dead_lettered_trimmed_and_the_stream_goes_on(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out, dlq = fresh_topics("logs"), fresh_topics("diagnoses"), fresh_topics("dead")
    value = b"\x01not json " * 90_000  # 900 kB, not JSON
    # a header that brings the record to just under what the broker accepts (about 148 kB)
    room = BROKER_MAX_MESSAGE_BYTES - 32 - record_size(b"poison", value, [("trace", b"")])
    poison = (b"poison", value, [("trace", b"h" * room)])
    produce(daemon_kafka, logs, [poison, *fail_job("after-poison")])
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("p", **settings(logs, out, group, dead_letter_topic=dlq)).start()
    wait_settled(daemon_kafka, [logs], group, [d])

    (copy,) = read_topic(daemon_kafka, dlq)
    assert copy.headers["rankwatch-reject-reason"] == b"bad_json"
    assert copy.headers["rankwatch-source"] == f"{logs}/0/0".encode()
    assert HEADERS_TRIMMED_HEADER in copy.headers
    assert copy.value == poison[1][: len(copy.value or b"")]
    assert record_size(copy.key, copy.value, list(copy.headers.items())) <= BUDGET
    (diagnosis,) = [r.json() for r in read_topic(daemon_kafka, out)]
    assert diagnosis["job"] == "after-poison"
    assert diagnosis["root_cause"]["host"] == "node-b"
    m = d.metrics() or {}
    assert m["rankwatch_dead_letter_records_total"] == 1
    assert m['rankwatch_publish_trimmed_total{kind="dead_letter"}'] == 1
    assert committed_offsets(daemon_kafka, logs, group) == end_offsets(daemon_kafka, logs)
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0


def test_forty_records_with_huge_hosts_give_a_published_trimmed_diagnosis(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """Each record fits; the diagnosis naming all 40 hosts would be about 1.3 MB."""
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = []
    for rank in range(40):
        host = f"{rank:02d}-" + "h" * 100_000
        records.append((b"wide", canonical("wide", rank, host, oom_line(rank)), []))
    produce(daemon_kafka, logs, records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("w", **settings(logs, out, group)).start()
    wait_settled(daemon_kafka, [logs], group, [d])

    published = read_topic(daemon_kafka, out)
    assert published, d.log_text()[-3000:]
    for r in published:
        assert record_size(r.key, r.value, list(r.headers.items())) <= BUDGET
        diagnosis = r.json()
        assert diagnosis["job"] == "wide" and diagnosis["truncated"] is True
    assert d.metric('rankwatch_publish_trimmed_total{kind="diagnosis"}') >= 1
    assert d.metric('rankwatch_publish_skipped_total{reason="too_large"}') == 0
    assert "published cut down" in d.log_text()
    assert d.stop() == 0


def test_a_settled_diagnosis_reaches_the_topic_as_final(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce(daemon_kafka, logs, fail_job("settles"))
    d = daemon_factory(
        "f", **settings(logs, out, group, settle_ms=1000, incident_horizon_ms=10_000)
    ).start()
    wait_for(
        "the open diagnosis",
        lambda: [r for r in read_topic(daemon_kafka, out) if r.json()["status"] == "open"],
        context=d.log_text,
    )
    later = canonical(
        "settles", 0, "node-a", "node-a:1:1 [0] NCCL INFO step 99", "2026-11-30T12:00:30Z"
    )
    produce(daemon_kafka, logs, [(b"settles", later, [])])
    wait_settled(daemon_kafka, [logs], group, [d])
    statuses = [(r.json()["id"], r.json()["status"]) for r in read_topic(daemon_kafka, out)]
    assert [s for _, s in statuses] == ["open", "final"], statuses
    assert len({i for i, _ in statuses}) == 1
    assert d.stop() == 0


def test_a_key_that_ends_like_a_rank_names_one_whole_job(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """Text records take their job from the key: the Slurm array jobs 1234/7 and 1234/8 are
    two jobs with an incident each, not ranks 7 and 8 of job 1234."""
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    records: list[tuple[bytes | None, bytes, list[tuple[str, bytes]]]] = [
        (key, CUDA_FAILURE.format(host=host).encode(), [])
        for key, host in ((b"1234/7", "node-a"), (b"1234/8", "node-b"))
    ]
    produce(daemon_kafka, logs, records)
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("k", **settings(logs, out, group), topics={logs: {"format": "text"}})
    d.start()
    wait_settled(daemon_kafka, [logs], group, [d])
    jobs = sorted((r.key, r.json()["job"]) for r in read_topic(daemon_kafka, out))
    assert jobs == [(b"1234/7", "1234/7"), (b"1234/8", "1234/8")]
    assert d.stop() == 0


def test_a_copy_the_broker_still_refuses_is_logged_counted_and_skipped(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    """The dead-letter topic takes at most 2 kB per record: the 50 kB copy is refused by the
    broker, named with its source offset in the log, counted, and the offsets move on."""
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    dlq = f"{logs}.small-dead"
    create_topic(daemon_kafka, dlq, 1, configs={"max.message.bytes": "2048"})
    produce(daemon_kafka, logs, [(b"bad", b"{" * 50_000, []), *fail_job("after-refusal")])
    group = f"g-{uuid.uuid4().hex[:8]}"
    d = daemon_factory("r", **settings(logs, out, group, dead_letter_topic=dlq)).start()
    wait_settled(daemon_kafka, [logs], group, [d])

    assert read_topic(daemon_kafka, dlq) == []
    assert [r.json()["job"] for r in read_topic(daemon_kafka, out)] == ["after-refusal"]
    assert d.metric('rankwatch_publish_skipped_total{reason="refused"}') == 1
    assert f"skipped dead-letter copy of {logs}/0/0" in d.log_text()
    assert committed_offsets(daemon_kafka, logs, group) == end_offsets(daemon_kafka, logs)
    assert d.get("/healthz")[0] == 200
    assert d.stop() == 0
