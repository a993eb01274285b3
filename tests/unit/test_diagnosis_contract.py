"""The diagnosis as a contract: what the engine writes validates against the checked-in JSON
Schemas (generated from rust/core/src/report.rs), the Python Structs cover every field of
them, SCHEMA.md is generated from them, and decoding tolerates older and cut diagnoses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import orjson
import pytest

from rankwatch import diagnosis as rd
from rankwatch.simulate import fleetgen

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schema"


def schema(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((SCHEMAS / name).read_text())
    return result


def analyze_json(*args: str | Path) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", "analyze", "--json", *map(str, args)],
        capture_output=True,
        timeout=300,
        check=True,
    )
    result: dict[str, Any] = orjson.loads(r.stdout)
    return result


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    base = tmp_path_factory.mktemp("contract")
    healthy = base / "healthy"
    fleetgen.generate("healthy", healthy, ranks=16, layout="per-node", seed=3)
    out = []
    for scenario in ("ib_link_down", "desync", "version_mismatch", "wrong_iface"):
        path = base / scenario
        fleetgen.generate(scenario, path, ranks=16, layout="per-node", seed=3)
        out.append(analyze_json(path))
        out.append(analyze_json("--baseline", healthy, path))
    return out


def test_reports_validate_against_the_checked_in_schemas(reports: list[dict[str, Any]]) -> None:
    report_schema, diagnosis_schema = (
        schema("report-1.schema.json"),
        schema("diagnosis-1.schema.json"),
    )
    seen = 0
    for doc in reports:
        jsonschema.validate(doc, report_schema)
        for d in doc["diagnoses"]:
            jsonschema.validate(d, diagnosis_schema)
            seen += 1
    assert seen >= len(reports)
    assert any("baseline_diff" in d for doc in reports for d in doc["diagnoses"])


def test_the_typed_decode_reads_what_the_engine_writes(reports: list[dict[str, Any]]) -> None:
    for doc in reports:
        for raw in doc["diagnoses"]:
            d = rd.decode(orjson.dumps(raw))
            assert (d.id, d.job, d.status) == (raw["id"], raw["job"], raw["status"])
            assert d.root_cause.line == raw["root_cause"]["line"]
            assert d.root_cause.ts_corrected == raw["root_cause"].get("ts_corrected")
            assert [s.score for s in d.suspects] == [s["score"] for s in raw["suspects"]]
            assert rd.from_dict(raw) == d


STRUCTS: dict[str, type[msgspec.Struct]] = {
    "Diagnosis": rd.Diagnosis,
    "SignatureRef": rd.SignatureRef,
    "SignatureInfo": rd.SignatureInfo,
    "RootCause": rd.RootCause,
    "ReportedBy": rd.ReportedBy,
    "FirstWarning": rd.FirstWarning,
    "Suspect": rd.Suspect,
    "Evidence": rd.Evidence,
    "Alternative": rd.Alternative,
    "Collateral": rd.Collateral,
    "OddContext": rd.OddContext,
    "CollectiveTable": rd.CollectiveTable,
    "CollectiveRow": rd.CollectiveRow,
    "Hypothesis": rd.Hypothesis,
    "IncidentInfo": rd.IncidentInfo,
    "SourcesOverCap": rd.SourcesOverCap,
    "ClockInfo": rd.ClockInfo,
    "BaselineDiff": rd.BaselineDiff,
}


def test_the_python_structs_have_every_field_of_the_schema() -> None:
    s = schema("diagnosis-1.schema.json")
    objects = {name: d for name, d in s["$defs"].items() if "properties" in d}
    objects["Diagnosis"] = s
    assert set(objects) == set(STRUCTS)
    for name, d in objects.items():
        assert set(STRUCTS[name].__struct_fields__) == set(d["properties"]), name


def test_schema_md_is_generated_from_the_schemas() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import schema_md
    finally:
        sys.path.pop(0)
    assert (ROOT / "SCHEMA.md").read_text() == schema_md.render(), (
        "regenerate: python scripts/schema_md.py > SCHEMA.md"
    )


def test_an_older_or_cut_diagnosis_decodes_with_defaults() -> None:
    skeleton = {
        "schema": "rankwatch.diagnosis/1",
        "id": "rw-1",
        "job": "j",
        "status": "final",
        "signature": {"id": "xid_79", "title": "GPU has fallen off the bus"},
        "confidence": 0.9,
        "truncated": True,
        "added_later": {"x": 1},
    }
    d = rd.decode(orjson.dumps(skeleton))
    assert (d.id, d.signature.id, d.truncated, d.suspects, d.root_cause.line) == (
        "rw-1",
        "xid_79",
        True,
        [],
        None,
    )


@pytest.mark.parametrize(
    "value",
    [b"", b"not json", b"[1, 2]", b'{"id": 5}', b'{"id": "x", "suspects": {"a": 1}}'],
)
def test_a_record_that_is_no_diagnosis_is_refused(value: bytes) -> None:
    with pytest.raises(rd.BadDiagnosis):
        rd.decode(value)


def test_the_lenient_read_reads_what_the_strict_one_does(reports: list[dict[str, Any]]) -> None:
    for doc in reports:
        for raw in doc["diagnoses"]:
            assert rd.lenient(raw) == rd.from_dict(raw)


def test_the_lenient_read_gives_a_field_that_does_not_fit_its_default() -> None:
    raw = {
        "id": "rw-1",
        "job": "j",
        "signature": None,
        "root_cause": {"rank": "3", "host": "node-1"},
        "suspects": {"rank": 1},
        "collateral": [1, {"ranks": "1-3", "lines": "many"}],
        "confidence": 1,
    }
    with pytest.raises(rd.BadDiagnosis):
        rd.from_dict(raw)
    d = rd.lenient(raw)
    assert (d.id, d.signature, d.root_cause.rank, d.root_cause.host) == (
        "rw-1",
        rd.SignatureInfo(),
        None,
        "node-1",
    )
    assert d.suspects == [] and d.collateral == [rd.Collateral(ranks="1-3")]
    assert d.confidence == 1.0
