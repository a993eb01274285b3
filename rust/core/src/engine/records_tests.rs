//! `feed_records` decodes a segment of records ahead and applies their lines record by
//! record; the result must be that of feeding the same records one call per record, for any
//! order of records, jobs and streams, any cut of the records into calls, and when jobs are
//! evicted for memory in the middle of a call.

use super::*;
use crate::catalog::tests::SMALL;
use crate::records::Format;
use proptest::prelude::*;

fn engine(budget: usize) -> Engine {
    let catalog = Catalog::from_sources(&[("small.toml".into(), SMALL.into())]).unwrap();
    let cfg = Config {
        memory_budget_bytes: budget,
        ..Config::default()
    };
    Engine::new(Arc::new(catalog), cfg)
}

/// Line `kind` of source `src`: plain steps, causes, symptoms with fields, context with
/// fields, a traceback and its frames, warnings, ANSI codes, blank and several-line texts.
fn line(kind: u8, src: u8, n: usize) -> String {
    match kind % 12 {
        0 => format!(
            "node{src}:81{src}:81{src} [{src}] misc/socket.cc:484 NCCL WARN socketStartConnect: \
             Connect to 10.0.0.{n}<39275> failed : Network is unreachable"
        ),
        1 => format!(
            "[rank{src}]:[E1201 10:00:0{}.000000 1 ProcessGroupNCCL.cpp:1] Watchdog caught \
             collective operation timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE)",
            n % 10
        ),
        2 => format!("node{src}:81{src}:81{src} [{src}] NCCL INFO NET/Socket : Using [0]eth0:10.0.{src}.1<0>"),
        3 => "Traceback (most recent call last):".to_string(),
        4 => format!("  File \"train.py\", line {n}, in step"),
        5 => "RuntimeError: NCCL error: unhandled system error".to_string(),
        6 => format!("\u{1b}[31mWARNING\u{1b}[0m rank {src} slow step {n}"),
        7 => String::new(),
        8 => format!("step {n}\nstep {} done\n\n  indented", n + 1),
        9 => format!("E1201 10:00:01.{n:06} 1 x.py:1] error without a signature"),
        _ => format!("[default{src}]:step {n} loss 0.{n}"),
    }
}

/// Record values of the canonical format: job, source (a rank or a file), time, line.
fn canonical(spec: &[(u8, u8, u8)]) -> Vec<Vec<u8>> {
    spec.iter()
        .enumerate()
        .map(|(n, &(job, src, kind))| {
            if kind == 255 {
                return b"{\"job\": not json".to_vec();
            }
            let ts = 1_764_583_200_000i64 + (n as i64) * 37;
            let v = if src % 2 == 0 {
                serde_json::json!({"job": format!("job{job}"), "rank": src, "host": format!("h{}", src / 4), "ts": ts, "line": line(kind, src, n)})
            } else {
                serde_json::json!({"job": format!("job{job}"), "source": format!("f{src}.log"), "line": line(kind, src, n)})
            };
            v.to_string().into_bytes()
        })
        .collect()
}

/// Docker json-file values: the text is a chunk that may end inside a line.
fn docker(spec: &[(u8, u8, u8)]) -> Vec<Vec<u8>> {
    spec.iter()
        .enumerate()
        .map(|(n, &(_, src, kind))| {
            let end = if kind % 3 == 0 { "" } else { "\n" };
            serde_json::json!({"log": format!("{}{end}", line(kind, src, n)), "time": "2026-12-01T10:00:00.5Z"})
                .to_string()
                .into_bytes()
        })
        .collect()
}

/// What an engine shows after being fed: its final diagnoses and its counters.
fn outcome(mut e: Engine) -> (Vec<serde_json::Value>, Vec<u64>, usize) {
    let mut diags: Vec<serde_json::Value> = e.finish().into_iter().map(|d| d.json).collect();
    diags.sort_by_key(|d| d.to_string());
    let s = &e.stats;
    let mut rejected: Vec<_> = s.rejected.iter().map(|(k, v)| (*k, *v)).collect();
    rejected.sort();
    let counters = vec![
        s.records,
        s.lines,
        s.bytes,
        s.blank_lines,
        s.invalid_utf8_lines,
        s.signature_hits,
        s.unclassified_errors,
        s.dropped_hits,
        s.jobs_evicted,
        s.ring_shrinks,
        s.sources_capped,
        rejected.iter().map(|(_, v)| v).sum(),
    ];
    (diags, counters, e.jobs.len())
}

