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
use crate::correlate::view::{View, Who};

const OVER_FAILURE: i32 = 30;

/// A line where a process listed `ip` as the address of its interface `iface`.
struct Listing {
    src: u32,
    line: LineRef,
    sig: Option<u16>,
    iface: String,
    seq: u64,
}

/// Every interface a process of the job listed, from signature lines (each names one) and
/// from the context table (the first one of each process).
fn listings<'a>(v: &View<'a>, ip: &str) -> Vec<Listing> {
    let from_hits = v.job.hits.iter().enumerate().filter_map(|(i, h)| {
        let (iface, addr) = (h.field("iface")?, h.field("ip")?);
        (addr == ip).then(|| Listing {
            src: h.source,
            line: LineRef::Hit(i),
            sig: h.sig,
            iface: iface.to_string(),
            seq: h.seq,
        })
    });
    let from_context = v.job.context.iter().filter_map(|((field, src), obs)| {
        let addr = v.job.context.get(&("ip", *src))?;
        (*field == "iface" && addr.value == ip).then(|| Listing {
            src: *src,
            line: LineRef::Context(*src, "iface"),
            sig: None,
            iface: obs.value.clone(),
            seq: obs.seq,
        })
    });
    from_hits.chain(from_context).collect()
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
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
        let listed = listings(v, addr);
        let Some(first) = listed
            .iter()
            .filter(|l| unreachable_reason(&l.iface, addr).is_some())
            .min_by_key(|l| l.seq)
        else {
            continue;
        };
        if done.contains(&first.src) {
            continue;
        }
        done.push(first.src);
        let reason = unreachable_reason(&first.iface, addr).unwrap_or("unreachable");
        let who = v
            .rank_of(first.src)
            .map_or(Who::Source(first.src), Who::Rank);
        let host = v.host_of(first.src);
        let c = board.cand(who, host);
        c.config = Some((first.line, first.sig.or(h.sig)));
        if c.ts.is_none() {
            c.ts = v.hit_time(h);
        }
        let why = format!(
            "this process listed {addr} ({reason}, interface {}) as its own, and a peer's \
             connection to that address failed",
            first.iface
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
