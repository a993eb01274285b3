//! Profiling aid: feeds every file under a folder to the engine and, separately, scans the
//! same lines with the catalog's Hyperscan database alone; prints both times.
//! `cargo run --release -p rankwatch-core --example feed_profile -- CATALOG_DIR LOG_DIR`
use rankwatch_core::{Catalog, Config, Engine, StreamHints};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_none_or(|x| x != "json") {
            out.push(p);
        }
    }
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
    let catalog = Arc::new(Catalog::from_sources(&sources).unwrap());
    let mut logs = Vec::new();
    files(Path::new(&args[2]), &mut logs);
    let data: Vec<(String, Vec<u8>)> = logs
        .iter()
        .map(|p| (p.display().to_string(), std::fs::read(p).unwrap()))
        .collect();
    let rounds: usize = args.get(3).map_or(5, |s| s.parse().unwrap());
    for _ in 0..rounds {
        let t = Instant::now();
        let mut engine = Engine::new(catalog.clone(), Config::default());
        for (name, bytes) in &data {
            let hints = StreamHints {
                source_key: Some(name.clone()),
                ..Default::default()
            };
            let s = engine.open_stream("bench", name, hints);
            engine.feed(s, bytes, None);
            engine.close_stream(s);
        }
        let feed = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let m = catalog.matcher();
        let mut scratch = m.scratch();
        let mut n = 0u64;
        for (_, bytes) in &data {
            for line in bytes.split(|b| *b == b'\n') {
                if !line.is_empty() {
                    n += m.count_matches(line, &mut scratch);
                }
            }
        }
        let hs = t.elapsed().as_secs_f64();
        println!(
            "feed {feed:.3}s  hyperscan {hs:.3}s ({n} matches)  ratio {:.0}%",
            hs / feed * 100.0
        );
    }
}
