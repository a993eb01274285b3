//! A bounded ring of recent lines for one process (or one stream), capped in lines and bytes.
//! Line text lives in one growing byte arena that is compacted when half of it is dead, so
//! storing a line costs no allocation of its own.

use std::collections::VecDeque;

/// Bytes charged per stored line on top of its text (entry and deque slot).
pub const LINE_OVERHEAD: usize = 32;

/// A line handed out of the ring (an owned copy).
#[derive(Debug, Clone)]
pub struct RingLine {
    /// Arrival order within the job; unique and increasing.
    pub seq: u64,
    pub ts_ms: Option<i64>,
    /// Continuation of a multi-line record (frame, `Last error:` text, traceback body).
    pub continuation: bool,
    pub text: String,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    seq: u64,
    ts_ms: Option<i64>,
    continuation: bool,
    start: usize,
    len: usize,
}

#[derive(Debug, Default)]
pub struct Ring {
    entries: VecDeque<Entry>,
    arena: String,
    /// Bytes at the front of the arena that belong to popped lines.
    dead: usize,
    bytes: usize,
}

impl Ring {
    pub fn push(
        &mut self,
        seq: u64,
        ts_ms: Option<i64>,
        continuation: bool,
        text: &str,
        max_lines: usize,
        max_bytes: usize,
    ) {
        let cost = text.len() + LINE_OVERHEAD;
        while !self.entries.is_empty()
            && (self.entries.len() >= max_lines || self.bytes + cost > max_bytes)
        {
            self.pop_front();
        }
        if max_lines == 0 || cost > max_bytes {
            return;
        }
        if self.dead > 4096 && self.dead * 2 > self.arena.len() {
            self.compact();
        }
        self.entries.push_back(Entry {
            seq,
            ts_ms,
            continuation,
            start: self.arena.len(),
            len: text.len(),
        });
        self.arena.push_str(text);
        self.bytes += cost;
    }

    fn pop_front(&mut self) {
        if let Some(e) = self.entries.pop_front() {
            self.bytes -= e.len + LINE_OVERHEAD;
            self.dead = e.start + e.len;
            if self.entries.is_empty() {
                self.arena.clear();
                self.dead = 0;
            }
        }
    }

    fn compact(&mut self) {
        let dead = self.dead;
        self.arena.drain(..dead);
        for e in &mut self.entries {
            e.start -= dead;
        }
        self.dead = 0;
    }

    /// Drops the oldest lines until at most `max_lines` remain, and returns arena slack.
    pub fn shrink_to(&mut self, max_lines: usize) {
        while self.entries.len() > max_lines {
            self.pop_front();
        }
        self.compact();
        self.arena.shrink_to_fit();
        self.entries.shrink_to_fit();
    }

    /// Heap the ring holds, by capacity (what the memory budget counts).
    pub fn heap_bytes(&self) -> usize {
        crate::memsize::deque(&self.entries) + crate::memsize::string(&self.arena)
    }

    /// Memory held: live lines plus arena bytes not yet reclaimed.
    pub fn bytes(&self) -> usize {
        self.bytes + self.dead
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn line(&self, e: &Entry) -> RingLine {
        RingLine {
            seq: e.seq,
            ts_ms: e.ts_ms,
            continuation: e.continuation,
            text: self.arena[e.start..e.start + e.len].to_string(),
        }
    }

    /// Every line, oldest first (owned copies).
    pub fn lines(&self) -> Vec<RingLine> {
        self.entries.iter().map(|e| self.line(e)).collect()
    }

    /// Up to `n` lines that arrived before `seq` (oldest first).
    pub fn before(&self, seq: u64, n: usize) -> Vec<RingLine> {
        let end = self.entries.partition_point(|l| l.seq < seq);
        let start = end.saturating_sub(n);
        self.entries
            .range(start..end)
            .map(|e| self.line(e))
            .collect()
    }

    /// The line at `seq` and the continuation lines right after it.
    pub fn record_from(&self, seq: u64, max: usize) -> Vec<RingLine> {
        let start = self.entries.partition_point(|l| l.seq < seq);
        let mut out = Vec::new();
        for (i, e) in self.entries.range(start..).enumerate() {
            if out.len() >= max || (i > 0 && !e.continuation) {
                break;
            }
            out.push(self.line(e));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_lines_and_bytes() {
        let mut r = Ring::default();
        for i in 0..100u64 {
            r.push(i, None, false, "0123456789", 10, 10_000);
        }
        assert_eq!(r.len(), 10);
        assert_eq!(r.lines()[0].seq, 90);
        assert_eq!(r.lines()[9].text, "0123456789");
        let mut r = Ring::default();
        for i in 0..100u64 {
            r.push(i, None, false, "0123456789", 1000, 3 * (10 + LINE_OVERHEAD));
        }
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn arena_is_compacted_and_text_survives() {
        let mut r = Ring::default();
        for i in 0..10_000u64 {
            r.push(
                i,
                Some(i as i64),
                false,
                &format!("line number {i}"),
                50,
                1 << 20,
            );
        }
        assert!(
            r.bytes() < 50 * (20 + LINE_OVERHEAD) + 8192,
            "{}",
            r.bytes()
        );
        let last = r.lines();
        assert_eq!(last.len(), 50);
        assert_eq!(last[49].text, "line number 9999");
        r.shrink_to(5);
        assert_eq!(r.lines()[0].text, "line number 9995");
    }

    #[test]
    fn before_and_record() {
        let mut r = Ring::default();
        for i in 0..20u64 {
            r.push(i, None, (5..8).contains(&i), &format!("l{i}"), 100, 1 << 20);
        }
        let b = r.before(10, 3);
        assert_eq!(b.iter().map(|l| l.seq).collect::<Vec<_>>(), vec![7, 8, 9]);
        let rec = r.record_from(4, 50);
        assert_eq!(
            rec.iter().map(|l| l.seq).collect::<Vec<_>>(),
            vec![4, 5, 6, 7]
        );
    }
}
