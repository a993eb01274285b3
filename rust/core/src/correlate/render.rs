//! Turns the ranked evidence board of one incident into the diagnosis JSON: root cause,
//! first warning, collateral, suspects and alternatives with their evidence, the lines that
//! preceded the failure, and cause, fix and verify rendered with the incident's facts.

use super::board::{Board, Cand, LineRef};
use super::collectives::{call_fields, call_signature};
use super::facts::{self, Facts};
use super::rules::{blaming_causes, Scope};
use super::stacks::STACK_FRAME_SIGNATURE;
use super::util::{iso_ms, rank_ranges};
use super::view::View;
use crate::catalog::{Role, Signature};
use crate::job::Hit;
use crate::report::{self as out, Status};
use crate::ring::RingLine;
use std::collections::{BTreeMap, BTreeSet};

/// How far below a crash report its stack may run: the lines read for its first frame.
const CRASH_STACK_LINES: usize = 60;
/// The C++ runtime's abort banners whose next line (`what():`) holds the exception's text.
const TERMINATE_BANNERS: &[&str] = &["pt_terminate_called", "pt_terminate_other"];

/// The root-cause line as rendered: its part of the diagnosis, its signature, (seq, source,
/// time), the text.
pub struct RootLine<'a> {
    pub json: out::RootCause,
    pub sig: Option<&'a Signature>,
    pub at: Option<(u64, u32, Option<i64>)>,
    pub text: String,
}

fn fields_json(f: &[(String, String)]) -> BTreeMap<String, String> {
    f.iter().cloned().collect()
}

fn sig_json(s: Option<&Signature>) -> out::SignatureInfo {
    match s {
        Some(s) => out::SignatureInfo {
            id: s.id.clone(),
            title: s.title.clone(),
            subsystem: s.subsystem.clone(),
            role: match s.role {
                Role::Cause => out::Role::Cause,
                Role::Symptom => out::Role::Symptom,
                Role::Context => out::Role::Context,
            },
            severity: format!("{:?}", s.severity).to_lowercase(),
        },
        None => out::SignatureInfo {
            id: "unclassified".into(),
            title: "Unclassified error".into(),
            subsystem: "unknown".into(),
            role: out::Role::Cause,
            severity: "error".into(),
        },
    }
}

/// A root cause's located line: its times, text, origin, record and fields.
struct LineParts {
    ts: Option<i64>,
    ts_corrected: Option<i64>,
    ts_exact: bool,
    line: String,
    origin: String,
    record: Vec<String>,
    fields: BTreeMap<String, String>,
}

impl LineParts {
    fn into_root(self, head: RootHead) -> out::RootCause {
        out::RootCause {
            rank: head.rank,
            host: head.host,
            device: head.device,
            pid: head.pid,
            ts: self.ts.map(iso_ms),
            line: Some(self.line),
            origin: Some(self.origin),
            record: self.record,
            located: Some(out::Located {
                ts_corrected: self.ts_corrected.map(iso_ms),
                ts_exact: self.ts_exact,
                fields: self.fields,
            }),
            template: None,
            reported_by: None,
        }
    }
}

/// Who the root cause is: rank, host, device, pid.
struct RootHead {
    rank: Option<u32>,
    host: Option<String>,
    device: Option<u16>,
    pid: Option<u32>,
}

impl<'a> View<'a> {
    /// The masked message of a line no signature recognised (groups it across ranks).
    pub fn unclassified_template(&self, h: &Hit) -> String {
        let meta = crate::prefix::peel(&h.text, self.cfg.default_year);
        super::util::template(meta.message(&h.text).trim_end())
    }

    /// Every field of a hit, including those not needed for correlation (not kept at ingest).
    pub fn all_fields(&self, h: &Hit) -> Vec<(String, String)> {
        let Some(sig) = h.sig else {
            return Vec::new();
        };
        let meta = crate::prefix::peel(&h.text, self.cfg.default_year);
        let mut out = h.fields.clone();
        self.cat
            .extract_fields(sig, meta.message(&h.text), false, &mut out);
        out
    }

    /// The GPU an NCCL line names in its header (`host:pid:tid [3] NCCL WARN`): the device
    /// of the thread that printed it, more precise than its process's (a process may drive
    /// several GPUs, and an excerpt may lack the init line that names the process's).
    fn line_device(&self, text: &str) -> Option<u16> {
        crate::prefix::peel(text, self.cfg.default_year).cuda_dev
    }

