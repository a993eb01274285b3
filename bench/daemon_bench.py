"""End-to-end benchmark of `rankwatch run` against the dev broker, in one run:

1. Kafka's own Java `ConsumerPerformance` on the input topic (the broker's ceiling);
2. aiokafka consuming the same topic and discarding every record (the client's ceiling);
3. `rankwatch run` (a subprocess, default settings) consuming the same topic end to end:
   decode, scan, correlate, publish, commit;
4. latency from a root-cause line's produce time to its diagnosis on the output topic, while a
   background producer keeps loading the input topic.

The input is fleetgen logs (rankwatch.simulate): healthy jobs plus a few failing ones, copied
under new job names up to `--records`, as canonical records keyed by job (what
`rankwatch replay` sends). Prints a markdown table (and `--json` writes the numbers).

    python bench/daemon_bench.py                      # fresh broker on 127.0.0.1:19392
    python bench/daemon_bench.py --records 300000 --latency-samples 10
    python bench/daemon_bench.py --before-python ../main/.venv/bin/python --daemons 1 --daemons 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from rankwatch.kafka.replay import BatchSender, canonical_record, interleave, new_producer  # noqa: E402
from rankwatch.local import discover  # noqa: E402
from rankwatch.simulate import fleetgen  # noqa: E402

KAFKA = ROOT / "deploy" / "kafka"
HEALTHY = ["healthy", "healthy_noisy"]
FAILING = ["cuda_error", "ib_link_down", "xid79", "desync", "cuda_oom", "shm_full", "oom_kill"]


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# --- corpus ---------------------------------------------------------------------------------


@dataclass
class Job:
    name: str
    scenario: str
    records: list[bytes]  # canonical record values, interleaved like `rankwatch replay`
    lines: list[bytes]
    truth: Any


def make_jobs(root: Path, specs: list[tuple[str, int]], ranks: int) -> list[Job]:
    jobs = []
    for scenario, seed in specs:
        name = f"{scenario.replace('_', '-')}-{seed}"
        truth = fleetgen.generate(scenario, root / name, ranks=ranks, seed=seed, job=name)
        files, _ = discover([root / name])
        pairs = list(interleave(files))
        jobs.append(
            Job(
                name,
                scenario,
                [canonical_record(f, line) for f, line in pairs],
                [line for _, line in pairs],
                truth,
            )
        )
    return jobs


def renamed(job: Job, new_name: str) -> list[bytes]:
    """The job's records under another job name (same lines, a different job to the engine)."""
    old = orjson.dumps(job.name)
    new = orjson.dumps(new_name)
    return [r.replace(b'"job":' + old, b'"job":' + new, 1) for r in job.records]


# --- Kafka helpers --------------------------------------------------------------------------


def dev_broker(port: int) -> str:
    out = subprocess.run(
        [str(KAFKA / "dev-broker"), "start", "--port", str(port), "--fresh"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


async def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name=t, num_partitions=n, replication_factor=1) for t, n in topics.items()]
        )
        while True:
            described = await admin.describe_topics(list(topics))
            if all(d["error_code"] == 0 and d["partitions"] for d in described):
                return
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, batches: list[tuple[str, list[bytes]]]) -> int:
    producer = new_producer({"bootstrap_servers": bootstrap})
    await producer.start()
    try:
        sender = BatchSender(producer, topic, sorted(await producer.partitions_for(topic)))
        for job, records in batches:
            key = job.encode()
            for value in records:
                await sender.add(key, value)
        await sender.flush()
        return sender.bytes
    finally:
        await producer.stop()


