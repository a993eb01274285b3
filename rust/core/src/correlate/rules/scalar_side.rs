//! Two sides, no majority: half the ranks wait in a bulk collective (a gradient bucket of
//! millions of elements), the other half in a scalar one (`NumelIn=1`). A scalar reduction is
//! what a rank runs outside the training step (a loss or metric average, a stop flag, the
//! validation loop after it ran out of batches), so the scalar side is the rank that left the
//! code path the others are still on (+10). Nothing is added when either side has a majority
//! (`collective_mismatch` and `seq_lag` decide those) or when neither side is scalar.
//!
//! Cases: FunASR#2317 (rank 1 logs `Validate epoch` and waits in an ALLREDUCE of 1 element at
//! the SeqNum where rank 0 waits in 4,311,252); LlamaFactory#2902 (rank 1 one collective ahead,
//! in an ALLREDUCE of 1 element, rank 0 in one of 25,427,968). Both labels are readings of
//! the logs, not maintainers' findings; the weight only breaks the tie between the two
//! suspects `collective_mismatch` names (+15 each) and stays below any cause line.

use crate::correlate::board::Board;
use crate::correlate::collectives::{describe, Entry};
use crate::correlate::rules::Scope;
use crate::correlate::util::rank_ranges;
use crate::correlate::view::{View, Who};
use std::collections::{BTreeMap, BTreeSet};

/// At most this many elements: a loss, a flag, a few metrics.
const SCALAR_MAX: i64 = 8;
/// At least this many: a bucket of parameters or activations.
const BULK_MIN: i64 = 4096;
const WEIGHT: i32 = 10;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let mut pending: BTreeMap<&str, BTreeMap<Who, &Entry>> = BTreeMap::new();
    for e in scope.collectives(v).iter().filter(|e| e.waiting) {
        pending
            .entry(&e.group)
            .or_default()
            .entry(e.who)
            .or_insert(e);
    }
    for by_rank in pending.values() {
        let Some((scalar, bulk)) = scalar_and_bulk(by_rank) else {
            continue;
        };
        let bulk_ranks: BTreeSet<u32> = bulk.iter().filter_map(|e| rank(e.who)).collect();
        let why = format!(
            "it waits in a scalar {} while rank(s) {} wait in {}: a reduction run outside the \
             training step (a loss, a metric, a stop flag, validation)",
            describe(&scalar[0].fp, false),
            rank_ranges(&bulk_ranks),
            describe(&bulk[0].fp, false),
        );
        for e in scalar {
            let host = v.who_host(e.who);
            let c = board.cand(e.who, host);
            c.stated = c.stated.or(Some(e.line));
            if c.ts.is_none() {
                c.ts = e.ts;
            }
            board.add(e.who, host, "scalar_side", WEIGHT, why.clone());
        }
    }
}

fn rank(who: Who) -> Option<u32> {
    match who {
        Who::Rank(r) => Some(r),
        _ => None,
    }
}

/// The two equal halves of one group's waiting ranks, the scalar side first; `None` unless
/// the ranks wait in exactly two different collectives, as many ranks in each, one of them
/// scalar and the other bulk.
fn scalar_and_bulk<'a>(
    by_rank: &BTreeMap<Who, &'a Entry>,
) -> Option<(Vec<&'a Entry>, Vec<&'a Entry>)> {
    let mut sides: BTreeMap<Option<i64>, Vec<&'a Entry>> = BTreeMap::new();
    for e in by_rank.values() {
        sides.entry(e.fp.numel_in).or_default().push(e);
    }
    let mut sides = sides.into_values();
    let (Some(small), Some(large), None) = (sides.next(), sides.next(), sides.next()) else {
        return None;
    };
    let numel = |es: &[&Entry]| es[0].fp.numel_in.unwrap_or(-1);
    let even = small.len() == large.len();
    let scalar = (0..=SCALAR_MAX).contains(&numel(&small));
    (even && scalar && numel(&large) >= BULK_MIN).then_some((small, large))
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    fn timeout(rank: u32, seq: u64, numel: u64) -> String {
        format!(
            "[rank{rank}]:[E1203 10:00:0{rank}.000000000 ProcessGroupNCCL.cpp:632] [Rank {rank}] \
             Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, \
             NumelIn={numel}, NumelOut={numel}, Timeout(ms)=600000) ran for 600010 milliseconds \
             before timing out.\n"
        )
    }

    #[test]
    fn the_rank_in_a_scalar_reduction_is_the_root_when_two_ranks_disagree() {
        let d = diagnose(&(timeout(0, 3437, 4311252) + &timeout(1, 3437, 1)));
        assert!(root_line(&d).starts_with("[rank1]:"), "{}", root_line(&d));
        let reasons = d[0].json["suspects"][0]["reasons"].to_string();
        assert!(reasons.contains("scalar ALLREDUCE NumelIn=1"), "{reasons}");
    }

    #[test]
    fn a_rank_one_collective_ahead_in_a_scalar_reduction_is_the_root() {
        let d = diagnose(&(timeout(0, 1516, 25427968) + &timeout(1, 1517, 1)));
        assert!(root_line(&d).starts_with("[rank1]:"), "{}", root_line(&d));
    }

    #[test]
    fn two_bulk_sides_stay_a_tie_and_a_majority_is_left_to_the_other_rules() {
        let d = diagnose(&(timeout(4, 610, 56320) + &timeout(6, 610, 76800)));
        let reasons = d[0].json["suspects"].to_string();
        assert!(!reasons.contains("scalar_side"), "{reasons}");
        let mut log = String::new();
        for r in 0..3 {
            log.push_str(&timeout(r, 9, 1));
        }
        log.push_str(&timeout(3, 9, 65536));
        let d = diagnose(&log);
        assert!(root_line(&d).starts_with("[rank3]:"), "{}", root_line(&d));
        assert!(!d[0].json["suspects"].to_string().contains("scalar_side"));
    }
}
