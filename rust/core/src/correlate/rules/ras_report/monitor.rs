//! The events of `ncclras -m` (NCCL 2.29.2 and later, kept per source by
//! `crate::ras_monitor`) as the same findings as a report's: a peer declared dead
//! (`PEER_DEAD`, `PEER_TIMEOUT_DEAD`) is a dead process; a peer that lost contact
//! (`PEER_UNRESPONSIVE`, `PEER_KEEPALIVE_TIMEOUT`, `PEER_SEND_STUCK`, `PEER_DISCONNECTED`) and
//! was not heard from again (`PEER_RECOVERED`, `PEER_CONNECTED`, `PEER_NEW`) is a missing one.
//! Dead is final: NCCL never takes a peer off its dead list.

use super::{fact, Ctx, Proc, W_DEAD, W_MISSING};
use crate::correlate::board::Board;
use crate::ras_monitor::{Event, Monitor, Verdict};
use std::collections::BTreeMap;

fn proc_of(e: &Event) -> Proc {
    Proc {
        comm_rank: None,
        pid: e.pid,
        node: e.node.clone(),
        gpu: e.gpus.clone(),
        seq: e.seq,
        comm_size: None,
    }
}

/// Each peer's deciding event: its first death, else its last loss or return.
fn verdicts(m: &Monitor) -> Vec<&Event> {
    let mut by_peer: BTreeMap<_, &Event> = BTreeMap::new();
    for e in &m.events {
        if e.verdict == Verdict::Other {
            continue;
        }
        let key = e.peer_key();
        match by_peer.get(&key) {
            Some(prev) if prev.verdict == Verdict::Dead => {}
            _ => {
                by_peer.insert(key, e);
            }
        }
    }
    let mut out: Vec<&Event> = by_peer.into_values().collect();
    out.sort_by_key(|e| e.seq);
    out
}

pub(super) fn apply(cx: &Ctx, m: &Monitor, board: &mut Board) {
    for e in verdicts(m) {
        let p = proc_of(e);
        let who = match (e.pid, e.addr.as_deref()) {
            (Some(pid), _) => format!("process {pid}"),
            (None, Some(addr)) => format!("the process at {addr}"),
            (None, None) => "a process".to_string(),
        };
        let node = e.node.as_deref().unwrap_or("?");
        let details = if e.details.is_empty() {
            String::new()
        } else {
            format!(": {}", e.details)
        };
        match e.verdict {
            Verdict::Dead => {
                let why = format!("NCCL RAS monitor: {} for {who} on {node}{details}", e.event);
                let facts = vec![fact("ras_event", &e.event)];
                cx.blame(
                    board,
                    &p,
                    None,
                    e.seq,
                    ("ras_process_dead", W_DEAD),
                    why,
                    facts,
                );
            }
            Verdict::Lost => {
                let why = format!(
                    "NCCL RAS monitor: {} for {who} on {node}{details}, and no sign of it since",
                    e.event
                );
                let note = format!(" on {node} (monitor event {}, not recovered)", e.event);
                let facts = vec![
                    fact("who_missing", who),
                    fact("ras_node_note", note),
                    fact("ras_event", &e.event),
                ];
                cx.blame(
                    board,
                    &p,
                    None,
                    e.seq,
                    ("ras_rank_missing", W_MISSING),
                    why,
                    facts,
                );
            }
            Verdict::Back | Verdict::Other => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::verdicts;
    use crate::correlate::testkit::{diagnose, root_line};
    use crate::ras_monitor::Monitor;

    /// Two NCCL processes' init lines (host and pid to rank), then what they print as they
    /// time out, and the monitor's lines in another file of the job (`ncclras -m`).
    const LOGS: &str = "gpu-b1:7740:7740 [0] NCCL INFO comm 0x55d0c1a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x6d2f00aa4c11b8e3 - Init COMPLETE\n\
        gpu-b2:7741:7741 [1] NCCL INFO Bootstrap : Using eth0:10.7.0.3<0>\n\
        gpu-b2:7741:7741 [1] NCCL INFO comm 0x55d0c1a1 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2b000 commId 0x6d2f00aa4c11b8e3 - Init COMPLETE\n";

    #[test]
    fn a_peer_the_monitor_declares_dead_is_the_root() {
        let text = format!(
            "{LOGS}[2026-01-12 08:40:52] PEER_NEW: Process 7741 on node 10.7.0.3 managing GPU 1 \n\
             [2026-01-12 08:41:07] PEER_DEAD: Process 7741 on node 10.7.0.3 managing GPU 1 \n"
        );
        let d = diagnose(&text);
        assert_eq!(d[0].json["cause_signature"]["id"], "ras_process_dead");
        assert_eq!(d[0].json["facts"]["pid"], "7741");
        assert_eq!(d[0].json["facts"]["ras_event"], "PEER_DEAD");
        assert_eq!(d[0].json["root_cause"]["rank"], 1);
        assert!(root_line(&d).contains("PEER_DEAD: Process 7741"));
    }

    #[test]
    fn the_json_form_names_the_same_peer() {
        let text = format!(
            "{LOGS}{{\n  \"timestamp\": \"2026-01-12 08:41:07\",\n  \"group\": \"LIFECYCLE\",\n  \
             \"event\": \"PEER_DEAD\",\n  \"peer\": {{\n    \"host\": \"10.7.0.3\",\n    \
             \"pid\": 7741,\n    \"cuda_devs\": [1],\n    \"nvml_devs\": [1]\n  }},\n  \
             \"details\": \"\"\n}}\n"
        );
        let d = diagnose(&text);
        assert_eq!(d[0].json["cause_signature"]["id"], "ras_process_dead");
        assert_eq!(d[0].json["facts"]["pid"], "7741");
    }

    #[test]
    fn losses_that_recover_make_no_diagnosis() {
        let text = "[2026-01-12 08:40:52] PEER_UNRESPONSIVE: Process 7741 on node 10.7.0.3 managing GPU 1 peer not responding for 5s (keepalive warning)\n\
            [2026-01-12 08:40:53] PEER_RECOVERED: Process 7741 on node 10.7.0.3 managing GPU 1 peer responding again\n";
        assert!(diagnose(text).is_empty());
    }

    #[test]
    fn a_loss_that_recovers_is_no_verdict_and_death_is_final() {
        let mut m = Monitor::default();
        for (i, l) in [
            "PEER_UNRESPONSIVE: Process 7 on node 10.0.0.2 managing GPU 0 peer not responding for 5s (keepalive warning)",
            "PEER_RECOVERED: Process 7 on node 10.0.0.2 managing GPU 0 peer responding again",
            "PEER_KEEPALIVE_TIMEOUT: Process 8 on node 10.0.0.2 managing GPU 1 keepalive timeout after 20s, terminating connection",
            "PEER_DEAD: Process 9 on node 10.0.0.3 managing GPU 0 ",
            "PEER_NEW: Process 9 on node 10.0.0.3 managing GPU 0 ",
        ]
        .iter()
        .enumerate()
        {
            m.text_line(l, i as u64);
        }
        let got: Vec<(&str, Option<u32>)> = verdicts(&m)
            .iter()
            .map(|e| (e.event.as_str(), e.pid))
            .collect();
        assert_eq!(
            got,
            vec![
                ("PEER_RECOVERED", Some(7)),
                ("PEER_KEEPALIVE_TIMEOUT", Some(8)),
                ("PEER_DEAD", Some(9))
            ]
        );
    }
}
