//! The engine's accounted memory against what the allocator really hands out: a counting
//! global allocator measures the heap blocks the engine holds (glibc's own size for each
//! block) and each scenario compares that with `stats.memory_bytes`, and with the budget.

use rankwatch_core::engine::RawRecord;
use rankwatch_core::records::{DecoderConfig, Format};
use rankwatch_core::{Catalog, Config, Engine, StreamHints};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;

extern "C" {
    fn malloc_usable_size(ptr: *mut c_void) -> usize;
}

thread_local! {
    /// Bytes of live heap blocks this thread allocated (glibc chunk sizes).
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

struct Counting;

/// The chunk glibc carved for `ptr`: its usable size plus the 8-byte header.
fn chunk(ptr: *mut u8) -> isize {
    // SAFETY: `ptr` was returned by the system allocator (glibc malloc) and is live.
    (unsafe { malloc_usable_size(ptr.cast()) } + 8) as isize
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|c| c.set(c.get() + delta));
}

// SAFETY: every call is forwarded to `System`; only counting is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(chunk(p));
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-chunk(ptr));
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = chunk(ptr);
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            count(chunk(p) - old);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

fn catalog() -> Arc<Catalog> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/rankwatch/catalog");
    let mut sources = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "toml") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            sources.push((name, std::fs::read_to_string(&path).unwrap()));
        }
    }
    sources.sort();
    Arc::new(Catalog::from_sources(&sources).unwrap())
}

const CAUSE: &str = "NCCL WARN socketStartConnect: Connect to 172.17.0.1<39275> failed : \
                     Network is unreachable";

/// Runs `feed` on a fresh engine and returns (heap the engine holds, accounted bytes, peak
/// accounted bytes). Diagnoses are dropped before measuring.
fn measure(cfg: Config, feed: impl FnOnce(&mut Engine)) -> (isize, usize, usize) {
    let cat = catalog();
    let start = live();
    let mut engine = Engine::new(cat, cfg);
    let empty = live() - start;
    feed(&mut engine);
    drop(engine.poll(engine_wall(&engine)));
    let held = live() - start - empty;
    let s = &engine.stats;
    (held, s.memory_bytes, s.peak_memory_bytes)
}

fn engine_wall(_: &Engine) -> i64 {
    1_000
}

fn assert_tracks(what: &str, held: isize, accounted: usize) {
    let ratio = held as f64 / accounted.max(1) as f64;
    eprintln!("{what}: allocated {held} accounted {accounted} ratio {ratio:.3}");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "{what}: the allocator holds {held} bytes for {accounted} accounted ({ratio:.3})"
    );
}

/// One stream with `ranks` distinct `[rankN]:` prefixes, three lines each (`analyze` of one
/// file with ranks interleaved).
fn prefixed_ranks(engine: &mut Engine, ranks: u32) {
    let s = engine.open_stream("wide", "all.log", StreamHints::default());
    let mut chunk = String::new();
    for r in 0..ranks {
        for step in 0..3 {
            chunk.push_str(&format!("[rank{r}]: step {step} loss 2.{step} lr 3e-4\n"));
        }
        if r % 1000 == 999 {
            engine.feed(s, chunk.as_bytes(), Some(1_000));
            chunk.clear();
        }
    }
    engine.feed(s, chunk.as_bytes(), Some(1_000));
    engine.close_stream(s);
}

/// Canonical records of one job with `ranks` distinct ranks and hosts (a shipper that puts a
/// pod hash in the rank field), three lines each, with a cause line every 1000 ranks.
fn record_ranks(engine: &mut Engine, ranks: u32) {
    let cfg = DecoderConfig::preset(Format::Canonical);
    let mut values = Vec::new();
    for r in 0..ranks {
        for step in 0..3 {
            let line = if step == 2 && r % 1000 == 7 {
                format!("pod-{r}:812:812 [3] misc/socket.cc:484 {CAUSE}")
            } else {
                format!("step {step} loss 2.{step} tokens {}", r * 7 + step)
            };
            values.push(format!(
                r#"{{"job":"wide","rank":{r},"host":"pod-{r:07}","ts":{},"line":"{line}"}}"#,
                1_000 + step
            ));
        }
        if values.len() >= 3000 || r + 1 == ranks {
            let records: Vec<RawRecord<'_>> = values
                .iter()
                .map(|v| (v.as_bytes(), None, None, Some(1_000)))
                .collect();
            engine.feed_records(&cfg, "topic/0", &records);
            drop(records);
            values.clear();
        }
    }
}

