//! Correlation: groups signature hits into incidents and, for each, decides where the fault
//! is. Evidence comes before clocks: causes beat symptoms, ranks named by peers, desync
//! reports or sequence numbers beat ranks that are not, a host whose configuration differs
//! from the job's majority is blamed when the failure is of a kind that configuration
//! explains, and only then does skew-corrected time order what is left.

use crate::catalog::{Catalog, Role, Signature, Sync};
use crate::engine::Config;
use crate::job::{ContextObs, Hit, HostId, Incident, Job};
use crate::ring::RingLine;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// One published diagnosis.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    pub id: String,
    pub job: String,
    pub confidence: f64,
    pub start_ms: Option<i64>,
    pub is_final: bool,
    pub json: Value,
}

fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xffu8)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// Puts a new hit into an incident of its job, opening one if none is near in time.
pub fn assign_incident(job: &mut Job, hit: &Hit, idx: u32, cfg: &Config, wall_ms: i64) {
    let horizon = cfg.incident_horizon_ms;
    for inc in job.incidents.iter_mut().rev() {
        let joins = match (hit.ts_ms, inc.start_ms) {
            (Some(t), Some(s)) => t >= s - horizon && t <= s + horizon,
            _ => true,
        };
        if joins {
            inc.hits.push(idx);
            if let Some(t) = hit.ts_ms {
                inc.min_ms = Some(inc.min_ms.map_or(t, |m| m.min(t)));
                if inc.start_ms.is_none() {
                    inc.start_ms = Some(t);
                }
            }
            return;
        }
    }
    let start = hit
        .ts_ms
        .map_or_else(|| format!("seq:{}", hit.seq), |t| t.to_string());
    let sig = hit
        .sig
        .map_or_else(|| "unclassified".to_string(), |s| s.to_string());
    let id = format!("rw-{:016x}", fnv(&[&job.name, &start, &sig]));
    job.incidents.push(Incident {
        id,
        start_ms: hit.ts_ms,
        min_ms: hit.ts_ms,
        opened_wall_ms: wall_ms,
        hits: vec![idx],
        published_hash: None,
        final_published: false,
        diagnosed: None,
    });
}

/// Host clock offsets estimated from lines every rank prints at the same moment.
pub struct Offsets {
    pub by_host: HashMap<HostId, i64>,
    pub uncertainty_ms: i64,
    pub events_used: usize,
}