/// Feeds `values` (keyed like `keys`) in calls of the sizes in `cuts` (cycled), and one call
/// per record; returns both outcomes.
fn both_ways(
    format: Format,
    budget: usize,
    values: &[Vec<u8>],
    keys: &[Option<&[u8]>],
    cuts: &[usize],
) -> [(Vec<serde_json::Value>, Vec<u64>, usize); 2] {
    let cfg = DecoderConfig::preset(format);
    let records: Vec<RawRecord<'_>> = values
        .iter()
        .zip(keys)
        .enumerate()
        .map(|(i, (v, k))| (v.as_slice(), *k, None, Some(1_764_583_200_000 + i as i64)))
        .collect();
    let mut batched = engine(budget);
    let mut pos = 0;
    for &cut in cuts.iter().cycle() {
        if pos >= records.len() {
            break;
        }
        let end = (pos + cut.max(1)).min(records.len());
        let rejected = batched.feed_records(&cfg, "t/0", &records[pos..end]);
        for (i, _) in rejected {
            assert!(pos + i < end);
        }
        pos = end;
    }
    let mut single = engine(budget);
    for r in &records {
        single.feed_records(&cfg, "t/0", std::slice::from_ref(r));
    }
    [outcome(batched), outcome(single)]
}

fn spec() -> impl Strategy<Value = Vec<(u8, u8, u8)>> {
    let record = (0u8..3, 0u8..6, prop_oneof![20 => 0u8..12, 1 => Just(255u8)]);
    prop::collection::vec(record, 1..160)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn batched_feed_is_record_by_record(spec in spec(), cuts in prop::collection::vec(1usize..400, 1..4)) {
        let values = canonical(&spec);
        let keys = vec![None; values.len()];
        let [batched, single] = both_ways(Format::Canonical, 1 << 30, &values, &keys, &cuts);
        prop_assert!(!single.0.is_empty() || spec.iter().all(|r| r.2 != 0));
        prop_assert_eq!(batched, single);
    }

    #[test]
    fn batched_chunked_records_are_record_by_record(spec in spec(), cuts in prop::collection::vec(1usize..400, 1..4)) {
        let values = docker(&spec);
        let names: Vec<String> = spec.iter().map(|r| format!("job{}", r.0)).collect();
        let keys: Vec<Option<&[u8]>> = names.iter().map(|n| Some(n.as_bytes())).collect();
        let [batched, single] = both_ways(Format::Docker, 1 << 30, &values, &keys, &cuts);
        prop_assert_eq!(batched, single);
    }
}

#[test]
fn jobs_evicted_inside_a_call_leave_every_record_fed_once_and_the_books_straight() {
    // Many jobs, each a few sources, under a budget that holds only some of them: jobs are
    // evicted while a call's segment is applied, and later records of an evicted job start
    // it afresh (fed alone, as they are one at a time). When exactly a job is evicted
    // depends on hash-table capacities, which vary with the hasher's seed, so the two ways
    // are held to the same input counted, not to the same evictions.
    let spec: Vec<(u8, u8, u8)> = (0..3000)
        .map(|n| ((n / 7 % 40) as u8, (n % 5) as u8, (n % 13 % 12) as u8))
        .collect();
    let values = canonical(&spec);
    let cfg = DecoderConfig::preset(Format::Canonical);
    let records: Vec<RawRecord<'_>> = values
        .iter()
        .map(|v| (v.as_slice(), None, None, Some(1_764_583_200_000)))
        .collect();
    let mut batched = engine(400 << 10);
    batched.feed_records(&cfg, "t/0", &records);
    let mut single = engine(400 << 10);
    for r in &records {
        single.feed_records(&cfg, "t/0", std::slice::from_ref(r));
    }
    let (b, s) = (&batched.stats, &single.stats);
    assert!(b.jobs_evicted > 0 && s.jobs_evicted > 0);
    assert_eq!((b.records, b.lines, b.bytes), (s.records, s.lines, s.bytes));
    assert_eq!(b.blank_lines, s.blank_lines);
    assert_eq!(
        batched.stats.memory_bytes,
        batched.memory_breakdown().iter().sum::<usize>()
    );
    for (job, sources) in &batched.record_streams {
        for id in sources.values() {
            assert_eq!(&batched.streams[id].job, job);
        }
    }
}

#[test]
fn a_record_larger_than_a_piece_is_fed_in_pieces_after_the_ones_before() {
    let big: String = (0..8_000)
        .map(|n| line((n % 12) as u8, 3, n) + "\n")
        .collect();
    assert!(big.len() > PIECE_BYTES);
    let mut values = canonical(&[(0, 3, 3), (0, 3, 4)]);
    values.push(
        serde_json::json!({"job": "job0", "rank": 3, "line": big})
            .to_string()
            .into_bytes(),
    );
    values.extend(canonical(&[(0, 3, 5), (1, 2, 0)]));
    let keys = vec![None; values.len()];
    let [batched, single] = both_ways(Format::Canonical, 1 << 30, &values, &keys, &[10]);
    assert!(batched.1[1] > 7_000, "{:?}", batched.1);
    assert_eq!(batched, single);
}
