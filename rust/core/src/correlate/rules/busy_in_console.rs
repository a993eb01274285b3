//! The timeless form of `busy_at_entry`. Ranks time out in a mid-run collective, and in the
//! same console the lines just before the first timeout come from the one stream that logs
//! without a rank: the training script's own logger, which the frameworks (mmengine,
//! torchtune, Hugging Face, Lightning) run on rank 0 only. What that stream printed after its
//! last progress line (`Evaluating bbox...`, `Saving checkpoint...`) is the work that process
//! was busy with while the others waited, and its first line says what the work was (+30, as
//! `busy_at_entry`). With no times in view, only the order of the console tells: the stream's
//! last line must be the console's last line before the first timeout.
//!
//! Not read: a job with a cause line of its own; a stream whose activity runs longer than
//! `MAX_ACTIVITY` lines or holds an error; a console where rank 0 itself reports waiting (then
//! the unranked stream may be rank 0's prints, waiting too); two or more unranked streams.
//! Cases: open-mmlab/mmdetection#11096 (rank 0 alone runs the COCO evaluation; ranks 2-6 time
//! out in a broadcast), torchtune#2651 (four `Saving checkpoint` lines before rank 4's timeout),
//! torchtune#1165 (the epoch's bar at 16/16 and nothing more; ranks 1-3 time out in an
//! all-gather while rank 0 saves).

use crate::correlate::board::{Board, LineRef};
use crate::correlate::collectives::{waited_facts, Entry};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use crate::digits::is_whole_number;
use crate::prefix::bar_counts;
use crate::ring::RingLine;
use std::collections::BTreeSet;

const FINDING: &str = "busy_before_timeouts";
/// Collectives before this sequence number are start-up, not mid-run (as in `busy_at_entry`).
const MIN_SEQ: u64 = 100;
/// The most lines one piece of work may print and still read as one activity.
const MAX_ACTIVITY: usize = 12;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    if board
        .cands
        .values()
        .any(|c| c.cause.is_some() || c.finding.is_some())
    {
        return;
    }
    let waiting: Vec<&Entry> = scope
        .collectives(v)
        .iter()
        .filter(|e| e.waiting && e.seq >= MIN_SEQ)
        .collect();
    let Some((first, at)) = waiting
        .iter()
        .filter_map(|e| Some((*e, hit_at(v, e)?)))
        .min_by_key(|(_, at)| at.1)
    else {
        return;
    };
    let waiters: BTreeSet<Who> = waiting.iter().map(|e| e.who).collect();
    if waiters.contains(&Who::Rank(0)) {
        return;
    }
    let Some((src, activity)) = busy_stream(v, scope, at, &waiters) else {
        return;
    };
    let who = v.process(src);
    let host = v.who_host(who);
    let (waiting_ranks, mut facts) = waited_facts(first, &waiters);
    // Watchdog lines before torch 2.2 name no process group: the text's fallback says so.
    let group = (first.group != "?").then_some(first.group.as_str());
    facts.retain(|(k, _)| k != "coll_group" || group.is_some());
    board.state_finding(who, host, LineRef::Ring(src, activity), finding, facts);
    let why = format!(
        "the console's unranked stream was busy with this when {waiting_ranks} timed out in #{}{}",
        first.seq,
        group.map_or(String::new(), |g| format!(" of {g}"))
    );
    board.add(who, host, "busy_in_console", 30, why);
}

/// Where a waiting entry's line is, (source, job sequence number), when the line is a hit.
fn hit_at(v: &View, e: &Entry) -> Option<(u32, u64)> {
    match e.line {
        LineRef::Hit(i) => Some((v.hit(i).source, v.hit(i).seq)),
        _ => None,
    }
}

/// The one unranked stream of the console that printed the first timeout (`at`), when its
/// last line before the timeout is the console's last line before it, with the seq of the
/// first line of its activity. The daemon's console is a whole partition: the stream is
/// chosen by its cheap marks first, and the other streams' last lines are read only then.
fn busy_stream(
    v: &View,
    scope: &Scope,
    at: (u32, u64),
    waiters: &BTreeSet<Who>,
) -> Option<(u32, u64)> {
    let origin = &v.job.sources[at.0 as usize].origin;
    let failed_before: BTreeSet<u32> = scope
        .hits
        .iter()
        .map(|&i| v.hit(i))
        .filter(|h| h.seq < at.1)
        .map(|h| h.source)
        .collect();
    let console = || {
        v.job
            .sources
            .iter()
            .enumerate()
            .filter(|(_, s)| s.origin == *origin)
            .map(|(si, s)| (si as u32, s))
    };
    let mut unranked = console().filter(|&(si, _)| {
        v.rank_of(si).is_none()
            && !failed_before.contains(&si)
            && !waiters.contains(&Who::Source(si))
    });
    let (si, stream) = unranked.next()?;
    if unranked.next().is_some() {
        return None;
    }
    // Enough lines to tell an activity of MAX_ACTIVITY lines from a longer one.
    let lines = stream.ring.before(at.1, MAX_ACTIVITY + 1);
    let last = lines.last()?.seq;
    let later = console().any(|(other, s)| {
        other != si && s.ring.before(at.1, 1).first().is_some_and(|l| l.seq > last)
    });
    if later {
        return None;
    }
    Some((si, activity_start(&lines)?))
}

