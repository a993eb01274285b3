//! A failed connection to a peer at a 127.x address (`blames = "peer"`: Gloo's
//! `connect [127.0.1.1]:P`, NCCL's `Connect to 127.0.1.1<P>`) names a loopback alias, which every
//! host has. Where a host stated the address as its own (an `ip` context line), the blame of
//! the cause line already points there; that host's own line becomes its root line (+20). Else
//! the job's hosts are the comparison: when the hosts that printed such failures are all but
//! one, the one left is the host that advertised the alias (Debian's `127.0.1.1 <hostname>` in
//! /etc/hosts). It gets the witnesses' line as its root line and outweighs them (the line's
//! weight + 30).

use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use crate::job::HostId;
use std::collections::BTreeSet;

const OVER_WITNESSES: i32 = 30;
const OWN_LINE: i32 = 20;

/// The process of `host` that stated `addr` as its own address.
fn stated_by(v: &View, host: HostId, addr: &str) -> Option<u32> {
    v.job
        .context
        .iter()
        .filter(|((f, src), obs)| *f == "ip" && obs.value == addr && v.host_of(*src) == Some(host))
        .min_by_key(|(_, obs)| obs.seq)
        .map(|((_, src), _)| *src)
}

/// A host named by a loopback failure that states the address itself: its line is the root.
fn own_lines(v: &View, scope: &Scope, board: &mut Board) {
    for &i in scope.hits {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        let Some(addr) = h.field("peer_addr").filter(|a| a.starts_with("127.")) else {
            continue;
        };
        if sig.role != Role::Cause || !sig.blames_peer {
            continue;
        }
        for named in v.named(h) {
            let Who::Host(host) = named else { continue };
            let Some(src) = stated_by(v, host, addr) else {
                continue;
            };
            let c = board.cand(named, Some(host));
            if c.config.is_some() {
                continue;
            }
            c.config = Some((LineRef::Context(src, "ip"), h.sig));
            let why = format!(
                "this host's own Gloo address is {addr}, a loopback alias, which its peers on \
                 other hosts tried and failed to reach"
            );
            board.add(named, Some(host), "loopback_peer", OWN_LINE, why);
        }
    }
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    own_lines(v, scope, board);
    let hosts = v.job.hosts.len();
    if hosts < 2 {
        return;
    }
    let mut witnesses: BTreeSet<HostId> = BTreeSet::new();
    let mut first: Option<usize> = None;
    for &i in scope.hits {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        if sig.role != Role::Cause || !sig.blames_peer || !v.named(h).is_empty() {
            continue;
        }
        let (Some(addr), Some(host)) = (h.field("peer_addr"), v.host_of(h.source)) else {
            continue;
        };
        if !addr.starts_with("127.") {
            continue;
        }
        witnesses.insert(host);
        if first.is_none_or(|f| v.order_key(i) < v.order_key(f)) {
            first = Some(i);
        }
    }
    let Some(first) = first else { return };
    let others: Vec<HostId> = (0..hosts as HostId)
        .filter(|h| !witnesses.contains(h))
        .collect();
    let [advertiser] = others[..] else { return };
    let h = v.hit(first);
    let line_weight = v.sig(h).map_or(0, |s| s.weight);
    let who = Who::Host(advertiser);
    let c = board.cand(who, Some(advertiser));
    if c.cause.is_none() {
        c.cause = Some(first);
        c.cause_weight = line_weight;
        c.ts = v.hit_time(h);
    }
    let why = format!(
        "every other host of the job ({}) failed to connect to {}, a loopback alias; this host \
         is the one left that can have advertised it",
        witnesses.len(),
        h.field("peer_addr").unwrap_or("127.x")
    );
    board.add(
        who,
        Some(advertiser),
        "loopback_peer",
        i32::from(line_weight) + OVER_WITNESSES,
        why,
    );
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const REFUSED: &str = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:761] \
        connect [127.0.1.1]:60817: Connection refused";

    #[test]
    fn the_host_that_printed_no_loopback_failure_advertised_it() {
        let log = format!(
            "node-01: [rank0]:RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] \
             Connect timeout [192.168.7.12]:40211\n\
             node-02: [rank1]:{REFUSED}\n\
             node-03: [rank2]:{REFUSED}\n"
        );
        let d = diagnose(&log);
        assert_eq!(d[0].json["root_cause"]["host"], "node-01");
        assert_eq!(d[0].json["signature"]["id"], "gloo_connect_loopback_peer");
    }

    #[test]
    fn the_host_whose_own_line_shows_the_alias_is_the_root_line() {
        let own = "node-01: [rank0]:RuntimeError: [enforce fail at \
            ../third_party/gloo/gloo/transport/tcp/pair.cc:375] state_ >= CONNECTED. 1 vs 2. \
            Pair is not connected ([127.0.1.1]:60817 <--> [192.168.7.12]:40211)";
        let log = format!("node-02: [rank1]:{REFUSED}\nnode-03: [rank2]:{REFUSED}\n{own}\n");
        let d = diagnose(&log);
        assert_eq!(root_line(&d), own);
        assert_eq!(d[0].json["root_cause"]["host"], "node-01");
        assert_eq!(
            d[0].json["cause_signature"]["id"],
            "gloo_connect_loopback_peer"
        );
    }

    #[test]
    fn no_host_is_blamed_when_every_host_failed_the_same_way() {
        let log = format!("node-01: [rank0]:{REFUSED}\nnode-02: [rank1]:{REFUSED}\n");
        let d = diagnose(&log);
        let host = d[0].json["root_cause"]["host"].as_str().unwrap();
        assert_eq!(host, "node-01", "the first witness stands for all");
        let suspects = d[0].json["suspects"].to_string();
        assert!(
            !suspects.contains(r#""rule":"loopback_peer""#),
            "{suspects}"
        );
    }
}
