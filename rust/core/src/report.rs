//! The published contract: one diagnosis per incident (`rankwatch.diagnosis/1`) and the
//! report `rankwatch analyze --json` prints around them (`rankwatch.report/1`).
//!
//! These structs are what the correlator renders and what the JSON Schemas under `schema/`
//! are generated from (`schema/diagnosis-1.schema.json`, `schema/report-1.schema.json`). The
//! test `checked_in_schemas_match_the_structs` fails when a struct and its checked-in schema
//! differ; `RANKWATCH_UPDATE_SCHEMA=1 cargo test -p rankwatch-core checked_in_schemas` rewrites
//! them. `SCHEMA.md` at the repository root describes every field.
//!
//! Compatibility: version 1 only grows. A field keeps its name, type and meaning; new fields
//! are added (optional for readers: older diagnoses on a topic lack them). Keys are written in
//! alphabetical order (serde_json's map), which no reader may depend on.
//!
//! `Option` fields without `skip_serializing_if` are always present and may be null; those
//! with it are absent when they do not apply.

use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

/// The name and version of the diagnosis format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum DiagnosisSchema {
    #[serde(rename = "rankwatch.diagnosis/1")]
    V1,
}

/// The name and version of the report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
pub enum ReportSchema {
    #[serde(rename = "rankwatch.report/1")]
    V1,
}

/// Whether more evidence may still change the diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Published before the incident settled: a later diagnosis with the same id may replace it.
    Open,
    /// The incident's horizon has passed (or the input ended): this is the last diagnosis.
    Final,
}

/// The diagnosis of one incident: where the failure started, why, and what to do about it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Diagnosis {
    /// Always `rankwatch.diagnosis/1`.
    pub schema: DiagnosisSchema,
    /// The incident's id (`rw-` and 16 hex digits), stable across updates of one incident
    /// and across catalog versions (it hashes the job, the start and the signature's name).
    pub id: String,
    /// The job the incident belongs to.
    pub job: String,
    /// `open` while the incident may still change, `final` for its last diagnosis.
    pub status: Status,
    /// One line: who (rank, host) and what (the headline).
    pub summary: String,
    /// The catalog signature whose cause, fix and verify texts apply (may differ from
    /// `signature`: a configuration root cause, a finding a rule drew); null when none does.
    pub cause_signature: Option<SignatureRef>,
    /// The signature of the root-cause line (`unclassified` when no signature matched it).
    pub signature: SignatureInfo,
    /// The initiating process and its line.
    pub root_cause: RootCause,
    /// The earliest warning-or-worse line of the incident when it is not the root line.
    pub first_warning: Option<FirstWarning>,
    /// What went wrong, with the incident's facts filled in.
    pub cause: String,
    /// What to do about it.
    pub fix: String,
    /// How to check that the fix worked.
    pub verify: String,
    /// The values the texts could use: who and where, the root line's fields, the rest of the
    /// job's settings (`job_*`), this host's (`host_*`).
    pub facts: BTreeMap<String, String>,
    /// 0 to 1: how sure the ranking is (lower for ties and close seconds).
    pub confidence: f64,
    /// Another candidate on another host scored the same within the clock uncertainty.
    pub tie: bool,
    /// The ranked candidates with evidence (the root cause first), at most 5.
    pub suspects: Vec<Suspect>,
    /// Other ranks' lines grouped by signature, most ranks first, benign warnings last.
    pub collateral: Vec<Collateral>,
    /// The ranks of `collateral`, as ranges (`0-3,5`).
    pub collateral_ranks: String,
    /// How many ranks `collateral_ranks` holds.
    pub collateral_rank_count: usize,
    /// The initiating process's lines before the root-cause line, oldest first.
    pub preceding_lines: Vec<String>,
    /// Configuration that differs between hosts or is odd, one per (host, field).
    pub odd_context: Vec<OddContext>,
    /// Collectives at which ranks disagree (operation, sizes, type), one table each.
    pub collectives: Vec<CollectiveTable>,
    /// Other candidates with a cause, configuration or pointer, and why each lost, at most 5.
    pub alternatives: Vec<Alternative>,
    /// Competing explanations of the same signature, and what tells them apart.
    pub hypotheses: Vec<Hypothesis>,
    /// The incident as a whole.
    pub incident: IncidentInfo,
    /// Lines of processes beyond the job's source cap, or null when every process was tracked.
    pub sources_over_cap: Option<SourcesOverCap>,
    /// The clock-skew estimate the ordering used.
    pub clock: ClockInfo,
    /// With a healthy baseline (`analyze --baseline`): the first line of the initiating process
    /// the healthy run never printed, or null when there is none. Absent without a baseline.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_diff: Option<Option<BaselineDiff>>,
    /// Set (true) by the daemon when it cut the diagnosis to fit the output topic's record
    /// size: strings and lists are shortened, and at the tightest level only `schema`, `id`,
    /// `job`, `status`, `signature` and `confidence` are kept. Absent otherwise.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A catalog signature by id and title.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SignatureRef {
    /// The signature's id in the catalog.
    pub id: String,
    /// Its one-line title.
    pub title: String,
}