/// `jobs` successive 8-rank failing jobs, each fed from per-rank streams, polled a second
/// apart (jobs go quiet and are released after `release_quiet_ms`).
fn successive_jobs(engine: &mut Engine, jobs: u32) {
    let mut now = 1_000;
    for j in 0..jobs {
        for rank in 0..8u32 {
            let hints = StreamHints {
                rank: Some(rank),
                ..StreamHints::default()
            };
            let s = engine.open_stream(&format!("job-{j}"), &format!("rank{rank}.log"), hints);
            let mut text = String::new();
            for step in 0..20 {
                text.push_str(&format!("step {step} loss 2.{step} lr 3e-4\n"));
            }
            text.push_str(&format!(
                "node{rank}:812:812 [3] misc/socket.cc:484 {CAUSE}\n"
            ));
            engine.feed(s, text.as_bytes(), Some(now));
            engine.close_stream(s);
        }
        drop(engine.poll(now));
        now += 1_000;
    }
}

fn big_budget() -> Config {
    Config {
        memory_budget_bytes: 1 << 30,
        ..Config::default()
    }
}

#[test]
fn accounted_bytes_track_the_allocator_for_many_prefixed_ranks() {
    let (held, accounted, _) = measure(big_budget(), |e| prefixed_ranks(e, 20_000));
    assert_tracks("20k [rankN]: prefixes", held, accounted);
}

#[test]
fn accounted_bytes_track_the_allocator_for_many_record_ranks() {
    let (held, accounted, _) = measure(big_budget(), |e| record_ranks(e, 20_000));
    assert_tracks("20k record ranks", held, accounted);
}

#[test]
fn accounted_bytes_track_the_allocator_for_deep_rings() {
    // 64 ranks with full rings (256 lines each): the rings' capacity, not their length.
    let (held, accounted, _) = measure(big_budget(), |e| {
        for round in 0..300 {
            let mut chunk = String::new();
            for r in 0..64 {
                chunk.push_str(&format!(
                    "[rank{r}]: step {round} loss 2.5 grad norm 0.{r}\n"
                ));
            }
            let s = e.open_stream("deep", "all.log", StreamHints::default());
            e.feed(s, chunk.as_bytes(), Some(1_000));
            e.close_stream(s);
        }
    });
    assert_tracks("64 ranks x 300 lines", held, accounted);
}

#[test]
fn accounted_bytes_track_the_allocator_for_successive_jobs() {
    let cfg = Config {
        release_quiet_ms: 60_000,
        ..big_budget()
    };
    let (held, accounted, _) = measure(cfg, |e| successive_jobs(e, 600));
    assert_tracks("600 successive jobs", held, accounted);
}

#[test]
fn many_record_ranks_stay_within_a_small_budget() {
    let budget = 8 << 20;
    let cfg = Config {
        memory_budget_bytes: budget,
        ..Config::default()
    };
    let mut capped = 0;
    let (held, accounted, peak) = measure(cfg, |e| {
        record_ranks(e, 100_000);
        capped = e.stats.sources_capped;
    });
    eprintln!("100k ranks under {budget}: held {held}, accounted {accounted}, peak {peak}");
    assert!(capped > 0, "no source was capped");
    assert!(
        peak <= budget,
        "accounted peak {peak} over the budget {budget}"
    );
    assert!(
        held as usize <= budget * 11 / 10,
        "allocator holds {held} under a budget of {budget}"
    );
}

#[test]
fn accounted_bytes_track_the_allocator_when_jobs_are_evicted() {
    let cfg = Config {
        memory_budget_bytes: 4 << 20,
        release_quiet_ms: 0,
        ..Config::default()
    };
    let mut evicted = 0;
    let (held, accounted, peak) = measure(cfg, |e| {
        successive_jobs(e, 600);
        evicted = e.stats.jobs_evicted;
    });
    assert!(evicted > 0, "no job was evicted");
    assert!(peak <= 4 << 20, "peak {peak} over the budget");
    assert_tracks("600 jobs evicted under 4 MiB", held, accounted);
}

