//! A process that fell silent at the moment the waiting ranks entered the collective they time
//! out in was busy elsewhere: one process saving a checkpoint, running an evaluation or
//! scanning data while the others went on to the next all-reduce. A watchdog timeout dates
//! that moment (`ran for N milliseconds` before it was printed); the process whose last line
//! lies within seconds of it, and that printed nothing for a minute and more before the
//! failure, is the one they wait for (+30, as `progress` weighs a rank that kept running), and
//! that last line says what it was doing. It needs no rank: in a console where only one process
//! (the one doing the extra work) logs without a rank prefix, that stream is the process.
//!
//! Only mid-run collectives count: around the first collectives every process is still
//! printing its start-up lines, and one of them falling quiet then means nothing. Only one such
//! process may stand out; two or more are not told apart.

use crate::correlate::board::{Board, LineRef};
use crate::correlate::collectives::{waited_facts, Entry};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use std::collections::BTreeSet;

const FINDING: &str = "busy_when_collective_began";
/// How far a last line may lie from the moment the others entered (clock granularity, skew).
const NEAR_MS: i64 = 5_000;
/// The process printed nothing for at least this long before the failure.
const QUIET_MS: i64 = 60_000;
/// Collectives before this sequence number are start-up, not mid-run.
const MIN_SEQ: u64 = 100;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    let waiting: Vec<&Entry> = scope
        .collectives(v)
        .iter()
        .filter(|e| e.waiting && e.seq >= MIN_SEQ && e.entered.is_some())
        .collect();
    // Every waiting entry has its entry time, so the first one's is the earliest.
    let Some((first, entered)) = waiting
        .iter()
        .min_by_key(|e| e.entered)
        .and_then(|e| Some((*e, e.entered?)))
    else {
        return;
    };
    let Some(failed) = scope.first_hit_time(v) else {
        return;
    };
    let waiters: BTreeSet<Who> = waiting.iter().map(|e| e.who).collect();
    let printers: BTreeSet<u32> = scope.hits.iter().map(|&i| v.hit(i).source).collect();
    let mut busy = silent_at(v, entered, failed, &printers, &waiters);
    if busy.len() != 1 {
        return;
    }
    let (src, at) = busy.remove(0);
    let who = v.process(src.0);
    let host = v.who_host(who);
    let (waiting_ranks, mut facts) = waited_facts(first, &waiters);
    facts.push(("quiet_s".to_string(), ((failed - at) / 1000).to_string()));
    let c = board.state_finding(who, host, src.1, finding, facts);
    c.ts = c.ts.or(Some(at));
    let why = format!(
        "fell silent as {waiting_ranks} entered #{} of {} and printed nothing for {} s",
        first.seq,
        first.group,
        (failed - at) / 1000
    );
    board.add(who, host, "busy_at_entry", 30, why);
}

/// Sources that printed no line of the incident and are none of the waiters, whose last line
/// lies within NEAR_MS of `entered` and QUIET_MS or more before `failed`: ((source, line), its
/// time).
fn silent_at(
    v: &View,
    entered: i64,
    failed: i64,
    printers: &BTreeSet<u32>,
    waiters: &BTreeSet<Who>,
) -> Vec<((u32, LineRef), i64)> {
    let mut out = Vec::new();
    for (si, s) in v.job.sources.iter().enumerate() {
        let si = si as u32;
        let rank_waits = v
            .rank_of(si)
            .is_some_and(|r| waiters.contains(&Who::Rank(r)));
        if printers.contains(&si) || rank_waits || waiters.contains(&Who::Source(si)) {
            continue;
        }
        let lines = s.ring.lines();
        let Some(last) = lines.iter().rev().find(|l| l.opens_printed_record()) else {
            continue;
        };
        let Some(t) = v.corrected(si, last.ts_ms) else {
            continue;
        };
        if (t - entered).abs() <= NEAR_MS && t + QUIET_MS <= failed {
            out.push(((si, LineRef::Ring(si, last.seq)), t));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{assert_finding, assert_not_finding, diagnose_untimed};

    const TIMEOUT: &str = "2026-03-01T08:20:00.300Z [rank3]:[E301 08:20:00.200000000 \
        ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation timeout: \
        WorkNCCL(SeqNum=40210, OpType=ALLREDUCE, NumelIn=10, NumelOut=10, Timeout(ms)=1200000) \
        ran for 1200050 milliseconds before timing out.\n";

    #[test]
    fn the_process_that_fell_silent_as_the_others_entered_is_the_root() {
        let save = "2026-03-01T08:00:00.400Z 2026-03-01 08:00:00,400 - root - INFO - Saving \
                    checkpoint at step 40000";
        let log = format!(
            "2026-03-01T07:59:58.000Z 2026-03-01 07:59:58,000 - root - INFO - step 39990\n\
             {save}\n{TIMEOUT}"
        );
        let d = diagnose_untimed(&log);
        assert_finding(&d, save, "busy_when_collective_began", "#40210");
        assert_eq!(d[0].json["facts"]["waiting_ranks"], "3");
    }

    #[test]
    fn a_line_long_before_the_collective_began_is_not_taken() {
        let log = format!(
            "2026-03-01T07:40:00.000Z 2026-03-01 07:40:00,000 - root - INFO - step 38000\n{TIMEOUT}"
        );
        let d = diagnose_untimed(&log);
        assert_not_finding(&d, "busy_when_collective_began");
    }

    #[test]
    fn start_up_collectives_are_not_read() {
        let log = format!(
            "2026-03-01T08:00:00.400Z torchrun: OMP_NUM_THREADS set to 1\n{}",
            TIMEOUT.replace("SeqNum=40210", "SeqNum=1")
        );
        let d = diagnose_untimed(&log);
        assert_not_finding(&d, "busy_when_collective_began");
    }
}
