//! A process still drawing a progress bar when the others time out in a collective is the one
//! they wait for: it is doing work the others are not (preparing a dataset, an evaluation, a
//! scan on one rank) and has not joined the collective. `progress` and `busy_at_entry` tell
//! this from times; this rule needs none. In a console where the ranks share one stream, the
//! order of the lines shows it: the bar's last drawings come right before the watchdog
//! timeouts, from a process that prints no failure of its own and is none of the waiting ranks.
//!
//! +15: more than a symptom's share (so it wins over the first timeout), less than
//! `busy_at_entry` (+30), whose times say the same thing more surely; a cause signature anywhere
//! in the incident still wins. Only one such process may stand out, it must have drawn at least
//! two frames of its bar (or one glued to the front of the first failure line: it was drawing
//! when the failure was printed), two ranks or more must wait, and a rank below the highest
//! waiting one must be missing from them: where every rank waits, the bar was one of theirs (a
//! console where a rank's bar and its own timeout land on different sources).
//!
//! Cases: a Lightning job whose rank 0 writes an HDF5 test set for over 30 minutes while
//! ranks 1 and 2 time out in ALLREDUCE #3 (the bar was at 26/67 when they did); Firefly #183
//! (the next frame glued to rank 2's timeout); yolov5 #9163 (rank 0 scanning labels, the
//! excerpt opening on the scan's frame glued to the timeout notice).

use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::collectives::{ranks_of, waited_facts, Entry};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use crate::prefix::{is_bar_line, opens_with_bar, peel};
use std::collections::BTreeSet;

const FINDING: &str = "progress_bar_at_timeout";
const WEIGHT: i32 = 15;
/// A bar's frames among this many of the process's last lines.
const LAST_LINES: usize = 8;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    let waiting: Vec<&Entry> = scope.collectives(v).iter().filter(|e| e.waiting).collect();
    let waiters: BTreeSet<Who> = waiting.iter().map(|e| e.who).collect();
    if !someone_missing(&waiters) {
        return;
    }
    let Some(first) = scope.hits.iter().copied().min_by_key(|&i| v.hit(i).seq) else {
        return;
    };
    // A process that printed a failure of its own is no bystander; a rankless source that only
    // echoes the waiters' symptoms (`Some NCCL operations have failed…`) may still be one.
    let failed: BTreeSet<u32> = scope
        .hits
        .iter()
        .map(|&i| v.hit(i))
        .filter(|h| v.sig(h).is_none_or(|s| s.role != Role::Symptom))
        .map(|h| h.source)
        .collect();
    let drawing: Vec<(u32, u64)> = (0..v.job.sources.len() as u32)
        .filter(|&si| !failed.contains(&si) && !waits(v, si, &waiters))
        .filter_map(|si| bar_before(v, si, first).map(|seq| (si, seq)))
        .collect();
    let [(src, seq)] = drawing[..] else {
        return;
    };
    let who = v.process(src);
    let host = v.who_host(who);
    let entry = waiting[0];
    let (waiting_ranks, facts) = waited_facts(entry, &waiters);
    if board.cand(who, host).has_rule("busy_at_entry") {
        return; // times said it already
    }
    // The bar's next frame may be glued to the front of the first failure line (the console
    // had no newline between them): that line shows where the bar was when they timed out.
    let line = if opens_with_bar(&v.hit(first).text) {
        LineRef::Hit(first)
    } else {
        LineRef::Ring(src, seq)
    };
    board.state_finding(who, host, line, finding, facts);
    let why = format!(
        "still drawing a progress bar when {waiting_ranks} timed out in #{} of {}",
        entry.seq, entry.group
    );
    board.add(who, host, "bar_at_timeout", WEIGHT, why);
}

/// Two ranks or more wait, and a rank below the highest of them does not.
fn someone_missing(waiters: &BTreeSet<Who>) -> bool {
    let ranks = ranks_of(waiters);
    ranks.len() >= 2
        && ranks
            .last()
            .is_some_and(|&m| (m as usize) + 1 > ranks.len())
}

fn waits(v: &View, src: u32, waiters: &BTreeSet<Who>) -> bool {
    waiters.contains(&Who::Source(src))
        || v.rank_of(src)
            .is_some_and(|r| waiters.contains(&Who::Rank(r)))
}

