//! The progress frontier (DESIGN §3.3): per process group, how far each rank got. When most
//! ranks wait in one collective, the rank that is not in it is the one they wait for:
//!
//! - **Behind**: its last collective in the group is earlier (NCCL COLL traces with a lower
//!   opCount, Flight Recorder entries, watchdog counters). +20, as the watchdog's own
//!   counters weigh in `seq_lag` (which this rule does not repeat; it adds the finding and
//!   its facts to what `seq_lag` found).
//! - **Ahead**: it waits in a later collective than a clear majority of its group (three or
//!   more ranks in view): it ran past one the others are still in, so their sequences of
//!   collectives diverged (+20, the finding `collective_mismatch` with both sides' sequence
//!   numbers; the mirror of "behind"). Case: a hard-wrapped console where two ranks time out
//!   in BROADCAST #532339 and one in _ALLGATHER_BASE #532341. Not where the ranks waiting in
//!   that collective disagree about it: the divergence is there, and the rank past it is one
//!   the broken collective let through (a broadcast's root: ms-swift#10183, rank 0 at #7221
//!   while ranks 2 and 3 wait in #7219 BROADCAST with 24084544 and 64 elements).
//! - **Kept running**: it stated nothing about that collective, printed no failure, and went
//!   on logging a minute or more after the others entered it (a validation loop, a progress
//!   bar, a checkpoint save on one rank while the rest sit in a broadcast). +30: more than
//!   `silence` (+10, a rank that stopped) and `seq_lag`'s missing ranks (+10), since logging
//!   on while the others wait shows the process alive and elsewhere; less than the mismatch
//!   finding (+50). Its root line is the first line it printed after the others entered
//!   the collective (what kept it busy), else its last line before.
//!
//! Both attach the finding `collective_not_reached`, so cause, fix and verify name the
//! collective, the waiting ranks and the rank's last collective.

use crate::correlate::board::{Board, LineRef};
use crate::correlate::collectives::{self, describe, who_list, Entry};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use std::collections::{BTreeMap, BTreeSet, HashMap};

const FINDING: &str = "collective_not_reached";
const MISMATCH: &str = "collective_mismatch";
/// A rank that logged this long after the others entered a collective was alive elsewhere.
const KEPT_MS: i64 = 60_000;
/// Within one group a rank cannot fall further behind than this (see `seq_lag`).
const MAX_LAG: u64 = 64;

/// The collective most ranks of a group are in: (sequence number, its op, the ranks).
struct Waited<'a> {
    group: &'a str,
    seq: u64,
    op: &'a str,
    ranks: BTreeSet<Who>,
    /// `ranks` as the diagnosis writes them, made once: every lagging rank's facts state it.
    ranks_text: String,
    entered: Option<i64>,
}

/// Per group: each rank's frontier (last sequence number stated) and the waited collective.
fn frontiers(entries: &[Entry]) -> BTreeMap<&str, (BTreeMap<Who, u64>, Option<Waited<'_>>)> {
    let mut out: BTreeMap<&str, (BTreeMap<Who, u64>, Option<Waited>)> = BTreeMap::new();
    for e in entries {
        let (front, _) = out.entry(&e.group).or_default();
        let f = front.entry(e.who).or_insert(e.seq);
        *f = (*f).max(e.seq);
    }
    for (group, (front, waited)) in out.iter_mut() {
        let mut at: BTreeMap<u64, BTreeSet<Who>> = BTreeMap::new();
        for (who, seq) in front.iter() {
            at.entry(*seq).or_default().insert(*who);
        }
        let Some((&seq, ranks)) = at.iter().max_by_key(|(s, r)| (r.len(), *s)) else {
            continue;
        };
        if ranks.len() < 2 || ranks.len() * 2 < front.len() {
            continue;
        }
        let here: Vec<&Entry> = entries
            .iter()
            .filter(|e| e.group == *group && e.seq == seq && ranks.contains(&e.who))
            .collect();
        *waited = Some(Waited {
            group,
            seq,
            op: here.first().map_or("", |e| e.fp.op.as_str()),
            ranks: ranks.clone(),
            ranks_text: who_list(&ranks.iter().copied().collect::<Vec<_>>()),
            entered: here
                .iter()
                .filter(|e| e.waiting)
                .filter_map(|e| e.entered)
                .min(),
        });
    }
    out
}

