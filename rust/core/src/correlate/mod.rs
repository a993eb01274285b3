//! Correlation: groups signature hits into incidents and, for each, decides where the fault
//! is. Evidence comes before clocks: each rule in [`rules`] writes evidence records about
//! candidate processes and hosts, the ranking sums them, and only then does skew-corrected
//! time ([`clock`]) order what is left. [`render`] turns the result into the diagnosis.

mod board;
pub mod clock;
mod collectives;
mod crash;
mod facts;
mod identity;
mod net_split;
mod render;
mod rules;
mod shared_host;
mod stacks;
#[cfg(test)]
pub(crate) mod testkit;
pub mod util;
mod view;

pub use util::{bdf_to_bus_id, iso_ms, parse_rank_list, rank_ranges};

use crate::catalog::{Catalog, HostScope};
use crate::config::Config;
use crate::job::{Hit, Job};
use crate::native_stacks::NativeStack;
use board::Board;
use clock::estimate_offsets;
use serde_json::Value;
use std::cell::RefCell;
use util::fnv;
use view::View;

/// One published diagnosis: its JSON (a [`crate::report::Diagnosis`] as a value, so that
/// later steps may add to it: the baseline's difference) and what the engine keeps about it.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub id: String,
    pub job: String,
    pub confidence: f64,
    pub start_ms: Option<i64>,
    pub is_final: bool,
    pub json: Value,
}

/// Puts a new hit into an incident of its job, opening one if none is near in time.
///
/// An incident lies within `incident_horizon_ms` of its anchor: its first hit that shows a
/// failure, or its first hit while it has none. A benign warning (a launcher's banner, a
/// barrier notice at start-up) does not hold the anchor once a failure joins: anchored there,
/// a run longer than the horizon split the failure's evidence in two (the ranks whose lines
/// came first, with the start-up warnings, became an incident of their own).
pub fn assign_incident(
    job: &mut Job,
    hit: &Hit,
    idx: u32,
    cat: &Catalog,
    cfg: &Config,
    wall_ms: i64,
) {
    let horizon = cfg.incident_horizon_ms;
    // A record's time is on another clock than the times lines print: where lines print
    // times, a hit that has only its record's joins as a line without a time does, and an
    // incident opened on records' times takes the first printed time instead.
    let ts = match (hit.ts_from_record, job.max_event_ms) {
        (true, Some(_)) => None,
        _ => hit.ts_ms,
    };
    let from_record = hit.ts_from_record;
    for inc in job.incidents.iter_mut().rev() {
        let joins = match (ts, inc.start_ms) {
            (Some(t), Some(s)) if inc.record_times == from_record => {
                t >= s - horizon && t <= s + horizon
            }
            _ => true,
        };
        if joins {
            inc.hits.push(idx);
            if let Some(t) = ts {
                if inc.record_times && !from_record {
                    (inc.start_ms, inc.min_ms, inc.record_times) = (None, None, false);
                }
                inc.min_ms = Some(inc.min_ms.map_or(t, |m| m.min(t)));
                if inc.start_ms.is_none() || !inc.anchored_on_failure && !hit.warn_only {
                    inc.start_ms = Some(t);
                    inc.record_times = from_record;
                    inc.anchored_on_failure = !hit.warn_only;
                }
            }
            return;
        }
    }
    let start = ts.map_or_else(|| format!("seq:{}", hit.seq), |t| t.to_string());
    // The signature by name, not by its place in the catalog: an incident keeps its id when
    // the catalog grows (a restarted daemon re-publishes under the same id).
    let sig = hit
        .sig
        .and_then(|s| cat.signatures.get(s as usize))
        .map_or("unclassified", |s| s.id.as_str());
    let id = format!("rw-{:016x}", fnv(&[&job.name, &start, sig]));
    job.incidents.push(crate::job::Incident {
        id,
        start_ms: ts,
        min_ms: ts,
        record_times: ts.is_some() && from_record,
        anchored_on_failure: ts.is_some() && !hit.warn_only,
        opened_wall_ms: wall_ms,
        hits: vec![idx],
        published_hash: None,
        final_published: false,
        diagnosed: None,
        dismissed: false,
        diagnosed_wall_ms: 0,
    });
}

/// Whether an incident is due for a diagnosis now, and whether that diagnosis is final.
fn due(
    job: &Job,
    inc: &crate::job::Incident,
    cfg: &Config,
    now: i64,
    final_: bool,
) -> Option<bool> {
    if inc.final_published {
        return None;
    }
    // Event time where lines print it; a job whose lines print none goes by its records'.
    let watermark = job.max_event_ms.or(job.max_record_ms);
    let start = inc.min_ms.or(inc.start_ms);
    let by_watermark = matches!((watermark, start), (Some(w), Some(s)) if w >= s + cfg.settle_ms);
    // Processing-time bounds: the job has been quiet for a settle window (its logs ended:
    // nothing later will move the watermark), or the incident waited max_wait_ms.
    let live = now != i64::MAX && inc.opened_wall_ms > 0;
    let by_wall = live && now - inc.opened_wall_ms >= cfg.max_wait_ms;
    let by_quiet = live
        && job.last_wall_ms > 0
        && now - job.last_wall_ms >= cfg.settle_ms
        && now - inc.opened_wall_ms >= cfg.settle_ms;
    if !(final_ || by_watermark || by_wall || by_quiet) {
        return None;
    }
    let is_final = final_
        || matches!((watermark, start), (Some(w), Some(s)) if w > s + cfg.incident_horizon_ms);
    Some(is_final)
}

