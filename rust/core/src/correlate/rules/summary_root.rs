//! torchrun's failure summary lists every failed worker and, under `Root Cause (first observed
//! failure):`, the one whose failure the agent saw first; the entries under `Failures:` came
//! after it (a survivor's exit 1, a worker SIGKILLed after the SIGTERM grace period). Where a
//! process's strongest cause is an entry of such a summary, its line becomes the entry under
//! that header. No weight is added: which process leads is decided elsewhere. Case: CogVLM#320
//! (rank 1's exit 1 listed first under `Failures:`, rank 0's SIGKILL under the header).

use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::View;

/// The header is followed by the entry's `[N]:`, time, host, rank and then its exit code.
const ENTRY_ROWS: u64 = 8;
const ENTRY_SIGNATURE: &str = "elastic_failure_entry_died";
/// The summary's lines other than its entries (the header among them).
const SUMMARY_SIGNATURE: &str = "elastic_child_failed";
const HEADER: &str = "Root Cause (first observed failure):";

fn is_entry(v: &View, i: usize) -> bool {
    v.sig(v.hit(i)).is_some_and(|s| s.id == ENTRY_SIGNATURE)
}

/// Only the summary's own hits are read again (a storm's incident holds many thousands).
fn is_header(v: &View, i: usize) -> bool {
    v.sig(v.hit(i)).is_some_and(|s| s.id == SUMMARY_SIGNATURE)
        && super::error_chain::message(v, i).trim_start() == HEADER
}

/// The entry under the summary header at hit `header`, in the same file.
fn entry_under(v: &View, scope: &Scope, header: usize) -> Option<usize> {
    let h = v.hit(header);
    scope.hits_in(v, &h.origin).iter().copied().find(|&i| {
        let e = v.hit(i);
        e.line_no > h.line_no && e.line_no <= h.line_no + ENTRY_ROWS && is_entry(v, i)
    })
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let roots: Vec<usize> = scope
        .hits
        .iter()
        .copied()
        .filter(|&i| is_header(v, i))
        .filter_map(|i| entry_under(v, scope, i))
        .collect();
    for root in roots {
        let who = v.subject(v.hit(root));
        let Some(c) = board.cands.get_mut(&who) else {
            continue;
        };
        if c.cause.is_some_and(|b| b != root && is_entry(v, b)) {
            c.cause = Some(root);
            c.ts = v.time_or_bound(root);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    fn summary(failures: &str, root: &str) -> String {
        format!(
            "Failures:\n[1]:\n  time      : 2024-01-15_06:05:09\n  host      : node\n  \
             rank      : 1 (local_rank: 1)\n  exitcode  : {failures} (pid: 11409)\n  \
             error_file: <N/A>\n\
             ------------------------------------------------------------\n\
             Root Cause (first observed failure):\n[0]:\n  time      : 2024-01-15_06:05:09\n  \
             host      : node\n  rank      : 0 (local_rank: 0)\n  exitcode  : {root} (pid: \
             11408)\n  error_file: <N/A>\n"
        )
    }

    #[test]
    fn the_entry_under_the_root_cause_header_is_the_line() {
        let d = diagnose(&summary("1", "-9"));
        assert_eq!(root_line(&d), "  exitcode  : -9 (pid: 11408)");
        let d = diagnose(&summary("-9", "1"));
        assert_eq!(root_line(&d), "  exitcode  : 1 (pid: 11408)");
    }

    #[test]
    fn without_the_header_the_first_entry_stays() {
        let text = summary("1", "-9").replace(super::HEADER, "Other failure:");
        assert_eq!(root_line(&diagnose(&text)), "  exitcode  : 1 (pid: 11409)");
    }
}
