//! A crash is the cause of the failures it explains only when it comes first. A process that
//! had already reported such a failure itself (its watchdog timed out, its NCCL call failed,
//! its peer closed the connection) and crashed afterwards crashed while tearing down: NCCL's
//! abort path and the watchdog's own SIGABRT are where teardown crashes happen. Such a crash
//! report stops being a cause (its `cause_signature` weight is taken back and the process is
//! left with the failure it reported first), so the rank the failure started on is found as
//! if the crash had not been printed.
//!
//! Crash reports are the causes whose signatures extract a `signal_name` or `heap_error`
//! (crash handlers, faulthandler, glibc heap checks, a shell's report), or the `signal` a
//! process says it received (torchrun's agent: when srun reported a task's exit before it, the
//! signal is srun ending the step, pytorch #116974); a launcher's report about a process is
//! not the process's own and is left alone. Case: NCCL #2213 (a SIGSEGV on
//! one rank, the peer's watchdog timeout after it: the crash stays the cause); a process
//! whose `Watchdog caught collective operation timeout` precedes its own `*** SIGSEGV received`
//! (teardown: the timeout it shares with the other ranks decides).

use super::Scope;
use crate::catalog::{Role, Signature};
use crate::correlate::board::{Board, Cand};
use crate::correlate::view::View;

/// The fields a crash report or a received signal is stated in.
const SIGNAL_FIELDS: &[&str] = &[
    "(?P<signal_name>",
    "(?P<heap_error>",
    "(?P<signal>",
    "(?P<signum>",
];

pub(crate) fn is_crash_report(sig: &Signature) -> bool {
    sig.role == Role::Cause
        && sig
            .fields
            .iter()
            .any(|f| SIGNAL_FIELDS.iter().any(|name| f.contains(name)))
}

/// A candidate's cause line when it is a crash report the process printed about itself (a
/// launcher's report about another process is not): the hit and its signature.
pub(super) fn own_crash<'v>(v: &'v View, c: &Cand) -> Option<(usize, &'v Signature)> {
    let ci = c.cause?;
    let crash = v.hit(ci);
    let sig = v.sig(crash).filter(|s| is_crash_report(s))?;
    (v.subject(crash) == v.printer(crash)).then_some((ci, sig))
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let whos: Vec<_> = board.cands.keys().copied().collect();
    for who in whos {
        let Some((ci, sig)) = own_crash(v, &board.cands[&who]) else {
            continue;
        };
        let crash = v.hit(ci);
        // A failure the crash would explain, reported earlier by the same process.
        let earlier = scope.hits_of(v, crash.source).iter().copied().find(|&i| {
            let h = v.hit(i);
            h.seq < crash.seq && h.sig.is_some_and(|s| sig.explains_idx.contains(&s))
        });
        let Some(first) = earlier else { continue };
        let id = v.sig(v.hit(first)).map_or("", |s| s.id.as_str());
        let why = format!("crashed only after it had reported {id} itself (a teardown crash)");
        let c = board.take_back_cause(who, "crash_teardown", why);
        c.symptom.get_or_insert(first);
        c.ts = v.hit_time(v.hit(first));
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const TIMEOUT: &str = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=41, \
        OpType=ALLGATHER, NumelIn=64, NumelOut=512, Timeout(ms)=600000) ran for 600009 \
        milliseconds before timing out.";

    #[test]
    fn a_crash_after_the_process_timed_out_is_not_the_cause() {
        let d = diagnose(&format!(
            "[rank2]:[E0301 10:00:00.100000000 ProcessGroupNCCL.cpp:632] [Rank 2] {TIMEOUT}\n\
             [rank5]:[E0301 10:00:00.300000000 ProcessGroupNCCL.cpp:632] [Rank 5] {TIMEOUT}\n\
             [rank5]:*** SIGSEGV received at time=1709287201 on cpu 3 ***\n"
        ));
        assert!(
            root_line(&d).contains("[Rank 2] Watchdog"),
            "{}",
            root_line(&d)
        );
    }

    #[test]
    fn a_crash_before_the_peers_timeouts_is_the_cause() {
        let crash = "[rank5]:*** SIGSEGV received at time=1709286600 on cpu 3 ***";
        let d = diagnose(&format!(
            "{crash}\n[rank2]:[E0301 10:00:00.100000000 ProcessGroupNCCL.cpp:632] [Rank 2] {TIMEOUT}\n"
        ));
        assert_eq!(root_line(&d), crash);
    }
}
