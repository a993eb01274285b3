//! Profiling aid for the catalog's Hyperscan database (an `hsbench`-like tool): which patterns
//! match the messages of a log folder, how often, and what each costs.
//!
//! `cargo run --release -p rankwatch-core --example hsdb_profile -- CATALOG_DIR LOG_DIR [REPEATS] [TOP] [MODE]`
//!
//! MODE `all` (the default) prints everything below; `messages` only the distinct messages
//! that cost the most in total; `sigs:FILE` the database without each signature of FILE.
//! For instruction counts on a loaded machine: `dump:DIR` writes the serialized database
//! without each catalog file (and `dump:DIR:FILE` without each signature of FILE) into DIR,
//! and `scan:DB_FILE` scans the messages once with such a database in `scan_messages`, for
//! `valgrind --tool=callgrind --toggle-collect='*scan_messages*'`.
//!
//! Prints, for the messages left after prefix peeling (what the engine scans):
//! - the whole database's scan time (minimum of REPEATS, thread CPU time) and matches;
//! - per catalog file, the time of the database without that file's patterns;
//! - per pattern, its matches on messages and the time of a database of that pattern alone
//!   (the TOP costliest), so that patterns without a good literal factor stand out.
use rankwatch_core::matcher::{Expression, Matcher, FLAG_CASELESS, FLAG_SINGLEMATCH};
use rankwatch_core::Catalog;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

mod catalog_dir;
mod common;
use catalog_dir::load_catalog;
use common::{files, peeled_messages};

/// Seconds this thread has run on a CPU (Linux `schedstat`); wall time where unavailable.
fn cpu_seconds(wall: Instant) -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or_else(|| wall.elapsed().as_secs_f64(), |ns| ns as f64 / 1e9)
}

/// One pattern of the catalog with what it is compiled with.
struct Pat {
    file: String,
    sig: String,
    pattern: String,
    flags: u32,
}

fn catalog_patterns(catalog: &Catalog) -> Vec<Pat> {
    let mut out = Vec::new();
    for s in &catalog.signatures {
        for p in &s.patterns {
            out.push(Pat {
                file: s.file.clone(),
                sig: s.id.clone(),
                pattern: p.clone(),
                flags: FLAG_SINGLEMATCH | if s.caseless { FLAG_CASELESS } else { 0 },
            });
        }
    }
    out
}

fn compile(pats: &[&Pat]) -> Matcher {
    let exprs: Vec<Expression> = pats
        .iter()
        .enumerate()
        .map(|(i, p)| Expression {
            pattern: &p.pattern,
            id: i as u32,
            flags: p.flags,
        })
        .collect();
    Matcher::compile(&exprs).unwrap()
}

/// Minimum over `repeats` of the CPU seconds of scanning every message, and the matches.
fn scan_time(m: &Matcher, messages: &[&str], repeats: usize) -> (f64, u64) {
    let mut scratch = m.scratch();
    let mut best = f64::MAX;
    let mut n = 0;
    for _ in 0..repeats {
        let origin = Instant::now();
        let t0 = cpu_seconds(origin);
        n = messages
            .iter()
            .map(|msg| m.count_matches(msg.as_bytes(), &mut scratch))
            .sum();
        best = best.min(cpu_seconds(origin) - t0);
    }
    (best, n)
}

