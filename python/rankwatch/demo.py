"""`rankwatch demo`: the main job end to end on this machine. Starts the dev Kafka broker,
starts the daemon, replays a failing 512-rank job interleaved with healthy jobs into the log
topic, prints each diagnosis as it arrives, then stops everything."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from rankwatch.report import Style, render_diagnosis

REPO = Path(__file__).resolve().parent.parent.parent
BROKER = REPO / "deploy" / "kafka" / "dev-broker"
BENCH = REPO / "bench"

FAILING = ("llm-512", "ib_link_down", 512, 7)
HEALTHY = (("vit-64", "healthy", 64, 3), ("moe-128", "healthy_noisy", 128, 4))


class DemoError(Exception):
    """Something the demo needs is missing or failed (printed as one line)."""


def _say(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def _generate(root: Path) -> dict[str, Any]:
    if not (BENCH / "fleetgen.py").exists():
        raise DemoError("the demo needs a source checkout (bench/fleetgen.py is missing)")
    sys.path.insert(0, str(BENCH))
    import fleetgen  # type: ignore[import-not-found]

    truths: dict[str, Any] = {}
    for job, scenario, ranks, seed in (FAILING, *HEALTHY):
        truths[job] = fleetgen.generate(
            scenario, root / job, ranks=ranks, layout="per-node", seed=seed, job=job, steps=10
        )
    return truths


def _rankwatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "rankwatch.cli", *args]


async def _watch(bootstrap: str, topic: str, want: str, timeout_s: float) -> list[dict[str, Any]]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    seen: dict[str, dict[str, Any]] = {}
    style = Style(color=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for r in records:
                    d = orjson.loads(r.value)
                    first = d["id"] not in seen
                    seen[d["id"]] = d
                    label = "diagnosis" if first else "update (same id)"
                    print(f"\n=== {label} from {topic}, key {r.key.decode() if r.key else '-'}")
                    print(render_diagnosis(d, style, context_lines=8), flush=True)
            if any(d["job"] == want for d in seen.values()):
                # Give late updates and any (wrong) healthy-job diagnosis a moment to show.
                deadline = min(deadline, time.monotonic() + 8)
    finally:
        await consumer.stop()
    return list(seen.values())


def run_demo(port: int = 19192, settle_ms: int = 3000, timeout_s: float = 180.0) -> int:
    if not BROKER.exists():
        raise DemoError("the demo needs a source checkout (deploy/kafka/dev-broker is missing)")
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="rankwatch-demo-") as tmp:
        root = Path(tmp)
        _say("generating a failing 512-rank job and two healthy jobs (bench/fleetgen.py)")
        truths = _generate(root)
        _say(f"starting the dev Kafka broker on 127.0.0.1:{port}")
        r = subprocess.run(
            [str(BROKER), "start", "--port", str(port), "--fresh"], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise DemoError(f"broker did not start: {r.stderr.strip().splitlines()[-1:]}")
        bootstrap = r.stdout.strip().splitlines()[-1]
        logs_topic, out_topic = "demo-training-logs", "demo-diagnoses"
        try:
            _say("starting the daemon: rankwatch run")
            daemon = subprocess.Popen(
                _rankwatch(
                    "run",
                    "--bootstrap-servers",
                    bootstrap,
                    "--topic",
                    logs_topic,
                    "--output-topic",
                    out_topic,
                    "--group-id",
                    "rankwatch-demo",
                    "--settle-ms",
                    str(settle_ms),
                    "--metrics-addr",
                    "127.0.0.1:0",
                ),
                stdout=subprocess.DEVNULL,
            )
            procs.append(daemon)
            _say("replaying the three jobs into the log topic, interleaved")
            for job in truths:
                procs.append(
                    subprocess.Popen(
                        _rankwatch(
                            "replay",
                            str(root / job),
                            "--topic",
                            logs_topic,
                            "--bootstrap-servers",
                            bootstrap,
                            "--job",
                            job,
                        ),
                        stdout=subprocess.DEVNULL,
                    )
                )
            want = FAILING[0]
            seen = asyncio.run(_watch(bootstrap, out_topic, want, timeout_s))
        finally:
            for p in reversed(procs):
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(timeout=30)
                if p.poll() is None:
                    p.kill()
            subprocess.run([str(BROKER), "stop", "--port", str(port)], capture_output=True)
        truth = truths[FAILING[0]].root_cause
        got = [d for d in seen if d["job"] == FAILING[0]]
        wrong = [d for d in seen if d["job"] != FAILING[0]]
        print()
        if not got:
            _say("no diagnosis arrived for the failing job in time")
            return 1
        rc = got[-1]["root_cause"]
        ok = (rc["rank"], rc["host"], rc["line"]) == (truth["rank"], truth["host"], truth["line"])
        _say(
            f"failing job: root cause rank {rc['rank']} on {rc['host']} — "
            + ("matches the generator's ground truth" if ok else f"EXPECTED {truth}")
        )
        _say(f"healthy jobs: {len(wrong)} diagnoses (expected 0)")
        return 0 if ok and not wrong else 1