/// Whether a first diagnosis whose root cause names no rank should wait: the job's other
/// processes state their ranks, so the root's is likely in a line still on its way (a kernel
/// Xid line names a pid the process's NCCL init line maps to a rank). It waits one more settle
/// window at most, and never past the incident's max_wait_ms; an alert that says "unknown
/// rank" and is corrected a second later helps nobody.
fn rank_may_follow(job: &Job, i: usize, cfg: &Config, now: i64, d: &Diagnosis) -> bool {
    if !d.json["root_cause"]["rank"].is_null()
        || !job.sources.iter().any(|s| s.stated_rank().is_some())
    {
        return false;
    }
    let inc = &job.incidents[i];
    let grace = 2 * cfg.settle_ms;
    let watermark = job.max_event_ms.or(job.max_record_ms);
    let start = inc.min_ms.or(inc.start_ms);
    let by_watermark = matches!((watermark, start), (Some(w), Some(s)) if w >= s + grace);
    let live = now != i64::MAX && inc.opened_wall_ms > 0;
    let waited = now - inc.opened_wall_ms;
    let by_wall = live && (waited >= grace || waited >= cfg.max_wait_ms);
    !(by_watermark || by_wall) && live
}

/// An open incident diagnosed less than a settle window of wall time ago waits, where the
/// caller asks for it (`hold`): a storm of lines from thousands of ranks would otherwise have
/// its diagnosis (every rule over every hit, then rendered) rebuilt on every poll, once per
/// batch. Only an incident with a published diagnosis waits: the first one (also after a
/// diagnosis that found no failure) is never held, nor a final one (end of input, a quiet job
/// released, the horizon passed). A poll without `hold` diagnoses what waits (the daemon's,
/// before it commits offsets: no update is held past the records it derives from).
fn recently_diagnosed(
    inc: &crate::job::Incident,
    is_final: bool,
    cfg: &Config,
    now_wall_ms: i64,
) -> bool {
    !is_final
        && now_wall_ms != i64::MAX
        && inc.diagnosed.is_some()
        && inc.published_hash.is_some()
        && !inc.dismissed
        && inc.diagnosed_wall_ms > 0
        && now_wall_ms - inc.diagnosed_wall_ms < cfg.settle_ms
}

/// Emits diagnoses for incidents that are ready and new or changed since last published.
/// With `hold`, an open incident diagnosed within the last settle window waits
/// (`recently_diagnosed`).
pub fn diagnose_ready(
    job: &mut Job,
    cat: &Catalog,
    cfg: &Config,
    now_wall_ms: i64,
    final_: bool,
    hold: bool,
) -> Vec<Diagnosis> {
    open_from_tables(job, cat, cfg);
    if final_ && !shows_any_failure(job, cat) {
        open_net_split(job, cat, cfg);
    }
    let version = job.input_version();
    if now_wall_ms != i64::MAX {
        // Input fed before the first poll carries no wall time (the engine learns the clock
        // from `poll`): its processing-time bounds start at the first poll that sees it.
        if job.last_wall_ms == 0 {
            job.last_wall_ms = now_wall_ms;
        }
        for inc in job.incidents.iter_mut().filter(|i| i.opened_wall_ms == 0) {
            inc.opened_wall_ms = now_wall_ms;
        }
    }
    // An incident whose inputs and status did not change since its last diagnosis is not
    // diagnosed again; one whose inputs keep changing is, as an open diagnosis, at most once
    // per settle window of wall time where the caller holds (`recently_diagnosed`).
    let changed: Vec<(usize, bool)> = job
        .incidents
        .iter()
        .enumerate()
        .filter_map(|(i, inc)| due(job, inc, cfg, now_wall_ms, final_).map(|f| (i, f)))
        // At the end of the input a dismissed incident is looked at again (`fails_when_last`).
        .filter(|&(i, f)| {
            job.incidents[i].diagnosed != Some((version, f))
                || job.input_ended && job.incidents[i].dismissed
        })
        .collect();
    let n_changed = changed.len();
    let todo: Vec<(usize, bool)> = changed
        .into_iter()
        .filter(|&(i, f)| !(hold && recently_diagnosed(&job.incidents[i], f, cfg, now_wall_ms)))
        .collect();
    // What waits is reported (`Engine::held_jobs`): a caller that commits input positions
    // commits a job's records only once a diagnosis reflects them.
    job.held = todo.len() < n_changed;
    if todo.is_empty() {
        return Vec::new();
    }
    let offsets = estimate_offsets(job, cfg);
    let diagnosed: Vec<(usize, bool, Option<Diagnosis>)> = {
        let view = View::new(job, cat, cfg, &offsets);
        todo.into_iter()
            .map(|(i, f)| (i, f, diagnose(&view, i, f)))
            .collect()
    };
    let mut out = Vec::new();
    for (i, is_final, d) in diagnosed {
        let inc = &mut job.incidents[i];
        inc.diagnosed = Some((version, is_final));
        if now_wall_ms != i64::MAX {
            inc.diagnosed_wall_ms = now_wall_ms;
        }
        inc.dismissed = d.is_none();
        let Some(mut d) = d else {
            continue;
        };
        d.is_final = is_final;
        if !is_final
            && inc.published_hash.is_none()
            && rank_may_follow(job, i, cfg, now_wall_ms, &d)
        {
            // Not diagnosed yet: the next poll looks again.
            job.incidents[i].diagnosed = None;
            continue;
        }
        let inc = &mut job.incidents[i];
        let hash = fnv(&[&d.json.to_string()]);
        if is_final {
            inc.final_published = true;
        }
        if inc.published_hash == Some(hash) {
            continue;
        }
        inc.published_hash = Some(hash);
        out.push(d);
    }
    out
}

