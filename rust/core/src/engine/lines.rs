//! The line stage: a stream's bytes cut into lines, cleaned (line ends, progress-bar
//! rewrites, over-long lines, invalid UTF-8, ANSI codes) and handed to the apply stage.

use super::{Engine, Stream};
use crate::job::Job;

/// `raw` cut to at most `max` bytes, not inside a UTF-8 character (`raw` is longer).
pub(super) fn cut_at_char(raw: &[u8], max: usize) -> &[u8] {
    let mut cut = max;
    while cut > 0 && (raw[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    &raw[..cut]
}

pub(super) fn is_exception_line(msg: &str) -> bool {
    // `pkg.mod.SomeError: text` / `SomeException` at the end of a traceback.
    let head = msg.split(':').next().unwrap_or("");
    !head.is_empty()
        && !head.contains(' ')
        && (head.ends_with("Error")
            || head.ends_with("Exception")
            || head.ends_with("Interrupt")
            || head.ends_with("Exit")
            || head.ends_with("Failure"))
        && head
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
}

pub(super) fn is_continuation(msg: &str, stream: &Stream) -> bool {
    let b = msg.as_bytes();
    if b.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
        return true;
    }
    if stream.after_last_error {
        return true;
    }
    msg.starts_with("frame #")
        || msg.starts_with("Exception raised from ")
        || msg.starts_with("Last error:")
        || msg.starts_with("During handling of the above exception")
        || msg.starts_with("The above exception was the direct cause")
        || (stream.in_traceback && is_exception_line(msg))
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

impl Engine {
    /// Splits a chunk into lines; a trailing partial line waits in the stream for the next.
    pub(super) fn chunk_into(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        data: &[u8],
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        self.stats.bytes += data.len() as u64;
        let mut start = 0;
        if !st.partial.is_empty() {
            match memchr::memchr(b'\n', data) {
                Some(nl) => {
                    self.keep_partial(st, &data[..nl]);
                    self.partial_line(job, st, ingest_ms, event_ms);
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
            if plain && nl - pos <= self.cfg.max_line_bytes {
                // SAFETY: `whole` is valid UTF-8 and a '\n' byte is always a char boundary.
                let line = unsafe { std::str::from_utf8_unchecked(&rest[pos..nl]) };
                self.plain_line(job, st, line, ingest_ms, event_ms);
            } else {
                self.raw_line(job, st, &rest[pos..nl], ingest_ms, event_ms);
            }
            pos = nl + 1;
        }
        if pos < rest.len() {
            self.keep_partial(st, &rest[pos..]);
        }
    }

    /// Feeds lines that arrived whole (a record's text), each with the record's times.
    pub(super) fn lines_into(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        text: &[u8],
        event_ms: Option<i64>,
        ingest_ms: Option<i64>,
    ) {
        self.stats.bytes += text.len() as u64 + 1;
        for part in text.split(|c| *c == b'\n') {
            self.raw_line(job, st, part, ingest_ms, event_ms);
        }
    }

    /// Processes the line that waited in `st.partial`, cut (and counted) first when it grew
    /// past `max_line_bytes` (see `keep_partial`).
    pub(super) fn partial_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        let line = std::mem::take(&mut st.partial);
        let mut raw = line.as_slice();
        if raw.len() > self.cfg.max_line_bytes {
            self.stats.truncated_lines += 1;
            raw = cut_at_char(raw, self.cfg.max_line_bytes);
        }
        self.raw_line(job, st, raw, ingest_ms, event_ms);
    }

    /// Adds the next bytes of an unfinished line. A line longer than `max_line_bytes` keeps
    /// only its head (one byte over, so that `partial_line` sees it was cut); the rest is
    /// dropped until its newline, so the line stays one line with its own number and prefix.
    pub(super) fn keep_partial(&self, st: &mut Stream, data: &[u8]) {
        let room = (self.cfg.max_line_bytes + 1).saturating_sub(st.partial.len());
        st.partial.extend_from_slice(&data[..data.len().min(room)]);
    }

    pub(super) fn raw_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        raw: &[u8],
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        let mut raw = raw;
        if raw.last() == Some(&b'\r') {
            raw = &raw[..raw.len() - 1];
        }
        // Progress bars rewrite a line with '\r': keep what was displayed last.
        if let Some(p) = memchr::memrchr(b'\r', raw) {
            raw = &raw[p + 1..];
        }
        if raw.len() > self.cfg.max_line_bytes {
            self.stats.truncated_lines += 1;
            raw = cut_at_char(raw, self.cfg.max_line_bytes);
        }
        match std::str::from_utf8(raw) {
            Ok(s) => self.text_line(job, st, s, ingest_ms, event_ms),
            Err(_) => {
                self.stats.invalid_utf8_lines += 1;
                let s = String::from_utf8_lossy(raw).into_owned();
                self.text_line(job, st, &s, ingest_ms, event_ms);
            }
        }
    }

    pub(super) fn text_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        line: &str,
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        if memchr::memchr(0x1b, line.as_bytes()).is_some() {
            let cleaned = strip_ansi(line);
            self.plain_line(job, st, &cleaned, ingest_ms, event_ms);
        } else {
            self.plain_line(job, st, line, ingest_ms, event_ms);
        }
    }
}
