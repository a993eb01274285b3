//! Profiling aid for the daemon's path: decodes and feeds Kafka record values (one JSON value
//! per line of a file) through `Engine::feed_records` in batches, and separately times the
//! decoding alone. Prints records/s of each.
//! `cargo run --release -p rankwatch-core --example records_profile -- CATALOG_DIR RECORDS [ROUNDS] [MODE]`
//! MODE `decode` or `reference`: only the decoding, by the fast path or by the full parse (for
//! `perf stat` instruction counts without the engine); `feed`: only the engine (for callgrind).
//! Set `RANKWATCH_CACHE_DIR` to a folder to take the compiled database from the cache instead
//! of compiling it.
use rankwatch_core::dbcache::DbCache;
use rankwatch_core::engine::RawRecord;
use rankwatch_core::records::{decode_reference, DecoderConfig, Format, RecordDecoder};
use rankwatch_core::{Catalog, Config, Engine};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const BATCH: usize = 10_000;

fn catalog(dir: &Path) -> Catalog {
    let mut sources = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "toml") {
                sources.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }
    sources.sort();
    let cache = std::env::var("RANKWATCH_CACHE_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .map(DbCache::at);
    Catalog::from_sources_cached(&sources, cache.as_ref()).unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let data = std::fs::read(&args[2]).unwrap();
    let values: Vec<&[u8]> = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let records: Vec<RawRecord<'_>> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            (
                *v,
                Some(&b"job"[..]),
                None,
                Some(1_700_000_000_000 + i as i64),
            )
        })
        .collect();
    let cfg = DecoderConfig::preset(Format::Canonical);
    let rounds: usize = args.get(3).map_or(5, |s| s.parse().unwrap());
    let mode = args.get(4).map_or("", String::as_str);
    let catalog =
        (mode.is_empty() || mode == "feed").then(|| Arc::new(catalog(Path::new(&args[1]))));
    for _ in 0..rounds {
        let t = Instant::now();
        let decoder = RecordDecoder::new(&cfg);
        let ok = records
            .iter()
            .filter(|(v, k, h, _)| match mode {
                "feed" => true,
                "reference" => decode_reference(&cfg, v, *k, *h).is_ok(),
                _ => decoder.decode(v, *k, *h).is_ok(),
            })
            .count();
        let decode_s = t.elapsed().as_secs_f64();
        let Some(catalog) = &catalog else {
            println!(
                "decode {:.0} records/s ({ok} ok)",
                records.len() as f64 / decode_s
            );
            continue;
        };
        let t = Instant::now();
        let mut engine = Engine::new(catalog.clone(), Config::default());
        for batch in records.chunks(BATCH) {
            engine.feed_records(&cfg, "topic/0", batch);
        }
        let feed_s = t.elapsed().as_secs_f64();
        let n = records.len() as f64;
        println!(
            "decode {:.0} records/s ({ok} ok), feed_records {:.0} records/s",
            n / decode_s,
            n / feed_s
        );
    }
}
