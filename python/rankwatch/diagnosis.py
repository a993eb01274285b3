"""The diagnosis (`rankwatch.diagnosis/1`) as typed objects.

The Rust structs in `rust/core/src/report.rs` are the contract; `schema/diagnosis-1.schema.json`
is generated from them and `SCHEMA.md` describes every field. These msgspec Structs mirror
them for readers. Decoding is tolerant the way a topic needs: a field an older (or a cut,
`truncated`) diagnosis lacks takes its default, and fields this version does not know are
ignored. A record that is not a diagnosis at all (not an object, a field of the wrong type)
raises `BadDiagnosis`.

The typed object is for reading. What is published or printed as JSON stays the document the
engine wrote (re-encoding would drop fields a newer engine added).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

import msgspec

DIAGNOSIS_SCHEMA = "rankwatch.diagnosis/1"


P = TypeVar("P", bound=msgspec.Struct)


class BadDiagnosis(ValueError):
    """A record that is not a usable diagnosis."""


class _Part(msgspec.Struct, kw_only=True):
    """Every part: keyword fields; unknown fields are ignored."""


class SignatureRef(_Part):
    id: str = ""
    title: str = ""


class SignatureInfo(_Part):
    id: str = ""
    title: str = ""
    subsystem: str = ""
    role: str = ""
    severity: str = ""


class ReportedBy(_Part):
    rank: int | None = None
    host: str | None = None


class RootCause(_Part):
    rank: int | None = None
    host: str | None = None
    device: int | None = None
    pid: int | None = None
    ts: str | None = None
    ts_corrected: str | None = None
    ts_exact: bool = False
    line: str | None = None
    origin: str | None = None
    record: list[str] = []
    fields: dict[str, str] = {}
    template: str | None = None
    reported_by: ReportedBy | None = None


class FirstWarning(_Part):
    rank: int | None = None
    host: str | None = None
    device: int | None = None
    pid: int | None = None
    ts: str | None = None
    ts_corrected: str | None = None
    line: str | None = None
    origin: str | None = None
    signature: str | None = None
    preceding_lines: list[str] = []


class Evidence(_Part):
    rule: str = ""
    weight: int = 0
    why: str = ""


class Suspect(_Part):
    rank: int | None = None
    host: str | None = None
    pid: int | None = None
    score: int | None = None
    signature: str | None = None
    line: str | None = None
    reasons: list[str] = []
    evidence: list[Evidence] = []


class Alternative(Suspect, kw_only=True):
    why_not: str | None = None


class Collateral(_Part):
    signature: str = ""
    title: str = ""
    ranks: str = ""
    rank_count: int = 0
    lines: int = 0
    explained_by_root_cause: bool = False
    template: str | None = None


class OddContext(_Part):
    field: str = ""
    host: str | None = None
    value: str = ""
    problem: str | None = None
    others: str | None = None
    named_by_failures: bool | None = None
    clear: bool | None = None


class CollectiveRow(_Part):
    ranks: str = ""
    count: int = 0
    op: str | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    dtype: str | None = None
    root: int | None = None
    stated: str = ""


class CollectiveTable(_Part):
    kind: str = ""
    group: str = ""
    seq: int | None = None
    rows: list[CollectiveRow] = []


class Hypothesis(_Part):
    cause: str = ""
    separate_by: str = ""


class IncidentInfo(_Part):
    start: str | None = None
    hits: int = 0
    ranks_affected: int = 0
    world_size: int = 0


class SourcesOverCap(_Part):
    sources_tracked: int = 0
    lines: int = 0


class ClockInfo(_Part):
    culprit_host_offset_ms: int | None = None
    uncertainty_ms: int = 0
    hosts_estimated: int = 0
    sync_events: int = 0


class BaselineDiff(_Part):
    line: str = ""
    is_root_cause: bool = False


class Diagnosis(_Part):
    """One incident's diagnosis. See SCHEMA.md for what each field means."""

    schema: str = DIAGNOSIS_SCHEMA
    id: str = ""
    job: str = ""
    status: Literal["open", "final"] | None = None
    summary: str | None = None
    cause_signature: SignatureRef | None = None
    signature: SignatureInfo = msgspec.field(default_factory=SignatureInfo)
    root_cause: RootCause = msgspec.field(default_factory=RootCause)
    first_warning: FirstWarning | None = None
    cause: str | None = None
    fix: str | None = None
    verify: str | None = None
    facts: dict[str, str] = {}
    confidence: float = 0.0
    tie: bool = False
    suspects: list[Suspect] = []
    collateral: list[Collateral] = []
    collateral_ranks: str = ""
    collateral_rank_count: int = 0
    preceding_lines: list[str] = []
    odd_context: list[OddContext] = []
    collectives: list[CollectiveTable] = []
    alternatives: list[Alternative] = []
    hypotheses: list[Hypothesis] = []
    incident: IncidentInfo = msgspec.field(default_factory=IncidentInfo)
    sources_over_cap: SourcesOverCap | None = None
    clock: ClockInfo = msgspec.field(default_factory=ClockInfo)
    baseline_diff: BaselineDiff | None = None
    truncated: bool = False


_DECODER = msgspec.json.Decoder(Diagnosis)


def decode(value: bytes | str) -> Diagnosis:
    """A diagnosis from its JSON; BadDiagnosis when it is not one."""
    try:
        return _DECODER.decode(value)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BadDiagnosis(str(e)) from None


def from_dict(value: Any) -> Diagnosis:
    """A diagnosis from its parsed JSON (a dict); BadDiagnosis when it is not one."""
    if isinstance(value, Diagnosis):
        return value
    if not isinstance(value, Mapping):
        raise BadDiagnosis("not a JSON object")
    try:
        return msgspec.convert(value, Diagnosis)
    except msgspec.ValidationError as e:
        raise BadDiagnosis(str(e)) from None


def from_part(value: Mapping[str, Any], kind: type[P]) -> P:
    """One part of a diagnosis (a suspect, an alternative) from its parsed JSON."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as e:
        raise BadDiagnosis(str(e)) from None