/// Matches per expression id over every message.
fn matches_per_pattern(m: &Matcher, messages: &[&str]) -> Vec<u64> {
    let mut scratch = m.scratch();
    let mut counts = vec![0u64; m.len()];
    let mut ids = Vec::new();
    for msg in messages {
        ids.clear();
        m.scan_into(msg.as_bytes(), &mut scratch, &mut ids);
        for &id in &ids {
            counts[id as usize] += 1;
        }
    }
    counts
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let repeats: usize = args.get(3).map_or(5, |s| s.parse().unwrap());
    let top: usize = args.get(4).map_or(40, |s| s.parse().unwrap());
    let mut logs = Vec::new();
    files(Path::new(&args[2]), &mut logs);
    let data: Vec<String> = logs
        .iter()
        .map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned())
        .collect();
    let lines: Vec<&str> = data
        .iter()
        .flat_map(|d| d.split('\n'))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let messages = peeled_messages(&lines);
    let mode = args.get(5).map_or("all", |s| s.as_str());
    if let Some(db) = mode.strip_prefix("scan:") {
        // No catalog here: under valgrind, compiling it would take minutes.
        let dbs: Vec<Matcher> = db
            .split(',')
            .map(|f| Matcher::deserialize(&std::fs::read(f).unwrap(), 1).unwrap())
            .collect();
        let n: u64 = dbs.iter().map(|m| scan_messages(m, &messages)).sum();
        println!("{n} matches");
        return;
    }
    let catalog = load_catalog(&args[1]);
    let pats = catalog_patterns(&catalog);
    if let Some(spec) = mode.strip_prefix("dump:") {
        dump_subsets(&pats, spec);
        return;
    }
    let all: Vec<&Pat> = pats.iter().collect();
    let full = compile(&all);
    let (t_full, n_full) = scan_time(&full, &messages, repeats);
    let (t_lines, n_lines) = scan_time(&full, &lines, repeats);
    let empty: Vec<&str> = vec![""; messages.len()];
    let (t_empty, _) = scan_time(&full, &empty, repeats);
    let per_line = |t: f64| t / messages.len() as f64 * 1e9;
    println!(
        "{} messages, {} patterns: messages {:.1} ns/line ({n_full} matches), whole lines \
         {:.1} ns/line ({n_lines}), empty input {:.1} ns/scan",
        messages.len(),
        pats.len(),
        per_line(t_full),
        per_line(t_lines),
        per_line(t_empty)
    );
    if mode == "messages" {
        costly_messages(&full, &messages, repeats, top);
        return;
    }
    if let Some(file) = mode.strip_prefix("sigs:") {
        without_each_signature(&pats, file, &messages, repeats, per_line(t_full));
        return;
    }
    let counts = matches_per_pattern(&full, &messages);
    let mut by_file: BTreeMap<&str, Vec<&Pat>> = BTreeMap::new();
    for p in &pats {
        by_file.entry(&p.file).or_default().push(p);
    }
    println!(
        "\n== without one catalog file (ns/message; full {:.1})",
        per_line(t_full)
    );
    for file in by_file.keys() {
        let rest: Vec<&Pat> = pats.iter().filter(|p| p.file != *file).collect();
        let (t, n) = scan_time(&compile(&rest), &messages, repeats);
        println!(
            "{:>8.1} ({:+6.1})  {n:>7} matches  {file}",
            per_line(t),
            per_line(t) - per_line(t_full)
        );
    }
    println!("\n== matches per pattern on the messages (pattern: matches)");
    let mut fired: Vec<(usize, u64)> = counts.iter().copied().enumerate().collect();
    fired.retain(|(_, c)| *c > 0);
    fired.sort_by_key(|f| std::cmp::Reverse(f.1));
    for (i, c) in &fired {
        println!("{c:>7}  {}  {:?}", pats[*i].sig, pats[*i].pattern);
    }
    println!("\n== each pattern alone (ns/message, matches), the {top} costliest");
    let mut alone: Vec<(f64, usize, u64)> = all
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (t, n) = scan_time(&compile(&[p]), &messages, repeats.min(3));
            (per_line(t), i, n)
        })
        .collect();
    alone.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (t, i, n) in alone.iter().take(top) {
        println!("{t:>8.1}  {n:>7}  {}  {:?}", pats[*i].sig, pats[*i].pattern);
    }
}

