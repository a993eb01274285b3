"""`rankwatch replay` on a messy folder, against a real broker: what cannot be read is named
and skipped, what can be read is sent, and a huge line costs one cut record, not its size."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

from daemon_fixtures import read_topic

CAUSE = (
    "node12:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)


def test_replay_of_a_messy_folder(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rank-0.log").write_bytes(b"starting\n" + b"z" * (3 << 20) + b"\n" + CAUSE.encode())
    os.mkfifo(logs / "rank-1.log")
    (logs / "rank-2.log").symlink_to("/dev/zero")
    whole = gzip.compress(b"".join(b"rank 3 step %d\n" % i for i in range(50_000)))
    (logs / "rank-3.log.gz").write_bytes(whole[: len(whole) // 2])
    topic = fresh_topics("logs")
    command = ["replay", str(logs), "--topic", topic, "--bootstrap-servers", daemon_kafka]
    r = subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert f"skipped {logs}/rank-1.log: not a regular file" in r.stderr
    assert f"skipped {logs}/rank-2.log: link to /dev/zero" in r.stderr
    assert f"skipped {logs}/rank-3.log.gz: partially read: gzip file ends early" in r.stderr
    values = [orjson.loads(rec.value) for rec in read_topic(daemon_kafka, topic)]
    rank0 = [v["line"] for v in values if v["rank"] == 0]
    assert rank0[0] == "starting" and rank0[2] == CAUSE
    assert len(rank0[1]) == 256 * 1024
    rank3 = [v["line"] for v in values if v["rank"] == 3]
    assert rank3[:2] == ["rank 3 step 0", "rank 3 step 1"] and len(rank3) > 1_000
