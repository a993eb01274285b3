//! Kafka record decoding: the value formats log shippers write (canonical JSON, Fluent Bit,
//! Vector, docker json-file, CRI lines, plain text), with configurable field paths and the job
//! taken from a field, the key or a header. See shared/reference/log-formats.md §1.

use crate::jsonfields::{FieldPaths, Scalar};
use crate::timefmt::iso_datetime;
use serde::Deserialize;
use serde_json::{Number, Value};
use std::borrow::Cow;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Canonical,
    FluentBit,
    Vector,
    Docker,
    Cri,
    Text,
    Json,
}

/// How to read one input topic. Paths are lists of object keys (label names contain dots and
/// slashes, so no string syntax is safe).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecoderConfig {
    pub format: Format,
    #[serde(default)]
    pub job_path: Option<Vec<String>>,
    #[serde(default)]
    pub rank_path: Option<Vec<String>>,
    #[serde(default)]
    pub host_path: Option<Vec<String>>,
    #[serde(default)]
    pub ts_path: Option<Vec<String>>,
    #[serde(default)]
    pub line_path: Option<Vec<String>>,
    #[serde(default)]
    pub source_path: Option<Vec<String>>,
    /// Header that carries the job when the value does not.
    #[serde(default = "default_job_header")]
    pub job_header: String,
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// How the record key names the job: whole (`job`, the default: job names such as
    /// `sweep/2` or the Slurm array job `1234/7` stay intact) or `job/rank`.
    #[serde(default)]
    pub key_format: KeyFormat,
    /// The lines of one source arrive in the order they were written (a topic keyed by job,
    /// a file). `false` for records spread over partitions and merged again (the repartition
    /// stage's topic): a line that prints no time is then placed by its record's time.
    #[serde(default = "in_order_default")]
    pub in_order: bool,
}

fn in_order_default() -> bool {
    true
}

/// How a record key maps to job and rank. A key only carries a rank when the topic says so:
/// a job name may itself end in `/<number>`, and guessing would merge distinct jobs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub enum KeyFormat {
    /// The whole key is the job name.
    #[default]
    #[serde(rename = "job")]
    Job,
    /// `job/rank`: the part after the last `/` is the rank when it is a number.
    #[serde(rename = "job/rank")]
    JobRank,
}

fn default_job_header() -> String {
    "job".into()
}
fn default_max_record_bytes() -> usize {
    1 << 20
}

fn p(parts: &[&str]) -> Option<Vec<String>> {
    Some(parts.iter().map(|s| s.to_string()).collect())
}

impl DecoderConfig {
    pub fn preset(format: Format) -> DecoderConfig {
        let mut c = DecoderConfig {
            format,
            job_path: None,
            rank_path: None,
            host_path: None,
            ts_path: None,
            line_path: None,
            source_path: None,
            job_header: default_job_header(),
            max_record_bytes: default_max_record_bytes(),
            key_format: KeyFormat::Job,
            in_order: true,
        };
        c.fill_defaults();
        c
    }

    /// Paths left unset take the preset of the format.
    pub fn fill_defaults(&mut self) {
        let (job, rank, host, ts, line, source) = match self.format {
            // `source` (optional) names the producing stream, e.g. the file `replay` read;
            // without it a record's stream is its rank, then its host.
            Format::Canonical | Format::Json => (
                p(&["job"]),
                p(&["rank"]),
                p(&["host"]),
                p(&["ts"]),
                p(&["line"]),
                p(&["source"]),
            ),
            Format::FluentBit => (
                p(&["kubernetes", "labels", "training.kubeflow.org/job-name"]),
                None,
                p(&["kubernetes", "host"]),
                p(&["@timestamp"]),
                p(&["log"]),
                p(&["kubernetes", "pod_name"]),
            ),
            Format::Vector => (
                p(&["kubernetes", "pod_labels", "training.kubeflow.org/job-name"]),
                None,
                p(&["kubernetes", "pod_node_name"]),
                p(&["timestamp"]),
                p(&["message"]),
                p(&["kubernetes", "pod_name"]),
            ),
            Format::Docker => (None, None, None, p(&["time"]), p(&["log"]), None),
            Format::Cri | Format::Text => (None, None, None, None, None, None),
        };
        self.job_path = self.job_path.take().or(job);
        self.rank_path = self.rank_path.take().or(rank);
        self.host_path = self.host_path.take().or(host);
        self.ts_path = self.ts_path.take().or(ts);
        self.line_path = self.line_path.take().or(line);
        self.source_path = self.source_path.take().or(source);
    }
}

