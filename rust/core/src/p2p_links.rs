//! The links within a node that NCCL printed at init (`Channel 00/0 : 2[2] -> 3[3] via P2P/IPC`,
//! `Ring 00 : …`, `2 -> 1 via P2P/IPC`): which rank, on which GPU, a process reached over
//! P2P or shared memory. NCCL only builds such links between processes it takes for one
//! machine, so they are what shows two machines it took for one (`correlate::shared_host`).

use crate::memsize;

/// Links kept per process: its first (channel 0's, where a ring crosses from one machine to
/// the next). A process prints one per channel and communicator; keeping more costs the
/// memory of every rank of a large job for what the first one already shows.
pub const LINKS_KEPT_PER_SOURCE: u8 = 1;

/// Links kept per job: machines that share a host name are a mistake of small, hand-made
/// clusters; a job of thousands of ranks keeps the links of its first 2,048 processes (about
/// 350 KB) rather than one per rank.
pub const LINKS_KEPT_PER_JOB: usize = 2048;

/// One link as its sending process printed it.
#[derive(Debug, Clone)]
pub struct P2pLink {
    pub src: u32,
    pub from: u32,
    pub from_dev: Option<u16>,
    pub to: u32,
    pub to_dev: Option<u16>,
    pub seq: u64,
    pub line_no: u64,
    pub ts_ms: Option<i64>,
    /// Where the line came from is its process's origin (`Source::origin`).
    pub line: Box<str>,
}

/// A link as its message states it: `(from, from_dev, to, to_dev)` of `… a[d] -> b[e] via
/// P2P/…` (the GPUs since NCCL 2.4) or `a -> b via SHM…`; None for any other message, and for
/// links over the network.
pub fn parse(msg: &str) -> Option<(u32, Option<u16>, u32, Option<u16>)> {
    let (head, tail) = msg.split_once(" -> ")?;
    let from_part = head.rsplit(' ').next()?;
    let (to_part, rest) = tail.split_once(' ')?;
    let via = rest
        .trim_start_matches("[send] ")
        .trim_start_matches("[receive] ")
        .strip_prefix("via ")?;
    if !(via.starts_with("P2P") || via.starts_with("SHM")) {
        return None;
    }
    let (from, from_dev) = rank_and_gpu(from_part)?;
    let (to, to_dev) = rank_and_gpu(to_part)?;
    Some((from, from_dev, to, to_dev))
}

/// `12[3]` or `12`.
fn rank_and_gpu(part: &str) -> Option<(u32, Option<u16>)> {
    match part.split_once('[') {
        Some((rank, dev)) => Some((
            rank.parse().ok()?,
            Some(dev.strip_suffix(']')?.parse().ok()?),
        )),
        None => Some((part.parse().ok()?, None)),
    }
}

/// The job's links, in the order they were printed, at most [`LINKS_KEPT_PER_SOURCE`] per
/// process, and whether some process is in several communicators (each numbers its ranks
/// its own way, and a link line does not say which one it belongs to).
#[derive(Debug, Default)]
pub struct P2pLinks {
    pub links: Vec<P2pLink>,
    per_source: Vec<PerSource>,
    several_comms: bool,
    /// (links, context observations) when the job was last searched for a crossing link
    /// (`correlate::open_from_tables`).
    pub checked: (usize, usize),
    /// The links' line texts, summed as they are kept (`heap_bytes` is called per line).
    text_bytes: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct PerSource {
    kept: u8,
    /// The communicator of the first init line this process printed (its pointer's low bits).
    comm: Option<u32>,
}

impl P2pLinks {
    /// Keeps `link` unless its process has its share; returns the heap bytes added, or None
    /// when the link was not kept.
    pub fn push(&mut self, link: P2pLink) -> Option<usize> {
        if !self.wants(link.src) {
            return None;
        }
        let src = link.src as usize;
        let before = self.heap_bytes();
        self.slot(src).kept += 1;
        self.text_bytes += link.line.len();
        self.links.push(link);
        Some(self.heap_bytes() - before)
    }

