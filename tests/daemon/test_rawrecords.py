"""The input consumer hands out aiokafka's parsed records instead of `ConsumerRecord`s
(rawrecords.py): the same offsets, keys, values, headers and timestamps, through aiokafka's own
batch parsing (compressed batches, records below the fetch offset), and the engine reads them
as it reads `ConsumerRecord`s."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.consumer.fetcher import FetchResult, PartitionRecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import ConsumerRecord

from rankwatch.daemon import rawrecords
from rankwatch.engine import Decoder, Engine

TP = TopicPartition("logs", 0)
CAUSE = "[rank3]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def fetched(compression: int) -> bytes:
    """Two record batches as a fetch response carries them (offsets 0-2 and 3-4)."""
    out = b""
    base = 0
    for size in (3, 2):
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=compression,
            is_transactional=0,
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
            batch_size=1 << 20,
        )
        for i in range(size):
            o = base + i
            value = orjson.dumps({"job": f"j{o % 2}", "rank": o, "line": CAUSE if o == 3 else "ok"})
            headers = [("job", f"h{o}".encode())] if o % 2 else []
            builder.append(
                i, timestamp=1_700_000_000_000 + o, key=b"j", value=value, headers=headers
            )
        batch = bytearray(builder.build())
        batch[:8] = base.to_bytes(8, "big")  # the broker sets the base offset
        out += bytes(batch)
        base += size
    return out


def partition_records(data: bytes, fetch_offset: int) -> PartitionRecords:
    return PartitionRecords(TP, MemoryRecords(data), [], fetch_offset, None, None, True, 0)


def fields(r: Any) -> tuple[Any, ...]:
    return r.offset, r.timestamp, r.key, r.value, list(r.headers)


def through_buffers(data: bytes, fetch_offset: int) -> list[Any]:
    """The records of one partition buffer stored in the fetcher's buffers as installed."""
    buffers = rawrecords._ParsedRecordBuffers()
    buffers[TP] = FetchResult(
        TP, assignment=None, partition_records=partition_records(data, fetch_offset), backoff=0
    )
    return list(buffers[TP]._partition_records)


def test_parsed_records_carry_what_consumer_records_carry() -> None:
    for compression in (0, 1):  # none, gzip
        data = fetched(compression)
        for fetch_offset in (0, 1, 2):  # a fetch may start inside a batch
            parsed = through_buffers(data, fetch_offset)
            wrapped = list(partition_records(data, fetch_offset))
            assert all(isinstance(r, ConsumerRecord) for r in wrapped)
            assert not any(isinstance(r, ConsumerRecord) for r in parsed)
            assert [fields(r) for r in parsed] == [fields(r) for r in wrapped]
            assert [r.offset for r in parsed] == list(range(fetch_offset, 5))


def test_the_engine_reads_parsed_records_like_consumer_records(catalog: Any) -> None:
    data = fetched(0)
    parsed, wrapped = through_buffers(data, 0), list(partition_records(data, 0))
    a, b = Engine(catalog), Engine(catalog)
    fed_a = a.feed_consumer_records(Decoder("canonical"), "logs/0", parsed, "job")
    fed_b = b.feed_consumer_records(Decoder("canonical"), "logs/0", wrapped, "job")
    assert fed_a == fed_b
    assert fed_a.headers == {b"h1", b"h3"}  # records without headers are left out
    assert a.jobs() == b.jobs()
    assert a.finish() == b.finish() != b"[]"


def test_install_leaves_an_unknown_consumer_alone() -> None:
    class Other:
        _fetcher = None

    assert rawrecords.install(Other()) is False


async def _consume(bootstrap: str, topic: str, parsed: bool, n: int) -> list[Any]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        if parsed:
            assert rawrecords.install(consumer)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        out: list[Any] = []
        while len(out) < n:
            out.extend((await consumer.getmany(timeout_ms=1000)).get(tp, []))
        return out
    finally:
        await consumer.stop()


def test_a_real_consumer_hands_out_parsed_records(daemon_kafka: str, fresh_topics: Any) -> None:
    topic = fresh_topics("logs")

    async def run() -> tuple[list[Any], list[Any]]:
        producer = AIOKafkaProducer(bootstrap_servers=daemon_kafka, compression_type="gzip")
        await producer.start()
        try:
            for o in range(50):
                headers = [("job", b"hdr")] if o % 3 == 0 else []
                await producer.send(topic, b"v%d" % o, key=b"k%d" % (o % 4), headers=headers)
            await producer.flush()
        finally:
            await producer.stop()
        return (
            await _consume(daemon_kafka, topic, True, 50),
            await _consume(daemon_kafka, topic, False, 50),
        )

    parsed, wrapped = asyncio.run(run())
    assert not any(isinstance(r, ConsumerRecord) for r in parsed)
    assert [fields(r) for r in parsed] == [fields(r) for r in wrapped]
    assert len(parsed) == 50
