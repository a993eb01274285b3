//! A launcher's report that a worker exited with an error (torchrun's `failed (exitcode: 1)`)
//! is the cause only of a process that died without last words. Where the same process had
//! printed an error of its own before the report (its exception, NCCL's error), that error is
//! closer to the fault: the report's cause weight is taken back and the process is left with
//! its own first error, so the ranking reads it as if the report had not been printed.
//!
//! Launcher reports are the causes of subsystem `elastic` or `launcher` whose fields carry the
//! exit status (`exitcode`). Case: NCCL #697 (a worker's `unhandled system error`, then the
//! agent's exit report, in one console).

use super::Scope;
use crate::catalog::{Role, Severity, Signature};
use crate::correlate::board::Board;
use crate::correlate::view::View;

fn is_exit_report(sig: &Signature) -> bool {
    sig.role == Role::Cause
        && matches!(sig.subsystem.as_str(), "elastic" | "launcher")
        && sig.fields.iter().any(|f| f.contains("(?P<exitcode>"))
}

/// A line the process printed about its own failure: an error of a signature that is not
/// itself a launcher's.
fn is_own_error(sig: &Signature) -> bool {
    sig.severity >= Severity::Error
        && sig.role != Role::Context
        && !matches!(sig.subsystem.as_str(), "elastic" | "launcher")
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let whos: Vec<_> = board.cands.keys().copied().collect();
    for who in whos {
        let c = &board.cands[&who];
        let Some(ci) = c.cause else { continue };
        let report = v.hit(ci);
        if !v.sig(report).is_some_and(is_exit_report) {
            continue;
        }
        let own = scope.hits.iter().copied().find(|&i| {
            let h = v.hit(i);
            h.source == report.source && h.seq < report.seq && v.sig(h).is_some_and(is_own_error)
        });
        let Some(first) = own else { continue };
        let id = v.sig(v.hit(first)).map_or("", |s| s.id.as_str());
        let why = format!("printed {id} itself before its launcher reported the exit");
        let c = board.take_back_cause(who, "last_words", why);
        c.symptom = Some(first);
        c.ts = v.hit_time(v.hit(first));
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose_untimed, root_line};

    const NCCL_ERROR: &str = "RuntimeError: NCCL error in: /opt/torch/csrc/distributed/c10d/\
        ProcessGroupNCCL.cpp:1191, unhandled system error, NCCL version 2.14.3";
    const EXIT: &str = "ERROR:torch.distributed.elastic.multiprocessing.api:failed \
        (exitcode: 1) local_rank: 0 (pid: 2210) of binary: /usr/bin/python3";

    #[test]
    fn the_workers_own_error_before_the_exit_report_is_the_root() {
        let d = diagnose_untimed(&format!("{NCCL_ERROR}\n{EXIT}\n"));
        assert_eq!(root_line(&d), NCCL_ERROR);
    }

    #[test]
    fn an_exit_report_without_last_words_stays_the_root() {
        let d = diagnose_untimed(&format!("step 1200 loss 2.31\n{EXIT}\n"));
        assert_eq!(root_line(&d), EXIT);
    }
}