/// The line of the bar's last frame, when the source's last lines before hit `first` end with
/// a bar that drew two frames or more, or when `first` itself, a line of this source, opens
/// with a frame: the bar was being drawn the moment the failure was printed (an excerpt that
/// begins there shows no earlier frame).
fn bar_before(v: &View, src: u32, first: usize) -> Option<u64> {
    let hit = v.hit(first);
    if hit.source == src && opens_with_bar(&hit.text) {
        return Some(hit.seq);
    }
    let first_hit = hit.seq;
    let lines = v.job.sources[src as usize].ring.lines();
    let before: Vec<_> = lines.iter().filter(|l| l.seq < first_hit).collect();
    let last = before.last()?;
    let is_bar = |text: &str| is_bar_line(peel(text, v.cfg.default_year).message(text));
    if !is_bar(&last.text) {
        return None;
    }
    let frames = before
        .iter()
        .rev()
        .take(LAST_LINES)
        .filter(|l| is_bar(&l.text))
        .count();
    (frames >= 2).then_some(last.seq)
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{assert_finding, assert_not_finding, diagnose};

    const TIMEOUTS: &str = "\
[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800008 milliseconds before timing out.
[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800008 milliseconds before timing out.
[E ProcessGroupNCCL.cpp:489] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.
";

    #[test]
    fn the_process_drawing_a_bar_into_the_timeouts_is_the_root() {
        let last = "Scanning shards:  40%|████      | 8/20 [31:02<46:30, 232.5s/it]";
        let log = format!(
            "Scanning shards:  35%|███▌      | 7/20 [27:10<50:20, 232.3s/it]\n{last}\n{TIMEOUTS}"
        );
        assert_finding(&diagnose(&log), last, "progress_bar_at_timeout", "#3");
    }

    #[test]
    fn a_frame_glued_to_the_first_timeout_is_where_the_bar_was() {
        // yangjianxin1/Firefly#183's shape: the bar's next frame and rank 2's timeout share a line
        let glued = format!(
            "  8%|▊         | 568/6834 [2:12:30<28:23:15, 16.31s/it]{}",
            TIMEOUTS.lines().nth(1).unwrap()
        );
        let rank0 = TIMEOUTS.lines().next().unwrap().replace("Rank 1", "Rank 0");
        let log = format!(
            "  8%|▊         | 566/6834 [2:11:54<23:25:06, 13.45s/it]\n  \
             8%|▊         | 567/6834 [2:12:07<23:28:42, 13.49s/it]\n{glued}\n{rank0}\n"
        );
        assert_finding(&diagnose(&log), &glued, "progress_bar_at_timeout", "#3");
    }

    #[test]
    fn an_excerpt_opening_on_a_frame_glued_to_the_first_failure_needs_no_earlier_frame() {
        // ultralytics/yolov5#9163's shape: rank 0 scans a dataset while the others time out
        let glued = format!(
            "train: Scanning labels... 9120 found, 0 missing:   6%|▋ {}",
            TIMEOUTS.lines().nth(2).unwrap()
        );
        let log = format!(
            "{glued}\n{}",
            TIMEOUTS.lines().take(2).collect::<Vec<_>>().join("\n")
        );
        assert_finding(&diagnose(&log), &glued, "progress_bar_at_timeout", "#3");
    }

    #[test]
    fn one_frame_or_a_bar_long_before_is_no_evidence() {
        let one = "Scanning shards:  40%|████      | 8/20 [31:02<46:30, 232.5s/it]";
        let d = diagnose(&format!("{one}\n{TIMEOUTS}"));
        assert_not_finding(&d, "progress_bar_at_timeout");
        let log = format!("{one}\n{one}\nloading done, starting training\n{TIMEOUTS}");
        let d = diagnose(&log);
        assert_not_finding(&d, "progress_bar_at_timeout");
    }

    #[test]
    fn a_bar_where_every_rank_waits_was_one_of_theirs() {
        let bar = "Epoch 3:  52%|█████▏    | 520/1000 [10:02<09:16, 1.16s/it]";
        let rank0 = TIMEOUTS.lines().next().unwrap().replace("Rank 1", "Rank 0");
        let log = format!("{bar}\n{bar}\n{rank0}\n{TIMEOUTS}");
        let d = diagnose(&log);
        assert_not_finding(&d, "progress_bar_at_timeout");
    }
}