/// What the catalog says about the root-cause line.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SignatureInfo {
    /// The signature's id, or `unclassified`.
    pub id: String,
    /// Its one-line title.
    pub title: String,
    /// `nccl`, `cuda`, `torch`, `kernel`, ... (`unknown` when unclassified).
    pub subsystem: String,
    pub role: Role,
    /// `info`, `warning`, `error` or `critical`.
    pub severity: String,
}

/// What a signature's line is to a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Cause,
    Symptom,
    Context,
}

/// The initiating process (rank, host, GPU, pid) and the line that shows the root cause.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RootCause {
    /// The global rank, when known.
    pub rank: Option<u32>,
    /// The host, when known.
    pub host: Option<String>,
    /// The CUDA device (the line's own when it names one, else its process's).
    pub device: Option<u16>,
    /// The pid of (one of) its processes, when known.
    pub pid: Option<u32>,
    /// The time the line printed (ISO 8601, milliseconds), when it printed one.
    pub ts: Option<String>,
    /// The root-cause line; null when the candidate has no line.
    pub line: Option<String>,
    /// `file:line` it came from (a process's origin for a line from its ring buffer).
    pub origin: Option<String>,
    /// The line with its continuation lines (a multi-line record, a stack's frames).
    pub record: Vec<String>,
    /// Present when the root cause has a line.
    #[serde(flatten)]
    pub located: Option<Located>,
    /// For an unclassified line: its message with numbers and ids masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    /// When another process printed the line (a peer naming this one, a launcher).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_by: Option<ReportedBy>,
}

/// The parts of a root cause that only a located line has.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Located {
    /// `ts` corrected for the host's clock skew.
    pub ts_corrected: Option<String>,
    /// The line printed its own time (not carried from an earlier line).
    pub ts_exact: bool,
    /// The fields the signature extracted from the line.
    pub fields: BTreeMap<String, String>,
}

/// The process that printed a root-cause line about another.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReportedBy {
    /// The printer's global rank, when known.
    pub rank: Option<u32>,
    /// The printer's host, when known.
    pub host: Option<String>,
}

/// The earliest warning-or-worse line of the incident, and the lines its process printed
/// before it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FirstWarning {
    /// The global rank of the process that printed it, when known.
    pub rank: Option<u32>,
    pub host: Option<String>,
    /// The CUDA device (the root cause's when the same process printed both).
    pub device: Option<u16>,
    pub pid: Option<u32>,
    /// The time it printed (ISO 8601), when it printed one.
    pub ts: Option<String>,
    /// `ts` corrected for the host's clock skew.
    pub ts_corrected: Option<String>,
    pub line: String,
    /// `file:line` it came from.
    pub origin: String,
    /// Its signature's id; null for an unclassified line.
    pub signature: Option<String>,
    pub preceding_lines: Vec<String>,
}

