//! The line stage: a stream's bytes cut into lines, cleaned (line ends, progress-bar
//! rewrites, over-long lines, invalid UTF-8, ANSI codes, CRI envelopes), peeled and scanned
//! into a [`Batch`] that the apply stage then takes in order.
//!
//! Nothing here reads or writes job state: a stream's lines can be decoded on any thread,
//! each with its own [`LineDecoder`] (its own Hyperscan scratch), ahead of applying them.

use crate::catalog::Catalog;
use crate::digits;
use crate::fieldre::FieldSpan;
use crate::memsize;
use crate::prefix::{
    docker_json, is_exception_line, peel_from, states_error, KnownLabels, Level, LineMeta,
};
use crate::scandb::Scanner;
use std::ops::Range;
use std::sync::Arc;

/// Lines peeled before their messages are scanned together. Between two scans, peeling,
/// field regexes and bookkeeping would evict Hyperscan's code from the instruction cache, so
/// each line's scan would start cold; peeling a run of lines first, then scanning them one
/// after another, then reading signatures and fields keeps each stage's code hot.
const SCAN_RUN: usize = 64;

/// `raw` cut to at most `max` bytes, not inside a UTF-8 character (`raw` is longer).
pub(super) fn cut_at_char(raw: &[u8], max: usize) -> &[u8] {
    let mut cut = max;
    while cut > 0 && (raw[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    &raw[..cut]
}

/// How c10 opens the backtrace under an exception's message.
const C10_BACKTRACE: &str = "Exception raised from ";

fn is_continuation(msg: &str, st: &LineState, last_error_text: bool) -> bool {
    let b = msg.as_bytes();
    if b.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
        return true;
    }
    if last_error_text {
        return true;
    }
    // One first byte decides which opener could follow (most messages: none).
    let opener = match b.first() {
        Some(b'f') => msg.starts_with("frame #"),
        Some(b'E') => msg.starts_with(C10_BACKTRACE),
        Some(b'L') => msg.starts_with("Last error:"),
        // torch's NCCL error message goes on with the error class NCCL returned
        // (`ncclSystemError: System call …`) on a line of its own, which a launcher's
        // `[rankN]:` prefix does not reach.
        Some(b'n') => is_nccl_error_class(msg),
        Some(b'D') => msg.starts_with("During handling of the above exception"),
        Some(b'T') => msg.starts_with("The above exception was the direct cause"),
        // UCX's backtrace banner under its `Caught signal` line: the same process's
        Some(b'=') => msg.starts_with("==== backtrace"),
        _ => false,
    };
    opener || (st.in_traceback && is_exception_line(msg))
}

/// `ncclSystemError: …`, `ncclInternalError: …` (an `ncclResult_t` name and its text).
fn is_nccl_error_class(msg: &str) -> bool {
    msg.strip_prefix("nccl")
        .and_then(|rest| rest.split_once(": "))
        .is_some_and(|(kind, _)| {
            kind.bytes().all(|b| b.is_ascii_alphanumeric())
                && (kind.ends_with("Error") || kind == "InvalidUsage" || kind == "InvalidArgument")
        })
}

/// A Python traceback's frame line: `  File "/path/x.py", line 12, in fn` (pasted excerpts
/// may have lost one of its two leading blanks).
pub(super) fn is_traceback_frame(msg: &str) -> bool {
    let rest = msg.trim_start_matches([' ', '\t']);
    rest.len() < msg.len()
        && rest.starts_with("File \"")
        && msg.contains("\", line ")
        && msg.contains(", in ")
}

/// `s.trim().is_empty()`, decided by the first byte when it is ASCII and not white space
/// (nearly every line): `trim` walks both ends char by char.
fn is_blank(s: &str) -> bool {
    match s.as_bytes().first() {
        Some(&c) if c.is_ascii() && !char::from(c).is_whitespace() => false,
        _ => s.trim().is_empty(),
    }
}

/// `s.trim_end().ends_with(suffix)` for an ASCII `suffix` that does not end in white space,
/// decided without trimming when `s` ends in an ASCII byte that is not white space.
fn ends_with_trimmed(s: &str, suffix: &str) -> bool {
    match s.as_bytes().last() {
        Some(&c) if c.is_ascii() && !char::from(c).is_whitespace() => s.ends_with(suffix),
        _ => s.trim_end().ends_with(suffix),
    }
}

pub(super) fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.char_indices().peekable();
    while let Some((_, c)) = it.next() {
        if c == '\x1b' {
            if it.peek().map(|(_, c)| *c) == Some('[') {
                it.next();
                for (_, c) in it.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// What the line stage remembers of one stream between chunks.
#[derive(Debug, Default)]
pub(crate) struct LineState {
    /// The unfinished last line of the previous chunk (at most `max_line_bytes + 1` bytes).
    partial: Vec<u8>,
    /// Pieces of a line a container runtime split (CRI `P` pieces, Docker json-file objects
    /// without a newline) waiting for the piece that ends it.
    envelope_buf: String,
    line_no: u64,
    /// PyTorch printed `Last error:` and NCCL's text is still to come: on the next line of
    /// the process that printed it (`Some(pid)`), or of the stream (`None`). Processes that
    /// share a stream (vLLM's workers) interleave their lines between the two.
    last_error_of: Option<Option<u32>>,
    in_traceback: bool,
    /// The previous line was a Python traceback frame (`  File "…", line N, in f`).
    after_frame: bool,
    labels: KnownLabels,
    /// The year the stream's own dated lines state (a file's first full timestamp), for its
    /// stamps without one; else the configured default.
    pub(crate) year: Option<i32>,
    /// The width of the console the stream was copied from, when its lines are rows of one
    /// (`console_rows`): a full row goes on in the next.
    pub(crate) console_width: Option<usize>,
    /// The stream's lines open with their line numbers (`numbered_lines`): peeled first.
    pub(crate) numbered: bool,
}

impl LineState {
    pub(crate) fn is_idle(&self) -> bool {
        self.partial.is_empty() && self.envelope_buf.is_empty()
    }

    /// Heap the state owns: the waiting partial line and CRI pieces.
    pub(crate) fn heap_bytes(&self) -> usize {
        crate::memsize::vec(&self.partial)
            + crate::memsize::string(&self.envelope_buf)
            + self.labels.heap_bytes()
    }
}

/// Where a decoded line's text is: in the chunk it was cut from (most lines), or copied into
/// the batch (a line that was cleaned, joined or carried over from the previous chunk).
#[derive(Debug, Clone, Copy)]
enum Span {
    Chunk(usize, usize),
    Own(usize, usize),
}

impl Span {
    /// Where the line starts in the chunk it was cut from, if its text is the chunk's bytes.
    fn chunk_start(self) -> Option<usize> {
        match self {
            Span::Chunk(a, _) => Some(a),
            Span::Own(..) => None,
        }
    }

    /// The line's text: in `chunk`, the bytes it was decoded from, or in `own`, the batch's
    /// own copy.
    fn text<'a>(self, chunk: &'a [u8], own: &'a str) -> &'a str {
        match self {
            // SAFETY: a Chunk span was taken from a `&str` that borrowed `chunk` (see
            // `LineDecoder::plain_line`), so it is valid UTF-8 on char boundaries.
            Span::Chunk(a, b) => unsafe { std::str::from_utf8_unchecked(&chunk[a..b]) },
            Span::Own(a, b) => &own[a..b],
        }
    }
}

/// One non-blank line, peeled and scanned, waiting to be applied to its job.
#[derive(Debug)]
pub(crate) struct Decoded {
    span: Span,
    pub meta: LineMeta,
    /// The line's number in its stream (blank lines count).
    pub line_no: u64,
    /// The printed level, raised for tracebacks and exception lines.
    pub level: Level,
    /// The line continues the record above it (traceback frame, indented text).
    pub continuation: bool,
    /// The line follows `Last error:`: NCCL's own text of the error a PyTorch block reports.
    pub last_error_text: bool,
    /// A traceback's source line under its frame (`    raise RendezvousTimeoutError()`): code
    /// that names an error is not the error, so it is not scanned for signatures.
    pub source_code: bool,
    /// The row fills the console the log was copied from: its line goes on in the next row.
    full_row: bool,
    pub ingest_ms: Option<i64>,
    pub event_ms: Option<i64>,
    /// This line's entries in `Batch::hits`.
    hits: std::ops::Range<usize>,
}

impl Decoded {
    /// Where the line starts in the bytes it was decoded from, if its text is those bytes
    /// as they were (not cleaned, joined or carried over).
    pub(crate) fn chunk_start(&self) -> Option<usize> {
        self.span.chunk_start()
    }
}

/// A signature that matched a line, with the fields the engine reads from it (extracted
/// only for signatures that ingest fields): its entries in `Batch::fields`, spans of the
/// line's message.
#[derive(Debug)]
pub(crate) struct SigHit {
    pub sig: u16,
    pub fields: std::ops::Range<usize>,
}

/// Counters of the line stage, added to the engine's stats when the batch is applied.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LineCounts {
    pub bytes: u64,
    pub blank: u64,
    pub truncated: u64,
    pub invalid_utf8: u64,
}

impl LineCounts {
    /// What was counted since `earlier` (a copy of these counts taken before).
    pub(crate) fn since(self, earlier: LineCounts) -> LineCounts {
        LineCounts {
            bytes: self.bytes - earlier.bytes,
            blank: self.blank - earlier.blank,
            truncated: self.truncated - earlier.truncated,
            invalid_utf8: self.invalid_utf8 - earlier.invalid_utf8,
        }
    }
}

/// The decoded lines of one chunk (or of a part of one), in stream order.
#[derive(Debug, Default)]
pub(crate) struct Batch {
    own: String,
    pub lines: Vec<Decoded>,
    pub hits: Vec<SigHit>,
    pub fields: Vec<FieldSpan>,
    pub counts: LineCounts,
    /// `lines[..scanned]` are scanned; the rest wait for `LineDecoder::scan_pending`.
    scanned: usize,
}

impl Batch {
    pub(crate) fn clear(&mut self) {
        self.own.clear();
        self.lines.clear();
        self.hits.clear();
        self.fields.clear();
        self.counts = LineCounts::default();
        self.scanned = 0;
    }

    /// The parts the apply stage needs at once: each line's text (from `chunk`, the bytes
    /// the batch was decoded from, or the batch's own copy), the hits and their fields.
    pub(crate) fn parts<'a>(
        &'a self,
        chunk: &'a [u8],
    ) -> (
        impl Fn(&Decoded) -> &'a str,
        &'a [Decoded],
        &'a [SigHit],
        &'a [FieldSpan],
    ) {
        let own = self.own.as_str();
        let text = move |d: &Decoded| d.span.text(chunk, own);
        (text, &self.lines, &self.hits, &self.fields)
    }

    pub(crate) fn hits_of(d: &Decoded) -> std::ops::Range<usize> {
        d.hits.clone()
    }
}

/// Decodes and scans lines for one thread: the shared catalog, its own Hyperscan scratch.
pub(crate) struct LineDecoder {
    catalog: Arc<Catalog>,
    /// Scratch space and the memo of recent scan results (messages repeat from rank to rank).
    scanner: Scanner,
    max_line_bytes: usize,
    year: i32,
    expr_buf: Vec<u32>,
    /// Where each pending line's expression ids end in `expr_buf`.
    expr_ends: Vec<usize>,
    sig_buf: Vec<u16>,
    /// By signature: the message its field regexes last ran over here, and what they found.
    field_memo: Vec<FieldMemo>,
    /// Heap bytes of the memos' messages and spans (counted in the engine's budget).
    memo_contents: usize,
    /// Scratch space for a digit-masked message.
    mask: Vec<u8>,
}

/// Messages longer than this are not remembered (they rarely repeat, and each signature's
/// memo keeps one message).
const MEMO_MAX_MSG: usize = 512;

/// The last few messages one signature's field regexes ran over in a decoder and the spans
/// they found in each. The same message comes again and again (an NCCL banner from every rank
/// of a node, a per-step line), often two or three kinds in turn (one `NCCL_*` setting line
/// after another); the regexes are deterministic, so an identical message gets the same spans
/// without running them. When the signature's regexes cannot tell one digit from another
/// (`fields_digit_blind`), the key is the message with its digits masked: a message of the
/// same shape (same length, same bytes but digits) has its spans at the same offsets.
#[derive(Debug, Default)]
struct FieldMemo {
    entries: Vec<FieldMemoEntry>,
    /// The entry the next new message replaces once all are used.
    next: usize,
}

#[derive(Debug, Default)]
struct FieldMemoEntry {
    key: Vec<u8>,
    spans: Vec<FieldSpan>,
}

/// Messages remembered per signature.
const FIELD_MEMO_ENTRIES: usize = 4;

impl FieldMemo {
    fn heap_bytes(&self) -> usize {
        memsize::vec(&self.entries)
            + self
                .entries
                .iter()
                .map(|e| memsize::vec(&e.key) + memsize::vec(&e.spans))
                .sum::<usize>()
    }

    /// Appends the spans of `sig`'s field regexes in `msg` to `out`, from the memo when `msg`
    /// has the key of a message they ran over (`mask` is scratch space).
    fn field_spans(
        &mut self,
        catalog: &Catalog,
        sig: u16,
        msg: &str,
        mask: &mut Vec<u8>,
        out: &mut Vec<FieldSpan>,
    ) {
        let key: &[u8] = if catalog.signatures[sig as usize].fields_digit_blind {
            digits::mask_digits(msg.as_bytes(), mask);
            mask
        } else {
            msg.as_bytes()
        };
        if let Some(e) = self.entries.iter().find(|e| e.key == key) {
            out.extend_from_slice(&e.spans);
            return;
        }
        let first = out.len();
        catalog.field_spans(sig, msg, true, |_| false, out);
        if msg.len() > MEMO_MAX_MSG {
            return;
        }
        if self.entries.len() < FIELD_MEMO_ENTRIES {
            self.entries.push(FieldMemoEntry::default());
        }
        let i = self.next.min(self.entries.len() - 1);
        self.next = (i + 1) % FIELD_MEMO_ENTRIES;
        let e = &mut self.entries[i];
        e.key.clear();
        e.key.extend_from_slice(key);
        e.spans.clear();
        e.spans.extend_from_slice(&out[first..]);
    }
}

/// The chunk being decoded: where its bytes start and end, to tell a line cut from it from
/// a line the decoder made.
#[derive(Clone, Copy)]
struct Origin {
    start: usize,
    end: usize,
}

impl Origin {
    fn of(chunk: &[u8]) -> Origin {
        let start = chunk.as_ptr() as usize;
        Origin {
            start,
            end: start + chunk.len(),
        }
    }

    /// `line`'s offsets in the chunk, if it is a slice of it.
    fn span(self, line: &str) -> Option<(usize, usize)> {
        let p = line.as_ptr() as usize;
        (p >= self.start && p + line.len() <= self.end && !line.is_empty())
            .then(|| (p - self.start, p - self.start + line.len()))
    }
}

/// Times given with the bytes being decoded.
#[derive(Clone, Copy, Default)]
pub(crate) struct Times {
    pub ingest_ms: Option<i64>,
    pub event_ms: Option<i64>,
}

impl LineDecoder {
    pub(crate) fn new(catalog: Arc<Catalog>, max_line_bytes: usize, year: i32) -> LineDecoder {
        let scanner = catalog.scanner();
        LineDecoder {
            catalog,
            scanner,
            max_line_bytes,
            year,
            expr_buf: Vec::new(),
            expr_ends: Vec::new(),
            sig_buf: Vec::new(),
            field_memo: Vec::new(),
            memo_contents: 0,
            mask: Vec::new(),
        }
    }

    /// What the remembered field results hold: the table by signature and each memo's
    /// message and spans. The remembered scans are not counted: like Hyperscan's scratch they
    /// are a fixed cost of each decoder (at most `SCAN_MEMO_SLOTS` messages of 1 KiB), and a
    /// file-reading thread's decoder is not the engine's, so counting them here would make a
    /// tight budget evict at other moments depending on where lines were decoded.
    pub(crate) fn memo_bytes(&self) -> usize {
        memsize::vec(&self.field_memo) + self.memo_contents
    }

    /// `memo_bytes`, counted from scratch.
    pub(crate) fn memo_bytes_recounted(&self) -> usize {
        memsize::vec(&self.field_memo)
            + self
                .field_memo
                .iter()
                .map(FieldMemo::heap_bytes)
                .sum::<usize>()
    }

    /// Decodes the complete lines of `data` into `out`; an unfinished last line waits in `st`
    /// for the next chunk (or `finish`).
    pub(crate) fn chunk(&mut self, st: &mut LineState, data: &[u8], t: Times, out: &mut Batch) {
        self.chunk_lines_in(st, data, 0..data.len(), t, out);
        self.scan_pending(data, out);
    }

    /// Decodes the complete lines of `buf[range]`, a stream's next chunk, into `out`, whose
    /// other lines may come from other parts of `buf` (the texts of many records, decoded
    /// into one batch so that their lines are scanned in runs; see `scan_rest`).
    pub(crate) fn chunk_lines_in(
        &mut self,
        st: &mut LineState,
        buf: &[u8],
        range: Range<usize>,
        t: Times,
        out: &mut Batch,
    ) {
        let data = &buf[range];
        out.counts.bytes += data.len() as u64;
        let origin = Origin::of(buf);
        let mut start = 0;
        if !st.partial.is_empty() {
            match memchr::memchr(b'\n', data) {
                Some(nl) => {
                    self.keep_partial(st, &data[..nl]);
                    self.partial_line(st, t, out);
                    start = nl + 1;
                }
                None => {
                    self.keep_partial(st, data);
                    return;
                }
            }
        }
        let rest = &data[start..];
        // One check per chunk instead of per line: when the complete lines hold no '\r', no
        // ESC and valid UTF-8, each line can skip those checks.
        let whole = memchr::memrchr(b'\n', rest).map_or(&rest[..0], |i| &rest[..i]);
        let plain =
            memchr::memchr2(b'\r', 0x1b, whole).is_none() && std::str::from_utf8(whole).is_ok();
        let mut pos = 0;
        for nl in memchr::memchr_iter(b'\n', rest) {
            if plain && nl - pos <= self.max_line_bytes {
                // SAFETY: `whole` is valid UTF-8 and a '\n' byte is always a char boundary.
                let line = unsafe { std::str::from_utf8_unchecked(&rest[pos..nl]) };
                self.plain_line(st, line, origin, t, out);
            } else {
                self.raw_line(st, &rest[pos..nl], origin, t, out);
            }
            pos = nl + 1;
            if out.lines.len() - out.scanned >= SCAN_RUN {
                self.scan_pending(buf, out);
            }
        }
        if pos < rest.len() {
            self.keep_partial(st, &rest[pos..]);
        }
    }

    /// Decodes lines that arrived whole (a record's text), each with the record's times.
    pub(crate) fn whole_lines(
        &mut self,
        st: &mut LineState,
        text: &[u8],
        t: Times,
        out: &mut Batch,
    ) {
        self.whole_lines_in(st, text, 0..text.len(), t, out);
        self.scan_pending(text, out);
    }

    /// Decodes the lines of `buf[range]` (a record's text, whole lines) into `out`, whose
    /// other lines may come from other parts of `buf`; see `chunk_lines_in`.
    pub(crate) fn whole_lines_in(
        &mut self,
        st: &mut LineState,
        buf: &[u8],
        range: Range<usize>,
        t: Times,
        out: &mut Batch,
    ) {
        let text = &buf[range];
        out.counts.bytes += text.len() as u64 + 1;
        let origin = Origin::of(buf);
        for part in text.split(|c| *c == b'\n') {
            self.raw_line(st, part, origin, t, out);
            if out.lines.len() - out.scanned >= SCAN_RUN {
                self.scan_pending(buf, out);
            }
        }
    }

    /// Scans the lines `*_lines_in` left unscanned (`buf` is the buffer they were cut from).
    pub(crate) fn scan_rest(&mut self, buf: &[u8], out: &mut Batch) {
        self.scan_pending(buf, out);
    }

    /// The end of a stream: its unfinished last line and CRI pieces are lines now.
    pub(crate) fn finish(&mut self, st: &mut LineState, out: &mut Batch) {
        let none = Origin { start: 0, end: 0 };
        if !st.partial.is_empty() {
            self.partial_line(st, Times::default(), out);
        }
        if !st.envelope_buf.is_empty() {
            let text = std::mem::take(&mut st.envelope_buf);
            self.text_line(st, &text, none, Times::default(), out);
        }
        self.scan_pending(&[], out);
    }

    /// Processes the line that waited in `st.partial`, cut (and counted) first when it grew
    /// past `max_line_bytes` (see `keep_partial`).
    fn partial_line(&mut self, st: &mut LineState, t: Times, out: &mut Batch) {
        let line = std::mem::take(&mut st.partial);
        let mut raw = line.as_slice();
        if raw.len() > self.max_line_bytes {
            out.counts.truncated += 1;
            raw = cut_at_char(raw, self.max_line_bytes);
        }
        self.raw_line(st, raw, Origin { start: 0, end: 0 }, t, out);
    }

    /// Adds the next bytes of an unfinished line. A line longer than `max_line_bytes` keeps
    /// only its head (one byte over, so that `partial_line` sees it was cut); the rest is
    /// dropped until its newline, so the line stays one line with its own number and prefix.
    fn keep_partial(&self, st: &mut LineState, data: &[u8]) {
        let room = (self.max_line_bytes + 1).saturating_sub(st.partial.len());
        st.partial.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn raw_line(&mut self, st: &mut LineState, raw: &[u8], o: Origin, t: Times, out: &mut Batch) {
        let mut raw = raw;
        if raw.last() == Some(&b'\r') {
            raw = &raw[..raw.len() - 1];
        }
        // Progress bars rewrite a line with '\r': keep what was displayed last.
        if let Some(p) = memchr::memrchr(b'\r', raw) {
            raw = &raw[p + 1..];
        }
        if raw.len() > self.max_line_bytes {
            out.counts.truncated += 1;
            raw = cut_at_char(raw, self.max_line_bytes);
        }
        match std::str::from_utf8(raw) {
            Ok(s) => self.text_line(st, s, o, t, out),
            Err(_) => {
                out.counts.invalid_utf8 += 1;
                let s = String::from_utf8_lossy(raw).into_owned();
                self.text_line(st, &s, o, t, out);
            }
        }
    }

    fn text_line(&mut self, st: &mut LineState, line: &str, o: Origin, t: Times, out: &mut Batch) {
        if memchr::memchr(0x1b, line.as_bytes()).is_some() {
            let cleaned = strip_ansi(line);
            self.plain_line(st, &cleaned, o, t, out);
        } else {
            self.plain_line(st, line, o, t, out);
        }
    }

    /// A line known to be free of '\r' and ANSI escapes.
    fn plain_line(&mut self, st: &mut LineState, line: &str, o: Origin, t: Times, out: &mut Batch) {
        st.line_no += 1;
        if is_blank(line) {
            out.counts.blank += 1;
            return;
        }
        if let Some(piece) = docker_json(line) {
            let complete = piece.complete;
            return self.envelope_piece(st, &piece.text, complete, piece.ts_ms, t, out);
        }
        let year = st.year.unwrap_or(self.year);
        let number = if st.numbered {
            super::numbered_lines::line_number(line.as_bytes()).map_or(0, |(_, k)| k)
        } else {
            0
        };
        let meta = peel_from(line, number, year);
        let meta = match st.labels.peel_behind(line, &meta, year) {
            Some(again) => again,
            None => {
                st.labels.learn(line, &meta);
                meta
            }
        };
        if meta.cri {
            let content = &line[meta.msg_start..];
            return self.envelope_piece(st, content, !meta.cri_partial, meta.ts_ms, t, out);
        }
        let msg = meta.message(line);
        if is_blank(msg) {
            // A prefix with nothing behind it (`[default6]:` before an NCCL WARN's blank line, a
            // paste's number on an empty line).
            out.counts.blank += 1;
            return;
        }
        // NCCL had no last error to give: c10's backtrace of the exception follows at once.
        if msg.starts_with(C10_BACKTRACE) {
            st.last_error_of = None;
        }
        let last_error_text = st
            .last_error_of
            .is_some_and(|pid| pid.is_none() || pid == meta.pid);
        let continuation = is_continuation(msg, st, last_error_text);
        let mut level = meta.level;
        // Also at the end of a logger's line (`Scheduler hit an exception: Traceback (most
        // recent call last):`): the traceback follows on the next lines.
        if ends_with_trimmed(msg, "Traceback (most recent call last):")
            || crate::prefix::is_ipython_traceback_header(msg)
        {
            level = level.max(Level::Error);
            st.in_traceback = true;
        } else if st.in_traceback && !continuation {
            st.in_traceback = false;
        } else if !st.in_traceback && is_traceback_frame(msg) {
            // A traceback whose header is not in view (a log cut inside it, another stream's
            // header): its frames still end in the exception.
            st.in_traceback = true;
        }
        let source_code = st.after_frame && msg.starts_with("    ");
        st.after_frame = is_traceback_frame(msg);
        if is_exception_line(msg) && (st.in_traceback || msg.contains(": ")) {
            level = level.max(Level::Error);
        }
        // Also behind a label no layer peels (`node-3: Last error:`).
        if ends_with_trimmed(msg, "Last error:") {
            st.last_error_of = Some(meta.pid);
        } else if last_error_text {
            st.last_error_of = None;
        }
        let span = match o.span(line) {
            Some((a, b)) => Span::Chunk(a, b),
            None => {
                let a = out.own.len();
                out.own.push_str(line);
                Span::Own(a, out.own.len())
            }
        };
        out.lines.push(Decoded {
            span,
            meta,
            line_no: st.line_no,
            level,
            continuation,
            last_error_text,
            source_code,
            full_row: st
                .console_width
                .is_some_and(|w| super::console_rows::columns(line.as_bytes()) == w),
            ingest_ms: t.ingest_ms,
            event_ms: t.event_ms,
            hits: 0..0,
        });
    }

    /// A piece of a line that a container runtime wrapped (CRI, Docker json-file): pieces wait
    /// until the one that ends the line, then the joined line is decoded as if it had been
    /// read plain, with the envelope's time as its ingest time when none was given.
    fn envelope_piece(
        &mut self,
        st: &mut LineState,
        content: &str,
        complete: bool,
        ts_ms: Option<i64>,
        t: Times,
        out: &mut Batch,
    ) {
        if !complete {
            if st.envelope_buf.len() < self.max_line_bytes {
                st.envelope_buf.push_str(content);
            }
            return;
        }
        let joined = if st.envelope_buf.is_empty() {
            content.to_string()
        } else {
            let mut j = std::mem::take(&mut st.envelope_buf);
            j.push_str(content);
            j
        };
        st.line_no -= 1;
        let t = Times {
            ingest_ms: t.ingest_ms.or(ts_ms),
            ..t
        };
        let none = Origin { start: 0, end: 0 };
        self.raw_line(st, joined.as_bytes(), none, t, out);
    }

    /// Scans the messages of the lines decoded since the last call (`chunk` holds the bytes
    /// their `Chunk` spans point into): first Hyperscan over every message, then, for the
    /// lines that matched, their signatures and fields (for signatures that ingest fields),
    /// added to `out.hits` in line order.
    fn scan_pending(&mut self, chunk: &[u8], out: &mut Batch) {
        let from = out.scanned;
        if from == out.lines.len() {
            return;
        }
        let catalog = Arc::clone(&self.catalog);
        let catalog = &*catalog;
        self.expr_buf.clear();
        self.expr_ends.clear();
        for d in &out.lines[from..] {
            if !d.source_code {
                let msg = d.meta.message(d.span.text(chunk, &out.own));
                catalog.scan(msg.as_bytes(), &mut self.scanner, &mut self.expr_buf);
            }
            self.expr_ends.push(self.expr_buf.len());
        }
        let mut start = 0;
        for k in 0..out.lines.len() - from {
            let end = self.expr_ends[k];
            let joined = self.across_rows(chunk, out, from + k, start..end);
            let d = &mut out.lines[from + k];
            let first = out.hits.len();
            if end > start {
                catalog.signatures_for(&self.expr_buf[start..end], &mut self.sig_buf);
                let msg = d.meta.message(d.span.text(chunk, &out.own));
                for &sig in &self.sig_buf {
                    let first = out.fields.len();
                    if catalog.signatures[sig as usize].ingest_fields {
                        let memo = memo_of(&mut self.field_memo, sig);
                        let before = memo.heap_bytes();
                        memo.field_spans(catalog, sig, msg, &mut self.mask, &mut out.fields);
                        self.memo_contents =
                            (self.memo_contents + memo.heap_bytes()).saturating_sub(before);
                    }
                    out.hits.push(SigHit {
                        sig,
                        fields: first..out.fields.len(),
                    });
                }
            }
            out.hits
                .extend(joined.into_iter().map(|sig| SigHit { sig, fields: 0..0 }));
            d.hits = first..out.hits.len();
            // A signature decides what its lines mean (some are errors that healthy runs
            // print); a line none knows is an error when its own words say so.
            if d.hits.is_empty()
                && d.level == Level::Unknown
                && !d.source_code
                && states_error(d.meta.message(d.span.text(chunk, &out.own)))
            {
                d.level = Level::Error;
            }
            start = end;
        }
        out.scanned = out.lines.len();
    }
}

impl LineDecoder {
    /// Signatures that match full row `k` of `out` only when joined to the row after it (a
    /// message the console cut in two): neither row alone matches them. `own` is the range of
    /// row `k`'s expressions in `expr_buf`. Their fields are not read (they would span two
    /// rows). Rows of one pending run only; a row at its end is left as it is.
    fn across_rows(&mut self, chunk: &[u8], out: &Batch, k: usize, own: Range<usize>) -> Vec<u16> {
        let (Some(row), Some(next)) = (out.lines.get(k), out.lines.get(k + 1)) else {
            return Vec::new();
        };
        if !row.full_row || row.source_code || next.line_no != row.line_no + 1 {
            return Vec::new();
        }
        let catalog = &*self.catalog;
        // The message runs to the row's end: the blank the console cut at is part of it.
        let mut text = row.span.text(chunk, &out.own)[row.meta.msg_start..].to_string();
        text.push_str(next.span.text(chunk, &out.own));
        let mut exprs = Vec::new();
        catalog.scan(text.as_bytes(), &mut self.scanner, &mut exprs);
        let mut joined = Vec::new();
        catalog.signatures_for(&exprs, &mut joined);
        let mut alone = Vec::new();
        catalog.signatures_for(&self.expr_buf[own], &mut alone);
        let next_start = self.expr_ends[k - out.scanned];
        if let Some(&next_end) = self.expr_ends.get(k + 1 - out.scanned) {
            let mut sigs = Vec::new();
            catalog.signatures_for(&self.expr_buf[next_start..next_end], &mut sigs);
            alone.extend(sigs);
        }
        joined.retain(|&s| !alone.contains(&s) && !catalog.signatures[s as usize].catch_all);
        joined
    }
}

/// `sig`'s memo, made on first use.
fn memo_of(memos: &mut Vec<FieldMemo>, sig: u16) -> &mut FieldMemo {
    let i = sig as usize;
    if memos.len() <= i {
        memos.resize_with(i + 1, FieldMemo::default);
    }
    &mut memos[i]
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
