//! The collective table of one incident (DESIGN §3.3, "collective fingerprints"): per process
//! group and sequence number, what each rank says it ran. Three kinds of lines state it:
//! torch's watchdog (`WorkNCCL(SeqNum=…, OpType=…, NumelIn=…, NumelOut=…)`), Flight Recorder
//! lines rendered from dumps (the same field names), and NCCL's COLL trace (`AllReduce:
//! opCount … count … datatype … root …`). The first two share torch's per-group numbering;
//! the trace counts per communicator, so its entries form groups of their own.

use super::board::LineRef;
use super::util::rank_ranges;
use super::view::{View, Who};
use crate::job::{CallKind, CollCall};
use crate::report::{CollectiveRow, CollectiveTable};
use std::collections::{BTreeMap, BTreeSet, HashSet};

pub const COLL_TRACE_SIGNATURE: &str = "nccl_coll_trace";
pub const WRAPPER_SIGNATURE: &str = "pt_wrapper_fingerprint";
/// The group the debug wrapper's statements are compared in (its lines name none).
const WRAPPER_GROUP: &str = "the debug wrapper's process group";

/// What one rank ran at one sequence number: the values all ranks of a group must agree on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Fingerprint {
    pub op: String,
    pub numel_in: Option<i64>,
    pub numel_out: Option<i64>,
    pub dtype: Option<String>,
    pub root: Option<i64>,
}

/// One rank's statement about one collective.
#[derive(Debug, Clone)]
pub struct Entry {
    pub who: Who,
    pub group: String,
    pub seq: u64,
    pub fp: Fingerprint,
    pub line: LineRef,
    /// When the line was printed (skew-corrected).
    pub ts: Option<i64>,
    /// When the rank entered the collective, where the line says how long it waited (a
    /// watchdog timeout's `ran for N milliseconds`).
    pub entered: Option<i64>,
    /// The line reports waiting in this collective (a timeout, a Flight Recorder entry that
    /// never completed), not merely issuing it.
    pub waiting: bool,
}

/// Point-to-point operations count on their own and pair two ranks; they are not compared.
const P2P_OPS: &[&str] = &["SEND", "RECV", "RECVANYSOURCE", "_RECV", "_SEND"];
/// Operations whose element counts legitimately differ between ranks (uneven splits, the
/// root's gathered output): only the operation itself is compared.
const UNEVEN_OPS: &[&str] = &[
    "ALLTOALL",
    "ALLTOALL_BASE",
    "ALLTOALLV",
    "GATHER",
    "SCATTER",
    "ALLGATHERV",
];

/// NCCL's datatype numbers (ncclDataType_t).
fn nccl_dtype(n: u32) -> String {
    let names = [
        "int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64",
        "bfloat16", "fp8_e4m3", "fp8_e5m2",
    ];
    names
        .get(n as usize)
        .map_or_else(|| n.to_string(), |s| s.to_string())
}

/// Every statement about collectives in the incident's hits and the job's traced calls.
pub fn table(v: &View, hits: &[usize]) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    let mut seen: HashSet<(Who, &str, u64)> = HashSet::new();
    // Only hits that state a collective, their order key computed once each: a storm's
    // incident holds hundreds of thousands of hits, and a sort calls its key per comparison.
    let mut ordered: Vec<(usize, u64, &str)> = hits
        .iter()
        .filter_map(|&i| {
            let h = v.hit(i);
            let seq = h.field("seq").and_then(|x| x.parse::<u64>().ok())?;
            Some((i, seq, h.field("op_type")?))
        })
        .collect();
    ordered.sort_by_cached_key(|&(i, _, _)| v.order_key(i));
    for (i, seq, op) in ordered {
        let h = v.hit(i);
        let who = v.printer(h);
        let pg = h.field("pg").unwrap_or("?");
        if !seen.insert((who, pg, seq)) {
            continue;
        }
        let group = format!("PG {pg}");
        let num = |k: &str| h.field(k).and_then(|x| x.parse::<i64>().ok());
        let ts = v.hit_time(h);
        let waited = num("ran_ms").or(num("timeout_ms"));
        let state = h.field("state");
        out.push(Entry {
            who,
            group,
            seq,
            fp: Fingerprint {
                op: op.to_ascii_uppercase(),
                numel_in: num("numel_in"),
                numel_out: num("numel_out"),
                dtype: h.field("dtype").map(str::to_string),
                root: num("root"),
            },
            line: LineRef::Hit(i),
            ts,
            entered: ts.zip(waited).map(|(t, w)| t - w),
            waiting: state.is_none_or(|s| s != "completed"),
        });
    }
    for (si, src) in v.job.sources.iter().enumerate() {
        let si = si as u32;
        let who = v.process(si);
        for (ci, call) in src.coll_calls.iter().enumerate() {
            if let Some(group) = trace_group(src, call) {
                out.push(trace_entry(v, who, (si, ci), call, group));
            }
        }
    }
    out
}