async def aiokafka_discard(bootstrap: str, topic: str, total: int) -> tuple[float, float]:
    """Reads `total` records with the daemon's consumer settings, discarding them. Returns
    the seconds and the CPU seconds of this process over the same span."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 << 20,
        fetch_max_wait_ms=100,
    )
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        tps = [TopicPartition(topic, p) for p in sorted(cluster.partitions_for_topic(topic))]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        n = nbytes = 0
        t0 = cpu0 = 0.0
        while n < total:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            if not t0 and batch:
                t0, cpu0 = time.perf_counter(), time.process_time()
            for records in batch.values():
                n += len(records)
                nbytes += sum(len(r.value) for r in records)
        return time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        await consumer.stop()


def consumer_perf(bootstrap: str, topic: str, total: int) -> dict[str, float]:
    out = subprocess.run(
        [
            str(KAFKA / "kafka-class"),
            "consumer-perf",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(total),
            "--group",
            f"perf-{os.getpid()}",
            "--timeout",
            "60000",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    header = [h.strip() for h in lines[0].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    row = dict(zip(header, values, strict=False))
    return {
        "records_per_s": float(row["nMsg.sec"]),
        "mb_per_s": float(row["MB.sec"]),
        "fetch_records_per_s": float(row.get("fetch.nMsg.sec", row["nMsg.sec"])),
        "fetch_mb_per_s": float(row.get("fetch.MB.sec", row["MB.sec"])),
    }


# --- the daemon -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_SAMPLE = re.compile(r"^(rankwatch_[a-z_]+(?:\{[^}]*\})?) (\S+)$", re.M)


@dataclass
class DaemonProc:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def metrics(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        return {m.group(1): float(m.group(2)) for m in _SAMPLE.finditer(text)}


def start_daemon(
    bootstrap: str,
    topic: str,
    out: str,
    workdir: Path,
    extra: list[str],
    *,
    python: str = sys.executable,
    group: str = "",
    name: str = "daemon",
) -> DaemonProc:
    """`rankwatch run` under `python` (another checkout's venv runs that checkout's build)."""
    port = free_port()
    log_path = workdir / f"{name}.log"
    cmd = [
        python,
        "-m",
        "rankwatch.cli",
        "run",
        "--bootstrap-servers",
        bootstrap,
        *(["--topic", topic] if topic else []),
        "--output-topic",
        out,
        "--group-id",
        group or f"bench-{os.getpid()}",
        "--initial-offset",
        "earliest",
        "--metrics-addr",
        f"127.0.0.1:{port}",
        *extra,
    ]
    with open(log_path, "wb") as fh:
        # run from the work folder, so that `-m` imports the interpreter's own rankwatch
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=workdir)
    return DaemonProc(proc, port, log_path)


SCRAPE_S = 0.25  # a scrape renders the whole registry on the daemon's GIL: not too often


def measure_daemons(
    daemons: list[DaemonProc], total: int, partitions: int
) -> tuple[float, dict[str, float]]:
    """Seconds per `total` records, measured from the first sample at which the daemons hold
    every partition between them (after the group settled) to the batch that completes
    `total` records; the rate over that window is scaled to `total`. Returns it with the
    summed metrics of the last sample."""
    t_start = n_start = cpu_start = 0.0
    while True:
        for d in daemons:
            if d.proc.poll() is not None:
                raise SystemExit(f"daemon exited: {d.log_path.read_text()[-3000:]}")
        samples = [d.metrics() for d in daemons]
        now = time.time()
        n = sum(m.get("rankwatch_records_in_total", 0.0) for m in samples)
        held = sum(m.get("rankwatch_partitions_assigned", 0.0) for m in samples)
        if not t_start and n > 0 and held >= partitions and all(samples):
            t_start, n_start = now, n
            cpu_start = sum(_cpu_seconds(d.proc.pid) for d in daemons)
            threads_start = [_thread_cpu(d.proc.pid) for d in daemons]
        if n >= total and t_start:
            t_last = max(m.get("rankwatch_last_batch_timestamp_seconds", 0.0) for m in samples)
            seconds = max(t_last - t_start, 1e-3) * total / max(total - n_start, 1)
            summed: dict[str, float] = {}
            for m in samples:
                for k, v in m.items():
                    summed[k] = summed.get(k, 0.0) + v
            cpu = sum(_cpu_seconds(d.proc.pid) for d in daemons) - cpu_start
            per_record = 1e6 / max(n - n_start, 1)
            summed["bench_cpu_us_per_record"] = cpu * per_record
            loop, other, busiest = _thread_split(daemons, threads_start)
            summed["bench_loop_us_per_record"] = loop * per_record
            summed["bench_other_us_per_record"] = other * per_record
            summed["bench_busiest_other_us_per_record"] = busiest * per_record
            summed["bench_window_s"] = t_last - t_start
            return seconds, summed
        time.sleep(SCRAPE_S)


# --- latency --------------------------------------------------------------------------------


@dataclass
class Latency:
    first: list[float] = field(default_factory=list)  # root-cause line -> first diagnosis
    correct: list[float] = field(default_factory=list)  # -> diagnosis naming the truth line
    by_scenario: dict[str, list[float]] = field(default_factory=dict)  # correct, per scenario


async def latency_run(
    bootstrap: str,
    topic: str,
    out: str,
    background: list[Job],
    failing: list[Job],
    samples: int,
    rate: float,
    tag: str,
) -> tuple[Latency, int]:
    producer = new_producer({"bootstrap_servers": bootstrap})
    await producer.start()
    partitions = sorted(await producer.partitions_for(topic))
    watcher = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="latest")
    await watcher.start()
    cluster = await watcher._client.fetch_all_metadata()
    out_tps = [TopicPartition(out, p) for p in sorted(cluster.partitions_for_topic(out))]
    watcher.assign(out_tps)
    await watcher.seek_to_end(*out_tps)
    for tp in out_tps:
        await watcher.position(tp)

    stop = asyncio.Event()
    sent_bg = 0

    async def load() -> None:  # background: healthy jobs at `rate` records/s
        nonlocal sent_bg
        sender = BatchSender(producer, topic, partitions)
        t0 = time.monotonic()
        i = 0
        while not stop.is_set():
            job = background[i % len(background)]
            name = f"bg-live-{tag}-{i}"
            for value in renamed(job, name):
                await sender.add(name.encode(), value)
                sent_bg += 1
                if sent_bg % 500 == 0:
                    await sender.flush()
                    ahead = sent_bg / rate - (time.monotonic() - t0)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
                if stop.is_set():
                    break
            i += 1
        await sender.flush()

    seen: dict[str, tuple[float, bool]] = {}  # job -> first arrival, correct yet
    want: dict[str, tuple[bytes, float, str]] = {}  # job -> truth line, produce time, scenario
    result = Latency()

    async def watch() -> None:
        while not stop.is_set():
            batch = await watcher.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    d = orjson.loads(r.value)
                    job = d["job"]
                    if job not in want:
                        continue
                    line, t_sent, scenario = want[job]
                    if job not in seen:
                        seen[job] = (now, False)
                        result.first.append(now - t_sent)
                    if (
                        not seen[job][1]
                        and str((d.get("root_cause") or {}).get("line")).encode() == line
                    ):
                        seen[job] = (seen[job][0], True)
                        result.correct.append(now - t_sent)
                        result.by_scenario.setdefault(scenario, []).append(now - t_sent)

    bg = asyncio.create_task(load())
    wt = asyncio.create_task(watch())
    await asyncio.sleep(2.0)  # background load running
    sender = BatchSender(producer, topic, partitions)
    for i in range(samples):
        job = failing[i % len(failing)]
        name = f"lat-{tag}-{i}-{job.name}"
        truth_line = job.truth.root_cause["line"].encode()
        key = name.encode()
        t_sent = 0.0
        for value, line in zip(renamed(job, name), job.lines, strict=True):
            if line == truth_line and not t_sent:
                await sender.flush()
                t_sent = time.time()
                await sender.add(key, value)
                await sender.flush()
                want[name] = (truth_line, t_sent, job.scenario)
            else:
                await sender.add(key, value)
        await sender.flush()
        deadline = time.monotonic() + 60
        while not (name in seen and seen[name][1]) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if name not in seen or not seen[name][1]:
            log(f"latency sample {name}: no correct diagnosis within 60 s")
    stop.set()
    await asyncio.gather(bg, wt)
    await watcher.stop()
    await producer.stop()
    return result, sent_bg


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, round(q * (len(v) - 1)))]


# --- the storm (issue 24) -------------------------------------------------------------------
#
# Records as Fluent Bit and Vector deliver them: every record carries an ISO-8601 `ts` of
# ingest, the `host` and the `rank`; half of the jobs come in the canonical shape (a shipper
# set up to write it), a quarter in Fluent Bit's own shape and a quarter in Vector's, each
# shape on its own topic read with that format's preset (plus `rank_path = ["rank"]`). All
# topics are keyed by job. The storm: a job of `--storm-ranks` ranks (16,384) fails, and every
# rank prints its error chain (the job's lines from `--storm-lead-s` before the root-cause
# line on), among healthy jobs; the healthy row has the same number of healthy records.

SHAPES = ("canonical", "fluent-bit", "vector")


def iso_ms(ms: int) -> str:
    s, frac = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{frac:03d}Z"


def shipper_record(
    shape: str, job: str, rank: int | None, host: str, ts_ms: int, line: str
) -> bytes:
    """One line as its shipper sends it; a launcher's line (no rank) names its node's pod."""
    pod = f"{job}-worker-{rank}" if rank is not None else f"{job}-launcher-{host}"
    ts = iso_ms(ts_ms)
    if shape == "fluent-bit":
        return orjson.dumps(
            {
                "@timestamp": ts,
                "log": line + "\n",
                "stream": "stderr",
                "rank": rank,
                "kubernetes": {
                    "pod_name": pod,
                    "namespace_name": "training",
                    "host": host,
                    "labels": {"training.kubeflow.org/job-name": job},
                },
            }
        )
    if shape == "vector":
        return orjson.dumps(
            {
                "message": line,
                "timestamp": ts,
                "source_type": "kubernetes_logs",
                "stream": "stderr",
                "rank": rank,
                "kubernetes": {
                    "pod_name": pod,
                    "pod_namespace": "training",
                    "pod_node_name": host,
                    "pod_labels": {"training.kubeflow.org/job-name": job},
                },
            }
        )
    return orjson.dumps(
        {"job": job, "rank": rank, "host": host, "ts": ts, "line": line, "source": pod}
    )


@dataclass
class TimedJob:
    """A generated job as (seconds after fleetgen.START_MS, rank, host, line), in time order."""

    scenario: str
    lines: list[tuple[float, int | None, str, str]]
    truth: Any


def timed_job(root: Path, scenario: str, ranks: int, seed: int, steps: int) -> TimedJob:
    times: dict[str, list[float]] = {}
    out = root / f"{scenario}-{ranks}-{seed}"
    truth = fleetgen.generate(
        scenario, out, ranks=ranks, seed=seed, steps=steps, layout="per-rank", line_times=times
    )
    hosts = sorted(truth.host_offsets_s)
    per_node = -(-ranks // len(hosts))
    lines: list[tuple[float, int | None, str, str]] = []
    for name, ts in times.items():
        text = (out / name).read_text(encoding="utf-8", errors="replace").splitlines()
        stem = name.removesuffix(".log")
        if stem.startswith("rank-"):
            rank: int | None = int(stem.removeprefix("rank-"))
            host = hosts[rank // per_node]
        else:  # a node's launcher (torchrun agent): no rank, its own stream
            rank, host = None, next(h for h in hosts if stem.endswith(h))
        lines += [(t, rank, host, line) for t, line in zip(ts, text, strict=True)]
    lines.sort(key=lambda x: x[0])
    shutil.rmtree(out)
    return TimedJob(scenario, lines, truth)


def storm_window(job: TimedJob, lead_s: float) -> list[tuple[float, int | None, str, str]]:
    """The job's lines from `lead_s` before its root-cause line on: every rank's error chain."""
    rc = job.truth.root_cause
    t_rc = next(t for t, r, _, line in job.lines if r == rc["rank"] and line == rc["line"])
    return [x for x in job.lines if x[0] >= t_rc - lead_s]


@dataclass
class Traffic:
    """Records in produce order: (topic, key, value), and the root-cause line's index."""

    records: list[tuple[str, bytes, bytes]]
    jobs: int
    storm_records: int