/// One decoded record; its strings borrow from the record where they can.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded<'a> {
    pub job: Cow<'a, str>,
    pub rank: Option<u32>,
    pub host: Option<Cow<'a, str>>,
    /// Identity of the producing stream within the job (pod, rank, host), for multi-line state.
    pub source: Cow<'a, str>,
    /// The record named its stream (a `source` or a rank): the stream is one producer's, as a
    /// per-rank file is. Otherwise `source` stands for all the job's (or its host's) lines,
    /// which may be many processes': the engine routes them by what each line says about its
    /// process, as it does a file whose name names no rank.
    pub source_named: bool,
    pub event_ms: Option<i64>,
    pub text: Cow<'a, str>,
    /// The text is a chunk that may end mid-line (docker/Fluent Bit keep the `\n`).
    pub chunked: bool,
}

fn split_key(key: Option<&[u8]>, format: KeyFormat) -> (Option<&str>, Option<u32>) {
    let Some(k) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
        return (None, None);
    };
    let k = k.trim();
    if k.is_empty() {
        return (None, None);
    }
    if format == KeyFormat::Job {
        return (Some(k), None);
    }
    if let Some((job, rank)) = k.rsplit_once('/') {
        if let Ok(r) = rank.parse::<u32>() {
            if !job.is_empty() {
                return (Some(job), Some(r));
            }
        }
    }
    (Some(k), None)
}

/// Why a record was rejected; the names are metric label values.
pub const REASONS: &[&str] = &[
    "oversized",
    "not_utf8",
    "bad_json",
    "not_an_object",
    "no_line",
    "no_job",
    "binary",
];

/// Decodes one record. `Err` carries a reason from [`REASONS`]. For many records of one
/// topic, build a [`RecordDecoder`] once.
pub fn decode<'a>(
    cfg: &DecoderConfig,
    value: &'a [u8],
    key: Option<&'a [u8]>,
    job_header: Option<&'a [u8]>,
) -> Result<Decoded<'a>, &'static str> {
    RecordDecoder::new(cfg).decode(value, key, job_header)
}

/// Output slots of [`FieldPaths`] for the configured paths.
const JOB: usize = 0;
const RANK: usize = 1;
const HOST: usize = 2;
const TS: usize = 3;
const LINE: usize = 4;
const SOURCE: usize = 5;
const SLOTS: usize = 6;

/// A topic's decoder with its field paths compiled.
#[derive(Debug)]
pub struct RecordDecoder<'c> {
    cfg: &'c DecoderConfig,
    paths: FieldPaths,
}

/// The key and header of a record, and what they say about the job.
struct Envelope<'a> {
    key_job: Option<&'a str>,
    key_rank: Option<u32>,
    header_job: Option<&'a str>,
}

impl<'c> RecordDecoder<'c> {
    /// See `DecoderConfig::in_order`.
    pub fn in_order(&self) -> bool {
        self.cfg.in_order
    }