/// A candidate for the root cause and the evidence about it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Suspect {
    /// The global rank, when known.
    pub rank: Option<u32>,
    /// The host, when known.
    pub host: Option<String>,
    /// The pid of (one of) its processes, when known.
    pub pid: Option<u32>,
    /// The sum of its evidence's weights.
    pub score: i32,
    /// The signature of its line, when it has a classified one.
    pub signature: Option<String>,
    /// Its root line, when it has one.
    pub line: Option<String>,
    /// The evidence's explanations, in order.
    pub reasons: Vec<String>,
    pub evidence: Vec<Evidence>,
}

/// One rule's finding about a candidate.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Evidence {
    /// The rule that found it.
    pub rule: String,
    /// How much it counts (negative: against the candidate).
    pub weight: i32,
    /// The finding in words (empty when it needs none).
    pub why: String,
}

/// A candidate that lost, and why.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Alternative {
    #[serde(flatten)]
    pub suspect: Suspect,
    pub why_not: String,
}

/// Other ranks' lines of one signature (of one masked message, for unclassified lines).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Collateral {
    /// The signature's id, or `unclassified`.
    pub signature: String,
    /// The signature's title (`Unclassified error` when unclassified).
    pub title: String,
    /// The ranks, as ranges.
    pub ranks: String,
    /// How many ranks.
    pub rank_count: usize,
    /// How many lines.
    pub lines: usize,
    /// The root cause's signature lists this one as its consequence.
    pub explained_by_root_cause: bool,
    /// For unclassified lines: the masked message they share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

/// A configuration value on one host (or file) that is odd or differs from the rest of the job.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OddContext {
    /// The setting or observation (`iface`, `env:NCCL_IB_HCA`, `nccl_version`, ...).
    pub field: String,
    /// The host (or file, or process origin) it was seen on.
    pub host: Option<String>,
    /// The value seen there.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
    /// For a value that differs between hosts: what the rest of the job has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub others: Option<String>,
    /// For a value that differs between hosts: the failures name this host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub named_by_failures: Option<bool>,
    /// For a value that differs between hosts: the rest of the job agrees on one value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear: Option<bool>,
}

impl OddContext {
    /// A note about one value (not one compared between hosts).
    pub fn new(field: &str, host: Option<&str>, value: &str, problem: &str) -> OddContext {
        OddContext {
            field: field.to_string(),
            host: host.map(str::to_string),
            value: value.to_string(),
            problem: problem.to_string(),
            others: None,
            named_by_failures: None,
            clear: None,
        }
    }
}

/// What ranks stated at one collective where they disagree.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CollectiveTable {
    /// `mismatch`.
    pub kind: String,
    /// The process group (communicator) the collective ran on.
    pub group: String,
    /// The collective's sequence number (operation counter) in that group.
    pub seq: u64,
    /// One row per group of ranks that stated the same, the largest first.
    pub rows: Vec<CollectiveRow>,
}

/// A group of ranks that stated the same collective.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CollectiveRow {
    /// The ranks, as ranges.
    pub ranks: String,
    /// How many ranks.
    pub count: usize,
    /// The operation (`ALLREDUCE`, `AllGather`, ...).
    pub op: String,
    /// Elements in (the count an NCCL trace states), when stated.
    pub numel_in: Option<i64>,
    /// Elements out, when stated.
    pub numel_out: Option<i64>,
    /// The element type, when stated.
    pub dtype: Option<String>,
    /// The root rank of a rooted collective, when stated.
    pub root: Option<i64>,
    /// The statement in words.
    pub stated: String,
}

/// A competing explanation and what tells it apart.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Hypothesis {
    /// The other explanation.
    pub cause: String,
    /// What to look at to tell the two apart.
    pub separate_by: String,
}

/// The incident as a whole.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IncidentInfo {
    /// Its earliest line's time (ISO 8601), when lines print times.
    pub start: Option<String>,
    /// Lines that matched a warning-or-worse signature.
    pub hits: usize,
    /// Ranks with such lines.
    pub ranks_affected: usize,
    /// The largest communicator's size, or the ranks seen.
    pub world_size: u32,
}

/// Lines from processes beyond the job's source cap.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SourcesOverCap {
    /// Processes the job tracks (the cap).
    pub sources_tracked: usize,
    /// Lines that came from processes beyond it.
    pub lines: u64,
}

