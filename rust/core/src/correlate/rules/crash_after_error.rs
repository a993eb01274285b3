//! A crash that follows, within a few lines, an error its own process had just reported ended
//! the failure that error started: a library reports the call that failed (UCX's
//! `connect(…) failed: Connection refused`, `failed to create UD QP … Invalid argument`) and
//! the code above it goes on with the broken handle and segfaults. The crash keeps its weight
//! (the process is still the one that failed), but its root line becomes that first error,
//! as `error_chain` moves a root to where the same failure showed first.
//!
//! Only errors, not warnings; not a traceback's header; not another crash report (a crash
//! handler prints several lines); not a symptom (a timeout or a peer's abort before a crash is
//! `crash_teardown`'s). The error must lie within `NEAR_LINES` lines before the crash, in its
//! stream and in its file: further back it is history, not the crash's cause. Nor may a line
//! announcing a listing lie between them (pyxis's `printing enroot log file:` before the
//! hook's segfault, pyxis #122): the crash then belongs to the listing, which the error only
//! sums up.
//!
//! A crash report that names no process (Julia's `signal (11): Segmentation fault`) takes the
//! error from any stream of its file within those lines: the lines around it are its
//! process's (MPI.jl #532, held-out set 93: UCX's `gdr_pin_buffer failed` just above it).
//!
//! Cases (held-out set 74, found before this rule): NeMo-Aligner #541 (UCX's refused connect
//! to a link-local address, Open MPI's `ucp_ep_create … failed`, then `Caught signal 11`),
//! ai-dynamo/dynamo #285 (UCX failing to create a UD QP on an eRDMA device, then the segfault
//! in `ucp_worker_query`).

use super::crash_teardown::{is_crash_report, own_crash};
use super::unexplained_error::is_header;
use super::Scope;
use crate::catalog::Role;
use crate::correlate::board::Board;
use crate::correlate::view::View;

/// How many lines an error may lie before the crash (in its stream and in its file) and still
/// be its cause.
const NEAR_LINES: usize = 6;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let whos: Vec<_> = board.cands.keys().copied().collect();
    for who in whos {
        let c = &board.cands[&who];
        let Some((ci, _)) = own_crash(v, c) else {
            continue;
        };
        let Some(err) = error_before(v, scope, ci) else {
            continue;
        };
        if c.first_line.is_some_and(|f| v.hit(f).seq <= v.hit(err).seq) {
            continue;
        }
        let why = "crashed just after reporting this error itself".to_string();
        let host = c.host;
        board.add(who, host, "crash_after_error", 0, why);
        let c = board.cand(who, host);
        c.first_line = Some(err);
        c.ts = v.hit_time(v.hit(err)).or(c.ts);
    }
}

/// The first error the crashing process printed within `NEAR_LINES` of its stream before the
/// crash line `ci`.
fn error_before(v: &View, scope: &Scope, ci: usize) -> Option<usize> {
    let crash = v.hit(ci);
    let window = v.job.sources[crash.source as usize]
        .ring
        .before(crash.seq, NEAR_LINES);
    // A line that announces a listing (`printing enroot log file:`) starts another account:
    // what follows it was printed before, elsewhere, and the error above it sums it up.
    let from = match window
        .iter()
        .rposition(|l| l.text.trim_end().ends_with(':'))
    {
        Some(p) => window.get(p + 1)?.seq,
        // Nothing of its own before it (an anonymous report): the file's lines bound it.
        None => window.first().map_or(0, |l| l.seq),
    };
    // A crash report with no process of its own (Julia's `signal (11): Segmentation fault`
    // has no prefix) belongs to the process whose lines surround it in its file: the error
    // may come from any stream of that file.
    let candidates = if anonymous(v, crash.source) {
        scope.hits_in(v, &crash.origin)
    } else {
        scope.hits_of(v, crash.source)
    };
    candidates
        .iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            h.seq >= from
                && h.seq < crash.seq
                && h.origin == crash.origin
                && crash
                    .line_no
                    .checked_sub(h.line_no)
                    .is_some_and(|d| d <= NEAR_LINES as u64)
        })
        .filter(|&i| is_error(v, i))
        .min_by_key(|&i| v.hit(i).seq)
}

/// A stream that states neither its host nor its process.
fn anonymous(v: &View, src: u32) -> bool {
    v.job.sources[src as usize].pid.is_none() && v.host_of(src).is_none()
}

/// An error line of the process's own: unclassified at error level, or a cause that is not a
/// crash report.
fn is_error(v: &View, i: usize) -> bool {
    let h = v.hit(i);
    if h.warn_only || is_header(v, i) {
        return false;
    }
    match v.sig(h) {
        None => true,
        Some(s) => s.role == Role::Cause && !is_crash_report(s),
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const UCX: &str = "[1743560160.063188] [gpu-a3:23812:0]        ib_iface.c:1182 UCX  ERROR \
        erdma_0: iface 0x32ce7410 failed to create UD QP TX wr:256 sge:6: Invalid argument";
    const SEGV: &str =
        "[gpu-a3:23812:0:23812] Caught signal 11 (Segmentation fault: address not mapped to \
         object at address 0x70)";

    #[test]
    fn the_error_just_before_a_crash_is_its_root() {
        let d = diagnose(&format!(
            "{UCX}\n{SEGV}\n==== backtrace (tid:  23812) ====\n"
        ));
        assert_eq!(root_line(&d), UCX);
    }

    #[test]
    fn an_error_long_before_the_crash_is_history() {
        let progress: String = (0..10).map(|i| format!("step {i} loss 0.5\n")).collect();
        let d = diagnose(&format!("{UCX}\n{progress}{SEGV}\n"));
        assert_eq!(root_line(&d), SEGV);
    }

    #[test]
    fn an_error_that_introduces_a_listing_sums_the_crash_up() {
        let failed = "slurmstepd: error: pyxis: container start failed with error code: 1";
        let listing = "slurmstepd: error: pyxis: printing enroot log file:";
        let crash = "slurmstepd: error: pyxis:          3474707 Segmentation fault      (core \
            dumped) | pwck -R /etc/shadow";
        let d = diagnose(&format!("{failed}\n{listing}\n{crash}\n"));
        assert_ne!(root_line(&d), failed);
    }

    #[test]
    fn an_anonymous_crash_report_takes_the_error_printed_just_above_it() {
        let ucx = "[1642966632.503811] [gcn21:3820255:0]    gdr_copy_md.c:122  UCX  ERROR \
            gdr_pin_buffer failed. length :65536 ret:22";
        let d = diagnose(&format!(
            "{ucx}\n\nsignal (11): Segmentation fault\nin expression starting at test.jl:32\n"
        ));
        assert_eq!(root_line(&d), ucx);
    }

    #[test]
    fn a_warning_before_a_crash_is_not_its_root() {
        let warn = "[1743560160.063188] [gpu-a3:23812:0]        ib_iface.c:1182 UCX  WARN  \
            transport 'ud_verbs' is not available";
        let d = diagnose(&format!("{warn}\n{SEGV}\n"));
        assert_eq!(root_line(&d), SEGV);
    }
}