    pub fn new(cfg: &'c DecoderConfig) -> RecordDecoder<'c> {
        let paths = [
            &cfg.job_path,
            &cfg.rank_path,
            &cfg.host_path,
            &cfg.ts_path,
            &cfg.line_path,
            &cfg.source_path,
        ]
        .map(|p| p.as_deref());
        RecordDecoder {
            cfg,
            paths: FieldPaths::new(&paths),
        }
    }

    /// Decodes one record. `Err` carries a reason from [`REASONS`].
    pub fn decode<'a>(
        &self,
        value: &'a [u8],
        key: Option<&'a [u8]>,
        job_header: Option<&'a [u8]>,
    ) -> Result<Decoded<'a>, &'static str> {
        let cfg = self.cfg;
        let env = envelope(cfg, value, key, job_header)?;
        match cfg.format {
            Format::Text | Format::Cri => text_record(value, env),
            _ => {
                // The whole value is checked for UTF-8 once (the parser does not check the
                // strings it skips); whatever fails is left to the full parse, which names
                // the reason. So is a value that is not an object: the fast path stops at its
                // first byte, and the rest may be bad JSON (a number out of range, say).
                let Ok(text) = std::str::from_utf8(value) else {
                    return decode_value(cfg, value, env);
                };
                let mut fields: [Scalar<'a>; SLOTS] = Default::default();
                match self.paths.extract(text, &mut fields) {
                    Ok(true) => json_record(cfg, fields, env),
                    Ok(false) | Err(_) => decode_value(cfg, value, env),
                }
            }
        }
    }
}

/// The key and header read, after the size check every format makes first.
fn envelope<'a>(
    cfg: &DecoderConfig,
    value: &[u8],
    key: Option<&'a [u8]>,
    job_header: Option<&'a [u8]>,
) -> Result<Envelope<'a>, &'static str> {
    if value.len() > cfg.max_record_bytes {
        return Err("oversized");
    }
    let (key_job, key_rank) = split_key(key, cfg.key_format);
    let header_job = job_header
        .and_then(|h| std::str::from_utf8(h).ok())
        .map(str::trim)
        .filter(|s| !s.is_empty());
    Ok(Envelope {
        key_job,
        key_rank,
        header_job,
    })
}

fn text_record<'a>(value: &'a [u8], env: Envelope<'a>) -> Result<Decoded<'a>, &'static str> {
    let text = std::str::from_utf8(value).map_err(|_| "not_utf8")?;
    let controls = text
        .bytes()
        .filter(|b| *b < 0x09 || (*b > 0x0d && *b < 0x20))
        .count();
    if controls * 10 > text.len() && !text.is_empty() {
        return Err("binary");
    }
    let job = env.header_job.or(env.key_job).ok_or("no_job")?;
    Ok(Decoded {
        job: Cow::Borrowed(job),
        rank: env.key_rank,
        host: None,
        source: rank_source(env.key_rank).unwrap_or(Cow::Borrowed("-")),
        source_named: env.key_rank.is_some(),
        event_ms: None,
        text: Cow::Borrowed(text),
        chunked: false,
    })
}

fn rank_source<'a>(rank: Option<u32>) -> Option<Cow<'a, str>> {
    rank.map(|r| Cow::Owned(format!("rank:{r}")))
}

fn scalar_text<'a>(v: &Scalar<'a>) -> Option<Cow<'a, str>> {
    let n = match v {
        Scalar::Str(s) => return Some(s.clone()),
        Scalar::U64(n) => Number::from(*n),
        Scalar::I64(n) => Number::from(*n),
        Scalar::F64(f) => Number::from_f64(*f)?,
        Scalar::Missing | Scalar::Other => return None,
    };
    Some(Cow::Owned(n.to_string()))
}

fn scalar_rank(v: &Scalar<'_>) -> Option<u32> {
    let r = match v {
        Scalar::U64(n) => *n,
        Scalar::Str(s) => s.parse::<u64>().ok()?,
        _ => return None,
    };
    u32::try_from(r).ok() // a rank past u32 is no rank, not rank 0
}

fn scalar_time_ms(v: &Scalar<'_>) -> Option<i64> {
    match v {
        Scalar::U64(n) => number_time_ms(*n as f64),
        Scalar::I64(n) => number_time_ms(*n as f64),
        Scalar::F64(f) => number_time_ms(*f),
        Scalar::Str(s) => iso_datetime(s.as_bytes()).map(|(t, _)| t),
        Scalar::Missing | Scalar::Other => None,
    }
}

fn number_time_ms(f: f64) -> Option<i64> {
    if !f.is_finite() || f <= 0.0 {
        return None;
    }
    // Seconds (Fluent Bit's epoch double) or milliseconds.
    Some(if f < 1e11 {
        (f * 1000.0) as i64
    } else {
        f as i64
    })
}

