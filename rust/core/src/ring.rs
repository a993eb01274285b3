//! A bounded ring of recent lines for one process (or one stream), capped in lines and bytes.
//! Each line is one record, a small header followed by its text, written into blocks that
//! are filled in turn and freed when their last line is popped. So storing a line costs no
//! allocation of its own, a growing ring never copies (an arena grown by `realloc` copied
//! every line once per doubling and faulted in fresh pages for each copy: a tenth of
//! `analyze`'s CPU on a 16k-rank job), and the header is written next to the text it
//! describes (a separate deque of entries grew by doubling, 6 KiB per 77-line ring).
//!
//! A line of a local file can be kept by reference instead ([`Ring::push_at`]): its record
//! holds where the line is in its file, and the text is read back from the file when the
//! ring is read ([`crate::filetext`]). It is charged against the caps as if it were copied,
//! so a ring keeps the same lines either way.

use crate::filetext::{FileTexts, TextAt};
use crate::memsize;
use std::collections::VecDeque;
use std::sync::Arc;

/// Bytes charged per stored line on top of its text (its header and padding).
pub const LINE_OVERHEAD: usize = 32;

/// A ring's first block; each next one doubles up to `BLOCK`, so a source that prints a few
/// lines keeps a small block and a busy one fills whole pages.
const FIRST_BLOCK: usize = 240;
/// The largest block: 4 KiB with glibc's header (a longer line gets a block of its own).
const BLOCK: usize = 4096 - 16;

/// A record's header: seq (8 bytes), time (8, `NO_TIME` for none), text length (4), flags (4).
const HEADER: usize = 24;
const NO_TIME: i64 = i64::MIN;
const CONTINUATION: u32 = 1;
/// The record holds where its text is (`REF_BYTES`: offset, file id, padding), not the text.
const BY_REFERENCE: u32 = 2;
const REF_BYTES: usize = 16;
/// What a line kept by reference reads as when its file no longer holds it.
pub const UNREADABLE: &str =
    "[rankwatch: this line can no longer be read: its file changed after it was analyzed]";

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

impl RingLine {
    /// Whether the line opens a record its process printed: not a continuation, nor a mark
    /// where a poster left lines out (`...`). Rules that name "the last line" read these.
    pub fn opens_printed_record(&self) -> bool {
        !self.continuation && !crate::prefix::is_elision_mark(&self.text)
    }
}

/// A record's header, read back.
#[derive(Debug, Clone, Copy)]
struct Header {
    seq: u64,
    ts_ms: Option<i64>,
    /// The text's length (also of a text kept by reference).
    len: usize,
    continuation: bool,
    by_reference: bool,
}

impl Header {
    /// Appends the header, `body` (the text, or where it is) and the padding that keeps the
    /// next header aligned.
    fn write_record(&self, body: &[u8], block: &mut Vec<u8>) {
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(&self.seq.to_le_bytes());
        h[8..16].copy_from_slice(&self.ts_ms.unwrap_or(NO_TIME).to_le_bytes());
        h[16..20].copy_from_slice(&(self.len as u32).to_le_bytes());
        let mut flags = if self.continuation { CONTINUATION } else { 0 };
        if self.by_reference {
            flags |= BY_REFERENCE;
        }
        h[20..24].copy_from_slice(&flags.to_le_bytes());
        block.extend_from_slice(&h);
        block.extend_from_slice(body);
        let pad = record_size(body.len()) - HEADER - body.len();
        block.extend_from_slice(&[0u8; 8][..pad]);
    }

    fn read(at: &[u8]) -> Header {
        let word = |r: std::ops::Range<usize>| -> [u8; 8] { at[r].try_into().unwrap_or_default() };
        let half = |r: std::ops::Range<usize>| -> [u8; 4] { at[r].try_into().unwrap_or_default() };
        let ts = i64::from_le_bytes(word(8..16));
        let flags = u32::from_le_bytes(half(20..24));
        Header {
            seq: u64::from_le_bytes(word(0..8)),
            ts_ms: (ts != NO_TIME).then_some(ts),
            len: u32::from_le_bytes(half(16..20)) as usize,
            continuation: flags & CONTINUATION != 0,
            by_reference: flags & BY_REFERENCE != 0,
        }
    }