def build_traffic(
    topics: dict[str, str],
    healthy: list[TimedJob],
    total: int,
    storm: TimedJob | None,
    storm_lines: list[tuple[float, int | None, str, str]],
    tag: str,
    seed: int = 7,
) -> Traffic:
    """`total` records: the storm's lines (if any) and renamed copies of healthy jobs, each job
    in one shape (storm: `topics['storm']`), merged by ingest time (a shipper sends a line
    0-300 ms after it was written)."""
    import random

    rng = random.Random(seed)
    timed: list[tuple[int, str, bytes, bytes]] = []
    span_s = 60.0
    if storm is not None and storm_lines:
        name = f"storm-{tag}"
        shape = next(s for s in SHAPES if topics[s] == topics["storm"])
        t0 = storm_lines[0][0]
        span_s = max(storm_lines[-1][0] - t0, 1.0)
        for t, rank, host, line in storm_lines[:total]:
            ms = fleetgen.START_MS + int(t * 1000) + rng.randint(0, 300)
            timed.append(
                (ms, shape, name.encode(), shipper_record(shape, name, rank, host, ms, line))
            )
        base_s = t0
    else:
        base_s = 0.0
    i = 0
    shapes = ["canonical", "canonical", "fluent-bit", "vector"]
    while len(timed) < total:
        src = healthy[i % len(healthy)]
        name = f"healthy-{tag}-{i:05d}"
        shape = shapes[i % len(shapes)]
        # healthy jobs run through the whole window, each started at its own moment
        start = base_s + rng.uniform(-src.lines[-1][0], span_s)
        for t, rank, host, line in src.lines:
            if len(timed) >= total:
                break
            ms = fleetgen.START_MS + int((start + t) * 1000) + rng.randint(0, 300)
            timed.append(
                (ms, shape, name.encode(), shipper_record(shape, name, rank, host, ms, line))
            )
        i += 1
    timed.sort(key=lambda x: x[0])
    n_storm = min(len(storm_lines), total) if storm is not None else 0
    return Traffic([(topics[s], k, v) for _, s, k, v in timed], i + (storm is not None), n_storm)


def topic_names(prefix: str) -> dict[str, str]:
    return {s: f"{prefix}.{s}" for s in SHAPES}


def storm_config(path: Path, topics: dict[str, str]) -> Path:
    """The daemon's config: one table per topic, its shipper's preset and the rank's field."""
    lines = []
    for shape, topic in topics.items():
        lines += [f'[topics."{topic}"]', f'format = "{shape}"', 'rank_path = ["rank"]', ""]
    path.write_text("\n".join(lines))
    return path