fn median(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

pub fn estimate_offsets(job: &Job, cfg: &Config) -> Offsets {
    let mut groups: BTreeMap<(u16, u64), HashMap<HostId, Vec<i64>>> = BTreeMap::new();
    for o in &job.sync {
        groups
            .entry((o.sig, o.key))
            .or_default()
            .entry(o.host)
            .or_default()
            .push(o.ts_ms);
    }
    let mut deltas: HashMap<HostId, Vec<i64>> = HashMap::new();
    let mut used = 0;
    for (_, per_host) in groups {
        if per_host.len() < 2 {
            continue;
        }
        let mut meds: Vec<(HostId, i64)> = per_host
            .into_iter()
            .filter_map(|(h, mut v)| median(&mut v).map(|m| (h, m)))
            .collect();
        let mut all: Vec<i64> = meds.iter().map(|(_, m)| *m).collect();
        let Some(reference) = median(&mut all) else {
            continue;
        };
        used += 1;
        for (h, m) in meds.drain(..) {
            deltas.entry(h).or_default().push(m - reference);
        }
    }
    let mut by_host = HashMap::new();
    let mut spread = 0i64;
    for (h, mut d) in deltas {
        if let Some(m) = median(&mut d) {
            let mut dev: Vec<i64> = d.iter().map(|x| (x - m).abs()).collect();
            spread = spread.max(median(&mut dev).unwrap_or(0));
            by_host.insert(h, m);
        }
    }
    Offsets {
        by_host,
        uncertainty_ms: cfg.clock_uncertainty_ms + spread,
        events_used: used,
    }
}

/// Emits diagnoses for incidents that are ready and new or changed since last published.
pub fn diagnose_ready(
    job: &mut Job,
    cat: &Catalog,
    cfg: &Config,
    now_wall_ms: i64,
    final_: bool,
) -> Vec<Diagnosis> {
    let watermark = job.max_event_ms;
    let version = job.input_version();
    // Which incidents to diagnose now, and whether that makes them final. An incident whose
    // inputs and status did not change since its last diagnosis is not diagnosed again.
    let mut due: Vec<(usize, bool)> = Vec::new();
    for (i, inc) in job.incidents.iter().enumerate() {
        if inc.final_published {
            continue;
        }
        let start = inc.min_ms.or(inc.start_ms);
        let by_watermark = match (watermark, start) {
            (Some(w), Some(s)) => w >= s + cfg.settle_ms,
            _ => false,
        };
        // Processing-time bounds: the job has been quiet for a settle window (its logs ended:
        // nothing later will move the watermark), or the incident waited max_wait_ms.
        let live = now_wall_ms != i64::MAX && inc.opened_wall_ms > 0;
        let by_wall = live && now_wall_ms - inc.opened_wall_ms >= cfg.max_wait_ms;
        let by_quiet = live
            && job.last_wall_ms > 0
            && now_wall_ms - job.last_wall_ms >= cfg.settle_ms
            && now_wall_ms - inc.opened_wall_ms >= cfg.settle_ms;
        if !(final_ || by_watermark || by_wall || by_quiet) {
            continue;
        }
        let is_final = final_
            || match (watermark, start) {
                (Some(w), Some(s)) => w > s + cfg.incident_horizon_ms,
                _ => false,
            };
        if inc.diagnosed == Some((version, is_final)) {
            continue;
        }
        due.push((i, is_final));
    }
    if due.is_empty() {
        return Vec::new();
    }
    let offsets = estimate_offsets(job, cfg);
    let ctx = Ctx::new(job, cat, cfg, &offsets);
    let diagnosed: Vec<(usize, bool, Option<Diagnosis>)> = due
        .into_iter()
        .map(|(i, is_final)| (i, is_final, ctx.diagnose(i)))
        .collect();
    let mut out = Vec::new();
    for (i, is_final, d) in diagnosed {
        let inc = &mut job.incidents[i];
        inc.diagnosed = Some((version, is_final));
        let Some(mut d) = d else {
            continue;
        };
        d.is_final = is_final;
        d.json["status"] = json!(if is_final { "final" } else { "open" });
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Who {
    Rank(u32),
    Source(u32),
    Host(HostId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Root {
    Hit(usize),
    Context(u32, &'static str),
}

#[derive(Debug)]
struct Cand {
    who: Who,
    host: Option<HostId>,
    best_cause: Option<usize>,
    best_weight: u8,
    best_symptom: Option<usize>,
    evidence: Option<usize>,
    score: i32,
    reasons: Vec<String>,
    named_by: BTreeSet<Who>,
    outlier: Option<(u32, &'static str)>,
    /// The cause signature that made the outlier relevant (its fix applies).
    outlier_cause: Option<u16>,
    ts: Option<i64>,
}

impl Cand {
    fn new(who: Who, host: Option<HostId>) -> Cand {
        Cand {
            who,
            host,
            best_cause: None,
            best_weight: 0,
            best_symptom: None,
            evidence: None,
            score: 0,
            reasons: Vec::new(),
            named_by: BTreeSet::new(),
            outlier: None,
            outlier_cause: None,
            ts: None,
        }
    }
    fn root(&self) -> Option<Root> {
        if let Some((s, f)) = self.outlier {
            return Some(Root::Context(s, f));
        }
        self.best_cause
            .or(self.evidence)
            .or(self.best_symptom)
            .map(Root::Hit)
    }
}

/// The root cause as JSON, its signature, (seq, source, time) of its line, and the line.
type RenderedRoot<'a> = (
    Value,
    Option<&'a Signature>,
    Option<(u64, u32, Option<i64>)>,
    String,
);

struct Ctx<'a> {
    job: &'a Job,
    cat: &'a Catalog,
    cfg: &'a Config,
    offsets: &'a Offsets,
    /// Resolved rank and host of every source, computed once per correlation pass.
    ranks: Vec<Option<u32>>,
    hosts: Vec<Option<HostId>>,
    by_rank: HashMap<u32, Vec<u32>>,
}

impl<'a> Ctx<'a> {
    fn new(job: &'a Job, cat: &'a Catalog, cfg: &'a Config, offsets: &'a Offsets) -> Ctx<'a> {
        let n = job.sources.len() as u32;
        let ranks: Vec<Option<u32>> = (0..n).map(|s| job.source_rank(s)).collect();
        let hosts: Vec<Option<HostId>> = (0..n).map(|s| job.source_host(s)).collect();
        let mut by_rank: HashMap<u32, Vec<u32>> = HashMap::new();
        for (s, r) in ranks.iter().enumerate() {
            if let Some(r) = r {
                by_rank.entry(*r).or_default().push(s as u32);
            }
        }
        Ctx {
            job,
            cat,
            cfg,
            offsets,
            ranks,
            hosts,
            by_rank,
        }
    }

    fn rank_of(&self, src: u32) -> Option<u32> {
        self.ranks[src as usize]
    }

    fn sources_of(&self, rank: u32) -> Vec<u32> {
        self.by_rank.get(&rank).cloned().unwrap_or_default()
    }
}

/// Parses `1, 5-7` / `[1,2]` / `{3}` into ranks.
pub fn parse_rank_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.split([',', ' ', '[', ']', '{', '}']) {
        if part.is_empty() {
            continue;
        }
        if let Some((a, b)) = part.split_once('-') {
            if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                if b >= a && b - a < 100_000 {
                    out.extend(a..=b);
                }
            }
        } else if let Ok(v) = part.parse::<u32>() {
            out.push(v);
        }
    }
    out
}

/// Formats ranks as compact ranges: `0-12,14-63`.
pub fn rank_ranges(ranks: &BTreeSet<u32>) -> String {
    let mut out = String::new();
    let mut it = ranks.iter().copied().peekable();
    while let Some(a) = it.next() {
        let mut b = a;
        while it.peek() == Some(&(b + 1)) {
            b = it.next().unwrap_or(b);
        }
        if !out.is_empty() {
            out.push(',');
        }
        if a == b {
            out.push_str(&a.to_string());
        } else {
            out.push_str(&format!("{a}-{b}"));
        }
    }
    out
}

/// NCCL prints bus ids as the hex digits of `dddd:bb:dd.f` run together (`0000:9a:00.0` ->
/// `9a000`); Xid lines print `0000:9a:00`.
pub fn bdf_to_bus_id(bdf: &str) -> String {
    let mut digits: String = bdf.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    if !bdf.contains('.') {
        digits.push('0');
    }
    let t = digits.trim_start_matches('0');
    if t.is_empty() {
        "0".into()
    } else {
        t.to_lowercase()
    }
}

fn subnet_of(ip: &str) -> Option<String> {
    let parts: Vec<&str> = ip.split('.').collect();
    if parts.len() == 4 && parts.iter().all(|p| p.parse::<u8>().is_ok()) {
        Some(format!("{}.{}.0.0/16", parts[0], parts[1]))
    } else if ip.contains(':') {
        let groups: Vec<&str> = ip.split(':').take(4).collect();
        Some(format!("{}::/64", groups.join(":")))
    } else {
        None
    }
}

pub fn iso_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    // civil_from_days (inverse of timefmt::days_from_civil)
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        y,
        m,
        d,
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

impl<'a> Ctx<'a> {
    fn sig(&self, hit: &Hit) -> Option<&'a Signature> {
        hit.sig.map(|s| &self.cat.signatures[s as usize])
    }

    fn host_of(&self, src: u32) -> Option<HostId> {
        self.hosts[src as usize]
    }

    fn corrected(&self, src: u32, ts: Option<i64>) -> Option<i64> {
        let t = ts?;
        let off = self
            .host_of(src)
            .and_then(|h| self.offsets.by_host.get(&h).copied())
            .unwrap_or(0);
        Some(t - off)
    }

    fn hit_time(&self, h: &Hit) -> Option<i64> {
        self.corrected(h.source, h.ts_ms)
    }

    fn printer(&self, h: &Hit) -> Who {
        match self.rank_of(h.source) {
            Some(r) => Who::Rank(r),
            None => Who::Source(h.source),
        }
    }

    fn host_named(&self, name: &str) -> Option<HostId> {
        if let Some(&h) = self.job.host_ids.get(name) {
            return Some(h);
        }
        let short = name.split('.').next().unwrap_or(name);
        self.job.host_ids.get(short).copied()
    }

    /// The process a cause line is about: for launcher/kernel lines the named pid, rank or
    /// GPU; otherwise the printer.
    fn subject(&self, h: &Hit) -> Who {
        let printer_host = self.host_of(h.source);
        if let Some(r) = h.field("subject_rank").and_then(|v| v.parse().ok()) {
            return Who::Rank(r);
        }
        let host = h
            .field("host")
            .and_then(|n| self.host_named(n))
            .or(printer_host);
        let local = h.field("local_rank").and_then(|v| v.parse::<u16>().ok());
        if let Some(pid) = h.field("pid").and_then(|v| v.parse::<u32>().ok()) {
            if let Some(r) = self.job.rank_of_pid(pid, host, local) {
                return Who::Rank(r);
            }
        }
        if let (Some(bdf), Some(hh)) = (h.field("bdf"), host) {
            if let Some(&r) = self.job.by_host_bus.get(&(hh, bdf_to_bus_id(bdf))) {
                return Who::Rank(r);
            }
        }
        if let (Some(l), Some(hh)) = (local, host) {
            if h.field("pid").is_some() || h.field("exitcode").is_some() {
                if let Some(&r) = self.job.by_host_local.get(&(hh, l)) {
                    return Who::Rank(r);
                }
            }
        }
        if h.field("pid").is_some() || h.field("bdf").is_some() {
            if let Some(hh) = host {
                if printer_host != Some(hh) || self.rank_of(h.source).is_none() {
                    return Who::Host(hh);
                }
            }
        }
        self.printer(h)
    }

    /// Who a line blames besides its subject: peers by address, host name or rank.
    fn named(&self, h: &Hit) -> Vec<Who> {
        let mut out = Vec::new();
        if let Some(a) = h.field("peer_addr") {
            if let Some(&host) = self.job.ip_host.get(a) {
                out.push(Who::Host(host));
            }
        }
        if let Some(n) = h.field("peer_host") {
            if let Some(host) = self.host_named(n) {
                out.push(Who::Host(host));
            }
        }
        for key in ["peer_rank", "lagging_ranks"] {
            if let Some(v) = h.field(key) {
                out.extend(parse_rank_list(v).into_iter().map(Who::Rank));
            }
        }
        out
    }

    fn who_host(&self, w: Who) -> Option<HostId> {
        match w {
            Who::Host(h) => Some(h),
            Who::Source(s) => self.host_of(s),
            Who::Rank(r) => self
                .by_rank
                .get(&r)
                .and_then(|v| v.iter().find_map(|&s| self.host_of(s))),
        }
    }

    /// Context fields per host (majority over the host's processes) and the odd hosts.
    fn outliers(&self, field: &'static str) -> Vec<(HostId, u32)> {
        let mut per_host: BTreeMap<HostId, BTreeMap<String, Vec<u32>>> = BTreeMap::new();
        for ((f, src), obs) in &self.job.context {
            let want = if field == "subnet" { "ip" } else { field };
            if *f != want {
                continue;
            }
            let Some(host) = self.host_of(*src) else {
                continue;
            };
            let value = if field == "subnet" {
                match subnet_of(&obs.value) {
                    Some(s) => s,
                    None => continue,
                }
            } else {
                obs.value.clone()
            };
            per_host
                .entry(host)
                .or_default()
                .entry(value)
                .or_default()
                .push(*src);
        }
        if per_host.len() < 3 {
            return Vec::new();
        }
        let mut host_value: BTreeMap<HostId, (String, Vec<u32>)> = BTreeMap::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for (h, vals) in per_host {
            if let Some((v, srcs)) = vals.into_iter().max_by_key(|(_, s)| s.len()) {
                *counts.entry(v.clone()).or_default() += 1;
                host_value.insert(h, (v, srcs));
            }
        }
        let Some((major, n_major)) = counts.iter().max_by_key(|(_, c)| **c) else {
            return Vec::new();
        };
        let odd: Vec<HostId> = host_value
            .iter()
            .filter(|(_, (v, _))| v != major)
            .map(|(h, _)| *h)
            .collect();
        if odd.is_empty() || odd.len() * 4 > host_value.len() || *n_major < 2 * odd.len() {
            return Vec::new();
        }
        odd.into_iter()
            .filter_map(|h| {
                let (_, srcs) = &host_value[&h];
                // The representative process: lowest rank, then lowest source index.
                srcs.iter()
                    .min_by_key(|&&s| (self.rank_of(s).unwrap_or(u32::MAX), s))
                    .map(|&s| (h, s))
            })
            .collect()
    }

    fn diagnose(&self, inc_idx: usize) -> Option<Diagnosis> {
        let job = self.job;
        let inc = &job.incidents[inc_idx];
        let hits: Vec<usize> = inc.hits.iter().map(|&h| h as usize).collect();
        if hits.is_empty() {
            return None;
        }
        let mut cands: BTreeMap<Who, Cand> = BTreeMap::new();
        let classified = hits.iter().any(|&i| job.hits[i].sig.is_some());

        // 1. Causes and symptoms, attributed to the process they are about.
        for &i in &hits {
            let h = &job.hits[i];
            let Some(sig) = self.sig(h) else {
                if !classified {
                    let who = self.printer(h);
                    let c = cands
                        .entry(who)
                        .or_insert_with(|| Cand::new(who, self.host_of(h.source)));
                    if c.best_symptom.is_none() {
                        c.best_symptom = Some(i);
                    }
                }
                continue;
            };
            let who = if sig.role == Role::Cause {
                self.subject(h)
            } else {
                self.printer(h)
            };
            let host = self.who_host(who);
            let t = self.hit_time(h);
            let c = cands.entry(who).or_insert_with(|| Cand::new(who, host));
            if sig.role == Role::Cause {
                let better = match c.best_cause {
                    None => true,
                    Some(b) => {
                        let bw = self.sig(&job.hits[b]).map_or(0, |s| s.weight);
                        let bt = self.hit_time(&job.hits[b]);
                        sig.weight > bw
                            || (sig.weight == bw
                                && (t, h.seq) < (bt.or(Some(i64::MAX)), job.hits[b].seq))
                    }
                };
                if better {
                    c.best_cause = Some(i);
                    c.best_weight = sig.weight;
                    c.ts = t;
                }
            } else if c.best_symptom.is_none() {
                c.best_symptom = Some(i);
                if c.ts.is_none() {
                    c.ts = t;
                }
            }
            // Peers it names.
            let printer = self.printer(h);
            for named in self.named(h) {
                let host = self.who_host(named);
                let n = cands.entry(named).or_insert_with(|| Cand::new(named, host));
                n.named_by.insert(printer);
                if n.evidence.is_none() {
                    n.evidence = Some(i);
                }
                if h.field("lagging_ranks").is_some() {
                    if !n.reasons.iter().any(|r| r.starts_with("named as lagging")) {
                        n.reasons
                            .push(format!("named as lagging by a desync report ({})", sig.id));
                    }
                    n.score += 40;
                    n.evidence = Some(i);
                }
            }
        }

        // 2. Sequence numbers: who did not reach the collective everyone else waits in.
        let mut seq_of: BTreeMap<u32, (u64, Option<u64>, usize)> = BTreeMap::new();
        for &i in &hits {
            let h = &job.hits[i];
            let Some(sig) = self.sig(h) else { continue };
            if sig.sync != Some(Sync::Seq) {
                continue;
            }
            let (Some(seq), Some(r)) = (
                h.field("seq").and_then(|v| v.parse::<u64>().ok()),
                self.rank_of(h.source),
            ) else {
                continue;
            };
            let enq = h.field("last_enqueued").and_then(|v| v.parse::<u64>().ok());
            let e = seq_of.entry(r).or_insert((seq, enq, i));
            if enq.is_some() && e.1.is_none() {
                e.1 = enq;
            }
        }
        let nranks = job.max_nranks.max(
            job.sources
                .iter()
                .filter_map(|s| s.stated_rank())
                .max()
                .map_or(0, |m| m + 1),
        );
        if seq_of.len() >= 2 {
            let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
            for (s, _, _) in seq_of.values() {
                *counts.entry(*s).or_default() += 1;
            }
            let (&majority, &n_major) = counts.iter().max_by_key(|(_, c)| **c).unwrap_or((&0, &0));
            for (&r, &(s, enq, i)) in &seq_of {
                if enq.is_some_and(|e| e < majority) || s < majority {
                    let who = Who::Rank(r);
                    let host = self.who_host(who);
                    let c = cands.entry(who).or_insert_with(|| Cand::new(who, host));
                    c.score += 20;
                    c.reasons.push(format!(
                        "behind the others: last enqueued collective {} while {} ranks wait in #{majority}",
                        enq.unwrap_or(s),
                        n_major
                    ));
                    if c.evidence.is_none() {
                        c.evidence = Some(i);
                    }
                }
            }
            if nranks as usize > 1 && n_major * 2 >= nranks as usize {
                let missing: Vec<u32> = (0..nranks).filter(|r| !seq_of.contains_key(r)).collect();
                if !missing.is_empty() && missing.len() * 10 <= nranks as usize + 9 {
                    for r in missing {
                        let who = Who::Rank(r);
                        let host = self.who_host(who);
                        let c = cands.entry(who).or_insert_with(|| Cand::new(who, host));
                        c.score += 10;
                        c.reasons.push(format!(
                            "did not report the timeout of collective #{majority} that {n_major} ranks reported"
                        ));
                    }
                }
            }
        }

        // 3. Ranks that went silent while the others went on logging.
        let incident_start = hits
            .iter()
            .filter_map(|&i| self.hit_time(&job.hits[i]))
            .min();
        if let Some(t0) = incident_start {
            let mut last: BTreeMap<u32, i64> = BTreeMap::new();
            for (si, s) in job.sources.iter().enumerate() {
                if let (Some(r), Some(t)) = (
                    self.rank_of(si as u32),
                    self.corrected(si as u32, s.last_ts),
                ) {
                    let e = last.entry(r).or_insert(t);
                    *e = (*e).max(t);
                }
            }
            let quiet: Vec<u32> = last
                .iter()
                .filter(|(_, &t)| t + 60_000 < t0)
                .map(|(&r, _)| r)
                .collect();
            let active = last.values().filter(|&&t| t >= t0).count();
            if !quiet.is_empty()
                && quiet.len() * 20 <= last.len().max(20)
                && active * 2 >= last.len()
            {
                for r in quiet {
                    let who = Who::Rank(r);
                    let host = self.who_host(who);
                    let c = cands.entry(who).or_insert_with(|| Cand::new(who, host));
                    c.score += 10;
                    c.reasons.push(format!(
                        "stopped logging {} s before the incident while the others went on",
                        (t0 - last[&r]) / 1000
                    ));
                }
            }
        }

        // 4. Configuration outliers, when a cause in this incident is of a kind they explain.
        let mut outlier_note: Vec<Value> = Vec::new();
        let mut blaming: Vec<usize> = Vec::new();
        // (field, weight, signature) of the strongest cause that blames each field.
        let mut fields_blamed: Vec<(&'static str, u8, u16)> = Vec::new();
        for &i in &hits {
            if let Some(sig) = self.sig(&job.hits[i]) {
                if sig.role == Role::Cause && !sig.blames_outlier.is_empty() {
                    blaming.push(i);
                    for f in &sig.blames_outlier {
                        if let Some(&ff) = crate::catalog::OUTLIER_FIELDS.iter().find(|x| *x == f) {
                            let sig_idx = job.hits[i].sig.unwrap_or_default();
                            match fields_blamed.iter_mut().find(|(x, _, _)| *x == ff) {
                                None => fields_blamed.push((ff, sig.weight, sig_idx)),
                                Some(e) if e.1 < sig.weight => *e = (ff, sig.weight, sig_idx),
                                Some(_) => {}
                            }
                        }
                    }
                }
            }
        }
        for (field, weight, blaming_sig) in fields_blamed {
            for (host, src) in self.outliers(field) {
                let who = match self.rank_of(src) {
                    Some(r) => Who::Rank(r),
                    None => Who::Source(src),
                };
                let obs_field = if field == "subnet" { "ip" } else { field };
                let Some(obs) = job.context.get(&(obs_field, src)) else {
                    continue;
                };
                let linked = blaming.iter().any(|&i| {
                    self.named(&job.hits[i])
                        .iter()
                        .any(|w| self.who_host(*w) == Some(host))
                });
                let shown = if field == "subnet" {
                    subnet_of(&obs.value).unwrap_or_else(|| obs.value.clone())
                } else {
                    obs.value.clone()
                };
                outlier_note.push(json!({
                    "field": field, "host": job.hosts[host as usize], "value": shown,
                    "named_by_failures": linked,
                }));
                let c = cands
                    .entry(who)
                    .or_insert_with(|| Cand::new(who, Some(host)));
                if c.outlier.is_none() {
                    c.outlier = Some((src, obs_field));
                    c.outlier_cause = Some(blaming_sig);
                    c.best_weight = c.best_weight.max(weight);
                    c.score += 30 + if linked { 20 } else { 0 };
                    c.reasons.push(format!(
                        "its {field} ({shown}) differs from the rest of the job"
                    ));
                    if linked {
                        c.reasons
                            .push("the failing connections point at this host's address".into());
                    }
                    c.ts = self.corrected(src, obs.ts_ms);
                }
            }
        }

        // 5. Score: cause weight + evidence; peers naming a host count for its candidates.
        let mut host_named: HashMap<HostId, BTreeSet<Who>> = HashMap::new();
        for c in cands.values() {
            if let (Who::Host(h), false) = (c.who, c.named_by.is_empty()) {
                host_named
                    .entry(h)
                    .or_default()
                    .extend(c.named_by.iter().copied());
            }
        }
        for c in cands.values_mut() {
            let mut named = c.named_by.clone();
            if let Some(h) = c.host {
                if let Some(n) = host_named.get(&h) {
                    named.extend(n.iter().copied());
                }
            }
            named.remove(&c.who);
            if !named.is_empty() {
                c.score += if named.len() >= 2 { 20 } else { 10 };
                c.reasons.push(format!(
                    "named as the failing peer by {} other ranks",
                    named.len()
                ));
            }
            if let Some(b) = c.best_cause {
                c.score += c.best_weight as i32;
                let sig = self.sig(&job.hits[b]).map_or("", |s| s.id.as_str());
                c.reasons.insert(0, format!("printed a cause: {sig}"));
            } else if c.outlier.is_some() {
                c.score += c.best_weight as i32;
            } else if let Some(s) = c.best_symptom {
                let w = self.sig(&job.hits[s]).map_or(0, |s| s.weight);
                c.score += (w / 4) as i32;
            }
        }
        // Host-only candidates whose host has a rank candidate are folded into it.
        let hosts_with_ranks: BTreeSet<HostId> = cands
            .values()
            .filter(|c| !matches!(c.who, Who::Host(_)))
            .filter_map(|c| c.host)
            .collect();
        let mut ranked: Vec<&Cand> = cands
            .values()
            .filter(|c| match c.who {
                Who::Host(h) => !hosts_with_ranks.contains(&h),
                _ => true,
            })
            .filter(|c| c.root().is_some() || c.score > 0)
            .collect();
        ranked.sort_by(|a, b| {
            b.score
                .cmp(&a.score)
                .then(b.best_weight.cmp(&a.best_weight))
                .then(a.ts.unwrap_or(i64::MAX).cmp(&b.ts.unwrap_or(i64::MAX)))
                .then(a.who.cmp(&b.who))
        });
        let top = *ranked.first()?;
        let unc = self.offsets.uncertainty_ms;
        let tie_with: Vec<&Cand> = ranked[1..]
            .iter()
            .copied()
            .filter(|c| {
                c.score == top.score
                    && c.best_weight == top.best_weight
                    && match (c.ts, top.ts) {
                        (Some(a), Some(b)) => (a - b).abs() <= unc,
                        _ => true,
                    }
                    && c.host != top.host
            })
            .collect();
        let tie = !tie_with.is_empty();

        // 6. Render.
        let root = top.root();
        let (root_json, root_sig, root_seq, root_text) = self.render_root(top, root);
        let sig_json = match root_sig {
            Some(s) => json!({"id": s.id, "title": s.title, "subsystem": s.subsystem,
                              "role": role_str(s.role), "severity": format!("{:?}", s.severity).to_lowercase()}),
            None => {
                json!({"id": "unclassified", "title": "Unclassified error", "subsystem": "unknown",
                           "role": "cause", "severity": "error"})
            }
        };
        let cause_sig = top
            .best_cause
            .and_then(|b| self.sig(&job.hits[b]))
            .or(top.outlier_cause.map(|s| &self.cat.signatures[s as usize]))
            .or(root_sig);
        let explains: BTreeSet<u16> = cause_sig
            .map(|s| s.explains_idx.iter().copied().collect())
            .unwrap_or_default();

        // First warning: the earliest warning-or-worse line of the incident, if it is another.
        let first_warning = if top.outlier.is_some() {
            blaming.iter().copied().min_by_key(|&i| {
                (
                    self.hit_time(&job.hits[i]).unwrap_or(i64::MAX),
                    job.hits[i].seq,
                )
            })
        } else {
            hits.iter()
                .copied()
                .filter(|&i| job.hits[i].sig.is_some())
                .min_by_key(|&i| {
                    (
                        self.hit_time(&job.hits[i]).unwrap_or(i64::MAX),
                        job.hits[i].seq,
                    )
                })
        }
        .filter(|&i| job.hits[i].text != root_text);
        let first_warning_json = first_warning.map(|i| self.hit_json(i));

        // Collateral: every other rank's hits, grouped by signature.
        let culprit_rank = match top.who {
            Who::Rank(r) => Some(r),
            _ => None,
        };
        let mut coll: BTreeMap<String, (BTreeSet<u32>, usize, bool)> = BTreeMap::new();
        let mut all_coll: BTreeSet<u32> = BTreeSet::new();
        for &i in &hits {
            let h = &job.hits[i];
            let Some(r) = self.rank_of(h.source) else {
                continue;
            };
            if Some(r) == culprit_rank {
                continue;
            }
            let id = self
                .sig(h)
                .map_or("unclassified".to_string(), |s| s.id.clone());
            let explained = h.sig.is_some_and(|s| explains.contains(&s));
            let e = coll.entry(id).or_default();
            e.0.insert(r);
            e.1 += 1;
            e.2 |= explained;
            all_coll.insert(r);
        }
        let mut coll_list: Vec<(String, BTreeSet<u32>, usize, bool)> =
            coll.into_iter().map(|(k, v)| (k, v.0, v.1, v.2)).collect();
        coll_list.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
        let collateral: Vec<Value> = coll_list
            .iter()
            .map(|(id, ranks, n, explained)| {
                let title = self
                    .cat
                    .index_of(id)
                    .map(|i| self.cat.signatures[i as usize].title.clone())
                    .unwrap_or_else(|| "Unclassified error".into());
                json!({"signature": id, "title": title, "ranks": rank_ranges(ranks),
                       "rank_count": ranks.len(), "lines": n, "explained_by_root_cause": explained})
            })
            .collect();

        // Suspects and alternatives.
        let suspects: Vec<Value> = ranked
            .iter()
            .filter(|c| c.who == top.who || !c.reasons.is_empty())
            .take(5)
            .map(|c| self.cand_json(c, top))
            .collect();
        let alternatives: Vec<Value> = ranked
            .iter()
            .skip(1)
            .filter(|c| c.best_cause.is_some() || c.outlier.is_some() || c.evidence.is_some())
            .take(5)
            .map(|c| {
                let mut v = self.cand_json(c, top);
                v["why_not"] =
                    json!(self.why_not(c, top, tie_with.iter().any(|t| t.who == c.who), &explains));
                v
            })
            .collect();

        // Preceding lines of the initiating process.
        let preceding = self.preceding(top, root_seq);

        // Confidence.
        let named_n = top
            .reasons
            .iter()
            .any(|r| r.starts_with("named as the failing peer"));
        let mut conf: f64 = if top.outlier.is_some() {
            if top.reasons.iter().any(|r| r.contains("point at this host")) {
                0.9
            } else {
                0.75
            }
        } else if top.best_cause.is_some() {
            if named_n || top.score > top.best_weight as i32 {
                0.9
            } else {
                0.75
            }
        } else if top.evidence.is_some() || top.score >= 20 {
            0.6
        } else if classified {
            0.35
        } else {
            0.25
        };
        if tie {
            conf *= 0.7;
        } else if let Some(second) = ranked.get(1) {
            if second.score * 10 >= top.score * 9 {
                conf *= 0.85;
            }
        }
        let conf = (conf * 100.0).round() / 100.0;

        let host_name = top.host.map(|h| job.hosts[h as usize].clone());
        let culprit_offset = top.host.and_then(|h| self.offsets.by_host.get(&h).copied());
        let ranks_affected: BTreeSet<u32> = hits
            .iter()
            .filter_map(|&i| self.rank_of(job.hits[i].source))
            .collect();
        let (fix, verify, cause_text) = match cause_sig {
            Some(s) => (s.fix.clone(), s.verify.clone(), s.cause.clone()),
            None => (
                "Read the preceding lines of the initiating rank; no catalog signature matched."
                    .into(),
                "Rerun and check that the same rank no longer reports errors.".into(),
                "An error was logged that no catalog signature recognises.".into(),
            ),
        };
        let headline = match (top.outlier, cause_sig) {
            (Some((_, field)), Some(c)) => {
                format!("{} (its {field} differs from the job)", c.title)
            }
            _ => sig_json["title"].as_str().unwrap_or("").to_string(),
        };
        let summary = format!(
            "{}{}: {headline}",
            culprit_rank.map_or("unknown rank".to_string(), |r| format!("rank {r}")),
            host_name
                .as_deref()
                .map_or(String::new(), |h| format!(" on {h}")),
        );
        let cause_sig_json = cause_sig.map(|c| json!({"id": c.id, "title": c.title}));
        let start = inc.min_ms.or(inc.start_ms);
        let json = json!({
            "schema": "rankwatch.diagnosis/1",
            "id": inc.id,
            "job": job.name,
            "summary": summary,
            "cause_signature": cause_sig_json,
            "signature": sig_json,
            "root_cause": root_json,
            "first_warning": first_warning_json,
            "cause": cause_text,
            "fix": fix,
            "verify": verify,
            "confidence": conf,
            "tie": tie,
            "suspects": suspects,
            "collateral": collateral,
            "collateral_ranks": rank_ranges(&all_coll),
            "collateral_rank_count": all_coll.len(),
            "preceding_lines": preceding,
            "odd_context": outlier_note,
            "alternatives": alternatives,
            "incident": {
                "start": start.map(iso_ms),
                "hits": hits.len(),
                "ranks_affected": ranks_affected.len(),
                "world_size": nranks,
            },
            "clock": {
                "culprit_host_offset_ms": culprit_offset,
                "uncertainty_ms": unc,
                "hosts_estimated": self.offsets.by_host.len(),
                "sync_events": self.offsets.events_used,
            },
        });
        Some(Diagnosis {
            id: inc.id.clone(),
            job: job.name.clone(),
            confidence: conf,
            start_ms: start,
            is_final: false,
            json,
        })
    }

    fn render_root(&self, top: &Cand, root: Option<Root>) -> RenderedRoot<'a> {
        let job = self.job;
        let rank = match top.who {
            Who::Rank(r) => Some(r),
            _ => None,
        };
        let srcs: Vec<u32> = match top.who {
            Who::Rank(r) => self.sources_of(r),
            Who::Source(s) => vec![s],
            Who::Host(_) => Vec::new(),
        };
        let pid = srcs.iter().find_map(|&s| job.sources[s as usize].pid);
        let device = srcs.iter().find_map(|&s| {
            job.sources[s as usize]
                .cuda_dev
                .or(job.sources[s as usize].local_rank)
        });
        let host = top.host.map(|h| job.hosts[h as usize].clone());
        match root {
            Some(Root::Hit(i)) => {
                let h = &job.hits[i];
                let t = h.ts_ms;
                let v = json!({
                    "rank": rank, "host": host, "device": device, "pid": pid,
                    "ts": t.map(iso_ms), "ts_corrected": self.hit_time(h).map(iso_ms),
                    "ts_exact": h.ts_exact,
                    "line": h.text, "origin": format!("{}:{}", h.origin, h.line_no),
                    "record": if h.record.is_empty() { vec![h.text.clone()] } else { h.record.clone() },
                    "fields": fields_json(&self.all_fields(h)),
                });
                (
                    v,
                    self.sig(h),
                    Some((h.seq, h.source, h.ts_ms)),
                    h.text.clone(),
                )
            }
            Some(Root::Context(src, field)) => {
                let obs: &ContextObs = &job.context[&(field, src)];
                let v = json!({
                    "rank": rank, "host": host, "device": device, "pid": pid,
                    "ts": obs.ts_ms.map(iso_ms), "ts_corrected": self.corrected(src, obs.ts_ms).map(iso_ms),
                    "ts_exact": false,
                    "line": obs.line, "origin": format!("{}:{}", obs.origin, obs.line_no),
                    "record": [obs.line.clone()], "fields": {field: obs.value},
                });
                (
                    v,
                    Some(&self.cat.signatures[obs.sig as usize]),
                    Some((obs.seq, src, obs.ts_ms)),
                    obs.line.clone(),
                )
            }
            None => (
                json!({"rank": rank, "host": host, "device": device, "pid": pid, "ts": null,
                       "line": null, "origin": null, "record": []}),
                None,
                None,
                String::new(),
            ),
        }
    }

    /// Every field of a hit, including those not needed for correlation (not kept at ingest).
    fn all_fields(&self, h: &Hit) -> Vec<(String, String)> {
        let Some(sig) = h.sig else {
            return Vec::new();
        };
        let meta = crate::prefix::peel(&h.text, self.cfg.default_year);
        let mut out = h.fields.clone();
        self.cat
            .extract_fields(sig, &h.text[meta.msg_start..], false, &mut out);
        out
    }

    fn hit_json(&self, i: usize) -> Value {
        let h = &self.job.hits[i];
        let rank = self.rank_of(h.source);
        let host = self
            .host_of(h.source)
            .map(|x| self.job.hosts[x as usize].clone());
        let s = &self.job.sources[h.source as usize];
        json!({
            "rank": rank, "host": host, "device": s.cuda_dev.or(s.local_rank), "pid": s.pid,
            "ts": h.ts_ms.map(iso_ms), "ts_corrected": self.hit_time(h).map(iso_ms),
            "line": h.text, "origin": format!("{}:{}", h.origin, h.line_no),
            "signature": self.sig(h).map(|s| s.id.clone()),
        })
    }

    fn cand_json(&self, c: &Cand, _top: &Cand) -> Value {
        let (rank, host) = match c.who {
            Who::Rank(r) => (Some(r), c.host),
            Who::Source(s) => (None, self.host_of(s)),
            Who::Host(h) => (None, Some(h)),
        };
        let line = c.root().map(|r| match r {
            Root::Hit(i) => self.job.hits[i].text.clone(),
            Root::Context(s, f) => self.job.context[&(f, s)].line.clone(),
        });
        let sig = c.root().and_then(|r| match r {
            Root::Hit(i) => self.sig(&self.job.hits[i]).map(|s| s.id.clone()),
            Root::Context(s, f) => Some(
                self.cat.signatures[self.job.context[&(f, s)].sig as usize]
                    .id
                    .clone(),
            ),
        });
        json!({
            "rank": rank,
            "host": host.map(|h| self.job.hosts[h as usize].clone()),
            "score": c.score,
            "signature": sig,
            "line": line,
            "reasons": c.reasons,
        })
    }

    fn why_not(&self, c: &Cand, top: &Cand, tied: bool, explains: &BTreeSet<u16>) -> String {
        if tied {
            return format!(
                "tied with the root cause within the clock uncertainty of {} ms; evidence could not separate them",
                self.offsets.uncertainty_ms
            );
        }
        if let Some(b) = c.best_cause {
            if let Some(s) = self.job.hits[b].sig {
                if explains.contains(&s) {
                    return "its line is a known consequence of the root cause".into();
                }
            }
        }
        if c.best_cause.is_none() && c.outlier.is_none() {
            return "only symptoms or indirect evidence point at it".into();
        }
        if c.score < top.score {
            return format!("weaker evidence (score {} against {})", c.score, top.score);
        }
        match (c.ts, top.ts) {
            (Some(a), Some(b)) if a > b => format!("later by {} ms after clock correction", a - b),
            _ => "lower signature weight".into(),
        }
    }

    /// The lines the initiating process printed before the root-cause line. When the root
    /// line came from elsewhere (a launcher or kernel line, a peer's desync report), they are
    /// the process's own last lines up to that moment.
    fn preceding(&self, top: &Cand, root: Option<(u64, u32, Option<i64>)>) -> Vec<String> {
        let job = self.job;
        let srcs: Vec<u32> = match top.who {
            Who::Rank(r) => self.sources_of(r),
            Who::Source(s) => vec![s],
            Who::Host(_) => Vec::new(),
        };
        let limit = self.cfg.preceding_lines;
        let own = root.is_none_or(|(_, src, _)| srcs.contains(&src));
        let until = root.and_then(|(_, src, ts)| self.corrected(src, ts));
        let mut lines: Vec<RingLine> = Vec::new();
        for &s in &srcs {
            let src = &job.sources[s as usize];
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
            let seq = root.map_or(u64::MAX, |(seq, _, _)| seq);
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
}

fn role_str(r: Role) -> &'static str {
    match r {
        Role::Cause => "cause",
        Role::Symptom => "symptom",
        Role::Context => "context",
    }
}

fn fields_json(f: &[(String, String)]) -> Value {
    let mut m = serde_json::Map::new();
    for (k, v) in f {
        m.insert(k.clone(), Value::String(v.clone()));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_and_ranges() {
        assert_eq!(parse_rank_list("[1, 5-7]"), vec![1, 5, 6, 7]);
        assert_eq!(parse_rank_list("{3}"), vec![3]);
        let s: BTreeSet<u32> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(rank_ranges(&s), "0-2,4,6-7");
    }

    #[test]
    fn bus_ids_match_nccl_form() {
        assert_eq!(bdf_to_bus_id("0000:9a:00"), "9a000");
        assert_eq!(bdf_to_bus_id("0000:18:00.0"), "18000");
    }

    #[test]
    fn iso_formatting() {
        assert_eq!(iso_ms(1_796_040_001_005), "2026-11-30T12:00:01.005Z");
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn subnets() {
        assert_eq!(subnet_of("172.17.0.1").as_deref(), Some("172.17.0.0/16"));
        assert_eq!(subnet_of("nope"), None);
    }
}
