//! The shipped catalog's patterns scan alike in the linked Hyperscan library and in the
//! `regex` crate, on every documented example (tests/data/catalog_examples.toml) and on the
//! same examples stretched to long lines, where Vectorscan 5.4.9 is known to miss matches of
//! some shapes (see `rankwatch_core::differential`).
use rankwatch_core::differential::{compare, stretched};
use rankwatch_core::Catalog;
use std::path::Path;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

fn shipped_catalog() -> Catalog {
    let dir = repo().join("python/rankwatch/catalog");
    let mut sources: Vec<(String, String)> = std::fs::read_dir(&dir)
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

fn example_texts() -> Vec<String> {
    let path = repo().join("tests/data/catalog_examples.toml");
    let doc: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
    doc["example"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.get("text")?.as_str().map(str::to_string))
        .collect()
}

#[test]
fn shipped_patterns_scan_alike_on_long_and_short_examples() {
    let texts = example_texts();
    assert!(texts.len() > 100, "examples file read: {}", texts.len());
    let mut messages = texts.clone();
    for times in [2, 4, 8] {
        messages.extend(texts.iter().map(|t| stretched(t, times)));
    }
    let found = compare(&shipped_catalog(), messages.iter().map(String::as_str));
    let listed: Vec<String> = found
        .iter()
        .map(|d| {
            format!(
                "{} {:?}: missed {} extra {} e.g. {:?}",
                d.signature, d.pattern, d.missed, d.extra, d.example
            )
        })
        .collect();
    assert!(
        listed.is_empty(),
        "patterns that scan differently:\n{}",
        listed.join("\n")
    );
}
