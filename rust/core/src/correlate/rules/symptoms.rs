//! A process that only printed symptoms (its line: the most telling one) (or, in an incident no signature recognised, only
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
        // The most telling symptom (highest weight), the first of equals.
        let better = c.symptom.is_none_or(|s| {
            let w = v.sig(v.hit(s)).map_or(0, |x| x.weight);
            weight > w || (weight == w && v.order_key(i) < v.order_key(s))
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