/// Some failures no line states: ranks' NCCL traces that disagree at one operation counter
/// (the collective hangs without an error), a stack dump of a process stuck outside any
/// collective, or of processes that all wait in one. With no incident open, such a job gets
/// one, opened on the line that shows it (the odd rank's trace, every side's where no side is
/// the majority; the stuck frame; the waiting frame) as the finding the rules then explain.
fn open_from_tables(job: &mut Job, cat: &Catalog, cfg: &Config) {
    if !job.incidents.is_empty() {
        return;
    }
    if let Some(g) = job.shared_gpu.clone() {
        open_shared_gpu(job, cat, cfg, g);
        return;
    }
    let tables_changed = job.table_lines_seen != job.table_lines_checked;
    // Links are compared with the addresses processes state, which may come later.
    let links_version = (job.p2p_links.links.len(), job.context.len());
    let links_changed = job.p2p_links.checked != links_version;
    if !tables_changed && !links_changed {
        return;
    }
    job.table_lines_checked = job.table_lines_seen;
    job.p2p_links.checked = links_version;
    // Whether the tables show a failure does not depend on time: no clock estimate (it reads
    // every sync point, and this runs on each poll while a healthy job's traces stream in).
    let offsets = clock::Offsets {
        by_host: Default::default(),
        uncertainty_ms: cfg.clock_uncertainty_ms,
        events_used: 0,
    };
    let (lines, crossing, waiting) = {
        let view = View::new(job, cat, cfg, &offsets);
        let mut out = Vec::new();
        if tables_changed {
            out = trace_split_lines(&view);
            if out.is_empty() {
                out = stuck_stack_lines(&view);
            }
        }
        let crossing = if out.is_empty() && links_changed {
            shared_host::first_crossing(&view)
        } else {
            None
        };
        let waiting = (out.is_empty() && tables_changed)
            .then(|| first_waiting_frame(&view))
            .flatten();
        (out, crossing, waiting)
    };
    if let Some(c) = crossing {
        open_crossing(job, cat, cfg, c);
        return;
    }
    if lines.is_empty() && tables_changed {
        open_stuck_watchdogs(job, cat, cfg);
        open_nccl_waits(job, cat, cfg);
        if let (Some((src, i)), true) = (waiting, job.incidents.is_empty()) {
            open_collective_wait(job, cat, cfg, src, i);
        }
        return;
    }
    for (line, finding) in lines {
        let Some(sig) = cat.index_of(finding) else {
            continue;
        };
        let table_line = match line {
            board::LineRef::Call(src, i) => {
                let c = &job.sources[src as usize].coll_calls[i];
                TableLine {
                    src,
                    text: c.line.clone(),
                    origin: c.origin.clone(),
                    seq: c.seq,
                    line_no: c.line_no,
                    ts: c.ts_ms,
                }
            }
            board::LineRef::Frame(src, i) => {
                let Some(line) = frame_line(job, src, i) else {
                    continue;
                };
                line
            }
            _ => continue,
        };
        open_finding(job, cat, cfg, sig, table_line, Vec::new());
    }
}

/// Frame `i` of the stack dumped from process `src`, with the time of its dump.
fn frame_of(job: &Job, src: u32, i: usize) -> Option<(&crate::job::StackFrame, Option<i64>)> {
    let k = job.sources[src as usize].stack.as_ref()?;
    Some((k.frames.get(i)?, k.ts_ms))
}

/// Frame `i` of the stack dumped from process `src`, as a line of the tables.
fn frame_line(job: &Job, src: u32, i: usize) -> Option<TableLine> {
    let (f, ts) = frame_of(job, src, i)?;
    Some(TableLine::printed_by(
        job,
        src,
        f.text.clone(),
        (f.seq, f.line_no, ts),
    ))
}

/// Where the first dumped process waits in a collective, when no dumped process is stuck
/// elsewhere (asked only then): (process, frame).
fn first_waiting_frame(view: &View) -> Option<(u32, usize)> {
    view.job
        .sources
        .iter()
        .enumerate()
        .filter_map(|(si, s)| {
            let k = s.stack.as_ref()?;
            match stacks::place(k)? {
                stacks::Place::Collective(i) => Some((k.seq, si as u32, i)),
                stacks::Place::Elsewhere(_) => None,
            }
        })
        .min()
        .map(|(_, src, i)| (src, i))
}

