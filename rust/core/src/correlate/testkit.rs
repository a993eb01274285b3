//! Test helpers: the engine with the shipped catalog, fed one invented log.

use crate::{Catalog, Config, Diagnosis, Engine, StreamHints};
use std::sync::Arc;

/// The shipped catalog, as the engine loads it.
pub fn shipped_catalog() -> Catalog {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/rankwatch/catalog");
    let mut sources: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            )
        })
        .collect();
    sources.sort();
    Catalog::from_sources(&sources).unwrap()
}

/// Diagnoses of `text` fed as one file of one job, at the end of input (as `analyze` does).
pub fn diagnose(text: &str) -> Vec<Diagnosis> {
    let mut e = Engine::new(Arc::new(shipped_catalog()), Config::default());
    let id = e.open_stream("j", "node.log", StreamHints::default());
    e.feed(id, text.as_bytes(), Some(1_000));
    e.finish()
}

/// Diagnoses of `text` fed without an ingest time, as `analyze` feeds files: lines that print
/// no time of their own have none until a timed line comes.
pub fn diagnose_untimed(text: &str) -> Vec<Diagnosis> {
    let mut e = Engine::new(Arc::new(shipped_catalog()), Config::default());
    let id = e.open_stream("j", "node.log", StreamHints::default());
    e.feed(id, text.as_bytes(), None);
    e.finish()
}

/// The root-cause line of the first diagnosis.
pub fn root_line(d: &[Diagnosis]) -> String {
    d[0].json["root_cause"]["line"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Asserts that the first diagnosis roots at `line` with the finding `id`, whose cause text
/// holds `cause_has`.
pub fn assert_finding(d: &[Diagnosis], line: &str, id: &str, cause_has: &str) {
    assert_eq!(root_line(d), line);
    let j = &d[0].json;
    assert_eq!(j["cause_signature"]["id"], id);
    let cause = j["cause"].as_str().unwrap();
    assert!(cause.contains(cause_has), "{cause}");
}

/// Diagnoses of several files of one job (name, text), fed in order, at the end of input.
pub fn diagnose_files(files: &[(&str, &str)]) -> Vec<Diagnosis> {
    let mut e = Engine::new(Arc::new(shipped_catalog()), Config::default());
    for (name, text) in files {
        let id = e.open_stream("j", name, StreamHints::default());
        e.feed(id, text.as_bytes(), None);
    }
    e.finish()
}

/// One record of `diagnose_records`: its source (a file or process), its line, the time it
/// carries (`ts`, a shipper's or aggregator's clock) and the broker's time.
pub type TestRecord<'a> = (&'a str, &'a str, Option<i64>, i64);

/// An engine fed `records` of job `j` in the canonical format, in this order, as the daemon
/// feeds a partition.
pub fn engine_with_records(records: &[TestRecord<'_>]) -> Engine {
    let mut e = Engine::new(Arc::new(shipped_catalog()), Config::default());
    feed_records(&mut e, records);
    e
}

/// Feeds `records` of job `j` to `e` as one batch of a partition (see `engine_with_records`).
pub fn feed_records(e: &mut Engine, records: &[TestRecord<'_>]) {
    let values: Vec<Vec<u8>> = records
        .iter()
        .map(|(source, line, ts, _)| {
            serde_json::json!({"job": "j", "source": source, "ts": ts, "line": line})
                .to_string()
                .into_bytes()
        })
        .collect();
    let raw: Vec<crate::engine::RawRecord<'_>> = values
        .iter()
        .zip(records)
        .map(|(v, r)| (v.as_slice(), None, None, Some(r.3)))
        .collect();
    let cfg = crate::records::DecoderConfig::preset(crate::records::Format::Canonical);
    assert!(e.feed_records(&cfg, "logs/0", &raw).is_empty());
}

/// Diagnoses of `records` at the end of input.
pub fn diagnose_records(records: &[TestRecord<'_>]) -> Vec<Diagnosis> {
    engine_with_records(records).finish()
}

/// Asserts that the first diagnosis does not rest on the finding (or signature) `id`.
pub fn assert_not_finding(d: &[Diagnosis], id: &str) {
    assert_ne!(d[0].json["cause_signature"]["id"], id);
}
