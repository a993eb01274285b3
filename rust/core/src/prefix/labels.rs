//! Launcher labels a stream has shown. pdsh (and tools like it) put `host: ` before every line
//! a process prints, but `Word: ` is also ordinary message text, so [`super::launcher`] peels
//! such a label only where a known header, a Python error or an address vouches for it. Once a
//! label has been peeled on one line of a stream, the same label opening a later line of that
//! stream is a label too, whatever follows it (a UCX backtrace banner, a C++ frame, a line no
//! peeler knows): this remembers the labels a stream has shown and peels them there.

use super::{is_host_byte, LineMeta};

/// At most this many distinct labels are remembered per stream (pdsh merges many hosts into
/// one stream; a stream whose "labels" keep changing is not labelled).
const MAX_LABELS: usize = 32;

/// A remembered label longer than this is not a label.
const MAX_LABEL_BYTES: usize = 96;

#[derive(Debug, Default)]
pub struct KnownLabels {
    /// Each label as the line's bytes up to and including its `: `, with the host's range.
    labels: Vec<(Box<str>, (usize, usize))>,
}

impl KnownLabels {
    /// Remembers the label that opens `line`, when peeling went past it.
    pub fn learn(&mut self, line: &str, meta: &LineMeta) {
        let Some((host, end)) = label(line, meta) else {
            return;
        };
        let label = &line[..end];
        if self.labels.iter().any(|(l, _)| &**l == label) {
            return;
        }
        if self.labels.len() == MAX_LABELS {
            self.labels.remove(0);
        }
        self.labels.push((label.into(), host));
    }

    /// The line peeled again behind a remembered label that `meta` stopped short of.
    pub fn peel_behind(&self, line: &str, meta: &LineMeta, year: i32) -> Option<LineMeta> {
        let (label, host) = self
            .labels
            .iter()
            .find(|(l, _)| meta.msg_start < l.len() && line.starts_with(&**l))?;
        let inner = super::peel_from(line, label.len(), year);
        Some(LineMeta {
            host: Some(inner.host.unwrap_or(*host)),
            ..inner
        })
    }

    pub fn heap_bytes(&self) -> usize {
        crate::memsize::vec(&self.labels) + self.labels.iter().map(|(l, _)| l.len()).sum::<usize>()
    }
}

/// The host's range and the end of a `host: ` label opening `line`, when the message starts
/// after it (a layer peeled it). Level words (`INFO: `) are no labels.
fn label(line: &str, meta: &LineMeta) -> Option<((usize, usize), usize)> {
    let b = line.as_bytes();
    let start = b.iter().take_while(|c| **c == b' ').count();
    let len = b[start..].iter().take_while(|c| is_host_byte(**c)).count();
    let end = start + len + 2;
    let is_label = len > 0
        && b.get(start + len..end) == Some(b": ")
        && end <= meta.msg_start
        && end <= MAX_LABEL_BYTES
        && !is_level_word(&line[start..start + len]);
    is_label.then_some(((start, start + len), end))
}

fn is_level_word(token: &str) -> bool {
    [
        "INFO", "WARN", "WARNING", "ERROR", "DEBUG", "CRITICAL", "FATAL", "NOTICE", "TRACE",
    ]
    .iter()
    .any(|w| token.eq_ignore_ascii_case(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prefix::peel;

    fn known(lines: &[&str]) -> KnownLabels {
        let mut k = KnownLabels::default();
        for l in lines {
            k.learn(l, &peel(l, 2026));
        }
        k
    }

    fn message<'a>(k: &KnownLabels, line: &'a str) -> (&'a str, Option<&'a str>) {
        let meta = peel(line, 2026);
        let meta = k.peel_behind(line, &meta, 2026).unwrap_or(meta);
        (meta.message(line), meta.host(line))
    }

    #[test]
    fn a_label_seen_before_known_text_is_peeled_before_any_text() {
        let k = known(&["ubuntu: ubuntu:25645:25701 [0] NCCL INFO Init COMPLETE"]);
        let (msg, host) = message(&k, "ubuntu: ==== backtrace (tid:  25645) ====");
        assert_eq!(msg, "==== backtrace (tid:  25645) ====");
        assert_eq!(host, Some("ubuntu"));
        let (msg, _) = message(
            &k,
            "ubuntu: Exception raised from ncclCommWatchdog at x.cpp:1",
        );
        assert_eq!(msg, "Exception raised from ncclCommWatchdog at x.cpp:1");
    }

    #[test]
    fn the_peeled_rest_keeps_its_own_layers() {
        let k = known(&["node-0: Traceback (most recent call last):"]);
        let line = "node-0: node-0:11:12 [3] NCCL WARN NET/IB : Got completion with error 12";
        let meta = peel(line, 2026);
        let again = k.peel_behind(line, &meta, 2026);
        // The NCCL header behind the label vouches for it already: nothing to redo.
        assert!(again.is_none());
        assert_eq!(meta.message(line), "NET/IB : Got completion with error 12");
    }

    #[test]
    fn text_that_never_was_a_label_stays_text() {
        let k = known(&["node-0: Traceback (most recent call last):"]);
        let (msg, host) = message(&k, "Note: this is prose");
        assert_eq!(msg, "Note: this is prose");
        assert_eq!(host, None);
        let (msg, _) = message(&k, "node-1: ==== backtrace ====");
        assert_eq!(msg, "node-1: ==== backtrace ====");
    }

    #[test]
    fn nccl_headers_and_level_words_teach_no_label() {
        let k = known(&[
            "node-0:11:12 [3] NCCL INFO Init COMPLETE",
            "INFO: Started server process [2177]",
        ]);
        assert!(k.labels.is_empty());
    }
}
