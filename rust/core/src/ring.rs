//! A bounded ring of recent lines for one process (or one stream), capped in lines and bytes.
//! Popped strings are reused, so a full ring allocates nothing per line.

use std::collections::VecDeque;

/// Bytes charged per stored line on top of its text (struct and deque slot).
pub const LINE_OVERHEAD: usize = 48;

#[derive(Debug, Clone)]
pub struct RingLine {
    /// Arrival order within the job; unique and increasing.
    pub seq: u64,
    pub ts_ms: Option<i64>,
    /// Continuation of a multi-line record (frame, `Last error:` text, traceback body).
    pub continuation: bool,
    pub text: String,
}

#[derive(Debug, Default)]
pub struct Ring {
    lines: VecDeque<RingLine>,
    bytes: usize,
    spare: Vec<String>,
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
        while !self.lines.is_empty()
            && (self.lines.len() >= max_lines || self.bytes + cost > max_bytes)
        {
            self.pop_front();
        }
        if max_lines == 0 || cost > max_bytes {
            return;
        }
        let mut s = self.spare.pop().unwrap_or_default();
        s.clear();
        s.push_str(text);
        self.bytes += cost;
        self.lines.push_back(RingLine {
            seq,
            ts_ms,
            continuation,
            text: s,
        });
    }

    fn pop_front(&mut self) {
        if let Some(l) = self.lines.pop_front() {
            self.bytes -= l.text.len() + LINE_OVERHEAD;
            if self.spare.len() < 4 {
                self.spare.push(l.text);
            }
        }
    }

    /// Drops the oldest lines until at most `max_lines` remain.
    pub fn shrink_to(&mut self, max_lines: usize) {
        while self.lines.len() > max_lines {
            self.pop_front();
        }
        self.spare.clear();
    }

    pub fn bytes(&self) -> usize {
        self.bytes + self.spare.iter().map(String::capacity).sum::<usize>()
    }

    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &RingLine> {
        self.lines.iter()
    }

    /// Up to `n` lines that arrived before `seq` (oldest first).
    pub fn before(&self, seq: u64, n: usize) -> Vec<RingLine> {
        let end = self.lines.partition_point(|l| l.seq < seq);
        let start = end.saturating_sub(n);
        self.lines.range(start..end).cloned().collect()
    }

    /// The lines from `seq` on (inclusive) that continue the record started at or before `seq`.
    pub fn record_from(&self, seq: u64, max: usize) -> Vec<RingLine> {
        let start = self.lines.partition_point(|l| l.seq < seq);
        let mut out = Vec::new();
        for (i, l) in self.lines.range(start..).enumerate() {
            if i > 0 && !l.continuation {
                break;
            }
            out.push(l.clone());
            if out.len() >= max {
                break;
            }
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
        assert_eq!(r.iter().next().unwrap().seq, 90);
        let mut r = Ring::default();
        for i in 0..100u64 {
            r.push(i, None, false, "0123456789", 1000, 3 * (10 + LINE_OVERHEAD));
        }
        assert_eq!(r.len(), 3);
        assert!(r.bytes() <= 3 * (10 + LINE_OVERHEAD) + 4 * 64);
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