async def produce_many(bootstrap: str, records: list[tuple[str, bytes, bytes]]) -> int:
    producer = new_producer({"bootstrap_servers": bootstrap})
    await producer.start()
    try:
        senders: dict[str, BatchSender] = {}
        for topic in dict.fromkeys(t for t, _, _ in records):
            senders[topic] = BatchSender(
                producer, topic, sorted(await producer.partitions_for(topic))
            )
        for topic, key, value in records:
            await senders[topic].add(key, value)
        total = 0
        for s in senders.values():
            await s.flush()
            total += s.bytes
        return total
    finally:
        await producer.stop()


async def tuned_discard(bootstrap: str, topics: list[str], total: int) -> dict[str, float]:
    """aiokafka as a group member with fetch sizes tuned for throughput (8 MiB per partition,
    64 MiB per fetch): start, join, read `total` records and discard them, commit. Returns
    steady-state seconds (first record taken to last record taken) and end-to-end seconds
    (construction to the commit's answer)."""
    t_start = time.perf_counter()
    consumer = AIOKafkaConsumer(
        *topics,
        bootstrap_servers=bootstrap,
        group_id=f"discard-{os.getpid()}-{time.monotonic_ns()}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=64 << 20,
    )
    await consumer.start()
    try:
        n = 0
        t0 = t1 = 0.0
        cpu0 = 0.0
        while n < total:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            if batch and not t0:
                t0, cpu0 = time.perf_counter(), time.process_time()
            for records in batch.values():
                n += len(records)
            if batch:
                t1 = time.perf_counter()
        cpu = time.process_time() - cpu0
        await consumer.commit()
        t_end = time.perf_counter()
    finally:
        await consumer.stop()
    return {
        "steady_s": t1 - t0,
        "e2e_s": t_end - t_start,
        "cpu_us_per_record": cpu / max(n, 1) * 1e6,
    }


async def committed_all(bootstrap: str, group: str, ends: dict[TopicPartition, int]) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return all(
        (offsets.get(tp) is not None and offsets[tp].offset >= end) for tp, end in ends.items()
    )