/// Which communicator a traced call belongs to, as all its ranks know it: the id from the
/// process's init line; without one (older NCCL), its size, when the process used only one
/// communicator of that size (else its calls cannot be told apart from another group's).
/// The debug wrapper names no group: its calls count as one group while their sequence
/// numbers only grow (a process whose numbers go back runs several groups).
fn trace_group(src: &crate::job::Source, call: &CollCall) -> Option<String> {
    if let CallKind::TorchWrapper { .. } = call.kind {
        let numbers = src
            .coll_calls
            .iter()
            .filter(|c| c.kind != CallKind::NcclTrace)
            .map(|c| c.op_count);
        let rising = numbers.clone().zip(numbers.skip(1)).all(|(a, b)| a <= b);
        return rising.then(|| WRAPPER_GROUP.to_string());
    }
    if let Some(id) = src.comm_id(&call.comm) {
        return Some(format!("NCCL communicator {id}"));
    }
    let same_size = |c: &&CollCall| {
        c.kind == CallKind::NcclTrace && c.nranks == call.nranks && c.comm != call.comm
    };
    if src.coll_calls.iter().any(|c| same_size(&c)) {
        return None;
    }
    Some(format!("NCCL communicator of {} ranks", call.nranks))
}

fn trace_entry(v: &View, who: Who, at: (u32, usize), call: &CollCall, group: String) -> Entry {
    let (src, idx) = at;
    let op = call.op.to_ascii_uppercase();
    let rooted = matches!(op.as_str(), "BROADCAST" | "REDUCE" | "BCAST");
    let (stated, root) = match call.kind {
        CallKind::NcclTrace => (true, rooted.then_some(call.root)),
        CallKind::TorchWrapper { tensors } => (tensors, None),
    };
    let known_dtype = stated && call.datatype != u32::MAX;
    Entry {
        who,
        group,
        seq: call.op_count,
        fp: Fingerprint {
            op,
            numel_in: stated.then_some(call.count as i64),
            numel_out: None,
            dtype: known_dtype.then(|| nccl_dtype(call.datatype)),
            root,
        },
        line: LineRef::Call(src, idx),
        ts: v.corrected(src, call.ts_ms),
        entered: None,
        waiting: false,
    }
}

/// The signature whose line stated `call`.
pub fn call_signature(call: &CollCall) -> &'static str {
    match call.kind {
        CallKind::NcclTrace => COLL_TRACE_SIGNATURE,
        CallKind::TorchWrapper { .. } => WRAPPER_SIGNATURE,
    }
}

/// The fields of the line that stated `call`, as its signature names them.
pub fn call_fields(call: &CollCall) -> Vec<(String, String)> {
    let mut f = vec![("coll_op", call.op.clone())];
    match call.kind {
        CallKind::NcclTrace => f.extend([
            ("op_count", format!("{:x}", call.op_count)),
            ("count", call.count.to_string()),
            ("datatype", call.datatype.to_string()),
            ("root", call.root.to_string()),
            ("coll_nranks", call.nranks.to_string()),
        ]),
        CallKind::TorchWrapper { tensors } => {
            f.push(("wrapper_seq", call.op_count.to_string()));
            if tensors {
                f.push(("numel", call.count.to_string()));
            }
        }
    }
    f.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Ranks at one (group, sequence number) that ran different things: classes of equal
/// fingerprints, largest first (ties: the class with the lowest rank first).
#[derive(Debug)]
pub struct Split<'a> {
    pub group: &'a str,
    pub seq: u64,
    pub classes: Vec<(Fingerprint, Vec<&'a Entry>)>,
}

impl Split<'_> {
    /// The minority is clear: one class holds more ranks than any other.
    pub fn has_majority(&self) -> bool {
        self.classes.len() >= 2 && self.classes[0].1.len() > self.classes[1].1.len()
    }
}

/// What every statement at one sequence number gives, and whether an uneven operation is
/// among them: decided once per sequence number (tens of thousands of ranks may wait at it).
struct Compared {
    keep_counts: bool,
    numel_in: bool,
    numel_out: bool,
    dtype: bool,
    root: bool,
}

