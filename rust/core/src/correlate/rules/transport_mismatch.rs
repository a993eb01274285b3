//! `socketFinalizeAccept: wrong type A != B` says by itself that the two ends of a connection
//! run different network transports: the connecting peer sent socket type A, the accepting
//! process expected its own type B (3: NCCL's socket transport, 4: its IB transport). The
//! side on sockets is where IB did not come up, so that side's own line showing the socket
//! transport (`via NET/Socket`, `Using network Socket`) is the root (+90, as a setting that
//! the failure points at, `setting_blame`): the printer's when it expected sockets, else the
//! peer's (named by address from NCCL 2.27 on), else any process of the job on sockets.
//!
//! Case: nccl-tests #188, where both machines are named `user`; the maintainer's answer was
//! that IB must work on both nodes (or be disabled on all). The warning is the first
//! failure; the accepting process's `[receive] via NET/Socket/0` channel line is the cause.

use super::Scope;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::view::{View, Who};
use crate::report::OddContext;

/// NCCL's `ncclSocketTypeNetSocket`.
const NET_SOCKET: &str = "3";

/// The sighting of a socket transport shown by `src` (channels first, then `Using network`).
fn socket_line_of(v: &View, src: Option<u32>) -> Option<u32> {
    let t = &v.job.identity;
    let mut best: Option<(u8, u32)> = None;
    for (i, s) in t.sightings.iter().enumerate() {
        let rank = match t.key_name(s.key) {
            "net_transport" => 0,
            "transport" => 1,
            _ => continue,
        };
        if !s.obs.value.to_ascii_lowercase().contains("socket") {
            continue;
        }
        if src.is_some_and(|p| !s.sources.contains(&p)) {
            continue;
        }
        if best.is_none_or(|(r, _)| rank < r) {
            best = Some((rank, i as u32));
        }
    }
    best.map(|(_, i)| i)
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    for &i in scope.hits {
        let h = v.hit(i);
        if v.sig(h).is_none_or(|s| s.id != "nccl_sock_wrong_type") {
            continue;
        }
        let (Some(own), Some(peer)) = (h.field("own_socket_type"), h.field("peer_socket_type"))
        else {
            continue;
        };
        let on_socket = if own == NET_SOCKET {
            Some(h.source)
        } else if peer == NET_SOCKET {
            // The peer is on sockets: the process behind the address it names, if known.
            v.named(h).first().and_then(|w| match *w {
                Who::Host(host) => (0..v.job.sources.len() as u32)
                    .find(|&s| v.host_of(s) == Some(host) && socket_line_of(v, Some(s)).is_some()),
                w => v.sources_of_who(w).first().copied(),
            })
        } else {
            continue;
        };
        let Some(sighting) = socket_line_of(v, on_socket).or_else(|| socket_line_of(v, None))
        else {
            continue;
        };
        let s = &v.job.identity.sightings[sighting as usize];
        let src = s.obs.source;
        let host = v.host_of(src);
        let who = v.process(src);
        scope.notes.borrow_mut().push(OddContext::new(
            v.job.identity.key_name(s.key),
            host.map(|x| v.host_name(x)),
            &s.obs.value,
            "this side of the connection runs on sockets while its peer uses IB",
        ));
        let c = board.cand(who, host);
        if c.config.is_none() {
            c.config = Some((LineRef::Identity(sighting), h.sig));
            c.ts = v.corrected(src, s.obs.ts_ms);
        }
        let why = format!(
            "its channels run on {} while the peer connected with another transport (wrong type {peer} != {own})",
            s.obs.value
        );
        board.add(who, host, "transport_mismatch", 90, why);
        return;
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const SOCKET_CHANNEL: &str =
        "box:4100:4150 [0] NCCL INFO Channel 00/0 : 5[1] -> 0[0] [receive] via NET/Socket/0";

    #[test]
    fn the_side_on_sockets_is_the_root() {
        let d = diagnose(&format!(
            "{SOCKET_CHANNEL}\n\
             box:7300:7351 [2] NCCL INFO Channel 00/0 : 6[2] -> 7[3] via P2P/IPC/read\n\
             box:4100:4160 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3\n\
             box:4100:4160 [0] NCCL INFO misc/socket.cc:561 -> 3\n"
        ));
        assert_eq!(root_line(&d), SOCKET_CHANNEL);
        assert_eq!(d[0].json["signature"]["id"], "nccl_channel_net");
        assert!(d[0].json["first_warning"]["line"]
            .as_str()
            .unwrap()
            .contains("wrong type"));
    }

    #[test]
    fn without_a_socket_line_the_warning_stays_the_root() {
        let warn = "box:4100:4160 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3";
        let d = diagnose(&format!(
            "{warn}\nbox:4100:4160 [0] NCCL INFO misc/socket.cc:561 -> 3\n"
        ));
        assert_eq!(root_line(&d), warn);
    }
}
