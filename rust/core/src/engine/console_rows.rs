//! Logs copied from a terminal: long lines broken into rows of the console's width.
//!
//! A user who copies a job's output out of a terminal (or a `tmux`/`screen` pane) posts rows,
//! not lines: every line longer than the console is cut into rows of exactly its width, and
//! a pane pads short rows with spaces to the same width. A message cut that way matches no
//! signature in either row (`... NCCL watchdog thread terminated with ` / `exception: [Rank
//! 1] Watchdog caught collective operation timeout: WorkNCCL(`). A file whose longest rows
//! share one width, several different rows at it, is read as such a copy; the line stage then
//! also scans each full row joined to the row after it (see `LineDecoder::scan_pending`).
//! Cases: GraphGPT #44 (rows of 75 columns), AnomalyGPT #43 (204), DeepLearningExamples #383.

/// How much of a file's start is read to tell its console width.
const SAMPLE_BYTES: usize = 64 << 10;
/// Narrower "consoles" are more likely lines that happen to share a length.
const MIN_WIDTH: usize = 60;
const MAX_WIDTH: usize = 512;
/// Full rows that must differ (digits aside) before a width is believed: the same long line
/// printed by many ranks is not a console's edge.
const MIN_DISTINCT_FULL_ROWS: usize = 3;
/// Of the sample's non-blank rows, at least one in this many is full.
const FULL_ROW_SHARE: usize = 20;

/// The console width `text` (a file's first bytes) was wrapped at, if it reads as rows of a
/// terminal: the widest rows share one width in columns (characters), at least three of them
/// differ beyond their digits, one in twenty rows is that wide, and one of them does not end
/// in padding (a row that was cut, not a short line padded out).
pub(crate) fn console_width(text: &[u8]) -> Option<usize> {
    let sample = &text[..text.len().min(SAMPLE_BYTES)];
    // Every file's start is read here: ASCII text (most logs) counts columns by its length.
    let ascii = sample.is_ascii();
    let width_of = |r: &[u8]| if ascii { r.len() } else { columns(r) };
    let mut rows = Vec::new();
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', sample) {
        let r = &sample[start..nl];
        rows.push(r.strip_suffix(b"\r").unwrap_or(r));
        start = nl + 1;
    }
    // The file's last line, when the sample holds the whole file (a row cut by the sample's
    // end would read as a short one).
    if text.len() <= SAMPLE_BYTES && start < sample.len() {
        rows.push(&sample[start..]);
    }
    let width = rows.iter().map(|r| width_of(r)).max()?;
    if !(MIN_WIDTH..=MAX_WIDTH).contains(&width) {
        return None;
    }
    let full: Vec<&[u8]> = rows
        .iter()
        .copied()
        .filter(|r| width_of(r) == width)
        .collect();
    if full.len() < MIN_DISTINCT_FULL_ROWS {
        return None;
    }
    let filled = rows
        .iter()
        .filter(|r| r.iter().any(|b| !b.is_ascii_whitespace()))
        .count();
    let mut shapes: Vec<Vec<u8>> = full.iter().map(|r| digits_masked(r)).collect();
    shapes.sort();
    shapes.dedup();
    let cut = full.iter().any(|r| r.last().is_some_and(|b| *b != b' '));
    (shapes.len() >= MIN_DISTINCT_FULL_ROWS && full.len() * FULL_ROW_SHARE >= filled && cut)
        .then_some(width)
}

/// Columns a row takes, one per character (UTF-8 continuation bytes do not count).
pub(crate) fn columns(row: &[u8]) -> usize {
    row.iter().filter(|&&b| b & 0xC0 != 0x80).count()
}

fn digits_masked(row: &[u8]) -> Vec<u8> {
    row.iter()
        .map(|&b| if b.is_ascii_digit() { b'0' } else { b })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::console_width;

    fn rows(width: usize, texts: &[&str]) -> String {
        texts
            .iter()
            .map(|t| format!("{t:<width$}\n"))
            .collect::<String>()
    }

    #[test]
    fn a_pane_copy_reads_as_rows_of_its_width() {
        let line = "[E ProcessGroupNCCL.cpp:915] [Rank 1] NCCL watchdog thread terminated with \
            exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7";
        let cut: Vec<String> = line
            .as_bytes()
            .chunks(75)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let mut texts: Vec<&str> = cut.iter().map(String::as_str).collect();
        texts.push("terminate called after throwing an instance of 'std::runtime_error'");
        texts.push("Another line of the job's output, long enough to be cut into two rows of t");
        texts.push("he console.");
        assert_eq!(console_width(rows(75, &texts).as_bytes()), Some(75));
    }

    #[test]
    fn a_log_whose_longest_lines_differ_is_not_rows() {
        let log = "node1:10:10 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n\
            node1:10:10 [0] NCCL INFO NET/IB : No device found.\n\
            node1:10:10 [0] NCCL INFO comm 0x5 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n";
        assert_eq!(console_width(log.as_bytes()), None);
    }

    #[test]
    fn the_same_long_line_from_every_rank_is_not_a_console_edge() {
        let log: String = (0..8)
            .map(|r| {
                format!(
                    "[rank{r}]:[E ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective \
                     operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)\n"
                )
            })
            .collect();
        assert_eq!(console_width(log.as_bytes()), None);
    }

    #[test]
    fn padding_alone_is_no_wrap() {
        let texts = [
            "first short line",
            "second short line",
            "third",
            "fourth one",
        ];
        assert_eq!(console_width(rows(80, &texts).as_bytes()), None);
    }
}
