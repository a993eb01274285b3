//! Two machines NCCL took for one. NCCL decides which ranks share a machine by a hash of the
//! host name (older releases by the name alone), so two machines with one name (cloned
//! images, a container hostname, a name that is a prefix) get P2P or shared-memory links
//! between them, which cannot work: the job hangs at its first collective, often with no
//! error line. The printed links (`p2p_links`) show it in two ways:
//!
//! - **Two addresses:** processes under one host name state different addresses for the same
//!   interface (`NET : Using interface eth1:10.0.0.5` and `…:10.0.0.6`), and a link joins a
//!   process of one address to a rank of the other.
//! - **One GPU, two ranks:** on one host name, each process's own links place one rank on each
//!   GPU, and a link places a different rank on a GPU another rank already holds.
//!
//! The conditions are strict (one rank per process in the links, no GPU claimed twice by the
//! processes themselves, for the second way no process with init lines of two communicators:
//! a tensor-parallel group numbers GPU 1's rank 1 where the world numbers it 1 too, but a
//! pipeline pair numbers it 0), so a job with several communicators or with one visible GPU
//! per process is left alone.
//!
//! Cases: nccl#187 (ranks of two machines named by one prefix: `6[6] -> 10[2] via P2P/IPC`
//! while rank 2 holds GPU 2), horovod#148 (two machines named `node1`: `2 -> 1 via P2P/IPC`
//! between addresses .176 and .175).

use super::view::View;
use crate::job::HostId;
use std::collections::BTreeMap;

/// A link NCCL built between two machines it took for one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crossing {
    /// Index into the job's `p2p_links`.
    pub link: usize,
    pub host: HostId,
    /// Why the two ends are on different machines, as the diagnosis states it.
    pub why: String,
}

/// The first link (in print order) whose two ends are provably on different machines.
pub fn first_crossing(v: &View) -> Option<Crossing> {
    let links = &v.job.p2p_links.links;
    let own = own_ranks(v)?;
    let by_address = links
        .iter()
        .enumerate()
        .find_map(|(i, l)| across_addresses(v, &own, i, l));
    by_address.or_else(|| {
        if v.job.p2p_links.several_comms() {
            return None;
        }
        let gpus = gpu_holders(v, &own)?;
        links
            .iter()
            .enumerate()
            .find_map(|(i, l)| onto_held_gpu(v, &gpus, i, l))
    })
}

/// Each printing process's rank in its own links, and the first process of each rank.
struct Own {
    rank_of: BTreeMap<u32, u32>,
    process_of: BTreeMap<u32, u32>,
}

/// None when a process shows two ranks (it is in several communicators, whose numberings
/// cannot be told apart here).
fn own_ranks(v: &View) -> Option<Own> {
    let mut own = Own {
        rank_of: BTreeMap::new(),
        process_of: BTreeMap::new(),
    };
    for l in &v.job.p2p_links.links {
        if *own.rank_of.entry(l.src).or_insert(l.from) != l.from {
            return None;
        }
        own.process_of.entry(l.from).or_insert(l.src);
    }
    (!own.rank_of.is_empty()).then_some(own)
}

fn address<'a>(v: &View<'a>, src: u32) -> Option<&'a str> {
    v.job.context.get(&("ip", src)).map(|o| o.value.as_str())
}

fn across_addresses(
    v: &View,
    own: &Own,
    i: usize,
    l: &crate::p2p_links::P2pLink,
) -> Option<Crossing> {
    let peer = *own.process_of.get(&l.to)?;
    let host = v.host_of(l.src)?;
    if v.host_of(peer) != Some(host) {
        return None;
    }
    let (a, b) = (address(v, l.src)?, address(v, peer)?);
    (a != b).then(|| Crossing {
        link: i,
        host,
        why: format!(
            "rank {} states address {a} and rank {} states {b}, both under the host name {}",
            l.from,
            l.to,
            v.host_name(host)
        ),
    })
}

