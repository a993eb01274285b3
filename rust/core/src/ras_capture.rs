//! NCCL RAS reports kept whole, apart from the ring. The per-process ring keeps the last
//! `ring_lines` lines (256 by default); an `ncclras -f json` report prints about twenty lines
//! per rank, so a report of more than a dozen ranks lost its beginning there and could not be
//! read. Once a line of a report arrives (a hit of a `ras_report_*` signature), its source
//! copies the report's lines here from the report's first line (looked for in the ring) until
//! the report ends, up to `Config::ras_report_bytes`. A report over that cap is dropped as a
//! whole, counted (`Stats::ras_reports_over_cap`) and noted by the rule, never read in part.
//!
//! Where a report ends: a JSON report when its braces close (NCCL's strings hold none); a text
//! report after [`TEXT_IDLE_LINES`] lines of the source without a report line, or where the next
//! report starts. A report in a file of its own simply ends with the file.

use crate::ring::RingLine;

/// Lines of a source without a report line after which a text report is taken to be over.
/// (Report lines come in runs: headers, rules and blank lines between them are a few lines.)
pub const TEXT_IDLE_LINES: u32 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Lines are still being added.
    Open,
    /// The report ended; its lines are kept until the next report of the source.
    Closed,
    /// Longer than the cap: its lines were dropped, and so is the rest of it.
    OverCap,
}

/// One source's last report.
#[derive(Debug)]
pub struct Capture {
    pub kind: Kind,
    pub state: State,
    /// (seq, message) of each line, the message as the prefix peeler leaves it.
    pub lines: Vec<(u64, String)>,
    pub bytes: usize,
    /// JSON: braces and brackets open; text: lines since the last report line.
    depth: i64,
    idle: u32,
    opened: bool,
}

/// A text report's first line.
pub fn opens_text(m: &str) -> bool {
    m.trim() == "Job summary"
}

/// A JSON report's first line: `{` before `"nccl_version"`, or the document on one line.
fn opens_json(m: &str, next: Option<&str>) -> bool {
    let m = m.trim();
    if m == "{" {
        return next.is_some_and(|n| n.trim_start().starts_with("\"nccl_version\""));
    }
    m.starts_with("{\"nccl_version\"") || m.starts_with("{ \"nccl_version\"")
}

/// Braces and brackets a line opens minus those it closes, outside strings.
pub fn depth_change(m: &str) -> i64 {
    let (mut d, mut in_str, mut esc) = (0i64, false, false);
    for b in m.bytes() {
        match (in_str, esc, b) {
            (true, true, _) => esc = false,
            (true, false, b'\\') => esc = true,
            (true, false, b'"') => in_str = false,
            (false, _, b'"') => in_str = true,
            (false, _, b'{' | b'[') => d += 1,
            (false, _, b'}' | b']') => d -= 1,
            _ => {}
        }
    }
    d
}

impl Capture {
    /// A capture of the report a hit at `seq` belongs to: from its first line among
    /// `recent` (the source's ring, peeled, oldest first, ending with the hit's line), or
    /// from the hit's line where the ring no longer holds the beginning.
    pub fn start(recent: &[(u64, String)], cap: usize) -> Capture {
        let json_at = (0..recent.len())
            .rev()
            .find(|&i| opens_json(&recent[i].1, recent.get(i + 1).map(|(_, n)| n.as_str())));
        let text_at = recent.iter().rposition(|(_, m)| opens_text(m));
        let (kind, from) = match (json_at, text_at) {
            (Some(j), Some(t)) if t > j => (Kind::Text, t),
            (Some(j), _) => (Kind::Json, j),
            (None, Some(t)) => (Kind::Text, t),
            (None, None) => {
                let last = recent.last().map_or("", |(_, m)| m.as_str());
                let json = last.trim_start().starts_with('"') || last.trim_start().starts_with('{');
                let kind = if json { Kind::Json } else { Kind::Text };
                (kind, recent.len().saturating_sub(1))
            }
        };
        let mut c = Capture {
            kind,
            state: State::Open,
            lines: Vec::new(),
            bytes: 0,
            depth: 0,
            idle: 0,
            opened: false,
        };
        for (seq, m) in &recent[from..] {
            c.add(*seq, m, true, cap);
        }
        c
    }

