"""Making outgoing records fit the producer's request size, so that no input can produce a
diagnosis or dead-letter copy that the producer or broker refuses.

Sizes are measured the way the producer checks them (aiokafka's estimate of a one-record
batch: key, value and headers with their framing), against a budget a little below
`max_request_size`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatchBuilder

Headers = list[tuple[str, bytes]]

VALUE_TRUNCATED_HEADER = "rankwatch-truncated-from-bytes"
HEADERS_TRIMMED_HEADER = "rankwatch-headers-trimmed-from-bytes"
KEY_TRUNCATED_HEADER = "rankwatch-key-truncated-from-bytes"
MAX_KEY_BYTES = 4096  # a dead-letter key longer than this is cut (the value matters more)
MARKERS_RESERVE = 256  # room kept for the marker headers, which are added after measuring
HEADER_FRAMING = 10  # varint lengths of a header's name and value, at most

# Successively tighter bounds for a diagnosis: (longest string, longest list). Anything taken
# from input (hosts, job names, lines, collateral lists) is cut by these.
DIAGNOSIS_LEVELS = ((4096, 256), (1024, 64), (256, 16), (64, 4))
SKELETON_FIELDS = ("schema", "id", "job", "status", "signature", "confidence")
ELLIPSIS = "…"


def record_size(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes]]
) -> int:
    """Bytes the producer counts for a record sent on its own."""
    return int(DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers)))


def _header_bytes(headers: Sequence[tuple[str, bytes]]) -> int:
    return sum(len(k.encode()) + len(v) + HEADER_FRAMING for k, v in headers)


# --- dead-letter copies -----------------------------------------------------------------------


@dataclass
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: Headers
    trimmed: bool


def fit_dead_letter(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes]],
    own: Sequence[tuple[str, bytes]],
    budget: int,
    value_limit: int,
) -> DeadLetter:
    """The copy of a rejected record that fits `budget`: our headers (`own`: reason, source)
    always, then the value up to `value_limit`, then the record's headers in order, the last
    one that does not fit cut and the rest dropped. Each cut is named in a marker header."""
    markers: Headers = []
    if key is not None and len(key) > MAX_KEY_BYTES:
        markers.append((KEY_TRUNCATED_HEADER, str(len(key)).encode()))
        key = key[:MAX_KEY_BYTES]
    room = budget - MARKERS_RESERVE - record_size(key, b"", list(own))
    if value is not None:
        keep = max(0, min(len(value), value_limit, room))
        if keep < len(value):
            markers.append((VALUE_TRUNCATED_HEADER, str(len(value)).encode()))
            value = value[:keep]
        room -= keep
    kept = _headers_within(headers, room)
    if kept != list(headers):
        markers.append((HEADERS_TRIMMED_HEADER, str(_header_bytes(headers)).encode()))
    out = [*kept, *own, *markers]
    return DeadLetter(key, value, out, trimmed=bool(markers))


def _headers_within(headers: Sequence[tuple[str, bytes]], room: int) -> Headers:
    kept: Headers = []
    for name, data in headers:
        cost = len(name.encode()) + HEADER_FRAMING
        if cost >= room:
            break
        if cost + len(data) > room:
            kept.append((name, data[: room - cost]))
            break
        kept.append((name, data))
        room -= cost + len(data)
    return kept


# --- diagnoses --------------------------------------------------------------------------------


def fit_diagnosis(
    diagnosis: dict[str, Any], measure: Callable[[dict[str, Any]], int], budget: int
) -> tuple[dict[str, Any], bool]:
    """(the diagnosis or a bounded copy that fits `budget`, whether it was cut).

    `measure(d)` is the size of the record `d` would be published as. Strings and lists are
    cut more tightly level by level; a bounded copy says `"truncated": true`. If even the
    tightest level does not fit, only the identifying fields are kept."""
    if measure(diagnosis) <= budget:
        return diagnosis, False
    for max_chars, max_items in DIAGNOSIS_LEVELS:
        bounded = _bound(diagnosis, max_chars, max_items)
        bounded["truncated"] = True
        if measure(bounded) <= budget:
            return bounded, True
    skeleton = {k: diagnosis[k] for k in SKELETON_FIELDS if k in diagnosis}
    last_chars, last_items = DIAGNOSIS_LEVELS[-1]
    bounded = _bound(skeleton, last_chars, last_items)
    bounded["truncated"] = True
    return bounded, True


def _bound(value: Any, max_chars: int, max_items: int) -> Any:
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + ELLIPSIS
    if isinstance(value, list):
        return [_bound(v, max_chars, max_items) for v in value[:max_items]]
    if isinstance(value, dict):
        return {
            _bound(k, max_chars, max_items): _bound(v, max_chars, max_items)
            for k, v in value.items()
        }
    return value
