//! A poll bounded by bytes hands out, over as many calls as it takes, exactly the diagnoses
//! of one unbounded poll, each job's in the same order; what it holds back stays counted.

use super::*;
use crate::catalog::tests::SMALL;
use std::collections::HashMap;

const CAUSE: &[u8] = b"node1:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: \
                       Connect to 172.17.0.1<39275> failed : Network is unreachable\n";

fn engine(budget: usize) -> Engine {
    let catalog = Catalog::from_sources(&[("small.toml".into(), SMALL.into())]).unwrap();
    let cfg = Config {
        memory_budget_bytes: budget,
        release_quiet_ms: 60_000,
        ..Config::default()
    };
    Engine::new(Arc::new(catalog), cfg)
}

/// `jobs` short failing jobs, two ranks each, fed at 1 s of event time apart.
fn feed_jobs(e: &mut Engine, jobs: usize) {
    e.poll(1);
    for i in 0..jobs {
        for rank in 0..2 {
            let id = e.open_stream(
                &format!("job-{i}"),
                &format!("rank{rank}.log"),
                Default::default(),
            );
            e.feed(id, CAUSE, Some(1_000 + i as i64 * 1_000));
            e.close_stream(id);
        }
    }
}

/// (job, is_final, JSON) of each diagnosis, in the order handed out.
type Seen = Vec<(String, bool, String)>;

fn seen(d: &Diagnosis) -> (String, bool, String) {
    (d.job.clone(), d.is_final, d.json.to_string())
}

/// Polls at `now` with `max_bytes` until nothing more is ready: the diagnoses and the bytes
/// each call handed out.
fn poll_all(e: &mut Engine, now: i64, max_bytes: usize) -> (Seen, Vec<usize>) {
    let (mut out, mut calls) = (Vec::new(), Vec::new());
    loop {
        let mut bytes = 0;
        let more = e.poll_bounded(now, max_bytes, false, |d| {
            let s = seen(&d);
            let n = s.2.len();
            bytes += n;
            out.push(s);
            n
        });
        calls.push(bytes);
        assert_eq!(
            e.stats.memory_bytes,
            e.memory_breakdown().iter().sum::<usize>()
        );
        if !more {
            return (out, calls);
        }
        assert!(calls.len() < 10_000, "a bounded poll made no progress");
    }
}

fn by_job(all: &Seen) -> HashMap<String, Vec<(bool, String)>> {
    let mut out: HashMap<String, Vec<(bool, String)>> = HashMap::new();
    for (job, fin, json) in all {
        out.entry(job.clone())
            .or_default()
            .push((*fin, json.clone()));
    }
    out
}

fn largest(all: &Seen) -> usize {
    all.iter().map(|s| s.2.len()).max().unwrap_or(0)
}

#[test]
fn a_bounded_poll_hands_out_each_jobs_diagnoses_as_one_poll_does() {
    let (mut whole, mut parts) = (engine(1 << 30), engine(1 << 30));
    feed_jobs(&mut whole, 60);
    feed_jobs(&mut parts, 60);
    // Past the settle window and the quiet time: every job is diagnosed, then released.
    let now = 200_000;
    let (expected, _) = poll_all(&mut whole, now, usize::MAX);
    let bound = 4 * largest(&expected);
    let (got, calls) = poll_all(&mut parts, now, bound);
    assert!(expected.len() >= 120, "{} diagnoses", expected.len());
    assert!(calls.len() > 10, "{} calls", calls.len());
    assert_eq!(by_job(&got), by_job(&expected));
    assert_eq!(got.len(), expected.len());
    // A call stops at the job that crosses the bound: one job's diagnoses past it at most.
    let per_job = 2 * largest(&expected);
    assert!(calls.iter().all(|&b| b <= bound + per_job), "{calls:?}");
    assert_eq!((parts.job_count(), parts.stats.jobs_released), (0, 60));
}

#[test]
fn every_job_gets_its_turn_across_bounded_polls() {
    let mut e = engine(1 << 30);
    feed_jobs(&mut e, 30);
    // Settled but not quiet: one open diagnosis per job, one diagnosis per call.
    let (got, calls) = poll_all(&mut e, 40_000, 1);
    assert_eq!(calls.len(), 31, "{calls:?}"); // the last call finds nothing more
    let jobs: std::collections::HashSet<_> = got.iter().map(|s| s.0.clone()).collect();
    assert_eq!((got.len(), jobs.len()), (30, 30));
    assert!(got.iter().all(|s| !s.1));
}

