//! Differential check of the Hyperscan library against the `regex` crate on the catalog's own
//! patterns (see `rankwatch_core::differential`): every distinct message of the given log
//! folders, and the same messages stretched, scanned by both; every pattern they disagree on
//! is listed with an example.
//!
//! `cargo run --release -p rankwatch-core --example hs_differential -- CATALOG_DIR LOG_DIR...`
use rankwatch_core::differential::{compare, stretched};
use std::collections::BTreeSet;
use std::path::Path;

mod catalog_dir;
mod common;
use catalog_dir::load_catalog;
use common::{files, peeled_messages};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let catalog = load_catalog(&args[1]);
    let mut logs = Vec::new();
    for dir in &args[2..] {
        files(Path::new(dir), &mut logs);
    }
    let data: Vec<String> = logs
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect();
    let lines: Vec<&str> = data
        .iter()
        .flat_map(|d| d.split('\n'))
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let peeled: BTreeSet<&str> = peeled_messages(&lines).into_iter().collect();
    let mut messages: BTreeSet<String> = peeled.iter().map(|m| m.to_string()).collect();
    for times in [2, 4, 8] {
        messages.extend(peeled.iter().map(|m| stretched(m, times)));
    }
    let found = compare(&catalog, messages.iter().map(String::as_str));
    println!(
        "{} messages (with stretched copies), {} patterns disagree",
        messages.len(),
        found.len()
    );
    for d in &found {
        println!(
            "{}\t{}\tmissed {}\textra {}\n    {}",
            d.signature, d.pattern, d.missed, d.extra, d.example
        );
    }
}