    /// A hit as the first warning (its preceding lines left to the caller).
    fn hit_json(&self, i: usize) -> out::FirstWarning {
        let h = self.hit(i);
        let host = self.hit_host(h).map(|x| self.host_name(x).to_string());
        let s = &self.job.sources[h.source as usize];
        let device = self.line_device(&h.text).or(s.cuda_dev).or(s.local_rank);
        out::FirstWarning {
            rank: self.hit_rank(h),
            host,
            device,
            pid: s.pid,
            ts: h.ts_ms.map(iso_ms),
            ts_corrected: self.hit_time(h).map(iso_ms),
            line: h.text.clone(),
            origin: format!("{}:{}", h.origin, h.line_no),
            signature: self.sig(h).map(|s| s.id.clone()),
            preceding_lines: Vec::new(),
        }
    }

    fn line_text(&self, l: LineRef) -> (String, Option<String>) {
        match l {
            LineRef::Hit(i) => (
                self.hit(i).text.clone(),
                self.sig(self.hit(i)).map(|s| s.id.clone()),
            ),
            LineRef::Context(..) | LineRef::Identity(_) => {
                let (obs, _) = self
                    .obs_of(l)
                    .expect("a context root refers to a kept line");
                (
                    obs.line.to_string(),
                    Some(self.cat.signatures[obs.sig as usize].id.clone()),
                )
            }
            LineRef::Call(s, i) => {
                let call = &self.job.sources[s as usize].coll_calls[i];
                (call.line.clone(), Some(call_signature(call).to_string()))
            }
            LineRef::Ring(s, seq) => (
                self.ring_line(s, seq).map_or_else(String::new, |l| l.text),
                None,
            ),
            LineRef::Frame(s, i) => (
                self.frame(s, i)
                    .map_or_else(String::new, |f| f.text.clone()),
                Some(STACK_FRAME_SIGNATURE.to_string()),
            ),
        }
    }

    /// The observation a context root refers to, and the fields it shows.
    fn obs_of(&self, l: LineRef) -> Option<(&'a crate::job::ContextObs, Vec<(String, String)>)> {
        let job = self.job;
        match l {
            LineRef::Hit(_) | LineRef::Call(..) | LineRef::Ring(..) | LineRef::Frame(..) => None,
            LineRef::Context(src, field) => {
                let obs = &job.context[&(field, src)];
                let mut fields = vec![(field.to_string(), obs.value.clone())];
                if let Some(ip) = job.context.get(&("ip", src)).filter(|o| o.seq == obs.seq) {
                    fields.push(("ip".into(), ip.value.clone()));
                }
                Some((obs, fields))
            }
            LineRef::Identity(i) => {
                let s = &job.identity.sightings[i as usize];
                let key = job.identity.key_name(s.key);
                let name = key.strip_prefix("env:").unwrap_or(key);
                Some((&s.obs, vec![(name.to_string(), s.obs.value.clone())]))
            }
        }
    }

    fn cand_json(&self, c: &Cand) -> out::Suspect {
        let host = c
            .host
            .or_else(|| self.who_host(c.who))
            .map(|h| self.host_name(h).to_string());
        let (line, sig) = c
            .root()
            .map(|r| self.line_text(r))
            .map_or((None, None), |(l, s)| (Some(l), s));
        let evidence: Vec<out::Evidence> = c
            .evidence
            .iter()
            .map(|e| out::Evidence {
                rule: e.rule.to_string(),
                weight: e.weight,
                why: e.why.clone(),
            })
            .collect();
        // Processes of one host with no known rank differ only by their pid.
        let pid = self
            .sources_of_who(c.who)
            .iter()
            .find_map(|&s| self.job.sources[s as usize].pid);
        out::Suspect {
            rank: c.rank(),
            host,
            pid,
            score: c.score(),
            signature: sig,
            line,
            reasons: c.reasons(),
            evidence,
        }
    }