fn facts(w: &Waited, last: Option<u64>, kept: Option<i64>) -> Vec<(String, String)> {
    let mut f = vec![
        ("coll_seq".to_string(), w.seq.to_string()),
        ("coll_op".to_string(), w.op.to_string()),
        ("coll_group".to_string(), w.group.to_string()),
        ("waiting_ranks".to_string(), w.ranks_text.clone()),
        (
            "last_seq".to_string(),
            last.map_or("none in view".to_string(), |s| s.to_string()),
        ),
    ];
    if let Some(ms) = kept {
        let text = format!(
            ", yet it went on logging for {} s after they entered it",
            ms / 1000
        );
        f.push(("kept_running".to_string(), text));
    }
    f
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    let entries = scope.collectives(v);
    for (_, (front, waited)) in frontiers(entries) {
        let Some(w) = waited else { continue };
        ahead(v, entries, board, &w, &front);
        // Each rank's statement of a sequence number in the group, its first one kept.
        let mut stated_at: HashMap<(Who, u64), LineRef> = HashMap::new();
        for e in entries.iter().filter(|e| e.group == w.group) {
            stated_at.entry((e.who, e.seq)).or_insert(e.line);
        }
        for (&who, &last) in &front {
            if last >= w.seq || w.seq - last > MAX_LAG {
                continue;
            }
            let host = v.who_host(who);
            let stated = stated_at.get(&(who, last)).copied();
            let lagged = board.cand(who, host).has_rule("seq_lag");
            let c = board.cand(who, host);
            c.stated = c.stated.or(stated);
            c.finding = c
                .finding
                .take()
                .or(Some((finding, facts(&w, Some(last), None))));
            if !lagged {
                let why = format!(
                    "behind: its last collective in {} is #{last} while {} wait in #{}",
                    w.group, w.ranks_text, w.seq
                );
                board.add(who, host, "progress", 20, why);
            }
        }
        kept_running(v, scope, board, &w, &front, finding);
    }
}

/// Ranks that wait in a later collective than the clear majority of their group does: they
/// ran past a collective the others are still in, so the ranks' sequences of collectives
/// diverged, and the few are the odd ones.
fn ahead(v: &View, entries: &[Entry], board: &mut Board, w: &Waited, front: &BTreeMap<Who, u64>) {
    let Some(finding) = v.cat.index_of(MISMATCH) else {
        return;
    };
    if front.len() < 3 || w.ranks.len() * 2 <= front.len() {
        return;
    }
    if collectives::split_at(entries, w.group, w.seq).is_some() {
        return;
    }
    let waiting_at = |who: Who, seq: u64| {
        entries
            .iter()
            .find(|e| e.who == who && e.group == w.group && e.seq == seq && e.waiting)
    };
    let majority: Vec<Who> = w.ranks.iter().copied().collect();
    let Some(theirs) = majority.first().and_then(|&m| waiting_at(m, w.seq)) else {
        return;
    };
    for (&who, &last) in front {
        if last <= w.seq || last - w.seq > MAX_LAG {
            continue;
        }
        let Some(own) = waiting_at(who, last) else {
            continue;
        };
        let (mine, others) = (
            format!("#{last} {}", describe(&own.fp, false)),
            format!("#{} {}", w.seq, describe(&theirs.fp, false)),
        );
        let facts = vec![
            ("coll_seq".to_string(), w.seq.to_string()),
            ("coll_group".to_string(), w.group.to_string()),
            ("odd_ranks".to_string(), who_list(&[who])),
            ("odd_values".to_string(), mine.clone()),
            ("other_ranks".to_string(), who_list(&majority)),
            ("other_values".to_string(), others.clone()),
        ];
        let host = v.who_host(who);
        board.state_finding(who, host, own.line, finding, facts);
        let why = format!(
            "ahead: it waits in {mine} while {} wait in {others}",
            who_list(&majority)
        );
        board.add(who, host, "progress", 20, why);
    }
}

