//! A launcher that has begun to end a step kills the tasks still running, and reports each as
//! killed: srun prints `task 1: Killed` after it printed another task's `Exited with exit code
//! 16` or `Job step aborted`. Such a report is the step's teardown, not a kill from outside (the
//! kernel's OOM killer, an operator), which is what the report means when it comes first. So a
//! launcher's cause report that follows, in the same console, a launcher line it explains has
//! its cause weight taken back, and the task is left with that earlier line as a symptom: the
//! failure is then whatever the tasks printed themselves.
//!
//! Only the launcher's own step-level lines count (subsystem `launcher`): the ranks' collateral
//! errors before a report of an OOM kill do not make the kill a teardown. Case: openucx/ucx#9383
//! (UCX could not connect to docker0's address; srun then reported task 0's exit and task 1
//! killed).

use super::Scope;
use crate::catalog::{Role, Signature};
use crate::correlate::board::Board;
use crate::correlate::view::View;

fn is_launcher(sig: &Signature) -> bool {
    sig.subsystem == "launcher"
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let whos: Vec<_> = board.cands.keys().copied().collect();
    for who in whos {
        let c = &board.cands[&who];
        let Some(ci) = c.cause else { continue };
        let report = v.hit(ci);
        let Some(sig) = v
            .sig(report)
            .filter(|s| s.role == Role::Cause && is_launcher(s))
        else {
            continue;
        };
        let earlier = scope.hits.iter().copied().find(|&i| {
            let h = v.hit(i);
            h.source == report.source
                && h.seq < report.seq
                && h.sig.is_some_and(|s| sig.explains_idx.contains(&s))
                && v.sig(h).is_some_and(is_launcher)
        });
        let Some(first) = earlier else { continue };
        let id = v.sig(v.hit(first)).map_or("", |s| s.id.as_str());
        let why = format!("reported after the launcher's {id}: the step was being torn down");
        board
            .take_back_cause(who, "step_teardown", why)
            .symptom
            .get_or_insert(ci);
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose_untimed, root_line};

    const UCX: &str = "[1695332443.361791] [gpu-a0:1224050:0]            sock.c:323  UCX  \
        ERROR   connect(fd=42, dest_addr=172.17.0.1:54351) failed: Connection refused";
    const EXITED: &str = "srun: error: gpu-a0: task 0: Exited with exit code 16";
    const KILLED: &str = "srun: error: gpu-a1: task 1: Killed";

    #[test]
    fn a_task_killed_after_another_exited_is_teardown() {
        let d = diagnose_untimed(&format!("{UCX}\n{EXITED}\n{KILLED}\n"));
        assert_eq!(root_line(&d), UCX);
    }

    #[test]
    fn a_task_killed_first_stays_the_cause() {
        let d = diagnose_untimed(&format!("step 1200 loss 2.31\n{KILLED}\n{EXITED}\n"));
        assert_eq!(root_line(&d), KILLED);
    }
}
