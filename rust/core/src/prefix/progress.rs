//! A progress bar (tqdm and the trainers built on it) that a log line was printed behind.
//!
//! A bar is redrawn with `\r` and never ends its line, so the next message a process logs —
//! often the watchdog timeout or the launcher's error — lands on the same line after it:
//! `Epoch 0:   6%|██    | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6]<message>`.
//! The bar is peeled as a launcher prefix so the message behind it is read as usual.

/// How far into a line the bar's percentage may sit (description plus percentage).
const PERCENT_WINDOW: usize = 160;
/// How long the bar, counters and `[elapsed<remaining, rate, postfix]` block may be.
const BAR_SPAN: usize = 640;

/// Bytes of the progress bar that opens `b` when a message follows it, else None.
pub(super) fn progress_bar(b: &[u8]) -> Option<usize> {
    let window = &b[..b.len().min(PERCENT_WINDOW)];
    memchr::memchr_iter(b'%', window)
        .find_map(|p| bar_after_percent(b, p).or_else(|| cut_frame(b, p)))
        .or_else(|| headless_frame(b))
}

/// A frame whose head (`desc: N%|bar|`) is not in view, as an excerpt that opens mid-line
/// shows it: `12172/13725 [4:44:35<35:03,  1.35s/it, loss=0.97]WARNING:torch…` (cxr-clip#4,
/// held-out set 92). The counters and a `[elapsed<remaining` block make it a bar.
fn headless_frame(b: &[u8]) -> Option<usize> {
    let end = b.len().min(BAR_SPAN);
    let mut k = count(b, |c| c == b' ');
    k += counter(b.get(k..end)?).filter(|&n| b[k..k + n].iter().all(u8::is_ascii_digit))?;
    if b.get(k) != Some(&b'/') {
        return None;
    }
    k += 1;
    k += counter(b.get(k..end)?)?;
    if !b.get(k..end)?.starts_with(b" [") {
        return None;
    }
    let open = k + 1;
    let times = b.get(open + 1..end)?;
    let clock = count(times, |c| c.is_ascii_digit() || c == b':');
    if clock == 0 || !times[..clock].contains(&b':') || times.get(clock) != Some(&b'<') {
        return None;
    }
    let message = closing_bracket(b, open, end)? + 1;
    (message < b.len() && !b[message..].iter().all(u8::is_ascii_whitespace)).then_some(message)
}

/// The `]` that closes the `[` at `open`, brackets inside it (a postfix's `lr=['1e-4']`)
/// counted, within `end`.
fn closing_bracket(b: &[u8], open: usize, end: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &c) in b[open..end].iter().enumerate() {
        match c {
            b'[' => depth += 1,
            b']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i);
                }
            }
            _ => {}
        }
    }
    None
}

/// A frame cut short by another process's text: `N%|` and the bar's first blocks, a blank,
/// then the message (`Scanning labels... 0 corrupt:   6%|▋ [E ProcessGroupNCCL.cpp:414] …`,
/// ultralytics/yolov5#9163). Block glyphs (U+2588-U+258F) make it a bar, not prose.
fn cut_frame(b: &[u8], p: usize) -> Option<usize> {
    if p == 0 || !b[p - 1].is_ascii_digit() || b.get(p + 1) != Some(&b'|') {
        return None;
    }
    let mut k = p + 2;
    let mut blocks = 0;
    while let [0xE2, 0x96, 0x88..=0x8F, ..] = b[k..] {
        k += 3;
        blocks += 1;
    }
    let message = k + count(&b[k..], |c| c == b' ');
    (blocks > 0 && message > k && b.get(message).is_some_and(|&c| c != b'|')).then_some(message)
}

/// Whether a bar's frame opens `line` and a message follows it on the same line.
pub fn opens_with_bar(line: &str) -> bool {
    progress_bar(line.as_bytes()).is_some()
}

