//! A process or host that other ranks name as the failing peer (by address, host name or
//! rank) is a suspect: +10 when one other rank names it, +20 when several do. Naming a host
//! counts for every process candidate on that host.

use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use crate::job::HostId;
use std::collections::{BTreeSet, HashMap};

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    for &i in scope.hits {
        let h = v.hit(i);
        if h.sig.is_none() {
            continue;
        }
        let printer = v.printer(h);
        for named in v.named(h) {
            let c = board.cand(named, v.who_host(named));
            c.named_by.insert(printer);
            if c.pointer.is_none() {
                c.pointer = Some(i);
            }
        }
    }
    let mut host_named: HashMap<HostId, BTreeSet<Who>> = HashMap::new();
    for c in board.cands.values() {
        if let (Who::Host(h), false) = (c.who, c.named_by.is_empty()) {
            host_named
                .entry(h)
                .or_default()
                .extend(c.named_by.iter().copied());
        }
    }
    let mut awards = Vec::new();
    for c in board.cands.values() {
        let mut named = c.named_by.clone();
        if let Some(n) = c.host.and_then(|h| host_named.get(&h)) {
            named.extend(n.iter().copied());
        }
        named.remove(&c.who);
        if !named.is_empty() {
            awards.push((c.who, c.host, named.len()));
        }
    }
    for (who, host, n) in awards {
        let weight = if n >= 2 { 20 } else { 10 };
        board.add(
            who,
            host,
            "peer_naming",
            weight,
            format!("named as the failing peer by {n} other ranks"),
        );
    }
}
