"""Cross-rank analysis of Flight Recorder dumps, per process group.

Every rank of a group issues the same collectives in the same order, so entries with the
same collective sequence id must agree (operation, shapes, dtypes). From the dumps of one job
this finds, per group:

- `mismatch`: the first sequence id where ranks disagree; the ranks outside the majority's
  fingerprint are the culprits, and both sides' entries are kept.
- `not_scheduled`: ranks whose last collective is behind the one the others are in (they
  never called it: hung before it, or took another code path).
- `behind`: where the dumps say which collectives completed, ranks whose last completed one
  is behind the others' (a stalled rank inside the same collective).
- `no_dump`: members of a group that is stuck whose dump is missing (a process that died
  does not dump), when nothing else explains the stall.
- `unmatched_send` / `unmatched_recv`: a send with no matching recv on its peer (matched in
  order per sender and receiver), or the reverse.

Per rank it also picks the entries worth showing: the collective it waits in, its last
completed one, and its entry at the first mismatched sequence id.

The rules run in Rust (`rankwatch-core`'s `flight_recorder_analysis`), in one call over every
dump's entries as the reader keeps them, without the GIL; only the findings and the entries
they name come back as Python objects. Here: which dump stands for a rank, each group's
members from the dumps' `pg_config`, and the typed results."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from rankwatch import _core
from rankwatch.flight_recorder.model import Dump, Entries, Entry

KINDS = ("mismatch", "not_scheduled", "behind", "no_dump", "unmatched_send", "unmatched_recv")


@dataclass
class Finding:
    """One conclusion about one group. `culprits` are the ranks it blames; `entry` is the
    first culprit's entry at `seq` (or its last one when it never reached `seq`), `other`
    the entry the other ranks (`other_ranks`) have there."""

    kind: str
    pg: str
    pg_desc: str
    pg_id: int | None
    seq: int
    culprits: list[int]
    other_ranks: list[int]
    entry: Entry | None = None
    other: Entry | None = None
    peer: int | None = None  # for p2p: the rank at the other end
    missing_dumps: list[int] = field(default_factory=list)
    tie: bool = False  # two equal groups disagree: no majority says who is odd


@dataclass
class Shown:
    """An entry of one rank worth a line, and why: `waiting` (not completed),
    `last_recorded` (its last collective, where the dumps do not say what completed, as
    Gloo's do not), `last_completed`, `at_mismatch`."""

    rank: int
    why: str
    entry: Entry


@dataclass
class Analysis:
    findings: list[Finding]
    shown: list[Shown]
    groups: int
    ranks: list[int]


def rank_list(ranks: Iterable[int]) -> str:
    """`0-3,5,7-9`."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def analyze(dumps: Sequence[Dump]) -> Analysis:
    """Findings for every process group the dumps mention, most telling first."""
    by_rank: dict[int, Dump] = {}
    for d in dumps:  # the same rank twice (two dumps of one process): the later file wins
        by_rank[d.rank] = d
    chosen = list(by_rank.values())
    tables = [_table(d.entries) for d in chosen]
    names = [set(t.pg_names()) for t in tables]
    members = _members(chosen, names)
    found, shown_at, groups = _core.fr_analyze(tables, list(by_rank), members)
    # build the entries that findings and lines name, one call per dump
    wanted: dict[int, set[int]] = defaultdict(set)
    for f in found:
        for ref in (f[7], f[8]):
            if ref is not None:
                wanted[ref[0]].add(ref[1])
    for _, _, di, ei in shown_at:
        wanted[di].add(ei)
    built: dict[tuple[int, int], Entry] = {}
    for di, idx in wanted.items():
        order = sorted(idx)
        for i, e in zip(order, _take(chosen[di].entries, order), strict=True):
            built[(di, i)] = e
    findings = [
        Finding(
            kind=kind,
            pg=pg,
            pg_desc=desc,
            pg_id=pg_id,
            seq=seq,
            culprits=culprits,
            other_ranks=others,
            entry=None if entry is None else built[entry],
            other=None if other is None else built[other],
            peer=peer,
            missing_dumps=missing,
            tie=tie,
        )
        for (
            kind,
            pg,
            desc,
            pg_id,
            seq,
            culprits,
            others,
            entry,
            other,
            peer,
            missing,
            tie,
        ) in found
    ]
    shown = [Shown(rank, why, built[(di, ei)]) for rank, why, di, ei in shown_at]
    return Analysis(findings, shown, groups, sorted(by_rank))


def _table(entries: Sequence[Entry]) -> _core.FrEntries:
    if isinstance(entries, Entries):
        return entries.table
    return _core.FrEntries.from_entries(entries)


def _take(entries: Sequence[Entry], index: list[int]) -> list[Entry]:
    if isinstance(entries, Entries):
        return entries.take(index)
    return [entries[i] for i in index]


def _members(dumps: list[Dump], names: list[set[str]]) -> dict[str, list[int]]:
    """Each group's global ranks, from `pg_config` where a dump states them (a dump whose
    only group is stored under another name, as Gloo's default group is, counts for the
    only group it has entries of). Groups no dump configures are left out: their members
    are the ranks whose dumps hold entries of them."""
    ranks: dict[str, set[int]] = defaultdict(set)
    seen: dict[str, set[tuple[int, ...]]] = defaultdict(set)
    for pg in set().union(*names) if names else ():
        for d, own in zip(dumps, names, strict=True):
            cfg = d.groups.get(pg)
            if cfg is None and len(d.groups) == 1 and own == {pg}:
                cfg = next(iter(d.groups.values()))
            if cfg is not None and cfg.ranks and cfg.ranks not in seen[pg]:
                seen[pg].add(cfg.ranks)  # most dumps state the same list
                ranks[pg].update(cfg.ranks)
    return {pg: sorted(rs) for pg, rs in ranks.items() if rs}