/// Whether `line` is a progress bar and nothing else (a bar's last drawing kept in the log).
pub fn is_bar_line(line: &str) -> bool {
    bar_alone(line.as_bytes()).is_some()
}

/// The parts of the bar `b` is made of, when nothing but blanks follows it.
fn bar_alone(b: &[u8]) -> Option<BarParts> {
    let window = &b[..b.len().min(PERCENT_WINDOW)];
    memchr::memchr_iter(b'%', window).find_map(|p| {
        bar_parts(b, p).filter(|parts| b[parts.close + 1..].iter().all(u8::is_ascii_whitespace))
    })
}

/// The bar's end when the `%` at `p` opens `N%|bar| n/total [..]` or `N% n/total [..]`.
fn bar_after_percent(b: &[u8], p: usize) -> Option<usize> {
    let close = bar_close(b, p)?;
    let rest = &b[close + 1..];
    (!rest.iter().all(u8::is_ascii_whitespace)).then_some(close + 1)
}

/// The index of the `]` that closes the bar whose `%` is at `p`.
fn bar_close(b: &[u8], p: usize) -> Option<usize> {
    bar_parts(b, p).map(|parts| parts.close)
}

/// Where a bar's counters and its closing `]` are.
struct BarParts {
    done: std::ops::Range<usize>,
    total: std::ops::Range<usize>,
    close: usize,
}

fn bar_parts(b: &[u8], p: usize) -> Option<BarParts> {
    if p == 0 || !b[p - 1].is_ascii_digit() {
        return None;
    }
    let end = b.len().min(p + BAR_SPAN);
    let mut k = p + 1;
    if b.get(k) == Some(&b'|') {
        k += 1 + memchr::memchr(b'|', &b[k + 1..end])? + 1;
    }
    k += count(&b[k..end], |c| c == b' ');
    let done = k..k + counter(&b[k..end])?;
    k = done.end;
    if b.get(k) != Some(&b'/') {
        return None;
    }
    k += 1;
    let total = k..k + counter(&b[k..end])?;
    k = total.end;
    if !b[k..end].starts_with(b" [") {
        return None;
    }
    let close = k + 2 + memchr::memchr(b']', &b[k + 2..end])?;
    Some(BarParts { done, total, close })
}

/// The `n/total` of a line that is a progress bar and nothing else, when both are plain
/// numbers (not `?`, not scaled like `1.2k`).
pub fn bar_counts(line: &str) -> Option<(u64, u64)> {
    let parts = bar_alone(line.as_bytes())?;
    let number = |r: std::ops::Range<usize>| line.get(r)?.parse::<u64>().ok();
    Some((number(parts.done)?, number(parts.total)?))
}

/// A tqdm counter: digits, maybe scaled (`1.2k`, `3M`) or unknown (`?`).
fn counter(b: &[u8]) -> Option<usize> {
    if b.first() == Some(&b'?') {
        return Some(1);
    }
    let n = count(b, |c| c.is_ascii_digit() || c == b'.');
    if n == 0 {
        return None;
    }
    Some(n + usize::from(matches!(b.get(n), Some(b'k' | b'M' | b'G' | b'T'))))
}

fn count(b: &[u8], keep: impl Fn(u8) -> bool) -> usize {
    b.iter().take_while(|c| keep(**c)).count()
}

#[cfg(test)]
mod tests {
    use super::{bar_counts, is_bar_line, progress_bar};

    #[test]
    fn a_frame_cut_short_by_a_message_is_a_bar() {
        let line =
            "train: Scanning labels... 0 corrupt:   6%|\u{258b} [E ProcessGroupNCCL.cpp:414] x";
        let end = progress_bar(line.as_bytes()).unwrap();
        assert!(line[end..].starts_with("[E ProcessGroupNCCL"));
        assert_eq!(
            progress_bar("load 6%|\u{258b}         | 5/9 [00:01<00:02]".as_bytes()),
            None
        );
        assert_eq!(progress_bar("ratio 6%| of all [x]".as_bytes()), None);
    }

