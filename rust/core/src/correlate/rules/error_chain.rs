//! Where a process's failure starts. Three shapes move a candidate's root line earlier than
//! its strongest cause line:
//! - the same error text printed earlier by the same process (a `what():` repeat, an
//!   exception re-raised by the watchdog): the first occurrence is the root line;
//! - the failed attempts a summary line sums up: warnings of the same process that begin
//!   with the same words, printed just before it (c10d's `failed to connect to [addr]:port
//!   (errno: 110 - Connection timed out)` for each address, then `failed to connect to any
//!   network address of (host, port)`): the first attempt, which carries the errno, is where
//!   the failure shows first;
//! - NCCL's error-return trace (`misc/socket.cc:567 -> 2`, hits with an `error_return`
//!   field) running straight into the cause line: the failure started where the trace starts,
//!   often in a call that printed no WARN of its own. A trace line that names its thread
//!   (`proxy.cc:872 -> 6 [Progress Thread]`) is where the error left the thread's top
//!   function: that trace ends there and leads into nothing printed after it. When such a
//!   line is all a process shows of a failure (an excerpt cut mid-trace), the process's next
//!   failure line stands for it (a warning or worse: an INFO `Abort COMPLETE` is a
//!   consequence), or else its next trace, the first one wholly in view.
//!   Cases: nccl-tests #231 (every thread of a process prints the same `-> 3` bootstrap
//!   trace, the excerpt opening at one's last line), NCCL #1039 (a proxy thread's `-> 2`,
//!   then the communicator's abort notice).

use crate::catalog::Severity;
use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::View;
use crate::prefix::peel;

/// Shortest shared tail of two messages that makes them the same error.
const MIN_SHARED_TAIL: usize = 32;
/// Blank lines NCCL leaves between a trace and the WARN that follows it.
const MAX_LINE_GAP: u64 = 2;
/// Lines after a WARN in which its own trace is looked for.
const REPEAT_WINDOW: usize = 16;
/// Shortest shared head of a summary line and the attempts it sums up.
const MIN_SHARED_HEAD: usize = 40;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let roots: Vec<_> = board
        .cands
        .values()
        .filter_map(|c| c.cause.map(|i| (c.who, c.host, i)))
        .collect();
    for (who, host, cause) in roots {
        let srcs = v.sources_of_who(who);
        let mut start = cause;
        if let Some(first) = first_occurrence(v, scope, &srcs, cause) {
            start = first;
            let why = "the same error was printed earlier by this process".to_string();
            board.add(who, host, "error_chain", 0, why);
        }
        if let Some(first) = first_attempt(v, scope, start) {
            start = first;
            let why = "the failed attempts this line sums up start here".to_string();
            board.add(who, host, "error_chain", 0, why);
        }
        // Decided before the moves below: a later failure line standing for the cut trace
        // (a summary the test or the framework printed) does not bring its start into view.
        let cut = opens_file_mid_trace(v, scope, start);
        let mut whole_in_view = false;
        if v.hit(start).field("error_return").is_some() {
            // Only a trace: the line it follows, if any, is where this failure was printed.
            if let Some(head) = failure_before(v, scope, start) {
                start = head;
                let why = "the error-return trace follows this process's failure line".to_string();
                board.add(who, host, "error_chain", 0, why);
            } else if ends_trace(message(v, start)) {
                // The trace's last line, its failure not in view (an excerpt cut mid-trace):
                // the process's next failure line stands for it.
                if let Some(next) = failure_after(v, scope, start) {
                    start = next;
                    let why = "the error-return trace before this line ends an earlier failure \
                               that is not in view"
                        .to_string();
                    board.add(who, host, "error_chain", 0, why);
                } else if let Some(next) = trace_after(v, scope, start) {
                    start = next;
                    let why = "the first error-return trace of this process wholly in view \
                               starts here"
                        .to_string();
                    board.add(who, host, "error_chain", 0, why);
                }
            } else if cut {
                // An excerpt that opens inside a trace whose last line is not marked: the
                // process's first failure shown from its first line (a WARN its own trace
                // follows) stands for the failure (xgboost#7982: a cut `proxy.cc:942 -> 2`,
                // then `Call to recv from 172.18.0.1<…> failed : Broken pipe` and its trace).
                if let Some(next) = whole_failure_after(v, scope, start) {
                    start = next;
                    whole_in_view = true;
                    let why = "the file opens inside an error-return trace; this is the \
                               process's first failure shown from its first line"
                        .to_string();
                    board.add(who, host, "error_chain", 0, why);
                }
            }
        } else if let Some(chain) = chain_start(v, scope, start) {
            start = chain;
            let why = format!(
                "the failure starts at the error-return trace {} lines earlier",
                v.hit(cause).line_no.saturating_sub(v.hit(chain).line_no)
            );
            board.add(who, host, "error_chain", 0, why);
        }
        if cut && !whole_in_view {
            // An excerpt that begins inside a trace: the failure it ends was cut off, so it
            // says less than a failure shown from its first line; between otherwise equal
            // candidates, the one whose failure is in view comes first.
            let why = "the file opens inside this error-return trace: the failure it ends is \
                       not in view"
                .to_string();
            board.add(who, host, "error_chain", -1, why);
        }
        if start != cause {
            board.cand(who, host).first_line = Some(start);
        }
    }
}