    fn root_line(&self, top: &Cand) -> RootLine<'a> {
        let job = self.job;
        let srcs = self.sources_of_who(top.who);
        let pid = srcs.iter().find_map(|&s| job.sources[s as usize].pid);
        let device = srcs.iter().find_map(|&s| {
            let src = &job.sources[s as usize];
            src.cuda_dev.or(src.local_rank)
        });
        let head = RootHead {
            rank: top.rank(),
            host: top.host.map(|h| self.host_name(h).to_string()),
            device,
            pid,
        };
        match top.root() {
            Some(LineRef::Hit(i)) => {
                let h = self.hit(i);
                let mut v = LineParts {
                    ts: h.ts_ms,
                    ts_corrected: self.hit_time(h),
                    ts_exact: h.ts_exact,
                    line: h.text.clone(),
                    origin: format!("{}:{}", h.origin, h.line_no),
                    record: if h.record.is_empty() {
                        vec![h.text.clone()]
                    } else {
                        h.record.clone()
                    },
                    fields: fields_json(&self.all_fields(h)),
                }
                .into_root(head);
                if h.sig.is_none() {
                    v.template = Some(self.unclassified_template(h));
                }
                let own_line = srcs.contains(&h.source) || self.printer(h) == top.who;
                if let (true, Some(d)) = (own_line, self.line_device(&h.text)) {
                    v.device = Some(d);
                }
                if !own_line {
                    let by = self.hit_host(h).map(|x| self.host_name(x).to_string());
                    v.reported_by = Some(out::ReportedBy {
                        rank: self.hit_rank(h),
                        host: by,
                    });
                }
                let root = RootLine {
                    json: v,
                    sig: self.sig(h),
                    at: Some((h.seq, h.source, h.ts_ms)),
                    text: h.text.clone(),
                };
                let root = self.at_crash_frame(root, h);
                self.at_exception_text(root, h)
            }
            Some(l @ (LineRef::Context(..) | LineRef::Identity(_))) => {
                let (obs, fields) = self
                    .obs_of(l)
                    .expect("a context root refers to a kept line");
                let src = obs.source;
                let v = LineParts {
                    ts: obs.ts_ms,
                    ts_corrected: self.corrected(src, obs.ts_ms),
                    ts_exact: false,
                    line: obs.line.to_string(),
                    origin: format!("{}:{}", obs.origin, obs.line_no),
                    record: vec![obs.line.to_string()],
                    fields: fields_json(&fields),
                }
                .into_root(head);
                RootLine {
                    json: v,
                    sig: Some(&self.cat.signatures[obs.sig as usize]),
                    at: Some((obs.seq, src, obs.ts_ms)),
                    text: obs.line.to_string(),
                }
            }
            Some(LineRef::Call(src, i)) => {
                let call = &job.sources[src as usize].coll_calls[i];
                let fields = call_fields(call);
                let v = LineParts {
                    ts: call.ts_ms,
                    ts_corrected: self.corrected(src, call.ts_ms),
                    ts_exact: call.ts_ms.is_some(),
                    line: call.line.clone(),
                    origin: format!("{}:{}", call.origin, call.line_no),
                    record: vec![call.line.clone()],
                    fields: fields_json(&fields),
                }
                .into_root(head);
                RootLine {
                    json: v,
                    sig: self
                        .cat
                        .index_of(call_signature(call))
                        .map(|i| &self.cat.signatures[i as usize]),
                    at: Some((call.seq, src, call.ts_ms)),
                    text: call.line.clone(),
                }
            }
            Some(LineRef::Ring(src, seq)) => {
                let line = self.ring_line(src, seq);
                let text = line.as_ref().map_or_else(String::new, |l| l.text.clone());
                let ts = line.as_ref().and_then(|l| l.ts_ms);
                let v = LineParts {
                    ts,
                    ts_corrected: self.corrected(src, ts),
                    ts_exact: ts.is_some(),
                    line: text.clone(),
                    origin: job.sources[src as usize].origin.to_string(),
                    record: vec![text.clone()],
                    fields: BTreeMap::new(),
                }
                .into_root(head);
                RootLine {
                    json: v,
                    sig: None,
                    at: Some((seq, src, ts)),
                    text,
                }
            }
            Some(LineRef::Frame(src, i)) => {
                let stack = job.sources[src as usize].stack.as_ref();
                let frame = self.frame(src, i);
                let text = frame.map_or_else(String::new, |f| f.text.clone());
                let ts = stack.and_then(|k| k.ts_ms);
                let mut record: Vec<String> =
                    stack.map_or_else(Vec::new, |k| vec![k.header.clone()]);
                record.extend(
                    stack
                        .into_iter()
                        .flat_map(|k| k.frames.iter().take(12).map(|f| f.text.clone())),
                );
                let fields = frame.map_or_else(Vec::new, |f| {
                    vec![
                        ("frame_func".to_string(), f.func.clone()),
                        ("frame_file".to_string(), f.file.clone()),
                    ]
                });
                let v = LineParts {
                    ts,
                    ts_corrected: self.corrected(src, ts),
                    ts_exact: false,
                    line: text.clone(),
                    origin: format!(
                        "{}:{}",
                        job.sources[src as usize].origin,
                        frame.map_or(0, |f| f.line_no)
                    ),
                    record,
                    fields: fields_json(&fields),
                }
                .into_root(head);
                RootLine {
                    json: v,
                    sig: self
                        .cat
                        .index_of(STACK_FRAME_SIGNATURE)
                        .map(|i| &self.cat.signatures[i as usize]),
                    at: Some((frame.map_or(0, |f| f.seq), src, ts)),
                    text,
                }
            }
            None => RootLine {
                // No line: its time, text and origin are null, and the parts only a line
                // has are absent.
                json: out::RootCause {
                    rank: head.rank,
                    host: head.host,
                    device: head.device,
                    pid: head.pid,
                    ts: None,
                    line: None,
                    origin: None,
                    record: Vec::new(),
                    located: None,
                    template: None,
                    reported_by: None,
                },
                sig: None,
                at: None,
                text: String::new(),
            },
        }
    }

    fn frame(&self, src: u32, i: usize) -> Option<&'a crate::job::StackFrame> {
        self.job.sources[src as usize].stack.as_ref()?.frames.get(i)
    }

    /// A segmentation fault's root line is the first frame of its stack past the crash
    /// machinery: the banner says only that memory was touched wrongly, the frame names the
    /// code that did it (the line the held-out labels take: Oceananigans.jl#3878's
    /// `MPIDI_CH3_iSendv at …/libmpi.so`, QUICK#134's gfortran frame, Open MPI's `[ 2]
    /// …/mca_btl_vader.so(+0x2558)`). A bus error's or an abort's banner stays: it says what
    /// (a mapped file cut short, a failed check). The signature, the time and the lines before
    /// stay the banner's.
    fn at_crash_frame(&self, mut root: RootLine<'a>, banner: &Hit) -> RootLine<'a> {
        let is_report = root.sig.is_some_and(super::rules::is_crash_report);
        if !is_report || !super::crash::states_segfault(&banner.text) {
            return root;
        }
        let (after, messages) = self.stack_below(banner.source, banner.seq);
        let Some((i, _)) = super::crash::native_frame_at(&messages) else {
            return root;
        };
        let frame = &after[i];
        root.json.line = Some(frame.text.clone());
        root.json.origin = Some(self.job.sources[banner.source as usize].origin.to_string());
        root.json.record = std::iter::once(banner.text.clone())
            .chain(after[..=i].iter().map(|l| l.text.clone()))
            .collect();
        root.text = frame.text.clone();
        root
    }

    /// libstdc++'s `terminate called after throwing an instance of 'T'` names only the type;
    /// the `what():` line it prints next holds the exception's text, the line that says what
    /// failed (tensorpipe#224's `In initFromLoop at …listener.cc:126 "rv < 0: invalid
    /// argument"`). Where that text is a line no signature knows (a known one is a hit of its
    /// own and outranks the banner), it becomes the root line; the banner opens its record,
    /// and the signature and time stay the banner's.
    fn at_exception_text(&self, mut root: RootLine<'a>, banner: &Hit) -> RootLine<'a> {
        if !root
            .sig
            .is_some_and(|s| TERMINATE_BANNERS.contains(&s.id.as_str()))
        {
            return root;
        }
        let Some(what) = self.job.sources[banner.source as usize]
            .ring
            .after(banner.seq, 1)
            .into_iter()
            .next()
        else {
            return root;
        };
        let meta = crate::prefix::peel(&what.text, self.cfg.default_year);
        if !meta.message(&what.text).trim_start().starts_with("what():") {
            return root;
        }
        root.json.line = Some(what.text.clone());
        root.json.origin = Some(self.job.sources[banner.source as usize].origin.to_string());
        root.json.record = vec![banner.text.clone(), what.text.clone()];
        root.text = what.text;
        root
    }

    /// The lines a crash report at `seq` may be followed by (its stack), with their messages.
    fn stack_below(&self, src: u32, seq: u64) -> (Vec<RingLine>, Vec<String>) {
        let lines = self.job.sources[src as usize]
            .ring
            .after(seq, CRASH_STACK_LINES);
        let messages = lines
            .iter()
            .map(|l| {
                let m = crate::prefix::peel(&l.text, self.cfg.default_year);
                m.message(&l.text).to_string()
            })
            .collect();
        (lines, messages)
    }

    fn ring_line(&self, src: u32, seq: u64) -> Option<RingLine> {
        let s = &self.job.sources[src as usize];
        if let Some(l) = s
            .ring
            .record_from(seq, 1)
            .into_iter()
            .find(|l| l.seq == seq)
        {
            return Some(l);
        }
        // a line of an NCCL RAS report or monitor kept apart from the ring (its message)
        let kept = s.ras_report.as_ref().and_then(|c| c.line(seq));
        let kept = kept.or_else(|| s.ras_monitor.as_ref().and_then(|m| m.line(seq)))?;
        Some(RingLine {
            seq,
            ts_ms: None,
            continuation: false,
            text: kept.to_string(),
        })
    }

    /// Lines of `srcs` before `at` (seq, source, time), oldest first, at most `limit`. When
    /// the line came from another process (a launcher or kernel line, a peer's report), they
    /// are the candidate's own lines up to that moment.
    fn lines_before(&self, srcs: &[u32], at: Option<(u64, u32, Option<i64>)>) -> Vec<String> {
        let limit = self.cfg.preceding_lines;
        let own = at.is_none_or(|(_, src, _)| srcs.contains(&src));
        let until = at.and_then(|(_, src, ts)| self.corrected(src, ts));
        let mut lines: Vec<RingLine> = Vec::new();
        for &s in srcs {
            let src = &self.job.sources[s as usize];
            if !own {
                let slack = self.offsets.uncertainty_ms;
                lines.extend(src.ring.lines().into_iter().filter(|l| {
                    match (until, self.corrected(s, l.ts_ms)) {
                        (Some(u), Some(t)) => t <= u + slack,
                        _ => true,
                    }
                }));
                continue;
            }
            let seq = at.map_or(u64::MAX, |(seq, _, _)| seq);
            let mut from_ring = src.ring.before(seq, limit);
            if let Some(snap) = &src.snapshot {
                // The snapshot taken at the first cause hit, when the ring has moved on.
                if from_ring.len() < limit && snap.last().is_some_and(|l| l.seq < seq) {
                    let first = from_ring.first().map_or(u64::MAX, |l| l.seq);
                    let mut older: Vec<RingLine> =
                        snap.iter().filter(|l| l.seq < first).cloned().collect();
                    older.append(&mut from_ring);
                    from_ring = older;
                }
            }
            lines.extend(from_ring);
        }
        lines.sort_by_key(|l| l.seq);
        lines.dedup_by_key(|l| l.seq);
        let skip = lines.len().saturating_sub(limit);
        lines.into_iter().skip(skip).map(|l| l.text).collect()
    }

    fn why_not(&self, c: &Cand, top: &Cand, tied: bool, explains: &BTreeSet<u16>) -> String {
        if tied {
            return format!(
                "tied with the root cause within the clock uncertainty of {} ms; evidence could not separate them",
                self.offsets.uncertainty_ms
            );
        }
        if let Some(s) = c.cause.and_then(|b| self.hit(b).sig) {
            if explains.contains(&s) {
                return "its line is a known consequence of the root cause".into();
            }
        }
        if c.cause.is_none() && c.config.is_none() {
            return "only symptoms or indirect evidence point at it".into();
        }
        if c.score() < top.score() {
            return format!(
                "weaker evidence (score {} against {})",
                c.score(),
                top.score()
            );
        }
        match (c.ts, top.ts) {
            (Some(a), Some(b)) if a > b => format!("later by {} ms after clock correction", a - b),
            _ => "lower signature weight".into(),
        }
    }
}

/// Everything the rendering needs besides the view.
pub struct Incident<'s> {
    pub id: &'s str,
    pub start: Option<i64>,
    pub scope: &'s Scope<'s>,
}

