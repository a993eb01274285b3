"""Long runs at thousands of ranks (issue 26, item 5): a failure's evidence is one incident
however long the job trained before it. An incident used to lie within incident_horizon_ms
of its first hit, which in a long run was a benign start-up warning (torchrun's
OMP_NUM_THREADS banner, a barrier notice): the lines of the failure more than the horizon
after it opened a second incident, and the ranks read first (or the late watchdog timeouts)
became a false "Unclassified error" or "A rank never reached the collective" incident. Each
case below gave two incidents before; 2,048 ranks is the smallest size of the daemon's case
that did."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from conftest import GenerateAndAnalyze
from rankwatch.catalog_loader import Catalog
from rankwatch.engine import Decoder, Engine
from rankwatch.kafka.replay import canonical_record, interleave, stream_names
from rankwatch.local import discover
from rankwatch.simulate import fleetgen
from test_scenarios import check_root_cause

BATCH = 2_000


def stream_as_records(folder: Path, job: str, catalog: Catalog) -> list[dict[str, Any]]:
    """Every diagnosis version the daemon would publish for the job's logs replayed into
    Kafka (`rankwatch simulate --topic`): lines interleaved file by file, record times
    advancing, polled after each batch, then the rest at the end."""
    files, _ = discover([folder], job=job)
    files = [f for f in files if f.path.name != "truth.json"]
    names = dict(zip(map(id, files), stream_names(files), strict=True))
    engine, decoder = Engine(catalog), Decoder("canonical")
    now = int(time.time() * 1000)
    published: list[dict[str, Any]] = []
    batch: list[bytes] = []
    for f, line in interleave(files):
        batch.append(canonical_record(f, line, names[id(f)]))
        if len(batch) == BATCH:
            now += 40  # 50,000 records a second
            feed(engine, decoder, batch, now)
            published += engine.poll(now)
            batch = []
    feed(engine, decoder, batch, now)
    return published + engine.poll(now + 600_000) + engine.finish()


def feed(engine: Engine, decoder: Decoder, values: list[bytes], now: int) -> None:
    n = len(values)
    rejected = engine.feed_records(decoder, "logs/0", values, [None] * n, [None] * n, [now] * n)
    assert rejected == []


def test_a_failure_after_200_steps_at_4096_ranks_is_one_incident(
    generate_and_analyze: GenerateAndAnalyze,
) -> None:
    truth, diagnoses = generate_and_analyze(
        "ib_link_down", ranks=4096, layout="per-node", skew_s=5.0, seed=0, steps=200
    )
    check_root_cause(truth, diagnoses)


def test_the_daemon_publishes_one_incident_for_a_long_run(tmp_path: Path, catalog: Catalog) -> None:
    job = "cuda-2048"
    truth = fleetgen.generate(
        "cuda_error", tmp_path / job, ranks=2048, layout="per-node", seed=0, steps=200, job=job
    )
    published = stream_as_records(tmp_path / job, job, catalog)
    assert {d["id"] for d in published} == {published[-1]["id"]}, [
        (d["id"], d["summary"]) for d in published
    ]
    rc = published[-1]["root_cause"]
    assert (rc["rank"], rc["line"]) == (truth.root_cause["rank"], truth.root_cause["line"])


def test_a_healthy_run_of_200_steps_at_4096_ranks_is_no_incident(
    generate_and_analyze: GenerateAndAnalyze,
) -> None:
    truth, diagnoses = generate_and_analyze(
        "healthy", ranks=4096, layout="per-node", skew_s=5.0, seed=0, steps=200
    )
    assert not truth.expect_diagnosis
    assert diagnoses == [], [d["summary"] + " | " + d["root_cause"]["line"] for d in diagnoses]