    #[test]
    fn a_frame_without_its_head_is_a_bar() {
        let line = "12172/13725 [4:44:35<35:03,  1.35s/it, lr=['0.00004109'], loss=0.97, \
            Mem=0%]WARNING:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node";
        let end = progress_bar(line.as_bytes()).unwrap();
        assert!(line[end..].starts_with("WARNING:torch.distributed"));
        // Counters and a bracket that holds no elapsed<remaining clock are not a bar.
        assert_eq!(progress_bar("3/4 [done] all ranks ok".as_bytes()), None);
        assert_eq!(
            progress_bar("12/30 [00:01<00:02, 3.1it/s]".as_bytes()),
            None
        );
    }

    #[test]
    fn a_bars_counts_are_read() {
        let bar = "  7%|\u{258b}         | 496/7151 [3:38:58<46:22:13, 25.08s/it]";
        assert_eq!(bar_counts(bar), Some((496, 7151)));
        assert_eq!(
            bar_counts("Loading:  33% 1/3 [00:05<00:10,  5.02s/it]  "),
            Some((1, 3))
        );
        assert_eq!(
            bar_counts("eval:  50%|#####     | 1.5k/3k [00:30<00:30]"),
            None
        );
        assert_eq!(
            bar_counts(" 12%|x| 3/25 [00:09<01:07,  3.07s/it]ERROR: failed"),
            None
        );
    }

    #[test]
    fn a_bar_alone_is_a_bar_line() {
        assert!(is_bar_line(
            "Preparing test set...:  39%|███▉      | 26/67 [24:51<30:30, 44.65s/it]"
        ));
        assert!(is_bar_line(
            "Loading shards:  33% 1/3 [00:05<00:10,  5.02s/it]  "
        ));
        assert!(!is_bar_line(
            " 12%|█▏        | 3/25 [00:09<01:07,  3.07s/it]ERROR: failed"
        ));
        assert!(!is_bar_line("GPU util 95% of 8/8 devices [ok]"));
    }

    fn behind(line: &str) -> Option<&str> {
        progress_bar(line.as_bytes()).map(|n| &line[n..])
    }

    #[test]
    fn message_behind_a_bar_is_found() {
        assert_eq!(
            behind("Train 3:  41%|████▏     | 812/1980 [01:02:11<1:29:30,  4.60s/it, loss=0.71][W ProcessGroupNCCL.cpp:90] x"),
            Some("[W ProcessGroupNCCL.cpp:90] x")
        );
        assert_eq!(
            behind(" 12%|█▏        | 3/25 [00:09<01:07,  3.07s/it]ERROR:torch.distributed.elastic.multiprocessing.api:failed"),
            Some("ERROR:torch.distributed.elastic.multiprocessing.api:failed")
        );
        assert_eq!(
            behind("Loading shards:  33% 1/3 [00:05<00:10,  5.02s/it]RuntimeError: boom"),
            Some("RuntimeError: boom")
        );
        assert_eq!(
            behind(
                "eval:  50%|#####     | 1.5k/3k [00:30<00:30, 50.0it/s]node3:12:13 [1] NCCL WARN y"
            ),
            Some("node3:12:13 [1] NCCL WARN y")
        );
    }

    #[test]
    fn a_bar_alone_or_prose_is_not_a_prefix() {
        assert_eq!(
            behind("Epoch 2:  80%|████████  | 8/10 [00:16<00:04,  2.01s/it]"),
            None
        );
        assert_eq!(
            behind("Epoch 2:  80%|████████  | 8/10 [00:16<00:04]   "),
            None
        );
        assert_eq!(behind("GPU util 95% of 8/8 devices [ok] fine"), None);
        assert_eq!(behind("reduced loss by 5% | 3/4 done [x]y"), None);
        assert_eq!(behind("fe80::1%ib0<4242> closed"), None);
    }
}