fn json_record<'a>(
    cfg: &DecoderConfig,
    mut fields: [Scalar<'a>; SLOTS],
    env: Envelope<'a>,
) -> Result<Decoded<'a>, &'static str> {
    let text = match std::mem::take(&mut fields[LINE]) {
        Scalar::Str(s) => s,
        _ => return Err("no_line"),
    };
    let job = scalar_text(&fields[JOB])
        .filter(|s| !s.is_empty())
        .or(env.header_job.map(Cow::Borrowed))
        .or(env.key_job.map(Cow::Borrowed))
        .ok_or("no_job")?;
    let rank = scalar_rank(&fields[RANK]).or(env.key_rank);
    let host = scalar_text(&fields[HOST]);
    let named = scalar_text(&fields[SOURCE]).or_else(|| rank_source(rank));
    let source_named = named.is_some();
    let source = named.or_else(|| host.clone()).unwrap_or(Cow::Borrowed("-"));
    Ok(Decoded {
        job,
        rank,
        host,
        source,
        source_named,
        event_ms: scalar_time_ms(&fields[TS]),
        text,
        chunked: matches!(cfg.format, Format::Docker | Format::FluentBit),
    })
}

// --- the reference decoder: the record parsed whole into a `serde_json::Value` ------------
//
// It names the reason of every value the fast path cannot read (its errors differ with where
// the parse stopped), and the tests hold the fast path to its results.

fn lookup<'v>(v: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = v;
    for k in path {
        cur = cur.as_object()?.get(k)?;
    }
    Some(cur)
}

fn value_scalar(v: Option<&Value>) -> Scalar<'static> {
    match v {
        None => Scalar::Missing,
        Some(Value::String(s)) => Scalar::Str(Cow::Owned(s.clone())),
        Some(Value::Number(n)) => {
            if let Some(u) = n.as_u64() {
                Scalar::U64(u)
            } else if let Some(i) = n.as_i64() {
                Scalar::I64(i)
            } else {
                n.as_f64().map_or(Scalar::Other, Scalar::F64)
            }
        }
        Some(_) => Scalar::Other,
    }
}

fn decode_value<'a>(
    cfg: &DecoderConfig,
    value: &'a [u8],
    env: Envelope<'a>,
) -> Result<Decoded<'a>, &'static str> {
    let v: Value = serde_json::from_slice(value).map_err(|e| {
        if e.is_syntax() && std::str::from_utf8(value).is_err() {
            "not_utf8"
        } else {
            "bad_json"
        }
    })?;
    if !v.is_object() {
        return Err("not_an_object");
    }
    let get = |p: &Option<Vec<String>>| value_scalar(p.as_deref().and_then(|p| lookup(&v, p)));
    let fields = [
        get(&cfg.job_path),
        get(&cfg.rank_path),
        get(&cfg.host_path),
        get(&cfg.ts_path),
        get(&cfg.line_path),
        get(&cfg.source_path),
    ];
    json_record(cfg, fields, env)
}