async def end_offsets(bootstrap: str, topics: list[str]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        cluster = await consumer._client.fetch_all_metadata()
        tps = [TopicPartition(t, p) for t in topics for p in cluster.partitions_for_topic(t)]
        ends: dict[TopicPartition, int] = await consumer.end_offsets(tps)
        return {tp: e for tp, e in ends.items() if e > 0}
    finally:
        await consumer.stop()


def storm_daemon_round(
    bootstrap: str,
    config: Path,
    topics: list[str],
    out: str,
    work: Path,
    total: int,
    partitions: int,
    python: str,
    name: str,
    extra: list[str],
) -> dict[str, float]:
    """One `rankwatch run` over the backlog: steady state from the metrics (as
    `measure_daemons`), end to end from the process start to the commit of every offset."""
    group = f"storm-{os.getpid()}-{name}"
    ends = asyncio.run(end_offsets(bootstrap, topics))
    t_start = time.time()
    d = start_daemon(
        bootstrap,
        "",
        out,
        work,
        ["--config", str(config), *extra],
        python=python,
        group=group,
        name=name,
    )
    try:
        secs, m = measure_daemons([d], total, partitions)
        while not asyncio.run(committed_all(bootstrap, group, ends)):
            if d.proc.poll() is not None:
                raise SystemExit(f"daemon exited: {d.log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        e2e = time.time() - t_start
        peak = _peak_rss(d.proc.pid)
        # The storm's diagnosis settles after the last record is taken; the commit of every
        # offset waits for it, so only now are the diagnosis counters final.
        done = d.metrics()
    finally:
        d.stop()
    return {
        "steady_s": secs,
        "e2e_s": e2e,
        "cpu_us_per_record": m["bench_cpu_us_per_record"],
        "loop_us_per_record": m["bench_loop_us_per_record"],
        "engine_us_per_record": m["bench_busiest_other_us_per_record"],
        "diagnoses": done.get('rankwatch_diagnoses_out_total{kind="new"}', 0),
        "updates": done.get('rankwatch_diagnoses_out_total{kind="update"}', 0),
        # Rounds share the output topic: a diagnosis an earlier round published is not sent
        # again (its id is the same), which is counted here.
        "already_published": sum(
            v for k, v in done.items() if k.startswith("rankwatch_diagnoses_skipped_total")
        ),
        "engine_memory_bytes": m.get("rankwatch_ring_memory_bytes", 0),
        "memory_budget_bytes": m.get("rankwatch_memory_budget_bytes", 0),
        "peak_rss_bytes": peak,
        "records_per_batch": total / max(m.get("rankwatch_batch_duration_seconds_count", 0), 1),
    }


def _peak_rss(pid: int) -> float:
    return _status_kib(pid, "VmHWM:")


def _current_rss(pid: int) -> float:
    return _status_kib(pid, "VmRSS:")


def _status_kib(pid: int, key: str) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return float("nan")


async def storm_latency_run(
    bootstrap: str,
    topics: dict[str, str],
    out: str,
    storm: list[tuple[str, bytes, bytes]],
    failing: list[Job],
    samples: int,
    rate: float,
    tag: str,
) -> tuple[Latency, float]:
    """Sends the storm (at `rate` records/s, 0: as fast as the producer goes) and, spread over
    it, `samples` small failing jobs (canonical records on the canonical topic); times each
    root-cause line's produce to the first diagnosis of its job on the output topic."""
    producer = new_producer({"bootstrap_servers": bootstrap})
    await producer.start()
    watcher = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await watcher.start()
    cluster = await watcher._client.fetch_all_metadata()
    out_tps = [TopicPartition(out, p) for p in sorted(cluster.partitions_for_topic(out))]
    watcher.assign(out_tps)
    await watcher.seek_to_end(*out_tps)
    for tp in out_tps:
        await watcher.position(tp)
    senders = {
        t: BatchSender(producer, t, sorted(await producer.partitions_for(t)))
        for t in topics.values()
    }
    want: dict[str, tuple[bytes, float, str]] = {}
    seen: dict[str, bool] = {}
    result = Latency()
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            batch = await watcher.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    d = orjson.loads(r.value)
                    job = d["job"]
                    if job not in want:
                        continue
                    line, t_sent, scenario = want[job]
                    if job not in seen:
                        seen[job] = False
                        result.first.append(now - t_sent)
                    if (
                        not seen[job]
                        and str((d.get("root_cause") or {}).get("line")).encode() == line
                    ):
                        seen[job] = True
                        result.correct.append(now - t_sent)
                        result.by_scenario.setdefault(scenario, []).append(now - t_sent)

    wt = asyncio.create_task(watch())
    every = max(1, len(storm) // (samples + 1))
    t0 = time.monotonic()
    sample = 0
    canonical = senders[topics["canonical"]]
    for i, (topic, key, value) in enumerate(storm):
        await senders[topic].add(key, value)
        if i % 1000 == 999:
            for s in senders.values():
                await s.flush()
            if rate:
                ahead = i / rate - (time.monotonic() - t0)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        if i % every == every - 1 and sample < samples:
            job = failing[sample % len(failing)]
            name = f"lat-{tag}-{sample}-{job.name}"
            truth_line = job.truth.root_cause["line"].encode()
            for value2, line in zip(renamed(job, name), job.lines, strict=True):
                await canonical.add(name.encode(), value2)
                if line == truth_line and name not in want:
                    await canonical.flush()
                    want[name] = (truth_line, time.time(), job.scenario)
            await canonical.flush()
            sample += 1
    for s in senders.values():
        await s.flush()
    sent_s = time.monotonic() - t0
    deadline = time.monotonic() + 120
    while len(seen) < len(want) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    stop.set()
    await wt
    await watcher.stop()
    await producer.stop()
    missing = [j for j in want if j not in seen]
    if missing:
        log(f"storm latency: {len(missing)} sample(s) without a diagnosis within 120 s")
        result.first += [float("inf")] * len(missing)
    return result, len(storm) / sent_s


def storm_main(args: argparse.Namespace) -> int:
    variants = {"this build": sys.executable}
    if args.before_python:
        variants = {"before": args.before_python, **variants}
    bootstrap = dev_broker(args.port)
    log(f"broker {bootstrap}")
    out = "bench.diagnoses"
    rows = {"healthy": topic_names("bench.healthy"), "storm": topic_names("bench.storm")}
    live = topic_names("bench.live")
    all_topics = {t: args.partitions for r in (*rows.values(), live) for t in r.values()}
    asyncio.run(create_topics(bootstrap, {**all_topics, out: 2}))
    results: dict[str, Any] = {"records": args.records, "partitions": args.partitions, "rows": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="rw-storm-") as tmp:
            work = Path(tmp)
            t = time.perf_counter()
            healthy = [timed_job(work, HEALTHY[i % 2], args.ranks, 100 + i, 20) for i in range(4)]
            storm = timed_job(work, args.storm_scenario, args.storm_ranks, 1, 1)
            window = storm_window(storm, args.storm_lead_s)
            failing = make_jobs(work / "failing", [(s, 200 + i) for i, s in enumerate(FAILING)], 16)
            log(
                f"corpus generated in {time.perf_counter() - t:.1f} s; storm job "
                f"{args.storm_ranks} ranks, {len(window):,} lines in its error chain"
            )
            configs: dict[str, Path] = {}
            totals: dict[str, int] = {}
            for row, topics in rows.items():
                traffic = build_traffic(
                    {**topics, "storm": topics[args.storm_shape]},
                    healthy,
                    args.records,
                    storm if row == "storm" else None,
                    window if row == "storm" else [],
                    row,
                )
                t = time.perf_counter()
                nbytes = asyncio.run(produce_many(bootstrap, traffic.records))
                totals[row] = len(traffic.records)
                configs[row] = storm_config(work / f"{row}.toml", topics)
                results["rows"][row] = {
                    "records": len(traffic.records),
                    "storm_records": traffic.storm_records,
                    "jobs": traffic.jobs,
                    "bytes": nbytes,
                    "rounds": [],
                }
                log(
                    f"{row}: loaded {len(traffic.records):,} records ({nbytes / 1e6:.0f} MB, "
                    f"{traffic.jobs} jobs, {traffic.storm_records:,} of the storm job) in "
                    f"{time.perf_counter() - t:.1f} s"
                )
                del traffic
            n_parts = 3 * args.partitions
            for r in range(args.repeats):
                for row, topics in rows.items():
                    n = totals[row]
                    cell: dict[str, Any] = {}
                    aio = asyncio.run(tuned_discard(bootstrap, list(topics.values()), n))
                    cell["aiokafka tuned"] = aio
                    log(
                        f"round {r + 1} {row}: aiokafka {n / aio['steady_s']:,.0f} records/s "
                        f"steady, {aio['e2e_s']:.1f} s end to end"
                    )
                    order = list(variants.items())
                    if r % 2:
                        order.reverse()
                    for name, python in order:
                        c = storm_daemon_round(
                            bootstrap,
                            configs[row],
                            list(topics.values()),
                            out,
                            work,
                            n,
                            n_parts,
                            python,
                            f"{row}-{r}-{name.replace(' ', '-')}",
                            args.daemon_arg,
                        )
                        cell[name] = c
                        log(
                            f"round {r + 1} {row}: {name} {n / c['steady_s']:,.0f} records/s "
                            f"steady ({aio['steady_s'] / c['steady_s']:.2f}x), "
                            f"{c['e2e_s']:.1f} s end to end, "
                            f"{c['diagnoses']:.0f} new + {c['updates']:.0f} updated diagnoses"
                        )
                    results["rows"][row]["rounds"].append(cell)
            if args.latency_samples:
                results["latency"] = {}
                for name, python in variants.items():
                    tag = f"{name.replace(' ', '-')}-{os.getpid()}"
                    traffic = build_traffic(
                        {**live, "storm": live[args.storm_shape]},
                        healthy,
                        args.records,
                        storm,
                        window,
                        f"live-{tag}",
                    )
                    daemon = start_daemon(
                        bootstrap,
                        "",
                        out,
                        work,
                        [
                            "--config",
                            str(storm_config(work / "live.toml", live)),
                            *args.daemon_arg,
                            "--initial-offset",
                            "latest",
                        ],
                        python=python,
                        group=f"storm-latency-{tag}",
                        name=f"daemon-storm-latency-{name.replace(' ', '-')}",
                    )
                    try:
                        wait_assigned(daemon, n_parts)
                        # What the budget bounds is what the traffic adds: Python, the catalog,
                        # Hyperscan and the Kafka client are resident before the first record.
                        baseline = _current_rss(daemon.proc.pid)
                        lat, rate = asyncio.run(
                            storm_latency_run(
                                bootstrap,
                                live,
                                out,
                                traffic.records,
                                failing,
                                args.latency_samples,
                                args.storm_rate,
                                tag,
                            )
                        )
                        peak = _peak_rss(daemon.proc.pid)
                        m = daemon.metrics()
                    finally:
                        daemon.stop()
                    results["latency"][name] = {
                        "storm_records_per_s": rate,
                        "samples": len(lat.first),
                        "first_p50_s": pct(lat.first, 0.5),
                        "first_p99_s": pct(lat.first, 0.99),
                        "correct_p50_s": pct(lat.correct, 0.5),
                        "correct_p99_s": pct(lat.correct, 0.99),
                        "correct_p99_by_scenario_s": {
                            s: pct(v, 0.99) for s, v in sorted(lat.by_scenario.items())
                        },
                        "peak_rss_bytes": peak,
                        "baseline_rss_bytes": baseline,
                        "engine_memory_bytes": m.get("rankwatch_ring_memory_bytes", 0),
                        "memory_budget_bytes": m.get("rankwatch_memory_budget_bytes", 0),
                    }
                    log(f"storm latency {name}: {results['latency'][name]}")
    finally:
        if not args.keep_broker:
            subprocess.run(
                [str(KAFKA / "dev-broker"), "stop", "--port", str(args.port)], check=False
            )
    print(render_storm(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


def render_storm(r: dict[str, Any]) -> str:
    rows = [
        f"{len(next(iter(r['rows'].values()))['rounds'])} rounds; each cell: median "
        "(min-max) over the rounds; ratios are to aiokafka in the same round.",
        "",
        "| traffic | what | steady records/s | ratio | end to end s | ratio | CPU µs/record "
        "| diagnoses new + updated + already published | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row, data in r["rows"].items():
        n = data["records"]
        rounds = data["rounds"]
        names = list(rounds[0])
        aio = [x["aiokafka tuned"] for x in rounds]
        for name in names:
            cells = [x[name] for x in rounds]
            steady = [n / c["steady_s"] for c in cells]
            ratio = [a["steady_s"] / c["steady_s"] for c, a in zip(cells, aio, strict=True)]
            e2e = [c["e2e_s"] for c in cells]
            e2e_ratio = [a["e2e_s"] / c["e2e_s"] for c, a in zip(cells, aio, strict=True)]
            what = (
                "aiokafka consume + discard, tuned"
                if name == "aiokafka tuned"
                else (f"`rankwatch run`, {name}")
            )
            extra = ""
            if name != "aiokafka tuned":
                extra = (
                    f" | {statistics.median(c['diagnoses'] for c in cells):.0f} + "
                    f"{statistics.median(c['updates'] for c in cells):.0f} + "
                    f"{statistics.median(c.get('already_published', 0) for c in cells):.0f} | "
                    f"{statistics.median(c['peak_rss_bytes'] for c in cells) / 1e6:.0f}"
                )
            else:
                extra = " | | "
            rows.append(
                f"| {row} ({n:,} records, {data['storm_records']:,} of the storm job) | {what} | "
                f"{_spread(steady, ',.0f')} | {_spread(ratio, '.2f')}x | {_spread(e2e, '.1f')} | "
                f"{_spread(e2e_ratio, '.2f')}x | "
                f"{_spread([c['cpu_us_per_record'] for c in cells], '.1f')}{extra} |"
            )
    if r.get("latency"):
        rows += [
            "",
            "| latency during the storm: root-cause line produced -> diagnosis on the output "
            "topic | storm sent at | first p50 | first p99 | true root cause p50 | p99 "
            "| peak RSS MB | of it before the first record | the rest / budget MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, lat in r["latency"].items():
            rows.append(
                f"| {name} ({lat['samples']} samples) | {lat['storm_records_per_s']:,.0f}/s | "
                f"{lat['first_p50_s'] * 1000:,.0f} ms | {lat['first_p99_s'] * 1000:,.0f} ms | "
                f"{lat['correct_p50_s'] * 1000:,.0f} ms | {lat['correct_p99_s'] * 1000:,.0f} ms "
                f"| {lat['peak_rss_bytes'] / 1e6:,.0f} | {lat['baseline_rss_bytes'] / 1e6:,.0f} "
                f"| {(lat['peak_rss_bytes'] - lat['baseline_rss_bytes']) / 1e6:,.0f} / "
                f"{lat['memory_budget_bytes'] / 1e6:,.0f} |"
            )
    return "\n".join(rows)


# --- main -----------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=19392, help="dev broker port (started fresh)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--ranks", type=int, default=64, help="ranks per generated job")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--latency-samples", type=int, default=30, help="0: throughput only")
    ap.add_argument("--repeats", type=int, default=3, help="rounds of discard + each daemon")
    ap.add_argument(
        "--before-python",
        help="also run the daemon of another checkout (its venv's python), alternating",
    )
    ap.add_argument("--daemons", type=int, action="append", help="group sizes to run (default: 1)")
    ap.add_argument(
        "--background-rate", type=float, default=0.0, help="records/s (default: 1/3 of measured)"
    )
    ap.add_argument("--daemon-arg", action="append", default=[], help="extra `run` flag")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    ap.add_argument("--keep-broker", action="store_true")
    ap.add_argument(
        "--storm",
        action="store_true",
        help="issue 24's rows instead: healthy and storm traffic as shippers deliver it",
    )
    ap.add_argument("--storm-ranks", type=int, default=16384, help="ranks of the failing job")
    ap.add_argument("--storm-scenario", default="cuda_error", choices=FAILING)
    ap.add_argument(
        "--storm-lead-s", type=float, default=10.0, help="error chain from this before the cause"
    )
    ap.add_argument("--storm-shape", default="canonical", choices=SHAPES)
    ap.add_argument(
        "--storm-rate", type=float, default=0.0, help="latency run: records/s (0: flat out)"
    )
    args = ap.parse_args()
    if args.storm:
        return storm_main(args)
    variants = {"this build": sys.executable}
    if args.before_python:
        variants = {"before": args.before_python, **variants}
    sizes = args.daemons or [1]

    bootstrap = dev_broker(args.port)
    log(f"broker {bootstrap}")
    topic, out = "bench.logs", "bench.diagnoses"
    asyncio.run(create_topics(bootstrap, {topic: args.partitions, out: 2}))
    results: dict[str, Any] = {"records": args.records, "partitions": args.partitions}
    try:
        with tempfile.TemporaryDirectory(prefix="rw-bench-") as tmp:
            work = Path(tmp)
            healthy, failing, n = load_corpus(args, bootstrap, topic, work, results)
            mb = results["bytes"] / 1e6
            perf = consumer_perf(bootstrap, topic, n)
            results["kafka_consumer_perf"] = perf
            log(f"ConsumerPerformance: {perf['fetch_records_per_s']:,.0f} records/s")
            rounds = []
            for r in range(args.repeats):
                secs, cpu = asyncio.run(aiokafka_discard(bootstrap, topic, n))
                row: dict[str, Any] = {
                    "aiokafka_discard": {
                        "records_per_s": n / secs,
                        "mb_per_s": mb / secs,
                        "cpu_us_per_record": cpu / n * 1e6,
                    }
                }
                log(f"round {r + 1}: aiokafka discard {n / secs:,.0f} records/s")
                order = list(variants.items())
                if r % 2:
                    order.reverse()  # alternate who runs first
                for name, python in order:
                    for size in sizes if python == sys.executable else [1]:
                        daemons = [
                            start_daemon(
                                bootstrap,
                                topic,
                                out,
                                work,
                                args.daemon_arg,
                                python=python,
                                group=f"bench-{os.getpid()}-{r}-{name.replace(' ', '-')}-{size}",
                                name=f"daemon-{r}-{i}",
                            )
                            for i in range(size)
                        ]
                        try:
                            secs, m = measure_daemons(daemons, n, args.partitions)
                            row[f"{name} x{size}"] = {
                                "records_per_s": n / secs,
                                "mb_per_s": mb / secs,
                                "cpu_us_per_record": m["bench_cpu_us_per_record"],
                                "loop_us_per_record": m["bench_loop_us_per_record"],
                                "other_us_per_record": m["bench_other_us_per_record"],
                                "engine_us_per_record": m["bench_busiest_other_us_per_record"],
                                "loop_busy": m["bench_loop_us_per_record"]
                                * n
                                / 1e6
                                / max(secs, 1e-3),
                                "engine_busy": m["bench_busiest_other_us_per_record"]
                                * n
                                / 1e6
                                / max(secs, 1e-3),
                                "diagnoses": m.get('rankwatch_diagnoses_out_total{kind="new"}', 0),
                                "memory_bytes": m.get("rankwatch_ring_memory_bytes", 0),
                                "records_per_batch": n
                                / max(m.get("rankwatch_batch_duration_seconds_count", 0), 1),
                            }
                            log(f"round {r + 1}: {name} x{size}: {n / secs:,.0f} records/s")
                        finally:
                            for d in daemons:
                                d.stop()
                rounds.append(row)
            results["rounds"] = rounds
            # the same background load for every build: a third of the slowest one's rate
            slowest = min(
                statistics.median(x[f"{name} x1"]["records_per_s"] for x in rounds)
                for name in variants
            )
            rate = args.background_rate or round(slowest / 3, -3)
            results["latency"] = {}
            for name, python in variants.items() if args.latency_samples else ():
                daemon = start_daemon(
                    bootstrap,
                    topic,
                    out,
                    work,
                    [*args.daemon_arg, "--initial-offset", "latest"],
                    python=python,
                    group=f"bench-{os.getpid()}-latency-{name.replace(' ', '-')}",
                    name=f"daemon-latency-{name.replace(' ', '-')}",
                )
                try:
                    wait_assigned(daemon, args.partitions)
                    results["latency"][name] = run_latency(
                        bootstrap,
                        topic,
                        out,
                        healthy,
                        failing,
                        args.latency_samples,
                        rate,
                        tag=name.replace(" ", "-"),
                    )
                    log(f"latency {name}: {results['latency'][name]}")
                finally:
                    daemon.stop()
    finally:
        if not args.keep_broker:
            subprocess.run(
                [str(KAFKA / "dev-broker"), "stop", "--port", str(args.port)], check=False
            )
    print(render(results))
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    return 0


def load_corpus(
    args: argparse.Namespace, bootstrap: str, topic: str, work: Path, results: dict[str, Any]
) -> tuple[list[Job], list[Job], int]:
    t = time.perf_counter()
    healthy = make_jobs(work / "healthy", [(HEALTHY[i % 2], 100 + i) for i in range(6)], args.ranks)
    failing = make_jobs(work / "failing", [(s, 200 + i) for i, s in enumerate(FAILING)], 16)
    log(f"corpus generated in {time.perf_counter() - t:.1f} s")
    # the throughput corpus: healthy jobs, and one failing job in 20, renamed copies
    batches: list[tuple[str, list[bytes]]] = []
    n = i = 0
    while n < args.records:
        src = failing[i // 20 % len(failing)] if i % 20 == 19 else healthy[i % len(healthy)]
        name = f"job-{i:05d}"
        recs = renamed(src, name)[: args.records - n]
        batches.append((name, recs))
        n += len(recs)
        i += 1
    t = time.perf_counter()
    nbytes = asyncio.run(produce(bootstrap, topic, batches))
    load_s = time.perf_counter() - t
    results.update(jobs=len(batches), bytes=nbytes, load_records_per_s=n / load_s)
    log(f"loaded {n:,} records ({nbytes / 1e6:.0f} MB, {len(batches)} jobs) in {load_s:.1f} s")
    return healthy, failing, n


def wait_assigned(daemon: DaemonProc, partitions: int, timeout_s: float = 120.0) -> None:
    """Until the daemon holds every partition (it starts at the end of the topic: no backlog)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if daemon.proc.poll() is not None:
            raise SystemExit(f"daemon exited: {daemon.log_path.read_text()[-3000:]}")
        m = daemon.metrics()
        if m.get("rankwatch_partitions_assigned", 0) >= partitions:
            return
        time.sleep(SCRAPE_S)
    raise SystemExit("the latency daemon was not assigned its partitions in time")


def run_latency(
    bootstrap: str,
    topic: str,
    out: str,
    healthy: list[Job],
    failing: list[Job],
    samples: int,
    rate: float,
    tag: str,
) -> dict[str, Any]:
    """Job names carry `tag`: a diagnosis id another run already published would be skipped."""
    lat, bg_sent = asyncio.run(
        latency_run(bootstrap, topic, out, healthy, failing, samples, rate, tag)
    )
    return {
        "background_records_per_s": rate,
        "background_records": bg_sent,
        "samples": len(lat.correct),
        "first_p50_s": pct(lat.first, 0.5),
        "first_p99_s": pct(lat.first, 0.99),
        "correct_p50_s": pct(lat.correct, 0.5),
        "correct_p99_s": pct(lat.correct, 0.99),
        "correct_mean_s": statistics.fmean(lat.correct) if lat.correct else None,
        "correct_by_scenario_p50_s": {
            k: statistics.median(v) for k, v in sorted(lat.by_scenario.items())
        },
        "settle_ms": 5000,
        "max_wait_ms": 30000,
    }


def _cpu_seconds(pid: int, tid: int | None = None) -> float:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each thread of `pid`, by thread id."""
    out: dict[int, float] = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return out
    for tid in tids:
        out[tid] = _cpu_seconds(pid, tid)
    return out


def _thread_split(
    daemons: list[DaemonProc], start: list[dict[int, float]]
) -> tuple[float, float, float]:
    """CPU seconds since `start`, summed over the daemons: of the event loop (the main
    thread), of all other threads, and of the busiest other thread (the engine's)."""
    loop = other = busiest = 0.0
    for d, before in zip(daemons, start, strict=True):
        for tid, cpu in _thread_cpu(d.proc.pid).items():
            spent = cpu - before.get(tid, 0.0)
            if tid == d.proc.pid:
                loop += spent
            else:
                other += spent
                busiest = max(busiest, spent)
    return loop, other, busiest


def _spread(values: list[float], fmt: str) -> str:
    """median (min-max) over the rounds"""
    if len(values) == 1:
        return format(values[0], fmt)
    mid, lo, hi = (format(v, fmt) for v in (statistics.median(values), min(values), max(values)))
    return f"{mid} ({lo}-{hi})"


def render(r: dict[str, Any]) -> str:
    size = r["bytes"] / r["records"]
    perf, rounds = r["kafka_consumer_perf"], r["rounds"]
    names = [k for k in rounds[0] if k != "aiokafka_discard"]
    aio = [x["aiokafka_discard"] for x in rounds]
    rows = [
        f"{len(rounds)} rounds; each cell: median (min-max) over the rounds.",
        "",
        "| what | records/s | ratio to aiokafka discard (same round) | CPU µs/record "
        "| event loop µs/record (busy) | engine thread µs/record (busy) |",
        "|---|---:|---:|---:|---:|---:|",
        f"| Kafka `ConsumerPerformance` (Java) | {perf['fetch_records_per_s']:,.0f} | | |",
        f"| aiokafka consume + discard | {_spread([a['records_per_s'] for a in aio], ',.0f')} | "
        f"1 | {_spread([a['cpu_us_per_record'] for a in aio], '.1f')} | | |",
    ]
    for name in names:
        cells = [x[name] for x in rounds]
        ratios = [c["records_per_s"] / a["records_per_s"] for c, a in zip(cells, aio, strict=True)]
        rows.append(
            f"| `rankwatch run`, {name} | {_spread([c['records_per_s'] for c in cells], ',.0f')} | "
            f"{_spread([100 * q for q in ratios], '.0f')}% | "
            f"{_spread([c['cpu_us_per_record'] for c in cells], '.1f')} | "
            f"{_spread([c['loop_us_per_record'] for c in cells], '.1f')} "
            f"({_spread([100 * c['loop_busy'] for c in cells], '.0f')}%) | "
            f"{_spread([c['engine_us_per_record'] for c in cells], '.1f')} "
            f"({_spread([100 * c['engine_busy'] for c in cells], '.0f')}%) |"
        )
    rows += [
        "",
        f"Input: {r['records']:,} canonical records ({size:.0f} B average, {r['jobs']} jobs, "
        f"{r['partitions']} partitions), loaded at {r['load_records_per_s']:,.0f} records/s. "
        "`rankwatch run` is decode + scan + correlate + publish + commit, timed from the first "
        "scrape at which the group holds every partition; CPU is the daemon processes' (all of "
        "them) over the same span, aiokafka's is the benchmark process's.",
        "",
        "| latency: root-cause line produced -> diagnosis on the output topic | first p50 | "
        "first p99 | true root cause p50 | true root cause p99 |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, lat in r.get("latency", {}).items():
        rows.append(
            f"| {name} ({lat['samples']} samples, {lat['background_records_per_s']:,.0f} "
            f"records/s background) | {lat['first_p50_s'] * 1000:,.0f} ms | "
            f"{lat['first_p99_s'] * 1000:,.0f} ms | {lat['correct_p50_s'] * 1000:,.0f} ms | "
            f"{lat['correct_p99_s'] * 1000:,.0f} ms |"
        )
    for name, lat in r.get("latency", {}).items():
        rows.append(
            f"\n{name}: median per scenario (ms): "
            + ", ".join(f"{k} {v * 1000:,.0f}" for k, v in lat["correct_by_scenario_p50_s"].items())
        )
    rows.append(
        "\nEach build's latency is taken by a fresh daemon that starts at the end of the topic "
        "(no backlog), under the same background load. "
        "Failing jobs are injected one at a time under background load. An incident is "
        "diagnosed once the job's event time passes its start + settle_ms (5,000 ms), once the "
        "job has sent nothing for settle_ms of wall time (its logs ended), or at the latest "
        "after max_wait_ms (30,000 ms)."
    )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