#[test]
fn diagnoses_of_evicted_jobs_are_counted_until_polled() {
    let cfg = Config {
        memory_budget_bytes: 4 << 20,
        release_quiet_ms: 0,
        ..Config::default()
    };
    let cat = catalog();
    let mut e = Engine::new(cat, cfg);
    drop(e.poll(1_000));
    let start = live();
    // Fed without polls: evicted jobs' diagnoses wait in the engine.
    for j in 0..400 {
        let s = e.open_stream(&format!("job-{j}"), "rank0.log", StreamHints::default());
        let mut text = String::new();
        for step in 0..100 {
            text.push_str(&format!("step {step} loss 2.{step} lr 3e-4\n"));
        }
        text.push_str(&format!("node1:812:812 [3] misc/socket.cc:484 {CAUSE}\n"));
        e.feed(s, text.as_bytes(), Some(1_000));
        e.close_stream(s);
    }
    let held = live() - start;
    assert!(e.stats.jobs_evicted > 0);
    assert_tracks("400 jobs evicted, not polled", held, e.stats.memory_bytes);
}

/// Canonical records of one short failing job: 8 ranks, three lines and a cause line each
/// (what `bench/memory_bench.py` feeds as successive jobs).
fn job_values(j: u32) -> Vec<String> {
    let mut values = Vec::new();
    for rank in 0..8 {
        for step in 0..3 {
            values.push(format!(
                r#"{{"job":"job-{j}","rank":{rank},"ts":{},"line":"[rank{rank}]: step {step} loss 2.{step}"}}"#,
                1_000 + step
            ));
        }
        values.push(format!(
            r#"{{"job":"job-{j}","rank":{rank},"ts":1010,"line":"node{rank}:812:812 [3] misc/socket.cc:484 {CAUSE}"}}"#
        ));
    }
    values
}

fn feed_values(engine: &mut Engine, values: &[String], broker_ms: i64) {
    let cfg = DecoderConfig::preset(Format::Canonical);
    let records: Vec<RawRecord<'_>> = values
        .iter()
        .map(|v| (v.as_bytes(), None, None, Some(broker_ms)))
        .collect();
    engine.feed_records(&cfg, "topic/0", &records);
}

#[test]
fn accounted_bytes_never_exceed_the_budget_while_jobs_are_evicted() {
    // Jobs never released: the budget evicts them. Neither the state of the job being fed
    // (its new streams included) nor the final diagnoses of evicted jobs waiting for the
    // next poll may take the accounted total over the budget, with or without polls between.
    let budget = 4 << 20;
    for poll_every in [1, 50] {
        let cfg = Config {
            memory_budget_bytes: budget,
            release_quiet_ms: 0,
            ..Config::default()
        };
        let mut e = Engine::new(catalog(), cfg);
        drop(e.poll(1_000));
        let mut most = 0;
        for j in 0..1_500 {
            feed_values(&mut e, &job_values(j), 1_000 + i64::from(j));
            most = most.max(e.stats.memory_bytes);
            if j % poll_every == 0 {
                drop(e.poll(1_000 + i64::from(j)));
            }
        }
        let s = &e.stats;
        eprintln!(
            "poll every {poll_every}: evicted {}, most {most}, peak {}",
            s.jobs_evicted, s.peak_memory_bytes
        );
        assert!(
            s.jobs_evicted > 100,
            "too few jobs evicted to test the bound"
        );
        assert!(
            s.peak_memory_bytes <= budget,
            "poll every {poll_every}: accounted peak {} over the budget {budget}",
            s.peak_memory_bytes
        );
    }
}

#[test]
fn released_jobs_leave_no_engine_tables_behind() {
    // A burst of jobs fed before any is released, then all released at once: the tables
    // that held their jobs and streams are given back, not kept (and counted) while empty.
    let cfg = Config {
        memory_budget_bytes: 1 << 30,
        release_quiet_ms: 2_000,
        ..Config::default()
    };
    let cat = catalog();
    let start = live();
    let mut e = Engine::new(cat, cfg);
    let empty = live() - start;
    drop(e.poll(1_000));
    for j in 0..2_000 {
        feed_values(&mut e, &job_values(j), 1_000);
    }
    assert_eq!(e.job_count(), 2_000);
    drop(e.poll(1_000));
    drop(e.poll(9_000));
    assert_eq!(e.job_count(), 0);
    let held = live() - start - empty;
    let accounted = e.stats.memory_bytes;
    eprintln!("2,000 jobs released: held {held}, accounted {accounted}");
    assert!(
        accounted <= 64 << 10,
        "{accounted} bytes accounted with no job held"
    );
    // What stays is the engine's scratch (the decoder's batch), not per-job state.
    assert!(
        held <= 256 << 10,
        "the allocator holds {held} bytes with no job held"
    );
}
