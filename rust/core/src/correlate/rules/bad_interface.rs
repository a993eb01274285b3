//! A host whose NCCL socket interface is one its peers cannot reach — loopback, a container
//! bridge (`docker0`, `veth*`, `virbr*`, `br-*`) or a link-local address — is where a
//! multi-host job's connection failures start. Its `Using` line becomes the root line. The
//! rule is strong (+90) when the incident is a connection failure or shows no cause at all
//! (a hang); otherwise it is only noted (+20).

use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::view::View;
use crate::job::HostId;
use crate::report::OddContext;
use std::collections::BTreeMap;

const CONNECTION_SUBSYSTEMS: &[&str] = &["socket", "bootstrap", "init", "store"];

/// Why peers on other hosts cannot use this interface, or None when nothing is wrong.
pub fn unreachable_reason(iface: &str, ip: &str) -> Option<&'static str> {
    let ip = ip.split('%').next().unwrap_or(ip);
    if iface == "lo" || ip.starts_with("127.") || ip == "::1" {
        return Some("loopback");
    }
    let bridge = ["docker", "veth", "virbr", "br-"];
    if bridge.iter().any(|b| iface.starts_with(b)) {
        return Some("a container or VM bridge");
    }
    if ip.starts_with("169.254.") || ip.to_ascii_lowercase().starts_with("fe80:") {
        return Some("link-local");
    }
    None
}

/// Weight of the rule in this incident: strong for connection failures and hangs.
fn weight(v: &View, scope: &Scope) -> i32 {
    let causes: Vec<&str> = scope
        .hits
        .iter()
        .filter_map(|&i| v.sig(v.hit(i)))
        .filter(|s| s.role == Role::Cause)
        .map(|s| s.subsystem.as_str())
        .collect();
    if causes.is_empty() || causes.iter().any(|s| CONNECTION_SUBSYSTEMS.contains(s)) {
        90
    } else {
        20
    }
}

/// Per host, the process (lowest rank, then first seen) whose interface is unreachable, with
/// the reason.
fn flagged_hosts(v: &View) -> BTreeMap<HostId, (u32, &'static str)> {
    let mut out: BTreeMap<HostId, (u32, &'static str, (u32, u64))> = BTreeMap::new();
    for ((field, src), obs) in &v.job.context {
        if *field != "iface" {
            continue;
        }
        let ip = v
            .job
            .context
            .get(&("ip", *src))
            .map_or("", |o| o.value.as_str());
        let (Some(reason), Some(host)) = (unreachable_reason(&obs.value, ip), v.host_of(*src))
        else {
            continue;
        };
        let order = (v.rank_of(*src).unwrap_or(u32::MAX), obs.seq);
        let e = out.entry(host).or_insert((*src, reason, order));
        if order < e.2 {
            *e = (*src, reason, order);
        }
    }
    out.into_iter().map(|(h, (s, r, _))| (h, (s, r))).collect()
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    if v.job.hosts.len() < 2 {
        return;
    }
    let flagged = flagged_hosts(v);
    if flagged.is_empty() || flagged.len() * 2 > v.job.hosts.len().max(2) {
        return;
    }
    let weight = weight(v, scope);
    for (host, (src, reason)) in flagged {
        let obs = &v.job.context[&("iface", src)];
        scope.notes.borrow_mut().push(OddContext::new(
            "iface",
            Some(v.host_name(host)),
            &obs.value,
            reason,
        ));
        let who = v.process(src);
        let c = board.cand(who, Some(host));
        if c.config.is_none() {
            c.config = Some((LineRef::Context(src, "iface"), None));
            c.ts = v.corrected(src, obs.ts_ms);
        }
        let why = format!(
            "NCCL on this host uses interface {} ({reason}), which peers on other hosts cannot reach",
            obs.value
        );
        board.add(who, Some(host), "bad_interface", weight, why);
    }
}

#[cfg(test)]
mod tests {
    use super::unreachable_reason;

    #[test]
    fn interfaces_peers_cannot_reach() {
        assert_eq!(unreachable_reason("lo", "127.0.0.1"), Some("loopback"));
        assert_eq!(
            unreachable_reason("docker0", "172.17.0.1"),
            Some("a container or VM bridge")
        );
        assert_eq!(
            unreachable_reason("ip6tnl0", "fe80::1%ip6tnl0"),
            Some("link-local")
        );
        assert_eq!(unreachable_reason("eth0", "10.1.2.3"), None);
        assert_eq!(unreachable_reason("ib0", "192.168.1.5"), None);
    }
}
