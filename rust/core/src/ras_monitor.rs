//! The event lines of `ncclras -m` (monitor mode, NCCL 2.29.2 and later:
//! `rasClientsNotifyEvent` in src/ras/client_support.cc), kept per source as they arrive.
//!
//! Text, one line per event (`%F %T` local time, then the event, the peer, the details):
//!
//! ```text
//! [2026-01-12 08:41:07] PEER_DEAD: Process 51533 on node 10.40.83.5 managing GPU 1
//! [2026-01-12 08:41:07] PEER_DEAD: 10.40.83.5<41203>
//! [2026-01-12 08:40:52] PEER_UNRESPONSIVE: Process 51533 on node 10.40.83.5 managing GPU 1 peer not responding for 5s (keepalive warning)
//! ```
//!
//! The peer is `Process <pid> on node <host> managing GPU[s] <devs>` where RAS knows it, else
//! its address `<ip><<port>>`. JSON (`-f json`), one object per event, keys one per line:
//! `timestamp`, `group` (`LIFECYCLE` or `TRACE`), `event`, `peer` (`host`, `pid`, `cuda_devs`,
//! `nvml_devs`, or `addr` alone) and `details`.
//!
//! The events: `PEER_DEAD` (lifecycle: RAS declared the peer dead), `PEER_TIMEOUT_DEAD`
//! (trace: the connection timed out and the peer is declared dead), `PEER_UNRESPONSIVE`,
//! `PEER_KEEPALIVE_TIMEOUT`, `PEER_SEND_STUCK`, `PEER_DISCONNECTED` (trace: contact lost),
//! `PEER_RECOVERED`, `PEER_CONNECTED`, `PEER_NEW` (contact (re)gained), and `PEER_RETRY`,
//! `PEER_INIT_TIMEOUT`, `PEER_CONNECTING` (attempts, no verdict). NCCL 2.29-2.30 print no
//! communicator event in monitor mode.

use crate::ras_capture::depth_change;

/// Events kept per source; further ones are counted.
pub const MAX_EVENTS: usize = 4096;
/// Lines a JSON event object may take (NCCL prints twelve).
const MAX_OBJECT_LINES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// RAS declared the peer dead.
    Dead,
    /// Contact was lost (it may come back).
    Lost,
    /// Contact is there (again).
    Back,
    /// An attempt, no verdict.
    Other,
}

fn verdict(event: &str) -> Option<Verdict> {
    Some(match event {
        "PEER_DEAD" | "PEER_TIMEOUT_DEAD" => Verdict::Dead,
        "PEER_UNRESPONSIVE"
        | "PEER_KEEPALIVE_TIMEOUT"
        | "PEER_SEND_STUCK"
        | "PEER_DISCONNECTED" => Verdict::Lost,
        "PEER_RECOVERED" | "PEER_CONNECTED" | "PEER_NEW" => Verdict::Back,
        "PEER_RETRY" | "PEER_INIT_TIMEOUT" | "PEER_CONNECTING" => Verdict::Other,
        _ => return None,
    })
}

/// One event as the monitor printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The line that states it (for JSON, the `"event"` line).
    pub seq: u64,
    pub event: String,
    pub verdict: Verdict,
    pub pid: Option<u32>,
    /// The peer's host (IP address), or the host part of its address.
    pub node: Option<String>,
    pub gpus: Option<String>,
    /// `<ip><<port>>` where only the address is printed.
    pub addr: Option<String>,
    pub details: String,
    /// The line's message (for JSON, the `"event"` line).
    pub text: String,
}

impl Event {
    /// Who the peer is, for matching a later event of the same peer.
    pub fn peer_key(&self) -> (Option<&str>, Option<u32>, Option<&str>) {
        (self.node.as_deref(), self.pid, self.addr.as_deref())
    }
}

/// `ip<port>` -> `ip`.
fn host_of_addr(addr: &str) -> &str {
    addr.split_once('<').map_or(addr, |(h, _)| h)
}