pub struct Rendered {
    pub json: out::Diagnosis,
    pub confidence: f64,
}

pub fn render(v: &View, inc: &Incident, board: &Board, status: Status) -> Option<Rendered> {
    let ranked = board.ranked();
    let top = *ranked.first()?;
    let unc = v.offsets.uncertainty_ms;
    let tie_with: Vec<&Cand> = ranked[1..]
        .iter()
        .copied()
        .filter(|c| {
            c.score() == top.score()
                && c.cause_weight == top.cause_weight
                && match (c.ts, top.ts) {
                    (Some(a), Some(b)) => (a - b).abs() <= unc,
                    _ => true,
                }
                && c.host != top.host
        })
        .collect();
    let tie = !tie_with.is_empty();
    let hits = inc.scope.hits;

    let root = v.root_line(top);
    // Whose cause, fix and verify texts apply: the candidate's own cause line; for a
    // configuration root cause, the root line's signature when it carries advice, else the
    // cause that configuration explains.
    let config_sig = top
        .config
        .and_then(|(_, s)| s)
        .map(|s| &v.cat.signatures[s as usize]);
    let root_advice = root.sig.filter(|s| !s.fix.is_empty());
    // A finding a rule drew (a mismatched collective, a rank that never joined) speaks for a
    // candidate whose own lines are only symptoms; a cause line the candidate printed still
    // comes first.
    let finding_sig = top
        .finding
        .as_ref()
        .map(|(s, _)| &v.cat.signatures[*s as usize]);
    let cause_sig = top
        .cause
        .and_then(|b| v.sig(v.hit(b)))
        .or(finding_sig)
        .or(root_advice)
        .or(config_sig)
        .or(root.sig);
    // What the root cause accounts for: its own signature's list and, for a configuration
    // root cause, that of the failure the configuration explains.
    let explains: BTreeSet<u16> = [cause_sig, config_sig]
        .into_iter()
        .flatten()
        .flat_map(|s| s.explains_idx.iter().copied())
        .collect();

    let first_warning = first_warning(v, inc, top, &root.text);
    let first_warning_json = first_warning.map(|i| {
        let mut j = v.hit_json(i);
        let h = v.hit(i);
        // One process, one GPU: the root cause's, not another reading of another line.
        if v.sources_of_who(top.who).contains(&h.source) && root.json.device.is_some() {
            j.device = root.json.device;
        }
        j.preceding_lines = v.lines_before(&[h.source], Some((h.seq, h.source, h.ts_ms)));
        j
    });

    let (collateral, all_coll) = collateral(v, hits, top, &explains);
    let suspects: Vec<out::Suspect> = ranked
        .iter()
        .filter(|c| c.who == top.who || !c.evidence.is_empty())
        .take(5)
        .map(|c| v.cand_json(c))
        .collect();
    let alternatives: Vec<out::Alternative> = ranked
        .iter()
        .skip(1)
        .filter(|c| c.cause.is_some() || c.config.is_some() || c.pointer.is_some())
        .take(5)
        .map(|c| {
            let tied = tie_with.iter().any(|t| t.who == c.who);
            out::Alternative {
                suspect: v.cand_json(c),
                why_not: v.why_not(c, top, tied, &explains),
            }
        })
        .collect();
    let preceding = v.lines_before(&v.sources_of_who(top.who), root.at);
    let conf = confidence(top, ranked.get(1).copied(), tie, inc.scope.classified);

    let host_name = top.host.map(|h| v.host_name(h).to_string());
    let ranks_affected: BTreeSet<u32> = hits
        .iter()
        .filter_map(|&i| v.rank_of(v.hit(i).source))
        .collect();
    let mut facts = facts_of(v, top, &root);
    extra_facts(
        v,
        top,
        &root,
        cause_sig,
        &inc.scope.notes.borrow(),
        &mut facts,
    );
    let (fix, verify, cause_text) = match cause_sig {
        Some(s) => (
            facts::render(&s.fix, &facts),
            facts::render(&s.verify, &facts),
            facts::render(&s.cause, &facts),
        ),
        None => (
            "Read the preceding lines of the initiating rank; no catalog signature matched.".into(),
            "Rerun and check that the same rank no longer reports errors.".into(),
            "An error was logged that no catalog signature recognises.".into(),
        ),
    };
    let hypotheses: Vec<out::Hypothesis> = cause_sig
        .map(|s| s.hypotheses.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|h| out::Hypothesis {
            cause: facts::render(&h.cause, &facts),
            separate_by: facts::render(&h.separate_by, &facts),
        })
        .collect();
    let sig_json = sig_json(root.sig);
    let headline = match (top.config, cause_sig) {
        (Some(_), Some(c)) if root.sig.is_none_or(|r| r.id != c.id) => {
            let why = if c.blames_setting.is_empty() {
                "this host's configuration differs from the job"
            } else {
                "a setting in effect on this host"
            };
            format!("{} ({why})", c.title)
        }
        (Some(_), _) if top.evidence.iter().any(|e| e.rule.starts_with("identity_")) => {
            let title = &sig_json.title;
            format!("{title} (this host differs from the rest of the job)")
        }
        _ if top.cause.is_none() && finding_sig.is_some() => {
            finding_sig.map_or(String::new(), |f| f.title.clone())
        }
        _ => sig_json.title.clone(),
    };
    let summary = format!(
        "{}{}: {headline}",
        top.rank()
            .map_or("unknown rank".to_string(), |r| format!("rank {r}")),
        host_name
            .as_deref()
            .map_or(String::new(), |h| format!(" on {h}")),
    );
    let json = out::Diagnosis {
        schema: out::DiagnosisSchema::V1,
        id: inc.id.to_string(),
        job: v.job.name.clone(),
        status,
        summary,
        cause_signature: cause_sig.map(|c| out::SignatureRef {
            id: c.id.clone(),
            title: c.title.clone(),
        }),
        signature: sig_json,
        root_cause: root.json,
        first_warning: first_warning_json,
        cause: cause_text,
        fix,
        verify,
        facts,
        confidence: conf,
        tie,
        suspects,
        collateral,
        collateral_ranks: rank_ranges(&all_coll),
        collateral_rank_count: all_coll.len(),
        preceding_lines: preceding,
        odd_context: distinct_notes(&inc.scope.notes.borrow()),
        collectives: board.collectives.clone(),
        alternatives,
        hypotheses,
        incident: out::IncidentInfo {
            start: inc.start.map(iso_ms),
            hits: hits.len(),
            ranks_affected: ranks_affected.len(),
            world_size: v.world_size(),
        },
        sources_over_cap: sources_over_cap(v.job),
        clock: out::ClockInfo {
            culprit_host_offset_ms: top.host.and_then(|h| v.offsets.by_host.get(&h).copied()),
            uncertainty_ms: unc,
            hosts_estimated: v.offsets.by_host.len(),
            sync_events: v.offsets.events_used,
        },
        baseline_diff: None,
        truncated: false,
    };
    Some(Rendered {
        json,
        confidence: conf,
    })
}

