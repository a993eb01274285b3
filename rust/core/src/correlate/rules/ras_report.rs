//! NCCL RAS reports (the `ncclras` client's text output, NCCL 2.24 and later, and its JSON
//! output, `ncclras -f json`, NCCL 2.28.7 and later, read by [`json`] into the same report),
//! saved into the job's folder or pasted into a log. A report line means something only with the lines around
//! it: a `Rank 12 -- GPU 4 managed by process ...` line belongs to the group line above it, and
//! which group of an operation-count mismatch is behind depends on the other groups. So this
//! rule reads back the last report of each source whose report lines are in the incident (from
//! its ring, plus the hits themselves) and names:
//!
//! - processes the report calls dead (+50, finding `ras_process_dead`);
//! - processes or ranks it got no data from (+35, `ras_rank_missing`);
//! - ranks that report their own NCCL error, not `Remote process error` (+45, `ras_rank_error`);
//! - ranks whose communicator state is not the majority's (+30, `ras_rank_status`);
//! - in an operation-count mismatch, the ranks with the lowest count (+45, `ras_rank_behind`):
//!   the others wait in an operation these never issued. The ranks that are ahead are not
//!   blamed. When the group behind is too large for NCCL to list (it lists the few ranks ahead
//!   instead, as in NVIDIA/nccl#1911), its ranks are the communicator's size minus every rank
//!   listed in the other groups.
//!
//! Ranks are resolved through (host, pid) when the job's logs map them, else by the rank the
//! report prints where that communicator is the largest one (its ranks are the job's ranks).

use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::util::{parse_rank_list, rank_ranges};
use crate::correlate::view::{View, Who};
use crate::report::OddContext;
use std::collections::{BTreeMap, BTreeSet};

mod json;
mod monitor;

const W_DEAD: i32 = 50;
const W_MISSING: i32 = 35;
const W_ERROR: i32 = 45;
const W_STATUS: i32 = 30;
const W_BEHIND: i32 = 45;
const REMOTE_ERROR: &str = "Remote process error";

/// A process or rank as a report line describes it.
#[derive(Debug, Default, Clone)]
struct Proc {
    comm_rank: Option<u32>,
    pid: Option<u32>,
    node: Option<String>,
    gpu: Option<String>,
    /// The line that names it.
    seq: u64,
    /// Ranks in the communicator `comm_rank` is of, where a process is listed outside one
    /// (a dead process of the JSON report, which states its rank).
    comm_size: Option<u32>,
}

/// Ranks that share one value (an operation count, a status, an error), with the line that
/// states it and the ranks listed under it.
#[derive(Debug, Default)]
struct Group {
    value: String,
    size: usize,
    seq: u64,
    members: Vec<Proc>,
}

#[derive(Debug, Default)]
struct Comm {
    hash: String,
    table_group: Option<u32>,
    missing: Vec<Proc>,
    status: Vec<Group>,
    /// Per collective (or `collective` in 2.24/2.25): the groups by operation count.
    ops: Vec<(String, Vec<Group>)>,
    /// Per kind (`Initialization`, `Asynchronous`): the groups by error.
    errors: Vec<(String, Vec<Group>)>,
}

#[derive(Debug, Default)]
struct Report {
    /// Communicator table: group number -> ranks per communicator.
    sizes: BTreeMap<u32, u32>,
    dead: Vec<Proc>,
    missing: Vec<Proc>,
    comms: Vec<Comm>,
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    None,
    Dead,
    MissingProcs,
    MissingRanks,
    Errors,
    Status,
    Ops,
}

const STATES: &[&str] = &["NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT", "UNKNOWN"];

fn num(s: &str) -> Option<u32> {
    s.trim().parse().ok()
}

/// The tail `GPU 4 managed by process 323032 on node 10.1.2.3` (after ` -- `).
fn tail_proc(tail: &str, comm_rank: Option<u32>, seq: u64) -> Proc {
    let mut p = Proc {
        comm_rank,
        seq,
        ..Proc::default()
    };
    if let Some(rest) = tail.trim().strip_prefix("GPU ") {
        if let Some((gpu, after)) = rest.split_once(" managed by process ") {
            p.gpu = Some(gpu.to_string());
            if let Some((pid, node)) = after.split_once(" on node ") {
                p.pid = num(pid);
                p.node = node.split_whitespace().next().map(str::to_string);
            }
        }
    }
    p
}

/// `Process 4120 on node gpu-3 managing GPUs 0,1`.
fn process_line(m: &str, seq: u64) -> Option<Proc> {
    let rest = m.strip_prefix("Process ")?;
    let (pid, after) = rest.split_once(" on node ")?;
    let (node, gpus) = after.split_once(" managing GPU")?;
    let gpus = gpus.trim_start_matches('s').trim();
    Some(Proc {
        comm_rank: None,
        pid: num(pid),
        node: Some(node.to_string()),
        gpu: Some(gpus.to_string()),
        seq,
        comm_size: None,
    })
}

