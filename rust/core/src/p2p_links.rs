//! The links within a node that NCCL printed at init (`Channel 00/0 : 2[2] -> 3[3] via P2P/IPC`,
//! `Ring 00 : …`, `2 -> 1 via P2P/IPC`): which rank, on which GPU, a process reached over
//! P2P or shared memory. NCCL only builds such links between processes it takes for one
//! machine, so they are what shows two machines it took for one (`correlate::shared_host`).

use crate::memsize;
use std::sync::Arc;

/// Links kept per process: the first few are enough (a process prints one per channel, and
/// its neighbours are the same on most of them).
pub const LINKS_KEPT_PER_SOURCE: u8 = 4;

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
    pub line: String,
    pub origin: Arc<str>,
}

/// The job's links, in the order they were printed, at most [`LINKS_KEPT_PER_SOURCE`] per
/// process.
#[derive(Debug, Default)]
pub struct P2pLinks {
    pub links: Vec<P2pLink>,
    /// Links kept so far, by source.
    per_source: Vec<u8>,
}

impl P2pLinks {
    /// Keeps `link` unless its process has its share; returns the heap bytes added, or None
    /// when the link was not kept.
    pub fn push(&mut self, link: P2pLink) -> Option<usize> {
        let src = link.src as usize;
        if self.per_source.get(src).copied().unwrap_or(0) >= LINKS_KEPT_PER_SOURCE {
            return None;
        }
        let before = self.heap_bytes();
        if self.per_source.len() <= src {
            self.per_source.resize(src + 1, 0);
        }
        self.per_source[src] += 1;
        self.links.push(link);
        Some(self.heap_bytes() - before)
    }

    pub fn heap_bytes(&self) -> usize {
        memsize::vec(&self.links)
            + memsize::vec(&self.per_source)
            + self
                .links
                .iter()
                .map(|l| memsize::string(&l.line))
                .sum::<usize>()
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
            line: format!("Channel 00/0 : {src}[{src}] -> {to}[{to}] via P2P/IPC"),
            origin: Arc::from("a.log"),
        }
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
    }
}
