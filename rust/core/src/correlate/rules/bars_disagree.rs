//! Several processes drawing the same loop's progress bar into one console, whose last
//! drawings before the others time out disagree on how far the loop got: the process whose bar
//! is behind is the one the others wait for. Ranks that take different numbers of steps (a
//! batch skipped on one rank only, uneven shards, a loop that ends early on one rank) stop
//! issuing the same collectives, and the bars are often the only place that shows it.
//!
//! One process's bar never goes back within its loop, so frames of one total whose counts go
//! back (499, 496, 497) come from several processes. Only the frames just before the
//! incident's first line count, only with ranks waiting in a collective, and only when one
//! frame stands alone at the lowest count: a new epoch that starts its bar again is not a
//! process behind (a restart is far below the others; one behind is within a small share of
//! the total).
//!
//! +15, as `bar_at_timeout`: more than a symptom's share (so it wins over the first timeout),
//! less than any cause signature in the incident.
//!
//! Cases: an Accelerate job whose training loop skipped padded batches per GPU; the three
//! processes' bars stood at 499, 496 and 497 of 7151 when rank 0 timed out in ALLREDUCE.

use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::view::View;
use crate::prefix::{bar_counts, peel};

const FINDING: &str = "progress_bars_disagree";
const WEIGHT: i32 = 15;
/// The frames looked at: among this many of a console's last lines before the incident.
const LAST_LINES: usize = 12;
/// A frame this far below the highest (as a share of the total) is a restart, not a lag.
const MAX_LAG_SHARE: u64 = 20;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    let Some(wait) = scope.collectives(v).iter().find(|e| e.waiting) else {
        return;
    };
    let Some(first_hit) = scope.hits.iter().map(|&i| v.hit(i)).min_by_key(|h| h.seq) else {
        return;
    };
    // Only a console shared by processes mixes their bars: a source that is one process (it
    // has a rank or a pid) draws one bar, and there are thousands of those in a large job.
    let Some(behind) = (0..v.job.sources.len() as u32)
        .filter(|&src| v.rank_of(src).is_none() && v.job.sources[src as usize].pid.is_none())
        .find_map(|src| behind_bar(v, src, first_hit.seq))
    else {
        return;
    };
    let who = v.process(behind.src);
    let host = v.who_host(who);
    let facts = vec![
        ("bar_done".to_string(), behind.done.to_string()),
        ("bar_total".to_string(), behind.total.to_string()),
        ("bar_others".to_string(), behind.others.clone()),
        ("coll_seq".to_string(), wait.seq.to_string()),
        ("coll_op".to_string(), wait.fp.op.clone()),
    ];
    board.state_finding(
        who,
        host,
        LineRef::Ring(behind.src, behind.seq),
        finding,
        facts,
    );
    let why = format!(
        "its progress bar stood at {} of {} while the other bars stood at {} when the \
         ranks timed out in #{} ({})",
        behind.done, behind.total, behind.others, wait.seq, wait.fp.op
    );
    board.add(who, host, "bars_disagree", WEIGHT, why);
}

/// The frame that is behind, in one console's frames of one bar.
struct Behind {
    src: u32,
    seq: u64,
    done: u64,
    total: u64,
    /// The other frames' counts, as printed (`499, 497`).
    others: String,
}

fn behind_bar(v: &View, src: u32, first_hit: u64) -> Option<Behind> {
    let before = v.job.sources[src as usize]
        .ring
        .before(first_hit, LAST_LINES);
    let frames: Vec<(u64, (u64, u64))> = before
        .iter()
        .rev()
        .filter_map(|l| {
            let msg = peel(&l.text, v.cfg.default_year).message(&l.text);
            Some((l.seq, bar_counts(msg)?))
        })
        .collect();
    // The bar drawn last before the incident decides which loop is compared.
    let total = frames.first()?.1 .1;
    let same: Vec<(u64, u64)> = frames
        .iter()
        .rev()
        .filter(|(_, (_, t))| *t == total)
        .map(|&(seq, (done, _))| (seq, done))
        .collect();
    if same.len() < 2 || !goes_back(&same) {
        return None;
    }
    let low = same.iter().map(|&(_, d)| d).min()?;
    let high = same.iter().map(|&(_, d)| d).max()?;
    let at_low: Vec<_> = same.iter().filter(|&&(_, d)| d == low).collect();
    let lag_ok = high - low >= 2 && (high - low) * MAX_LAG_SHARE <= total;
    let [&(seq, done)] = at_low[..] else {
        return None;
    };
    if !lag_ok {
        return None;
    }
    let others = same
        .iter()
        .filter(|&&(s, _)| s != seq)
        .map(|(_, d)| d.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Some(Behind {
        src,
        seq,
        done,
        total,
        others,
    })
}

/// Whether a count falls below one drawn before it: the frames are not one process's.
fn goes_back(frames: &[(u64, u64)]) -> bool {
    frames.windows(2).any(|w| w[1].1 < w[0].1)
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{assert_finding, assert_not_finding, diagnose};

    const TIMEOUT: &str = "[rank0]:[E1102 03:04:14.692188080 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=129457, OpType=ALLREDUCE, NumelIn=525340672, NumelOut=525340672, Timeout(ms)=600000) ran for 600002 milliseconds before timing out.";

    fn bar(done: u64) -> String {
        format!("  7%|▋         | {done}/7151 [3:38:58<46:22:13, 25.08s/it]")
    }

    #[test]
    fn the_bar_behind_the_others_is_the_root() {
        let log = format!("{}\n{}\n{}\n{TIMEOUT}\n", bar(499), bar(496), bar(497));
        assert_finding(
            &diagnose(&log),
            &bar(496),
            "progress_bars_disagree",
            "499, 497",
        );
    }

    #[test]
    fn one_process_bar_or_a_new_epoch_is_no_lag() {
        let rising = format!("{}\n{}\n{}\n{TIMEOUT}\n", bar(495), bar(496), bar(497));
        assert_not_finding(&diagnose(&rising), "progress_bars_disagree");
        let restart = format!("{}\n{}\n{TIMEOUT}\n", bar(7151), bar(3));
        assert_not_finding(&diagnose(&restart), "progress_bars_disagree");
    }

    #[test]
    fn two_bars_at_the_lowest_count_name_no_one() {
        let log = format!("{}\n{}\n{}\n{TIMEOUT}\n", bar(499), bar(496), bar(496));
        assert_not_finding(&diagnose(&log), "progress_bars_disagree");
    }

    #[test]
    fn without_a_collective_timeout_bars_are_no_evidence() {
        let log = format!(
            "{}\n{}\n{}\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
            bar(499),
            bar(496),
            bar(497)
        );
        assert_not_finding(&diagnose(&log), "progress_bars_disagree");
    }
}
