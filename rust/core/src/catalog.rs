//! The signature catalog: TOML data files parsed, validated and compiled into one Hyperscan
//! database plus per-signature field regexes. See python/rankwatch/catalog/SCHEMA.md.

use crate::dbcache::{CacheReport, DbCache};
use crate::digits;
use crate::fieldre::{FieldRegex, FieldSpan};
use crate::matcher::{Expression, Matcher, FLAG_CASELESS, FLAG_SINGLEMATCH};
use crate::scandb::{ScanDb, Scanner};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Cause,
    Symptom,
    Context,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Info,
    Warning,
    Error,
    Critical,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sync {
    Seq,
    Init,
}

/// Where a cause fails a job by itself: some choices are harmless while every process sits
/// on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HostScope {
    /// Wherever it is printed.
    #[default]
    Any,
    /// Unless the job provably ran on one host (every rank of its largest communicator seen
    /// there): a link-local or bridge address works within one host
    /// (`only_across_hosts`).
    AcrossHosts,
    /// Only in a job whose lines name two hosts or more: a choice common and harmless on one
    /// host (loopback), where a log that shows one host's ranks only must not count
    /// (`needs_two_hosts`).
    TwoHostsNamed,
}

pub const SUBSYSTEMS: &[&str] = &[
    "init",
    "bootstrap",
    "socket",
    "ib",
    "p2p",
    "shm",
    "cuda",
    "memory",
    "proxy",
    "ras",
    "watchdog",
    "store",
    "elastic",
    "xid",
    "python",
    "kernel",
    "gloo",
    "ofi",
    "nvshmem",
    "launcher",
    "container",
];

pub const OUTLIER_FIELDS: &[&str] = &[
    "subnet",
    "iface",
    "nccl_version",
    "cuda_driver",
    "transport",
    // Identity keys (correlate::identity); `env` stands for every NCCL_* setting.
    "net_transport",
    "net_plugin",
    "ofi_provider",
    "libfabric_version",
    "nccl_cuda",
    "ip_family",
    "gpu_model",
    "torch_version",
    "env",
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SignatureSpec {
    id: String,
    title: String,
    subsystem: String,
    role: Role,
    severity: Severity,
    weight: Option<u8>,
    #[serde(default)]
    patterns: Vec<String>,
    #[serde(default)]
    caseless: bool,
    #[serde(default)]
    fields: Vec<String>,
    #[serde(default)]
    explains: Vec<String>,
    #[serde(default)]
    blames_outlier: Vec<String>,
    #[serde(default)]
    blames_setting: Vec<String>,
    #[serde(default)]
    blames: Option<String>,
    #[serde(default)]
    only_with_failure: bool,
    #[serde(default)]
    only_across_hosts: bool,
    #[serde(default)]
    needs_two_hosts: bool,
    #[serde(default)]
    fails_when_last: bool,
    #[serde(default)]
    fails_when_last_in_job: bool,
    #[serde(default)]
    catch_all: bool,
    #[serde(default)]
    cleared_by: Vec<String>,
    #[serde(default)]
    hypotheses: Vec<Hypothesis>,
    #[serde(default)]
    sync: Option<String>,
    #[serde(default)]
    finding: bool,
    cause: Option<String>,
    fix: Option<String>,
    verify: Option<String>,
}

/// A competing explanation of a cause that the logs alone may not separate, and what would.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Hypothesis {
    pub cause: String,
    pub separate_by: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    #[serde(default)]
    signature: Vec<SignatureSpec>,
    /// Named lists of signature ids that `explains` may name as `@name`: the many symptoms a
    /// process's death sets off on the others are one list, not a copy per cause.
    #[serde(default)]
    groups: BTreeMap<String, Vec<String>>,
}

/// A validated signature, ready for use by the engine.
#[derive(Debug, Clone, Serialize)]
pub struct Signature {
    pub id: String,
    pub title: String,
    pub subsystem: String,
    pub role: Role,
    pub severity: Severity,
    pub weight: u8,
    pub patterns: Vec<String>,
    pub caseless: bool,
    #[serde(skip)]
    pub field_regexes: Vec<FieldRegex>,
    /// Per field regex: does it capture anything the correlator reads?
    #[serde(skip)]
    pub field_needed: Vec<bool>,
    pub fields: Vec<String>,
    pub explains: Vec<String>,
    #[serde(skip)]
    pub explains_idx: Vec<u16>,
    pub blames_outlier: Vec<String>,
    /// Settings (context fields) that, when a process reported them, are the fault behind this
    /// cause: the line that reported the setting becomes the root.
    pub blames_setting: Vec<String>,
    /// The fault is at the peer the line names (`blames = "peer"`), not at the printer.
    pub blames_peer: bool,
    /// A cause only when the job fails: alone (a healthy run prints it too) it is no failure.
    pub only_with_failure: bool,
    /// Which jobs a cause fails by itself, by the hosts they show.
    pub host_scope: HostScope,
    /// With `only_with_failure`: at the end of the input, a process whose last line is this
    /// one ended waiting (the job hung there and was stopped), which is a failure by itself.
    pub fails_when_last: bool,
    /// As `fails_when_last`, but only when the line is the job's last (no process printed
    /// after it): a wait one process prints while the others run silently.
    pub fails_when_last_in_job: bool,
    /// A wide net (any Xid, any RuntimeError): its hit on a line drops when a signature that
    /// is not a catch-all matched the same line, so a specific entry (a fault, or context that
    /// says the line is bookkeeping) never has to be carved out of the wide one's pattern.
    pub catch_all: bool,
    /// A cause its own process recovers from: where the same process later prints one of
    /// these signatures, the hit is no failure and no cause.
    pub cleared_by: Vec<String>,
    #[serde(skip)]
    pub cleared_by_idx: Vec<u16>,
    /// Some signature's `cleared_by` names this one: the engine notes where each process
    /// last printed it.
    #[serde(skip)]
    pub clears: bool,
    pub hypotheses: Vec<Hypothesis>,
    pub sync: Option<Sync>,
    /// A conclusion an evidence rule draws from several lines (a mismatched collective, a
    /// stalled rank): no patterns; its texts are the diagnosis's cause, fix and verify.
    pub finding: bool,
    pub cause: String,
    pub fix: String,
    pub verify: String,
    pub file: String,
    /// Fields must be extracted when the line arrives (hits, clock sync, identity and context
    /// fields); other context lines are only classified.
    #[serde(skip)]
    pub ingest_fields: bool,
    /// Every field regex finds the same spans in messages that differ only in digits, so
    /// spans found in one message serve every message of its shape.
    #[serde(skip)]
    pub fields_digit_blind: bool,
}

