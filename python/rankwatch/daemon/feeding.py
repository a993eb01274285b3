"""A fetched partition batch as engine input: the records aiokafka parsed (rawrecords.py; or
its `ConsumerRecord`s, which have the same attributes) go to
`Engine.feed_consumer_records`, which reads value, key, timestamp and job header in Rust and
returns the batch's distinct keys and job headers, so the event loop never walks the records
of a batch (it reads single records only for dead letters)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from rankwatch.engine import Decoder

# (decoder, origin, records, job header name): one `feed_consumer_records` call
FeedArgs = tuple[Decoder, str, list[Any], str]


def header(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


@dataclass
class PartitionBatch:
    """The records of one partition from one fetch, ready for one engine call."""

    tp: TopicPartition
    records: list[Any]  # aiokafka's parsed records or ConsumerRecords, in offset order
    decoder: Decoder
    job_header: str
    replayed: int  # how many leading records are re-reads below the replay end

    @property
    def origin(self) -> str:
        return f"{self.tp.topic}/{self.tp.partition}"

    @property
    def end(self) -> int:
        """The offset after the last record."""
        return int(self.records[-1].offset) + 1

    def feed_args(self) -> FeedArgs:
        return self.decoder, self.origin, self.records, self.job_header


def prepare(
    tp: TopicPartition,
    records: list[Any],
    decoder: Decoder,
    job_header: str,
    replay_end: int,
) -> PartitionBatch:
    if records[0].offset < replay_end:
        replayed = bisect.bisect_left([r.offset for r in records], replay_end)
    else:
        replayed = 0
    return PartitionBatch(
        tp=tp, records=records, decoder=decoder, job_header=job_header, replayed=replayed
    )