/// Every dumped process waits in a collective and nothing else failed: the job hangs in that
/// call, on peers whose state is not in view (`stack_waits_in_collective`, on the frame).
fn open_collective_wait(job: &mut Job, cat: &Catalog, cfg: &Config, src: u32, i: usize) {
    let (Some(sig), Some(line), Some((frame, _))) = (
        cat.index_of(WAITS_IN_COLLECTIVE),
        frame_line(job, src, i),
        frame_of(job, src, i),
    ) else {
        return;
    };
    let fields = vec![
        ("frame_func".to_string(), frame.func.clone()),
        ("frame_file".to_string(), frame.file.clone()),
    ];
    open_finding(job, cat, cfg, sig, line, fields);
}

/// Processes whose native stack dump shows the NCCL watchdog blocked in a CUDA call
/// (`native_stacks`): the finding `watchdog_stuck_in_cuda` on that frame, the first process's.
fn open_stuck_watchdogs(job: &mut Job, cat: &Catalog, cfg: &Config) {
    open_stack_finding(job, cat, cfg, STUCK_WATCHDOG, |s| s.stuck_watchdog.as_ref());
}

/// Processes whose native stack dump shows a thread waiting inside NCCL's own code
/// (`native_stacks`): the finding `thread_waits_inside_nccl` on that NCCL frame, the first
/// process's.
fn open_nccl_waits(job: &mut Job, cat: &Catalog, cfg: &Config) {
    open_stack_finding(job, cat, cfg, WAITS_IN_NCCL, NativeStack::waits_in_nccl);
}

/// The finding `id` on the earliest frame `frame` picks from a process's native stack dump.
fn open_stack_finding(
    job: &mut Job,
    cat: &Catalog,
    cfg: &Config,
    id: &str,
    frame: impl Fn(&NativeStack) -> Option<&crate::native_stacks::Frame>,
) {
    let Some(sig) = cat.index_of(id) else {
        return;
    };
    let first = job
        .native_stacks
        .iter()
        .filter_map(|(&src, s)| Some((src, frame(s)?)))
        .min_by_key(|(_, f)| f.seq)
        .map(|(src, f)| {
            TableLine::printed_by(job, src, f.text.to_string(), (f.seq, f.line_no, f.ts_ms))
        });
    if let Some(line) = first {
        open_finding(job, cat, cfg, sig, line, Vec::new());
    }
}

const STUCK_WATCHDOG: &str = "watchdog_stuck_in_cuda";
const WAITS_IN_COLLECTIVE: &str = "stack_waits_in_collective";
const WAITS_IN_NCCL: &str = "thread_waits_inside_nccl";
const SHARED_GPU: &str = "gpu_shared_by_two_ranks";

/// Two ranks of one communicator on one GPU (`Job::shared_gpu`): the finding, on the second
/// rank's init line.
fn open_shared_gpu(job: &mut Job, cat: &Catalog, cfg: &Config, g: crate::job::SharedGpu) {
    let Some(sig) = cat.index_of(SHARED_GPU) else {
        return;
    };
    let fields = vec![
        ("subject_rank".to_string(), g.rank.to_string()),
        ("other_rank".to_string(), g.other_rank.to_string()),
        ("dup_bus_id".to_string(), g.bus_id),
        ("comm_id".to_string(), g.comm_id),
    ];
    let line = TableLine::printed_by(job, g.src, g.text, (g.seq, g.line_no, g.ts_ms));
    open_finding(job, cat, cfg, sig, line, fields);
}

const NET_SPLIT: &str = "network_differs_between_machines";

/// Machines of the job on different NCCL networks (`net_split`): the finding, on the odd
/// machine's line.
fn open_net_split(job: &mut Job, cat: &Catalog, cfg: &Config) {
    let (Some(sig), Some(split)) = (
        cat.index_of(NET_SPLIT),
        net_split::odd_machine(job, cfg.default_year),
    ) else {
        return;
    };
    let fields = vec![
        ("odd_network".to_string(), split.odd_network),
        ("job_network".to_string(), split.job_network),
    ];
    let at = (split.seq, split.line_no, split.ts_ms);
    let line = TableLine::printed_by(job, split.src, split.text, at);
    open_finding(job, cat, cfg, sig, line, fields);
}

/// A line one of the job's tables kept, and where it was printed.
struct TableLine {
    src: u32,
    text: String,
    origin: std::sync::Arc<str>,
    seq: u64,
    line_no: u64,
    ts: Option<i64>,
}

impl TableLine {
    /// Line `text` of process `src`, at (seq, line number, time), in that process's file.
    fn printed_by(job: &Job, src: u32, text: String, at: (u64, u64, Option<i64>)) -> Self {
        let (seq, line_no, ts) = at;
        TableLine {
            src,
            text,
            origin: job.sources[src as usize].origin.clone(),
            seq,
            line_no,
            ts,
        }
    }
}

