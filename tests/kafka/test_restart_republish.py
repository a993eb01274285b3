"""A daemon restarted after SIGKILL re-feeds the records after its group's last commit, and its
engine passes again through the versions of a diagnosis the previous incarnation published from
those records (acknowledged, or in flight when it died). None of them may be published again:
the output topic already carries it, and a consumer would page on it twice.

Before the fix the published index kept only the latest version of each id, so the first
version re-emitted after the restart differed from it and went out again (issue 9: the SIGKILL
x20 test, "published twice with the same content", under load). Here the previous incarnation
publishes two versions of one incident and dies before any commit landed, exactly as the
daemons of that test did when a SIGKILL fell between an acknowledgement and the commit."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import orjson

from daemon_fixtures import Daemon, KafkaRecord, read_topic, wait_for, wait_settled
from rankwatch.daemon.decision import EARLIER, IDENTICAL, verdict
from rankwatch.daemon.published import EARLIER_VERSIONS, PublishedIndex, content_hash
from test_daemon_kafka import produce
from test_fault_suite import duplicates

JOB = "restart-versions"
TS = "2026-11-30T12:00:{s:02d}Z"
CAUSE = (
    "node-b:202:202 [0] transport/net_ib.cc:123 NCCL WARN Cuda failure "
    "'an illegal memory access was encountered'"
)
COLLATERAL = "node-a:101:101 [0] NCCL WARN Call to ibv_poll_cq failed: remote access error"


def record(rank: int, host: str, s: int, line: str) -> tuple[bytes, bytes]:
    value = {"job": JOB, "rank": rank, "host": host, "ts": TS.format(s=s), "line": line}
    return JOB.encode(), orjson.dumps(value)


def versions(records: list[KafkaRecord]) -> list[str]:
    return [content_hash(r.json()) for r in records]


def test_a_restart_does_not_publish_again_the_versions_the_killed_daemon_published(
    daemon_kafka: str,
    fresh_topics: Callable[..., str],
    daemon_factory: Callable[..., Daemon],
) -> None:
    logs, out = fresh_topics("logs"), fresh_topics("diagnoses")
    # one record per batch and a checkpoint after each, so each version goes out on its own
    settings = {
        "topic": [logs],
        "output_topic": out,
        "settle_ms": 0,
        "max_batch_records": 1,
        "commit_interval_ms": 1,
    }
    killed = daemon_factory("killed", group_id=f"g-{uuid.uuid4().hex[:8]}", **settings)
    produce(daemon_kafka, logs, [record(1, "node-b", 1, CAUSE)])
    killed.start()
    wait_for("the first version", lambda: len(read_topic(daemon_kafka, out)) >= 1)
    produce(daemon_kafka, logs, [record(0, "node-a", 2, COLLATERAL)])
    wait_for("the second version", lambda: len(read_topic(daemon_kafka, out)) >= 2)
    published = read_topic(daemon_kafka, out)
    assert len(set(versions(published))) == 2, [r.json() for r in published]
    assert len({r.json()["id"] for r in published}) == 1
    killed.kill()

    # The restarted daemon's group has no commit: as if the killed one died before its first
    # commit landed, so every record is fed again as new.
    group = f"g-{uuid.uuid4().hex[:8]}"
    restarted = daemon_factory("restarted", group_id=group, **settings)
    restarted.start()
    wait_settled(daemon_kafka, [logs], group, [restarted])
    records = read_topic(daemon_kafka, out)
    assert not duplicates(records), [r.json()["status"] for r in records]
    assert versions(records) == versions(published)
    skipped = restarted.metrics() or {}
    assert skipped.get('rankwatch_diagnoses_skipped_total{reason="earlier"}', 0) >= 1
    assert restarted.stop() == 0


def test_the_index_knows_every_version_of_an_id_within_its_bound() -> None:
    index = PublishedIndex(horizon_ms=60_000, retain_s=3600)
    versions_ = [{"id": "d-1", "job": "j", "collateral": list(range(n))} for n in range(40)]
    for v in versions_:
        index.load(orjson.dumps(v))
    last = versions_[-1]
    assert verdict(index, last, replaying=False) == (IDENTICAL, content_hash(last))
    kept = versions_[-1 - EARLIER_VERSIONS : -1]
    assert all(verdict(index, v, replaying=False)[0] == EARLIER for v in kept)
    assert verdict(index, versions_[0], replaying=False)[0] is None  # past the bound
    assert verdict(index, {**versions_[0], "status": "final"}, replaying=False)[0] is None


def test_reading_back_its_own_versions_keeps_each_earlier_version_once() -> None:
    index = PublishedIndex(horizon_ms=60_000, retain_s=3600)
    versions_ = [{"id": "d-1", "job": "j", "collateral": list(range(n))} for n in range(20)]
    for v in versions_:  # sent
        index.remember(v)
    for v in versions_:  # and read back from the topic by the fleet sync
        index.load(orjson.dumps(v))
    entry = index.entries["d-1"]
    assert entry.hash == content_hash(versions_[-1])
    assert len(entry.earlier) == 8 * (len(versions_) - 1)
    assert all(verdict(index, v, replaying=False)[0] == EARLIER for v in versions_[:-1])
