"""CPU cost of the repartition stage per record, beside the analysis of the same records.

For batches of Fluent Bit records (16 ranks of 8 jobs, the job only in a label), times in
alternating rounds: finding each record's job (`Decoder.jobs`, one Rust call per batch), the
whole stage's work on a batch without the network (jobs, partitions, aiokafka batch appends
with the source header), and `Engine.feed_records` of the same batch. Prints the median and
spread of each in microseconds per record. No broker is needed.

    .venv/bin/python bench/repartition_stage.py [--records 10000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from aiokafka import TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder
from prometheus_client import CollectorRegistry

from rankwatch import Catalog, Engine, EngineConfig
from rankwatch.daemon.repartition import Repartitioner, _append
from rankwatch.engine import Decoder
from rankwatch.settings.run import DaemonConfig

LINES = [
    "[rank{r}]:[I1130 12:00:{s:02d}.700665355 ProcessGroupNCCL.cpp:1012] [PG ID 0] init",
    "iteration {s} loss 2.{r} lr 3e-4 grad_norm 0.{s}",
    "node-00{n}:33228:33419 [{r}] NCCL INFO Channel 00/0 : {r} -> {s}",
]


@dataclass
class Rec:
    offset: int
    value: bytes
    key: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def records(n: int) -> list[Rec]:
    out = []
    for i in range(n):
        job, rank = f"llm-{i % 8}", i % 16
        line = LINES[i % len(LINES)].format(r=rank, s=i % 60, n=rank // 8)
        value = orjson.dumps(
            {
                "@timestamp": 1796122275.5 + i / 1000,
                "log": line + "\n",
                "stream": "stderr",
                "kubernetes": {
                    "pod_name": f"{job}-worker-{rank}",
                    "host": f"node-{rank // 8:03d}",
                    "labels": {"training.kubeflow.org/job-name": job},
                },
            }
        )
        out.append(Rec(i, value, None, (), 1796122275531 + i))
    return out


def stage_batch(stage: Repartitioner, tp: TopicPartition, batch: list[Rec]) -> None:
    targets = stage._targets(tp, batch, "internal")
    builders: dict[int, BatchBuilder] = {}
    for r, p in zip(batch, targets, strict=True):
        b = builders.get(p)
        if b is None or not _append(b, tp, r):
            b = builders[p] = BatchBuilder(1 << 20, 0)
            _append(b, tp, r)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    batch = records(args.records)
    decoder = Decoder("fluent-bit")
    cfg = DaemonConfig(topic=["logs"], format="fluent-bit", repartition=True)
    stage = Repartitioner(cfg, CollectorRegistry(), {"logs": decoder})
    stage.partitions["internal"] = 12
    tp = TopicPartition("logs", 0)
    values = [r.value for r in batch]
    nones: list[bytes | None] = [None] * len(batch)
    stamps: list[int | None] = [r.timestamp for r in batch]

    def jobs() -> None:
        decoder.jobs(values, nones, nones)

    def stage_all() -> None:
        stage_batch(stage, tp, batch)

    def analysis() -> None:
        engine = Engine(Catalog(), EngineConfig())
        engine.feed_records(decoder, "logs/0", values, nones, nones, stamps)

    cases: dict[str, Callable[[], None]] = {
        "Decoder.jobs": jobs,
        "stage (jobs, partitions, batch appends)": stage_all,
        "analysis feed_records": analysis,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - t0) / len(batch) * 1e6)
    for name, ts in times.items():
        print(
            f"{name:42s} median {statistics.median(ts):6.2f} us/record "
            f"(min {min(ts):.2f}, max {max(ts):.2f}, {args.rounds} rounds of {len(batch):,})"
        )


if __name__ == "__main__":
    main()