#[test]
fn parked_diagnoses_held_back_stay_in_order_and_counted() {
    // A budget that evicts most jobs while they are fed: their final diagnoses are parked.
    let (mut whole, mut parts) = (engine(64 << 10), engine(64 << 10));
    feed_jobs(&mut whole, 200);
    feed_jobs(&mut parts, 200);
    assert!(parts.pending.len() > 20, "{} parked", parts.pending.len());
    let order: Vec<String> = parts.pending.iter().map(|p| p.id.clone()).collect();
    let mut first = Vec::new();
    let more = parts.poll_bounded(1, 1, false, |d| {
        first.push(d.id.clone());
        d.json.to_string().len()
    });
    assert!(more);
    assert_eq!(first, order[..1]);
    let left: Vec<String> = parts.pending.iter().map(|p| p.id.clone()).collect();
    assert_eq!(left, order[1..]);
    assert_eq!(
        parts.pending_bytes,
        parts.pending.iter().map(Parked::heap_bytes).sum::<usize>()
    );
    assert_eq!(
        parts.stats.memory_bytes,
        parts.memory_breakdown().iter().sum::<usize>()
    );
    let (expected, _) = poll_all(&mut whole, 1, usize::MAX);
    let (rest, _) = poll_all(&mut parts, 1, 2_000);
    assert_eq!(rest.len() + 1, expected.len());
    let id = |s: &(String, bool, String)| {
        let v: serde_json::Value = serde_json::from_str(&s.2).unwrap();
        v["id"].as_str().unwrap().to_string()
    };
    let ids: Vec<String> = rest[..order.len() - 1].iter().map(id).collect();
    assert_eq!(ids, order[1..]);
}

#[test]
fn remembered_field_results_are_counted() {
    let mut e = engine(1 << 30);
    feed_jobs(&mut e, 3);
    e.poll(200_000);
    assert_eq!(e.job_count(), 0);
    let memo = e.decoder.memo_bytes();
    assert!(memo > 0);
    assert_eq!(memo, e.decoder.memo_bytes_recounted());
    // With no job held, what the engine accounts is its tables and the memo.
    assert_eq!(
        e.stats.memory_bytes,
        e.memory_breakdown().iter().sum::<usize>()
    );
    let tables = memsize::map(&e.jobs) + memsize::map(&e.streams) + memsize::map(&e.record_streams);
    assert_eq!(e.stats.memory_bytes, tables + memo);
}

/// A poll that holds open updates within a settle window (the daemon's between commits).
fn poll_holding(e: &mut Engine, now: i64) -> Vec<Diagnosis> {
    let mut out = Vec::new();
    e.poll_bounded(now, usize::MAX, true, |d| {
        out.push(d);
        0
    });
    out
}

fn storm_engine() -> Engine {
    let catalog = Catalog::from_sources(&[("small.toml".into(), SMALL.into())]).unwrap();
    let cfg = Config {
        settle_ms: 5_000,
        max_wait_ms: 1_000, // due by wall time alone: every poll after it may diagnose
        ..Config::default()
    };
    Engine::new(Arc::new(catalog), cfg)
}

fn feed_rank(e: &mut Engine, rank: usize) {
    let id = e.open_stream("storm", &format!("rank{rank}.log"), Default::default());
    e.feed(id, CAUSE, Some(1_000 + rank as i64));
}

#[test]
fn a_storm_updates_an_open_diagnosis_at_most_once_per_settle_window() {
    let mut e = storm_engine();
    feed_rank(&mut e, 0);
    feed_rank(&mut e, 1);
    let t0 = 100_000;
    assert!(poll_holding(&mut e, t0).is_empty(), "opened, not yet due");
    let t1 = t0 + 1_000;
    assert_eq!(
        poll_holding(&mut e, t1).len(),
        1,
        "the first diagnosis goes out once due"
    );
    feed_rank(&mut e, 2);
    assert!(
        poll_holding(&mut e, t1 + 100).is_empty(),
        "held within the settle window"
    );
    feed_rank(&mut e, 3);
    assert!(poll_holding(&mut e, t1 + 4_999).is_empty());
    let later = poll_holding(&mut e, t1 + 5_000);
    assert_eq!(
        later.len(),
        1,
        "then diagnosed again with all that came meanwhile"
    );
    assert!(!later[0].is_final);
    assert!(
        poll_holding(&mut e, t1 + 20_000).is_empty(),
        "nothing new: nothing to publish"
    );
    feed_rank(&mut e, 4);
    let fin = e.finish();
    assert_eq!(fin.len(), 1);
    assert!(fin[0].is_final, "a final diagnosis is never held");
}

#[test]
fn a_poll_without_hold_diagnoses_what_a_holding_poll_held() {
    let mut e = storm_engine();
    feed_rank(&mut e, 0);
    let t0 = 100_000;
    assert!(poll_holding(&mut e, t0).is_empty());
    let first = poll_holding(&mut e, t0 + 1_000);
    assert_eq!(first.len(), 1);
    feed_rank(&mut e, 1);
    assert!(poll_holding(&mut e, t0 + 1_100).is_empty(), "held");
    let flushed = e.poll(t0 + 1_200);
    assert_eq!(flushed.len(), 1, "the held update, at once");
    assert_ne!(
        flushed[0].json, first[0].json,
        "with the rank fed meanwhile"
    );
    assert!(
        poll_holding(&mut e, t0 + 7_000).is_empty(),
        "nothing held any more: nothing to publish"
    );
}
