//! A rank that stopped logging a minute or more before the incident while most others went
//! on is a suspect (+10): it may have hung or died without last words. Where it printed no
//! failure line, its last line stands for it (the last thing it did).

use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use std::collections::BTreeMap;

const QUIET_MS: i64 = 60_000;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let Some(t0) = scope.first_hit_time(v) else {
        return;
    };
    let mut last: BTreeMap<u32, i64> = BTreeMap::new();
    let mut last_src: BTreeMap<u32, u32> = BTreeMap::new();
    for (si, s) in v.job.sources.iter().enumerate() {
        if let (Some(r), Some(t)) = (v.rank_of(si as u32), v.corrected(si as u32, s.last_ts)) {
            let e = last.entry(r).or_insert(t);
            if t >= *e {
                last_src.insert(r, si as u32);
            }
            *e = (*e).max(t);
        }
    }
    let quiet: Vec<u32> = last
        .iter()
        .filter(|(_, &t)| t + QUIET_MS < t0)
        .map(|(&r, _)| r)
        .collect();
    let active = last.values().filter(|&&t| t >= t0).count();
    if quiet.is_empty() || quiet.len() * 20 > last.len().max(20) || active * 2 < last.len() {
        return;
    }
    for r in quiet {
        let who = Who::Rank(r);
        let why = format!(
            "stopped logging {} s before the incident while the others went on",
            (t0 - last[&r]) / 1000
        );
        board.add(who, v.who_host(who), "silence", 10, why);
        let last_line = last_src.get(&r).and_then(|&src| {
            let ring = &v.job.sources[src as usize].ring;
            let line = ring
                .lines()
                .into_iter()
                .rev()
                .find(|l| l.opens_printed_record())?;
            Some(LineRef::Ring(src, line.seq))
        });
        let c = board.cand(who, v.who_host(who));
        c.stated = c.stated.or(last_line);
    }
}
