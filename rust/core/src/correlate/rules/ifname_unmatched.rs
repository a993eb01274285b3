//! `NCCL_SOCKET_IFNAME` names an interface that no host has (a typo, another machine's name).
//! NCCL then finds no interface and fails without saying why: no `Using <iface>` line
//! anywhere, and a socket or bootstrap error about an address that is not one
//! (`connecting to address  with family 59936`, `no socket interface found`). The setting is
//! the fault, so its line becomes the root line (+90).
//!
//! Only errors that name no peer count: a refused or timed-out connection to a peer means an
//! interface was found and used.

use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use serde_json::json;

const FIELD: &str = "socket_ifname";
const NO_ADDRESS_SUBSYSTEMS: &[&str] = &["socket", "bootstrap"];

/// The best cause of this incident's socket/bootstrap failures that names no peer, if any.
fn failure_without_peer(v: &View, scope: &Scope) -> Option<u16> {
    scope.hits.iter().find_map(|&i| {
        let h = v.hit(i);
        let sig = v.sig(h)?;
        let fits = sig.role == Role::Cause
            && NO_ADDRESS_SUBSYSTEMS.contains(&sig.subsystem.as_str())
            && h.field("peer_addr").is_none()
            && h.field("peer_host").is_none()
            && h.field("peer_rank").is_none();
        fits.then_some(h.sig?)
    })
}

/// The first process that showed the setting: (source, value).
fn first_setting<'a>(v: &View<'a>) -> Option<(u32, &'a str)> {
    v.job
        .context
        .iter()
        .filter(|((f, _), _)| *f == FIELD)
        .min_by_key(|(_, obs)| (obs.seq, obs.source))
        .map(|((_, src), obs)| (*src, obs.value.as_str()))
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    if v.job.context.keys().any(|(f, _)| *f == "iface") {
        return;
    }
    let Some(cause_sig) = failure_without_peer(v, scope) else {
        return;
    };
    let Some((src, value)) = first_setting(v) else {
        return;
    };
    scope.notes.borrow_mut().push(json!({
        "field": FIELD, "host": v.host_of(src).map(|h| v.host_name(h)), "value": value,
        "problem": "no interface of that name was used by any process",
    }));
    let host = v.host_of(src);
    let who = v.rank_of(src).map_or(Who::Source(src), Who::Rank);
    let c = board.cand(who, host);
    if c.config.is_none() {
        c.config = Some((LineRef::Context(src, FIELD), Some(cause_sig)));
        c.ts = v.corrected(src, v.job.context[&(FIELD, src)].ts_ms);
    }
    let why = format!(
        "NCCL_SOCKET_IFNAME={value} is set, no process reports using an interface, and the \
         socket layer failed on an address that is none"
    );
    board.add(who, host, "ifname_unmatched", 90, why);
}