/// Opens an incident (or joins one) on a table's line, as a hit of the finding `sig` with the
/// facts it was found with.
fn open_finding(
    job: &mut Job,
    cat: &Catalog,
    cfg: &Config,
    sig: u16,
    line: TableLine,
    fields: Vec<(String, String)>,
) {
    let hit = Hit {
        sig: Some(sig),
        warn_only: false,
        source: line.src,
        seq: line.seq,
        line_no: line.line_no,
        ts_ms: line.ts,
        ts_exact: line.ts.is_some(),
        // The tables keep a line's time, not where it came from: taken as its process's.
        ts_from_record: false,
        ingest_ms: None,
        record: vec![line.text.clone()],
        text: line.text,
        origin: line.origin,
        fields,
        last_error_text: false,
        beyond_cap: None,
    };
    push_hit(job, hit, cat, cfg, 0);
    job.failure_seen = true;
}

/// An incident for a link NCCL built between two machines it took for one: its line, with
/// the `p2p_across_machines` finding and why the ends are on two machines.
fn open_crossing(job: &mut Job, cat: &Catalog, cfg: &Config, c: shared_host::Crossing) {
    let Some(sig) = cat.index_of(P2P_ACROSS_MACHINES) else {
        return;
    };
    let l = &job.p2p_links.links[c.link];
    let fields = vec![
        (
            "shared_host".to_string(),
            job.hosts[c.host as usize].clone(),
        ),
        ("link_from".to_string(), l.from.to_string()),
        ("link_to".to_string(), l.to.to_string()),
        ("two_machines".to_string(), c.why),
    ];
    let line = TableLine::printed_by(job, l.src, l.line.to_string(), (l.seq, l.line_no, l.ts_ms));
    open_finding(job, cat, cfg, sig, line, fields);
}

/// The finding of a link between two machines NCCL took for one (`shared_host`).
const P2P_ACROSS_MACHINES: &str = "p2p_across_machines";

/// Keeps `hit` as the job's next hit: it joins (or opens) an incident, and the job's counted
/// memory grows by the hit and by what its incident grew. Returns the hit's index.
pub fn push_hit(job: &mut Job, hit: Hit, cat: &Catalog, cfg: &Config, wall_ms: i64) -> usize {
    let idx = job.hits.len();
    let incidents = |j: &Job| {
        j.incidents
            .iter()
            .map(crate::job::Incident::heap_bytes)
            .sum::<usize>()
    };
    let before = incidents(job);
    assign_incident(job, &hit, idx as u32, cat, cfg, wall_ms);
    job.content_bytes =
        (job.content_bytes + incidents(job) + hit.kept_bytes()).saturating_sub(before);
    job.tables_dirty = true;
    crate::memsize::push_gently(&mut job.hits, Box::new(hit));
    idx
}

/// The first disagreement of the job's NCCL traces: its minority's lines (every side's when
/// none is the majority).
fn trace_split_lines(view: &View) -> Vec<(board::LineRef, &'static str)> {
    let entries = collectives::table(view, &[]);
    let splits = collectives::splits(&entries);
    let Some(split) = splits.into_iter().next() else {
        return Vec::new();
    };
    let odd_from = usize::from(split.has_majority());
    split.classes[odd_from..]
        .iter()
        .flat_map(|(_, es)| es.iter())
        .filter(|e| matches!(e.line, board::LineRef::Call(..)))
        .map(|e| (e.line, "collective_mismatch"))
        .collect()
}

/// Frames where processes whose stacks were dumped are stuck outside any collective.
fn stuck_stack_lines(view: &View) -> Vec<(board::LineRef, &'static str)> {
    view.job
        .sources
        .iter()
        .enumerate()
        .filter_map(|(si, s)| match stacks::place(s.stack.as_ref()?)? {
            stacks::Place::Elsewhere(i) => Some((
                board::LineRef::Frame(si as u32, i),
                "stuck_outside_collective",
            )),
            stacks::Place::Collective(_) => None,
        })
        .collect()
}

/// An incident made only of unrecognised warnings is a failure only when the job shows a
/// failure outcome somewhere (healthy runs print benign warnings too). A cause that matters
/// only between hosts does not make one in a job that provably ran on one host, and an NCCL
/// error-return trace does not make one when its process went on with init after it (NCCL
/// probes optional transports, GDR support for one, and goes on without them). At the end of
/// the input (`Job::input_ended`, which an incident can be final without: its horizon
/// passed), a process that ended on a wait marked `fails_when_last` (or a job that ended on
/// one marked `fails_when_last_in_job`) hung there.
fn shows_failure(job: &Job, cat: &Catalog, hits: &[usize]) -> bool {
    let one_host = std::cell::OnceCell::new();
    job.failure_seen
        || hits.iter().any(|&i| {
            let h = &job.hits[i];
            let spec = h.sig.map(|s| &cat.signatures[s as usize]);
            let out_of_scope = match spec.map_or(HostScope::Any, |s| s.host_scope) {
                HostScope::Any => false,
                HostScope::AcrossHosts => *one_host.get_or_init(|| on_one_host(job)),
                HostScope::TwoHostsNamed => job.hosts.len() < 2,
            };
            let ended_waiting =
                job.input_ended && spec.is_some_and(|s| ends_waiting(job, s, h.source));
            // Not a failure: a warning (unless its process ended on it), a between-hosts cause
            // in a one-host job, one that needs two hosts in a job whose lines name fewer, or
            // one its process recovered from.
            !(h.warn_only && !ended_waiting
                || out_of_scope
                || probe_survived(job, cat, h)
                || recovered(job, cat, h))
        })
}