/// `start` is an error-return trace line that the file opens with: nothing of any process
/// was recognised before it, within the blank lines NCCL leaves around a trace.
fn opens_file_mid_trace(v: &View, scope: &Scope, start: usize) -> bool {
    let s = v.hit(start);
    s.field("error_return").is_some()
        && s.line_no <= 1 + MAX_LINE_GAP
        && !starts_trace(message(v, start))
        && !scope.hits_in(v, &s.origin).iter().any(|&i| {
            let h = v.hit(i);
            h.origin == s.origin && h.line_no < s.line_no
        })
}

/// The message of hit `i` after its prefixes, without trailing blanks.
pub(super) fn message<'a>(v: &View<'a>, i: usize) -> &'a str {
    let text = &v.hit(i).text;
    let meta = peel(text, v.cfg.default_year);
    meta.message(text).trim_end()
}

fn shared_tail(a: &str, b: &str) -> usize {
    a.bytes()
        .rev()
        .zip(b.bytes().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// An earlier hit of the same process, in the same file (order across files is unknown),
/// whose message ends with the same error text.
fn first_occurrence(v: &View, scope: &Scope, srcs: &[u32], cause: usize) -> Option<usize> {
    let msg = message(v, cause);
    let cause_seq = v.hit(cause).seq;
    let origin = &v.hit(cause).origin;
    scope
        .hits_in(v, origin)
        .iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            // Lines of the same file that carry no identity (a bare Python traceback) may be
            // this process's too; another host's or pid's lines are not.
            let anonymous =
                v.rank_of(h.source).is_none() && v.job.sources[h.source as usize].pid.is_none();
            let ours = srcs.contains(&h.source) || anonymous;
            h.seq < cause_seq
                && ours
                && &h.origin == origin
                && !crate::correlate::recovered(v.job, v.cat, h)
        })
        .filter(|&i| provably_before(v, i, cause))
        .filter(|&i| {
            let tail = shared_tail(message(v, i), msg);
            tail >= MIN_SHARED_TAIL && !states_cause_before(v, cause, msg, tail)
        })
        .min_by_key(|&i| v.hit(i).seq)
}

/// Whether the cause's own signature matches the part of its message before the `tail` bytes
/// it shares with an earlier line: the earlier line then shares only what followed the cause
/// (two processes' output run together on one line: NCCL's `Failed to find reverse path …`
/// with torch's `NCCL error in: …` glued after it, vLLM #4062), not the cause itself.
fn states_cause_before(v: &View, cause: usize, msg: &str, tail: usize) -> bool {
    let Some(sig) = v.hit(cause).sig else {
        return false;
    };
    let head = &msg.as_bytes()[..msg.len().saturating_sub(tail)];
    if head.is_empty() {
        return false;
    }
    v.cat.signatures_matching(head).contains(&sig)
}

/// The first of the unclassified warnings that run straight into `summary` from the same
/// process and file, each beginning with the same words as it: the attempts it sums up.
/// Any other hit of the process in between breaks the run.
fn first_attempt(v: &View, scope: &Scope, summary: usize) -> Option<usize> {
    let s = v.hit(summary);
    let head = message(v, summary);
    let mut before: Vec<usize> = scope
        .hits_of(v, s.source)
        .iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            h.origin == s.origin && h.line_no < s.line_no
        })
        .collect();
    before.sort_by_key(|&i| std::cmp::Reverse(v.hit(i).line_no));
    let mut first = None;
    for i in before {
        let h = v.hit(i);
        let attempt = h.sig.is_none()
            && h.warn_only
            && shared_head(message(v, i), head) >= MIN_SHARED_HEAD
            && provably_before(v, i, summary);
        if !attempt {
            break;
        }
        first = Some(i);
    }
    first
}