    /// Adds the source's next line; `report_line` when it is a hit of a report signature.
    pub fn add(&mut self, seq: u64, m: &str, report_line: bool, cap: usize) {
        if self.state == State::Closed {
            return;
        }
        match self.kind {
            Kind::Json => {
                self.depth += depth_change(m);
                self.opened |= self.depth > 0;
            }
            Kind::Text => {
                self.idle = if report_line { 0 } else { self.idle + 1 };
            }
        }
        if self.state == State::Open {
            self.bytes += m.len() + 16;
            if self.bytes > cap {
                self.state = State::OverCap;
                self.lines = Vec::new();
            } else {
                self.lines.push((seq, m.to_string()));
            }
        }
        let ended = match self.kind {
            Kind::Json => self.opened && self.depth <= 0,
            Kind::Text => self.idle > TEXT_IDLE_LINES,
        };
        if ended {
            // (over the cap, the rest of it has passed: the next report starts afresh)
            self.state = State::Closed;
        }
    }

    /// Whether a line starts another report (which replaces this one).
    pub fn next_report_starts(&self, m: &str) -> bool {
        self.state == State::Closed || (self.kind == Kind::Text && opens_text(m))
    }

    /// Bytes held on the heap (the capture itself is boxed in its source).
    pub fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Capture>()
            + crate::memsize::vec(&self.lines)
            + self
                .lines
                .iter()
                .map(|(_, m)| crate::memsize::string(m))
                .sum::<usize>()
    }

    /// The message of the line at `seq`, where it was kept.
    pub fn line(&self, seq: u64) -> Option<&str> {
        let i = self.lines.binary_search_by_key(&seq, |(s, _)| *s).ok()?;
        Some(&self.lines[i].1)
    }

    /// Whether the capture was over the cap (its lines dropped).
    pub fn over_cap(&self) -> bool {
        self.state == State::OverCap || (self.lines.is_empty() && self.bytes > 0)
    }
}

/// The peeled messages of ring lines.
pub fn peeled(lines: &[RingLine], year: i32) -> Vec<(u64, String)> {
    lines
        .iter()
        .map(|l| {
            let meta = crate::prefix::peel(&l.text, year);
            (l.seq, meta.message(&l.text).to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<(u64, String)> {
        text.lines()
            .enumerate()
            .map(|(i, l)| (i as u64, l.to_string()))
            .collect()
    }

    #[test]
    fn a_json_report_ends_where_its_braces_close() {
        let all = lines("log line\n{\n  \"nccl_version\": \"2.29.2\",\n  \"communicators_count\": 1,\n  \"x\": [ { \"a\": \"}\" } ]\n}\nafter");
        let mut c = Capture::start(&all[..4], 1 << 20);
        assert_eq!(
            (c.kind, c.state, c.lines.len()),
            (Kind::Json, State::Open, 3)
        );
        c.add(4, &all[4].1, false, 1 << 20);
        assert_eq!(c.state, State::Open);
        c.add(5, &all[5].1, false, 1 << 20);
        assert_eq!((c.state, c.lines.len()), (State::Closed, 5));
        c.add(6, &all[6].1, false, 1 << 20);
        assert_eq!(c.lines.len(), 5);
        assert!(c.next_report_starts("anything"));
    }

    #[test]
    fn a_text_report_ends_after_idle_lines_or_at_the_next_one() {
        let all = lines("NCCL version 2.26.5\nJob summary\n===========\n  1 2 3");
        let mut c = Capture::start(&all, 1 << 20);
        assert_eq!((c.kind, c.lines.len()), (Kind::Text, 3));
        assert!(c.next_report_starts("Job summary"));
        for i in 0..=TEXT_IDLE_LINES {
            c.add(10 + u64::from(i), "other", false, 1 << 20);
        }
        assert_eq!(c.state, State::Closed);
    }

    #[test]
    fn a_report_over_the_cap_is_dropped_whole() {
        let all = lines("{\n\"nccl_version\": \"2.29.2\",");
        let mut c = Capture::start(&all, 200);
        for i in 0..20 {
            c.add(i + 2, "  \"rank\": 1,", true, 200);
        }
        assert!(c.over_cap() && c.lines.is_empty());
        c.add(30, "}", false, 200);
        assert_eq!(c.state, State::Closed);
        assert!(c.over_cap());
    }
}