/// The clock-skew estimate.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ClockInfo {
    /// The root-cause host's estimated offset, when estimated.
    pub culprit_host_offset_ms: Option<i64>,
    /// How far apart two lines' corrected times may be and still be simultaneous.
    pub uncertainty_ms: i64,
    /// Hosts whose offset was estimated.
    pub hosts_estimated: usize,
    /// Synchronisation events (collectives all ranks entered together) the estimate used.
    pub sync_events: usize,
}

/// The first line of the initiating process that a healthy run never printed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BaselineDiff {
    /// The line.
    pub line: String,
    /// It is the root-cause line itself (not one before it).
    pub is_root_cause: bool,
}

/// What `rankwatch analyze --json` prints: the diagnoses and what was read.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Report {
    /// Always `rankwatch.report/1`.
    pub schema: ReportSchema,
    /// One per incident, in the order found.
    pub diagnoses: Vec<Diagnosis>,
    /// What was read.
    pub input: ReportInput,
}

/// What the report was made from.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReportInput {
    /// Files read (skipped ones not counted).
    pub files: usize,
    /// Bytes read.
    pub bytes: u64,
    /// Lines read.
    pub lines: u64,
    /// Lines cut at the maximum line length.
    pub truncated_lines: u64,
    /// `PATH: reason` of each input that could not be read.
    pub skipped: Vec<String>,
    /// `PATH: reason` of each input read only in part (a damaged gzip file).
    pub partially_read: Vec<String>,
    /// Wall time of the analysis.
    pub seconds: f64,
    pub flight_recorder: FlightRecorderInput,
}

/// The PyTorch Flight Recorder dumps read beside the logs.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FlightRecorderInput {
    /// Dumps read.
    pub dumps: usize,
    /// Lines the dumps were turned into.
    pub lines: u64,
    /// `PATH: reason` of each dump not read.
    pub skipped: Vec<String>,
    /// What reading the dumps noted.
    pub notes: Vec<String>,
    /// Per job: the findings the dumps gave.
    pub findings: BTreeMap<String, usize>,
}

/// The root schema of `T` (draft 2020-12, for what is written), with its id and title.
fn root_schema<T: JsonSchema>(file: &str, title: &str) -> schemars::Schema {
    let mut s = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>();
    s.insert(
        "$id".into(),
        format!("https://rankwatch.dev/schema/{file}").into(),
    );
    s.insert("title".into(), title.into());
    s
}

/// The JSON Schema of the diagnosis.
pub fn diagnosis_schema() -> schemars::Schema {
    root_schema::<Diagnosis>("diagnosis-1.schema.json", "rankwatch diagnosis")
}

/// The JSON Schema of the report.
pub fn report_schema() -> schemars::Schema {
    root_schema::<Report>("report-1.schema.json", "rankwatch report")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn schema_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../schema")
    }

    fn pretty(s: &schemars::Schema) -> String {
        serde_json::to_string_pretty(s).expect("a schema serialises") + "\n"
    }

    /// The checked-in schemas are the structs' own. After changing a struct, regenerate them:
    /// `RANKWATCH_UPDATE_SCHEMA=1 cargo test -p rankwatch-core checked_in_schemas`.
    #[test]
    fn checked_in_schemas_match_the_structs() {
        let update = std::env::var_os("RANKWATCH_UPDATE_SCHEMA").is_some();
        let mut stale = Vec::new();
        for (name, schema) in [
            ("diagnosis-1.schema.json", diagnosis_schema()),
            ("report-1.schema.json", report_schema()),
        ] {
            let path = schema_dir().join(name);
            let want = pretty(&schema);
            if update {
                std::fs::create_dir_all(schema_dir()).unwrap();
                std::fs::write(&path, &want).unwrap();
                continue;
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            if have != want {
                stale.push(name);
            }
        }
        assert!(
            stale.is_empty(),
            "schema/{stale:?} differ from the structs in report.rs; regenerate with \
             RANKWATCH_UPDATE_SCHEMA=1 cargo test -p rankwatch-core checked_in_schemas"
        );
    }
}
