//! Mismatched collectives: at the same process group and sequence number, ranks state
//! different operations, element counts, dtypes or roots (their watchdog lines, Flight
//! Recorder entries, NCCL COLL traces). Such a collective can never complete; every rank
//! times out in it, and the first timeout is not the culprit.
//!
//! - The rank(s) in a strict minority at the first such sequence number of a group are where
//!   the code paths diverged (+50, the finding `collective_mismatch`, its own statement as
//!   the root line). Weight: above any symptom and the desync report's naming (+40), below a
//!   cause line plus naming, so a rank that also printed a real cause (a CUDA error that sent
//!   it down another path) keeps that cause as its root line. Cases: open-r1's GRPO
//!   broadcast (SeqNum=4, every rank the same 112 elements: no split, nothing added); the
//!   issue's rank 0 Broadcast of 25503912 against ranks 1-7's 12751956; a rank whose
//!   all-reduce shape follows an uneven last batch.
//! - One class against another of the same size (two ranks, one each): both are suspects
//!   (+15 each), and the table shows both sides; the logs cannot say which one diverged.

use crate::correlate::board::Board;
use crate::correlate::collectives::{self, describe, split_json, who_list, Split};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use std::collections::BTreeSet;

const FINDING: &str = "collective_mismatch";
/// Sequence numbers of one group shown at most (the first is where it diverged).
const SPLITS_SHOWN: usize = 3;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let splits = collectives::splits(scope.collectives(v));
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    let mut groups_done: BTreeSet<&str> = BTreeSet::new();
    for split in splits.iter() {
        if board.collectives.len() >= SPLITS_SHOWN {
            break;
        }
        board.collectives.push(split_json(split, "mismatch"));
        // Only the first divergence of a group blames anyone: later ones follow from it.
        if !groups_done.insert(split.group) {
            continue;
        }
        blame(v, board, split, finding);
    }
}

