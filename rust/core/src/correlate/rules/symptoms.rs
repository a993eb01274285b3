//! A process that only printed symptoms (its line: the most telling one) (or, in an incident no signature recognised, only
//! unclassified errors) is a weak suspect: a quarter of the symptom's weight. A symptom of
//! weight 0 is only a marker for an evidence rule and makes no suspect.
//!
//! A symptom naming the rank it is about (`subject_rank`) counts against that rank.
//!
//! The most telling symptom is the one with the highest weight, except that the text after
//! `Last error:` in PyTorch's NCCL error block comes first: it is NCCL's own account of the
//! failure the block's wrapper line (`NCCL error in: ..., unhandled system error`) only names.
//! Among unclassified lines, an error comes before a warning or a bare traceback header
//! (Mooncake#166, held-out set 90: a glog `W` line about a flag, then the `E` lines of the
//! RDMA handshake that failed; GLM#136, set 92: DeepSpeed's INFO line inside a traceback,
//! which leaves its header apart from the `ZeRORuntimeException` line).

use crate::catalog::Role;
use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::View;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    for &i in scope.hits {
        let h = v.hit(i);
        let weight = match v.sig(h) {
            // Weight 0: a marker that tells an evidence rule where to look (an ncclras JSON
            // report, which lists healthy and failing ranks alike), no suspect by itself.
            Some(s) if s.role == Role::Symptom && s.weight == 0 => continue,
            Some(s) if s.role == Role::Symptom => s.weight,
            Some(_) => continue,
            None if !scope.classified => 0,
            None => continue,
        };
        // A symptom that names the process it is about (a launcher's `Process name:
        // [[j,1],5]`) counts against that process, not the launcher that printed it.
        let who = if h.field("subject_rank").is_some() {
            v.subject(h)
        } else {
            v.printer(h)
        };
        let host = v.who_host(who).or_else(|| v.host_of(h.source));
        let c = board.cand(who, host);
        // The most telling symptom, the first of equals.
        let better = c.symptom.is_none_or(|s| {
            let (b, w) = (v.hit(s), v.sig(v.hit(s)).map_or(0, |x| x.weight));
            let ours = (h.last_error_text, weight, unclassified_error(v, i));
            let theirs = (b.last_error_text, w, unclassified_error(v, s));
            ours > theirs || (ours == theirs && v.order_key(i) < v.order_key(s))
        });
        if !better {
            continue;
        }
        let first = c.symptom.is_none();
        c.symptom = Some(i);
        if !first {
            continue;
        }
        if c.ts.is_none() {
            c.ts = v.time_or_bound(i);
        }
        if c.cause.is_none() && c.config.is_none() && weight >= 4 {
            let id = v.sig(h).map_or("", |s| s.id.as_str());
            board.add(
                who,
                host,
                "symptoms",
                (weight / 4) as i32,
                format!("printed a symptom: {id}"),
            );
        }
    }
}

/// Among lines no signature knows, an error tells more than a warning printed before it
/// (glog's `W… Invalid flag: …` before the `E… Failed to modify QP to RTR` that failed), and
/// more than a traceback's header left on its own where another logger's line cut the
/// traceback in two (its exception line then stands apart, below).
fn unclassified_error(v: &View, i: usize) -> bool {
    let h = v.hit(i);
    h.sig.is_none() && !h.warn_only && !super::unexplained_error::is_header(v, i)
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const WRAPPER: &str = "torch.distributed.DistBackendError: NCCL error in: \
        /src/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error \
        (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3";
    const DETAIL: &str = "ncclSystemError: System call (e.g. socket, malloc) or external \
        library call failed or device error. ";
    // A symptom (the peer went away) weaker than the wrapper.
    const RESET: &str =
        "socketProgressOpt: Call to recv from 10.8.3.4<40112> failed : Connection reset by peer";

    #[test]
    fn the_last_error_text_is_the_process_root() {
        let d = diagnose(&format!("{WRAPPER}\n{DETAIL}\nLast error:\n{RESET}\n"));
        assert_eq!(root_line(&d), RESET);
    }

    #[test]
    fn without_last_error_the_stronger_symptom_stays_the_root() {
        let d = diagnose(&format!("{WRAPPER}\n{RESET}\n"));
        assert_eq!(root_line(&d), WRAPPER);
    }

    #[test]
    fn a_timeless_line_printed_before_a_timed_one_is_not_later_than_it() {
        // A pasted excerpt opening on the tail of a header-less line, then rank 4's own.
        let bare = "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=28956, \
            OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600022 \
            milliseconds before timing out.";
        let timed = "[rank4]:[E1129 11:56:57.204156533 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG \
            GUID 0(default_pg) Rank 4] Exception (either an error or timeout) detected by \
            watchdog at work: 28956, last enqueued NCCL work: 28956, last completed NCCL work: \
            28955.";
        let d = diagnose(&format!("{bare}\n{timed}\n"));
        assert_eq!(root_line(&d), bare);
    }

    #[test]
    fn an_unclassified_error_is_the_root_over_an_earlier_warning() {
        let warn = "W0331 10:52:07.700984 297905 bench.cpp:410] Invalid flag: buffer size is \
            smaller than require_size, adjust to 68719476736";
        let err = "E0331 10:54:20.638639 297912 rdma_endpoint.cpp:385] [Handshake] Failed to \
            modify QP to RTR, check mtu, gid, peer lid, peer qp num: Connection timed out [110]";
        let d = diagnose(&format!("{warn}\n{err}\n{err}\n"));
        assert_eq!(root_line(&d), err);
    }

    #[test]
    fn an_exception_line_is_the_root_over_a_traceback_header_cut_off_from_it() {
        let exc = "deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being \
            loaded used a DP world size of 256 but the current world size is 2.";
        let log = format!(
            "Traceback (most recent call last):\n  File \"train.py\", line 673, in <module>\n    \
             main()\n[2023-03-21 20:28:05,674] [INFO] [engine.py:21:load] Loading checkpoint\n  \
             File \"engine.py\", line 2950, in _load\n    raise ZeRORuntimeException(msg)\n{exc}\n"
        );
        assert_eq!(root_line(&diagnose(&log)), exc);
    }
}