/// Field names the correlator reads besides the identity fields
/// (`crate::identity::IDENTITY_FIELDS`) and the per-process context (`crate::job::CONTEXT_FIELDS`);
/// regexes capturing none of them run only when a diagnosis is rendered.
const CORRELATOR_FIELDS: &[&str] = &[
    "own_socket_type",
    "peer_socket_type",
    "rank",
    "nranks",
    "cuda_dev",
    "bus_id",
    "pid",
    "local_rank",
    "host",
    "exitcode",
    "error_return",
    "subject_rank",
    "peer_addr",
    "peer_host",
    "peer_rank",
    "lagging_ranks",
    "ready_ranks",
    "seq",
    "last_enqueued",
    "last_completed",
    "timeout_ms",
    "pg",
    "op_type",
    "numel_in",
    "numel_out",
    "dtype",
    "ran_ms",
    "state",
    "comm_ptr",
    "comm_id",
    "thread_name",
    "frame_file",
    "frame_line",
    "ib_status",
    "bdf",
    "op_count",
    "wrapper_seq",
    "stack_thread",
    "frame_func",
    "native_frame",
    "native_func",
    "announced_rank",
    "announced_world",
    "net_dev",
    "listed_dev",
];

/// Field names the engine reads from context lines as they arrive, besides the identity
/// fields (compared across machines) and the per-process context (`crate::job::CONTEXT_FIELDS`).
const INGEST_CONTEXT_FIELDS: &[&str] = &[
    "rank",
    "nranks",
    "cuda_dev",
    "bus_id",
    "op_count",
    "wrapper_seq",
    "stack_thread",
    "frame_func",
    "native_frame",
    "native_func",
    "announced_rank",
    "announced_world",
    "net_dev",
];

fn is_identity(name: &str) -> bool {
    crate::identity::IDENTITY_FIELDS.contains(&name)
}

/// A field kept per process as context: what it uses, and the settings a cause may blame.
fn is_context(name: &str) -> bool {
    crate::job::CONTEXT_FIELDS.contains(&name)
}

fn ingested(name: &str) -> bool {
    INGEST_CONTEXT_FIELDS.contains(&name) || is_identity(name) || is_context(name)
}

fn needed_by_correlator(name: &str) -> bool {
    CORRELATOR_FIELDS.contains(&name) || is_identity(name) || is_context(name)
}

/// Context fields a cause may name in `blames_setting`: settings that, once in effect, make a
/// failure of that kind the setting's fault (an injected search graph, a NIC outside PCI, a
/// DataLoader configuration its framework warns about). The one list a new setting joins: the
/// engine ingests, keeps and hands these to the correlator from here.
pub const SETTING_FIELDS: &[&str] = &[
    "graph_file",
    "non_pci_nic",
    "pin_memory_reload",
    "link_local_gid",
    "memlock_limit",
];

/// Error from loading a catalog: which file, which signature and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogError {
    pub file: String,
    pub signature: Option<String>,
    pub reason: String,
}

