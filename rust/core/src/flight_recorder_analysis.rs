//! Cross-rank analysis of Flight Recorder dumps, per process group: the rules that
//! `rankwatch.flight_recorder.analysis` documents (first mismatch, ranks that never
//! scheduled the collective the others are in, the completion wavefront, members without a
//! dump, unmatched send/recv), over the checked entries of every rank's dump as the reader
//! keeps them (`flight_recorder::Checked`), returning only the findings and the entries worth
//! showing, as references into the dumps.
//!
//! Equal fingerprints (operation, shapes, dtypes) of different dumps get one id here, so the
//! comparison of ranks compares integers. A sequence id missing from a rank compares as
//! "nothing there", as in the Python rules this follows; gaps between sequence ids are never
//! filled in, so a dump with ids far apart costs what its entries cost.

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt, HashSet};

use crate::flight_recorder::{Checked, Entry};

const COMPLETED: u8 = 2;
const SCHEDULED: u8 = 0;

/// What a finding says, in the order findings are listed (most telling first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Mismatch,
    NotScheduled,
    Behind,
    NoDump,
    UnmatchedSend,
    UnmatchedRecv,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Mismatch => "mismatch",
            Kind::NotScheduled => "not_scheduled",
            Kind::Behind => "behind",
            Kind::NoDump => "no_dump",
            Kind::UnmatchedSend => "unmatched_send",
            Kind::UnmatchedRecv => "unmatched_recv",
        }
    }
}

/// Why an entry of a rank is worth a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Waiting,
    LastRecorded,
    LastCompleted,
    AtMismatch,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Waiting => "waiting",
            Why::LastRecorded => "last_recorded",
            Why::LastCompleted => "last_completed",
            Why::AtMismatch => "at_mismatch",
        }
    }
}

/// An entry: the index of its dump among those analyzed, and its index in that dump's
/// kept entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct At {
    pub dump: u32,
    pub entry: u32,
}

/// One conclusion about one group (see the Python `Finding`).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: Kind,
    pub pg: String,
    pub pg_desc: String,
    pub pg_id: Option<i64>,
    pub seq: i64,
    pub culprits: Vec<i64>,
    pub other_ranks: Vec<i64>,
    pub entry: Option<At>,
    pub other: Option<At>,
    pub peer: Option<i64>,
    pub missing_dumps: Vec<i64>,
    pub tie: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub rank: i64,
    pub why: Why,
    pub entry: At,
}

#[derive(Debug, Default)]
pub struct Analysis {
    pub findings: Vec<Finding>,
    pub shown: Vec<Shown>,
    /// Process groups the dumps mention.
    pub groups: usize,
}

/// One rank's dump. Ranks are distinct (the caller keeps one dump per rank).
pub struct Input<'a> {
    pub rank: i64,
    pub dump: &'a Checked,
}