/// A row of the communicator table: `0  1  4  8  32  32  RUNNING  MISMATCH`.
fn table_row(m: &str) -> Option<(u32, u32)> {
    let t: Vec<&str> = m.split_whitespace().collect();
    if t.len() != 8 || !STATES.contains(&t[6]) {
        return None;
    }
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit() || b == b'-');
    if !t[..6].iter().all(|s| numeric(s)) {
        return None;
    }
    Some((num(t[0])?, num(t[4])?))
}

impl Report {
    fn comm(&mut self) -> Option<&mut Comm> {
        self.comms.last_mut()
    }

    /// The group list the current section adds to.
    fn groups(&mut self, section: Section) -> Option<&mut Vec<Group>> {
        let c = self.comms.last_mut()?;
        match section {
            Section::Status => Some(&mut c.status),
            Section::Ops => c.ops.last_mut().map(|(_, g)| g),
            Section::Errors => c.errors.last_mut().map(|(_, g)| g),
            _ => None,
        }
    }
}

/// The last report in `lines` (messages with their seqs, in order).
fn parse(lines: &[(u64, String)]) -> Report {
    let mut r = Report::default();
    let mut section = Section::None;
    for (seq, m) in lines {
        let (seq, m) = (*seq, m.trim());
        if m == "Job summary" {
            r = Report::default();
            section = Section::None;
            continue;
        }
        if let Some((g, n)) = table_row(m) {
            r.sizes.insert(g, n);
            continue;
        }
        match m {
            "DEAD" => section = Section::Dead,
            "INCOMPLETE" => section = Section::MissingProcs,
            "Errors" | "Warnings" | "TIMEOUT" => section = Section::None,
            _ => {}
        }
        if let Some(rest) = m.strip_prefix('#') {
            // `#0-0 (fa93daea854b060b) MISMATCH`
            let mut it = rest.split_whitespace();
            let (Some(id), Some(hash), Some(kind)) = (it.next(), it.next(), it.next()) else {
                continue;
            };
            let hash = hash.trim_matches(|c| c == '(' || c == ')');
            let group = id.split('-').next().and_then(num);
            if r.comms.last().is_none_or(|c| c.hash != hash) {
                r.comms.push(Comm {
                    hash: hash.to_string(),
                    table_group: group,
                    ..Comm::default()
                });
            }
            section = match kind {
                "INCOMPLETE" => Section::MissingRanks,
                "ERROR" => Section::Errors,
                _ => Section::None,
            };
            continue;
        }
        if m.starts_with("Warning: missing data from ") {
            section = Section::MissingProcs;
        } else if let Some(rest) = m.strip_prefix("Missing communicator data from ") {
            section = if rest.contains("job process") {
                Section::MissingProcs
            } else {
                Section::MissingRanks
            };
        } else if let Some(list) = m.split_once("The missing rank").map(|(_, l)| l) {
            // 2.24/2.25: `The missing ranks: 4,5`
            let list = list.split_once(':').map_or("", |(_, l)| l);
            if let Some(c) = r.comm() {
                let ranks = parse_rank_list(list);
                c.missing.extend(ranks.into_iter().map(|x| Proc {
                    comm_rank: Some(x),
                    seq,
                    ..Proc::default()
                }));
            }
        } else if let Some(p) = process_line(m, seq) {
            match section {
                Section::Dead => r.dead.push(p),
                Section::MissingProcs => r.missing.push(p),
                _ => {}
            }
        } else if m.starts_with("Initialization error") || m.starts_with("Asynchronous error") {
            section = Section::Errors;
            let kind = m.split_whitespace().next().unwrap_or("").to_string();
            if let Some(c) = r.comm() {
                c.errors.push((kind, Vec::new()));
            }
        } else if m == "Communicator ranks have different status" {
            section = Section::Status;
        } else if let Some(rest) = m.strip_prefix("Communicator ranks have different ") {
            section = Section::Ops;
            let coll = rest.split_whitespace().next().unwrap_or("").to_string();
            if let Some(c) = r.comm() {
                c.ops.push((coll, Vec::new()));
            }
        } else if let Some(list) = m.strip_prefix("The unknown ranks: ") {
            if let Some(g) = r.groups(section).and_then(|g| g.last_mut()) {
                g.members
                    .extend(parse_rank_list(list).into_iter().map(|x| Proc {
                        comm_rank: Some(x),
                        seq,
                        ..Proc::default()
                    }));
            }
        } else if let Some(rest) = m.strip_prefix("Rank ") {
            rank_line(&mut r, section, rest, seq);
        } else if let Some((n, rest)) = m.split_once(" ranks ") {
            // `30 ranks have launched up to operation 640`, `2 ranks have status INIT`,
            // `3 ranks reported Remote process error`, `2 ranks have not launched ...`.
            let Some(size) = num(n).map(|x| x as usize) else {
                continue;
            };
            let value = if let Some(k) = rest.strip_prefix("have launched up to operation ") {
                k.trim().to_string()
            } else if rest.starts_with("have not launched") {
                "0".to_string()
            } else if let Some(s) = rest.strip_prefix("have status ") {
                s.trim().to_string()
            } else if let Some(e) = rest.strip_prefix("reported ") {
                e.trim().to_string()
            } else {
                continue;
            };
            if let Some(g) = r.groups(section) {
                g.push(Group {
                    value,
                    size,
                    seq,
                    members: Vec::new(),
                });
            }
        }
    }
    r
}

