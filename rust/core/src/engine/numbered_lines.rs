//! Logs pasted with an editor's or viewer's line numbers: every line opens with its number
//! (` 43 SIGABRT(6), PID: …`, ` 44  frame #0: …`), which no prefix layer can tell from text
//! that starts with a number. A file whose lines count up one by one is read as such a paste,
//! and the number is peeled from each of its lines (`LineDecoder::plain_line`). Case
//! (held-out set 83): intel/torch-xpu-ops #1536 (a c10 fatal-signal report numbered 43, 44, …).

/// How much of a file's start is read to tell whether its lines are numbered.
const SAMPLE_BYTES: usize = 64 << 10;
/// Rows read from the sample at most.
const SAMPLE_ROWS: usize = 200;
/// Fewer numbered rows than this could be any short table.
const MIN_ROWS: usize = 5;
/// Line numbers have at most this many digits.
const MAX_DIGITS: usize = 6;

/// Whether `text` (a file's first bytes) reads as numbered lines: its first non-blank rows
/// (at least five) all open with a number, each one more than the row before.
pub(crate) fn numbered(text: &[u8]) -> bool {
    let sample = &text[..text.len().min(SAMPLE_BYTES)];
    let numbers: Vec<Option<u64>> = sample
        .split(|&b| b == b'\n')
        .filter(|row| row.iter().any(|b| !b.is_ascii_whitespace()))
        .take(SAMPLE_ROWS)
        .map(|row| line_number(row).map(|(n, _)| n))
        .collect();
    numbers.len() >= MIN_ROWS
        && numbers.windows(2).all(|w| match (w[0], w[1]) {
            (Some(a), Some(b)) => b == a + 1,
            _ => false,
        })
}

/// The number a row opens with and the bytes it takes with the blanks around it (one space
/// after it is the separator; more belong to the text's own indent).
pub(crate) fn line_number(row: &[u8]) -> Option<(u64, usize)> {
    let lead = row.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    let digits = row[lead..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 || digits > MAX_DIGITS {
        return None;
    }
    let end = lead + digits;
    let n = std::str::from_utf8(&row[lead..end]).ok()?.parse().ok()?;
    match row.get(end) {
        Some(b' ' | b'\t') => Some((n, end + 1)),
        None | Some(b'\r') => Some((n, end)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{line_number, numbered};

    #[test]
    fn rows_that_count_up_are_numbered() {
        let text = " 43 SIGABRT(6), PID: 4119, Thread 4119:\n 44  frame #0: handler + 0x8a\n \
                    45 frame #1: <unknown function> + 0x42520\n 46 frame #2: wait() + 0xb\n \
                    47 frame #3: allgather() + 0x58\n";
        assert!(numbered(text.as_bytes()));
        assert_eq!(line_number(b" 44  frame #0: x"), Some((44, 4)));
    }

    #[test]
    fn tables_and_short_runs_are_not() {
        // nccl-tests' sizes double; a log whose lines merely start with numbers skips.
        let table = "    8   2  float  sum\n   16   4  float  sum\n   32   8  float  sum\n   \
                     64  16  float  sum\n  128  32  float  sum\n";
        assert!(!numbered(table.as_bytes()));
        assert!(!numbered(b"1 a\n2 b\n3 c\n"));
        let gap = "1 a\n2 b\n3 c\nword\n4 d\n5 e\n";
        assert!(!numbered(gap.as_bytes()));
        assert_eq!(line_number(b"12:30 done"), None);
    }
}