/// Findings for every process group the dumps mention. `members` gives a group's global
/// ranks (sorted) where a dump's `pg_config` states them; for any other group they are the
/// ranks whose dumps hold entries of it.
pub fn analyze<S: std::hash::BuildHasher>(
    dumps: &[Input<'_>],
    members: &std::collections::HashMap<String, Vec<i64>, S>,
) -> Analysis {
    let fps = Fingerprints::new(dumps);
    // the groups by name, and each dump's group table mapped onto them
    let mut pg_ids: HashMap<&str, u32> = HashMap::new();
    let mut pg_names: Vec<&str> = Vec::new();
    let local_pg: Vec<Vec<u32>> = dumps
        .iter()
        .map(|d| {
            d.dump
                .groups
                .iter()
                .map(|(name, _)| {
                    *pg_ids.entry(name.as_str()).or_insert_with(|| {
                        pg_names.push(name.as_str());
                        pg_names.len() as u32 - 1
                    })
                })
                .collect()
        })
        .collect();
    // per group: the dumps with entries of it (in the order given) and those entries
    let mut per_pg: Vec<Vec<(u32, Vec<u32>)>> = vec![Vec::new(); pg_names.len()];
    for (di, d) in dumps.iter().enumerate() {
        for (i, e) in d.dump.entries.iter().enumerate() {
            let rows = &mut per_pg[local_pg[di][e.group as usize] as usize];
            match rows.last_mut() {
                Some((last, idx)) if *last == di as u32 => idx.push(i as u32),
                _ => rows.push((di as u32, vec![i as u32])),
            }
        }
    }
    let dumped: HashSet<i64> = dumps.iter().map(|d| d.rank).collect();
    let mut order: Vec<u32> = (0..pg_names.len() as u32)
        .filter(|&p| !per_pg[p as usize].is_empty())
        .collect();
    order.sort_by_key(|&p| pg_names[p as usize]);
    let mut out = Analysis {
        groups: order.len(),
        ..Analysis::default()
    };
    for p in order {
        let name = pg_names[p as usize];
        let rows = std::mem::take(&mut per_pg[p as usize]);
        let members = match members.get(name) {
            Some(m) if !m.is_empty() => m.clone(),
            _ => {
                let mut m: Vec<i64> = rows.iter().map(|(d, _)| dumps[*d as usize].rank).collect();
                m.sort_unstable();
                m
            }
        };
        let mut group = Group::new(name, dumps, &rows, members, &dumped, &fps);
        let colls = group.collectives();
        let p2p = group.p2p();
        let found = explained(colls, p2p);
        if !found.is_empty() {
            out.shown.extend(group.shown(&found));
        }
        out.findings.extend(found);
    }
    out.findings
        .sort_by(|a, b| (a.kind, a.tie, a.seq, &a.pg).cmp(&(b.kind, b.tie, b.seq, &b.pg)));
    out
}

/// A rank stuck in a send or recv that its peer never matched did not reach the next
/// collective because of that peer: the p2p finding names the culprit, and the rank is no
/// longer blamed for not calling the collective.
fn explained(colls: Vec<Finding>, p2p: Vec<Finding>) -> Vec<Finding> {
    let stuck: HashSet<i64> = p2p
        .iter()
        .filter_map(|f| f.other_ranks.first().copied())
        .collect();
    let mut out = p2p;
    for mut f in colls {
        if f.kind == Kind::NotScheduled {
            f.culprits.retain(|r| !stuck.contains(r));
            if f.culprits.is_empty() {
                continue;
            }
        }
        out.push(f);
    }
    out
}

type FpKey<'a> = (
    &'a str,
    &'a [Vec<i64>],
    &'a [Vec<i64>],
    &'a [String],
    &'a [String],
);

/// Fingerprints by value across dumps: `of[dump][local fingerprint]` is its global id.
struct Fingerprints {
    of: Vec<Vec<u32>>,
    count: u32,
}

impl Fingerprints {
    fn new(dumps: &[Input<'_>]) -> Self {
        let mut ids: HashMap<FpKey<'_>, u32> = HashMap::new();
        let of = dumps
            .iter()
            .map(|d| {
                let c = d.dump;
                c.fps
                    .iter()
                    .map(|k| {
                        let key: FpKey<'_> = (
                            c.ops[k[0] as usize].as_str(),
                            &c.shapes[k[1] as usize],
                            &c.shapes[k[2] as usize],
                            &c.dtypes[k[3] as usize],
                            &c.dtypes[k[4] as usize],
                        );
                        let n = ids.len() as u32;
                        *ids.entry(key).or_insert(n)
                    })
                    .collect()
            })
            .collect();
        Fingerprints {
            of,
            count: ids.len() as u32,
        }
    }
}

/// One rank's collectives in one group: its entries by sequence id.
struct Colls {
    dump: u32,
    rank: i64,
    /// (sequence id, what must agree there), ascending by sequence id
    keys: Vec<(i64, u32)>,
    /// per sequence id: the range of `entries` issued under it (one, or a coalesced batch)
    spans: Vec<(u32, u32)>,
    entries: Vec<u32>,
    /// the last sequence id whose entries all completed
    done: Option<i64>,
}

impl Colls {
    fn last_seq(&self) -> i64 {
        self.keys[self.keys.len() - 1].0
    }

    fn first_seq(&self) -> i64 {
        self.keys[0].0
    }

    fn find(&self, seq: i128) -> Option<usize> {
        let seq = i64::try_from(seq).ok()?;
        self.keys.binary_search_by_key(&seq, |k| k.0).ok()
    }

    /// The last entry issued under `seq`.
    fn at(&self, seq: i128) -> Option<At> {
        self.find(seq).map(|i| self.at_index(i))
    }