/// Ranks with no statement in the group, no hit in the incident, and lines long after the
/// others entered the waited collective.
fn kept_running(
    v: &View,
    scope: &Scope,
    board: &mut Board,
    w: &Waited,
    front: &BTreeMap<Who, u64>,
    finding: u16,
) {
    let Some(entered) = w.entered else { return };
    let failing: BTreeSet<Who> = scope.hits.iter().map(|&i| v.printer(v.hit(i))).collect();
    let mut last_seen: BTreeMap<u32, (i64, u32)> = BTreeMap::new();
    for (si, s) in v.job.sources.iter().enumerate() {
        let si = si as u32;
        let (Some(r), Some(t)) = (v.rank_of(si), v.corrected(si, s.last_ts)) else {
            continue;
        };
        let e = last_seen.entry(r).or_insert((t, si));
        if t > e.0 {
            *e = (t, si);
        }
    }
    for (r, (last, src)) in last_seen {
        let who = Who::Rank(r);
        if front.contains_key(&who) || failing.contains(&who) || last < entered + KEPT_MS {
            continue;
        }
        let host = v.who_host(who);
        let line = busy_line(v, src, entered);
        let c = board.cand(who, host);
        c.stated = c.stated.or(line);
        c.ts = c.ts.or(Some(entered));
        c.finding = Some((finding, facts(w, None, Some(last - entered))));
        let why = format!(
            "logged for {} s after {} entered #{} of {} and never reported it",
            (last - entered) / 1000,
            w.ranks_text,
            w.seq,
            w.group
        );
        board.add(who, host, "progress", 30, why);
    }
}