    /// Bytes of the record's body: its text, or where the text is.
    fn body_len(&self) -> usize {
        if self.by_reference {
            REF_BYTES
        } else {
            self.len
        }
    }

    /// Bytes the whole record takes in its block.
    fn size(&self) -> usize {
        record_size(self.body_len())
    }
}

/// Bytes a record with a body of `len` bytes takes in a block (headers stay 8-byte aligned).
fn record_size(len: usize) -> usize {
    (HEADER + len).next_multiple_of(8)
}

fn reference_body(at: TextAt) -> [u8; REF_BYTES] {
    let mut body = [0u8; REF_BYTES];
    body[0..8].copy_from_slice(&at.offset.to_le_bytes());
    body[8..12].copy_from_slice(&at.file.to_le_bytes());
    body
}

fn read_reference(body: &[u8]) -> TextAt {
    let offset = body.get(0..8).and_then(|b| b.try_into().ok());
    let file = body.get(8..12).and_then(|b| b.try_into().ok());
    TextAt {
        offset: u64::from_le_bytes(offset.unwrap_or_default()),
        file: u32::from_le_bytes(file.unwrap_or_default()),
    }
}

#[derive(Debug, Default)]
pub struct Ring {
    /// Whole records, oldest first; `blocks[0]` starts at `head`.
    blocks: VecDeque<Vec<u8>>,
    /// Offset of the oldest live record in the first block (the bytes before it are popped).
    head: usize,
    lines: usize,
    /// Heap of the blocks, by capacity.
    block_heap: usize,
    /// Charged bytes of the live lines: text plus `LINE_OVERHEAD` each.
    bytes: usize,
    /// Where the newest record starts in the last block: hits ask for the line just pushed.
    newest_at: usize,
    /// Blocks popped from the front so far: a block's number is this plus its index.
    popped_blocks: u64,
    /// The newest line that starts a record (not a continuation): its seq, block number and
    /// offset. A hit on a traceback's last line asks for the record from its first line.
    record_at: Option<(u64, u64, usize)>,
    /// Where lines kept by reference are read back from.
    texts: Option<Arc<FileTexts>>,
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
        let header = Header {
            seq,
            ts_ms,
            len: text.len(),
            continuation,
            by_reference: false,
        };
        self.push_record(header, text.as_bytes(), (max_lines, max_bytes));
    }

    /// Pushes a line of `text_len` bytes that stays in its file, at `at` of `texts`: it is
    /// read back from there when the ring is read.
    #[allow(clippy::too_many_arguments)]
    pub fn push_at(
        &mut self,
        seq: u64,
        ts_ms: Option<i64>,
        continuation: bool,
        (text_len, at): (usize, TextAt),
        texts: &Arc<FileTexts>,
        max_lines: usize,
        max_bytes: usize,
    ) {
        if !self.texts.as_ref().is_some_and(|t| Arc::ptr_eq(t, texts)) {
            self.texts = Some(texts.clone());
        }
        let header = Header {
            seq,
            ts_ms,
            len: text_len,
            continuation,
            by_reference: true,
        };
        self.push_record(header, &reference_body(at), (max_lines, max_bytes));
    }

    fn push_record(&mut self, header: Header, body: &[u8], (max_lines, max_bytes): (usize, usize)) {
        let cost = header.len + LINE_OVERHEAD;
        while self.lines > 0 && (self.lines >= max_lines || self.bytes + cost > max_bytes) {
            self.pop_front();
        }
        if max_lines == 0 || cost > max_bytes {
            return;
        }
        let size = record_size(body.len());
        let fits = self
            .blocks
            .back()
            .is_some_and(|b| b.capacity() - b.len() >= size);
        if !fits {
            let grown = self.blocks.back().map_or(FIRST_BLOCK, |b| {
                (2 * b.capacity()).clamp(FIRST_BLOCK, BLOCK)
            });
            let block = Vec::with_capacity(grown.max(size));
            self.block_heap += memsize::vec(&block);
            self.blocks.push_back(block);
        }
        let number = self.popped_blocks + self.blocks.len() as u64 - 1;
        let Some(block) = self.blocks.back_mut() else {
            return;
        };
        let at = block.len();
        header.write_record(body, block);
        self.newest_at = at;
        if !header.continuation {
            self.record_at = Some((header.seq, number, at));
        }
        self.lines += 1;
        self.bytes += cost;
    }

    fn pop_front(&mut self) {
        let Some(first) = self.blocks.front() else {
            return;
        };
        let h = Header::read(&first[self.head..]);
        self.head += h.size();
        self.lines -= 1;
        self.bytes -= h.len + LINE_OVERHEAD;
        // A block is dead once its last record is popped; with no line left, all of them are.
        while self.blocks.front().is_some_and(|b| self.head >= b.len()) {
            if self.lines > 0 && self.blocks.len() == 1 {
                break;
            }
            if let Some(b) = self.blocks.pop_front() {
                self.block_heap -= memsize::vec(&b);
                self.popped_blocks += 1;
            }
            self.head = 0;
        }
    }

    /// Every live record, oldest first: its header and text.
    fn records(&self) -> impl Iterator<Item = (Header, &[u8])> + '_ {
        self.records_at(0, self.head)
    }

    /// The live records from block `first` at offset `offset` on.
    fn records_at(
        &self,
        first: usize,
        offset: usize,
    ) -> impl Iterator<Item = (Header, &[u8])> + '_ {
        self.blocks
            .iter()
            .enumerate()
            .skip(first)
            .flat_map(move |(i, b)| {
                let mut at = if i == first { offset } else { 0 };
                std::iter::from_fn(move || {
                    if at >= b.len() {
                        return None;
                    }
                    let h = Header::read(&b[at..]);
                    let body = &b[at + HEADER..at + HEADER + h.body_len()];
                    at += h.size();
                    Some((h, body))
                })
            })
    }

    /// The records as owned lines, with the texts kept by reference read back.
    fn owned<'a>(&self, records: impl IntoIterator<Item = (Header, &'a [u8])>) -> Vec<RingLine> {
        let records: Vec<(Header, &[u8])> = records.into_iter().collect();
        let wanted: Vec<(TextAt, usize)> = records
            .iter()
            .filter(|(h, _)| h.by_reference)
            .map(|(h, body)| (read_reference(body), h.len))
            .collect();
        let mut read = match (&self.texts, wanted.is_empty()) {
            (Some(texts), false) => texts.read(&wanted),
            _ => Vec::new(),
        }
        .into_iter();
        records
            .into_iter()
            .map(|(h, body)| {
                let text = if h.by_reference {
                    match read.next().flatten() {
                        Some(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                        None => UNREADABLE.to_string(),
                    }
                } else {
                    // The text was a `&str` when it was pushed.
                    String::from_utf8_lossy(body).into_owned()
                };
                RingLine {
                    seq: h.seq,
                    ts_ms: h.ts_ms,
                    continuation: h.continuation,
                    text,
                }
            })
            .collect()
    }

    /// Drops the oldest lines until at most `max_lines` remain, and returns block slack:
    /// the lines left are copied into one block of their size.
    pub fn shrink_to(&mut self, max_lines: usize) {
        while self.lines > max_lines {
            self.pop_front();
        }
        let live: usize = self.records().map(|(h, _)| h.size()).sum();
        let (mut packed, mut newest_at) = (Vec::with_capacity(live), 0);
        for (h, body) in self.records() {
            newest_at = packed.len();
            h.write_record(body, &mut packed);
        }
        self.newest_at = newest_at;
        self.record_at = None;
        self.blocks.clear();
        self.blocks.shrink_to_fit();
        self.block_heap = 0;
        self.head = 0;
        if self.lines > 0 {
            self.block_heap = memsize::vec(&packed);
            self.blocks.push_back(packed);
        }
    }

    /// Heap the ring holds, by capacity (what the memory budget counts).
    pub fn heap_bytes(&self) -> usize {
        memsize::deque(&self.blocks) + self.block_heap
    }

    /// Memory held: live lines plus block bytes of popped lines not yet freed.
    pub fn bytes(&self) -> usize {
        self.bytes + self.head
    }

    pub fn len(&self) -> usize {
        self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// Every line, oldest first (owned copies).
    pub fn lines(&self) -> Vec<RingLine> {
        self.owned(self.records())
    }

    /// Up to `n` lines that arrived before `seq` (oldest first).
    pub fn before(&self, seq: u64, n: usize) -> Vec<RingLine> {
        let mut kept: VecDeque<(Header, &[u8])> = VecDeque::with_capacity(n.min(self.lines));
        for (h, t) in self.records().take_while(|(h, _)| h.seq < seq) {
            if kept.len() == n {
                kept.pop_front();
            }
            if n > 0 {
                kept.push_back((h, t));
            }
        }
        self.owned(kept)
    }

    /// The records from the remembered record start when it is `seq` and still live, else
    /// from the oldest.
    fn records_before(&self, seq: u64) -> impl Iterator<Item = (Header, &[u8])> + '_ {
        let start = self.record_at.and_then(|(at_seq, number, offset)| {
            let index = usize::try_from(number.checked_sub(self.popped_blocks)?).ok()?;
            let live = index < self.blocks.len() && (index > 0 || offset >= self.head);
            (at_seq == seq && live).then_some((index, offset))
        });
        let (first, offset) = start.unwrap_or((0, self.head));
        self.records_at(first, offset)
    }

    /// Up to `n` lines that arrived after `seq` (oldest first).
    pub fn after(&self, seq: u64, n: usize) -> Vec<RingLine> {
        self.owned(self.records().skip_while(|(h, _)| h.seq <= seq).take(n))
    }

    /// Whether the newest line is the one at `seq`.
    pub fn newest_is(&self, seq: u64) -> bool {
        self.newest().is_some_and(|(h, _)| h.seq == seq)
    }

    fn newest(&self) -> Option<(Header, &[u8])> {
        let last = self.blocks.back().filter(|_| self.lines > 0)?;
        let h = Header::read(&last[self.newest_at..]);
        Some((
            h,
            &last[self.newest_at + HEADER..self.newest_at + HEADER + h.body_len()],
        ))
    }

    /// The line at `seq` and the continuation lines right after it.
    pub fn record_from(&self, seq: u64, max: usize) -> Vec<RingLine> {
        if let Some(newest) = self.newest().filter(|(h, _)| h.seq == seq && max > 0) {
            return self.owned([newest]);
        }
        let mut out = Vec::new();
        for (h, body) in self.records_before(seq).skip_while(|(h, _)| h.seq < seq) {
            if out.len() >= max || (!out.is_empty() && !h.continuation) {
                break;
            }
            out.push((h, body));
        }
        self.owned(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_after_a_seq() {
        let mut r = Ring::default();
        for i in 0..20u64 {
            r.push(i * 2, None, false, "x", 100, 10_000);
        }
        let seqs = |v: Vec<RingLine>| v.iter().map(|l| l.seq).collect::<Vec<_>>();
        assert_eq!(seqs(r.after(10, 3)), vec![12, 14, 16]);
        assert_eq!(seqs(r.after(37, 3)), vec![38]);
        assert!(r.after(38, 3).is_empty());
    }

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
        assert_eq!(r.heap_bytes(), memsize::deque(&r.blocks) + 256);
        for i in 1..200u64 {
            r.push(i, None, false, &format!("{i:>100}"), 1000, 1 << 20);
        }
        // Records of 128 bytes: blocks of 240, 480, 960, 1920, then 4080 bytes hold 1, 3, 7,
        // 15, then 31 lines.
        assert_eq!(r.blocks.len(), 10);
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

    /// The ring's rules on a plain deque of owned lines.
    #[derive(Default)]
    struct Model {
        lines: VecDeque<RingLine>,
    }

    impl Model {
        fn charged(&self) -> usize {
            self.lines
                .iter()
                .map(|l| l.text.len() + LINE_OVERHEAD)
                .sum()
        }

        fn push(&mut self, line: RingLine, max_lines: usize, max_bytes: usize) {
            let cost = line.text.len() + LINE_OVERHEAD;
            while !self.lines.is_empty()
                && (self.lines.len() >= max_lines || self.charged() + cost > max_bytes)
            {
                self.lines.pop_front();
            }
            if max_lines > 0 && cost <= max_bytes {
                self.lines.push_back(line);
            }
        }
    }

    fn same(a: &[RingLine], b: &[RingLine]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                (x.seq, x.ts_ms, x.continuation, &x.text)
                    == (y.seq, y.ts_ms, y.continuation, &y.text)
            })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        #[test]
        fn keeps_what_a_plain_deque_keeps(
            ops in proptest::collection::vec(
                (0usize..300, proptest::option::of(-5i64..5), proptest::bool::ANY, 0u8..20),
                1..400,
            ),
            max_lines in 0usize..40,
            max_bytes in 0usize..6000,
        ) {
            let (mut ring, mut model) = (Ring::default(), Model::default());
            // Every third line stays in a file and is kept by reference.
            let mut file = tempfile::NamedTempFile::new().unwrap();
            let texts = Arc::new(FileTexts::default());
            let meta = std::fs::metadata(file.path()).unwrap();
            let id = texts.register(file.path(), crate::filetext::FileIdentity::of(&meta));
            let mut written = 0u64;
            for (seq, (len, ts, cont, op)) in ops.into_iter().enumerate() {
                let seq = seq as u64;
                if op == 0 {
                    let keep = len % 8;
                    ring.shrink_to(keep);
                    while model.lines.len() > keep {
                        model.lines.pop_front();
                    }
                } else {
                    let text: String = "é".repeat(len % 7) + &"x".repeat(len);
                    let line = RingLine { seq, ts_ms: ts, continuation: cont, text };
                    if seq.is_multiple_of(3) {
                        std::io::Write::write_all(&mut file, format!("{}\n", line.text).as_bytes()).unwrap();
                        let at = TextAt { file: id, offset: written };
                        written += line.text.len() as u64 + 1;
                        ring.push_at(seq, ts, cont, (line.text.len(), at), &texts, max_lines, max_bytes);
                    } else {
                        ring.push(seq, ts, cont, &line.text, max_lines, max_bytes);
                    }
                    model.push(line, max_lines, max_bytes);
                }
                // Probe the newest line (or just before it) as hits do, and older ones.
                let newest = model.lines.back().map_or(seq, |l| l.seq);
                // ... and the newest record start, as a hit on a traceback's last line does.
                let record_start = model.lines.iter().rev().find(|l| !l.continuation).map_or(newest, |l| l.seq);
                let probe = match op % 3 {
                    0 => newest,
                    1 => newest.saturating_sub(len as u64 % 12),
                    _ => record_start,
                };
                let all: Vec<RingLine> = model.lines.iter().cloned().collect();
                proptest::prop_assert!(same(&ring.lines(), &all));
                proptest::prop_assert_eq!(ring.len(), all.len());
                let n = len % 9;
                let before: Vec<RingLine> = {
                    let b: Vec<_> = all.iter().filter(|l| l.seq < probe).cloned().collect();
                    b[b.len().saturating_sub(n)..].to_vec()
                };
                proptest::prop_assert!(same(&ring.before(probe, n), &before));
                let mut record: Vec<RingLine> = Vec::new();
                for l in all.iter().skip_while(|l| l.seq < probe) {
                    if record.len() >= n || (!record.is_empty() && !l.continuation) {
                        break;
                    }
                    record.push(l.clone());
                }
                proptest::prop_assert!(same(&ring.record_from(probe, n), &record));
                proptest::prop_assert!(ring.bytes() >= model.charged());
            }
            ring.shrink_to(0);
            proptest::prop_assert_eq!(ring.heap_bytes(), memsize::deque(&ring.blocks));
        }
    }
}