impl std::fmt::Display for CatalogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.signature {
            Some(id) => write!(f, "{}: signature '{}': {}", self.file, id, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

impl std::error::Error for CatalogError {}

pub struct Catalog {
    pub signatures: Vec<Signature>,
    by_id: HashMap<String, u16>,
    scan_db: ScanDb,
    /// Hyperscan expression id -> signature index.
    expr_sig: Vec<u16>,
    /// Whether the database was compiled or came from the cache, and why.
    pub cache_report: CacheReport,
}

fn err(file: &str, sig: Option<&str>, reason: impl Into<String>) -> CatalogError {
    CatalogError {
        file: file.to_string(),
        signature: sig.map(str::to_string),
        reason: reason.into(),
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

impl Catalog {
    /// Builds a catalog from `(file name, TOML text)` pairs, validating everything and
    /// compiling the Hyperscan database (no cache).
    pub fn from_sources(sources: &[(String, String)]) -> Result<Catalog, CatalogError> {
        Catalog::from_sources_cached(sources, None)
    }

    /// As [`Catalog::from_sources`], but takes the compiled database from `cache` when it holds
    /// one for these expressions, and stores it there after compiling otherwise.
    pub fn from_sources_cached(
        sources: &[(String, String)],
        cache: Option<&DbCache>,
    ) -> Result<Catalog, CatalogError> {
        let mut signatures: Vec<Signature> = Vec::new();
        let mut by_id: HashMap<String, u16> = HashMap::new();
        let mut groups: HashMap<String, (String, Vec<String>)> = HashMap::new();
        for (file, text) in sources {
            let parsed: CatalogFile =
                toml::from_str(text).map_err(|e| err(file, None, e.to_string()))?;
            for (name, members) in parsed.groups {
                if let Some((other, _)) = groups.get(&name) {
                    let why = format!("group '{name}' is already defined in {other}");
                    return Err(err(file, None, why));
                }
                groups.insert(name, (file.clone(), members));
            }
            for spec in parsed.signature {
                let sig = validate(file, spec)?;
                if let Some(prev) = by_id.get(&sig.id) {
                    let other = &signatures[*prev as usize].file;
                    return Err(err(
                        file,
                        Some(&sig.id),
                        format!("duplicate id (already defined in {other})"),
                    ));
                }
                if signatures.len() >= u16::MAX as usize {
                    return Err(err(file, Some(&sig.id), "too many signatures"));
                }
                by_id.insert(sig.id.clone(), signatures.len() as u16);
                signatures.push(sig);
            }
        }
        if signatures.is_empty() {
            return Err(err("<catalog>", None, "no signatures found"));
        }
        for (name, (file, members)) in &groups {
            if let Some(m) = members.iter().find(|m| !by_id.contains_key(*m)) {
                let why = format!("group '{name}' lists unknown signature '{m}'");
                return Err(err(file, None, why));
            }
        }
        for sig in signatures.iter_mut() {
            sig.explains_idx = explained(sig, &by_id, &groups)?;
            sig.cleared_by_idx = clearing(sig, &by_id)?;
        }
        let clearing_sigs: Vec<u16> = signatures
            .iter()
            .flat_map(|s| s.cleared_by_idx.iter().copied())
            .collect();
        for i in clearing_sigs {
            signatures[i as usize].clears = true;
        }
        let names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
        let (scan_db, expr_sig, cache_report) = build_scan_db(&signatures, &names, cache)?;
        Ok(Catalog {
            signatures,
            by_id,
            scan_db,
            expr_sig,
            cache_report,
        })
    }

    pub fn len(&self) -> usize {
        self.signatures.len()
    }

    pub fn is_empty(&self) -> bool {
        self.signatures.is_empty()
    }

    pub fn index_of(&self, id: &str) -> Option<u16> {
        self.by_id.get(id).copied()
    }

    /// The main Hyperscan database (what the benchmarks' Hyperscan-alone ceiling scans with;
    /// classify messages with [`Catalog::scan`]).
    pub fn matcher(&self) -> &Matcher {
        self.scan_db.matcher()
    }

    /// Whether scans are shared between messages that differ only in digits.
    pub fn is_digit_blind(&self) -> bool {
        self.scan_db.is_digit_blind()
    }

    /// Whether scans are also shared between messages that differ only in hex tokens.
    pub fn is_token_blind(&self) -> bool {
        self.scan_db.is_token_blind()
    }

    /// Scratch space and memo for one thread's [`Catalog::scan`] calls.
    pub fn scanner(&self) -> Scanner {
        self.scan_db.scanner()
    }

    /// Appends the ids of the expressions whose pattern matches `msg` to `out`.
    pub fn scan(&self, msg: &[u8], scanner: &mut Scanner, out: &mut Vec<u32>) {
        self.scan_db.scan(msg, scanner, out);
    }

    /// The signatures (sorted, unique) that `msg` alone matches, with scratch space of its own:
    /// for a one-off question about a line, not for the decoder's stream of lines.
    pub fn signatures_matching(&self, msg: &[u8]) -> Vec<u16> {
        let (mut exprs, mut sigs) = (Vec::new(), Vec::new());
        self.scan(msg, &mut self.scanner(), &mut exprs);
        self.signatures_for(&exprs, &mut sigs);
        sigs
    }

    /// Converts raw Hyperscan expression ids into sorted, unique signature indexes.
    pub fn signatures_for(&self, expr_ids: &[u32], out: &mut Vec<u16>) {
        out.clear();
        for &e in expr_ids {
            out.push(self.expr_sig[e as usize]);
        }
        out.sort_unstable();
        out.dedup();
        if out.iter().any(|&s| !self.signatures[s as usize].catch_all) {
            out.retain(|&s| !self.signatures[s as usize].catch_all);
        }
    }

    /// Runs a signature's field regexes over a message and collects named groups; with
    /// `needed_only`, just the regexes that capture fields the correlator reads.
    pub fn extract_fields(
        &self,
        sig: u16,
        text: &str,
        needed_only: bool,
        out: &mut Vec<(String, String)>,
    ) {
        let mut spans = Vec::new();
        let known = |n: &str| out.iter().any(|(k, _)| k == n);
        self.field_spans(sig, text, needed_only, known, &mut spans);
        out.extend(self.field_pairs(sig, text, &spans));
    }

    /// Owned `(name, value)` pairs of spans that `field_spans` found in `text`.
    pub fn field_pairs<'a>(
        &'a self,
        sig: u16,
        text: &'a str,
        spans: &'a [FieldSpan],
    ) -> impl Iterator<Item = (String, String)> + 'a {
        spans.iter().map(move |s| {
            (
                self.field_name(sig, s).to_string(),
                text[s.range()].to_string(),
            )
        })
    }

    /// [`Catalog::extract_fields`] without copies: appends where each field's value is in
    /// `text`. A name that `known` claims, or that an earlier regex of the signature filled,
    /// is not taken again.
    pub fn field_spans(
        &self,
        sig: u16,
        text: &str,
        needed_only: bool,
        known: impl Fn(&str) -> bool,
        out: &mut Vec<FieldSpan>,
    ) {
        let base = out.len();
        let spec = &self.signatures[sig as usize];
        let filled = |out: &[FieldSpan], n: &str| {
            known(n) || out[base..].iter().any(|s| self.field_name(sig, s) == n)
        };
        for (i, (field, needed)) in spec
            .field_regexes
            .iter()
            .zip(&spec.field_needed)
            .enumerate()
        {
            if needed_only && !needed {
                continue;
            }
            // Version variants repeat the same names: once they are filled, skip the rest.
            if field.names().iter().all(|n| filled(out, n)) {
                continue;
            }
            field.spans_into(i as u16, text, filled, out);
        }
    }

    /// The name a span of `sig`'s field regexes stands for.
    pub fn field_name(&self, sig: u16, span: &FieldSpan) -> &str {
        &self.signatures[sig as usize].field_regexes[span.regex as usize].names()
            [span.name as usize]
    }
}

/// The Hyperscan databases of every signature's patterns (from the cache when it has them)
/// and the expression id -> signature index map.
fn build_scan_db(
    signatures: &[Signature],
    source_names: &[&str],
    cache: Option<&DbCache>,
) -> Result<(ScanDb, Vec<u16>, CacheReport), CatalogError> {
    let mut exprs = Vec::new();
    let mut expr_sig = Vec::new();
    for (si, sig) in signatures.iter().enumerate() {
        for p in &sig.patterns {
            let flags = FLAG_SINGLEMATCH | if sig.caseless { FLAG_CASELESS } else { 0 };
            exprs.push(Expression {
                pattern: p.as_str(),
                id: exprs.len() as u32,
                flags,
            });
            expr_sig.push(si as u16);
        }
    }
    let (db, report) =
        ScanDb::build(&exprs, source_names, cache).map_err(|e| match e.expression {
            Some(i) => {
                let sig = &signatures[expr_sig[i] as usize];
                err(
                    &sig.file,
                    Some(&sig.id),
                    format!(
                        "pattern {:?} rejected by Hyperscan: {}",
                        exprs[i].pattern, e.message
                    ),
                )
            }
            None => err("<catalog>", None, format!("Hyperscan: {}", e.message)),
        })?;
    Ok((db, expr_sig, report))
}

/// The shipped catalog's files as `(path, text)`, in name order (for tests).
#[cfg(test)]
pub(crate) fn shipped_sources() -> Vec<(String, String)> {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/rankwatch/catalog");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "toml") {
            sources.push((
                path.display().to_string(),
                std::fs::read_to_string(&path).unwrap(),
            ));
        }
    }
    sources.sort();
    sources
}

