//! Kafka record decoding: the value formats log shippers write (canonical JSON, Fluent Bit,
//! Vector, docker json-file, CRI lines, plain text), with configurable field paths and the job
//! taken from a field, the key or a header. See shared/reference/log-formats.md §1.

use crate::timefmt::iso_datetime;
use serde::Deserialize;
use serde_json::Value;

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

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub job: String,
    pub rank: Option<u32>,
    pub host: Option<String>,
    /// Identity of the producing stream within the job (pod, rank, host), for multi-line state.
    pub source: String,
    pub event_ms: Option<i64>,
    pub text: String,
    /// The text is a chunk that may end mid-line (docker/Fluent Bit keep the `\n`).
    pub chunked: bool,
}

fn lookup<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for k in path {
        cur = cur.as_object()?.get(k)?;
    }
    Some(cur)
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn as_time_ms(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => {
            let f = n.as_f64()?;
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
        Value::String(s) => iso_datetime(s.as_bytes()).map(|(t, _)| t),
        _ => None,
    }
}

fn split_key(key: Option<&[u8]>, format: KeyFormat) -> (Option<String>, Option<u32>) {
    let Some(k) = key.and_then(|k| std::str::from_utf8(k).ok()) else {
        return (None, None);
    };
    let k = k.trim();
    if k.is_empty() {
        return (None, None);
    }
    if format == KeyFormat::Job {
        return (Some(k.to_string()), None);
    }
    if let Some((job, rank)) = k.rsplit_once('/') {
        if let Ok(r) = rank.parse::<u32>() {
            if !job.is_empty() {
                return (Some(job.to_string()), Some(r));
            }
        }
    }
    (Some(k.to_string()), None)
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

/// Decodes one record. `Err` carries a reason from [`REASONS`].
pub fn decode(
    cfg: &DecoderConfig,
    value: &[u8],
    key: Option<&[u8]>,
    job_header: Option<&[u8]>,
) -> Result<Decoded, &'static str> {
    if value.len() > cfg.max_record_bytes {
        return Err("oversized");
    }
    let (key_job, key_rank) = split_key(key, cfg.key_format);
    let header_job = job_header
        .and_then(|h| std::str::from_utf8(h).ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let text_value = || -> Result<String, &'static str> {
        let s = std::str::from_utf8(value).map_err(|_| "not_utf8")?;
        if s.bytes()
            .filter(|b| *b < 0x09 || (*b > 0x0d && *b < 0x20))
            .count()
            * 10
            > s.len()
            && !s.is_empty()
        {
            return Err("binary");
        }
        Ok(s.to_string())
    };
    match cfg.format {
        Format::Text | Format::Cri => {
            let text = text_value()?;
            let job = header_job.or(key_job).ok_or("no_job")?;
            let source = key_rank.map_or_else(|| "-".to_string(), |r| format!("rank:{r}"));
            Ok(Decoded {
                job,
                rank: key_rank,
                host: None,
                source,
                event_ms: None,
                text,
                chunked: false,
            })
        }
        _ => {
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
            let get = |p: &Option<Vec<String>>| p.as_deref().and_then(|p| lookup(&v, p));
            let text = get(&cfg.line_path)
                .and_then(Value::as_str)
                .ok_or("no_line")?
                .to_string();
            let job = get(&cfg.job_path)
                .and_then(as_text)
                .filter(|s| !s.is_empty())
                .or(header_job)
                .or(key_job)
                .ok_or("no_job")?;
            let rank = get(&cfg.rank_path)
                .and_then(|r| r.as_u64().or_else(|| r.as_str()?.parse().ok()))
                .and_then(|r| u32::try_from(r).ok()) // a rank past u32 is no rank, not rank 0
                .or(key_rank);
            let host = get(&cfg.host_path).and_then(as_text);
            let source = get(&cfg.source_path)
                .and_then(as_text)
                .or_else(|| rank.map(|r| format!("rank:{r}")))
                .or_else(|| host.clone())
                .unwrap_or_else(|| "-".into());
            let event_ms = get(&cfg.ts_path).and_then(as_time_ms);
            let chunked = matches!(cfg.format, Format::Docker | Format::FluentBit);
            Ok(Decoded {
                job,
                rank,
                host,
                source,
                event_ms,
                text,
                chunked,
            })
        }
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
        assert_eq!((d.job.as_str(), d.text.as_str()), ("llm7b", "m"));
    }

    #[test]
    fn job_from_key_or_header_and_rejections() {
        let mut t = DecoderConfig::preset(Format::Text);
        let d = decode(&t, b"hello", Some(b"1234/7"), None).unwrap();
        assert_eq!((d.job.as_str(), d.rank), ("1234/7", None));
        t.key_format = KeyFormat::JobRank;
        let d = decode(&t, b"hello", Some(b"jobA/7"), None).unwrap();
        assert_eq!((d.job.as_str(), d.rank), ("jobA", Some(7)));
        let d = decode(&t, b"hello", Some(b"sweep/b"), None).unwrap();
        assert_eq!((d.job.as_str(), d.rank), ("sweep/b", None));
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
        assert_eq!(decode(&c, br#"{"job":"j"}"#, None, None), Err("no_line"));
        let mut small = c.clone();
        small.max_record_bytes = 4;
        assert_eq!(
            decode(&small, b"{\"line\":1}", None, None),
            Err("oversized")
        );
    }
}
