//! Watchdog sequence numbers: every healthy rank times out in the same collective. A rank
//! whose last enqueued collective is behind that one never reached it (+20); a rank missing
//! from a timeout that most of the job reported may be the one that hung or died (+10).
//! Without a collective more ranks wait in than in any other, the rank behind gets +8 only:
//! two ranks one collective apart do not say which one lags and which ran an extra one
//! (behind: vllm#23448, MOTIP#52; ahead, in a scalar reduction: LlamaFactory#2902, which
//! `scalar_side` weighs above this). A rank seen only in its re-raised timeout (`what():  [Rank
//! 1] Watchdog caught ... SeqNum=1` beside rank 0's SeqNum=3: OmniIsaacGymEnvs#50) counts.
//! Where none is behind that collective, a rank alone in having issued the fewest collectives
//! (three or more ranks in view, its last enqueued below every other rank's) gets the same +8:
//! the others' hosts went on past the collective, its host did not (ms-swift#10183: rank 2
//! enqueued #7219, rank 3 #7220, rank 0 waits in #7221).

use crate::catalog::Sync;
use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use std::collections::BTreeMap;

/// Per rank: (seq of the collective it timed out in, last enqueued, the hit).
fn seq_by_rank(v: &View, scope: &Scope) -> BTreeMap<u32, (u64, Option<u64>, usize)> {
    let mut out: BTreeMap<u32, (u64, Option<u64>, usize)> = BTreeMap::new();
    for &i in scope.hits {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        // The watchdog's own line, or its text re-raised with the timeout (a terminate
        // handler's `what():`, a blocking wait): a rank may show only the latter.
        if sig.sync != Some(Sync::Seq) && h.field("timeout_ms").is_none() {
            continue;
        }
        let (Some(seq), Some(r)) = (
            h.field("seq").and_then(|x| x.parse::<u64>().ok()),
            v.rank_of(h.source),
        ) else {
            continue;
        };
        let enq = h.field("last_enqueued").and_then(|x| x.parse::<u64>().ok());
        let e = out.entry(r).or_insert((seq, enq, i));
        if enq.is_some() && e.1.is_none() {
            e.1 = enq;
        }
    }
    out
}

/// Within one process group a rank cannot fall far behind: the others' collectives complete
/// only with it. Numbers this far apart come from different groups (old watchdog lines do
/// not name the group), so they say nothing about who lags.
const MAX_LAG_IN_ONE_GROUP: u64 = 64;

/// Behind, where as many ranks wait in another collective (below `scalar_side`'s 10).
const TIED_WEIGHT: i32 = 8;

/// Whether a rank that timed out in `seq` (with `enq` its last enqueued collective) is behind
/// the collective the others wait in.
fn is_behind(seq: u64, enq: Option<u64>, majority: u64) -> bool {
    let last = enq.map_or(seq, |e| e.min(seq));
    last < majority && majority - last <= MAX_LAG_IN_ONE_GROUP
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let seq_of = seq_by_rank(v, scope);
    if seq_of.len() < 2 {
        return;
    }
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for (s, _, _) in seq_of.values() {
        *counts.entry(*s).or_default() += 1;
    }
    let (&majority, &n_major) = counts.iter().max_by_key(|(_, c)| **c).unwrap_or((&0, &0));
    // As many ranks in another collective: the one behind may as well be the one that ran
    // an extra collective, so being behind is only a hint.
    let tied = counts.iter().any(|(&s, &c)| s != majority && c == n_major);
    let weight = if tied { TIED_WEIGHT } else { 20 };
    let mut any_behind = false;
    for (&r, &(s, enq, i)) in &seq_of {
        if is_behind(s, enq, majority) {
            any_behind = true;
            let who = Who::Rank(r);
            let host = v.who_host(who);
            let c = board.cand(who, host);
            c.pointer = Some(c.pointer.unwrap_or(i));
            let why = format!(
                "behind the others: last enqueued collective {} while {n_major} ranks wait in #{majority}",
                enq.unwrap_or(s)
            );
            board.add(who, host, "seq_lag", weight, why);
        }
    }
    if !any_behind {
        fewest_issued(v, &seq_of, board);
    }
    // Only a world size the logs state (communicator init, PG options) says who is missing;
    // one past the highest rank seen is a guess when the logs show only some ranks.
    let nranks = v.job.max_nranks as usize;
    if nranks <= 1 || n_major * 2 < nranks {
        return;
    }
    let missing: Vec<u32> = (0..nranks as u32)
        .filter(|r| !seq_of.contains_key(r))
        .collect();
    if missing.is_empty() || missing.len() * 10 > nranks + 9 {
        return;
    }
    for r in missing {
        let who = Who::Rank(r);
        let why = format!(
            "did not report the timeout of collective #{majority} that {n_major} ranks reported"
        );
        board.add(who, v.who_host(who), "seq_lag", 10, why);
    }
}