/// Per (host, GPU), the rank whose process printed links from it; None when a GPU of a host
/// is claimed by two ranks (one visible GPU per process, or the clash itself in plain view).
fn gpu_holders(v: &View, own: &Own) -> Option<BTreeMap<(HostId, u16), u32>> {
    let mut holders = BTreeMap::new();
    for l in &v.job.p2p_links.links {
        let (Some(host), Some(dev)) = (v.host_of(l.src), l.from_dev) else {
            continue;
        };
        let rank = own.rank_of[&l.src];
        if *holders.entry((host, dev)).or_insert(rank) != rank {
            return None;
        }
    }
    Some(holders)
}

fn onto_held_gpu(
    v: &View,
    gpus: &BTreeMap<(HostId, u16), u32>,
    i: usize,
    l: &crate::p2p_links::P2pLink,
) -> Option<Crossing> {
    let (host, dev) = (v.host_of(l.src)?, l.to_dev?);
    let holder = *gpus.get(&(host, dev))?;
    (holder != l.to).then(|| Crossing {
        link: i,
        host,
        why: format!(
            "rank {} reaches rank {} on GPU {dev} of {} over P2P, but GPU {dev} there runs \
             rank {holder}",
            l.from,
            l.to,
            v.host_name(host)
        ),
    })
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    #[test]
    fn a_link_onto_a_gpu_another_rank_holds_is_the_root() {
        let log = "gpu7:100:200 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC\n\
             gpu7:101:201 [1] NCCL INFO Ring 00 : 1[1] -> 2[2] via P2P/IPC\n\
             gpu7:102:202 [2] NCCL INFO Ring 00 : 2[2] -> 3[3] via P2P/IPC\n\
             gpu7:103:203 [3] NCCL INFO Ring 00 : 3[3] -> 5[1] via P2P/IPC\n";
        let d = diagnose(log);
        assert!(
            root_line(&d).ends_with("3[3] -> 5[1] via P2P/IPC"),
            "{}",
            root_line(&d)
        );
        assert_eq!(d[0].json["cause_signature"]["id"], "p2p_across_machines");
    }

    #[test]
    fn two_addresses_under_one_name_and_a_link_between_them() {
        let log = "n1:10:20 [0] NCCL INFO NET : Using interface eth0:10.0.0.5<0>\n\
             n1:11:21 [1] NCCL INFO NET : Using interface eth0:10.0.0.5<0>\n\
             n1:30:40 [0] NCCL INFO NET : Using interface eth0:10.0.0.6<0>\n\
             n1:30:40 [0] NCCL INFO 2 -> 3 via P2P/IPC\n\
             n1:10:20 [0] NCCL INFO 0 -> 1 via P2P/IPC\n\
             n1:11:21 [1] NCCL INFO 1 -> 2 via P2P/IPC\n";
        let d = diagnose(log);
        assert!(
            root_line(&d).ends_with("1 -> 2 via P2P/IPC"),
            "{}",
            root_line(&d)
        );
    }

    #[test]
    fn one_machine_whose_links_agree_is_healthy() {
        let log = "gpu7:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n\
             gpu7:101:201 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC\n\
             gpu7:102:202 [2] NCCL INFO Channel 00/0 : 2[2] -> 3[3] via P2P/IPC\n\
             gpu7:103:203 [3] NCCL INFO Channel 00/0 : 3[3] -> 0[0] via P2P/IPC\n";
        assert!(diagnose(log).is_empty());
    }

    #[test]
    fn processes_with_one_visible_gpu_each_are_left_alone() {
        let log = "gpu7:100:200 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] via P2P/IPC\n\
             gpu7:101:201 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] via P2P/IPC\n\
             gpu7:102:202 [0] NCCL INFO Channel 00/0 : 2[0] -> 0[0] via P2P/IPC\n";
        assert!(diagnose(log).is_empty());
    }
}
