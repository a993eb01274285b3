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
use crate::correlate::view::View;
use crate::report::OddContext;

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
    scope.notes.borrow_mut().push(OddContext::new(
        FIELD,
        v.host_of(src).map(|h| v.host_name(h)),
        value,
        "no interface of that name was used by any process",
    ));
    let host = v.host_of(src);
    let who = v.process(src);
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

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const SETTING: &str =
        "gx-12:3301:3301 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens9f7";
    const FAMILY: &str = "gx-12:3301:3344 [0] misc/socket.cc:421 NCCL WARN ncclSocketInit: \
        connecting to address  with family 41233 is neither AF_INET(2) nor AF_INET6(10)";

    #[test]
    fn a_setting_that_matched_no_interface_is_the_root() {
        let d = diagnose(&format!("{SETTING}\n{FAMILY}\n"));
        assert_eq!(root_line(&d), SETTING);
        assert!(d[0]
            .json
            .to_string()
            .contains("NCCL_SOCKET_IFNAME=ens9f7 is set"));
    }

    #[test]
    fn a_used_interface_keeps_the_error_as_the_root() {
        let using = "gx-12:3301:3301 [0] NCCL INFO NET/Socket : Using [0]ens9f7:10.4.5.6<0>";
        let d = diagnose(&format!("{SETTING}\n{using}\n{FAMILY}\n"));
        assert_eq!(root_line(&d), FAMILY);
    }
}
