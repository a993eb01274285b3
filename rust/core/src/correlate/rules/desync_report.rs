//! A rank that a desync report (or any line with a `lagging_ranks` or `ready_ranks` field, such
//! as Horovod's stall report) names as lagging behind the collective everyone else is in is a
//! strong suspect (+40).

use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    for &i in scope.hits {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        for r in v.lagging_ranks(h) {
            let who = Who::Rank(r);
            let host = v.who_host(who);
            let c = board.cand(who, host);
            c.pointer = Some(c.pointer.unwrap_or(i));
            if !c.has_rule("desync_report") {
                let why = format!("named as lagging by a desync report ({})", sig.id);
                board.add(who, host, "desync_report", 40, why);
            }
        }
    }
}