/// Whether any incident of the job shows a failure (`shows_failure`): a job whose incidents
/// are all benign warnings is, so far, a job where nothing failed.
fn shows_any_failure(job: &Job, cat: &Catalog) -> bool {
    job.incidents.iter().any(|inc| {
        let hits: Vec<usize> = inc.hits.iter().map(|&h| h as usize).collect();
        shows_failure(job, cat, &hits)
    })
}

/// Whether process `src` ended on its last wait of a signature that fails when last: the
/// process printed nothing after it (`fails_when_last`), or nobody did (`_in_job`).
fn ends_waiting(job: &Job, spec: &crate::catalog::Signature, src: u32) -> bool {
    let Some(&seq) = job.last_waits.get(&src) else {
        return false;
    };
    (spec.fails_when_last && job.sources[src as usize].ring.newest_is(seq))
        || (spec.fails_when_last_in_job && job.seq == seq)
}

/// A cause its own process shows to be harmless: it printed one of the signatures the cause
/// is `cleared_by` after it (a plugin that found no provider for one configuration and then
/// selected one for the next), or the cause is a network device it lists (`listed_dev`) that
/// none of the channels it set up uses.
pub(crate) fn recovered(job: &Job, cat: &Catalog, h: &Hit) -> bool {
    unused_device(job, h) || unused_ib_port(job, cat, h) || cleared(job, cat, h)
}

/// A port an InfiniBand tool shows down (`ib_dev`) on a host whose NCCL lists the devices it
/// uses (`NET/IB : Using [0]mlx5_0:1/IB …`) without it: a port nobody cabled, not the fault.
fn unused_ib_port(job: &Job, cat: &Catalog, h: &Hit) -> bool {
    // Only a capture's port line: NCCL's own IB errors name a device too, and thousands of
    // them in one incident must not each scan the job's context.
    if h.sig
        .is_none_or(|s| cat.signatures[s as usize].id != IB_PORT_STATE)
    {
        return false;
    }
    let (Some(dev), Some(host)) = (h.field("ib_dev"), job.source_host(h.source)) else {
        return false;
    };
    let listed = format!("]{dev}:");
    let mut lists = job
        .context
        .iter()
        .filter(|((field, _), obs)| {
            *field == "ib_dev"
                && cat.signatures[obs.sig as usize].id == IB_USING
                && job.source_host(obs.source) == Some(host)
        })
        .map(|(_, obs)| obs.line.contains(&listed))
        .peekable();
    lists.peek().is_some() && !lists.any(|names_it| names_it)
}

/// NCCL's line naming the InfiniBand devices a process uses (`catalog/context.toml`), and an
/// InfiniBand tool's port-state line (`catalog/ib.toml`).
const IB_USING: &str = "nccl_net_ib_using";
pub(crate) const IB_PORT_STATE: &str = "ib_port_not_active";

/// NCCL lists every socket interface it may use (`[0]ens5:… [1]veth…:fe80::…`) and prints
/// which one each channel uses (`via NET/Socket/0`): a listed one no channel took is idle.
fn unused_device(job: &Job, h: &Hit) -> bool {
    let used = job.sources[h.source as usize].net_devs_used;
    h.field("listed_dev")
        .and_then(|d| d.parse::<u32>().ok())
        .is_some_and(|d| used != 0 && used & 1u32.checked_shl(d).unwrap_or(0) == 0)
}

fn cleared(job: &Job, cat: &Catalog, h: &Hit) -> bool {
    h.sig.is_some_and(|s| {
        cat.signatures[s as usize].cleared_by_idx.iter().any(|&c| {
            job.last_clearing
                .get(&(h.source, c))
                .is_some_and(|&at| at > h.seq)
        })
    })
}

/// An error-return trace printed before its process's next `Init START`, `Init COMPLETE` or
/// channel transport line.
fn probe_survived(job: &Job, cat: &Catalog, h: &crate::job::Hit) -> bool {
    let is_trace = h
        .sig
        .is_some_and(|s| cat.signatures[s as usize].id == ERROR_RETURN);
    is_trace
        && job.sources[h.source as usize]
            .init_seen_at
            .is_some_and(|at| at > h.seq)
}

/// NCCL's `file:line -> N` error-return trace.
pub(crate) const ERROR_RETURN: &str = "nccl_error_return";

/// Every rank of the job's largest communicator was seen, all on one host.
fn on_one_host(job: &Job) -> bool {
    if job.hosts.len() != 1 || job.max_nranks == 0 {
        return false;
    }
    let mut seen = vec![false; job.max_nranks as usize];
    for (i, s) in job.sources.iter().enumerate() {
        if let (Some(r), Some(_)) = (job.source_rank(i as u32), s.init_rank) {
            if let Some(x) = seen.get_mut(r as usize) {
                *x = true;
            }
        }
    }
    seen.iter().all(|&x| x)
}