impl Compared {
    fn of(all: &[&Entry]) -> Compared {
        let every = |f: fn(&Fingerprint) -> bool| all.iter().all(|e| f(&e.fp));
        let uneven = all
            .iter()
            .any(|e| UNEVEN_OPS.contains(&e.fp.op.trim_end_matches("_COALESCED")));
        Compared {
            keep_counts: !uneven,
            numel_in: every(|x| x.numel_in.is_some()),
            numel_out: every(|x| x.numel_out.is_some()),
            dtype: every(|x| x.dtype.is_some()),
            root: every(|x| x.root.is_some()),
        }
    }

    /// The values compared at one sequence number: only what every statement there gives
    /// (an older watchdog line has no element counts), and for uneven or p2p operations the
    /// operation alone.
    fn of_one(&self, fp: &Fingerprint) -> Fingerprint {
        Fingerprint {
            op: fp.op.clone(),
            numel_in: fp.numel_in.filter(|_| self.keep_counts && self.numel_in),
            numel_out: fp.numel_out.filter(|_| self.keep_counts && self.numel_out),
            dtype: fp.dtype.clone().filter(|_| self.dtype),
            root: fp.root.filter(|_| self.root),
        }
    }
}

/// Every (group, sequence number) where ranks disagree, in group and sequence order.
pub fn splits(entries: &[Entry]) -> Vec<Split<'_>> {
    let mut buckets: BTreeMap<(&str, u64), Vec<&Entry>> = BTreeMap::new();
    for e in entries.iter().filter(|e| !is_p2p(e)) {
        buckets.entry((&e.group, e.seq)).or_default().push(e);
    }
    buckets
        .into_iter()
        .filter_map(|((group, seq), all)| split_of(group, seq, all))
        .collect()
}

/// Whether the ranks disagree at one sequence number of one group.
pub fn split_at<'a>(entries: &'a [Entry], group: &'a str, seq: u64) -> Option<Split<'a>> {
    let all = entries
        .iter()
        .filter(|e| e.group == group && e.seq == seq && !is_p2p(e))
        .collect();
    split_of(group, seq, all)
}

fn is_p2p(e: &Entry) -> bool {
    P2P_OPS.contains(&e.fp.op.as_str())
}

fn split_of<'a>(group: &'a str, seq: u64, all: Vec<&'a Entry>) -> Option<Split<'a>> {
    let ranks: BTreeSet<Who> = all.iter().map(|e| e.who).collect();
    if ranks.len() < 2 {
        return None;
    }
    let compared = Compared::of(&all);
    let mut classes: BTreeMap<Fingerprint, Vec<&Entry>> = BTreeMap::new();
    for e in &all {
        classes.entry(compared.of_one(&e.fp)).or_default().push(*e);
    }
    if classes.len() < 2 {
        return None;
    }
    let mut classes: Vec<(Fingerprint, Vec<&Entry>)> = classes.into_iter().collect();
    classes.sort_by_key(|(_, es)| {
        let lowest = es.iter().map(|e| e.who).min();
        (std::cmp::Reverse(es.len()), lowest)
    });
    Some(Split {
        group,
        seq,
        classes,
    })
}

/// `BROADCAST NumelIn=25503912 NumelOut=25503912` (a trace's count reads `count 440`).
pub fn describe(fp: &Fingerprint, trace: bool) -> String {
    let mut s = fp.op.clone();
    match (fp.numel_in, fp.numel_out, trace) {
        (Some(n), _, true) => s.push_str(&format!(" count {n}")),
        (i, o, false) => {
            if let Some(n) = i {
                s.push_str(&format!(" NumelIn={n}"));
            }
            if let Some(n) = o {
                s.push_str(&format!(" NumelOut={n}"));
            }
        }
        _ => {}
    }
    if let Some(d) = &fp.dtype {
        s.push_str(&format!(" dtype {d}"));
    }
    if let Some(r) = fp.root {
        s.push_str(&format!(" root {r}"));
    }
    s
}

/// The ranks among `whos` (sources and hosts left out).
pub fn ranks_of<'a>(whos: impl IntoIterator<Item = &'a Who>) -> BTreeSet<u32> {
    whos.into_iter()
        .filter_map(|w| match w {
            Who::Rank(r) => Some(*r),
            _ => None,
        })
        .collect()
}

/// Ranks (or, where a process's rank is unknown, its source number) as ranges.
/// What a finding about collective `e`, which `waiters` wait in, states: the waiting ranks as
/// a list (`0-4,7`) and the facts `coll_seq`, `coll_op`, `coll_group` and `waiting_ranks`.
pub fn waited_facts(e: &Entry, waiters: &BTreeSet<Who>) -> (String, Vec<(String, String)>) {
    let waiting_ranks = who_list(&waiters.iter().copied().collect::<Vec<_>>());
    let facts = vec![
        ("coll_seq".to_string(), e.seq.to_string()),
        ("coll_op".to_string(), e.fp.op.clone()),
        ("coll_group".to_string(), e.group.clone()),
        ("waiting_ranks".to_string(), waiting_ranks.clone()),
    ];
    (waiting_ranks, facts)
}

