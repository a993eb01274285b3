"""Stream order: the daemon's way in (Kafka records, `Engine.feed_records`) and `analyze`'s
(files) name the same root cause on every generated scenario, whatever times the records carry.

A daemon sees each process's lines in the order they were written (a shipper reads a file in
order and Kafka keeps a partition's order), but the times on the records are ingest times: a
shipper's collection time on its host's clock, an aggregator's or broker's clock, or only the
broker's time of arrival. They disagree with the times printed on the lines by the host's
clock skew, by the shipper's batching and by the network. Files give `analyze` the same lines
in the same order with no ingest time at all. The two must agree on the root-cause line, its
rank and host: within one process the order of the stream decides which line came first;
across processes, skew-corrected event time does.

How records reach the broker here (`records`):
  * replay: what `rankwatch replay` sends; files interleaved line by line, `ts` null, broker
    time = now (days after the lines were printed);
  * shipper: each file read every second (Fluent Bit's refresh), `ts` = collection time on the
    host's clock, broker time = arrival on the true clock, the failing host's lines last;
  * broker: the same arrival, `ts` = arrival on the true clock (an aggregator stamps records);
  * behind: the same, but the aggregator's clock runs 3 s behind the true one, so every
    record looks older than the line it carries;
  * reread: a shipper that read the files from the head once the job was over: `ts` and
    broker time = now, files interleaved as replay does;
  * spread: the shipper's records without a key, spread over four partitions in the
    producer's sticky batches and merged again by the repartition stage batch by batch, so
    a file's lines arrive out of order between batches (decoded as the daemon decodes a
    repartitioned topic: by the records' times where lines print none).
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from conftest import analyze_dir
from daemon_fixtures import Daemon, read_topic, wait_settled
from rankwatch import Catalog, Engine
from rankwatch.engine import Decoder, Diagnosis
from rankwatch.kafka.replay import canonical_record, interleave, new_producer, stream_names
from rankwatch.local import discover
from rankwatch.simulate import fleetgen

MODELS = ("replay", "shipper", "broker", "behind", "reread", "spread")
SHIPPER_REFRESH_S = 1.0
AGGREGATOR_BEHIND_S = 3.0
GPUS_PER_NODE = 8  # fleetgen's default
# Records fed per call and wall time between polls, as the daemon's loop does.
BATCH = 500


@dataclass
class Fleet:
    job: str
    truth: Any
    root: Path
    line_times: dict[str, list[float]]


def make_fleet(
    root: Path, scenario: str, layout: str, seed: int, skew_s: float, job: str = "j"
) -> Fleet:
    times: dict[str, list[float]] = {}
    truth = fleetgen.generate(
        scenario, root, ranks=64, layout=layout, skew_s=skew_s, seed=seed, job=job,
        line_times=times,
    )  # fmt: skip
    return Fleet(job, truth, root, times)


Record = tuple[bytes, int]  # value, broker time (ms)


def records(fleet: Fleet, model: str, seed: int) -> list[Record]:
    """Every non-blank line of the fleet as a canonical record, in the order the broker got
    them, with the broker's timestamp (see the module's docstring)."""
    files, _ = discover([fleet.root], job=fleet.job)
    sources = dict(zip((id(f) for f in files), stream_names(files), strict=True))
    if model in ("replay", "reread"):
        now = int(time.time() * 1000)
        out = []
        for n, (f, line) in enumerate(interleave(files)):
            stamp = now + n // 100
            value = canonical_record(f, line, sources[id(f)])
            if model == "reread":  # the shipper's `ts`: when it read the line, now
                value = orjson.dumps({**orjson.loads(value), "ts": stamp})
            out.append((value, stamp))
        return out
    if model == "spread":
        return spread(records(fleet, "shipper", seed), seed)
    rng = random.Random(f"{model}:{seed}")
    offsets = fleet.truth.host_offsets_s
    culprit = (fleet.truth.root_cause or {}).get("host")
    slowest = max(offsets.values(), default=0.0) + 2.0
    hosts = list(offsets)  # in node order: rank r runs on hosts[r // GPUS_PER_NODE]
    timed: list[tuple[float, int, int, bytes]] = []
    for k, f in enumerate(files):
        rel = f.path.relative_to(fleet.root).as_posix()
        host = next((h for h in hosts if h in rel), None)
        if host is None and f.rank is not None:
            host = hosts[f.rank // GPUS_PER_NODE]
        offset = offsets.get(host, 0.0) if host else 0.0
        # The failing host's shipper is the slowest: its lines reach Kafka last.
        lag = slowest if host is not None and host == culprit else rng.uniform(0.05, 1.5)
        phase = rng.uniform(0.0, SHIPPER_REFRESH_S)
        lines = f.path.read_text(encoding="utf-8").split("\n")[:-1]
        for n, (line, t) in enumerate(zip(lines, fleet.line_times[rel], strict=True)):
            if not line.strip():
                continue
            read = math.ceil((t - phase) / SHIPPER_REFRESH_S) * SHIPPER_REFRESH_S + phase
            arrival = read + lag
            ts = {
                "shipper": read + offset,
                "broker": arrival,
                "behind": arrival - AGGREGATOR_BEHIND_S,
            }[model]
            value = {
                "job": f.job,
                "rank": f.rank,
                "host": None,
                "ts": fleetgen.START_MS + round(ts * 1000),
                "line": line,
                "source": sources[id(f)],
            }
            timed.append((arrival, k, n, orjson.dumps(value)))
    timed.sort(key=lambda r: (r[0], r[1], r[2]))
    return [(value, fleetgen.START_MS + round(a * 1000)) for a, _, _, value in timed]


def spread(recs: list[Record], seed: int, partitions: int = 4) -> list[Record]:
    """`recs` as the repartition stage hands them on: sent without a key in sticky batches
    to random partitions, then read partition by partition, a fetch at a time."""
    rng = random.Random(f"spread:{seed}")
    parts: list[list[Record]] = [[] for _ in range(partitions)]
    i = 0
    while i < len(recs):
        k = rng.randint(20, 200)
        parts[rng.randrange(partitions)].extend(recs[i : i + k])
        i += k
    out: list[Record] = []
    pos = [0] * partitions
    while any(pos[p] < len(parts[p]) for p in range(partitions)):
        for p in rng.sample(range(partitions), partitions):
            n = rng.randint(100, 1000)
            out.extend(parts[p][pos[p] : pos[p] + n])
            pos[p] += n
    return out


def feed_like_the_daemon(
    catalog: Catalog, recs: list[Record], in_order: bool = True
) -> list[Diagnosis]:
    """The records through `Engine.feed_records` in batches, polled between batches with the
    broker time as the wall clock; the last version of each diagnosis id. `in_order=False`
    decodes them as the daemon decodes a repartitioned topic."""
    engine = Engine(catalog)
    decoder = Decoder(in_order=in_order)
    latest: dict[str, Diagnosis] = {}
    for i in range(0, len(recs), BATCH):
        part = recs[i : i + BATCH]
        n = len(part)
        values = [v for v, _ in part]
        stamps: list[int | None] = [t for _, t in part]
        keys: list[bytes | None] = [b"j"] * n
        rejected = engine.feed_records(decoder, "logs/0", values, keys, [None] * n, stamps)
        assert not rejected
        for d in engine.poll(part[-1][1]):
            latest[d["id"]] = d
    for d in engine.finish():
        latest[d["id"]] = d
    return sorted(latest.values(), key=lambda d: (-float(d["confidence"]), d["id"]))


def root(diagnoses: list[Diagnosis]) -> list[tuple[Any, ...]]:
    return [
        (d["root_cause"]["rank"], d["root_cause"]["host"], d["root_cause"]["line"],
         d["signature"]["id"])
        for d in diagnoses
    ]  # fmt: skip


def agreement(
    tmp_path: Path, catalog: Catalog, scenario: str, layout: str, seed: int, skew_s: float
) -> dict[str, str]:
    """For each model, what differs between the records' diagnoses and analyze's ('' when
    they agree)."""
    fleet = make_fleet(tmp_path / "job", scenario, layout, seed, skew_s)
    analyzed, _ = analyze_dir(fleet.root, catalog)
    want = root(analyzed)
    out = {}
    for model in MODELS:
        recs = records(fleet, model, seed)
        got = root(feed_like_the_daemon(catalog, recs, in_order=model != "spread"))
        out[model] = "" if got == want else f"records {got}\n    analyze {want}"
    return out


@pytest.mark.parametrize("layout", fleetgen.LAYOUTS)
@pytest.mark.parametrize("scenario", fleetgen.SCENARIOS)
def test_records_and_files_agree_when_the_failing_host_runs_behind(
    scenario: str, layout: str, tmp_path: Path, catalog: Catalog
) -> None:
    # Even seeds put the failing host's clock 60-100% of the skew behind: 1.2-2 s here.
    diffs = agreement(tmp_path, catalog, scenario, layout, seed=2, skew_s=2.0)
    bad = {m: d for m, d in diffs.items() if d}
    assert not bad, "\n".join(f"{scenario} {layout} {m}:\n    {d}" for m, d in bad.items())


@pytest.mark.parametrize("scenario", [s for s in fleetgen.SCENARIOS if s != "healthy"])
def test_records_and_files_agree_with_wide_skew(
    scenario: str, tmp_path: Path, catalog: Catalog
) -> None:
    # Odd seeds draw the failing host's offset anywhere in ±5 s, ahead as well as behind.
    diffs = agreement(tmp_path, catalog, scenario, "per-node", seed=7, skew_s=5.0)
    bad = {m: d for m, d in diffs.items() if d}
    assert not bad, "\n".join(f"{scenario} {m}:\n    {d}" for m, d in bad.items())


def produce_timed(bootstrap: str, topic: str, key: bytes, recs: list[Record]) -> None:
    """Sends the records in order, each with its broker time as its Kafka timestamp."""

    async def send() -> None:
        producer = new_producer({"bootstrap_servers": bootstrap})
        await producer.start()
        try:
            pending = []
            for value, ts in recs:
                pending.append(await producer.send(topic, value, key=key, timestamp_ms=ts))
                if len(pending) >= 2000:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
        finally:
            await producer.stop()

    asyncio.run(send())


# The failing host's clock runs behind (even seed); records read long after the lines were
# printed, and records stamped by an aggregator whose clock runs behind the true one.
DAEMON_CASES = [("xid79", "reread"), ("cuda_error", "behind"), ("ib_link_down", "reread")]


def test_the_daemon_agrees_with_analyze_on_skewed_records(
    tmp_path: Path,
    catalog: Catalog,
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 1)
    want: dict[str, list[tuple[Any, ...]]] = {}
    for scenario, model in DAEMON_CASES:
        job = f"{scenario}-{model}"
        fleet = make_fleet(tmp_path / job, scenario, "per-node", 2, 2.0, job=job)
        analyzed, _ = analyze_dir(fleet.root, catalog)
        want[job] = root(analyzed)
        assert want[job], f"{job}: analyze found nothing"
        produce_timed(daemon_kafka, logs, job.encode(), records(fleet, model, 2))
    group = f"g-{uuid.uuid4().hex[:8]}"
    # The records' broker times are those of the generated job (days ago): read them all.
    settings = {"topic": [logs], "output_topic": out, "group_id": group}
    d = daemon_factory("a", initial_offset="earliest", **settings).start()
    wait_settled(daemon_kafka, [logs], group, [d])
    latest: dict[str, Diagnosis] = {}
    for r in read_topic(daemon_kafka, out):
        doc = r.json()
        latest[doc["id"]] = doc
    got: dict[str, list[tuple[Any, ...]]] = {}
    for doc in sorted(latest.values(), key=lambda d: (-float(d["confidence"]), d["id"])):
        got.setdefault(doc["job"], []).extend(root([doc]))
    assert got == want
    assert d.stop() == 0