/// [`decode`] through the reference path only (for tests that compare the two).
#[doc(hidden)]
pub fn decode_reference<'a>(
    cfg: &DecoderConfig,
    value: &'a [u8],
    key: Option<&'a [u8]>,
    job_header: Option<&'a [u8]>,
) -> Result<Decoded<'a>, &'static str> {
    let env = envelope(cfg, value, key, job_header)?;
    match cfg.format {
        Format::Text | Format::Cri => text_record(value, env),
        _ => decode_value(cfg, value, env),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_record() {
        let c = DecoderConfig::preset(Format::Canonical);
        let d = decode(
            &c,
            br#"{"job":"llm","rank":13,"host":"node-07","ts":"2026-03-14T09:22:05.412Z","line":"x"}"#,
            Some(b"llm"),
            None,
        )
        .unwrap();
        assert_eq!(d.job, "llm");
        assert_eq!(d.rank, Some(13));
        assert_eq!(d.source, "rank:13");
        assert_eq!(d.event_ms.map(|t| t % 1000), Some(412));
    }

    #[test]
    fn a_record_names_its_source_by_a_source_or_a_rank_only() {
        let c = DecoderConfig::preset(Format::Canonical);
        let named = |v: &[u8]| decode(&c, v, None, None).unwrap().source_named;
        assert!(named(br#"{"job":"j","source":"node-1.log","line":"x"}"#));
        assert!(named(br#"{"job":"j","rank":3,"line":"x"}"#));
        // The host's or the job's lines together: perhaps many processes'.
        assert!(!named(br#"{"job":"j","host":"node-1","line":"x"}"#));
        assert!(!named(br#"{"job":"j","line":"x"}"#));
        let mut t = DecoderConfig::preset(Format::Text);
        assert!(
            !decode(&t, b"x", Some(b"sweep/4"), None)
                .unwrap()
                .source_named
        );
        t.key_format = KeyFormat::JobRank;
        assert!(decode(&t, b"x", Some(b"job/4"), None).unwrap().source_named);
    }

    #[test]
    fn fluent_bit_and_vector_records() {
        let fb = DecoderConfig::preset(Format::FluentBit);
        let d = decode(&fb, br#"{"@timestamp":1773479525.412234,"log":"[rank13]: Traceback (most recent call last):\n","stream":"stderr","kubernetes":{"pod_name":"llm7b-worker-13","host":"node-07","labels":{"training.kubeflow.org/job-name":"llm7b"}}}"#, None, None).unwrap();
        assert_eq!(d.job, "llm7b");
        assert_eq!(d.host.as_deref(), Some("node-07"));
        assert_eq!(d.source, "llm7b-worker-13");
        assert!(d.chunked);
        assert_eq!(d.event_ms, Some(1773479525412));
        let ve = DecoderConfig::preset(Format::Vector);
        let d = decode(&ve, br#"{"message":"m","timestamp":"2026-03-14T09:12:45.003118020Z","kubernetes":{"pod_name":"p","pod_node_name":"node-07","pod_labels":{"training.kubeflow.org/job-name":"llm7b"}}}"#, None, None).unwrap();
        assert_eq!((d.job.as_ref(), d.text.as_ref()), ("llm7b", "m"));
    }

    #[test]
    fn job_from_key_or_header_and_rejections() {
        let mut t = DecoderConfig::preset(Format::Text);
        let d = decode(&t, b"hello", Some(b"1234/7"), None).unwrap();
        assert_eq!((d.job.as_ref(), d.rank), ("1234/7", None));
        t.key_format = KeyFormat::JobRank;
        let d = decode(&t, b"hello", Some(b"jobA/7"), None).unwrap();
        assert_eq!((d.job.as_ref(), d.rank), ("jobA", Some(7)));
        let d = decode(&t, b"hello", Some(b"sweep/b"), None).unwrap();
        assert_eq!((d.job.as_ref(), d.rank), ("sweep/b", None));
        let d = decode(&t, b"hello", None, Some(b"jobB")).unwrap();
        assert_eq!(d.job, "jobB");
        assert_eq!(decode(&t, b"hello", None, None), Err("no_job"));
        assert_eq!(decode(&t, b"\xff\xfe", Some(b"j"), None), Err("not_utf8"));
        assert_eq!(
            decode(&t, b"\x00\x01\x02\x03\x04", Some(b"j"), None),
            Err("binary")
        );
        let c = DecoderConfig::preset(Format::Canonical);
        assert_eq!(decode(&c, b"{nope", Some(b"j"), None), Err("bad_json"));
        assert_eq!(decode(&c, b"[1]", Some(b"j"), None), Err("not_an_object"));
        // not an object, and not JSON either: a number beyond f64's range
        assert_eq!(decode(&c, b"[1E400]", Some(b"j"), None), Err("bad_json"));
        let big = br#"{"job":"j","line":"x","z":1E400}"#;
        assert_eq!(decode(&c, big, None, None).map(|d| d.text), Ok("x".into()));
        assert_eq!(decode(&c, br#"{"job":"j"}"#, None, None), Err("no_line"));
        let mut small = c.clone();
        small.max_record_bytes = 4;
        assert_eq!(
            decode(&small, b"{\"line\":1}", None, None),
            Err("oversized")
        );
    }
}