/// What kept a process busy when the others entered the collective: its first line after
/// that moment, else its last line before. A poster's `...` between lines is no line.
fn busy_line(v: &View, src: u32, entered: i64) -> Option<LineRef> {
    let lines = v.job.sources[src as usize].ring.lines();
    let timed = |l: &&crate::ring::RingLine| v.corrected(src, l.ts_ms);
    let printed = |l: &&crate::ring::RingLine| l.opens_printed_record();
    let after = lines
        .iter()
        .filter(printed)
        .find(|l| timed(l).is_some_and(|t| t > entered));
    let before = lines
        .iter()
        .filter(printed)
        .rfind(|l| timed(l).is_some_and(|t| t <= entered));
    after.or(before).map(|l| LineRef::Ring(src, l.seq))
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    fn timeout(rank: u32, seq: u32, minute: u32) -> String {
        format!(
            "[rank{rank}]:[E1203 10:{minute:02}:00.000000000 ProcessGroupNCCL.cpp:632] [PG 0 (default_pg) Rank {rank}] \
             Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=BROADCAST, \
             NumelIn=112, NumelOut=112, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n"
        )
    }

    #[test]
    fn a_rank_still_logging_while_the_others_wait_is_the_root() {
        let mut log = String::new();
        log.push_str("[rank0]:[I1203 09:59:30.000000000 train.py:88] step 40 loss 1.25\n");
        log.push_str(
            "[rank0]:[I1203 10:00:30.000000000 eval.py:12] running validation, 5000 batches\n",
        );
        log.push_str("[rank0]:[I1203 10:08:00.000000000 eval.py:40] validation batch 4000/5000\n");
        for r in 1..4 {
            log.push_str(&timeout(r, 4, 10));
        }
        let d = diagnose(&log);
        assert!(
            root_line(&d).contains("running validation"),
            "{}",
            root_line(&d)
        );
        let j = &d[0].json;
        assert_eq!(j["root_cause"]["rank"], 0);
        assert_eq!(j["cause_signature"]["id"], "collective_not_reached");
        assert_eq!(j["facts"]["waiting_ranks"], "1-3");
    }

    #[test]
    fn a_rank_that_stopped_early_is_not_said_to_keep_running() {
        let mut log = String::new();
        log.push_str("[rank0]:[I1203 09:59:30.000000000 train.py:88] step 40 loss 1.25\n");
        for r in 1..4 {
            log.push_str(&timeout(r, 4, 10));
        }
        let d = diagnose(&log);
        // It stopped before the others entered: silence names it, not this rule.
        assert_eq!(
            root_line(&d),
            "[rank0]:[I1203 09:59:30.000000000 train.py:88] step 40 loss 1.25"
        );
        assert_ne!(d[0].json["cause_signature"]["id"], "collective_not_reached");
    }

    #[test]
    fn a_rank_behind_in_the_nccl_trace_is_the_one_the_others_wait_for() {
        let mut log = String::new();
        for (r, last) in [(0, 9), (1, 9), (2, 8), (3, 9)] {
            for op in (last - 1)..=last {
                log.push_str(&format!(
                    "node{r}:{p}:{p} [0] NCCL INFO AllReduce: opCount {op:x} sendbuff 0x7f00 recvbuff 0x7f00 count 1024 datatype 7 op 0 root 0 comm 0x55{r} [nranks=4] stream 0x56\n",
                    p = 100 + r
                ));
            }
        }
        for r in 0..4 {
            log.push_str(&format!(
                "node{r}:{p}:{p} [0] NCCL INFO comm 0x55{r} rank {r} nranks 4 cudaDev 0 nvmlDev 0 busId 1000 commId 0xabc - Init COMPLETE\n",
                p = 100 + r
            ));
        }
        for r in [0, 1, 3] {
            log.push_str(&timeout(r, 10, 10));
        }
        let d = diagnose(&log);
        assert!(root_line(&d).contains("opCount 8 "), "{}", root_line(&d));
        assert_eq!(d[0].json["cause_signature"]["id"], "collective_not_reached");
    }

    fn wrapper_line(rank: u32, seq: u32, shape: u32, dtype: &str) -> String {
        format!(
            "[rank{rank}]:[I1203 10:00:0{rank}.000000000 ProcessGroupWrapper.cpp:562] [Rank {rank}] Running collective: \
             CollectiveFingerPrint(SequenceNumber={seq}, OpType=BROADCAST, TensorShape=[{shape}], TensorDtypes={dtype}, \
             TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda))\n"
        )
    }

    #[test]
    fn a_rank_behind_in_the_debug_wrapper_is_the_one_the_others_wait_for() {
        // Lightning-style: rank 1 logged a metric the others did not and is one broadcast
        // behind them when they time out.
        let mut log = String::new();
        for r in 0..4 {
            log.push_str(&wrapper_line(r, 2, 64, "Float"));
        }
        log.push_str(&wrapper_line(1, 3, 1, "Long"));
        for r in [0, 2, 3] {
            log.push_str(&wrapper_line(r, 3, 1, "Long"));
            log.push_str(&wrapper_line(r, 4, 73, "Byte"));
        }
        for r in [0, 2, 3] {
            log.push_str(&timeout(r, 10, 10));
        }
        let d = diagnose(&log);
        assert_eq!(d[0].json["root_cause"]["rank"], 1, "{}", root_line(&d));
        assert!(
            root_line(&d).contains("SequenceNumber=3"),
            "{}",
            root_line(&d)
        );
    }

    #[test]
    fn debug_wrapper_lines_of_a_run_that_did_not_fail_make_no_diagnosis() {
        let mut log = String::new();
        for r in 0..4 {
            log.push_str(&wrapper_line(r, 7, 64, "Float"));
        }
        for r in [0, 2, 3] {
            log.push_str(&wrapper_line(r, 8, 64, "Float"));
        }
        assert!(diagnose(&log).is_empty());
    }

    #[test]
    fn a_rank_waiting_in_a_later_collective_than_the_rest_is_the_odd_one() {
        let line = |rank: u32, seq: u32, op: &str| {
            format!(
                "[rank{rank}]:[E513 13:25:57.714781669 ProcessGroupNCCL.cpp:616] [Rank {rank}] \
                 Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, \
                 NumelIn=513, NumelOut=513, Timeout(ms)=1800000) ran for 1800042 milliseconds \
                 before timing out.\n"
            )
        };
        let log = line(2, 700, "BROADCAST")
            + &line(1, 700, "BROADCAST")
            + &line(0, 702, "_ALLGATHER_BASE");
        let d = diagnose(&log);
        assert!(root_line(&d).starts_with("[rank0]:"), "{}", root_line(&d));
        assert_eq!(d[0].json["cause_signature"]["id"], "collective_mismatch");
        assert_eq!(
            d[0].json["facts"]["odd_values"],
            "#702 _ALLGATHER_BASE NumelIn=513 NumelOut=513"
        );
    }

    #[test]
    fn a_rank_past_a_collective_the_waiting_ranks_disagree_on_is_not_odd() {
        let line = |rank: u32, seq: u32, op: &str, n: u32| {
            format!(
                "[rank{rank}]:[E513 13:25:57.714781669 ProcessGroupNCCL.cpp:616] [Rank {rank}] \
                 Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, \
                 NumelIn={n}, NumelOut={n}, Timeout(ms)=1800000) ran for 1800042 milliseconds \
                 before timing out.\n"
            )
        };
        let log = line(2, 700, "BROADCAST", 513)
            + &line(1, 700, "BROADCAST", 9000)
            + &line(0, 702, "_ALLGATHER_BASE", 513);
        let d = diagnose(&log);
        assert!(!root_line(&d).starts_with("[rank0]:"), "{}", root_line(&d));
        assert!(d[0].json["facts"]["odd_values"]
            .as_str()
            .is_none_or(|v| !v.starts_with("#702")));
    }
}
