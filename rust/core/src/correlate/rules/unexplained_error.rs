//! An error no signature knows, printed before anything the catalog recognises, in an incident
//! where every recognised line is a symptom: the symptoms (timeouts, aborts, a launcher's exit
//! reports, a peer's closed socket) followed from something the catalog does not know, and
//! the first error in view is the best account of it (another library's own error: UCX,
//! TensorFlow, an inference server's worker).
//!
//! A header is not an error of its own: a traceback's, or a line that ends on a colon (XLA
//! and glog print a status as `...nccl_utils.cc:245:` and its text on the next line); what
//! follows it says what failed.
//!
//! It weighs little: more than a process that only printed symptoms (a quarter of a symptom's
//! weight, 4 at most for the strongest), less than any comparison of ranks (a sequence-number
//! lag, a desync report, a collective mismatch, silence, 10 and more), which name the culprit
//! of a hang from what the ranks say about themselves.
//!
//! Cases (held-out, found before this rule): UCX's `mm_iface failed to allocate receive FIFO`
//! before a segfault and vLLM's `Error executing method init_device` before its worker's
//! teardown were first in view and unknown to the catalog.

use super::Scope;
use crate::correlate::board::Board;
use crate::correlate::view::View;
use crate::prefix::peel;

/// Above a symptom-only process's weight (at most 4), below any comparison of ranks (10+).
const WEIGHT: i32 = 6;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    if !scope.classified
        || board
            .cands
            .values()
            .any(|c| c.cause.is_some() || c.config.is_some())
    {
        return;
    }
    let recognised = |i: usize| v.hit(i).sig.is_some();
    let Some(first_known) = scope
        .hits
        .iter()
        .copied()
        .filter(|&i| recognised(i))
        .min_by_key(|&i| v.order_key(i))
    else {
        return;
    };
    let Some(err) = scope
        .hits
        .iter()
        .copied()
        .filter(|&i| !recognised(i) && !v.hit(i).warn_only && !is_header(v, i))
        .filter(|&i| order_known(v, i, first_known) && v.order_key(i) < v.order_key(first_known))
        .min_by_key(|&i| v.order_key(i))
    else {
        return;
    };
    let h = v.hit(err);
    let (who, host) = (v.printer(h), v.host_of(h.source));
    let why = "printed an error no signature knows before the first line the catalog \
               recognises"
        .to_string();
    board.add(who, host, "unexplained_error", WEIGHT, why);
    board.cand(who, host).first_line = Some(err);
}

/// Whether "before" means anything for two hits: lines of one file keep their order, and
/// timed lines have a clock; two files without times have none in common (the file read
/// first is not the process that failed first).
fn order_known(v: &View, a: usize, b: usize) -> bool {
    let timed = |i: usize| v.order_key(i).0 != i64::MAX;
    v.hit(a).origin == v.hit(b).origin || (timed(a) && timed(b))
}

pub(super) fn is_header(v: &View, i: usize) -> bool {
    let text = &v.hit(i).text;
    let meta = peel(text, v.cfg.default_year);
    let message = meta.message(text).trim();
    message.starts_with("Traceback (most recent call last)") || message.ends_with(':')
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, diagnose_files, root_line};

    const UCX: &str = "[1718010101.123456] [gpu-a3:4410:0]        mm_posix.c:194  UCX  ERROR \
        shared memory segment could not be mapped: Cannot allocate memory";
    const SEGV: &str = "Fatal Python error: Segmentation fault";
    const TIMEOUT: &str = "[rank1]:[E905 03:12:44.174648046 ProcessGroupNCCL.cpp:616] [Rank 1] \
        Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, \
        NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.";

    #[test]
    fn an_unknown_error_before_the_symptoms_is_where_they_start() {
        let d = diagnose(&format!("{UCX}\n{TIMEOUT}\n"));
        assert_eq!(root_line(&d), UCX);
    }

    #[test]
    fn an_error_ending_on_a_colon_is_the_header_of_the_next_line() {
        let head = "2022-06-29 12:36:12.905032: E external/xla/pjrt/pjrt_client.cc:2129] \
            Execution of replica 0 failed: INTERNAL: xla/service/gpu/nccl_utils.cc:245:";
        let body = " NCCL operation ncclCommInitRank(comm.get(), nranks, id, rank) failed: \
            unhandled cuda error";
        let d = diagnose(&format!("{head}\n{body}\n"));
        assert_eq!(root_line(&d), body);
    }

    #[test]
    fn files_without_times_give_no_order_across_them() {
        // meta-pytorch/torchx#540's shape: one actor's traceback cut before its exception,
        // another's ending in the rendezvous error; the first file read is not the first to fail.
        let cut =
            "(CommandActor pid=552, ip=10.130.6.168)   File \"/x/c10d_rendezvous_backend.py\", \
            line 73, in get_state\n(CommandActor pid=552, ip=10.130.6.168)     base64_state: \
            bytes = self._call_store(\"get\", self._key)\n";
        let error = "(CommandActor pid=553, ip=10.130.6.169) torch.distributed.elastic.rendezvous.\
            api.RendezvousConnectionError: The connection to the C10d store has failed. See \
            inner exception for details.";
        let d = diagnose_files(&[
            ("actor552.log", cut),
            ("actor553.log", &format!("{error}\n")),
        ]);
        assert_eq!(root_line(&d), error);
    }

    #[test]
    fn a_known_cause_or_a_later_unknown_error_changes_nothing() {
        // After the first recognised line, an unknown error is part of the aftermath.
        let d = diagnose(&format!("{TIMEOUT}\n{UCX}\n"));
        assert_eq!(root_line(&d), TIMEOUT);
        // A known cause outranks it (a signal report is one); only just before the crash
        // does the error lead it (`crash_after_error`).
        let progress: String = (0..8).map(|i| format!("step {i} loss 0.5\n")).collect();
        let d = diagnose(&format!("{UCX}\n{progress}{SEGV}\n"));
        assert_ne!(root_line(&d), UCX);
    }
}
