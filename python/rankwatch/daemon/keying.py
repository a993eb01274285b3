"""`repartition = "auto"` (the default): whether an input topic's records are keyed by their
job, so that all of a job reaches one partition and one daemon, is found out at start from the
last records of each partition. A topic of one partition never needs re-keying; a topic whose
records carry no key, or a key other than their job (Fluent Bit and Vector send them so
unless told otherwise), goes through the repartition stage; a topic whose records are keyed
by job, or that holds nothing yet, is read as it is. Unkeyed records that arrive later on a
topic read as it is are counted and reported (`service.Daemon`), since their jobs may then be
diagnosed apart by several daemons.

The decision is taken once, when the daemon first reaches the broker; until then it waits as
it waits to start (broker_wait.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from aiokafka import TopicPartition

from rankwatch.daemon.feeding import header
from rankwatch.kafka.clients import reader_consumer
from rankwatch.kafka.tail import FETCH_TIMEOUT_MS, topic_partitions
from rankwatch.settings.options import AUTO
from rankwatch.settings.run import DaemonConfig, TopicConfig

log = logging.getLogger("rankwatch.daemon")

SAMPLE_RECORDS = 200  # read back from the end of each partition
SAMPLE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Keying:
    """What the sample of a topic showed."""

    topic: str
    partitions: int
    sampled: int = 0
    unkeyed: int = 0  # records whose key does not name their job
    example: str = ""  # one of them, as a log line may show it

    @property
    def needs_repartition(self) -> bool:
        return self.partitions > 1 and self.unkeyed > 0


def count_unkeyed(records: list[Any], topic: TopicConfig) -> tuple[int, int, str]:
    """(records with a job, those not partitioned by it, an example) of `records`. A record
    is not partitioned by its job when it has no key (Kafka spreads those) or when its job
    also shows on another partition (keyed by something else, or `job/rank`)."""
    values = [r.value or b"" for r in records]
    keys = [r.key for r in records]
    headers = [header(list(r.headers or ()), topic.job_header) for r in records]
    jobs = topic.decoder().jobs(values, keys, headers)
    partitions: dict[bytes, set[int]] = {}
    for r, job in zip(records, jobs, strict=True):
        if job is not None:
            partitions.setdefault(job, set()).add(r.partition)
    with_job, unkeyed, example = 0, 0, ""
    for key, job in zip(keys, jobs, strict=True):
        if job is None:
            continue
        with_job += 1
        if key is None or len(partitions[job]) > 1:
            unkeyed += 1
            example = example or _example(key, job, len(partitions[job]))
    return with_job, unkeyed, example


def _example(key: bytes | None, job: bytes, spread: int) -> str:
    name = job.decode(errors="replace")[:60]
    if key is None:
        return f"job {name!r} without a key"
    return f"job {name!r} on {spread} partitions"


async def sample_topic(consumer: Any, name: str, topic: TopicConfig) -> Keying:
    """Reads back up to SAMPLE_RECORDS records at the end of each partition of `name`."""
    tps = await topic_partitions(consumer, name)
    if len(tps) <= 1:
        return Keying(name, len(tps))
    records = await _tail_records(consumer, tps)
    with_job, unkeyed, example = count_unkeyed(records, topic)
    return Keying(name, len(tps), with_job, unkeyed, example)


async def _tail_records(consumer: Any, tps: list[TopicPartition]) -> list[Any]:
    ends = await consumer.end_offsets(tps)
    starts = await consumer.beginning_offsets(tps)
    todo = {tp: max(starts[tp], ends[tp] - SAMPLE_RECORDS) for tp in tps if ends[tp] > starts[tp]}
    if not todo:
        return []
    consumer.assign(list(todo))
    for tp, offset in todo.items():
        consumer.seek(tp, offset)
    out: list[Any] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SAMPLE_TIMEOUT_S
    pending = set(todo)
    while pending and loop.time() < deadline:
        batch = await consumer.getmany(*pending, timeout_ms=FETCH_TIMEOUT_MS)
        for tp, recs in batch.items():
            out.extend(r for r in recs if r.offset < ends[tp])
            if recs and recs[-1].offset + 1 >= ends[tp]:
                pending.discard(tp)
    return out


async def decide_repartition(cfg: DaemonConfig) -> DaemonConfig:
    """`cfg` with its `auto` topics decided from their records. Raises what the broker
    raises when it cannot be read (the daemon waits for it and tries again)."""
    consumer = reader_consumer(cfg)
    try:
        await consumer.start()
        return await resolve_auto(cfg, consumer)
    finally:
        await consumer.stop()


async def resolve_auto(cfg: DaemonConfig, consumer: Any) -> DaemonConfig:
    """`cfg` with every `repartition = "auto"` topic decided from its sample (one INFO line
    each for the multi-partition ones)."""
    decided: dict[str, TopicConfig] = dict(cfg.topics)
    for name in cfg.input_topics():
        topic = cfg.topic_config(name)
        if topic.repartition != AUTO:
            continue
        keying = await sample_topic(consumer, name, topic)
        decided[name] = dataclasses.replace(topic, repartition=keying.needs_repartition)
        _say(keying)
    return dataclasses.replace(cfg, topics=decided)


def _say(k: Keying) -> None:
    if k.partitions <= 1:
        return
    if k.needs_repartition:
        log.info(
            "topic %s: %d of the last %d records are not keyed by their job (%s): re-keying "
            "it by job through the repartition stage (repartition = auto; set it to true or "
            "false to decide yourself)",
            k.topic,
            k.unkeyed,
            k.sampled,
            k.example,
        )
    elif k.sampled:
        log.info("topic %s: records are keyed by job; read as they are", k.topic)
    else:
        log.info(
            "topic %s: no records yet to tell whether they are keyed by job; read as they are "
            "(records without their job as key are reported)",
            k.topic,
        )