pub fn who_list(whos: &[Who]) -> String {
    let ranks = ranks_of(whos);
    let others = whos.len() - ranks.len();
    let mut s = rank_ranges(&ranks);
    if others > 0 {
        if !s.is_empty() {
            s.push_str(" and ");
        }
        s.push_str(&format!("{others} process(es) of unknown rank"));
    }
    s
}

/// The split as the diagnosis shows it: one row per class of ranks, side by side.
pub fn split_json(split: &Split, kind: &str) -> CollectiveTable {
    let trace = split
        .classes
        .first()
        .and_then(|(_, es)| es.first())
        .is_some_and(|e| matches!(e.line, LineRef::Call(..)));
    let rows: Vec<CollectiveRow> = split
        .classes
        .iter()
        .map(|(fp, es)| {
            let whos: Vec<Who> = es.iter().map(|e| e.who).collect();
            CollectiveRow {
                ranks: who_list(&whos),
                count: whos.len(),
                op: fp.op.clone(),
                numel_in: fp.numel_in,
                numel_out: fp.numel_out,
                dtype: fp.dtype.clone(),
                root: fp.root,
                stated: describe(fp, trace),
            }
        })
        .collect();
    CollectiveTable {
        kind: kind.to_string(),
        group: split.group.to_string(),
        seq: split.seq,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(r: u32, op: &str, n: i64) -> Entry {
        Entry {
            who: Who::Rank(r),
            group: "PG 0".into(),
            seq: 5,
            fp: Fingerprint {
                op: op.into(),
                numel_in: Some(n),
                numel_out: Some(n),
                dtype: None,
                root: None,
            },
            line: LineRef::Hit(r as usize),
            ts: None,
            entered: None,
            waiting: true,
        }
    }

    #[test]
    fn a_rank_with_another_count_is_the_minority() {
        let mut es: Vec<Entry> = (1..8).map(|r| entry(r, "BROADCAST", 12751956)).collect();
        es.push(entry(0, "BROADCAST", 25503912));
        let s = splits(&es);
        assert_eq!(s.len(), 1);
        assert!(s[0].has_majority());
        assert_eq!(s[0].classes[1].1[0].who, Who::Rank(0));
        assert_eq!(
            describe(&s[0].classes[1].0, false),
            "BROADCAST NumelIn=25503912 NumelOut=25503912"
        );
    }

    #[test]
    fn equal_statements_and_uneven_ops_are_no_split() {
        let es: Vec<Entry> = (0..4).map(|r| entry(r, "ALLREDUCE", 11)).collect();
        assert!(splits(&es).is_empty());
        let uneven = vec![entry(0, "ALLTOALL_BASE", 10), entry(1, "ALLTOALL_BASE", 14)];
        assert!(splits(&uneven).is_empty());
        let p2p = vec![entry(0, "SEND", 10), entry(1, "RECV", 10)];
        assert!(splits(&p2p).is_empty());
    }

    #[test]
    fn counts_are_compared_only_where_every_line_states_them() {
        let mut old = entry(1, "ALLREDUCE", 0);
        old.fp.numel_in = None;
        old.fp.numel_out = None;
        let es = vec![entry(0, "ALLREDUCE", 11), old];
        assert!(splits(&es).is_empty());
        let es = vec![entry(0, "ALLREDUCE", 11), entry(1, "BROADCAST", 11)];
        let s = splits(&es);
        assert!(
            !s[0].has_majority(),
            "one against one: no side is the odd one"
        );
    }

    #[test]
    fn a_storm_of_ranks_at_one_sequence_number_is_compared_once() {
        // 16,384 ranks wait at one sequence number; one states another count, and one an
        // older line without counts: the counts are not compared, so no rank is odd. Without
        // the old line, the odd rank is the minority.
        let mut es: Vec<Entry> = (0..16_384).map(|r| entry(r, "ALLREDUCE", 11)).collect();
        es[77] = entry(77, "ALLREDUCE", 12);
        let s = splits(&es);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].classes[1].1.len(), 1);
        assert_eq!(s[0].classes[1].1[0].who, Who::Rank(77));
        es[5].fp.numel_in = None;
        es[5].fp.numel_out = None;
        assert!(splits(&es).is_empty());
    }
}
