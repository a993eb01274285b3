//! A process that only printed symptoms (or, in an incident no signature recognised, only
//! unclassified errors) is a weak suspect: a quarter of the symptom's weight.

use crate::catalog::Role;
use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::View;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    for &i in scope.hits {
        let h = v.hit(i);
        let weight = match v.sig(h) {
            Some(s) if s.role == Role::Symptom => s.weight,
            Some(_) => continue,
            None if !scope.classified => 0,
            None => continue,
        };
        let who = v.printer(h);
        let host = v.host_of(h.source);
        let c = board.cand(who, host);
        if c.symptom.is_some() {
            continue;
        }
        c.symptom = Some(i);
        if c.ts.is_none() {
            c.ts = v.hit_time(h);
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