fn shared_head(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Arrival order says nothing when the later line printed its own time and the earlier one
/// did not (stdout and stderr of one process interleave arbitrarily): then only two printed
/// times can order them.
fn provably_before(v: &View, earlier: usize, later: usize) -> bool {
    let (a, b) = (v.hit(earlier), v.hit(later));
    match (a.ts_exact, b.ts_exact) {
        (true, true) => a.ts_ms <= b.ts_ms,
        (false, true) => false,
        _ => true,
    }
}

/// The first line of an unbroken error-return trace that leads into `line`.
fn chain_start(v: &View, scope: &Scope, line: usize) -> Option<usize> {
    let target = v.hit(line);
    let mut cur = line;
    let mut chain = Vec::new();
    loop {
        let c = v.hit(cur);
        let prev = scope.hits_of(v, target.source).iter().copied().find(|&i| {
            let h = v.hit(i);
            h.field("error_return").is_some()
                && !ends_trace(message(v, i))
                && h.origin == target.origin
                && h.line_no < c.line_no
                && h.line_no + MAX_LINE_GAP >= c.line_no
        });
        match prev {
            Some(p) => {
                cur = p;
                chain.push(p);
            }
            None => break,
        }
    }
    if cur == line || failure_before(v, scope, cur).is_some() || repeats_after(v, &chain, line) {
        return None;
    }
    Some(cur)
}

/// Every line of the trace before `line` comes again in the lines its process printed right
/// after it: it is the tail of an earlier attempt at the same call (its WARN cut off or
/// printed before), not a call that failed without a WARN. The ring is read, not the hits:
/// a long trace's later lines are over the per-process cap of hits. Case: skypilot#4448,
/// `transport/net.cc:687 -> 2` above the `socketStartConnect` WARN whose own trace ends in
/// the same line.
fn repeats_after(v: &View, chain: &[usize], line: usize) -> bool {
    let target = v.hit(line);
    let year = v.cfg.default_year;
    let mut after: Vec<(u64, String)> = v.job.sources[target.source as usize]
        .ring
        .lines()
        .into_iter()
        .filter(|l| l.seq > target.seq)
        .map(|l| {
            let meta = peel(&l.text, year);
            (l.seq, meta.message(&l.text).trim_end().to_string())
        })
        .collect();
    after.sort_by_key(|(seq, _)| *seq);
    after.truncate(REPEAT_WINDOW);
    !chain.is_empty()
        && chain
            .iter()
            .all(|&i| after.iter().any(|(_, m)| m == message(v, i)))
}

/// NCCL's last line of an error-return trace: the thread's top function names the thread
/// (`-> 6 [Progress Thread]`, `[Proxy Thread]`, `[Async thread]`).
/// A frame that carries its system call's errno text (`misc/socket.cc:505 -> 2 (Operation
/// now in progress)`, NCCL 2.18.3+): the call that failed, so the trace starts there.
fn starts_trace(msg: &str) -> bool {
    msg.rsplit_once(" -> ").is_some_and(|(_, code)| {
        code.trim_start_matches(|c: char| c.is_ascii_digit())
            .starts_with(" (")
    })
}

fn ends_trace(msg: &str) -> bool {
    msg.strip_suffix(']')
        .and_then(|m| m.rsplit_once(" ["))
        .is_some_and(|(_, tag)| tag.to_ascii_lowercase().ends_with("thread"))
}

/// The first failure line (not a trace line) the same process printed after `start`. A
/// notice at INFO (`Abort COMPLETE`) is what the failure led to, not an account of it.
fn failure_after(v: &View, scope: &Scope, start: usize) -> Option<usize> {
    let s = v.hit(start);
    scope
        .hits_of(v, s.source)
        .iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            h.origin == s.origin
                && h.field("error_return").is_none()
                && v.sig(h).is_none_or(|sig| sig.severity >= Severity::Warning)
                && h.line_no > s.line_no
        })
        .min_by_key(|&i| v.hit(i).line_no)
}