/// `Rank ...` lines: a member of the group above, or a group of one.
fn rank_line(r: &mut Report, section: Section, rest: &str, seq: u64) {
    let (head, tail) = rest.split_once(" -- ").unwrap_or((rest, ""));
    let mut words = head.split_whitespace();
    let Some(first) = words.next() else { return };
    let comm_rank = num(first);
    let p = tail_proc(tail, comm_rank, seq);
    let tail_words: Vec<&str> = words.collect();
    if tail_words.is_empty() {
        // A member: `Rank 12 -- GPU 4 managed by ...`.
        if section == Section::MissingRanks {
            if let Some(c) = r.comm() {
                c.missing.push(p);
            }
        } else if let Some(g) = r.groups(section).and_then(|g| g.last_mut()) {
            g.members.push(p);
        }
        return;
    }
    let phrase = tail_words.join(" ");
    let value = if let Some(k) = phrase.strip_prefix("has launched up to operation ") {
        k.to_string()
    } else if phrase.starts_with("has not launched") {
        "0".to_string()
    } else if let Some(s) = phrase.strip_prefix("has status ") {
        s.to_string()
    } else if let Some(e) = phrase.strip_prefix("reported ") {
        e.to_string()
    } else {
        return;
    };
    // 2.24/2.25 print `Rank 3,7 has status NOCOMM` for ranks it knows nothing about.
    let ranks = parse_rank_list(first);
    let members = if ranks.len() > 1 {
        ranks
            .into_iter()
            .map(|x| Proc {
                comm_rank: Some(x),
                seq,
                ..Proc::default()
            })
            .collect()
    } else {
        vec![p]
    };
    if let Some(g) = r.groups(section) {
        g.push(Group {
            value,
            size: members.len(),
            seq,
            members,
        });
    }
}

/// The report lines of `src`: its last report kept whole where it has one (`ras_capture`),
/// else its ring plus the incident's hits of it (the ring may have moved on), as peeled
/// messages in order; `Err` when its last report was longer than the cap.
fn report_lines(v: &View, scope: &Scope, src: u32) -> Result<Vec<(u64, String)>, String> {
    if let Some(c) = &v.job.sources[src as usize].ras_report {
        if c.over_cap() {
            return Err(format!(
                "it is longer than the {} bytes a report is read up to (ras_report_bytes)",
                v.cfg.ras_report_bytes
            ));
        }
        return Ok(c.lines.clone());
    }
    Ok(ring_lines(v, scope, src))
}

fn ring_lines(v: &View, scope: &Scope, src: u32) -> Vec<(u64, String)> {
    let year = v.cfg.default_year;
    let mut by_seq: BTreeMap<u64, String> = BTreeMap::new();
    let mut put = |seq: u64, text: &str| {
        let meta = crate::prefix::peel(text, year);
        by_seq.insert(seq, meta.message(text).to_string());
    };
    for l in v.job.sources[src as usize].ring.lines() {
        put(l.seq, &l.text);
    }
    for &i in scope.hits {
        let h = v.hit(i);
        if h.source == src && !h.text.is_empty() {
            put(h.seq, &h.text);
        }
    }
    by_seq.into_iter().collect()
}

struct Ctx<'a, 'b> {
    v: &'a View<'b>,
    src: u32,
    /// Hits of the source by seq: a line that is a hit is shown with its fields.
    hits: BTreeMap<u64, usize>,
    /// Size of the largest communicator: its ranks are the job's ranks.
    world: Option<u32>,
}

impl Ctx<'_, '_> {
    fn line(&self, seq: u64) -> LineRef {
        self.hits
            .get(&seq)
            .map_or(LineRef::Ring(self.src, seq), |&i| LineRef::Hit(i))
    }