/// The signatures `sig` explains: its `explains` entries, a `@group` standing for each member.
/// The signatures a cause's `cleared_by` names, by index.
fn clearing(sig: &Signature, by_id: &HashMap<String, u16>) -> Result<Vec<u16>, CatalogError> {
    sig.cleared_by
        .iter()
        .map(|id| {
            by_id.get(id).copied().ok_or_else(|| {
                let why = format!("cleared_by unknown signature '{id}'");
                err(&sig.file, Some(&sig.id), why)
            })
        })
        .collect()
}

fn explained(
    sig: &Signature,
    by_id: &HashMap<String, u16>,
    groups: &HashMap<String, (String, Vec<String>)>,
) -> Result<Vec<u16>, CatalogError> {
    let mut idx = Vec::new();
    for target in &sig.explains {
        let ids: &[String] = match target.strip_prefix('@') {
            Some(name) => match groups.get(name) {
                Some((_, members)) => members,
                None => {
                    let why = format!("explains unknown group '@{name}'");
                    return Err(err(&sig.file, Some(&sig.id), why));
                }
            },
            None => std::slice::from_ref(target),
        };
        for id in ids {
            match by_id.get(id) {
                Some(&t) => idx.push(t),
                None => {
                    let why = format!("explains unknown signature '{id}'");
                    return Err(err(&sig.file, Some(&sig.id), why));
                }
            }
        }
    }
    idx.sort_unstable();
    idx.dedup();
    Ok(idx)
}