/// The seq of the first line after the last progress line (or of the first of `lines`, the
/// stream's last lines before the timeouts), when the activity is at most `MAX_ACTIVITY`
/// lines. With nothing after it, a bar drawn to its end (`16/16`) is the activity's mark: the
/// loop was over, and what the process did next printed nothing while the others waited.
fn activity_start(lines: &[RingLine]) -> Option<u64> {
    let last_progress = lines.iter().rposition(|l| is_progress(&l.text));
    let after = last_progress.map_or(0, |p| p + 1);
    let activity = lines.get(after..)?;
    if activity.is_empty() {
        let bar = &lines[last_progress?];
        return bar_counts(&bar.text)
            .is_some_and(|(done, total)| done == total && total > 0)
            .then_some(bar.seq);
    }
    if activity.len() > MAX_ACTIVITY {
        return None;
    }
    activity
        .iter()
        .find(|l| l.opens_printed_record())
        .map(|l| l.seq)
}

/// A line that reports progress through a loop: a tqdm bar, a `[N/M]` counter, an ETA.
fn is_progress(text: &str) -> bool {
    bar_counts(text).is_some() || text.contains("eta:") || has_bracketed_counter(text)
}

/// A counter of done out of total in brackets: `[3400/3402]` (mmengine, detectron2), or one
/// field of a bracketed report, `[step=20800/23842,epoch=0]` (OLMo's step metrics).
fn has_bracketed_counter(text: &str) -> bool {
    text.split('[').skip(1).any(|rest| {
        let Some((inside, _)) = rest.split_once(']') else {
            return false;
        };
        inside.split(',').any(|field| {
            let value = field.split_once('=').map_or(field, |(_, v)| v);
            is_count_of_total(value.trim())
        })
    })
}

/// `N/M`, both whole numbers.
fn is_count_of_total(s: &str) -> bool {
    s.split_once('/')
        .is_some_and(|(done, total)| is_whole_number(done) && is_whole_number(total))
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{assert_finding, assert_not_finding, diagnose_untimed};

    fn timeout(rank: u32, seq: u32) -> String {
        format!(
            "[E ProcessGroupNCCL.cpp:828] [Rank {rank}] Watchdog caught collective operation \
             timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, Timeout(ms)=1800000) ran for \
             1800741 milliseconds before timing out.\n"
        )
    }

    const PROGRESS: &str = "10/26 11:25:41 - mmengine - INFO - Epoch(val)  [2][3400/3402]    \
        eta: 0:00:00  time: 0.1484";
    const EVAL: &str = "10/26 11:27:48 - mmengine - INFO - Evaluating bbox...";

    fn console(rank: u32, seq: u32) -> String {
        format!(
            "{PROGRESS}\n{EVAL}\nLoading and preparing results...\nindex created!\n{}{}",
            timeout(rank, seq),
            timeout(rank + 2, seq)
        )
    }

    #[test]
    fn the_work_after_the_last_progress_line_is_the_root() {
        let d = diagnose_untimed(&console(4, 987156));
        assert_finding(&d, EVAL, "busy_before_timeouts", "#987156");
    }

    #[test]
    fn a_start_up_collective_is_not_read() {
        let d = diagnose_untimed(&console(4, 3));
        assert_not_finding(&d, "busy_before_timeouts");
    }

    #[test]
    fn rank_zero_waiting_too_tells_nothing() {
        let d = diagnose_untimed(&console(0, 987156));
        assert_not_finding(&d, "busy_before_timeouts");
    }

    #[test]
    fn a_bar_drawn_to_its_end_marks_the_silent_work_after_it() {
        let bar = "1|16|Loss: 2.57: 100%|##########| 16/16 [00:25<00:00,  1.48s/it]";
        let waits = format!("{}{}", timeout(1, 15037), timeout(3, 15037));
        let d = diagnose_untimed(&format!("{bar}\n{waits}"));
        assert_finding(&d, bar, "busy_before_timeouts", "#15037");
        // A bar stopped half way is a loop still running: the activity is not in view.
        let half = "1|16|Loss: 2.57:  50%|#####     | 8/16 [00:12<00:12,  1.48s/it]";
        let d = diagnose_untimed(&format!("{half}\n{waits}"));
        assert_not_finding(&d, "busy_before_timeouts");
    }

    #[test]
    fn a_long_stream_of_work_is_not_one_activity() {
        let many: String = (0..20).map(|i| format!("metric {i}: 0.5\n")).collect();
        let d = diagnose_untimed(&format!("{PROGRESS}\n{many}{}", timeout(4, 987156)));
        assert_not_finding(&d, "busy_before_timeouts");
    }

    #[test]
    fn a_step_report_and_its_metrics_are_progress_not_work() {
        // allenai/OLMo#846's shape: a step's metrics, indented under its header, then the
        // timeouts hours later; the loop was running, nothing says what rank 0 did next.
        let report = "olmo.train:979  INFO    [step=20800/23842,epoch=0]\n    \
            train/CrossEntropyLoss=1.834\n    throughput/device/tokens_per_second=15,537\n";
        let d = diagnose_untimed(&format!(
            "{report}{}{}",
            timeout(2, 149489),
            timeout(3, 149489)
        ));
        assert_not_finding(&d, "busy_before_timeouts");
    }
}
