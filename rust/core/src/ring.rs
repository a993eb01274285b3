//! A bounded ring of recent lines for one process (or one stream), capped in lines and bytes.
//! Line text lives in blocks that are filled in turn and freed when their last line is
//! popped, so storing a line costs no allocation of its own and a growing ring never copies
//! (an arena grown by `realloc` copied every line once per doubling and faulted in fresh pages
//! for each copy: a tenth of `analyze`'s CPU on a 16k-rank job).

use crate::memsize;
use std::collections::VecDeque;

/// Bytes charged per stored line on top of its text (entry and deque slot).
pub const LINE_OVERHEAD: usize = 32;

/// A ring's first block; each next one doubles up to `BLOCK`, so a source that prints a few
/// lines keeps a small block and a busy one fills whole pages.
const FIRST_BLOCK: usize = 240;
/// The largest block: 4 KiB with glibc's header (a longer line gets a block of its own).
const BLOCK: usize = 4096 - 16;

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
    /// The block holding the text, counted from the ring's first block ever.
    block: usize,
    start: u32,
    len: u32,
}

#[derive(Debug, Default)]
pub struct Ring {
    entries: VecDeque<Entry>,
    blocks: VecDeque<String>,
    /// How many blocks were freed from the front (the number of `blocks[0]`).
    freed_blocks: usize,
    /// Heap of the blocks, by capacity.
    block_heap: usize,
    /// Bytes at the front of the first block that belong to popped lines.
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
        let fits = self
            .blocks
            .back()
            .is_some_and(|b| b.capacity() - b.len() >= text.len());
        if !fits {
            let grown = self.blocks.back().map_or(FIRST_BLOCK, |b| {
                (2 * b.capacity()).clamp(FIRST_BLOCK, BLOCK)
            });
            self.add_block(String::with_capacity(grown.max(text.len())));
        }
        let last = self.blocks.len() - 1;
        let block = &mut self.blocks[last];
        let start = block.len();
        block.push_str(text);
        self.entries.push_back(Entry {
            seq,
            ts_ms,
            continuation,
            block: self.freed_blocks + last,
            start: start as u32,
            len: text.len() as u32,
        });
        self.bytes += cost;
    }

    fn add_block(&mut self, block: String) {
        self.block_heap += memsize::string(&block);
        self.blocks.push_back(block);
    }

    fn pop_front(&mut self) {
        let Some(e) = self.entries.pop_front() else {
            return;
        };
        self.bytes -= e.len as usize + LINE_OVERHEAD;
        // Blocks before the next line's are dead; with no line left, all of them are.
        let keep_from = self
            .entries
            .front()
            .map_or(self.freed_blocks + self.blocks.len(), |n| n.block);
        while self.freed_blocks < keep_from {
            let Some(b) = self.blocks.pop_front() else {
                break;
            };
            self.block_heap -= memsize::string(&b);
            self.freed_blocks += 1;
        }
        self.dead = self.entries.front().map_or(0, |n| n.start as usize);
    }

    /// Drops the oldest lines until at most `max_lines` remain, and returns block slack:
    /// the lines left are copied into one block of their size.
    pub fn shrink_to(&mut self, max_lines: usize) {
        while self.entries.len() > max_lines {
            self.pop_front();
        }
        let live: usize = self.entries.iter().map(|e| e.len as usize).sum();
        let mut packed = String::with_capacity(live);
        for e in &mut self.entries {
            let start = packed.len();
            let b = &self.blocks[e.block - self.freed_blocks];
            packed.push_str(&b[e.start as usize..(e.start + e.len) as usize]);
            e.start = start as u32;
        }
        self.freed_blocks += self.blocks.len();
        self.blocks.clear();
        self.blocks.shrink_to_fit();
        self.block_heap = 0;
        self.dead = 0;
        if !self.entries.is_empty() {
            for e in &mut self.entries {
                e.block = self.freed_blocks;
            }
            self.add_block(packed);
        }
        self.entries.shrink_to_fit();
    }

    /// Heap the ring holds, by capacity (what the memory budget counts).
    pub fn heap_bytes(&self) -> usize {
        memsize::deque(&self.entries) + memsize::deque(&self.blocks) + self.block_heap
    }

    /// Memory held: live lines plus block bytes of popped lines not yet freed.
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
            text: self.blocks[e.block - self.freed_blocks]
                [e.start as usize..(e.start + e.len) as usize]
                .to_string(),
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
    fn blocks_are_filled_in_turn_and_freed_with_their_last_line() {
        let mut r = Ring::default();
        let line = "x".repeat(100);
        r.push(0, None, false, &line, 1000, 1 << 20);
        assert_eq!(
            r.heap_bytes(),
            memsize::deque(&r.entries) + memsize::deque(&r.blocks) + 256
        );
        for i in 1..200u64 {
            r.push(i, None, false, &format!("{i:>100}"), 1000, 1 << 20);
        }
        // Blocks of 240, 480, 960, 1920, then 4080 bytes hold 2, 4, 9, 19, then 40 lines.
        assert_eq!(r.blocks.len(), 9);
        assert!(r
            .lines()
            .iter()
            .enumerate()
            .all(|(i, l)| l.text.trim() == i.to_string() || i == 0));
        let full = r.heap_bytes();
        // A line longer than a block gets its own; popping the old lines frees their blocks.
        r.push(200, None, false, &"y".repeat(5000), 3, 1 << 20);
        assert_eq!(r.len(), 3);
        assert_eq!(r.blocks.len(), 2);
        assert!(r.heap_bytes() < full);
        assert_eq!(r.lines()[2].text.len(), 5000);
        assert_eq!(r.lines()[0].text.trim(), "198");
        r.shrink_to(1);
        assert_eq!(r.blocks.len(), 1);
        assert_eq!(r.lines()[0].text.len(), 5000);
        assert_eq!(r.bytes(), 5000 + LINE_OVERHEAD);
        r.push(201, None, true, "after", 10, 1 << 20);
        assert_eq!(r.record_from(200, 5).len(), 2);
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