fn validate(file: &str, s: SignatureSpec) -> Result<Signature, CatalogError> {
    let id = s.id.clone();
    let e = |reason: String| err(file, Some(&id), reason);
    if !valid_id(&s.id) {
        return Err(e("id must be lowercase letters, digits and '_'".into()));
    }
    if s.title.trim().is_empty() {
        return Err(e("title is empty".into()));
    }
    if !SUBSYSTEMS.contains(&s.subsystem.as_str()) {
        return Err(e(format!(
            "unknown subsystem '{}' (expected one of {})",
            s.subsystem,
            SUBSYSTEMS.join(", ")
        )));
    }
    if s.finding {
        if !s.patterns.is_empty() || !s.fields.is_empty() || s.role != Role::Cause {
            return Err(e(
                "a finding is a cause with no patterns or fields (rules draw it)".into(),
            ));
        }
    } else if s.patterns.is_empty() {
        return Err(e("no patterns".into()));
    }
    let mut seen = HashSet::new();
    for p in &s.patterns {
        if p.is_empty() {
            return Err(e("empty pattern".into()));
        }
        if !seen.insert(p) {
            return Err(e(format!("pattern {p:?} listed twice")));
        }
    }
    let mut field_regexes = Vec::new();
    for f in &s.fields {
        let re =
            FieldRegex::parse(f).map_err(|x| e(format!("field regex {f:?} is invalid: {x}")))?;
        if re.names().is_empty() {
            return Err(e(format!("field regex {f:?} has no named group")));
        }
        field_regexes.push(re);
    }
    for o in &s.blames_outlier {
        if !OUTLIER_FIELDS.contains(&o.as_str()) {
            return Err(e(format!(
                "blames_outlier '{o}' is not one of {}",
                OUTLIER_FIELDS.join(", ")
            )));
        }
    }
    for f in &s.blames_setting {
        if !SETTING_FIELDS.contains(&f.as_str()) {
            return Err(e(format!(
                "blames_setting '{f}' is not one of {}",
                SETTING_FIELDS.join(", ")
            )));
        }
    }
    if !s.blames_setting.is_empty() && s.role != Role::Cause {
        return Err(e("blames_setting is only for causes".into()));
    }
    if s.only_with_failure && s.role == Role::Context {
        return Err(e("only_with_failure is only for causes and symptoms".into()));
    }
    let host_scope = match (s.only_across_hosts, s.needs_two_hosts) {
        (false, false) => HostScope::Any,
        (true, true) => {
            return Err(e(
                "only_across_hosts and needs_two_hosts exclude each other".into(),
            ))
        }
        _ if s.role != Role::Cause => {
            return Err(e(
                "only_across_hosts and needs_two_hosts are only for causes".into(),
            ))
        }
        (true, false) => HostScope::AcrossHosts,
        (false, true) => HostScope::TwoHostsNamed,
    };
    if (s.fails_when_last || s.fails_when_last_in_job) && !s.only_with_failure {
        return Err(e("fails_when_last needs only_with_failure".into()));
    }
    if s.fails_when_last && s.fails_when_last_in_job {
        return Err(e(
            "fails_when_last and fails_when_last_in_job exclude each other".into(),
        ));
    }
    if s.catch_all && s.role == Role::Context {
        return Err(e("catch_all is only for causes and symptoms".into()));
    }
    if !s.cleared_by.is_empty() && s.role != Role::Cause {
        return Err(e("cleared_by is only for causes".into()));
    }
    let blames_peer = match s.blames.as_deref() {
        None | Some("printer") => false,
        Some("peer") => true,
        Some(other) => return Err(e(format!("blames '{other}' is not 'peer' or 'printer'"))),
    };
    let sync = match s.sync.as_deref() {
        None | Some("") => None,
        Some("seq") => Some(Sync::Seq),
        Some("init") => Some(Sync::Init),
        Some(other) => return Err(e(format!("sync '{other}' is not 'seq' or 'init'"))),
    };
    if s.role != Role::Context {
        for (name, v) in [("cause", &s.cause), ("fix", &s.fix), ("verify", &s.verify)] {
            if v.as_deref().map(str::trim).unwrap_or("").is_empty() {
                return Err(e(format!("'{name}' text is required for a {:?}", s.role)));
            }
        }
    }
    let weight = s.weight.unwrap_or(match s.role {
        Role::Cause => 50,
        Role::Symptom => 10,
        Role::Context => 0,
    });
    if weight > 100 {
        return Err(e(format!("weight {weight} is above 100")));
    }
    let ingest_fields = !field_regexes.is_empty()
        && (s.role != Role::Context
            || sync == Some(Sync::Seq)
            || field_regexes
                .iter()
                .any(|re| re.names().iter().any(|n| ingested(n))));
    let field_needed = field_regexes
        .iter()
        .map(|re| re.names().iter().any(|n| needed_by_correlator(n)))
        .collect();
    let fields_digit_blind = s
        .fields
        .iter()
        .all(|f| digits::field_regex_is_digit_blind(f));
    Ok(Signature {
        field_needed,
        ingest_fields,
        fields_digit_blind,
        id: s.id,
        title: s.title,
        subsystem: s.subsystem,
        role: s.role,
        severity: s.severity,
        weight,
        patterns: s.patterns,
        caseless: s.caseless,
        field_regexes,
        fields: s.fields,
        explains: s.explains,
        explains_idx: Vec::new(),
        blames_outlier: s.blames_outlier,
        blames_setting: s.blames_setting,
        blames_peer,
        only_with_failure: s.only_with_failure,
        host_scope,
        fails_when_last: s.fails_when_last,
        fails_when_last_in_job: s.fails_when_last_in_job,
        catch_all: s.catch_all,
        cleared_by: s.cleared_by,
        cleared_by_idx: Vec::new(),
        clears: false,
        hypotheses: s.hypotheses,
        sync,
        finding: s.finding,
        cause: s.cause.unwrap_or_default(),
        fix: s.fix.unwrap_or_default(),
        verify: s.verify.unwrap_or_default(),
        file: file.to_string(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dbcache::DbOrigin;

    pub const SMALL: &str = r#"
[[signature]]
id = "sock_connect"
title = "connect failed"
subsystem = "socket"
role = "cause"
severity = "error"
weight = 60
patterns = ['[Cc]onnect to \S+ failed : ']
fields = ['[Cc]onnect to (?P<peer_addr>[0-9.]+)<\d+> failed : (?P<error>.+)']
explains = ["timeout"]
blames_outlier = ["subnet"]
cause = "c"
fix = "f"
verify = "v"

[[signature]]
id = "timeout"
title = "watchdog timeout"
subsystem = "watchdog"
role = "symptom"
severity = "error"
patterns = ['Watchdog caught collective operation timeout']
fields = ['SeqNum=(?P<seq>\d+)']
sync = "seq"
cause = "c"
fix = "f"
verify = "v"

[[signature]]
id = "socket_using"
title = "socket interface"
subsystem = "init"
role = "context"
severity = "info"
patterns = ['^NET/Socket ?: Using']
fields = ['Using \[0\](?P<iface>[^:]+):(?P<ip>[0-9.]+)<']
"#;

    pub fn small() -> Catalog {
        Catalog::from_sources(&[("small.toml".into(), SMALL.into())]).unwrap()
    }

    #[test]
    fn loads_and_classifies() {
        let c = small();
        assert_eq!(c.len(), 3);
        let sigs = c.signatures_matching(
            b"socketStartConnect: Connect to 172.17.0.1<39275> failed : Network is unreachable",
        );
        assert_eq!(sigs, vec![c.index_of("sock_connect").unwrap()]);
        let mut f = Vec::new();
        c.extract_fields(
            sigs[0],
            "Connect to 172.17.0.1<39275> failed : Network is unreachable",
            false,
            &mut f,
        );
        assert_eq!(f[0], ("peer_addr".into(), "172.17.0.1".into()));
        assert_eq!(
            c.signatures[sigs[0] as usize].explains_idx,
            vec![c.index_of("timeout").unwrap()]
        );
    }

    #[test]
    fn cached_database_is_used_on_the_second_load() {
        let dir = std::env::temp_dir().join(format!("rankwatch-catcache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cache = DbCache::at(&dir);
        let sources = [("small.toml".to_string(), SMALL.to_string())];
        let cold = Catalog::from_sources_cached(&sources, Some(&cache)).unwrap();
        assert_eq!(cold.cache_report.origin, DbOrigin::Compiled);
        assert_eq!(cold.cache_report.note, None);
        let warm = Catalog::from_sources_cached(&sources, Some(&cache)).unwrap();
        assert_eq!(warm.cache_report.origin, DbOrigin::Cached);
        let line = b"socketStartConnect: Connect to 172.17.0.1<39275> failed : x";
        for c in [&cold, &warm] {
            assert_eq!(
                c.signatures_matching(line),
                vec![c.index_of("sock_connect").unwrap()]
            );
        }
        // An edited catalog under the same file name replaces the entry.
        let edited = [(
            "small.toml".to_string(),
            SMALL.replace("'^NET/Socket ?: Using'", "'^NET/Socket : Using'"),
        )];
        let changed = Catalog::from_sources_cached(&edited, Some(&cache)).unwrap();
        assert_eq!(changed.cache_report.origin, DbOrigin::Compiled);
        assert!(changed
            .cache_report
            .note
            .as_deref()
            .unwrap()
            .contains("stale"));
        let again = Catalog::from_sources_cached(&edited, Some(&cache)).unwrap();
        assert_eq!(again.cache_report.origin, DbOrigin::Cached);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_shipped_field_regex_compiles() {
        // Loading only parses field regexes; compiling happens on first use, so check here.
        let catalog = Catalog::from_sources(&shipped_sources()).unwrap();
        // Every shipped pattern has a digit-blind form, so scans are shared across numbers,
        // and none tells hex tokens' letters apart (pointers, hashes).
        assert!(catalog.is_digit_blind());
        assert!(catalog.is_token_blind());
        for sig in &catalog.signatures {
            for field in &sig.field_regexes {
                let names = field
                    .compiled_names()
                    .unwrap_or_else(|| panic!("{}: {}", sig.id, field.pattern()));
                assert_eq!(names, field.names(), "{}", sig.id);
            }
        }
    }

    #[test]
    fn field_spans_point_into_the_text_and_fill_each_name_once() {
        // Two version variants of one field and a regex for another: the second variant runs
        // only while a name is missing, and a name the caller already knows is not taken.
        let text = SMALL.replace(
            r"fields = ['[Cc]onnect to (?P<peer_addr>[0-9.]+)<\d+> failed : (?P<error>.+)']",
            r"fields = ['to (?P<peer_addr>[0-9.]+)<', 'to (?P<peer_addr>\S+) failed : (?P<error>.+)', 'port (?P<port>\d+)']",
        );
        let c = Catalog::from_sources(&[("t.toml".into(), text)]).unwrap();
        let sig = c.index_of("sock_connect").unwrap();
        let msg = "Connect to 10.0.0.2<7> failed : gone, port 99";
        let mut spans = Vec::new();
        c.field_spans(sig, msg, false, |_| false, &mut spans);
        let got: Vec<_> = c.field_pairs(sig, msg, &spans).collect();
        let want = [
            ("peer_addr", "10.0.0.2"),
            ("error", "gone, port 99"),
            ("port", "99"),
        ];
        assert_eq!(got, want.map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(spans[0].range(), 11..19);
        let mut pairs = vec![("error".to_string(), "known".to_string())];
        c.extract_fields(sig, msg, false, &mut pairs);
        let want = [
            ("error", "known"),
            ("peer_addr", "10.0.0.2"),
            ("port", "99"),
        ];
        assert_eq!(pairs, want.map(|(k, v)| (k.to_string(), v.to_string())));
    }

    fn load_err(text: &str) -> CatalogError {
        Catalog::from_sources(&[("bad.toml".into(), text.into())])
            .err()
            .unwrap()
    }

    #[test]
    fn a_group_stands_for_its_members_in_explains() {
        let text = SMALL.replace("explains = [\"timeout\"]", "explains = [\"@teardown\"]");
        let groups = "[groups]\nteardown = [\"timeout\"]\n".to_string();
        let c =
            Catalog::from_sources(&[("groups.toml".into(), groups), ("small.toml".into(), text)])
                .unwrap();
        let timeout = c.index_of("timeout").unwrap();
        let cause = &c.signatures[c.index_of("sock_connect").unwrap() as usize];
        assert_eq!(cause.explains_idx, vec![timeout]);
    }

    #[test]
    fn groups_are_checked_like_explains() {
        let unknown = SMALL.replace("explains = [\"timeout\"]", "explains = [\"@nope\"]");
        assert!(load_err(&unknown).reason.contains("unknown group '@nope'"));
        let bad_member = format!("[groups]\nteardown = [\"nope\"]\n{SMALL}");
        assert!(load_err(&bad_member)
            .reason
            .contains("group 'teardown' lists unknown signature 'nope'"));
        let twice = Catalog::from_sources(&[
            (
                "a.toml".into(),
                format!("[groups]\ng = [\"timeout\"]\n{SMALL}"),
            ),
            ("b.toml".into(), "[groups]\ng = []\n".into()),
        ]);
        assert!(twice
            .err()
            .unwrap()
            .reason
            .contains("already defined in a.toml"));
    }

    #[test]
    fn rejects_unknown_explains_target() {
        let e = load_err(&SMALL.replace("explains = [\"timeout\"]", "explains = [\"nope\"]"));
        assert_eq!(e.signature.as_deref(), Some("sock_connect"));
        assert!(e.reason.contains("nope"), "{e}");
    }

    #[test]
    fn rejects_duplicate_ids() {
        let twice = format!(
            "{SMALL}\n{}",
            &SMALL[SMALL.find("[[signature]]\nid = \"timeout\"").unwrap()..]
        );
        let e = load_err(&twice);
        assert!(e.reason.contains("duplicate"), "{e}");
    }

    #[test]
    fn rejects_bad_field_regex_and_hyperscan_pattern() {
        let e = load_err(&SMALL.replace("SeqNum=(?P<seq>\\d+)", "SeqNum=(?P<seq>\\d+"));
        assert_eq!(e.signature.as_deref(), Some("timeout"));
        let e = load_err(&SMALL.replace(
            "'Watchdog caught collective operation timeout'",
            "'(?<=x)Watchdog'",
        ));
        assert_eq!(e.signature.as_deref(), Some("timeout"));
        assert!(e.reason.contains("Hyperscan"), "{e}");
    }

    #[test]
    fn rejects_unknown_keys_and_enums() {
        let e = load_err(&SMALL.replace("weight = 60", "wieght = 60"));
        assert!(e.reason.contains("wieght"), "{e}");
        let e = load_err(&SMALL.replace("subsystem = \"socket\"", "subsystem = \"sockets\""));
        assert!(e.reason.contains("sockets"), "{e}");
    }

    #[test]
    fn every_setting_is_ingested_kept_and_read() {
        for &f in SETTING_FIELDS {
            assert!(ingested(f) && needed_by_correlator(f), "{f}");
            assert!(crate::job::CONTEXT_FIELDS.contains(&f), "{f}");
        }
    }

    #[test]
    fn blames_setting_takes_known_settings_on_causes_only() {
        let ok = SMALL.replace(
            "blames_outlier = [\"subnet\"]",
            "blames_setting = [\"graph_file\"]",
        );
        let c = Catalog::from_sources(&[("small.toml".into(), ok.clone())]).unwrap();
        let sig = &c.signatures[c.index_of("sock_connect").unwrap() as usize];
        assert_eq!(sig.blames_setting, vec!["graph_file".to_string()]);
        let e = load_err(&ok.replace("[\"graph_file\"]", "[\"ifname\"]"));
        assert!(e.reason.contains("ifname"), "{e}");
        let e = load_err(&ok.replace(
            "role = \"cause\"\nseverity = \"error\"\nweight = 60",
            "role = \"context\"\nseverity = \"error\"\nweight = 60",
        ));
        assert!(e.reason.contains("only for causes"), "{e}");
    }

    #[test]
    fn only_with_failure_is_for_causes_and_symptoms() {
        let ok = SMALL
            .replace("weight = 60", "weight = 60\nonly_with_failure = true")
            .replace("sync = \"seq\"", "sync = \"seq\"\nonly_with_failure = true");
        let c = Catalog::from_sources(&[("small.toml".into(), ok.clone())]).unwrap();
        for id in ["sock_connect", "timeout"] {
            assert!(c.signatures[c.index_of(id).unwrap() as usize].only_with_failure);
        }
        let e = flag_on_context("only_with_failure");
        assert!(
            e.reason
                .contains("only_with_failure is only for causes and symptoms"),
            "{e}"
        );
    }

    /// Why SMALL does not load with `flag = true` on its context entry.
    fn flag_on_context(flag: &str) -> CatalogError {
        let context = "patterns = ['^NET/Socket ?: Using']";
        load_err(&SMALL.replace(context, &format!("{context}\n{flag} = true")))
    }

    /// The signatures (by id) that `msg` is classified as.
    fn classified(c: &Catalog, msg: &[u8]) -> Vec<String> {
        c.signatures_matching(msg)
            .iter()
            .map(|&s| c.signatures[s as usize].id.clone())
            .collect()
    }

    #[test]
    fn a_catch_all_yields_to_a_specific_hit_on_the_same_line() {
        let wide = r#"
[[signature]]
id = "any_failure"
title = "anything failed"
subsystem = "socket"
role = "cause"
severity = "error"
weight = 90
catch_all = true
patterns = ['failed']
cause = "c"
fix = "f"
verify = "v"
"#;
        let c = Catalog::from_sources(&[("small.toml".into(), format!("{SMALL}{wide}"))]).unwrap();
        let connect = b"Connect to 10.0.0.2<39275> failed : Network is unreachable";
        assert_eq!(classified(&c, connect), ["sock_connect"]);
        assert_eq!(classified(&c, b"init failed"), ["any_failure"]);
        // A context entry claims its line too: what it names is no failure.
        assert_eq!(
            classified(&c, b"NET/Socket : Using [0]eth0:10.0.0.1<0> failed"),
            ["socket_using"]
        );
        let e = flag_on_context("catch_all");
        assert!(
            e.reason
                .contains("catch_all is only for causes and symptoms"),
            "{e}"
        );
    }

    #[test]
    fn cleared_by_names_known_signatures_of_a_cause() {
        let ok = SMALL.replace(
            "weight = 60",
            "weight = 60\ncleared_by = [\"socket_using\"]",
        );
        let c = Catalog::from_sources(&[("small.toml".into(), ok.clone())]).unwrap();
        let using = c.index_of("socket_using").unwrap();
        let cause = &c.signatures[c.index_of("sock_connect").unwrap() as usize];
        assert_eq!(cause.cleared_by_idx, vec![using]);
        assert!(c.signatures[using as usize].clears);
        assert!(!cause.clears);
        let e = load_err(&ok.replace("[\"socket_using\"]", "[\"nothing\"]"));
        assert!(
            e.reason.contains("cleared_by unknown signature 'nothing'"),
            "{e}"
        );
        let e = load_err(&SMALL.replace(
            "sync = \"seq\"",
            "sync = \"seq\"\ncleared_by = [\"socket_using\"]",
        ));
        assert!(e.reason.contains("cleared_by is only for causes"), "{e}");
    }

    #[test]
    fn host_scope_is_one_of_the_two_keys_and_only_for_causes() {
        let scoped =
            |key: &str| SMALL.replace("weight = 60", &format!("weight = 60\n{key} = true"));
        for (key, scope) in [
            ("only_across_hosts", HostScope::AcrossHosts),
            ("needs_two_hosts", HostScope::TwoHostsNamed),
        ] {
            let c = Catalog::from_sources(&[("small.toml".into(), scoped(key))]).unwrap();
            assert_eq!(
                c.signatures[c.index_of("sock_connect").unwrap() as usize].host_scope,
                scope
            );
        }
        let both = scoped("only_across_hosts")
            .replace("weight = 60", "weight = 60\nneeds_two_hosts = true");
        assert!(load_err(&both).reason.contains("exclude each other"));
        let context = "patterns = ['^NET/Socket ?: Using']";
        let e = load_err(&SMALL.replace(context, &format!("{context}\nneeds_two_hosts = true")));
        assert!(e.reason.contains("only for causes"), "{e}");
    }
}