/// Lines of processes beyond the job's source cap (they share one source and no rank), or
/// null when every process was tracked.
fn sources_over_cap(job: &crate::job::Job) -> Option<out::SourcesOverCap> {
    if job.lines_over_source_cap == 0 {
        return None;
    }
    Some(out::SourcesOverCap {
        sources_tracked: job.sources.len() - 1,
        lines: job.lines_over_source_cap,
    })
}

/// Configuration notes, one per (host, field): the first rule to note it wins.
fn distinct_notes(notes: &[out::OddContext]) -> Vec<out::OddContext> {
    let mut seen = BTreeSet::new();
    notes
        .iter()
        .filter(|n| seen.insert((n.host.clone(), n.field.clone())))
        .cloned()
        .collect()
}

/// The earliest warning-or-worse line of the incident when it is not the root line; for a
/// configuration root cause, the earliest failure that configuration explains.
fn first_warning(v: &View, inc: &Incident, top: &Cand, root_text: &str) -> Option<usize> {
    let hits = inc.scope.hits;
    let pool: Vec<usize> = if top.config.is_some() {
        let blaming = blaming_causes(v, hits);
        if blaming.is_empty() {
            hits.iter()
                .copied()
                .filter(|&i| v.hit(i).sig.is_some())
                .collect()
        } else {
            blaming
        }
    } else {
        hits.iter()
            .copied()
            .filter(|&i| v.hit(i).sig.is_some())
            .collect()
    };
    // Times carried from an earlier line (NCCL INFO lines print none) are only lower bounds:
    // when some candidates printed their own time, those decide.
    let exact: Vec<usize> = pool
        .iter()
        .copied()
        .filter(|&i| v.hit(i).ts_exact)
        .collect();
    let pool = if exact.is_empty() { pool } else { exact };
    pool.into_iter()
        .min_by_key(|&i| v.order_key(i))
        .filter(|&i| v.hit(i).text != root_text)
}