fn diagnose(view: &View, inc_idx: usize, is_final: bool) -> Option<Diagnosis> {
    let job = view.job;
    let inc = &job.incidents[inc_idx];
    let hits: Vec<usize> = inc.hits.iter().map(|&h| h as usize).collect();
    if hits.is_empty() || !shows_failure(job, view.cat, &hits) {
        return None;
    }
    let scope = rules::Scope {
        hits: &hits,
        classified: hits.iter().any(|&i| job.hits[i].sig.is_some()),
        notes: RefCell::new(Vec::new()),
        collectives: std::cell::OnceCell::new(),
        by_source: std::cell::OnceCell::new(),
        by_origin: std::cell::OnceCell::new(),
    };
    let mut board = Board::default();
    rules::run_all(view, &scope, &mut board);
    let start = inc.min_ms.or(inc.start_ms);
    let rendered = render::render(
        view,
        &render::Incident {
            id: &inc.id,
            start,
            scope: &scope,
        },
        &board,
        if is_final {
            crate::report::Status::Final
        } else {
            crate::report::Status::Open
        },
    )?;
    Some(Diagnosis {
        id: inc.id.clone(),
        job: job.name.clone(),
        confidence: rendered.confidence,
        start_ms: start,
        is_final,
        json: serde_json::to_value(&rendered.json).expect("a diagnosis serialises"),
    })
}

#[cfg(test)]
mod tests {

    fn init(pid: u32, rank: u32, comm: &str, bus: &str, comm_id: &str) -> String {
        format!(
            "gpu-node:{pid}:{pid} [0] NCCL INFO ncclCommInitRank comm {comm} rank {rank} nranks 2 \
             cudaDev 0 nvmlDev 0 busId {bus} commId {comm_id} - Init START\n"
        )
    }

    #[test]
    fn two_ranks_of_one_communicator_on_one_gpu_open_a_finding() {
        let log =
            init(42, 0, "0x7a12", "100000", "0xaa9b") + &init(43, 1, "0x397e", "100000", "0xaa9b");
        let d = diagnose_untimed(&log);
        assert_eq!(d.len(), 1);
        assert_eq!(
            d[0].json["cause_signature"]["id"],
            "gpu_shared_by_two_ranks"
        );
        assert!(
            root_line(&d).starts_with("gpu-node:43:43"),
            "{}",
            root_line(&d)
        );
    }

    #[test]
    fn one_gpu_in_two_communicators_or_two_gpus_is_no_finding() {
        // Two jobs' communicators on one GPU (another commId), and one process's rank in a
        // second communicator of its own.
        let other_comm =
            init(42, 0, "0x7a12", "100000", "0xaa9b") + &init(43, 1, "0x397e", "100000", "0xbbbb");
        assert!(diagnose_untimed(&other_comm).is_empty());
        let own =
            init(42, 3, "0x7a12", "100000", "0xaa9b") + &init(42, 0, "0x7a13", "100000", "0xcccc");
        assert!(diagnose_untimed(&own).is_empty());
        let two_gpus =
            init(42, 0, "0x7a12", "100000", "0xaa9b") + &init(43, 1, "0x397e", "200000", "0xaa9b");
        assert!(diagnose_untimed(&two_gpus).is_empty());
    }
    use super::testkit::{diagnose, diagnose_untimed, root_line};

    /// A cause marked `only_with_failure` (libibverbs without a provider for a device).
    const PROVIDER: &str =
        "libibverbs: Warning: no userspace device-specific driver found for /sys/class/infiniband_verbs/uverbs2";

    #[test]
    fn a_cause_only_with_failure_alone_makes_no_diagnosis() {
        let d = diagnose(&format!(
            "{PROVIDER}\nrig-5:3120:3120 [0] NCCL INFO NET/IB : No device found.\n\
             rig-5:3120:3160 [0] NCCL INFO comm 0x7f10 rank 0 nranks 1 cudaDev 0 busId 1000 \
             - Init COMPLETE\n"
        ));
        assert!(d.is_empty(), "{d:?}");
    }

    /// A single-host run of two ranks that initialised; NCCL lists a link-local address.
    fn one_host_run(socket_line: &str) -> String {
        format!(
            "ws-1:310:310 [0] NCCL INFO Bootstrap : Using eth0:10.1.0.4<0>\n\
             ws-1:310:360 [0] NCCL INFO {socket_line}\n\
             ws-1:310:360 [0] NCCL INFO comm 0x5581 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n\
             ws-1:311:361 [1] NCCL INFO comm 0x5582 rank 1 nranks 2 cudaDev 1 busId 2000 - Init COMPLETE\n"
        )
    }