/// A text event line's message (the `[date time] ` prefix peeled or not).
pub fn parse_text(m: &str, seq: u64) -> Option<Event> {
    let m = m.trim_start();
    let m = match m.strip_prefix('[') {
        Some(rest) if rest.len() > 20 && rest.as_bytes()[19] == b']' => rest[20..].trim_start(),
        _ => m,
    };
    let (event, rest) = m.split_once(": ")?;
    let verdict = verdict(event)?;
    let mut e = Event {
        seq,
        event: event.to_string(),
        verdict,
        pid: None,
        node: None,
        gpus: None,
        addr: None,
        details: String::new(),
        text: m.to_string(),
    };
    if let Some(p) = rest.strip_prefix("Process ") {
        // `Process <pid> on node <host> managing GPU[s] <devs>[ (NVML <devs>)] <details>`
        let (pid, after) = p.split_once(" on node ")?;
        let (node, after) = after.split_once(" managing GPU")?;
        let after = after.strip_prefix('s').unwrap_or(after).strip_prefix(' ')?;
        let (mut gpus, mut details) = after.split_once(' ').unwrap_or((after, ""));
        if let Some(nvml) = details.strip_prefix("(NVML ") {
            if let Some((_, d)) = nvml.split_once(')') {
                gpus = &after[..after.len() - d.len()];
                details = d.trim_start();
            }
        }
        e.pid = pid.trim().parse().ok();
        e.node = Some(node.to_string());
        e.gpus = Some(gpus.trim().to_string());
        e.details = details.trim().to_string();
    } else {
        let (addr, details) = rest.split_once(' ').unwrap_or((rest, ""));
        if !addr.contains('<') {
            return None;
        }
        e.node = Some(host_of_addr(addr).to_string());
        e.addr = Some(addr.to_string());
        e.details = details.trim().to_string();
    }
    Some(e)
}

#[derive(serde::Deserialize)]
struct JEvent {
    event: String,
    #[serde(default)]
    peer: Option<JPeer>,
    #[serde(default)]
    details: String,
}

#[derive(serde::Deserialize)]
struct JPeer {
    host: Option<String>,
    pid: Option<i64>,
    cuda_devs: Option<Vec<i64>>,
    addr: Option<String>,
}

/// A JSON event object.
pub fn parse_json(text: &str, seq: u64) -> Option<Event> {
    let j: JEvent = serde_json::from_str(text).ok()?;
    let verdict = verdict(&j.event)?;
    let verdict_text = j.event.clone();
    let peer = j.peer.unwrap_or(JPeer {
        host: None,
        pid: None,
        cuda_devs: None,
        addr: None,
    });
    let gpus = peer
        .cuda_devs
        .map(|d| d.iter().map(i64::to_string).collect::<Vec<_>>().join(","));
    Some(Event {
        seq,
        event: j.event,
        verdict,
        pid: peer.pid.and_then(|p| u32::try_from(p).ok()),
        node: peer
            .host
            .or_else(|| peer.addr.as_deref().map(|a| host_of_addr(a).to_string())),
        gpus,
        addr: peer.addr,
        details: j.details,
        text: format!("\"event\": \"{}\",", verdict_text),
    })
}

/// A source's monitor events, and the JSON object being read.
#[derive(Debug, Default)]
pub struct Monitor {
    pub events: Vec<Event>,
    /// Events past [`MAX_EVENTS`], not kept.
    pub dropped: u64,
    /// The lines of a JSON event object so far, its `"event"` line's seq, and its depth.
    pending: Option<(Vec<String>, u64, i64)>,
}

impl Monitor {
    fn push(&mut self, e: Event) {
        if self.events.len() < MAX_EVENTS {
            self.events.push(e);
        } else {
            self.dropped += 1;
        }
    }

    /// A text event line.
    pub fn text_line(&mut self, m: &str, seq: u64) {
        if let Some(e) = parse_text(m, seq) {
            self.push(e);
        }
    }

    /// The `"event"` line of a JSON object: its first lines are the last ones of `recent`
    /// (peeled, oldest first, ending with this line), from its `{`.
    pub fn json_event_line(&mut self, recent: &[(u64, String)], seq: u64) {
        let Some(open) = recent
            .iter()
            .rposition(|(_, m)| m.trim() == "{")
            .filter(|&i| recent.len() - i <= MAX_OBJECT_LINES)
        else {
            return;
        };
        let lines: Vec<String> = recent[open..].iter().map(|(_, m)| m.clone()).collect();
        let depth = lines.iter().map(|m| depth_change(m)).sum();
        self.pending = Some((lines, seq, depth));
        self.finish_if_closed();
    }

    /// Whether a JSON object is being read (the source's next lines go to [`Self::json_line`]).
    pub fn reading_json(&self) -> bool {
        self.pending.is_some()
    }

    /// The next line of the JSON object being read.
    pub fn json_line(&mut self, m: &str) {
        if let Some((lines, _, depth)) = &mut self.pending {
            *depth += depth_change(m);
            lines.push(m.to_string());
            if lines.len() > MAX_OBJECT_LINES {
                self.pending = None;
                return;
            }
        }
        self.finish_if_closed();
    }

    fn finish_if_closed(&mut self) {
        if let Some((lines, seq, depth)) = &self.pending {
            if *depth <= 0 {
                let e = parse_json(&lines.join("\n"), *seq);
                self.pending = None;
                if let Some(e) = e {
                    self.push(e);
                }
            }
        }
    }

    /// The message of the event line at `seq`, where it was kept.
    pub fn line(&self, seq: u64) -> Option<&str> {
        let i = self.events.binary_search_by_key(&seq, |e| e.seq).ok()?;
        Some(&self.events[i].text)
    }