/// Collateral of one signature: its ranks, its lines, whether the root cause explains it, and
/// whether it is only benign warnings (every line a warning that alone shows no failure).
type Group = (BTreeSet<u32>, usize, bool, bool);

/// Every other rank's hits grouped by signature, and the set of those ranks.
fn collateral(
    v: &View,
    hits: &[usize],
    top: &Cand,
    explains: &BTreeSet<u16>,
) -> (Vec<out::Collateral>, BTreeSet<u32>) {
    let mut coll: BTreeMap<String, Group> = BTreeMap::new();
    let mut all: BTreeSet<u32> = BTreeSet::new();
    for &i in hits {
        let h = v.hit(i);
        let Some(r) = v.rank_of(h.source) else {
            continue;
        };
        if Some(r) == top.rank() {
            continue;
        }
        let key = match v.sig(h) {
            Some(s) => s.id.clone(),
            None => format!("unclassified\t{}", v.unclassified_template(h)),
        };
        let e = coll
            .entry(key)
            .or_insert_with(|| (BTreeSet::new(), 0, false, true));
        e.0.insert(r);
        e.1 += 1;
        e.2 |= h.sig.is_some_and(|s| explains.contains(&s));
        e.3 &= h.warn_only;
        all.insert(r);
    }
    let mut list: Vec<(String, Group)> = coll.into_iter().collect();
    // Benign warnings come last however many ranks printed them: healthy runs print them too.
    list.sort_by(|a, b| (a.1 .3, b.1 .0.len(), &a.0).cmp(&(b.1 .3, a.1 .0.len(), &b.0)));
    let out = list
        .into_iter()
        .map(|(key, (ranks, n, explained, _))| {
            let (id, template) = key.split_once('\t').unwrap_or((key.as_str(), ""));
            let title = v
                .cat
                .index_of(id)
                .map(|i| v.cat.signatures[i as usize].title.clone())
                .unwrap_or_else(|| "Unclassified error".into());
            out::Collateral {
                signature: id.to_string(),
                title,
                ranks: rank_ranges(&ranks),
                rank_count: ranks.len(),
                lines: n,
                explained_by_root_cause: explained,
                template: (!template.is_empty()).then(|| template.to_string()),
            }
        })
        .collect();
    (out, all)
}

