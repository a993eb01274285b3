"""The cross-rank analysis as it was written in Python before it moved to Rust
(`rankwatch-core`'s `flight_recorder_analysis`), kept as the reference that the Rust rules
are compared with (test_fr_rust_analysis). Unchanged but for this paragraph and the result
types, which are the package's own.

Cross-rank analysis of Flight Recorder dumps, per process group.

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
completed one, and its entry at the first mismatched sequence id."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

# The result types are the package's own: only the rules are kept as they were.
from rankwatch.flight_recorder.analysis import KINDS, Analysis, Finding, Shown
from rankwatch.flight_recorder.model import Dump, Entry
from rankwatch.flight_recorder.reader import no_gc


def analyze(dumps: Sequence[Dump]) -> Analysis:
    """Findings for every process group the dumps mention, most telling first."""
    with no_gc():
        try:
            return _analyze(dumps)
        finally:
            _CANON.clear()


def _analyze(dumps: Sequence[Dump]) -> Analysis:
    by_rank: dict[int, Dump] = {}
    for d in dumps:  # the same rank twice (two dumps of one process): the later file wins
        by_rank[d.rank] = d
    per_pg: dict[str, dict[int, list[Entry]]] = defaultdict(lambda: defaultdict(list))
    for rank, d in by_rank.items():
        for e in d.entries:
            per_pg[e.pg][rank].append(e)
    findings: list[Finding] = []
    shown: list[Shown] = []
    for pg in sorted(per_pg):
        entries = per_pg[pg]
        members = _members(pg, by_rank, entries)
        group = _Group(pg, entries, members, set(by_rank))
        found = _explained(group.collectives(), group.p2p())
        findings.extend(found)
        if found:
            shown.extend(group.shown(found))
    order = {k: i for i, k in enumerate(KINDS)}
    findings.sort(key=lambda f: (order[f.kind], f.tie, f.seq, f.pg))
    return Analysis(findings, shown, len(per_pg), sorted(by_rank))


# Fingerprints by value, shared by every rank's rows during one analysis (cleared after it).
_CANON: dict[object, object] = {}


def _explained(colls: list[Finding], p2p: list[Finding]) -> list[Finding]:
    """A rank stuck in a send or recv that its peer never matched did not reach the next
    collective because of that peer: the p2p finding names the culprit, and the rank is
    no longer blamed for not calling the collective."""
    stuck = {f.other_ranks[0] for f in p2p if f.other_ranks}
    out = list(p2p)
    for f in colls:
        if f.kind == "not_scheduled":
            f.culprits = [r for r in f.culprits if r not in stuck]
            if not f.culprits:
                continue
        out.append(f)
    return out


def _members(pg: str, dumps: dict[int, Dump], entries: dict[int, list[Entry]]) -> list[int]:
    """The group's global ranks: from `pg_config` where a dump states them (a dump whose
    only group is stored under another name, as Gloo's default group is, counts for the
    only group it has entries of), else the ranks whose dumps hold entries of it."""
    ranks: set[int] = set()
    for d in dumps.values():
        cfg = d.groups.get(pg)
        if cfg is None and len(d.groups) == 1:
            names = {e.pg for e in d.entries}
            if names == {pg}:
                cfg = next(iter(d.groups.values()))
        if cfg is not None and cfg.ranks:
            ranks.update(cfg.ranks)
    return sorted(ranks) if ranks else sorted(entries)


class _Group:
    def __init__(
        self, pg: str, entries: dict[int, list[Entry]], members: list[int], dumped: set[int]
    ) -> None:
        self.pg = pg
        self.entries = entries
        self.members = members
        self.dumped = dumped
        any_entry = next(e for es in entries.values() for e in es)
        self.desc = any_entry.pg_desc
        self.pg_id = any_entry.pg_id
        # per rank: sequence id -> the entries issued under it (one, or a coalesced batch)
        self.colls: dict[int, dict[int, list[Entry]]] = {}
        # per rank: sequence id -> what must agree there; the last fully completed id
        self.fps: dict[int, dict[int, object]] = {}
        self.done: dict[int, int | None] = {}
        for rank, es in entries.items():
            seqs: dict[int, list[Entry]] = {}
            for e in es:
                if not e.is_p2p:
                    got = seqs.get(e.seq)
                    if got is None:
                        seqs[e.seq] = [e]
                    else:
                        got.append(e)
            if not seqs:
                continue
            self.colls[rank] = seqs
            # equal fingerprints of all ranks become one object, so that rows of equal
            # fingerprints compare by identity (a dump shares its own already)
            local: dict[int, object] = {}
            fps: dict[int, object] = {}
            for s, g in seqs.items():
                fp: object = g[0].fingerprint() if len(g) == 1 else tuple(e.fp for e in g)
                canon = local.get(id(fp))
                if canon is None:
                    canon = local[id(fp)] = _CANON.setdefault(fp, fp)
                fps[s] = canon
            self.fps[rank] = fps
            completed = [
                s
                for s, g in seqs.items()
                if g[-1].state == "completed" and all(e.state == "completed" for e in g)
            ]
            self.done[rank] = max(completed) if completed else None
        self.mismatch_seq: int | None = None
        # whether the dumps say which collectives completed (Gloo leaves every entry
        # 'scheduled'; its pg_status counts a failed collective as completed)
        self.states_known = any(e.state != "scheduled" for es in entries.values() for e in es)

    def finding(self, kind: str, seq: int, culprits: list[int], others: list[int]) -> Finding:
        return Finding(
            kind=kind,
            pg=self.pg,
            pg_desc=self.desc,
            pg_id=self.pg_id,
            seq=seq,
            culprits=sorted(culprits),
            other_ranks=sorted(others),
            missing_dumps=[r for r in self.members if r not in self.dumped],
        )

    # --- collectives --------------------------------------------------------------------

    def collectives(self) -> list[Finding]:
        if not self.colls:
            return []
        out: list[Finding] = []
        mismatch = self._first_mismatch()
        if mismatch is not None:
            out.append(mismatch)
        out.extend(self._not_scheduled())
        if self.states_known:
            out.extend(self._behind({r for f in out for r in f.culprits}))
        if not out:
            out.extend(self._no_dump())
        return out

    def _first_mismatch(self) -> Finding | None:
        lo = max(min(seqs) for seqs in self.colls.values())
        hi = min(max(seqs) for seqs in self.colls.values())
        if lo > hi or len(self.colls) < 2:
            return None
        rng = range(lo, hi + 1)
        rows = {rank: tuple(map(fps.get, rng)) for rank, fps in self.fps.items()}
        groups: list[tuple[tuple[object, ...], list[int]]] = []
        for rank, row in rows.items():
            for rep, members in groups:
                if row == rep:  # element by element, equal objects by identity
                    members.append(rank)
                    break
            else:
                groups.append((row, [rank]))
        common = max(groups, key=lambda g: len(g[1]))[0]
        first: int | None = None
        for row in rows.values():
            if row == common:
                continue
            for i, (a, b) in enumerate(zip(row, common, strict=True)):
                if a != b:
                    first = i if first is None else min(first, i)
                    break
        if first is None:
            return None
        seq = lo + first
        sides: dict[object, list[int]] = defaultdict(list)
        for rank, row in rows.items():
            sides[row[first]].append(rank)
        ranked = sorted(sides.items(), key=lambda kv: (-len(kv[1]), min(kv[1])))
        major_fp, major = ranked[0]
        tie = len(ranked) > 1 and len(ranked[1][1]) == len(major)
        culprits = [r for fp, rs in ranked[1:] for r in rs]
        f = self.finding("mismatch", seq, culprits, major)
        f.tie = tie
        f.entry = self._at(culprits[0], seq)
        f.other = self._at(major[0], seq)
        self.mismatch_seq = seq
        del major_fp
        return f

    def _at(self, rank: int, seq: int) -> Entry | None:
        es = self.colls.get(rank, {}).get(seq)
        return es[-1] if es else None

    def _last(self, rank: int) -> Entry | None:
        seqs = self.colls.get(rank)
        return seqs[max(seqs)][-1] if seqs else None

    def _not_scheduled(self) -> list[Finding]:
        last = {rank: max(seqs) for rank, seqs in self.colls.items()}
        frontier = max(last.values())
        waiting = [r for r, s in last.items() if s == frontier]
        behind = [r for r, s in last.items() if s < frontier]
        if not behind:
            return []
        # A collective every waiting rank completed is not one anybody waits in.
        if all(
            (e := self._at(r, frontier)) is not None and e.state == "completed" for r in waiting
        ):
            return []
        out = []
        for r in sorted(behind, key=lambda r: (last[r], r)):
            f = self.finding("not_scheduled", frontier, [r], waiting)
            f.entry = self._last(r)
            f.other = self._at(waiting[0], frontier)
            out.append(f)
        # one finding per distinct place the laggards stopped: keep the first of each
        kept: dict[int, Finding] = {}
        for f in out:
            seq_of = f.entry.seq if f.entry is not None else -1
            if seq_of in kept:
                kept[seq_of].culprits.append(f.culprits[0])
            else:
                kept[seq_of] = f
        return list(kept.values())

    def _behind(self, blamed: set[int]) -> list[Finding]:
        done: dict[int, int] = {}
        for rank, seqs in self.colls.items():
            last_done = self.done[rank]
            done[rank] = last_done if last_done is not None else min(seqs) - 1
        best = max(done.values())
        ahead = [r for r, s in done.items() if s == best]
        late = [
            r
            for r, s in done.items()
            if s < best and r not in blamed and self._at(r, s + 1) is not None
        ]  # (a rank with nothing after its last completed one is not inside a collective)
        if not late or len(late) >= len(ahead):
            return []  # most ranks are there: the few ahead are not the norm
        f = self.finding("behind", best, late, ahead)
        f.entry = self._at(late[0], done[late[0]] + 1) or self._last(late[0])
        f.other = self._at(ahead[0], best)
        return [f]

    def _no_dump(self) -> list[Finding]:
        missing = [r for r in self.members if r not in self.dumped]
        if not missing or not self.colls:
            return []
        last = {rank: max(seqs) for rank, seqs in self.colls.items()}
        frontier = max(last.values())
        waiting = [r for r, s in last.items() if s == frontier]
        if self.states_known and all(
            (e := self._at(r, frontier)) is not None and e.state == "completed" for r in waiting
        ):
            return []
        f = self.finding("no_dump", frontier, missing, waiting)
        f.other = self._at(waiting[0], frontier)
        return [f]

    # --- point to point -----------------------------------------------------------------

    def p2p(self) -> list[Finding]:
        group_ranks = self.members
        sends: dict[tuple[int, int], list[tuple[int, Entry]]] = defaultdict(list)
        recvs: dict[tuple[int, int], list[tuple[int, Entry]]] = defaultdict(list)
        for rank, es in self.entries.items():
            for e in es:
                if e.peers is None or e.op not in ("send", "recv"):
                    continue
                src, dst = (self._global(x, group_ranks) for x in e.peers)
                if src is None or dst is None:
                    continue
                if e.op == "send" and src == rank:
                    sends[(src, dst)].append((rank, e))
                elif e.op == "recv" and dst == rank:
                    recvs[(src, dst)].append((rank, e))
        out: list[Finding] = []
        for (src, dst), sent in sorted(sends.items()):
            if dst not in self.dumped:
                continue
            got = recvs.get((src, dst), [])
            oldest = _oldest_time(self.entries.get(dst, []))
            for _, e in sent[len(got) :]:
                if _before(e, oldest):
                    continue  # the receiver's ring no longer reaches back that far
                f = self.finding("unmatched_send", e.p2p_seq or e.seq, [dst], [src])
                f.entry, f.peer = e, src
                out.append(f)
                break  # the first one is the one that matters
        for (src, dst), got in sorted(recvs.items()):
            if src not in self.dumped:
                continue
            sent = sends.get((src, dst), [])
            oldest = _oldest_time(self.entries.get(src, []))
            for _, e in got[len(sent) :]:
                if _before(e, oldest):
                    continue
                f = self.finding("unmatched_recv", e.p2p_seq or e.seq, [src], [dst])
                f.entry, f.peer = e, dst
                out.append(f)
                break
        return out

    @staticmethod
    def _global(group_rank: int | None, members: list[int]) -> int | None:
        if group_rank is None:
            return None
        return members[group_rank] if 0 <= group_rank < len(members) else None

    # --- what to show per rank ------------------------------------------------------------

    def shown(self, found: list[Finding]) -> list[Shown]:
        out: list[Shown] = []
        for rank in sorted(self.colls):
            seqs = self.colls[rank]
            last = seqs[max(seqs)][-1]
            if not self.states_known:  # the dumps cannot say whether it is still running
                out.append(Shown(rank, "last_recorded", last))
            elif last.state != "completed":
                out.append(Shown(rank, "waiting", last))
            last_done = self.done[rank]
            if last_done is not None:
                out.append(Shown(rank, "last_completed", seqs[last_done][-1]))
            if self.mismatch_seq is not None and self.mismatch_seq in seqs:
                e = seqs[self.mismatch_seq][-1]
                if e is not last:
                    out.append(Shown(rank, "at_mismatch", e))
        for f in found:
            if f.kind.startswith("unmatched") and f.entry is not None:
                out.append(Shown(f.other_ranks[0], "waiting", f.entry))
        return out


def _before(e: Entry, oldest: int | None) -> bool:
    return oldest is not None and e.time_created_ns is not None and e.time_created_ns < oldest


def _oldest_time(entries: list[Entry]) -> int | None:
    times = [e.time_created_ns for e in entries if e.time_created_ns is not None]
    return min(times) if times else None