    /// Bytes held on the heap (the monitor itself is boxed in its source).
    pub fn heap_bytes(&self) -> usize {
        use crate::memsize::{string, vec};
        let opt = |s: &Option<String>| s.as_ref().map_or(0, string);
        std::mem::size_of::<Monitor>()
            + vec(&self.events)
            + self
                .events
                .iter()
                .map(|e| {
                    string(&e.event)
                        + string(&e.details)
                        + string(&e.text)
                        + opt(&e.node)
                        + opt(&e.gpus)
                        + opt(&e.addr)
                })
                .sum::<usize>()
            + self
                .pending
                .as_ref()
                .map_or(0, |(l, _, _)| vec(l) + l.iter().map(string).sum::<usize>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peeled(line: &str) -> String {
        crate::prefix::peel(line, 2026).message(line).to_string()
    }

    #[test]
    fn text_events_as_nccl_prints_them() {
        let e = parse_text(
            &peeled(
                "[2026-01-12 08:41:07] PEER_DEAD: Process 51533 on node 10.40.83.5 managing GPU 1 ",
            ),
            7,
        )
        .unwrap();
        assert_eq!(
            (
                e.verdict,
                e.pid,
                e.node.as_deref(),
                e.gpus.as_deref(),
                e.details.as_str()
            ),
            (
                Verdict::Dead,
                Some(51533),
                Some("10.40.83.5"),
                Some("1"),
                ""
            )
        );
        let e = parse_text(
            &peeled("[2026-01-12 08:41:07] PEER_DEAD: 10.40.83.5<41203> "),
            8,
        )
        .unwrap();
        assert_eq!(
            (e.pid, e.node.as_deref(), e.addr.as_deref()),
            (None, Some("10.40.83.5"), Some("10.40.83.5<41203>"))
        );
        let e = parse_text(
            &peeled("[2026-01-12 08:40:52] PEER_UNRESPONSIVE: Process 7 on node 10.0.0.2 managing GPUs 0,1 (NVML 2,3) peer not responding for 5s (keepalive warning)"),
            9,
        )
        .unwrap();
        assert_eq!(
            (e.verdict, e.gpus.as_deref(), e.details.as_str()),
            (
                Verdict::Lost,
                Some("0,1 (NVML 2,3)"),
                "peer not responding for 5s (keepalive warning)"
            )
        );
        let e = parse_text(
            "PEER_TIMEOUT_DEAD: 10.0.0.2<3000> peer failed to respond for 60s, declaring dead",
            10,
        )
        .unwrap();
        assert_eq!(e.verdict, Verdict::Dead);
        assert!(parse_text("PEER_SOMETHING: x<1> ", 1).is_none());
        assert!(parse_text(
            "RAS Monitor Mode - watching for peer changes (Ctrl+C to exit)...",
            1
        )
        .is_none());
    }

    #[test]
    fn json_events_are_read_from_their_object() {
        let text = "{\n  \"timestamp\": \"2026-01-12 08:41:07\",\n  \"group\": \"LIFECYCLE\",\n  \"event\": \"PEER_DEAD\",\n  \"peer\": {\n    \"host\": \"10.40.83.5\",\n    \"pid\": 51533,\n    \"cuda_devs\": [1],\n    \"nvml_devs\": [1]\n  },\n  \"details\": \"\"\n}";
        let lines: Vec<(u64, String)> = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i as u64, l.to_string()))
            .collect();
        let mut m = Monitor::default();
        m.json_event_line(&lines[..4], 3);
        assert!(m.reading_json());
        for (_, l) in &lines[4..] {
            m.json_line(l);
        }
        assert!(!m.reading_json());
        let e = &m.events[0];
        assert_eq!(
            (
                e.seq,
                e.verdict,
                e.pid,
                e.node.as_deref(),
                e.gpus.as_deref()
            ),
            (3, Verdict::Dead, Some(51533), Some("10.40.83.5"), Some("1"))
        );
        let addr = "{\n\"group\": \"TRACE\",\n\"event\": \"PEER_RECOVERED\",\n\"peer\": {\n\"addr\": \"10.0.0.2<3000>\"\n},\n\"details\": \"peer responding again\"\n}";
        let e = parse_json(addr, 1).unwrap();
        assert_eq!(
            (e.verdict, e.node.as_deref()),
            (Verdict::Back, Some("10.0.0.2"))
        );
    }

    #[test]
    fn events_past_the_cap_are_counted() {
        let mut m = Monitor::default();
        for i in 0..MAX_EVENTS + 3 {
            m.text_line("PEER_NEW: Process 1 on node h managing GPU 0 ", i as u64);
        }
        assert_eq!((m.events.len(), m.dropped), (MAX_EVENTS, 3));
    }
}