fn confidence(top: &Cand, second: Option<&Cand>, tie: bool, classified: bool) -> f64 {
    let named = top.has_rule("peer_naming");
    let linked = top
        .evidence
        .iter()
        .any(|e| e.rule.starts_with("identity_") && e.weight == 20);
    let mut conf: f64 = if top.config.is_some() {
        if linked
            || top.has_rule("transport_mismatch")
            || top.has_rule("bad_interface") && top.cause.is_some()
        {
            0.9
        } else if top.has_rule("identity_pair") && !top.has_rule("identity_outlier") {
            // One of two hosts that differ, and nothing says which.
            0.5
        } else if top.cause.is_none()
            && top
                .evidence
                .iter()
                .filter(|e| e.rule == "identity_outlier")
                .all(|e| e.weight < 40)
        {
            // Only a difference that healthy fleets also show (driver, interface name, GPU).
            0.6
        } else {
            0.75
        }
    } else if top.cause.is_some() {
        if named || top.score() > top.cause_weight as i32 {
            0.9
        } else {
            0.75
        }
    } else if top.finding.is_some() && top.score() >= 50 {
        0.75
    } else if top.pointer.is_some() || top.score() >= 20 {
        0.6
    } else if classified {
        0.35
    } else {
        0.25
    };
    if tie {
        conf *= 0.7;
    } else if let Some(second) = second {
        if second.score() * 10 >= top.score() * 9 {
            conf *= 0.85;
        }
    }
    (conf * 100.0).round() / 100.0
}