/// The process's first failure line after `start` that its own error-return trace follows
/// (within the blank lines NCCL leaves): a failure whose account starts in view.
fn whole_failure_after(v: &View, scope: &Scope, start: usize) -> Option<usize> {
    let s = v.hit(start);
    let hits = scope.hits_of(v, s.source);
    // The process's next line in view after `f` is a trace line, within NCCL's blank lines.
    let traced = |f: &crate::job::Hit| {
        hits.iter()
            .map(|&j| v.hit(j))
            .filter(|t| t.origin == f.origin && t.line_no > f.line_no)
            .min_by_key(|t| t.line_no)
            .is_some_and(|t| {
                t.field("error_return").is_some() && t.line_no <= f.line_no + MAX_LINE_GAP + 1
            })
    };
    hits.iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            h.origin == s.origin
                && h.line_no > s.line_no
                && h.field("error_return").is_none()
                && v.sig(h).is_none_or(|sig| sig.severity >= Severity::Warning)
                && traced(h)
        })
        .min_by_key(|&i| v.hit(i).line_no)
}

/// After the last line of a trace whose start is not in view, the process's next trace line:
/// where its first trace wholly in view starts (a thread's failure, as the other threads of a
/// process that fail alike print theirs one after another).
fn trace_after(v: &View, scope: &Scope, start: usize) -> Option<usize> {
    let s = v.hit(start);
    scope
        .hits_of(v, s.source)
        .iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            h.origin == s.origin && h.field("error_return").is_some() && h.line_no > s.line_no
        })
        .min_by_key(|&i| v.hit(i).line_no)
}

/// NCCL prints a trace after the WARN that started it: a trace right behind another failure
/// line of the same process is that failure's tail; returns that line.
fn failure_before(v: &View, scope: &Scope, start: usize) -> Option<usize> {
    let s = v.hit(start);
    scope.hits_of(v, s.source).iter().copied().find(|&i| {
        let h = v.hit(i);
        h.origin == s.origin
            && h.field("error_return").is_none()
            && h.line_no < s.line_no
            && h.line_no + MAX_LINE_GAP + 1 >= s.line_no
    })
}

#[cfg(test)]
mod tests {
    use super::{ends_trace, starts_trace};
    use crate::correlate::testkit::{diagnose, root_line};

    const WARN: &str = "tn-41:5120:5188 [2] ib_plugin.c:1007 NCCL WARN NET/IB : Got completion \
        from peer 10.9.8.7<41022> with error 5, opcode 0, len 0, vendor err 249";

    #[test]
    fn a_cause_glued_before_an_earlier_error_is_not_that_error_repeated() {
        // Two processes' output ran together: NCCL's text after `Last error:` has torch's
        // error line glued to its end, the same line the file opened with. The earlier line
        // shares only the glued tail; the cause is the text before it.
        let torch = "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, \
            internal error - please report this issue to the NCCL developers, NCCL version 2.18.1";
        let glued = format!(
            "Failed to find reverse path from remNode 0/52000 nlinks 3 to node 0/17000{torch}"
        );
        let log = format!(
            "torch.distributed.DistBackendError: {torch}\nncclInternalError: Internal check \
             failed.\nLast error:\n{glued}\n"
        );
        let d = diagnose(&log);
        assert_eq!(root_line(&d), glued);
    }

    #[test]
    fn a_repeat_of_the_whole_error_still_starts_at_its_first_occurrence() {
        let first = "[rank2]:[E1203 10:00:01.000000 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 2] \
            Process group watchdog thread terminated with exception: NCCL error: remote process \
            exited or there was a network error, NCCL version 2.20.5";
        let what = "  what():  [PG 0 Rank 2] Process group watchdog thread terminated with \
            exception: NCCL error: remote process exited or there was a network error, NCCL \
            version 2.20.5";
        let log = format!(
            "{first}\n[rank2]:terminate called after throwing an instance of \
             'c10::DistBackendError'\n[rank2]:{what}\n"
        );
        let d = diagnose(&log);
        assert_eq!(root_line(&d), first);
    }