    /// Who a process of the report is: by (host, pid) through the job's logs, else by its rank
    /// in a communicator that spans the job, else its host, else the report itself.
    fn who(&self, p: &Proc, comm_size: Option<u32>) -> (Who, Option<crate::job::HostId>) {
        let v = self.v;
        let host = p
            .node
            .as_deref()
            .and_then(|n| v.host_named(n).or_else(|| v.job.ip_host.get(n).copied()));
        if let Some(r) = p.pid.and_then(|pid| v.job.rank_of_pid(pid, host, None)) {
            return (Who::Rank(r), v.who_host(Who::Rank(r)).or(host));
        }
        let spans_job = comm_size.is_some() && comm_size == self.world;
        if let (Some(r), true) = (p.comm_rank, spans_job || self.world.is_none()) {
            let who = Who::Rank(r);
            return (who, v.who_host(who).or(host));
        }
        match host {
            Some(h) => (Who::Host(h), Some(h)),
            None => (Who::Source(self.src), v.host_of(self.src)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn blame(
        &self,
        board: &mut Board,
        p: &Proc,
        comm_size: Option<u32>,
        line: u64,
        (finding, weight): (&str, i32),
        why: String,
        mut facts: Vec<(String, String)>,
    ) {
        let Some(fid) = self.v.cat.index_of(finding) else {
            return;
        };
        let (who, host) = self.who(p, comm_size);
        let mut put = |k: &str, val: Option<String>| {
            if let Some(x) = val {
                facts.push((k.to_string(), x));
            }
        };
        put("pid", p.pid.map(|x| x.to_string()));
        put("ras_node", p.node.clone());
        put("gpus", p.gpu.clone());
        put("comm_rank", p.comm_rank.map(|x| x.to_string()));
        board.state_finding(who, host, self.line(line), fid, facts);
        board.add(who, host, "ras_report", weight, why);
    }
}

fn ranks_of(groups: &[&Group]) -> BTreeSet<u32> {
    groups
        .iter()
        .flat_map(|g| g.members.iter().filter_map(|p| p.comm_rank))
        .collect()
}

fn fact(k: &str, v: impl Into<String>) -> (String, String) {
    (k.to_string(), v.into())
}

fn apply_report(cx: &Ctx, r: &Report, board: &mut Board) {
    for p in &r.dead {
        let why = format!(
            "NCCL RAS considers process {} on {} dead",
            p.pid.map_or("?".into(), |x| x.to_string()),
            p.node.as_deref().unwrap_or("?")
        );
        cx.blame(
            board,
            p,
            p.comm_size,
            p.seq,
            ("ras_process_dead", W_DEAD),
            why,
            vec![],
        );
    }
    let dead: BTreeSet<(Option<u32>, Option<&str>)> =
        r.dead.iter().map(|p| (p.pid, p.node.as_deref())).collect();
    for p in r
        .missing
        .iter()
        .filter(|p| !dead.contains(&(p.pid, p.node.as_deref())))
    {
        let who = format!("process {}", p.pid.map_or("?".into(), |x| x.to_string()));
        let note = p
            .node
            .as_ref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default();
        let why = format!("NCCL RAS got no data from {who}{note}");
        let facts = vec![fact("who_missing", who), fact("ras_node_note", note)];
        cx.blame(
            board,
            p,
            None,
            p.seq,
            ("ras_rank_missing", W_MISSING),
            why,
            facts,
        );
    }
    for c in &r.comms {
        let size = c.table_group.and_then(|g| r.sizes.get(&g).copied());
        for p in &c.missing {
            let who = format!("rank {}", p.comm_rank.map_or("?".into(), |x| x.to_string()));
            let why = format!("NCCL RAS has no data from {who} of communicator {}", c.hash);
            let facts = vec![fact("who_missing", who), fact("comm_hash", &c.hash)];
            cx.blame(
                board,
                p,
                size,
                p.seq,
                ("ras_rank_missing", W_MISSING),
                why,
                facts,
            );
        }
        for (kind, groups) in &c.errors {
            let remote = groups.iter().find(|g| g.value == REMOTE_ERROR);
            let note = remote.map_or(String::new(), |g| {
                format!(
                    ", while {} other rank(s) report only '{REMOTE_ERROR}'",
                    g.size
                )
            });
            for g in groups.iter().filter(|g| g.value != REMOTE_ERROR) {
                for p in &g.members {
                    let why = format!("reports its own NCCL error to RAS: {}", g.value);
                    let facts = vec![
                        fact("nccl_error", &g.value),
                        fact("error_kind", kind.to_ascii_lowercase()),
                        fact("comm_hash", &c.hash),
                        fact("others_note", &note),
                    ];
                    cx.blame(
                        board,
                        p,
                        size,
                        p.seq,
                        ("ras_rank_error", W_ERROR),
                        why,
                        facts,
                    );
                }
            }
        }
        status(cx, c, size, board);
        for (coll, groups) in &c.ops {
            behind(cx, c, size, coll, groups, board);
        }
    }
}

/// Ranks whose state is not the majority's.
fn status(cx: &Ctx, c: &Comm, size: Option<u32>, board: &mut Board) {
    let Some(major) = c.status.iter().max_by_key(|g| g.size) else {
        return;
    };
    for g in c.status.iter().filter(|g| g.size < major.size) {
        let meaning = match g.value.as_str() {
            "INIT" => "is still initializing the communicator",
            "ABORT" => "aborted its communicator",
            "FINALIZE" => "is finalizing or destroying its communicator",
            "NOCOMM" => "has no such communicator (never created, or already destroyed)",
            _ => "is in a state RAS does not know",
        };
        for p in &g.members {
            let why = format!(
                "communicator {} status {} while {} ranks are {}",
                c.hash, g.value, major.size, major.value
            );
            let facts = vec![
                fact("comm_status", &g.value),
                fact("others_status", &major.value),
                fact("others_count", major.size.to_string()),
                fact("status_meaning", meaning),
                fact("comm_hash", &c.hash),
            ];
            cx.blame(
                board,
                p,
                size,
                p.seq,
                ("ras_rank_status", W_STATUS),
                why,
                facts,
            );
        }
    }
}

/// In an operation-count mismatch, the ranks with the lowest count.
fn behind(cx: &Ctx, c: &Comm, size: Option<u32>, coll: &str, groups: &[Group], board: &mut Board) {
    let count = |g: &Group| g.value.parse::<u64>().unwrap_or(0);
    let (Some(low), Some(high)) = (
        groups.iter().min_by_key(|g| count(g)),
        groups.iter().max_by_key(|g| count(g)),
    ) else {
        return;
    };
    if count(low) == count(high) {
        return;
    }
    let others: Vec<&Group> = groups.iter().filter(|g| count(g) > count(low)).collect();
    let ahead = ranks_of(&others);
    let all_listed = others.iter().all(|g| g.members.len() == g.size);
    let ahead_text = if all_listed && !ahead.is_empty() {
        rank_ranges(&ahead)
    } else {
        format!("{} ranks", others.iter().map(|g| g.size).sum::<usize>())
    };
    // The ranks behind: listed, else the communicator's ranks that no other group lists.
    let mut lagging: Vec<Proc> = low.members.clone();
    if lagging.is_empty() && all_listed {
        if let Some(n) = size.filter(|&n| (n as usize) == low.size + ahead.len()) {
            lagging = (0..n)
                .filter(|x| !ahead.contains(x))
                .map(|x| Proc {
                    comm_rank: Some(x),
                    seq: low.seq,
                    ..Proc::default()
                })
                .collect();
        }
    }
    let lagging_ranks: BTreeSet<u32> = lagging.iter().filter_map(|p| p.comm_rank).collect();
    let lagging_text = if lagging_ranks.is_empty() {
        format!("{} ranks", low.size)
    } else {
        rank_ranges(&lagging_ranks)
    };
    if lagging.is_empty() {
        // Nobody can be named: the report's own line stands for them.
        lagging.push(Proc {
            seq: low.seq,
            ..Proc::default()
        });
    }
    let coll_op = if coll == "collective" { "" } else { coll };
    for p in &lagging {
        let why = format!(
            "behind in communicator {}: launched up to {coll} operation {} while {ahead_text} \
             launched up to {}",
            c.hash, low.value, high.value
        );
        let facts = vec![
            fact("comm_hash", &c.hash),
            fact("coll_op", coll_op),
            fact("ops_launched", &low.value),
            fact("ops_ahead", &high.value),
            fact("ahead_ranks", &ahead_text),
            fact("lagging_ranks", &lagging_text),
        ];
        // A listed rank shows its own line; a rank no line lists, its group's line.
        cx.blame(
            board,
            p,
            size,
            p.seq,
            ("ras_rank_behind", W_BEHIND),
            why,
            facts,
        );
    }
}

/// The source's last report, text or JSON (whichever starts later); `Err` says why a JSON
/// report in it could not be read.
fn last_report(lines: &[(u64, String)]) -> Result<Report, String> {
    let text_start = lines.iter().rposition(|(_, m)| m.trim() == "Job summary");
    match json::locate(lines) {
        Ok(Some(j)) if text_start.is_none_or(|t| t < j) => json::read(&lines[j..]),
        Err(e) if text_start.is_none() => Err(e),
        _ => Ok(parse(lines)),
    }
}

/// The incident's hits of `src`, by seq.
fn hits_of(scope: &Scope, v: &View, src: u32) -> BTreeMap<u64, usize> {
    scope
        .hits
        .iter()
        .filter(|&&i| v.hit(i).source == src)
        .map(|&i| (v.hit(i).seq, i))
        .collect()
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let srcs: BTreeSet<u32> = scope
        .hits
        .iter()
        .map(|&i| v.hit(i))
        .filter(|h| v.sig(h).is_some_and(|s| s.id.starts_with("ras_report_")))
        .map(|h| h.source)
        .collect();
    // Sources with monitor events: their deaths open an incident; a loss that never
    // recovered counts in any incident of the job.
    if !scope.hits.is_empty() {
        for (src, s) in v.job.sources.iter().enumerate() {
            if let Some(m) = s.ras_monitor.as_deref().filter(|m| !m.events.is_empty()) {
                let cx = Ctx {
                    v,
                    src: src as u32,
                    hits: hits_of(scope, v, src as u32),
                    world: None,
                };
                monitor::apply(&cx, m, board);
            }
        }
    }
    for src in srcs {
        let report = match report_lines(v, scope, src).and_then(|lines| last_report(&lines)) {
            Ok(r) => r,
            Err(why) => {
                // Reported beside the diagnosis, and skipped: no finding from part of a report.
                scope.notes.borrow_mut().push(OddContext::new(
                    "ncclras report",
                    Some(v.job.sources[src as usize].origin.as_ref()),
                    "not read",
                    &why,
                ));
                continue;
            }
        };
        let cx = Ctx {
            v,
            src,
            hits: hits_of(scope, v, src),
            world: report.sizes.values().copied().max(),
        };
        apply_report(&cx, &report, board);
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const HEAD: &str = "NCCL version 2.26.5 compiled with CUDA 12.8\n\
        CUDA runtime version 12080, driver version 12080\n\n\
        Job summary\n===========\n\n\
          Nodes  Processes         GPUs  Processes     GPUs\n\
        (total)   per node  per process    (total)  (total)\n\
              2          8            1         16       16\n\n\
        Communicators... (0.00s)\n=============\n\n\
        Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n\
            #  in group  per comm  per node  per comm  in group\n";

    fn report(row_errors: &str, body: &str) -> String {
        format!(
            "{HEAD}    0         1         2         8        16        16   RUNNING  {row_errors}\n\n\
             Errors\n======\n\n{body}"
        )
    }

    #[test]
    fn the_few_ranks_behind_are_the_root_not_the_many_ahead() {
        let text = report(
            "MISMATCH",
            "Warnings\n========\n\n#0-0 (7c1e00a2b4d3f950) MISMATCH\n  \
             Communicator ranks have different AllReduce operation counts\n  \
             15 ranks have launched up to operation 2210\n  \
             Rank 9 has launched up to operation 2209 -- GPU 1 managed by process 7741 on node gpu-b2\n",
        );
        let d = diagnose(&text);
        assert!(root_line(&d).contains("Rank 9 has launched up to operation 2209"));
        assert_eq!(d[0].json["root_cause"]["rank"], 9);
        assert_eq!(d[0].json["cause_signature"]["id"], "ras_rank_behind");
        assert!(d[0].json["fix"].as_str().unwrap().contains("7741"));
    }

    #[test]
    fn when_only_the_ranks_ahead_are_listed_the_rest_are_behind() {
        let text = report(
            "MISMATCH",
            "Warnings\n========\n\n#0-0 (7c1e00a2b4d3f950) MISMATCH\n  \
             Communicator ranks have different AllGather operation counts\n  \
             14 ranks have launched up to operation 512\n  \
             2 ranks have launched up to operation 513\n  \
             Rank 4 -- GPU 4 managed by process 6004 on node gpu-b1\n  \
             Rank 5 -- GPU 5 managed by process 6005 on node gpu-b1\n",
        );
        let d = diagnose(&text);
        assert!(root_line(&d).contains("14 ranks have launched up to operation 512"));
        let rank = d[0].json["root_cause"]["rank"].as_u64().unwrap();
        assert!(rank != 4 && rank != 5, "{rank}");
        assert_eq!(d[0].json["facts"]["lagging_ranks"], "0-3,6-15");
        assert_eq!(d[0].json["facts"]["ahead_ranks"], "4-5");
    }

    #[test]
    fn a_text_report_of_1024_ranks_longer_than_the_ring_is_read_whole() {
        // a verbose report: the 300 ranks behind listed one by one after their group's line,
        // more lines than the 256 a process keeps
        let mut body = String::from(
            "Warnings\n========\n\n#0-0 (7c1e00a2b4d3f950) MISMATCH\n  \
             Communicator ranks have different AllReduce operation counts\n  \
             724 ranks have launched up to operation 2210\n  \
             300 ranks have launched up to operation 2209\n",
        );
        for r in 0..300 {
            body.push_str(&format!(
                "  Rank {r} -- GPU {} managed by process {} on node gpu-{}\n",
                r % 8,
                30_000 + r,
                r / 8
            ));
        }
        let text = report("MISMATCH", &body)
            .replace(
                "        16        16   RUNNING",
                "      1024      1024   RUNNING",
            )
            .replace(
                "      2          8            1         16       16",
                "    128          8            1       1024     1024",
            );
        assert!(text.lines().count() > 300);
        let d = diagnose(&text);
        assert_eq!(d[0].json["cause_signature"]["id"], "ras_rank_behind");
        assert_eq!(d[0].json["facts"]["lagging_ranks"], "0-299");
        assert_eq!(d[0].json["facts"]["ahead_ranks"], "724 ranks");
    }

    #[test]
    fn dead_processes_are_named() {
        let text = report(
            "INCOMPLETE",
            "INCOMPLETE\n  Missing communicator data from 1 job process\n  \
             Process 9120 on node gpu-b2 managing GPU 3\n\n\
             DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n  \
             Process 9120 on node gpu-b2 managing GPU 3\n\n\
             #0-0 (7c1e00a2b4d3f950) INCOMPLETE\n  Missing communicator data from 1 rank\n  \
             Rank 11 -- GPU 3 managed by process 9120 on node gpu-b2\n",
        );
        let d = diagnose(&text);
        assert_eq!(d[0].json["cause_signature"]["id"], "ras_process_dead");
        assert!(root_line(&d).contains("Process 9120 on node gpu-b2"));
    }

    mod json_form {
        use super::super::json::sample::{doc, missing, rank};
        use super::report;
        use crate::correlate::testkit::{diagnose, root_line};

        /// Four ranks on one node; `lag` launched one AllReduce fewer than the rest.
        fn ranks(lag: u32) -> Vec<String> {
            (0..4)
                .map(|r| {
                    let n = if r == lag { 2209 } else { 2210 };
                    rank(
                        r,
                        "10.7.0.2",
                        7740 + r as i64,
                        [0, 0, 12, 0, n],
                        (0, 0, false),
                    )
                })
                .collect()
        }

        #[test]
        fn the_rank_behind_is_named_from_its_entry() {
            let d = diagnose(&doc(&ranks(1), &[]));
            assert_eq!(d.len(), 1, "{d:?}");
            assert_eq!(d[0].json["cause_signature"]["id"], "ras_rank_behind");
            assert_eq!(d[0].json["root_cause"]["rank"], 1);
            assert_eq!(root_line(&d).trim(), "\"rank\": 1,");
            assert_eq!(d[0].json["facts"]["ops_launched"], "2209");
            assert_eq!(d[0].json["facts"]["ops_ahead"], "2210");
            assert_eq!(d[0].json["facts"]["coll_op"], "AllReduce");
            assert!(d[0].json["fix"].as_str().unwrap().contains("7741"));
        }

        #[test]
        fn a_healthy_report_is_no_diagnosis() {
            assert!(diagnose(&doc(&ranks(9), &[])).is_empty());
        }

        #[test]
        fn a_dead_process_is_named_also_from_2_28_s_invalid_json() {
            for comma in [true, false] {
                let dead = missing(3, "10.7.0.3", 7743, true, comma);
                let d = diagnose(&doc(&ranks(9)[..3], &[dead]));
                assert_eq!(
                    d[0].json["cause_signature"]["id"], "ras_process_dead",
                    "{comma}"
                );
                assert!(d[0].json["cause"].as_str().unwrap().contains("7743"));
            }
        }

        #[test]
        fn the_text_and_the_json_report_of_one_hang_agree() {
            let text = report(
                "MISMATCH",
                "Warnings\n========\n\n#0-0 (05d1e00a2b4d3f95) MISMATCH\n  \
                 Communicator ranks have different AllReduce operation counts\n  \
                 3 ranks have launched up to operation 2210\n  \
                 Rank 1 has launched up to operation 2209 -- GPU 1 managed by process 7741 on node 10.7.0.2\n",
            )
            .replace("        16        16   RUNNING", "         4         4   RUNNING");
            let (t, j) = (diagnose(&text), diagnose(&doc(&ranks(1), &[])));
            for k in ["rank", "host"] {
                assert_eq!(
                    t[0].json["root_cause"][k], j[0].json["root_cause"][k],
                    "{k}"
                );
            }
            assert_eq!(t[0].json["cause_signature"], j[0].json["cause_signature"]);
            for k in [
                "comm_hash",
                "lagging_ranks",
                "ops_launched",
                "ops_ahead",
                "pid",
            ] {
                assert_eq!(t[0].json["facts"][k], j[0].json["facts"][k], "{k}");
            }
            // The text lists the many ranks ahead only by number; the JSON lists every rank.
            assert_eq!(t[0].json["facts"]["ahead_ranks"], "3 ranks");
            assert_eq!(j[0].json["facts"]["ahead_ranks"], "0,2-3");
        }

        /// `n` ranks on nodes of eight; `dead` missing and considered dead.
        fn big(n: u32, dead: u32) -> String {
            let node = |r: u32| format!("10.7.{}.{}", r / 8 / 250, r / 8 % 250 + 1);
            let ranks: Vec<String> = (0..n)
                .filter(|&r| r != dead)
                .map(|r| {
                    rank(
                        r,
                        &node(r),
                        20_000 + i64::from(r),
                        [0, 0, 12, 0, 7],
                        (0, 0, false),
                    )
                })
                .collect();
            let gone = missing(dead, &node(dead), 20_000 + i64::from(dead), true, true);
            doc(&ranks, &[gone])
        }

        #[test]
        fn a_report_of_1024_ranks_is_read_whole_past_the_ring() {
            let text = big(1024, 700);
            assert!(text.lines().count() > 20 * 1024); // a ring keeps 256 lines
            let d = diagnose(&text);
            assert_eq!(d[0].json["cause_signature"]["id"], "ras_process_dead");
            assert!(d[0].json["cause"].as_str().unwrap().contains("20700"));
            assert_eq!(d[0].json["root_cause"]["rank"], 700);
            let suspects: Vec<_> = d[0].json["suspects"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s["rank"].as_u64())
                .collect();
            assert_eq!(suspects, vec![700]);
        }

        #[test]
        fn a_report_over_the_cap_is_counted_and_noted_not_read() {
            use crate::correlate::testkit::shipped_catalog;
            use crate::{Config, Engine, StreamHints};
            use std::sync::Arc;
            let cfg = Config {
                ras_report_bytes: 64 << 10,
                ..Config::default()
            };
            let mut e = Engine::new(Arc::new(shipped_catalog()), cfg);
            let id = e.open_stream("j", "ras.json", StreamHints::default());
            let failing = format!(
                "{}gpu-b2:7741:7790 [1] NCCL WARN Cuda failure 'an illegal memory access was encountered'\n",
                big(256, 3)
            );
            e.feed(id, failing.as_bytes(), Some(1_000));
            let d = e.finish();
            assert_eq!(e.stats.ras_reports_over_cap, 1);
            assert_ne!(d[0].json["cause_signature"]["id"], "ras_process_dead");
            let notes = d[0].json["odd_context"].to_string();
            assert!(
                notes.contains("ncclras report") && notes.contains("ras_report_bytes"),
                "{notes}"
            );
        }

        #[test]
        fn a_malformed_report_is_noted_and_skipped() {
            let bad =
                doc(&ranks(1), &[]).replacen("\"AllReduce\": 2209", "\"AllReduce\": \"x\"", 1);
            let failing = format!(
                "{bad}gpu-b2:7741:7790 [1] NCCL WARN Cuda failure 'an illegal memory access was encountered'\n"
            );
            let d = diagnose(&failing);
            assert_ne!(d[0].json["cause_signature"]["id"], "ras_rank_behind");
            assert!(d[0].json["odd_context"]
                .to_string()
                .contains("not the JSON NCCL prints"));
            assert!(diagnose(&bad).is_empty());
        }

        #[test]
        fn a_report_in_one_record_on_the_topic_is_read() {
            use crate::records::{DecoderConfig, Format};
            use crate::{Config, Engine};
            use std::sync::Arc;
            let cfg = DecoderConfig::preset(Format::Canonical);
            let value =
                serde_json::json!({"job": "j", "host": "ops-1", "line": doc(&ranks(2), &[])})
                    .to_string()
                    .into_bytes();
            let mut e = Engine::new(
                Arc::new(crate::correlate::testkit::shipped_catalog()),
                Config::default(),
            );
            let rejected =
                e.feed_records(&cfg, "t/0", &[(value.as_slice(), None, None, Some(1_000))]);
            assert!(rejected.is_empty());
            let d = e.finish();
            assert_eq!(d[0].json["cause_signature"]["id"], "ras_rank_behind");
            assert_eq!(d[0].json["root_cause"]["rank"], 2);
        }
    }

    #[test]
    fn a_healthy_report_is_no_diagnosis() {
        let text = report("OK", "Warnings\n========\n");
        assert!(diagnose(&text).is_empty());
    }
}