fn blame(v: &View, board: &mut Board, split: &Split, finding: u16) {
    let strong = split.has_majority();
    let odd_from = if strong { 1 } else { 0 };
    let trace = |es: &[&collectives::Entry]| {
        es.first()
            .is_some_and(|e| matches!(e.line, crate::correlate::board::LineRef::Call(..)))
    };
    for (k, (fp, es)) in split.classes.iter().enumerate().skip(odd_from) {
        let (others_fp, others): (&collectives::Fingerprint, Vec<Who>) = if k == 0 {
            let (fp1, es1) = &split.classes[1];
            (fp1, es1.iter().map(|e| e.who).collect())
        } else {
            let (fp0, es0) = &split.classes[0];
            (fp0, es0.iter().map(|e| e.who).collect())
        };
        let whos: Vec<Who> = es.iter().map(|e| e.who).collect();
        let facts = vec![
            ("coll_seq".to_string(), split.seq.to_string()),
            ("coll_group".to_string(), split.group.to_string()),
            ("odd_ranks".to_string(), who_list(&whos)),
            ("odd_values".to_string(), describe(fp, trace(es))),
            ("other_ranks".to_string(), who_list(&others)),
            ("other_values".to_string(), describe(others_fp, trace(es))),
        ];
        let why = format!(
            "at #{} of {} it ran {} while rank(s) {} ran {}",
            split.seq,
            split.group,
            describe(fp, trace(es)),
            who_list(&others),
            describe(others_fp, trace(es)),
        );
        for e in es {
            let host = v.who_host(e.who);
            let c = board.cand(e.who, host);
            if c.has_rule("collective_mismatch") {
                continue;
            }
            c.stated = c.stated.or(Some(e.line));
            if c.ts.is_none() {
                c.ts = e.ts;
            }
            c.finding = Some((finding, facts.clone()));
            let weight = if strong { 50 } else { 15 };
            board.add(e.who, host, "collective_mismatch", weight, why.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    fn timeout(rank: u32, op: &str, numel: u64, ran: u64) -> String {
        format!(
            "[rank{rank}]:[E1203 10:{:02}:00.000000000 ProcessGroupNCCL.cpp:632] [PG 0 (default_pg) Rank {rank}] \
             Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType={op}, \
             NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for {ran} milliseconds \
             before timing out.\n",
            10 + rank
        )
    }

    #[test]
    fn the_rank_with_another_count_is_the_root_not_the_first_timeout() {
        let mut log = String::new();
        for r in 1..8 {
            log.push_str(&timeout(r, "BROADCAST", 12751956, 600010));
        }
        log.push_str(&timeout(0, "BROADCAST", 25503912, 600010));
        let d = diagnose(&log);
        assert!(root_line(&d).starts_with("[rank0]:"), "{}", root_line(&d));
        let j = &d[0].json;
        assert_eq!(j["cause_signature"]["id"], "collective_mismatch");
        assert_eq!(j["facts"]["odd_ranks"], "0");
        assert_eq!(j["facts"]["other_ranks"], "1-7");
        assert_eq!(j["collectives"][0]["rows"][1]["numel_in"], 25503912);
        let fix = j["fix"].as_str().unwrap();
        assert!(fix.contains("rank(s) 0 reached"), "{fix}");
    }

    #[test]
    fn equal_timeouts_leave_the_first_timeout_as_root() {
        let mut log = String::new();
        for r in [3, 1, 2] {
            log.push_str(&timeout(r, "ALLREDUCE", 11, 600000));
        }
        let d = diagnose(&log);
        assert!(root_line(&d).starts_with("[rank1]:"), "{}", root_line(&d));
        assert!(d[0].json["collectives"].as_array().unwrap().is_empty());
    }

    #[test]
    fn nccl_traces_at_the_same_op_count_are_compared() {
        let trace = |host: &str, rank: u32, count: u32| {
            format!(
                "{host}:{}:{} [0] NCCL INFO comm 0x55d6{rank} rank {rank} nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init COMPLETE\n\
                 {host}:{}:{} [0] NCCL INFO Broadcast: opCount 3 sendbuff 0x7f1315e00400 recvbuff 0x7f1315e00400 count {count} datatype 7 op 0 root 0 comm 0x55d6{rank} [nranks=4] stream 0x55d662c1f640\n",
                100 + rank, 100 + rank, 100 + rank, 100 + rank
            )
        };
        let mut log = String::new();
        for (r, n) in [(0, 440), (1, 440), (2, 880), (3, 440)] {
            log.push_str(&trace(&format!("node{r}"), r, n));
        }
        for r in [0, 1, 3] {
            log.push_str(&timeout(r, "BROADCAST", 440, 600000));
        }
        let d = diagnose(&log);
        assert!(root_line(&d).contains("count 880"), "{}", root_line(&d));
        assert_eq!(d[0].json["root_cause"]["rank"], 2);
    }

    fn wrapped(r: u32, seq: u32, op: &str, shape: &str, dtype: &str) -> String {
        format!(
            "[I ProcessGroupWrapper.cpp:562] [Rank {r}] Running collective: CollectiveFingerPrint(\
             SequenceNumber={seq}, OpType={op}, TensorShape=[{shape}], TensorDtypes={dtype}, \
             TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda))\n"
        )
    }

    #[test]
    fn debug_wrapper_fingerprints_at_one_sequence_number_are_compared() {
        let mut log = String::new();
        for r in 0..4 {
            let (op, shape, dtype) = if r == 1 {
                ("ALLREDUCE", "2", "Float")
            } else {
                ("BROADCAST", "73", "Byte")
            };
            log.push_str(&wrapped(r, 4, op, shape, dtype));
        }
        let d = diagnose(&log);
        assert_eq!(d.len(), 1);
        let j = &d[0].json;
        assert_eq!(j["cause_signature"]["id"], "collective_mismatch");
        assert_eq!(j["root_cause"]["rank"], 1);
        assert_eq!(j["facts"]["odd_values"], "ALLREDUCE count 2 dtype float32");
        assert_eq!(j["facts"]["other_values"], "BROADCAST count 73 dtype uint8");
        assert!(root_line(&d).contains("[Rank 1] Running collective"));
    }

    #[test]
    fn debug_wrapper_numbers_that_go_back_belong_to_several_groups() {
        // Two process groups' wrappers in one process: their numbers interleave and cannot be
        // compared with another process's.
        let mut log = String::new();
        for r in 0..2 {
            log.push_str(&wrapped(r, 9, "ALLREDUCE", "8", "Float"));
            log.push_str(&wrapped(r, 2, "ALLGATHER", "4, 4", "Float"));
        }
        log.push_str(&wrapped(2, 9, "ALLGATHER", "16", "Float"));
        assert!(diagnose(&log).is_empty());
    }

    fn traced(r: u32, comm: &str, op: &str, op_count: u32, count: u32) -> String {
        format!(
            "node{r}:{p}:{p} [{r}] NCCL INFO {op}: opCount {op_count:x} sendbuff 0x7f1f recvbuff 0x7f1e \
             count {count} datatype 7 op 0 root 0 comm {comm} [nranks=4] stream 0x559c\n",
            p = 100 + r
        )
    }

    #[test]
    fn traces_that_disagree_open_an_incident_with_no_failure_line() {
        let mut log = String::new();
        for r in 0..4 {
            let op = if r == 2 { "AllGather" } else { "AllReduce" };
            log.push_str(&traced(r, &format!("0x55{r}"), "AllReduce", 0x28b, 1024));
            log.push_str(&traced(r, &format!("0x55{r}"), op, 0x28c, 9984512));
        }
        let d = diagnose(&log);
        assert_eq!(d.len(), 1);
        assert!(
            root_line(&d).contains("AllGather: opCount 28c"),
            "{}",
            root_line(&d)
        );
        assert_eq!(d[0].json["cause_signature"]["id"], "collective_mismatch");
    }

    #[test]
    fn two_communicators_of_one_size_without_ids_are_not_compared() {
        // Each process uses two 4-rank communicators (data and tensor parallel) whose
        // counters run side by side; without their ids, the calls cannot be paired.
        let mut log = String::new();
        for r in 0..4 {
            log.push_str(&traced(r, &format!("0xa{r}"), "AllReduce", 5, 1024));
            log.push_str(&traced(r, &format!("0xb{r}"), "AllGather", 5, 64));
        }
        assert!(diagnose(&log).is_empty());
        let mut with_ids = String::new();
        for r in 0..4 {
            for (ptr, id) in [(format!("0xa{r}"), "0x11"), (format!("0xb{r}"), "0x22")] {
                with_ids.push_str(&format!(
                    "node{r}:{p}:{p} [{r}] NCCL INFO comm {ptr} rank {r} nranks 4 cudaDev {r} nvmlDev {r} busId 1000 commId {id} - Init COMPLETE\n",
                    p = 100 + r
                ));
            }
            with_ids.push_str(&traced(r, &format!("0xa{r}"), "AllReduce", 5, 1024));
            with_ids.push_str(&traced(r, &format!("0xb{r}"), "AllGather", 5, 64));
        }
        assert!(
            diagnose(&with_ids).is_empty(),
            "each communicator agrees with itself"
        );
    }
}