    #[test]
    fn a_failure_in_view_beats_a_trace_the_excerpt_opens_inside() {
        // The excerpt starts inside one process's trace (its WARN was cut off); another
        // process shows its WARN and the trace after it. The failure in view is the root.
        let cut = "tn-44:7310:7398 [3] NCCL INFO group.cc:64 -> 3 [Async thread]";
        let warn = "tn-44:7311:7402 [4] misc/socket.cc:397 NCCL WARN Net : connecting to \
            address  with family 40110 is neither AF_INET(2) nor AF_INET6(10)";
        let log = format!(
            "{cut}\ntn-44:7310:7310 [3] NCCL INFO group.cc:421 -> 3\n\n{warn}\n\
             tn-44:7311:7402 [4] NCCL INFO bootstrap.cc:256 -> 3\n\
             tn-44:7311:7402 [4] NCCL INFO init.cc:516 -> 3\n"
        );
        let d = diagnose(&log);
        assert_eq!(root_line(&d), warn);
    }

    #[test]
    fn a_cut_trace_gives_way_to_the_first_failure_shown_from_its_start() {
        // The excerpt opens on the tail of an earlier attempt's trace and its proxy summary;
        // the next attempt shows its WARN and then its trace.
        let h = "ip-10-0-3-7:28056:39685 [0]";
        let recv = format!(
            "{h} misc/socket.cc:503 NCCL WARN Net : Call to recv from 172.18.0.1<34483> \
             failed : Broken pipe"
        );
        let summary = format!(
            "{h} proxy.cc:1040 NCCL WARN [Proxy Service 3] Failed to execute operation \
             Connect from rank 3, retcode 2"
        );
        let log = format!(
            "{h} NCCL INFO proxy.cc:942 -> 2\n\n{summary}\n\n{recv}\n\
             {h} NCCL INFO misc/socket.cc:520 -> 2\n{h} NCCL INFO proxy.cc:914 -> 2\n\n\
             {summary}\n"
        );
        assert_eq!(root_line(&diagnose(&log)), recv);
    }

    #[test]
    fn a_trace_that_ends_the_warns_own_trace_again_is_an_earlier_attempt() {
        // The excerpt opens on the last line of an earlier connect attempt's trace; the WARN
        // after it is followed by the same trace (longer than the hits kept per process): the WARN
        // is where the failure shows.
        let h = "node-0:11172:11249 [3]";
        let log = format!(
            "{h} NCCL INFO transport/net.cc:687 -> 2\n\n\
             {h} misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.0.0.9<51577> failed : Software caused connection abort\n\
             {h} NCCL INFO misc/socket.cc:567 -> 2\n\
             {h} NCCL INFO misc/socket.cc:589 -> 2\n\
             {h} NCCL INFO misc/socket.cc:612 -> 2\n\
             {h} NCCL INFO transport/net_socket.cc:339 -> 2\n\
             {h} NCCL INFO transport/net.cc:687 -> 2\n"
        );
        let d = diagnose(&log);
        assert!(
            root_line(&d).contains("NCCL WARN socketStartConnect"),
            "{}",
            root_line(&d)
        );
    }

    #[test]
    fn a_frame_with_its_errno_text_is_where_a_trace_starts() {
        assert!(starts_trace(
            "misc/socket.cc:505 -> 2 (Operation now in progress)"
        ));
        assert!(!starts_trace("misc/socket.cc:570 -> 2"));
        assert!(!starts_trace("group.cc:64 -> 3 [Async thread]"));
    }

    #[test]
    fn a_summary_after_the_cut_trace_does_not_bring_its_failure_into_view() {
        // The cut process's next failure line (the test's own report) stands for its trace;
        // the other process still shows its failure from the first line.
        let cut = "[1,0]<stdout>:tn-44:7310:7398 [3] NCCL INFO group.cc:64 -> 3 [Async thread]";
        let report = "[1,0]<stdout>:tn-44: Test NCCL failure common.cu:1057 'internal error / '";
        let warn = "[1,1]<stdout>:tn-44:7311:7402 [4] misc/socket.cc:397 NCCL WARN Net : \
            connecting to address  with family 40110 is neither AF_INET(2) nor AF_INET6(10)";
        let log = format!(
            "{cut}\n{report}\n{warn}\n\
             [1,1]<stdout>:tn-44:7311:7402 [4] NCCL INFO bootstrap.cc:256 -> 3\n\
             [1,1]<stdout>:tn-44: Test NCCL failure common.cu:1057 'internal error / '\n"
        );
        let d = diagnose(&log);
        assert_eq!(root_line(&d), warn);
    }