    fn at_index(&self, i: usize) -> At {
        At {
            dump: self.dump,
            entry: self.entries[self.spans[i].1 as usize - 1],
        }
    }

    fn last(&self) -> At {
        self.at_index(self.keys.len() - 1)
    }
}

struct Group<'a, 'd> {
    name: &'a str,
    desc: String,
    pg_id: Option<i64>,
    dumps: &'a [Input<'d>],
    /// (dump, its entries of this group, in order)
    rows: &'a [(u32, Vec<u32>)],
    members: Vec<i64>,
    dumped: &'a HashSet<i64>,
    /// ranks with collectives, in the order the dumps were given
    colls: Vec<Colls>,
    by_rank: HashMap<i64, usize>,
    states_known: bool,
    mismatch_seq: Option<i64>,
}

impl<'a, 'd> Group<'a, 'd> {
    fn new(
        name: &'a str,
        dumps: &'a [Input<'d>],
        rows: &'a [(u32, Vec<u32>)],
        members: Vec<i64>,
        dumped: &'a HashSet<i64>,
        fps: &Fingerprints,
    ) -> Self {
        let (d0, first) = (&rows[0].0, rows[0].1[0]);
        let c0 = dumps[*d0 as usize].dump;
        let e0 = &c0.entries[first as usize];
        let desc = c0.groups[e0.group as usize].1.clone();
        let mut multi: HashMap<Vec<u32>, u32> = HashMap::new();
        let mut colls = Vec::new();
        let mut states_known = false;
        for (d, idx) in rows {
            let c = dumps[*d as usize].dump;
            let of = &fps.of[*d as usize];
            let mut order: Vec<(i64, u32)> = Vec::with_capacity(idx.len());
            for &i in idx {
                let e = &c.entries[i as usize];
                states_known |= e.state != SCHEDULED;
                if !e.is_p2p {
                    order.push((e.seq, i));
                }
            }
            if order.is_empty() {
                continue;
            }
            order.sort_by_key(|&(s, _)| s); // stable: a batch keeps its order
            let mut keys = Vec::new();
            let mut spans = Vec::new();
            let mut done = None;
            let mut start = 0usize;
            while start < order.len() {
                let seq = order[start].0;
                let mut end = start + 1;
                while end < order.len() && order[end].0 == seq {
                    end += 1;
                }
                let batch = &order[start..end];
                let entry = |i: u32| -> &Entry { &c.entries[i as usize] };
                let key = if batch.len() == 1 {
                    of[entry(batch[0].1).fp as usize]
                } else {
                    let parts: Vec<u32> = batch
                        .iter()
                        .map(|&(_, i)| of[entry(i).fp as usize])
                        .collect();
                    let n = fps.count + multi.len() as u32;
                    *multi.entry(parts).or_insert(n)
                };
                if batch.iter().all(|&(_, i)| entry(i).state == COMPLETED) {
                    done = Some(seq);
                }
                keys.push((seq, key));
                spans.push((start as u32, end as u32));
                start = end;
            }
            colls.push(Colls {
                dump: *d,
                rank: dumps[*d as usize].rank,
                keys,
                spans,
                entries: order.into_iter().map(|(_, i)| i).collect(),
                done,
            });
        }
        let by_rank = colls.iter().enumerate().map(|(i, c)| (c.rank, i)).collect();
        Group {
            name,
            desc,
            pg_id: e0.pg_id(),
            dumps,
            rows,
            members,
            dumped,
            colls,
            by_rank,
            states_known,
            mismatch_seq: None,
        }
    }

    fn entry(&self, at: At) -> &Entry {
        &self.dumps[at.dump as usize].dump.entries[at.entry as usize]
    }

    fn of(&self, rank: i64) -> Option<&Colls> {
        self.by_rank.get(&rank).map(|&i| &self.colls[i])
    }

    fn at(&self, rank: i64, seq: i128) -> Option<At> {
        self.of(rank).and_then(|c| c.at(seq))
    }

    fn finding(&self, kind: Kind, seq: i64, culprits: &[i64], others: &[i64]) -> Finding {
        let mut culprits = culprits.to_vec();
        culprits.sort_unstable();
        let mut other_ranks = others.to_vec();
        other_ranks.sort_unstable();
        Finding {
            kind,
            pg: self.name.to_owned(),
            pg_desc: self.desc.clone(),
            pg_id: self.pg_id,
            seq,
            culprits,
            other_ranks,
            entry: None,
            other: None,
            peer: None,
            missing_dumps: self.missing(),
            tie: false,
        }
    }

    fn missing(&self) -> Vec<i64> {
        self.members
            .iter()
            .copied()
            .filter(|r| !self.dumped.contains(r))
            .collect()
    }

    // --- collectives --------------------------------------------------------------------

    fn collectives(&mut self) -> Vec<Finding> {
        if self.colls.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        if let Some(f) = self.first_mismatch() {
            out.push(f);
        }
        out.extend(self.not_scheduled());
        if self.states_known {
            let blamed: HashSet<i64> = out
                .iter()
                .flat_map(|f| f.culprits.iter().copied())
                .collect();
            out.extend(self.behind(&blamed));
        }
        if out.is_empty() {
            out.extend(self.no_dump());
        }
        out
    }

    /// The first sequence id where a rank's row (what it ran at each sequence id both the
    /// ranks' dumps cover) differs from the most common row.
    fn first_mismatch(&mut self) -> Option<Finding> {
        if self.colls.len() < 2 {
            return None;
        }
        let lo = self.colls.iter().map(Colls::first_seq).max()?;
        let hi = self.colls.iter().map(Colls::last_seq).min()?;
        if lo > hi {
            return None;
        }
        let rows: Vec<&[(i64, u32)]> = self
            .colls
            .iter()
            .map(|c| {
                let a = c.keys.partition_point(|k| k.0 < lo);
                let b = c.keys.partition_point(|k| k.0 <= hi);
                &c.keys[a..b]
            })
            .collect();
        // equal rows, in the order first seen; the largest (first of equals) is the norm
        let mut seen: HashMap<&[(i64, u32)], usize> = HashMap::new();
        let mut sizes: Vec<(usize, usize)> = Vec::new(); // (first row, count)
        for (i, row) in rows.iter().enumerate() {
            match seen.get(row) {
                Some(&g) => sizes[g].1 += 1,
                None => {
                    seen.insert(row, sizes.len());
                    sizes.push((i, 1));
                }
            }
        }
        let mut common = sizes[0];
        for &s in &sizes[1..] {
            if s.1 > common.1 {
                common = s;
            }
        }
        let common = rows[common.0];
        let first = rows
            .iter()
            .filter(|row| **row != common)
            .filter_map(|row| first_difference(row, common))
            .min()?;
        // the ranks by what they ran there (None: nothing), sides in the order first seen
        let mut sides: Vec<(Option<u32>, Vec<i64>)> = Vec::new();
        for (c, row) in self.colls.iter().zip(&rows) {
            let value = row
                .binary_search_by_key(&first, |k| k.0)
                .ok()
                .map(|i| row[i].1);
            match sides.iter_mut().find(|s| s.0 == value) {
                Some(s) => s.1.push(c.rank),
                None => sides.push((value, vec![c.rank])),
            }
        }
        sides.sort_by_key(|s| (std::cmp::Reverse(s.1.len()), s.1.iter().copied().min()));
        let major = &sides[0].1;
        let tie = sides.len() > 1 && sides[1].1.len() == major.len();
        let culprits: Vec<i64> = sides[1..]
            .iter()
            .flat_map(|s| s.1.iter().copied())
            .collect();
        let mut f = self.finding(Kind::Mismatch, first, &culprits, major);
        f.tie = tie;
        f.entry = self.at(culprits[0], i128::from(first));
        f.other = self.at(major[0], i128::from(first));
        self.mismatch_seq = Some(first);
        Some(f)
    }

    fn frontier(&self) -> (i64, Vec<i64>) {
        let frontier = self.colls.iter().map(Colls::last_seq).max().unwrap_or(0);
        let waiting = self
            .colls
            .iter()
            .filter(|c| c.last_seq() == frontier)
            .map(|c| c.rank)
            .collect();
        (frontier, waiting)
    }

    fn all_completed(&self, ranks: &[i64], seq: i64) -> bool {
        ranks.iter().all(|&r| {
            self.at(r, i128::from(seq))
                .is_some_and(|at| self.entry(at).state == COMPLETED)
        })
    }

    fn not_scheduled(&self) -> Vec<Finding> {
        let (frontier, waiting) = self.frontier();
        let mut behind: Vec<(i64, i64)> = self
            .colls
            .iter()
            .filter(|c| c.last_seq() < frontier)
            .map(|c| (c.last_seq(), c.rank))
            .collect();
        if behind.is_empty() || self.all_completed(&waiting, frontier) {
            return Vec::new();
        }
        behind.sort_unstable();
        let other = self.at(waiting[0], i128::from(frontier));
        // one finding per distinct place the laggards stopped
        let mut kept: Vec<(i64, Finding)> = Vec::new();
        for (last, r) in behind {
            let last_entry = self.of(r).map(Colls::last);
            let seq_of = last_entry.map_or(-1, |at| self.entry(at).seq);
            debug_assert_eq!(seq_of, last);
            match kept.iter_mut().find(|(s, _)| *s == seq_of) {
                Some((_, f)) => f.culprits.push(r),
                None => {
                    let mut f = self.finding(Kind::NotScheduled, frontier, &[r], &waiting);
                    f.entry = last_entry;
                    f.other = other;
                    kept.push((seq_of, f));
                }
            }
        }
        kept.into_iter().map(|(_, f)| f).collect()
    }

    /// The completion wavefront: ranks whose last completed collective is behind the
    /// others', when they are the few.
    fn behind(&self, blamed: &HashSet<i64>) -> Vec<Finding> {
        let done: Vec<(i64, i128)> = self
            .colls
            .iter()
            .map(|c| {
                let d = c.done.map_or(i128::from(c.first_seq()) - 1, i128::from);
                (c.rank, d)
            })
            .collect();
        let Some(best) = done.iter().map(|d| d.1).max() else {
            return Vec::new();
        };
        let ahead: Vec<i64> = done.iter().filter(|d| d.1 == best).map(|d| d.0).collect();
        let late: Vec<(i64, i128)> = done
            .iter()
            .copied()
            .filter(|&(r, s)| s < best && !blamed.contains(&r) && self.at(r, s + 1).is_some())
            .collect();
        if late.is_empty() || late.len() >= ahead.len() {
            return Vec::new();
        }
        let late_ranks: Vec<i64> = late.iter().map(|l| l.0).collect();
        // best is some rank's completed sequence id, or its first one less one
        let seq = i64::try_from(best).unwrap_or(i64::MIN);
        let mut f = self.finding(Kind::Behind, seq, &late_ranks, &ahead);
        f.entry = self
            .at(late[0].0, late[0].1 + 1)
            .or_else(|| self.of(late[0].0).map(Colls::last));
        f.other = self.at(ahead[0], best);
        vec![f]
    }

    fn no_dump(&self) -> Vec<Finding> {
        let missing = self.missing();
        if missing.is_empty() {
            return Vec::new();
        }
        let (frontier, waiting) = self.frontier();
        if self.states_known && self.all_completed(&waiting, frontier) {
            return Vec::new();
        }
        let mut f = self.finding(Kind::NoDump, frontier, &missing, &waiting);
        f.other = self.at(waiting[0], i128::from(frontier));
        vec![f]
    }

    // --- point to point -----------------------------------------------------------------

    fn global(&self, group_rank: Option<i64>) -> Option<i64> {
        let i = usize::try_from(group_rank?).ok()?;
        self.members.get(i).copied()
    }

    fn oldest_time(&self, rank: i64) -> Option<i64> {
        let (d, idx) = self
            .rows
            .iter()
            .find(|(d, _)| self.dumps[*d as usize].rank == rank)?;
        let c = self.dumps[*d as usize].dump;
        idx.iter()
            .filter_map(|&i| c.entries[i as usize].time_created_ns())
            .min()
    }

    fn p2p(&self) -> Vec<Finding> {
        let mut sends: BTreeMap<(i64, i64), Vec<At>> = BTreeMap::new();
        let mut recvs: BTreeMap<(i64, i64), Vec<At>> = BTreeMap::new();
        for (d, idx) in self.rows {
            let input = &self.dumps[*d as usize];
            let c = input.dump;
            for &i in idx {
                let e = &c.entries[i as usize];
                let name = &c.names[e.name as usize];
                let Some((src, dst)) = name.peers else {
                    continue;
                };
                let op = c.ops[name.op as usize].as_str();
                if op != "send" && op != "recv" {
                    continue;
                }
                let (Some(src), Some(dst)) = (self.global(src), self.global(dst)) else {
                    continue;
                };
                let at = At { dump: *d, entry: i };
                if op == "send" && src == input.rank {
                    sends.entry((src, dst)).or_default().push(at);
                } else if op == "recv" && dst == input.rank {
                    recvs.entry((src, dst)).or_default().push(at);
                }
            }
        }
        let mut out = Vec::new();
        for (kind, mine, theirs) in [
            (Kind::UnmatchedSend, &sends, &recvs),
            (Kind::UnmatchedRecv, &recvs, &sends),
        ] {
            for (&(src, dst), posted) in mine {
                // the peer that should have matched it, and the rank that posted it
                let (peer_rank, poster) = match kind {
                    Kind::UnmatchedSend => (dst, src),
                    _ => (src, dst),
                };
                if !self.dumped.contains(&peer_rank) {
                    continue;
                }
                let matched = theirs.get(&(src, dst)).map_or(0, Vec::len);
                let oldest = self.oldest_time(peer_rank);
                for &at in posted.iter().skip(matched) {
                    let e = self.entry(at);
                    if let (Some(oldest), Some(t)) = (oldest, e.time_created_ns()) {
                        if t < oldest {
                            continue; // the peer's ring no longer reaches back that far
                        }
                    }
                    let seq = e.p2p_seq().filter(|&s| s != 0).unwrap_or(e.seq);
                    let mut f = self.finding(kind, seq, &[peer_rank], &[poster]);
                    f.entry = Some(at);
                    f.peer = Some(poster);
                    out.push(f);
                    break; // the first one is the one that matters
                }
            }
        }
        out
    }

    // --- what to show per rank ------------------------------------------------------------

    fn shown(&self, found: &[Finding]) -> Vec<Shown> {
        let mut out = Vec::new();
        let mut ranks: Vec<&Colls> = self.colls.iter().collect();
        ranks.sort_by_key(|c| c.rank);
        for c in ranks {
            let last = c.last();
            let show = |why, entry| Shown {
                rank: c.rank,
                why,
                entry,
            };
            if !self.states_known {
                out.push(show(Why::LastRecorded, last));
            } else if self.entry(last).state != COMPLETED {
                out.push(show(Why::Waiting, last));
            }
            if let Some(done) = c.done {
                if let Some(at) = c.at(i128::from(done)) {
                    out.push(show(Why::LastCompleted, at));
                }
            }
            if let Some(at) = self.mismatch_seq.and_then(|s| c.at(i128::from(s))) {
                if at != last {
                    out.push(show(Why::AtMismatch, at));
                }
            }
        }
        for f in found {
            if matches!(f.kind, Kind::UnmatchedSend | Kind::UnmatchedRecv) {
                if let (Some(entry), Some(&rank)) = (f.entry, f.other_ranks.first()) {
                    out.push(Shown {
                        rank,
                        why: Why::Waiting,
                        entry,
                    });
                }
            }
        }
        out
    }
}

