//! Profiling aid: feeds every file under a folder to the engine and, separately, scans the
//! same lines with the catalog's Hyperscan database alone; prints both times (CPU time of the
//! thread where Linux reports it, so that a loaded machine's waits are left out).
//!
//! `cargo run --release -p rankwatch-core --example feed_profile -- CATALOG_DIR LOG_DIR [ROUNDS]`
//!
//! Each phase is its own non-inlined function so that `valgrind --tool=callgrind` attributes
//! instructions to it: `engine_feed` (the engine's line stages), `engine_finish` (correlation
//! and diagnoses once every line is in), `hyperscan_lines` (Hyperscan
//! alone on whole lines, the ceiling), `hyperscan_messages` (Hyperscan on the messages left
//! after peeling) and `peel_lines` (prefix peeling alone). Set `RANKWATCH_CACHE_DIR` to a
//! folder to take the compiled database from the cache instead of compiling it.
use rankwatch_core::dbcache::DbCache;
use rankwatch_core::prefix::peel;
use rankwatch_core::{Catalog, Config, Engine, StreamHints};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

mod common;
use common::{files, peeled_messages};

#[inline(never)]
fn engine_feed(catalog: &Arc<Catalog>, data: &[(String, Vec<u8>)]) -> Engine {
    let mut engine = Engine::new(catalog.clone(), Config::default());
    for (name, bytes) in data {
        let hints = StreamHints {
            source_key: Some(name.clone()),
            ..Default::default()
        };
        let s = engine.open_stream("bench", name, hints);
        engine.feed(s, bytes, None);
        engine.close_stream(s);
    }
    engine
}

/// Correlation and rendering once every line is in.
#[inline(never)]
fn engine_finish(engine: &mut Engine) -> usize {
    engine.finish().len()
}

#[inline(never)]
fn hyperscan_lines(catalog: &Catalog, data: &[(String, Vec<u8>)]) -> u64 {
    let m = catalog.matcher();
    let mut scratch = m.scratch();
    let mut n = 0u64;
    for (_, bytes) in data {
        for line in bytes.split(|b| *b == b'\n') {
            if !line.is_empty() {
                n += m.count_matches(line, &mut scratch);
            }
        }
    }
    n
}

#[inline(never)]
fn hyperscan_messages(catalog: &Catalog, messages: &[&str]) -> u64 {
    let m = catalog.matcher();
    let mut scratch = m.scratch();
    messages
        .iter()
        .map(|msg| m.count_matches(msg.as_bytes(), &mut scratch))
        .sum()
}

#[inline(never)]
fn peel_lines(lines: &[&str]) -> usize {
    lines.iter().map(|l| peel(l, 2026).msg_start).sum()
}

/// Seconds this thread has run on a CPU (Linux `schedstat`), so that time the scheduler gave
/// other processes on a loaded machine is not counted; wall time where that is unavailable.
fn cpu_seconds(wall: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or_else(|| wall.elapsed().as_secs_f64(), |ns| ns as f64 / 1e9)
}

/// Runs `f` and returns its result with the CPU seconds it took.
fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let origin = Instant::now();
    let t0 = cpu_seconds(origin);
    let out = f();
    (out, cpu_seconds(origin) - t0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut sources = Vec::new();
    let mut cat_files = Vec::new();
    files(Path::new(&args[1]), &mut cat_files);
    for f in cat_files
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
    {
        sources.push((f.display().to_string(), std::fs::read_to_string(f).unwrap()));
    }
    let cache = std::env::var("RANKWATCH_CACHE_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .map(DbCache::at);
    let catalog = Arc::new(Catalog::from_sources_cached(&sources, cache.as_ref()).unwrap());
    let mut logs = Vec::new();
    files(Path::new(&args[2]), &mut logs);
    let data: Vec<(String, Vec<u8>)> = logs
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
        .collect();
    let lines: Vec<&str> = data
        .iter()
        .flat_map(|(_, b)| std::str::from_utf8(b).unwrap().split('\n'))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let messages = peeled_messages(&lines);
    let rounds: usize = args.get(3).map_or(5, |s| s.parse().unwrap());
    for _ in 0..rounds {
        let (mut engine, feed) = timed(|| engine_feed(&catalog, &data));
        let fed = engine.stats.lines;
        let (diagnoses, finish) = timed(|| engine_finish(&mut engine));
        let (n, hs) = timed(|| hyperscan_lines(&catalog, &data));
        let (nm, hs_msg) = timed(|| hyperscan_messages(&catalog, &messages));
        let (peeled, peel_s) = timed(|| peel_lines(&lines));
        println!(
            "{fed} lines: feed {feed:.3}s  finish {finish:.3}s ({diagnoses} diagnoses)  hyperscan {hs:.3}s ({n} matches)  ratio {:.0}%  \
             hyperscan on messages {hs_msg:.3}s ({nm})  peel {peel_s:.3}s ({peeled})",
            hs / feed * 100.0
        );
    }
}