    #[test]
    fn a_link_local_interface_on_a_single_host_that_worked_is_no_failure() {
        for socket in [
            "NET/Socket : Using [0]eth0:10.1.0.4<0> [1]eth0:fe80::215:5dff:fe00:102%eth0<0>",
            "NET/Socket : Using [0]eth0:10.1.0.4<0> [1]veth3a9c:fe80::4c1d:9fff:fe2b:77a1%veth3a9c<0>",
            "NET/Socket : Using [0]veth12ab:fe80::a8c1:abff:fe12:3456%veth12ab<0>",
        ] {
            let d = diagnose(&one_host_run(socket));
            assert!(d.is_empty(), "{socket}: {d:?}");
        }
    }

    #[test]
    fn a_link_local_interface_is_still_a_cause_when_ranks_are_missing_or_the_job_fails() {
        let socket = "NET/Socket : Using [0]veth12ab:fe80::a8c1:abff:fe12:3456%veth12ab<0>";
        // Rank 1 of 3 was never seen: the job may span hosts.
        let partial = one_host_run(socket).replace("nranks 2", "nranks 3");
        assert_eq!(diagnose(&partial).len(), 1);
        let failed = format!(
            "{}ws-1:310:360 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to \
             fe80::1%veth12ab<4011> failed : Connection timed out\n",
            one_host_run(socket)
        );
        assert_eq!(diagnose(&failed).len(), 1);
    }

    #[test]
    fn loopback_fails_a_job_only_where_two_hosts_are_named() {
        let lo = "NET : Using interface lo:127.0.0.1<0>";
        // One host named, its ranks not all seen: still no failure.
        let one = one_host_run(lo).replace("nranks 2", "nranks 3");
        assert!(diagnose(&one).is_empty(), "{:?}", diagnose(&one));
        let two = format!("{one}ws-2:410:410 [0] NCCL INFO Using internal Network Socket\n");
        let d = diagnose(&two);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(root_line(&d), format!("ws-1:310:360 [0] NCCL INFO {lo}"));
    }

    #[test]
    fn a_log_that_ends_waiting_in_the_store_barrier_hung_there() {
        let wait = |r: u32| {
            format!(
                "INFO:root:Waiting in store based barrier to initialize process group for \
                 rank: {r}, key: store_based_barrier_key:1 (world_size=4, worker_count=3, \
                 timeout=0:30:00)\n"
            )
        };
        // More waits than the per-process hit cap keeps.
        let hung: String = [0, 2, 1, 0, 2, 1, 0].iter().map(|&r| wait(r)).collect();
        let d = diagnose(&hung);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(diagnose_untimed(&hung).len(), 1, "as analyze feeds it");
        assert_eq!(root_line(&d), wait(0).trim_end());
        // The barrier completed later: a slow start, no failure.
        let slow = format!("{hung}INFO:root:Added key: store_based_barrier_key:1 to store for rank: 3\nepoch 1 loss 0.52\n");
        assert!(diagnose(&slow).is_empty(), "{:?}", diagnose(&slow));
    }

    #[test]
    fn the_daemon_calls_a_barrier_wait_a_hang_only_once_the_job_went_quiet() {
        use crate::config::Config;
        use crate::engine::Engine;
        let cfg = Config {
            release_quiet_ms: 600_000,
            ..Config::default()
        };
        let mut e = Engine::new(std::sync::Arc::new(super::testkit::shipped_catalog()), cfg);
        e.poll(1_000);
        let id = e.open_stream("j", "rank0.log", Default::default());
        let wait = b"INFO:root:Waiting in store based barrier to initialize process group for \
                     rank: 0, key: store_based_barrier_key:1 (world_size=2, worker_count=1, \
                     timeout=0:30:00)\n";
        for k in 0..6 {
            e.feed(id, wait, Some(1_000 + k * 10_000));
        }
        // Minutes of waiting, the job still printing: no diagnosis.
        assert!(e.poll(70_000).is_empty());
        assert!(e.poll(300_000).is_empty());
        // Quiet for the release time: its input is over, and it ended waiting.
        let d = e.poll(1_000_000);
        assert_eq!(d.len(), 1, "{d:?}");
    }

    #[test]
    fn an_error_trace_before_init_completes_is_a_probe_not_a_failure() {
        let probe = "ws-2:881:881 [0] misc/ibvwrap.cc:173 NCCL WARN lib wrapper not initialized.\n\
             ws-2:881:881 [0] NCCL INFO transport/net_ib/gdr.cc:56 -> 3\n\
             ws-2:881:881 [0] NCCL INFO Using network Socket\n";
        for phase in ["START", "COMPLETE"] {
            let went_on = format!(
                "ws-2:881:920 [0] NCCL INFO comm 0x55a0 rank 0 nranks 1 cudaDev 0 busId 1000 \
                 - Init {phase}\n"
            );
            assert!(diagnose(&format!("{probe}{went_on}")).is_empty());
        }
        // Without init completing, the trace is where the failure starts.
        assert_eq!(diagnose(probe).len(), 1);
    }

    #[test]
    fn a_cause_only_with_failure_competes_once_the_job_fails() {
        let d = diagnose(&format!(
            "{PROVIDER}\nrig-5: Test NCCL failure common.cu:790 'internal error'\n"
        ));
        assert_eq!(root_line(&d), PROVIDER);
    }
}
