"""The source stage: the group member's consumer, the repartition stage in front of it (for
topics not keyed by job, `repartition.py`), and what of each fetched batch goes to the engine.
Owns the decoders of the topics the analysis reads, the offsets per partition
(`positions.py`), the second copies the repartition stage may have sent (`CopyFilter`), and
the topics already warned about as unkeyed.

A fetched batch is cut to what is new for this member: records already fed (refetched after a
rebalance) are dropped, a batch fetched before a rebalance's seek is read again from the
position, a batch in which a partition's replay ends stops at that end, and second copies of a
repartitioned record are dropped. What is left becomes one `PartitionBatch` per partition."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from rankwatch.daemon.feeding import PartitionBatch, prepare
from rankwatch.daemon.metrics import DaemonMetrics
from rankwatch.daemon.positions import Positions
from rankwatch.daemon.repartition import CopyFilter, Repartitioner, RepartitionError
from rankwatch.engine import Decoder
from rankwatch.settings.run import DaemonConfig

log = logging.getLogger("rankwatch.daemon")


class Source:
    def __init__(self, cfg: DaemonConfig, metrics: DaemonMetrics) -> None:
        self.metrics = metrics
        self.consumer: Any = None  # set when the clients start
        self.pos = Positions()
        self.decoders: dict[str, tuple[Decoder, str]] = {}
        self.repartitioner: Repartitioner | None = None
        self._repartition_task: asyncio.Task[None] | None = None
        self.copies = CopyFilter()  # second copies the repartition stage sent after a crash
        self._fetched_end: dict[TopicPartition, int] = {}
        self._unkeyed_warned: set[str] = set()
        self.set_topics(cfg)

    def set_topics(self, cfg: DaemonConfig) -> None:
        """The decoders of the topics the analysis reads: an input topic, or the repartition
        topic of one, decoded as its input topic is."""
        self.cfg = cfg
        self.decoders = {}
        for topic, analysed in zip(cfg.input_topics(), cfg.analysis_topics(), strict=True):
            tc = cfg.topic_config(topic)
            # A repartitioned topic's records were spread over partitions and merged again:
            # a file's lines no longer arrive in order.
            in_order = analysed == topic
            self.decoders[analysed] = (tc.decoder(in_order), tc.job_header)

    # --- the repartition stage ------------------------------------------------------------

    def make_repartitioner(self, registry: CollectorRegistry) -> None:
        """Makes the repartition stage if a topic needs one (after the topics are decided)."""
        if self.repartitioner is not None or not self.cfg.repartitioned_topics():
            return
        self.repartitioner = Repartitioner(
            self.cfg,
            registry,
            {
                t: self.decoders[self.cfg.repartition_topic(t)][0]
                for t in self.cfg.repartitioned_topics()
            },
        )

    def run_repartition(self, on_failure: Callable[[BaseException], None]) -> None:
        """Runs the repartition stage beside the loop; `on_failure` gets what stopped it."""
        if self.repartitioner is None:
            return

        def done(task: asyncio.Task[None]) -> None:
            error = None if task.cancelled() else task.exception()
            if error is not None:
                on_failure(
                    error
                    if isinstance(error, RepartitionError)
                    else RepartitionError(f"repartition stage failed: {error!r}")
                )

        self._repartition_task = asyncio.create_task(self.repartitioner.run())
        self._repartition_task.add_done_callback(done)

    async def stop_repartition(self) -> None:
        """Stops the repartition stage once all it read is forwarded."""
        if self.repartitioner is None or self._repartition_task is None:
            return
        self.repartitioner.stop()
        with contextlib.suppress(Exception):  # its failure went to `on_failure`
            await self._repartition_task

    async def cancel_repartition(self) -> None:
        task = self._repartition_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    # --- fetched batches ------------------------------------------------------------------

    def assigned(self) -> set[TopicPartition]:
        """Owned partitions the consumer holds right now (during a rebalance its assignment
        changes before the assignment callback runs)."""
        assigned: set[TopicPartition] = self.consumer.assignment()
        return self.pos.owned & assigned

    def accept(
        self, batch: dict[TopicPartition, list[Any]], rebalanced: bool
    ) -> list[PartitionBatch]:
        """The new part of a fetched batch, per partition (`rebalanced`: a rebalance happened
        while it was fetched)."""
        parts: list[PartitionBatch] = []
        assigned = self.assigned()
        for tp, records in batch.items():
            if tp in assigned and records:
                part = self._accept_partition(tp, records, rebalanced)
                if part is not None:
                    parts.append(part)
        return parts

    def _accept_partition(
        self, tp: TopicPartition, records: list[Any], rebalanced: bool
    ) -> PartitionBatch | None:
        expected = self.pos.expected(tp)
        if expected is not None:
            if records[0].offset < expected:  # already fed (refetched after a rebalance)
                records = [r for r in records if r.offset >= expected]
                if not records:
                    return None
            if rebalanced and records[0].offset != expected:
                # fetched before a seek of the last rebalance: read again from our position
                self.consumer.seek(tp, expected)
                return None
        records = self._up_to_replay_end(tp, records)
        end = int(records[-1].offset) + 1
        if self.repartitioner is not None:
            records = self._first_copies(tp, records)
            if not records:  # only second copies: nothing to feed, nothing to wait for
                self.pos.accepted(tp, end)
                self.pos.fed(tp, end)
                return None
            self._fetched_end[tp] = end  # past second copies dropped at the batch's end
        decoder, job_header = self.decoders[tp.topic]
        part = prepare(tp, records, decoder, job_header, self.pos.replay_end_of(tp))
        self.pos.accepted(tp, end)  # the next fetch continues after this batch
        return part

    def _up_to_replay_end(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        """A batch in which the replay ends is fed only up to that end (the rest is fetched
        again): what the engine re-emits from replayed input must be judged as a replay
        (`decision.verdict`), not as news because new records came in the same batch."""
        replay_end = self.pos.replay_end_of(tp)
        if not records[0].offset < replay_end <= records[-1].offset:
            return records
        self.consumer.seek(tp, replay_end)
        return [r for r in records if r.offset < replay_end]

    def _first_copies(self, tp: TopicPartition, records: list[Any]) -> list[Any]:
        if self.cfg.source_topic(tp.topic) == tp.topic:
            return records  # a keyed input topic
        fresh = self.copies.fresh(tp, records)
        if len(fresh) < len(records):
            assert self.repartitioner is not None
            self.repartitioner.metrics.copies_dropped.inc(len(records) - len(fresh))
        return fresh

    def fed(self, part: PartitionBatch, unkeyed: bool) -> None:
        """The engine took `part` (`unkeyed`: some of its records had no key)."""
        if unkeyed:
            self._unkeyed(part)
        self.pos.fed(part.tp, max(part.end, self._fetched_end.pop(part.tp, 0)))

    def _unkeyed(self, part: PartitionBatch) -> None:
        """Records without a key on a topic read as partitioned by job: Kafka spreads them, so
        with more than one daemon a job's ranks may be analysed apart. Counted; said once
        per topic."""
        topic = part.tp.topic
        if topic not in self.cfg.input_topics():
            return  # an internal repartition topic: its records are placed by job
        self.metrics.unkeyed.labels(topic).inc(sum(1 for r in part.records if r.key is None))
        if topic in self._unkeyed_warned:
            return
        self._unkeyed_warned.add(topic)
        log.warning(
            "records of topic %s have no key: Kafka spreads them over partitions, so with more "
            "than one daemon a job's ranks may be diagnosed apart. Set `repartition = true` "
            "for this topic, or restart: `repartition = auto` decides from the records at "
            "start (counted in rankwatch_records_unkeyed_total; see the README, keying)",
            topic,
        )

    def forget(self, partitions: set[TopicPartition]) -> None:
        """Partitions lost or new in a rebalance: their copies and batch ends are no longer
        known (new ones are rebuilt from their replay window)."""
        self.copies.forget(partitions)
        for tp in partitions:
            self._fetched_end.pop(tp, None)

    def pause(self, pause: bool) -> None:
        """Pauses the owned partitions (delivery is held), or resumes what was paused."""
        if pause:
            self.consumer.pause(*self.assigned())
        elif self.consumer.paused():
            self.consumer.resume(*self.consumer.paused())

    def lag(self) -> None:
        """The consumer lag gauge of every partition held."""
        for tp in self.assigned():
            hw = self.consumer.highwater(tp)
            if hw is not None:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(self.pos.lag(tp, hw))
