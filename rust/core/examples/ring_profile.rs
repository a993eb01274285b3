//! Profiling aid: pushes every line under a folder into one ring per (file, torchrun local
//! rank), in file order, as the apply stage does for per-node logs, and prints the CPU time
//! and the rings' heap. `cargo run --release -p rankwatch-core --example ring_profile -- LOG_DIR [ROUNDS]`
use rankwatch_core::ring::Ring;
use std::path::Path;
use std::time::Instant;

// Shared with the other profiling examples; this one needs only `files`.
#[allow(dead_code)]
mod common;
use common::files;

/// The `N` of a leading `[defaultN]:`, else 0.
fn local_rank(line: &str) -> usize {
    line.strip_prefix("[default")
        .and_then(|r| r.split_once("]:"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0)
}

#[inline(never)]
fn push_all(data: &[String]) -> (usize, usize) {
    let mut rings: Vec<Ring> = Vec::new();
    for (fi, text) in data.iter().enumerate() {
        for (seq, line) in text.split('\n').filter(|l| !l.is_empty()).enumerate() {
            let i = fi * 8 + local_rank(line).min(7);
            if rings.len() <= i {
                rings.resize_with(i + 1, Ring::default);
            }
            rings[i].push(seq as u64, Some(seq as i64), false, line, 256, 64 * 1024);
        }
    }
    let heap = rings.iter().map(Ring::heap_bytes).sum();
    (rings.len(), heap)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(2).map_or(3, |r| r.parse().unwrap());
    let mut paths = Vec::new();
    files(Path::new(&args[1]), &mut paths);
    let data: Vec<String> = paths
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect();
    for _ in 0..rounds {
        let t = Instant::now();
        let (rings, heap) = push_all(&data);
        println!(
            "{rings} rings, {:.1} MB heap, {:.3} s",
            heap as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
    }
}
