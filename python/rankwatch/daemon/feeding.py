"""Turning a fetched partition batch into the parallel lists `Engine.feed_records` takes."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from rankwatch.engine import Decoder


def header(headers: Sequence[tuple[str, bytes]], name: str) -> bytes | None:
    for k, v in headers:
        if k == name:
            return v
    return None


@dataclass
class PartitionBatch:
    """The records of one partition from one fetch, ready for one `feed_records` call."""

    tp: TopicPartition
    records: list[Any]  # aiokafka ConsumerRecords, in offset order
    decoder: Decoder
    values: list[bytes]
    keys: list[bytes | None]
    headers: list[bytes | None]
    timestamps: list[int | None]
    replayed: int  # how many leading records are re-reads below the replay end

    @property
    def origin(self) -> str:
        return f"{self.tp.topic}/{self.tp.partition}"

    @property
    def end(self) -> int:
        """The offset after the last record."""
        return int(self.records[-1].offset) + 1

    def feed_args(
        self,
    ) -> tuple[Decoder, str, list[bytes], list[bytes | None], list[bytes | None], list[int | None]]:
        return self.decoder, self.origin, self.values, self.keys, self.headers, self.timestamps


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
        tp=tp,
        records=records,
        decoder=decoder,
        values=[r.value if r.value is not None else b"" for r in records],
        keys=[r.key for r in records],
        headers=[header(r.headers, job_header) if r.headers else None for r in records],
        timestamps=[r.timestamp for r in records],
        replayed=replayed,
    )
