//! A failed connection to a peer address that a process of the job listed as its own socket
//! interface, where that interface is one peers cannot reach (link-local, a container bridge):
//! NCCL connects only to addresses its peers advertised, so the failure proves the address was
//! used between hosts, and the process that listed it is where the fault is. Its listing line
//! becomes its root line, and it outweighs the failing line (that line's weight + 30), with or
//! without host names in the logs. Loopback aliases are `loopback_peer`'s: every host has them.
//!
//! Cases: an EKS node whose NCCL fell back to sockets and listed the Pod Identity address
//! (`[1]pod-id-link0:169.254.170.23`) beside its NIC; its peers' `connect to 169.254.170.23`
//! was refused.

use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::bad_interface::unreachable_reason;
use crate::correlate::rules::Scope;
use crate::correlate::view::View;
use std::collections::BTreeMap;

const OVER_FAILURE: i32 = 30;

/// A line where a process listed an address as that of its interface `iface`, which peers
/// cannot reach for `reason`.
struct Listing<'a> {
    src: u32,
    line: LineRef,
    sig: Option<u16>,
    iface: &'a str,
    reason: &'static str,
    seq: u64,
}

/// Per address, the first line (by job order) that listed it as an unreachable interface of
/// its process: from signature lines (each names one) and from the context table (the first
/// interface of each process). Built once per incident: an incident of thousands of failed
/// connects looks each one up here.
fn unreachable_listings<'a>(v: &View<'a>) -> BTreeMap<&'a str, Listing<'a>> {
    let from_hits = v.job.hits.iter().enumerate().filter_map(|(i, h)| {
        let (iface, ip) = (h.field("iface")?, h.field("ip")?);
        Some((
            ip,
            Listing::new(h.source, LineRef::Hit(i), h.sig, iface, ip, h.seq)?,
        ))
    });
    let ifaces = v
        .job
        .context
        .iter()
        .filter(|((field, _), _)| *field == "iface");
    let from_context = ifaces.filter_map(|((_, src), obs)| {
        let ip = v.job.context.get(&("ip", *src))?.value.as_str();
        let line = LineRef::Context(*src, "iface");
        Some((ip, Listing::new(*src, line, None, &obs.value, ip, obs.seq)?))
    });
    let mut out: BTreeMap<&str, Listing> = BTreeMap::new();
    for (ip, l) in from_hits.chain(from_context) {
        if out.get(ip).is_none_or(|e| l.seq < e.seq) {
            out.insert(ip, l);
        }
    }
    out
}

impl<'a> Listing<'a> {
    fn new(
        src: u32,
        line: LineRef,
        sig: Option<u16>,
        iface: &'a str,
        ip: &str,
        seq: u64,
    ) -> Option<Self> {
        let reason = unreachable_reason(iface, ip)?;
        Some(Listing {
            src,
            line,
            sig,
            iface,
            reason,
            seq,
        })
    }
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let listed = unreachable_listings(v);
    if listed.is_empty() {
        return;
    }
    let mut done: Vec<u32> = Vec::new();
    for &i in scope.hits {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        let Some(addr) = h.field("peer_addr") else {
            continue;
        };
        if sig.role != Role::Cause || addr.starts_with("127.") {
            continue;
        }
        let Some(first) = listed.get(addr) else {
            continue;
        };
        if done.contains(&first.src) {
            continue;
        }
        done.push(first.src);
        let who = v.process(first.src);
        let host = v.host_of(first.src);
        let c = board.cand(who, host);
        c.config = Some((first.line, first.sig.or(h.sig)));
        if c.ts.is_none() {
            c.ts = v.hit_time(h);
        }
        let why = format!(
            "this process listed {addr} ({}, interface {}) as its own, and a peer's \
             connection to that address failed",
            first.reason, first.iface
        );
        board.add(
            who,
            host,
            "advertised_address",
            i32::from(sig.weight) + OVER_FAILURE,
            why,
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const LISTING: &str =
        "NET/Socket : Using [0]eth0:10.1.216.156<0> [1]pod-id-link0:169.254.170.23<0>";

    #[test]
    fn the_process_that_listed_a_link_local_address_peers_failed_to_reach_is_the_root() {
        let log = format!(
            "node-a:20:20 [0] NCCL INFO {LISTING}\n\
             node-a:20:31 [0] NCCL WARN socketPollConnect: connect to 169.254.170.23<4312> \
             returned Connection refused, retrying (13/34)\n\
             RuntimeError: NCCL error: remote process exited or there was a network error\n"
        );
        let d = diagnose(&log);
        assert!(root_line(&d).ends_with(LISTING), "{}", root_line(&d));
        assert_eq!(d[0].json["signature"]["id"], "nccl_iface_link_local");
    }

    #[test]
    fn a_listing_of_another_address_is_not_blamed() {
        let log = "node-a:20:20 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.216.156<0> \
             [1]pod-id-link0:169.254.170.23<0>\n\
             node-a:20:31 [0] NCCL WARN socketPollConnect: connect to 169.254.9.9<4312> \
             returned Connection refused, retrying (13/34)\n";
        let d = diagnose(log);
        assert!(root_line(&d).contains("169.254.9.9"), "{}", root_line(&d));
    }
}