    #[test]
    fn a_trace_that_opens_the_file_alone_is_still_the_root() {
        let cut = "tn-44:7310:7398 [3] NCCL INFO graph/xml.cc:469 -> 2";
        let d = diagnose(&format!(
            "{cut}\ntn-44:7310:7398 [3] NCCL INFO init.cc:540 -> 2\n"
        ));
        assert_eq!(root_line(&d), cut);
    }

    #[test]
    fn a_thread_tag_ends_a_trace() {
        assert!(ends_trace("proxy.cc:872 -> 6 [Progress Thread]"));
        assert!(ends_trace("group.cc:68 -> 3 [Async thread]"));
        assert!(!ends_trace("misc/socket.cc:564 -> 2"));
        assert!(!ends_trace("proxy.cc:1119 -> 6 [Proxy Service 9]"));
    }

    #[test]
    fn the_tail_of_an_earlier_trace_is_not_where_the_next_failure_starts() {
        let tail = "tn-41:5120:5188 [2] NCCL INFO proxy.cc:872 -> 6 [Progress Thread]";
        let after = "tn-41:5120:5188 [2] NCCL INFO transport/net.cc:1117 -> 6";
        let d = diagnose(&format!("{tail}\n\n{WARN}\n{after}\n"));
        assert_eq!(root_line(&d), WARN);
    }

    #[test]
    fn a_summary_line_starts_at_the_first_attempt_it_sums_up() {
        let v6 = "[W socket.cpp:601] [c10d] The client socket has failed to connect to \
            [::ffff:10.20.0.9]:29511 (errno: 110 - Connection timed out).";
        let v4 = "[W socket.cpp:601] [c10d] The client socket has failed to connect to \
            10.20.0.9:29511 (errno: 110 - Connection timed out).";
        let sum = "[E socket.cpp:652] [c10d] The client socket has failed to connect to any \
            network address of (trainhost-3, 29511).";
        let d = diagnose(&format!("{v6}\n{v4}\n{sum}\n"));
        assert_eq!(root_line(&d), v6);
        // Another warning of the process in between breaks the run of attempts.
        let other = "[W init.cpp:20] [c10d] some other warning the launcher printed here";
        let d = diagnose(&format!("{v6}\n{other}\n{sum}\n"));
        assert_eq!(root_line(&d), sum);
        // A warning that only shares a few words with the failure is not one of its attempts.
        let unrelated = "[W socket.cpp:601] [c10d] The client socket will retry later.";
        let d = diagnose(&format!("{unrelated}\n{sum}\n"));
        assert_eq!(root_line(&d), sum);
    }

    #[test]
    fn the_next_trace_stands_for_a_cut_one_when_no_failure_line_follows() {
        // Every thread of one process prints the same trace; the excerpt opens at the last
        // line of one of them. The next thread's trace is the first wholly in view.
        let tail = "mb-7:2210:2265 [5] NCCL INFO group.cc:70 -> 3 [Async thread]";
        let first = "mb-7:2210:2266 [6] NCCL INFO misc/socket.cc:47 -> 3";
        let d = diagnose(&format!(
            "{tail}\n{first}\nmb-7:2210:2266 [6] NCCL INFO bootstrap.cc:90 -> 3\n\
             mb-7:2210:2266 [6] NCCL INFO group.cc:70 -> 3 [Async thread]\n"
        ));
        assert_eq!(root_line(&d), first);
    }

    #[test]
    fn an_abort_notice_does_not_stand_for_a_cut_trace() {
        let proxy = "wk-0:293:765 [0] NCCL INFO proxy.cc:614 -> 2 [Proxy Thread]";
        let abort = "wk-0:293:763 [0] NCCL INFO comm 0x7fda2c015e20 rank 0 nranks 4 cudaDev 0 \
            busId d9000 - Abort COMPLETE";
        let d = diagnose(&format!("{proxy}\n{abort}\n"));
        assert_eq!(root_line(&d), proxy);
    }

    #[test]
    fn an_open_trace_still_leads_into_the_warn_after_it() {
        let open = "tn-41:5120:5188 [2] NCCL INFO misc/socket.cc:564 -> 2";
        let d = diagnose(&format!("{open}\n\n{WARN}\n"));
        assert_eq!(root_line(&d), open);
    }
}
