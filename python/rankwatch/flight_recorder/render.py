"""Flight Recorder findings as log lines, so that they take part in the engine's ranking like
any line a rank printed.

Each line reads as a sentence a person can take as a root cause, starts with torch's own
`[rankN]: ` prefix (the engine takes the rank from it) and, where the dump has a time, with
that time, then `Flight Recorder: `. The facts follow in brackets as `name=value; ...` with
the field names the watchdog rules read from torch's own lines (`pg`, `seq`, `op_type`,
`numel_in`, `numel_out`, `dtype`, `state`) plus `call_site` (the first stack frame outside
torch) and, for findings, the other side's values (`other_*`). The catalog's
`flight_recorder.toml` recognises every shape written here."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

from rankwatch.flight_recorder.analysis import Analysis, Finding, rank_list
from rankwatch.flight_recorder.model import Entry

PREFIX = "Flight Recorder: "
_WHY = {
    "waiting": "waits in",
    "last_recorded": "last recorded",
    "last_completed": "last completed",
    "at_mismatch": "at the first mismatch ran",
}


@dataclass
class RankLines:
    """The lines one rank gets: printed as if by that rank, in time order."""

    rank: int
    lines: list[tuple[int | None, str]]  # (time in ns or None, line)

    def text(self) -> bytes:
        ordered = sorted(self.lines, key=lambda tl: (tl[0] is None, tl[0] or 0))
        return "".join(line + "\n" for _, line in ordered).encode()


def _clean(value: str) -> str:
    """A value inside the bracket: no separator, no bracket, no line break."""
    return value.replace(";", ",").replace("]", ")").replace("\n", " ").replace("\r", " ")


def _stamp(ns: int | None) -> str:
    if ns is None or ns <= 0:
        return ""
    try:
        t = dt.datetime.fromtimestamp(ns / 1e9, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return ""
    return "[" + t.strftime("%Y-%m-%d %H:%M:%S.%f") + "] "


def _facts(pairs: list[tuple[str, object]]) -> str:
    kept = [f"{k}={_clean(str(v))}" for k, v in pairs if v is not None and v != ""]
    return " [" + "; ".join(kept) + "]"


def _pg(e: Entry | None, f: Finding | None = None) -> str:
    pg_id = e.pg_id if e is not None else f.pg_id if f is not None else None
    name = e.pg if e is not None else f.pg if f is not None else ""
    desc = e.pg_desc if e is not None else f.pg_desc if f is not None else ""
    label = str(pg_id) if pg_id is not None else (name or "?")
    return f"process group {label}" + (f" ({desc})" if desc else "")


def _shape(e: Entry) -> str:
    """`ALLREDUCE of 2048 Float` / `BARRIER`."""
    n = max(e.numel_in(), e.numel_out())
    if not e.input_sizes and not e.output_sizes:
        return e.op_type
    return f"{e.op_type} of {n:,} {e.dtype()}".rstrip()


def _site(e: Entry | None) -> str | None:
    if e is None:
        return None
    f = e.call_site()
    return f.site() if f is not None else None


def _entry_facts(e: Entry, prefix: str = "") -> list[tuple[str, object]]:
    seq_key = "pair_seq" if e.is_p2p else "seq"
    seq = e.p2p_seq if e.is_p2p and e.p2p_seq is not None else e.seq
    return [
        (prefix + seq_key, seq),
        (prefix + "op_type", e.op_type),
        (prefix + "numel_in", e.numel_in()),
        (prefix + "numel_out", e.numel_out()),
        (prefix + "dtype", e.dtype()),
        (prefix + "state", e.state if not prefix else None),
        (prefix + "call_site", _site(e)),
    ]


def entry_line(rank: int, why: str, e: Entry) -> str:
    what = f"send #{e.p2p_seq}" if e.is_p2p else f"collective #{e.seq}"
    if e.is_p2p and e.op == "recv":
        what = f"recv #{e.p2p_seq}"
    site = _site(e)
    text = f"{PREFIX}rank {rank} {_WHY.get(why, why)} {what} {_shape(e)} in {_pg(e)}, {e.state}" + (
        f", from {site}" if site else ""
    )
    facts = [("pg", e.pg_id), ("pg_name", e.pg), ("fr_role", why), *_entry_facts(e)]
    return f"{_stamp(e.time_ns())}[rank{rank}]: {text}{_facts(facts)}"


# What one finding says: its text, its facts and the time of the entry it rests on.
_Said = tuple[str, list[tuple[str, object]], int | None]


def _base(f: Finding) -> list[tuple[str, object]]:
    return [("pg", f.pg_id), ("pg_name", f.pg)]


def _missing(f: Finding) -> str | None:
    return rank_list(f.missing_dumps) if f.missing_dumps else None


def _mismatch_gap(rank: int, f: Finding) -> _Said:
    # A rank of the odd side that recorded nothing at this sequence id (a gap in its buffer):
    # what the others called is all there is to show.
    seen = f.other if f.other is not None else f.entry
    others = rank_list(f.other_ranks)
    text = (
        f"collective mismatch at #{f.seq} of {_pg(seen, f)}: rank {rank} has no record of "
        f"it, while rank(s) {others} called {_shape(seen) if seen is not None else '?'}"
    )
    facts = [*_base(f), ("seq", f.seq), ("other_ranks", others), ("missing_dumps", _missing(f))]
    return text, facts, seen.time_ns() if seen is not None else None


def _mismatch(rank: int, f: Finding) -> _Said:
    e, o = f.entry, f.other
    if e is None or o is None:
        return _mismatch_gap(rank, f)
    odd = rank_list(f.culprits) if f.tie else str(rank)
    others = rank_list(f.other_ranks)
    text = (
        f"collective mismatch at #{f.seq} of {_pg(e, f)}: rank {odd} called {_shape(e)}"
        + (f" from {_site(e)}" if _site(e) else "")
        + f", while rank(s) {others} called {_shape(o)}"
        + (f" from {_site(o)}" if _site(o) else "")
        + (" (two equal groups: no majority says which side is wrong)" if f.tie else "")
    )
    facts = [
        *_base(f),
        *_entry_facts(e),
        ("other_ranks", others),
        *_entry_facts(o, "other_"),
        ("missing_dumps", _missing(f)),
    ]
    return text, facts, e.time_ns()


def _not_scheduled(rank: int, f: Finding) -> _Said:
    e, o = f.entry, f.other
    want = o.op_type if o is not None else "?"
    last = f"#{e.seq} {_shape(e)}" if e is not None else "none recorded"
    others = rank_list(f.other_ranks)
    text = (
        f"rank {rank} never called collective #{f.seq} ({want}) of {_pg(o, f)} that "
        f"rank(s) {others} wait in; its last collective was {last}"
        + (f" from {_site(e)}" if _site(e) else "")
    )
    facts = [
        *_base(f),
        ("seq", f.seq),
        ("op_type", want),
        ("last_enqueued", e.seq if e is not None else None),
        ("last_op_type", e.op_type if e is not None else None),
        ("call_site", _site(e)),
        ("waiting_ranks", others),
        ("other_call_site", _site(o)),
        ("missing_dumps", _missing(f)),
    ]
    return text, facts, e.time_ns() if e is not None else None


def _behind(rank: int, f: Finding) -> _Said:
    e, o = f.entry, f.other
    others = rank_list(f.other_ranks)
    text = (
        f"rank {rank} is behind: its last completed collective of {_pg(e, f)} is "
        f"#{e.seq - 1 if e is not None else '?'} while rank(s) {others} completed #{f.seq}"
        + (f"; it is stuck in #{e.seq} {_shape(e)} ({e.state})" if e is not None else "")
        + (f" from {_site(e)}" if _site(e) else "")
    )
    facts = [
        *_base(f),
        *(_entry_facts(e) if e is not None else []),
        ("last_completed", e.seq - 1 if e is not None else None),
        ("other_ranks", others),
        ("other_call_site", _site(o)),
    ]
    return text, facts, e.time_ns() if e is not None else None


def _no_dump(rank: int, f: Finding) -> _Said:
    o = f.other
    want = _shape(o) if o is not None else "?"
    others = rank_list(f.other_ranks)
    text = (
        f"rank {rank} wrote no dump while rank(s) {others} wait in collective #{f.seq} "
        f"{want} of {_pg(o, f)}"
        + (f" from {_site(o)}" if _site(o) else "")
        + ": it may have died or hung before it could dump"
    )
    facts = [
        *_base(f),
        ("seq", f.seq),
        ("op_type", o.op_type if o is not None else None),
        ("waiting_ranks", others),
        ("other_call_site", _site(o)),
        ("missing_dumps", _missing(f)),
    ]
    return text, facts, o.time_ns() if o is not None else None


def _unmatched_p2p(rank: int, f: Finding) -> _Said:
    e, peer = f.entry, f.peer
    assert e is not None
    site = f", from {_site(e)}" if _site(e) else ""
    if f.kind == "unmatched_send":
        text = (
            f"rank {peer} sent {e.numel_in():,} {e.dtype()} elements to rank {rank} "
            f"(send #{e.p2p_seq} of {_pg(e, f)}{site}), but rank {rank} never posted the "
            "matching recv"
        )
        role = ("sender_rank", peer)
    else:
        text = (
            f"rank {peer} waits to receive {e.numel_out():,} {e.dtype()} elements from "
            f"rank {rank} (recv #{e.p2p_seq} of {_pg(e, f)}{site}), but rank {rank} never "
            "posted the matching send"
        )
        role = ("receiver_rank", peer)
    facts = [*_base(f), *_entry_facts(e), role, ("missing_dumps", _missing(f))]
    return text, facts, e.time_ns()


_BY_KIND = {
    "mismatch": _mismatch,
    "not_scheduled": _not_scheduled,
    "behind": _behind,
    "no_dump": _no_dump,
}


def finding_line(rank: int, f: Finding) -> str:
    text, facts, when = _BY_KIND.get(f.kind, _unmatched_p2p)(rank, f)
    return f"{_stamp(when)}[rank{rank}]: {PREFIX}{text}{_facts(facts)}"


def render(analysis: Analysis) -> dict[int, RankLines]:
    """Per rank, the lines it gets: its findings and its entries worth showing."""
    out: dict[int, RankLines] = defaultdict(lambda: RankLines(0, []))

    def lines_of(rank: int) -> RankLines:
        got = out[rank]
        got.rank = rank
        return got

    seen: set[tuple[int, str, int]] = set()
    for s in analysis.shown:
        key = (s.rank, s.why, s.entry.pos)
        if key in seen:
            continue
        seen.add(key)
        lines_of(s.rank).lines.append((s.entry.time_ns(), entry_line(s.rank, s.why, s.entry)))
    for f in analysis.findings:
        for rank in f.culprits:
            line = finding_line(rank, f)
            when = f.entry.time_ns() if f.entry is not None else None
            if f.kind == "no_dump" and f.other is not None:
                when = f.other.time_ns()
            lines_of(rank).lines.append((when, line))
    return dict(out)
