//! Finds a producer header (NCCL `host:pid:tid [dev] … NCCL LEVEL`, c10 `[E…]`, torch logging
//! `W0321 …]`) or a rank/tee prefix further into a line, behind a launcher prefix no parser
//! knows (a reporter's timestamp without seconds, a mangled or tool-specific tag). What precedes
//! it is then treated as launcher prefix.
//!
//! This runs on every line the ordinary peel left without a producer, so each search is gated by
//! a cheap byte scan over a short window: `[` for bracketed headers, a space before a severity
//! letter for torch logging, `memmem(" NCCL ")` for NCCL.

use super::launcher::rank_or_tee;
use super::producer::{c10, nccl, nccl_bare, torch_log};
use super::{is_host_byte, LineMeta};

/// How far into the rest of the line a launcher prefix may reach.
const PREFIX_WINDOW: usize = 96;
/// How far before `NCCL ` an NCCL header may start (`host:pid:tid [dev] file:line (func) `).
const NCCL_HEADER_SPAN: usize = 224;

/// The first position after `from` where a header starts, if any.
pub(super) fn find_header(b: &[u8], from: usize, year: i32) -> Option<usize> {
    let window_end = b.len().min(from + PREFIX_WINDOW);
    let bracketed = bracketed_header(b, from, window_end, year);
    let end = bracketed.unwrap_or(window_end);
    let torch = torch_header(b, from, end, year);
    let end = torch.unwrap_or(end);
    nccl_header(b, from, end).or(torch).or(bracketed)
}

fn bracketed_header(b: &[u8], from: usize, end: usize, year: i32) -> Option<usize> {
    let mut probe = LineMeta::default();
    let mut hook = false;
    memchr::memchr_iter(b'[', &b[from + 1..end])
        .map(|p| from + 1 + p)
        .find(|&p| {
            let rest = &b[p..];
            (rest.starts_with(b"[rank") && rank_or_tee(rest, &mut probe, &mut hook).is_some())
                || c10(rest, year, &mut probe).is_some()
        })
}

fn torch_header(b: &[u8], from: usize, end: usize, year: i32) -> Option<usize> {
    let mut probe = LineMeta::default();
    memchr::memchr_iter(b' ', &b[from..end])
        .map(|p| from + p + 1)
        .find(|&p| {
            b.get(p).is_some_and(|c| b"VIWECD".contains(c))
                && torch_log(&b[p..], year, &mut probe).is_some()
        })
}

/// `NCCL ` within reach of a launcher prefix, then the earliest header start before it: a full
/// `host:pid:tid` header, else a bare `file:line NCCL LEVEL` one. Starts are word starts (a host
/// name begins after a byte that cannot be part of it).
fn nccl_header(b: &[u8], from: usize, before: usize) -> Option<usize> {
    let search_end = b.len().min(before + NCCL_HEADER_SPAN);
    let k = from + memchr::memmem::find(&b[from..search_end], b" NCCL ")?;
    let lo = from.max(k.saturating_sub(NCCL_HEADER_SPAN)).max(1);
    let starts = || (lo..=k.min(before)).filter(|&s| is_host_byte(b[s]) && !is_host_byte(b[s - 1]));
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
        find_header(line.as_bytes(), 0, 2025).map(|p| &line[p..])
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