/// The distinct messages whose scans cost the most in total (ns per scan times occurrences).
fn costly_messages(m: &Matcher, messages: &[&str], repeats: usize, top: usize) {
    let mut seen: BTreeMap<&str, u64> = BTreeMap::new();
    for msg in messages {
        *seen.entry(msg).or_default() += 1;
    }
    let mut scratch = m.scratch();
    let mut rows: Vec<(f64, u64, f64, &str)> = seen
        .iter()
        .map(|(msg, &n)| {
            let ns = wall_ns_per_scan(m, &mut scratch, msg, repeats);
            (ns * n as f64 / messages.len() as f64, n, ns, *msg)
        })
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total: f64 = rows.iter().map(|r| r.0).sum();
    println!(
        "{} distinct messages, {total:.1} ns/line in all; per line | count | ns/scan | message",
        rows.len()
    );
    for (share, n, ns, msg) in rows.iter().take(top) {
        println!("{share:>7.1} {n:>6} {ns:>7.1}  {msg:?}");
    }
}

/// The database without each signature of `file`, one at a time.
fn without_each_signature(pats: &[Pat], file: &str, messages: &[&str], repeats: usize, full: f64) {
    let mut sigs: Vec<&str> = pats
        .iter()
        .filter(|p| p.file.ends_with(file))
        .map(|p| p.sig.as_str())
        .collect();
    sigs.dedup();
    println!("== without one signature of {file} (ns/message; full {full:.1})");
    for sig in sigs {
        let rest: Vec<&Pat> = pats.iter().filter(|p| p.sig != sig).collect();
        let (t, n) = scan_time(&compile(&rest), messages, repeats);
        let ns = t / messages.len() as f64 * 1e9;
        println!("{ns:>8.1} ({:+6.1})  {n:>7} matches  {sig}", ns - full);
    }
}

/// Wall-clock nanoseconds of one scan of `msg`: the minimum over `repeats` batches of 20 (too
/// short for the thread's CPU clock, which advances at scheduler ticks).
fn wall_ns_per_scan(
    m: &Matcher,
    scratch: &mut rankwatch_core::matcher::Scratch,
    msg: &str,
    repeats: usize,
) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..repeats {
        let t0 = Instant::now();
        for _ in 0..20 {
            std::hint::black_box(m.count_matches(msg.as_bytes(), scratch));
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e9 / 20.0);
    }
    best
}

#[inline(never)]
fn scan_messages(m: &Matcher, messages: &[&str]) -> u64 {
    let mut scratch = m.scratch();
    messages
        .iter()
        .map(|msg| m.count_matches(msg.as_bytes(), &mut scratch))
        .sum()
}

/// Writes `full.db` and one database per left-out catalog file (`spec` = DIR) or per left-out
/// signature of one file (`spec` = DIR:FILE).
fn dump_subsets(pats: &[Pat], spec: &str) {
    let (dir, file) = spec
        .split_once(':')
        .map_or((spec, None), |(d, f)| (d, Some(f)));
    std::fs::create_dir_all(dir).unwrap();
    let write = |name: &str, keep: &dyn Fn(&Pat) -> bool| {
        let subset: Vec<&Pat> = pats.iter().filter(|p| keep(p)).collect();
        let bytes = compile(&subset).serialize().unwrap();
        std::fs::write(Path::new(dir).join(format!("{name}.db")), bytes).unwrap();
    };
    write("full", &|_| true);
    if file == Some("split") {
        write("anchored", &|p| p.pattern.starts_with('^'));
        write("floating", &|p| !p.pattern.starts_with('^'));
        let lit = |p: &Pat| {
            p.pattern.starts_with('^')
                && p.pattern[1..].starts_with(|c: char| c.is_ascii_alphanumeric())
        };
        write("anchored-literal", &|p| lit(p));
        write("anchored-other", &|p| p.pattern.starts_with('^') && !lit(p));
        write("no-anchored-other", &|p| {
            !p.pattern.starts_with('^') || lit(p)
        });
        return;
    }
    let mut groups: Vec<&str> = match file {
        None => pats.iter().map(|p| p.file.as_str()).collect(),
        Some(f) => pats
            .iter()
            .filter(|p| p.file.ends_with(f))
            .map(|p| p.sig.as_str())
            .collect(),
    };
    groups.dedup();
    for g in groups {
        let name = Path::new(g).file_stem().unwrap().to_string_lossy();
        match file {
            None => write(&format!("no-{name}"), &|p| p.file != g),
            Some(_) => write(&format!("no-{name}"), &|p| p.sig != g),
        }
    }
}
