"""`rankwatch stats` and `rankwatch replay` against the real broker where they used to mislead
(issue 9): statistics of a topic that does not exist, and a replay the broker dropped."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

from daemon_fixtures import PORT, ROOT, end_offsets, read_topic, wait_for
from kafka_broker import halt_broker, resume_broker
from rankwatch.kafka.replay import canonical_record, interleave, stream_names
from rankwatch.local import discover
from rankwatch.simulate import fleetgen


def rankwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def test_stats_of_a_topic_that_does_not_exist_is_an_error_not_a_healthy_fleet(
    daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    r = rankwatch("stats", "--bootstrap-servers", daemon_kafka, "--topic", "no.such.topic")
    assert r.returncode == 1, r.stdout
    assert r.stdout == ""
    assert "topic no.such.topic does not exist" in r.stderr and "Traceback" not in r.stderr
    # an empty topic that exists is an empty fleet
    empty = fresh_topics("diagnoses")
    r = rankwatch("stats", "--bootstrap-servers", daemon_kafka, "--topic", empty, "--json")
    assert r.returncode == 0, r.stderr
    assert '"incidents": 0' in r.stdout


def test_stats_of_the_log_topic_is_an_error_that_names_the_diagnoses_topic(
    daemon_kafka: str, fresh_topics: Callable[..., str], tmp_path: Path
) -> None:
    """Probe F22: `stats --topic <the log topic>` printed a healthy fleet, rc 0."""
    folder = tmp_path / "job"
    fleetgen.generate("cuda_error", folder, ranks=4, layout="per-rank", seed=3, job="st")
    logs = fresh_topics("logs")
    r = rankwatch("replay", str(folder), "--topic", logs, "--bootstrap-servers", daemon_kafka)
    assert r.returncode == 0, r.stderr
    r = rankwatch("stats", "--bootstrap-servers", daemon_kafka, "--topic", logs)
    assert r.returncode == 1, r.stdout
    assert "is a rankwatch diagnosis" in r.stderr and "not the log topic" in r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr


def sent_values(folder: Path) -> list[bytes]:
    """The records `rankwatch replay FOLDER` sends, in its send order."""
    files, _ = discover([folder])
    names = {id(f): n for f, n in zip(files, stream_names(files), strict=True)}
    return [canonical_record(f, line, names[id(f)]) for f, line in interleave(files)]


def expected_values(folder: Path) -> Counter[bytes]:
    """The records `rankwatch replay FOLDER` sends, as a multiset."""
    return Counter(sent_values(folder))


def test_a_replay_the_broker_drops_says_what_arrived_and_a_rerun_sends_the_rest_once(
    tmp_path: Path, daemon_kafka: str, fresh_topics: Callable[..., str]
) -> None:
    """The broker stalls while `replay` sends a 64-rank job at 400 lines/s: replay exits 1
    saying how many records at the start are on the topic and how many were in flight; after
    the broker is back, a rerun with --skip-records that number completes the topic. Every line
    arrives; only records that were in flight may arrive twice (the stalled broker can still
    write a request whose answer never came)."""
    folder = tmp_path / "job"
    fleetgen.generate("cuda_error", folder, ranks=64, layout="per-rank", seed=7, job="rp")
    order = sent_values(folder)
    want = Counter(order)
    topic = fresh_topics("replayed", 2)
    args = ["replay", str(folder), "--topic", topic, "--bootstrap-servers", daemon_kafka]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rankwatch.cli",
            *args,
            "--rate",
            "400",
            "--request-timeout-ms",
            "4000",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        wait_for(
            "replay to be under way", lambda: sum(end_offsets(daemon_kafka, topic).values()) >= 600
        )
        halt_broker(PORT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        resume_broker(PORT)
    assert proc.returncode == 1, (out, err)
    assert "Traceback" not in err
    found = re.search(r"run again with --skip-records (\d+)", err)
    assert found is not None, err
    acknowledged = int(found.group(1))
    assert 600 <= acknowledged < sum(want.values()), err
    flight = re.search(r"up to ([\d,]+) after them were in flight", err)
    assert flight is not None, err
    in_flight = order[acknowledged : acknowledged + int(flight.group(1).replace(",", ""))]
    t0 = time.monotonic()
    rerun = rankwatch(*args, "--skip-records", str(acknowledged))
    assert rerun.returncode == 0, rerun.stderr
    assert f"(skipped the first {acknowledged:,})" in rerun.stdout
    got = Counter(r.value for r in read_topic(daemon_kafka, topic))
    assert not want - got, (sum(got.values()), sum(want.values()), time.monotonic() - t0)
    twice = got - want
    assert not twice - Counter(in_flight), (len(in_flight), twice)


def test_a_huge_job_name_makes_a_bounded_key_that_still_names_one_job() -> None:
    """Issue 9: a 100 KB job name became a 100 KB record key."""
    from rankwatch.daemon.publisher import MAX_DIAGNOSIS_KEY_BYTES, diagnosis_record

    one, other = "j" * 100_000, "j" * 99_999 + "k"
    key, value = diagnosis_record({"id": "rw-1", "job": one})
    assert len(key) <= MAX_DIAGNOSIS_KEY_BYTES and key.startswith(b"jjjj")
    assert diagnosis_record({"id": "rw-2", "job": one})[0] == key  # same job, same key
    assert diagnosis_record({"id": "rw-3", "job": other})[0] != key
    assert orjson.loads(value)["job"] == one  # the diagnosis still names the whole job
    assert diagnosis_record({"id": "rw-4", "job": "llm7b"})[0] == b"llm7b"


def test_run_help_documents_how_keys_name_jobs() -> None:
    """Issue 9: the job/rank key convention was documented neither in `run --help` nor in
    the README."""
    r = rankwatch("run", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "the whole key is the job name" in text and "--key-format {job,job/rank}" in text
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert 'key_format = "job/rank"' in readme
