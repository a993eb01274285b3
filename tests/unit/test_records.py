"""Kafka record formats decoded by the engine (one call per batch), without a broker: the
shapes log shippers really write, and the reasons bad records are rejected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from conftest import analyze_dir
from rankwatch import Catalog, Decoder, Engine, EngineConfig

CAUSE = (
    "node-07:40213:40377 [5] misc/socket.cc:484 NCCL WARN socketStartConnect: "
    "Connect to 10.20.3.21<51844> failed : No route to host"
)


def feed(
    engine: Engine, decoder: Decoder, values: list[bytes], keys: list[bytes | None]
) -> list[tuple[int, str]]:
    n = len(values)
    return engine.feed_records(decoder, "logs/0", values, keys, [None] * n, [None] * n)


def only_diagnosis(engine: Engine) -> dict[str, object]:
    [d] = engine.finish()
    return d


def test_canonical_records(catalog: Catalog) -> None:
    e = Engine(catalog)
    recs = [
        orjson.dumps(
            {
                "job": "j1",
                "rank": 13,
                "host": "node-07",
                "ts": "2026-11-30T12:00:01Z",
                "line": CAUSE,
            }
        ),
        orjson.dumps(
            {
                "job": "j1",
                "rank": 2,
                "host": "node-01",
                "ts": 1796040002000,
                "line": "2026-11-30 12:00:02,000 INFO step=3 loss=2.1",
            }
        ),
    ]
    assert feed(e, Decoder("canonical"), recs, [b"j1", b"j1"]) == []
    d = only_diagnosis(e)
    rc = d["root_cause"]
    assert isinstance(rc, dict)
    assert (rc["rank"], rc["host"], rc["line"]) == (13, "node-07", CAUSE)


def test_fluent_bit_docker_chunks_are_joined(catalog: Catalog) -> None:
    def fb(text: str) -> bytes:
        return orjson.dumps(
            {
                "@timestamp": 1796040001.25,
                "log": text,
                "stream": "stdout",
                "kubernetes": {
                    "pod_name": "llm-worker-3",
                    "host": "node-07",
                    "labels": {"training.kubeflow.org/job-name": "llm"},
                },
            }
        )

    e = Engine(catalog)
    # Docker splits a long line into chunks; only the last one ends with a newline.
    rejected = feed(e, Decoder("fluent-bit"), [fb(CAUSE[:50]), fb(CAUSE[50:] + "\n")], [None, None])
    assert rejected == []
    d = only_diagnosis(e)
    assert d["job"] == "llm"
    assert d["root_cause"]["line"] == CAUSE  # type: ignore[index]


def test_vector_and_custom_paths(catalog: Catalog) -> None:
    vec = orjson.dumps(
        {
            "message": CAUSE,
            "timestamp": "2026-11-30T12:00:01.5Z",
            "kubernetes": {
                "pod_name": "p3",
                "pod_node_name": "node-07",
                "pod_labels": {"training.kubeflow.org/job-name": "vecjob"},
            },
        }
    )
    e = Engine(catalog)
    assert feed(e, Decoder("vector"), [vec], [None]) == []
    assert only_diagnosis(e)["job"] == "vecjob"
    custom = orjson.dumps({"meta": {"jobid": "custom-1", "r": 4}, "text": CAUSE})
    dec = Decoder("json", job_path=["meta", "jobid"], rank_path=["meta", "r"], line_path=["text"])
    e = Engine(catalog)
    assert feed(e, dec, [custom], [None]) == []
    d = only_diagnosis(e)
    assert (d["job"], d["root_cause"]["rank"]) == ("custom-1", 4)  # type: ignore[index]


def test_text_and_cri_take_the_job_from_the_key(catalog: Catalog) -> None:
    e = Engine(catalog)
    cri = [
        f"2026-11-30T12:00:01.1Z stdout P {CAUSE[:30]}".encode(),
        f"2026-11-30T12:00:01.2Z stdout F {CAUSE[30:]}".encode(),
    ]
    assert feed(e, Decoder("cri", key_format="job/rank"), cri, [b"crijob/5", b"crijob/5"]) == []
    d = only_diagnosis(e)
    assert d["job"] == "crijob" and d["root_cause"]["rank"] == 5  # type: ignore[index]
    assert d["root_cause"]["line"] == CAUSE  # type: ignore[index]


def test_a_key_that_ends_like_a_rank_is_the_whole_job_by_default(catalog: Catalog) -> None:
    """Slurm array jobs (`1234/7`) and sweeps (`sweep/2`) are job names, not job and rank:
    two such jobs stay two jobs with an incident each."""
    e = Engine(catalog)
    line = f"2026-11-30T12:00:01.1Z stdout F {CAUSE}".encode()
    assert feed(e, Decoder("cri"), [line, line], [b"1234/7", b"1234/8"]) == []
    diagnoses = e.finish()
    assert sorted(d["job"] for d in diagnoses) == ["1234/7", "1234/8"]
    assert all(d["root_cause"]["rank"] is None for d in diagnoses)


def test_an_unknown_key_format_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown key format 'rank/job'"):
        Decoder("text", key_format="rank/job")


@pytest.mark.parametrize(
    ("fmt", "value", "key", "reason"),
    [
        ("canonical", b"{not json", b"j", "bad_json"),
        ("canonical", b"[1, 2]", b"j", "not_an_object"),
        ("canonical", b'{"job": "j"}', None, "no_line"),
        ("canonical", b'{"line": "x"}', None, "no_job"),
        ("text", b"\xff\xfe\xfd", b"j", "not_utf8"),
        ("text", bytes(range(32)) * 4, b"j", "binary"),
        ("text", b"fine line", None, "no_job"),
        ("canonical", b'{"job":"j","line":"' + b"x" * 2_000_000 + b'"}', None, "oversized"),
    ],
)
def test_bad_records_are_rejected_with_a_reason(
    catalog: Catalog, fmt: str, value: bytes, key: bytes | None, reason: str
) -> None:
    e = Engine(catalog)
    good = orjson.dumps({"job": "j", "line": "INFO all fine"}) if fmt != "text" else b"ok"
    rejected = feed(e, Decoder(fmt), [value, good], [key, b"j"])
    assert rejected == [(0, reason)]
    stats = e.stats()
    assert stats["records"] == 2 and stats["rejected"] == {reason: 1}
    assert stats["lines"] == 1, "the good record after the bad one is still processed"


STEP = "[rank0]: step 1"
CUDA_ERROR = "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"


def root_of(diagnoses: list[dict[str, Any]]) -> tuple[object, object]:
    rc = diagnoses[0]["root_cause"]
    return rc["rank"], rc["host"]


def test_records_that_name_no_source_go_to_the_process_each_line_names(
    catalog: Catalog, tmp_path: Path
) -> None:
    """Text records keyed by job, and canonical records without a source, may hold many
    processes' lines: they are routed by their prefixes, as `analyze` routes a file's."""
    (tmp_path / "all.log").write_text(f"{STEP}\n{CUDA_ERROR}\n")
    assert root_of(analyze_dir(tmp_path, catalog)[0]) == (3, None)
    e = Engine(catalog)
    assert feed(e, Decoder("text"), [STEP.encode(), CUDA_ERROR.encode()], [b"sweep/4"] * 2) == []
    assert root_of(e.finish()) == (3, None)
    e = Engine(catalog)
    values = [orjson.dumps({"job": "j", "host": "node-1", "line": x}) for x in (STEP, CUDA_ERROR)]
    assert feed(e, Decoder("canonical"), values, [None, None]) == []
    assert root_of(e.finish()) == (3, "node-1")


def test_a_line_beyond_the_source_cap_keeps_the_rank_it_states(catalog: Catalog) -> None:
    lines = [f"[rank{r}]: step 1" for r in range(12)] + [CUDA_ERROR.replace("rank3", "rank11")]
    e = Engine(catalog, EngineConfig(max_sources_per_job=4))
    assert feed(e, Decoder("text"), [x.encode() for x in lines], [b"wide"] * len(lines)) == []
    assert e.stats()["sources_capped"] > 0
    d = only_diagnosis(e)
    assert d["root_cause"]["rank"] == 11  # type: ignore[index]
    assert str(d["summary"]).startswith("rank 11:")
