//! Finds a producer header (NCCL `host:pid:tid [dev] … NCCL LEVEL`, c10 `[E…]`, torch logging
//! `W0321 …]`) or a rank/tee prefix further into a line, behind a launcher prefix no parser
//! knows (a reporter's timestamp without seconds, a mangled or tool-specific tag). What precedes
//! it is then treated as launcher prefix.
//!
//! This runs on every line the ordinary peel left without a producer, so each search is gated by
//! a cheap byte scan over a short window: `[` for bracketed headers, a space before a severity
//! letter for torch logging, `memmem(" NCCL ")` for NCCL.

use super::launcher::rank_or_tee;
use super::producer::{c10, find_nccl_marker, nccl, nccl_bare, torch_log};
use super::{is_host_byte, LineMeta};

/// How far into the rest of the line a launcher prefix may reach.
const PREFIX_WINDOW: usize = 64;
/// How far before `NCCL ` an NCCL header may start (`host:pid:tid [dev] file:line (func) `).
const NCCL_HEADER_SPAN: usize = 224;

/// The first position after `from` where a header starts, if any. Only called where
/// [`opens_with_tag`] holds.
pub(super) fn find_header(b: &[u8], from: usize, year: i32) -> Option<usize> {
    let window_end = b.len().min(from + PREFIX_WINDOW);
    let near = near_header(b, from, window_end, year);
    nccl_header(b, from, near.unwrap_or(window_end)).or(near)
}

/// An unknown launcher prefix is a tag, not prose: it never starts with white space, and its
/// first token carries a digit, a dot or bracket-like punctuation (a time, an id, an address,
/// a file name). Lines that open with a plain word (`Traceback`, `RuntimeError:`,
/// `frame #0:`) are message text, and nothing is searched in them.
pub(super) fn opens_with_tag(b: &[u8]) -> bool {
    if b.first().is_none_or(u8::is_ascii_whitespace) {
        return false;
    }
    b.iter()
        .take(PREFIX_WINDOW)
        .take_while(|c| **c != b' ')
        .any(|c| {
            c.is_ascii_digit() || matches!(c, b'.' | b'[' | b']' | b'|' | b'<' | b'>' | b'(' | b')')
        })
}

/// One scan for the bytes that can open a nearby header: `[` of `[rankN]:` or a c10 `[E…]`
/// header, and the first `:` of a torch logging header's `HH:MM:SS` (8 bytes after its severity
/// letter). Only candidates that pass a byte check are parsed.
fn near_header(b: &[u8], from: usize, end: usize, year: i32) -> Option<usize> {
    let mut probe = LineMeta::default();
    let mut hook = false;
    let start = from + 1;
    if start >= end {
        return None;
    }
    memchr::memchr2_iter(b'[', b':', &b[start..end])
        .map(|i| start + i)
        .find_map(|p| {
            if b[p] == b'[' {
                let found = match b.get(p + 1) {
                    Some(b'r') => rank_or_tee(&b[p..], &mut probe, &mut hook).is_some(),
                    Some(b'F' | b'E' | b'W' | b'I' | b'V') => {
                        c10(&b[p..], year, &mut probe).is_some()
                    }
                    _ => false,
                };
                return found.then_some(p);
            }
            let letter = p.checked_sub(8).filter(|&l| l > from)?;
            let found = b.get(p + 3) == Some(&b':')
                && b[letter - 1] == b' '
                && matches!(b[letter], b'V' | b'I' | b'W' | b'E' | b'C' | b'D')
                && torch_log(&b[letter..], year, &mut probe).is_some();
            found.then_some(letter)
        })
}

/// `NCCL ` within reach of a launcher prefix, then the earliest header start before it: a full
/// `host:pid:tid` header, else a bare `file:line NCCL LEVEL` one. Starts are word starts (a host
/// name begins after a byte that cannot be part of it).
fn nccl_header(b: &[u8], from: usize, before: usize) -> Option<usize> {
    let search_end = b.len().min(before + NCCL_HEADER_SPAN);
    let k = from + 1 + find_nccl_marker(&b[from + 1..search_end])?;
    let lo = (from + 1).max(k.saturating_sub(NCCL_HEADER_SPAN));
    let starts =
        || (lo..k.min(before + 1)).filter(|&s| is_host_byte(b[s]) && !is_host_byte(b[s - 1]));
    let mut probe = LineMeta::default();
    starts()
        .find(|&s| nccl(&b[s..], s, &mut probe).is_some())
        .or_else(|| {
            starts()
                .filter(|&s| b[s - 1] == b' ')
                .find(|&s| nccl_bare(&b[s..], &mut probe).is_some())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: &str) -> Option<&str> {
        let b = line.as_bytes();
        opens_with_tag(b)
            .then(|| find_header(b, 0, 2025))
            .flatten()
            .map(|p| &line[p..])
    }

    #[test]
    fn finds_headers_behind_unknown_prefixes() {
        assert_eq!(
            at("2025-02-18 12:54 [rank13]:[E218 12:54:01.1 ProcessGroupNCCL.cpp:1 x] y"),
            Some("[rank13]:[E218 12:54:01.1 ProcessGroupNCCL.cpp:1 x] y")
        );
        assert_eq!(
            at("LOGX:node-1:12:34 [0] NCCL INFO Using network IB"),
            Some("node-1:12:34 [0] NCCL INFO Using network IB")
        );
        assert_eq!(
            at("tag> include/shm.h:28 NCCL WARN Error: x"),
            Some("include/shm.h:28 NCCL WARN Error: x")
        );
        assert_eq!(
            at("12:00 W0321 02:07:20.285000 1402 torch/x.py:858] Sending"),
            Some("W0321 02:07:20.285000 1402 torch/x.py:858] Sending")
        );
    }

    #[test]
    fn prose_is_not_searched() {
        assert!(!opens_with_tag(b"frame #0: c10::Error::Error"));
        assert!(!opens_with_tag(b"  File \"x.py\", line 3"));
        assert!(opens_with_tag(b"2025-02-18 12:54 [rank13]:"));
        assert!(opens_with_tag(b"tag> include/shm.h:28 NCCL WARN x"));
    }

    #[test]
    fn message_text_has_no_header() {
        assert_eq!(
            at("RuntimeError: NCCL error in: x, unhandled system error"),
            None
        );
        assert_eq!(
            at("[Rank 0] Some NCCL operations have failed or timed out."),
            None
        );
        assert_eq!(at("  File \"/x/y.py\", line 3, in <module>"), None);
        assert_eq!(at("step 1200 loss 2.31 [W] lr 0.1"), None);
    }
}
