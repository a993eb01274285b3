"""The daemon's feed path: partition batches of aiokafka ConsumerRecords read in Rust
(`Engine.feed_consumer_records`) decode, reject and feed exactly as the same records passed as
parallel lists (`Engine.feed_records`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.structs import ConsumerRecord

from rankwatch.daemon.feeding import header, prepare
from rankwatch.engine import Decoder, Engine

CAUSE = "[rank3]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def record(
    offset: int,
    value: bytes | None,
    key: bytes | None = None,
    headers: tuple[tuple[str, bytes], ...] = (),
    timestamp: int = 1_700_000_000_000,
) -> ConsumerRecord[bytes, bytes]:
    size = len(value) if value is not None else -1
    return ConsumerRecord("logs", 0, offset, timestamp, 0, key, value, None, -1, size, headers)


def batch() -> list[ConsumerRecord[bytes, bytes]]:
    good = orjson.dumps({"job": "j1", "rank": 3, "line": CAUSE})
    return [
        record(0, good, b"j1"),
        record(1, b"{nope", b"j1"),  # bad_json
        record(2, None, b"j1"),  # no value: empty, not JSON
        record(3, b"\xff\xfe", b"j1"),  # not_utf8
        record(4, orjson.dumps({"line": "x"}), None, (("other", b"x"), ("job", b"from-hdr"))),
        record(5, orjson.dumps({"line": "y"})),  # no_job
        record(6, orjson.dumps([1, 2])),  # not_an_object
        record(7, orjson.dumps({"job": "j2", "line": "INFO fine"}), b"j2", (("job", b""),)),
    ]


def as_lists(recs: list[Any], job_header: str) -> tuple[list[Any], ...]:
    values = [r.value if r.value is not None else b"" for r in recs]
    keys = [r.key for r in recs]
    headers = [header(r.headers, job_header) if r.headers else None for r in recs]
    return values, keys, headers, [r.timestamp for r in recs]


def test_consumer_records_feed_like_parallel_lists(catalog: Any) -> None:
    recs = batch()
    direct, listed = Engine(catalog), Engine(catalog)
    dec = Decoder("canonical")
    got = direct.feed_consumer_records(dec, "logs/0", recs, "job").rejected
    want = listed.feed_records(dec, "logs/0", *as_lists(recs, "job"))
    assert got == want
    assert [reason for _, reason in got] == [
        "bad_json",
        "bad_json",
        "not_utf8",
        "no_job",
        "not_an_object",
    ]
    assert sorted(direct.jobs()) == sorted(listed.jobs()) == ["from-hdr", "j1", "j2"]
    assert direct.finish() == listed.finish()


def test_text_records_take_the_job_from_the_named_header(catalog: Any) -> None:
    engine = Engine(catalog)
    recs = [record(0, CAUSE.encode(), None, (("team", b"t"), ("job-name", b"hdr-job")))]
    assert engine.feed_consumer_records(Decoder("text"), "logs/0", recs, "job-name").rejected == []
    assert engine.jobs() == ["hdr-job"]


def test_a_value_that_is_not_bytes_is_a_clear_error(catalog: Any) -> None:
    with pytest.raises(TypeError):
        Engine(catalog).feed_consumer_records(
            Decoder("canonical"),
            "logs/0",
            [record(0, "text")],
            "job",  # type: ignore[arg-type]
        )


def test_the_feed_returns_the_distinct_keys_and_job_headers(catalog: Any) -> None:
    recs = [
        *batch(),
        record(8, b"{}", b"j2", (("other", b"x"),)),  # headers, but no job header: None
        record(9, b"{}", b"j1", (("job", b"from-hdr"),)),
    ]
    fed = Engine(catalog).feed_consumer_records(Decoder("canonical"), "logs/0", recs, "job")
    assert fed.keys == {r.key for r in recs} == {b"j1", b"j2", None}
    assert fed.headers == {header(r.headers, "job") for r in recs if r.headers}
    assert fed.headers == {b"from-hdr", b"", None}


def test_prepare_counts_replayed_records() -> None:
    recs = batch()
    part = prepare(TopicPartition("logs", 0), recs, Decoder("canonical"), "job", replay_end=3)
    assert part.replayed == 3
    assert part.end == 8
    assert part.feed_args()[2] is recs
