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
from types import UnionType
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

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


def lenient(value: Mapping[str, Any]) -> Diagnosis:
    """A diagnosis from a parsed JSON object whatever some of its fields hold: a field that does
    not fit its type takes its default (inside the parts too; items of a list that are not
    objects are left out). What `from_dict` accepts comes out the same. For readers that must
    show a record a strict decode refuses (`rankwatch alert` accepts any record with an id and
    a job)."""
    return _fit(value, Diagnosis)


def _fit(value: Mapping[str, Any], kind: type[P]) -> P:
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError:
        pass
    kept: dict[str, Any] = {}
    for f in msgspec.structs.fields(kind):
        if f.encode_name in value:
            fits, fitted = _fit_value(value[f.encode_name], f.type)
            if fits:
                kept[f.name] = fitted
    return kind(**kept)


def _fit_value(value: Any, kind: Any) -> tuple[bool, Any]:
    """(True, the value as `kind`), or (False, None) when nothing of it fits."""
    try:
        return True, msgspec.convert(value, kind)
    except msgspec.ValidationError:
        pass
    part = _part_type(kind)
    if part is not None and isinstance(value, Mapping):
        return True, _fit(value, part)
    if get_origin(kind) is list and isinstance(value, list):
        item = _part_type(get_args(kind)[0])
        if item is not None:
            return True, [_fit(x, item) for x in value if isinstance(x, Mapping)]
    return False, None


def _part_type(kind: Any) -> type[_Part] | None:
    """The part (Struct) a field holds, alone or as `Part | None`."""
    union = get_origin(kind) in (Union, UnionType)
    for k in get_args(kind) if union else (kind,):
        if isinstance(k, type) and issubclass(k, _Part):
            return k
    return None