/// The first sequence id at which two rows (ascending by sequence id) differ.
fn first_difference(a: &[(i64, u32)], b: &[(i64, u32)]) -> Option<i64> {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return Some(x.0.min(y.0));
        }
    }
    match a.len().cmp(&b.len()) {
        std::cmp::Ordering::Less => Some(b[a.len()].0),
        std::cmp::Ordering::Greater => Some(a[b.len()].0),
        std::cmp::Ordering::Equal => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flight_recorder::{Builder, OwnedEntry};

    const T0: i64 = 1_800_000_000_000_000_000;

    fn coll(seq: i64, op: &str, numel: i64, state: u8) -> OwnedEntry {
        OwnedEntry {
            pos: 0,
            pg: "0".into(),
            pg_desc: "default_pg".into(),
            pg_id: Some(0),
            seq,
            op: op.into(),
            backend: "nccl".into(),
            input_sizes: vec![vec![numel]],
            output_sizes: vec![vec![numel]],
            input_dtypes: vec!["Float".into()],
            output_dtypes: vec!["Float".into()],
            state,
            time_created_ns: Some(T0.saturating_add(seq.saturating_mul(1_000_000))),
            ..OwnedEntry::default()
        }
    }

    fn p2p(seq: i64, p2p_seq: i64, op: &str, src: i64, dst: i64) -> OwnedEntry {
        OwnedEntry {
            is_p2p: true,
            p2p_seq: Some(p2p_seq),
            peers: Some((Some(src), Some(dst))),
            state: 1,
            time_created_ns: Some(T0.saturating_add(seq.saturating_mul(1_000_000)) + p2p_seq),
            ..coll(seq, op, 8, 1)
        }
    }

    fn build(entries: Vec<OwnedEntry>) -> Checked {
        let mut b = Builder::default();
        for (i, mut e) in entries.into_iter().enumerate() {
            e.pos = i;
            e.record_id = i as i64;
            b.push(e);
        }
        b.finish()
    }

    fn run(dumps: &[Checked]) -> Analysis {
        let inputs: Vec<Input<'_>> = dumps
            .iter()
            .enumerate()
            .map(|(r, dump)| Input {
                rank: r as i64,
                dump,
            })
            .collect();
        analyze(&inputs, &HashMap::<String, Vec<i64>>::new())
    }

    fn kinds(a: &Analysis) -> Vec<(&'static str, i64, Vec<i64>)> {
        a.findings
            .iter()
            .map(|f| (f.kind.as_str(), f.seq, f.culprits.clone()))
            .collect()
    }

    #[test]
    fn healthy_has_no_finding() {
        let dumps: Vec<Checked> = (0..4)
            .map(|_| {
                build(
                    (1..6)
                        .map(|s| coll(s, "all_reduce", 8, COMPLETED))
                        .collect(),
                )
            })
            .collect();
        let a = run(&dumps);
        assert!(a.findings.is_empty() && a.shown.is_empty());
        assert_eq!(a.groups, 1);
    }

    #[test]
    fn first_mismatch_and_majority() {
        let dumps: Vec<Checked> = (0..4)
            .map(|r| {
                build(vec![
                    coll(1, "all_reduce", 8, COMPLETED),
                    coll(2, "all_reduce", if r == 3 { 7 } else { 8 }, COMPLETED),
                    coll(
                        3,
                        if r == 1 { "broadcast" } else { "all_reduce" },
                        8,
                        COMPLETED,
                    ),
                ])
            })
            .collect();
        let a = run(&dumps);
        assert_eq!(kinds(&a), vec![("mismatch", 2, vec![3])]);
        let f = &a.findings[0];
        assert_eq!((f.other_ranks.clone(), f.tie), (vec![0, 1, 2], false));
        assert_eq!(f.entry, Some(At { dump: 3, entry: 1 }));
        assert_eq!(f.other, Some(At { dump: 0, entry: 1 }));
        // every rank shows its last completed one, and the one at the mismatch
        let why: Vec<_> = a.shown.iter().map(|s| (s.rank, s.why.as_str())).collect();
        assert_eq!(why.len(), 8);
        assert_eq!(why[0], (0, "last_completed"));
        assert_eq!(why[1], (0, "at_mismatch"));
    }

    #[test]
    fn a_tie_is_marked() {
        let dumps: Vec<Checked> = (0..2)
            .map(|r| build(vec![coll(1, "all_reduce", 8 + r, COMPLETED)]))
            .collect();
        let a = run(&dumps);
        assert_eq!(kinds(&a), vec![("mismatch", 1, vec![1])]);
        assert!(a.findings[0].tie);
    }

    #[test]
    fn a_rank_that_never_called_it() {
        let dumps: Vec<Checked> = (0..4)
            .map(|r| {
                let last = if r == 2 { 4 } else { 5 };
                build(
                    (1..=last)
                        .map(|s| coll(s, "all_reduce", 8, if s < 5 { COMPLETED } else { 1 }))
                        .collect(),
                )
            })
            .collect();
        let a = run(&dumps);
        assert_eq!(kinds(&a), vec![("not_scheduled", 5, vec![2])]);
        assert_eq!(a.findings[0].entry, Some(At { dump: 2, entry: 3 }));
        assert_eq!(a.findings[0].other_ranks, vec![0, 1, 3]);
    }

    #[test]
    fn the_wavefront() {
        // all ranks are in seq 3; rank 1 has not completed seq 2
        let dumps: Vec<Checked> = (0..4)
            .map(|r| {
                build(vec![
                    coll(1, "all_reduce", 8, COMPLETED),
                    coll(2, "all_reduce", 8, if r == 1 { 1 } else { COMPLETED }),
                    coll(3, "all_reduce", 8, 1),
                ])
            })
            .collect();
        let a = run(&dumps);
        assert_eq!(kinds(&a), vec![("behind", 2, vec![1])]);
        assert_eq!(a.findings[0].entry, Some(At { dump: 1, entry: 1 }));
    }

    #[test]
    fn an_unmatched_send_explains_the_stuck_sender() {
        // rank 0 sends to 1 (never received), and so never reaches collective 3
        let d0 = build(vec![
            coll(1, "all_reduce", 8, COMPLETED),
            coll(2, "all_reduce", 8, COMPLETED),
            p2p(2, 1, "send", 0, 1),
        ]);
        let d1 = build(vec![
            coll(1, "all_reduce", 8, COMPLETED),
            coll(2, "all_reduce", 8, COMPLETED),
            coll(3, "all_reduce", 8, 1),
        ]);
        let a = run(&[d0, d1]);
        assert_eq!(kinds(&a), vec![("unmatched_send", 1, vec![1])]);
        let f = &a.findings[0];
        assert_eq!((f.peer, f.entry), (Some(0), Some(At { dump: 0, entry: 2 })));
        assert_eq!(
            a.shown.last().map(|s| (s.rank, s.why)),
            Some((0, Why::Waiting))
        );
    }

    #[test]
    fn members_without_a_dump() {
        let dumps: Vec<Checked> = (0..3)
            .map(|_| build(vec![coll(1, "all_reduce", 8, 1)]))
            .collect();
        let inputs: Vec<Input<'_>> = dumps
            .iter()
            .enumerate()
            .map(|(r, dump)| Input {
                rank: r as i64,
                dump,
            })
            .collect();
        let mut members = HashMap::new();
        members.insert("0".to_owned(), vec![0, 1, 2, 3]);
        let a = analyze(&inputs, &members);
        assert_eq!(kinds(&a), vec![("no_dump", 1, vec![3])]);
        assert_eq!(a.findings[0].missing_dumps, vec![3]);
    }

    #[test]
    fn sequence_ids_far_apart_cost_nothing() {
        let dumps: Vec<Checked> = (0..3)
            .map(|r| {
                build(vec![
                    coll(0, "all_reduce", 8, COMPLETED),
                    coll(i64::MAX, "all_reduce", if r == 0 { 1 } else { 8 }, 1),
                ])
            })
            .collect();
        let a = run(&dumps);
        assert_eq!(kinds(&a), vec![("mismatch", i64::MAX, vec![0])]);
        let dumps: Vec<Checked> = (0..3)
            .map(|r| build(vec![coll(i64::MIN + r, "all_reduce", 8, 1)]))
            .collect();
        let a = run(&dumps);
        // one finding per place the laggards stopped
        assert_eq!(
            kinds(&a),
            vec![
                ("not_scheduled", i64::MIN + 2, vec![0]),
                ("not_scheduled", i64::MIN + 2, vec![1])
            ]
        );
    }

    #[test]
    fn coalesced_batches_compare_as_one() {
        let batch = |n: i64| {
            build(vec![
                coll(1, "all_reduce", 8, COMPLETED),
                coll(1, "all_reduce", n, COMPLETED),
            ])
        };
        let a = run(&[batch(4), batch(4), batch(5)]);
        assert_eq!(kinds(&a), vec![("mismatch", 1, vec![2])]);
        assert_eq!(a.findings[0].entry, Some(At { dump: 2, entry: 1 }));
    }

    #[test]
    fn first_difference_of_rows() {
        assert_eq!(
            first_difference(&[(1, 0), (2, 0)], &[(1, 0), (2, 1)]),
            Some(2)
        );
        assert_eq!(
            first_difference(&[(1, 0), (3, 0)], &[(1, 0), (2, 0)]),
            Some(2)
        );
        assert_eq!(first_difference(&[(1, 0)], &[(1, 0), (2, 0)]), Some(2));
        assert_eq!(first_difference(&[(1, 0)], &[(1, 0)]), None);
    }
}