    /// Whether a link of process `src` would be kept (its share and the job's are not full).
    pub fn wants(&self, src: u32) -> bool {
        let full = self
            .per_source
            .get(src as usize)
            .is_some_and(|p| p.kept >= LINKS_KEPT_PER_SOURCE);
        !full && self.links.len() < LINKS_KEPT_PER_JOB
    }

    /// Notes the communicator of an init line (`comm 0x…`) of process `src`; returns the heap
    /// bytes added.
    pub fn note_comm(&mut self, src: u32, comm_ptr: &str) -> usize {
        let Ok(ptr) = u64::from_str_radix(comm_ptr.trim_start_matches("0x"), 16) else {
            return 0;
        };
        let comm = ptr as u32;
        let before = self.heap_bytes();
        let slot = self.slot(src as usize);
        match slot.comm {
            None => slot.comm = Some(comm),
            Some(c) if c != comm => self.several_comms = true,
            Some(_) => {}
        }
        self.heap_bytes() - before
    }

    /// Whether some process printed init lines of two communicators.
    pub fn several_comms(&self) -> bool {
        self.several_comms
    }

    fn slot(&mut self, src: usize) -> &mut PerSource {
        if self.per_source.len() <= src {
            self.per_source.resize(src + 1, PerSource::default());
        }
        &mut self.per_source[src]
    }

    pub fn heap_bytes(&self) -> usize {
        memsize::vec(&self.links) + memsize::vec(&self.per_source) + self.text_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(src: u32, to: u32) -> P2pLink {
        P2pLink {
            src,
            from: src,
            from_dev: Some(src as u16),
            to,
            to_dev: Some(to as u16),
            seq: 0,
            line_no: 0,
            ts_ms: None,
            line: format!("Channel 00/0 : {src}[{src}] -> {to}[{to}] via P2P/IPC").into(),
        }
    }

    #[test]
    fn links_are_read_from_every_shape_nccl_printed() {
        assert_eq!(
            parse("Channel 01/0 : 6[6] -> 10[2] via P2P/IPC/read"),
            Some((6, Some(6), 10, Some(2)))
        );
        assert_eq!(
            parse("Ring 00 : 2[2] -> 3[3] via P2P/IPC"),
            Some((2, Some(2), 3, Some(3)))
        );
        assert_eq!(parse("2 -> 1 via P2P/IPC"), Some((2, None, 1, None)));
        assert_eq!(
            parse("Channel 02 : 3[3] -> 4[4] [send] via SHM/direct/direct"),
            Some((3, Some(3), 4, Some(4)))
        );
        assert_eq!(
            parse("Channel 01/0 : 8[0] -> 0[0] [receive] via NET/IB/0"),
            None
        );
        assert_eq!(parse("Connected all rings, 2 -> 3"), None);
    }

    #[test]
    fn a_process_keeps_only_its_first_links_and_the_bytes_are_counted() {
        let mut t = P2pLinks::default();
        let mut added = 0;
        for to in 0..10 {
            added += t.push(link(3, to)).unwrap_or(0);
        }
        added += t.push(link(1, 2)).unwrap_or(0);
        assert_eq!(t.links.len(), LINKS_KEPT_PER_SOURCE as usize + 1);
        assert_eq!(added, t.heap_bytes());
        let texts: usize = t.links.iter().map(|l| l.line.len()).sum();
        assert_eq!(
            t.heap_bytes(),
            memsize::vec(&t.links) + memsize::vec(&t.per_source) + texts
        );
    }

    #[test]
    fn a_second_communicator_of_one_process_is_noticed() {
        let mut t = P2pLinks::default();
        t.note_comm(2, "0x55d0c0");
        t.note_comm(2, "0x55d0c0");
        t.note_comm(3, "0x7700");
        assert!(!t.several_comms());
        t.note_comm(2, "0x55e100");
        assert!(t.several_comms());
    }
}