/// How far a rank's host got: the later of the collective it waits in and its last enqueued.
fn frontier(seq: u64, enq: Option<u64>) -> u64 {
    enq.map_or(seq, |e| e.max(seq))
}

/// The one rank whose host issued fewer collectives than every other rank's, if any.
fn alone_lowest(seq_of: &BTreeMap<u32, (u64, Option<u64>, usize)>) -> Option<(u32, u64, u64)> {
    if seq_of.len() < 3 {
        return None;
    }
    let mut fronts: Vec<(u64, u32)> = seq_of
        .iter()
        .map(|(&r, &(s, enq, _))| (frontier(s, enq), r))
        .collect();
    fronts.sort_unstable();
    let ((low, r), (next, _)) = (fronts[0], fronts[1]);
    (low < next && next - low <= MAX_LAG_IN_ONE_GROUP).then_some((r, low, next))
}

fn fewest_issued(v: &View, seq_of: &BTreeMap<u32, (u64, Option<u64>, usize)>, board: &mut Board) {
    let Some((r, low, next)) = alone_lowest(seq_of) else {
        return;
    };
    let who = Who::Rank(r);
    let host = v.who_host(who);
    let c = board.cand(who, host);
    c.pointer = Some(c.pointer.unwrap_or(seq_of[&r].2));
    let why = format!(
        "issued the fewest collectives: its last is #{low} while every other rank issued #{next} or later"
    );
    board.add(who, host, "seq_lag", TIED_WEIGHT, why);
}

#[cfg(test)]
mod tests {
    use super::{alone_lowest, is_behind};
    use std::collections::BTreeMap;

    #[test]
    fn the_rank_alone_in_issuing_fewest() {
        let of = |v: &[(u32, u64, Option<u64>)]| {
            v.iter()
                .map(|&(r, s, e)| (r, (s, e, 0)))
                .collect::<BTreeMap<_, _>>()
        };
        let swift = of(&[
            (0, 7221, None),
            (2, 7219, Some(7219)),
            (3, 7219, Some(7220)),
        ]);
        assert_eq!(alone_lowest(&swift), Some((2, 7219, 7220)));
        let two_low = of(&[(0, 9, None), (1, 7, None), (2, 7, None)]);
        assert_eq!(alone_lowest(&two_low), None, "two ranks share the lowest");
        let pair = of(&[(0, 9, None), (1, 7, None)]);
        assert_eq!(alone_lowest(&pair), None, "two ranks do not say which lags");
        let groups = of(&[(0, 7702, None), (1, 5120, None), (2, 7702, None)]);
        assert_eq!(
            alone_lowest(&groups),
            None,
            "thousands apart: another group"
        );
    }

    #[test]
    fn behind_only_within_reach_of_one_group() {
        assert!(is_behind(1580, Some(1579), 1580));
        assert!(is_behind(311, None, 312));
        assert!(!is_behind(1580, Some(1582), 1580));
        assert!(
            !is_behind(5120, None, 7702),
            "thousands apart: another process group"
        );
        assert!(!is_behind(7702, None, 7702));
    }
}