/// Values fix and verify texts may use: who and where, the root line's fields, and what the
/// rest of the job uses for the fields a configuration root cause is about.
fn facts_of(v: &View, top: &Cand, root: &RootLine) -> Facts {
    let mut f = Facts::new();
    let mut put = |k: &str, val: Option<String>| {
        if let Some(x) = val.filter(|x| !x.is_empty()) {
            f.insert(k.to_string(), x);
        }
    };
    put("host", top.host.map(|h| v.host_name(h).to_string()));
    put("rank", top.rank().map(|r| r.to_string()));
    put("job", Some(v.job.name.clone()));
    let rc = &root.json;
    put("device", rc.device.map(|d| d.to_string()));
    put("pid", rc.pid.map(|p| p.to_string()));
    put("ts", rc.ts.clone());
    if let Some(located) = &rc.located {
        for (k, val) in &located.fields {
            put(k, Some(val.clone()));
        }
    }
    for field in [
        "iface",
        "ip",
        "nccl_version",
        "transport",
        "cuda_driver",
        "ib_dev",
    ] {
        put(&format!("job_{field}"), majority_value(v, field, top.host));
    }
    if let Some((_, finding_facts)) = &top.finding {
        for (k, val) in finding_facts {
            put(k, Some(val.clone()));
        }
    }
    if let Some(h) = top.host {
        for field in ["iface", "ip", "nccl_version", "transport"] {
            // The host's first process that printed it (the context map's order is random).
            let own = v
                .job
                .context
                .iter()
                .filter(|((f2, s), _)| *f2 == field && v.host_of(*s) == Some(h))
                .min_by_key(|((_, s), _)| *s);
            put(&format!("host_{field}"), own.map(|(_, o)| o.value.clone()));
        }
    }
    f
}

/// Facts only some diagnoses have: where a crash happened (the first frame of the stack after
/// a crash report, for causes whose texts use `{crash_frame}`), and for a root cause found by
/// comparing machines, the key, this host's value and the rest of the job's.
fn extra_facts(
    v: &View,
    top: &Cand,
    root: &RootLine,
    cause_sig: Option<&Signature>,
    notes: &[out::OddContext],
    f: &mut Facts,
) {
    let uses = |s: &Signature, name: &str| {
        [&s.cause, &s.fix, &s.verify]
            .iter()
            .any(|t| t.contains(&format!("{{{name}")))
    };
    if let (Some(s), Some((seq, src, _))) = (cause_sig, root.at) {
        if uses(s, "crash_frame") {
            let (_, after) = v.stack_below(src, seq);
            if let Some(frame) = super::crash::crash_frame(&after) {
                f.insert("crash_frame".into(), frame);
            }
        }
    }
    let host = top.host.map(|h| v.host_name(h));
    let note = notes
        .iter()
        .find(|n| n.others.is_some() && n.host.as_deref() == host && host.is_some());
    if let Some(n) = note {
        f.insert("odd_key".into(), super::identity::key_label(&n.field));
        f.insert("odd_value".into(), n.value.clone());
        if let Some(others) = &n.others {
            f.insert("job_value".into(), others.clone());
        }
    }
}

/// The most common value of a context field on hosts other than `except`.
fn majority_value(v: &View, field: &str, except: Option<crate::job::HostId>) -> Option<String> {
    let mut counts: BTreeMap<&str, BTreeSet<crate::job::HostId>> = BTreeMap::new();
    for ((f, s), obs) in &v.job.context {
        let Some(h) = v.host_of(*s) else { continue };
        if *f == field && Some(h) != except {
            counts.entry(obs.value.as_str()).or_default().insert(h);
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, hs)| hs.len())
        .map(|(val, _)| val.to_string())
}
