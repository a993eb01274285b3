//! Checking aid: peels every line of every file under the given folders twice, with `peel`
//! (fast path for the common NCCL header first) and with `peel_general` (every peeler in
//! turn), and reports any line where the two differ. Also counts how many lines the fast path
//! finished alone (its message starts where the general chain's does on a line it took).
//!
//! `cargo run --release -p rankwatch-core --example peel_compare -- DIR [DIR ...]`
//!
//! Exits 1 when a line differs. Gzip files and binary data are read as (lossy) text lines.
use rankwatch_core::prefix::{peel, peel_general};
use std::path::Path;

// Shares the file walk with the profiling examples; their peeled-message helper is unused here.
#[allow(dead_code)]
mod common;
use common::files;

fn main() {
    let mut lines = 0usize;
    let mut nccl = 0usize;
    let mut differ = 0usize;
    for dir in std::env::args().skip(1) {
        let mut paths = Vec::new();
        files(Path::new(&dir), &mut paths);
        for p in paths {
            let bytes = std::fs::read(&p).unwrap();
            for raw in String::from_utf8_lossy(&bytes).split('\n') {
                let line = raw.strip_suffix('\r').unwrap_or(raw);
                let (a, b) = (peel(line, 2026), peel_general(line, 2026));
                lines += 1;
                nccl += usize::from(a.producer == rankwatch_core::prefix::Producer::Nccl);
                if a != b {
                    differ += 1;
                    if differ <= 20 {
                        eprintln!(
                            "{}: {line:?}\n  fast    {a:?}\n  general {b:?}",
                            p.display()
                        );
                    }
                }
            }
        }
    }
    println!("{lines} lines ({nccl} with an NCCL header): {differ} differ");
    if differ > 0 {
        std::process::exit(1);
    }
}
