//! Prefix peeling: strips the layers real training logs wrap around a message (ANSI residue,
//! launcher labels, torchrun tee headers, rank prefixes, timestamps, NCCL / c10 / torch-logging
//! / stdlib / syslog / libfabric producer prefixes) and keeps every field it removes.
//! See shared/reference/log-formats.md for the shapes.
//!
//! Known prefixes are peeled from the outside in ([`launcher`], [`producer`]). When a line
//! carries a prefix no parser knows, [`anchor`] looks for a producer header further in and the
//! unknown part is skipped as launcher prefix.

mod anchor;
mod docker_json;
mod elision;
mod error_word;
mod fast;
mod labels;
mod launcher;
mod pg_rank;
mod producer;
mod progress;

pub use docker_json::{docker_json, DockerPiece};
pub use elision::is_elision_mark;
pub use error_word::states_error;
pub use labels::KnownLabels;
pub use pg_rank::{pg_rank, what_rank, PgRank};
pub use progress::{bar_counts, is_bar_line, opens_with_bar};

use crate::timefmt::{ctime, iso_datetime, leading_number, syslog_time};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    #[default]
    Unknown,
    Info,
    Warn,
    Error,
    Fatal,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Unknown => "unknown",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
            Level::Fatal => "fatal",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Producer {
    #[default]
    Plain,
    Nccl,
    C10,
    TorchLog,
    Excepthook,
    Stdlib,
    Syslog,
    Kernel,
    Libfabric,
    Ucx,
}

/// Everything peeled off one line. Host is a byte range into the (cleaned) line; the message
/// is `line[msg_start..msg_end]` (see [`LineMeta::message`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineMeta {
    pub msg_start: usize,
    /// End of the message: the line's end unless a trailing annotation was cut off (Ray's
    /// `[repeated Nx across cluster]`, a console's duplicated message column).
    pub msg_end: usize,
    pub host: Option<(usize, usize)>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub cuda_dev: Option<u16>,
    pub grank: Option<u32>,
    pub local_rank: Option<u16>,
    pub ts_ms: Option<i64>,
    /// `ts_ms` came with its own date and year (an ISO stamp, a CRI envelope, `ctime()`,
    /// epoch seconds). A year-less time read deeper in the line (c10, torch logging, vLLM)
    /// does not replace it: it would take the configured default year, and a stamp every
    /// line of the stream carries keeps lines with and without an inner time on one clock.
    pub ts_dated: bool,
    pub level: Level,
    pub producer: Producer,
    /// Ray's de-duplication count: this line stands for that many more identical lines.
    pub repeated: Option<u32>,
    /// CRI envelope partial flag (`P`): the runtime split this line and the rest follows.
    pub cri_partial: bool,
    pub cri: bool,
}

impl LineMeta {
    pub fn host<'a>(&self, line: &'a str) -> Option<&'a str> {
        self.host.map(|(a, b)| &line[a..b])
    }

    /// The message left after peeling.
    pub fn message<'a>(&self, line: &'a str) -> &'a str {
        &line[self.msg_start..self.msg_end.max(self.msg_start)]
    }
}

/// A Python exception line: `pkg.mod.SomeError: text` or a bare `SomeException`, also as Ray
/// re-raises a task's exception: `ray.exceptions.RayTaskError(NcclError): text`.
pub fn is_exception_line(msg: &str) -> bool {
    // `pkg.mod.SomeError: text` / `SomeException` at the end of a traceback: a dotted name,
    // then ':' or the end. Stops at the first byte a name cannot hold (most lines: a space
    // within a few bytes).
    let b = msg.as_bytes();
    let end = dotted_name_len(b);
    if end == 0 || !names_exception(&b[..end]) {
        return false;
    }
    match b.get(end) {
        None | Some(b':') => true,
        Some(b'(') => {
            let inner = dotted_name_len(&b[end + 1..]);
            let close = end + 1 + inner;
            inner > 0
                && names_exception(&b[end + 1..close])
                && b.get(close) == Some(&b')')
                && matches!(b.get(close + 1), None | Some(b':'))
        }
        _ => false,
    }
}

/// IPython's traceback header (Jupyter, `ipython`): the exception's name, padding, then
/// `Traceback (most recent call last)` with no colon; the exception's text comes last.
pub fn is_ipython_traceback_header(msg: &str) -> bool {
    let Some(head) = msg
        .trim_end()
        .strip_suffix("Traceback (most recent call last)")
    else {
        return false;
    };
    let name = head.trim_end();
    let b = name.as_bytes();
    head.len() - name.len() >= 2
        && !b.is_empty()
        && dotted_name_len(b) == b.len()
        && names_exception(b)
}

fn dotted_name_len(b: &[u8]) -> usize {
    b.iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || c == b'.' || c == b'_'))
        .unwrap_or(b.len())
}

fn names_exception(name: &[u8]) -> bool {
    [
        &b"Error"[..],
        b"Exception",
        b"Interrupt",
        b"Exit",
        b"Failure",
    ]
    .iter()
    .any(|s| name.ends_with(s))
}

fn is_host_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.'
}

/// At most this many layers are peeled from one line.
const MAX_LAYERS: usize = 16;

/// `line` peeled from byte `k` on (a prefix the stream's shape says to skip: a remembered
/// label, a paste's line number), with offsets into the whole line.
pub fn peel_from(line: &str, k: usize, year: i32) -> LineMeta {
    let inner = peel(&line[k..], year);
    LineMeta {
        msg_start: inner.msg_start + k,
        msg_end: inner.msg_end + k,
        host: inner.host.map(|(a, b)| (a + k, b + k)),
        ..inner
    }
}

/// Peels every layer it recognises from `line`. `year` fills in dates that print no year.
/// A CRI envelope stops the peeling: the engine joins partial CRI lines and peels the result.
pub fn peel(line: &str, year: i32) -> LineMeta {
    match fast::common_header(line.as_bytes()) {
        fast::Fast::Done(m) => m,
        fast::Fast::Resume { meta, pos, layers } => {
            peel_layers(line.as_bytes(), year, meta, pos, layers)
        }
        fast::Fast::General => peel_general(line, year),
    }
}

/// [`peel`] without its fast path for the common NCCL header: every peeler in turn. The
/// result is the same (`fast_tests.rs`, `examples/peel_compare.rs`); public so that checks
/// outside this crate can compare the two.
#[doc(hidden)]
pub fn peel_general(line: &str, year: i32) -> LineMeta {
    let b = line.as_bytes();
    let mut m = LineMeta {
        msg_end: b.len(),
        ..LineMeta::default()
    };
    if let Some(n) = launcher::cri(b, &mut m) {
        m.msg_start = n;
        return m;
    }
    if let Some((end, count)) = launcher::ray_repeated_suffix(b) {
        m.msg_end = end;
        m.repeated = Some(count);
    }
    peel_layers(b, year, m, 0, 0)
}

/// The layers from `pos` on, `layers` of them already peeled into `m`.
fn peel_layers(b: &[u8], year: i32, mut m: LineMeta, mut pos: usize, layers: usize) -> LineMeta {
    let mut anchored = false;
    for _ in layers..MAX_LAYERS {
        let rest = &b[pos..m.msg_end];
        if rest.is_empty() {
            break;
        }
        match layer(rest, pos, year, &mut m) {
            Step::Prefix(n) => pos += n,
            Step::Producer(n) => {
                pos += n;
                break;
            }
            Step::Unknown if !anchored => {
                anchored = true;
                match anchor::find_header(&b[..m.msg_end], pos, year) {
                    Some(p) => pos = p,
                    None => break,
                }
            }
            Step::Unknown | Step::Prose => break,
        }
    }
    m.msg_start = pos.min(m.msg_end);
    // Terminals and pdsh pad lines to their width; the padding is no part of the message
    // (patterns anchored at its end, field values). Trimmed after peeling: a prefix with
    // nothing behind it keeps its own trailing space.
    m.msg_end = trim_end_blanks(b, m.msg_end).max(m.msg_start);
    if m.grank.is_none() {
        let msg = &b[m.msg_start..m.msg_end];
        m.grank = if m.producer == Producer::C10 {
            pg_rank(msg).and_then(PgRank::global)
        } else {
            what_rank(msg)
        };
    }
    m
}

/// `end` moved back over trailing spaces and tabs of `b[..end]`.
fn trim_end_blanks(b: &[u8], end: usize) -> usize {
    b[..end]
        .iter()
        .rposition(|c| !matches!(c, b' ' | b'\t'))
        .map_or(0, |p| p + 1)
}

/// Quote marks a poster put around a pasted line (`"…"`, `“…”`, `”…“`, `` `…` ``): the
/// lengths of the opening and closing marks, when the quoted text opens with a header-like tag.
pub(super) fn quoted_whole(b: &[u8]) -> Option<(usize, usize)> {
    const MARKS: [&[u8]; 7] = [
        b"\"",
        b"'",
        b"`",
        "\u{201c}".as_bytes(),
        "\u{201d}".as_bytes(),
        "\u{2018}".as_bytes(),
        "\u{2019}".as_bytes(),
    ];
    // Every mark opens with one of these bytes (the curly ones with 0xE2): most lines stop here.
    if !matches!(b.first(), Some(b'"' | b'\'' | b'`' | 0xE2)) {
        return None;
    }
    let open = MARKS.iter().find(|q| b.starts_with(q))?.len();
    let close = MARKS.iter().find(|q| b.ends_with(q))?.len();
    let inner = b.get(open..b.len().checked_sub(close)?)?;
    (!inner.is_empty() && anchor::opens_with_tag(inner)).then_some((open, close))
}

/// A Markdown block quote's `> ` (a log pasted into an issue as a quote): its length. Not
/// Python's `>>> ` prompt.
fn markdown_quote(b: &[u8]) -> Option<usize> {
    if b.first() != Some(&b'>') || b.get(1) != Some(&b' ') {
        return None;
    }
    Some(2)
}

/// A terminal UI's frame around a log pane (k9s, lazydocker: `│ line`, perhaps `│ line │`):
/// the lengths of the left border with its space and of the right border with the blanks
/// before it.
fn box_border(b: &[u8]) -> Option<(usize, usize)> {
    const BARS: [&str; 2] = ["\u{2502}", "\u{2503}"];
    let bar = BARS.iter().find(|bar| b.starts_with(bar.as_bytes()))?.len();
    if b.get(bar) != Some(&b' ') {
        return None;
    }
    let body = trim_end_blanks(b, b.len());
    let close = BARS
        .iter()
        .find(|bar| b[..body].ends_with(bar.as_bytes()))
        .map_or(0, |right| {
            let inner = trim_end_blanks(b, body - right.len());
            b.len() - inner.max(bar + 1)
        });
    Some((bar + 1, close))
}

/// What one peeling step found at the current position.
enum Step {
    /// A launcher/transport layer of this many bytes; more may follow.
    Prefix(usize),
    /// The producer's header of this many bytes; the message follows.
    Producer(usize),
    /// Something no parser knows that opens with a tag: a header may sit further in.
    Unknown,
    /// The message itself (it opens with a plain word or white space).
    Prose,
}

/// Blanks in front of a producer's header or a launcher's label (a log indented under a
/// Markdown list item, in an indented code block, or by a test harness that prints what its
/// job printed): the step behind them, with the blanks counted in. Indentation before
/// anything else stays (traceback frames, continuation lines, quoted strings).
fn indented(rest: &[u8], pos: usize, year: i32, m: &mut LineMeta) -> Option<Step> {
    let blanks = producer::blanks(rest);
    if blanks == 0 || blanks > MAX_INDENT || blanks == rest.len() {
        return None;
    }
    let (after, at) = (&rest[blanks..], pos + blanks);
    let mut probe = m.clone();
    let step = match launcher_label(after, at, &mut probe) {
        Some(step) => step,
        None => match layer(after, at, year, &mut probe) {
            Step::Producer(n) => Step::Producer(n),
            _ => return None,
        },
    };
    *m = probe;
    Some(match step {
        Step::Producer(n) => Step::Producer(blanks + n),
        Step::Prefix(n) => Step::Prefix(blanks + n),
        other => other,
    })
}

/// A launcher's per-line label (`[rank3]:`, `[1,10]<stderr>:`, `[pod/name/container]`,
/// Ray's `(name pid=N)`) opening `rest`.
fn launcher_label(rest: &[u8], pos: usize, m: &mut LineMeta) -> Option<Step> {
    let mut excepthook = false;
    let label = launcher::rank_or_tee(rest, m, &mut excepthook).or_else(|| {
        (pos == 0)
            .then(|| launcher::rank_unbracketed(rest, m, &mut excepthook))
            .flatten()
    });
    if let Some(n) = label {
        if excepthook {
            m.producer = Producer::Excepthook;
            return Some(Step::Producer(n));
        }
        return Some(Step::Prefix(n));
    }
    launcher::openmpi(rest, m)
        .or_else(|| launcher::kubectl(rest))
        .or_else(|| launcher::ray(rest, pos, m))
        .map(Step::Prefix)
}

/// Deeper indentation than this is layout, not a pasted log line.
const MAX_INDENT: usize = 12;

#[inline]
fn layer(rest: &[u8], pos: usize, year: i32, m: &mut LineMeta) -> Step {
    if let Some(n) = launcher::ansi(rest) {
        return Step::Prefix(n);
    }
    if matches!(rest[0], b' ' | b'\t') {
        if let Some(step) = indented(rest, pos, year, m) {
            return step;
        }
    }
    // What a poster or a viewer put around the line: quote marks, a terminal UI's frame.
    if let Some((open, close)) = quoted_whole(rest).or_else(|| box_border(rest)) {
        m.msg_end -= close;
        return Step::Prefix(open);
    }
    if let Some(n) = markdown_quote(rest) {
        return Step::Prefix(n);
    }
    // Also behind a launcher's label: a console export re-shipped by another pipeline.
    if let Some(n) = launcher::cloudwatch(rest, m) {
        let content = &rest[n..];
        if let Some(half) = launcher::repeated_column(content) {
            m.msg_end = pos + n + half;
        }
        return Step::Prefix(n);
    }
    if let Some(step) = launcher_label(rest, pos, m) {
        return step;
    }
    if rest[0] == b'[' {
        if let Some(n) = producer::nccl_bracketed(rest, pos, m) {
            return Step::Producer(n);
        }
        if let Some(n) = producer::ucx(rest, pos, m) {
            return Step::Producer(n);
        }
        if let Some(n) = producer::ucx_thread(rest, pos, m) {
            return Step::Producer(n);
        }
        if let Some(n) = producer::sharp(rest, pos, m) {
            return Step::Producer(n);
        }
        if let Some(step) = bracketed(rest, year, m) {
            return step;
        }
    }
    if let Some(n) = producer::nccl(rest, pos, m) {
        return Step::Producer(n);
    }
    if rest[0].is_ascii_uppercase() {
        if let Some(step) = capitalised(rest, pos, year, m) {
            return step;
        }
    }
    if rest[0].is_ascii_digit() {
        if let Some(step) = leading_time(rest, pos, m) {
            return step;
        }
    }
    if let Some(n) = producer::libfabric(rest, pos, m) {
        return Step::Producer(n);
    }
    if let Some(n) = launcher::launcher_label(rest, m, pos, year) {
        return Step::Prefix(n);
    }
    if let Some(n) = launcher::torchx_role(rest) {
        return Step::Prefix(n);
    }
    if let Some(n) = launcher::word_label(rest) {
        return Step::Prefix(n);
    }
    if let Some(n) = launcher::stream_label(rest) {
        return Step::Prefix(n);
    }
    if let Some(n) = progress::progress_bar(rest) {
        return Step::Prefix(n);
    }
    if !anchor::opens_with_tag(rest) {
        return Step::Prose;
    }
    if let Some(n) = producer::nccl_bare(rest, m) {
        return Step::Producer(n);
    }
    if let Some(n) = producer::nccl_bare_pre_2_3(rest, m) {
        return Step::Producer(n);
    }
    if let Some(n) = launcher::grep_file(rest) {
        return Step::Prefix(n);
    }
    Step::Unknown
}

/// Layers that start with `[`: bracketed wall-clock times, dmesg uptimes, c10 headers and bare
/// `[N]` tags.
fn bracketed(rest: &[u8], year: i32, m: &mut LineMeta) -> Option<Step> {
    // `[2025-05-29 16:25:00] ` (NCCL 2.26+ WARN) and similar.
    if let Some((ts, n)) = iso_datetime(&rest[1..]) {
        let was = (m.ts_ms, m.ts_dated);
        (m.ts_ms, m.ts_dated) = (Some(ts), true);
        if rest.get(1 + n) == Some(&b']') {
            return Some(Step::Prefix(
                2 + n + usize::from(rest.get(2 + n) == Some(&b' ')),
            ));
        }
        if let Some(end) = producer::glog_tail(&rest[1 + n..], m) {
            return Some(Step::Producer(1 + n + end));
        }
        (m.ts_ms, m.ts_dated) = was;
    }
    if let Some(n) = producer::bracketed_level(rest, m) {
        return Some(Step::Producer(n));
    }
    // `dmesg -T`: `[Fri Jan 29 23:42:34 2021] `, the kernel's time as a C `ctime()`.
    if let Some((ts, n)) = ctime(&rest[1..]).filter(|&(_, n)| rest.get(1 + n) == Some(&b']')) {
        (m.ts_ms, m.ts_dated) = (Some(ts), true);
        m.producer = Producer::Kernel;
        return Some(Step::Prefix(
            2 + n + usize::from(rest.get(2 + n) == Some(&b' ')),
        ));
    }
    if let Some(n) = dmesg_uptime(rest) {
        m.producer = Producer::Kernel;
        return Some(Step::Prefix(n));
    }
    if let Some(n) = producer::c10(rest, year, m) {
        return Some(Step::Producer(n));
    }
    if let Some(n) = producer::omniverse_kit(rest, m) {
        return Some(Step::Producer(n));
    }
    launcher::bracket_tag(rest, m)
        .or_else(|| launcher::app_tag(rest))
        .or_else(|| launcher::metaflow_task(rest, m))
        .or_else(|| launcher::uuid_tag(rest))
        .map(Step::Prefix)
}

/// dmesg `[183422.511734] `: seconds since boot, not a wall clock; `dmesg -H` prints the
/// seconds since the previous line instead (`[  +0.000844] `).
fn dmesg_uptime(rest: &[u8]) -> Option<usize> {
    let mut sp = rest[1..].iter().take_while(|c| **c == b' ').count();
    if rest.get(1 + sp) == Some(&b'+') {
        sp += 1;
    }
    let (_, n) = leading_number(&rest[1 + sp..], 12)?;
    let n = n + sp;
    if rest.get(1 + n) != Some(&b'.') {
        return None;
    }
    let fr = rest[2 + n..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count();
    if fr == 0 || rest.get(2 + n + fr) != Some(&b']') {
        return None;
    }
    Some(3 + n + fr + usize::from(rest.get(3 + n + fr) == Some(&b' ')))
}

/// Layers that start with a capital letter: torch logging, stdlib logging, vLLM's logger,
/// syslog.
fn capitalised(rest: &[u8], pos: usize, year: i32, m: &mut LineMeta) -> Option<Step> {
    if let Some(n) = producer::cray_mpich(rest, pos, m) {
        return Some(Step::Producer(n));
    }
    // Posters paste an NCCL message without its `host:pid:tid [dev] file:line` header, the
    // marker first (`NCCL WARN NCCL cannot be captured ...`): the marker is the header.
    if let Some((level, n)) = producer::nccl_level(rest) {
        m.level = level;
        m.producer = Producer::Nccl;
        return Some(Step::Producer(n));
    }
    if let Some(n) = producer::nccl_v1_warn(rest, m) {
        return Some(Step::Producer(n));
    }
    if let Some(n) = producer::torch_log(rest, year, m) {
        return Some(Step::Producer(n));
    }
    if let Some(n) = producer::c10_unbracketed(rest, year, m) {
        return Some(Step::Producer(n));
    }
    if let Some(n) = producer::stdlib(rest, m) {
        return Some(Step::Producer(n));
    }
    if let Some(n) = producer::level_date_site(rest, year, m) {
        return Some(Step::Producer(n));
    }
    if let Some(n) = ctime_stamp(rest, m) {
        return Some(Step::Prefix(n));
    }
    if let Some(n) = launcher::pytest_failure_marker(rest) {
        return Some(Step::Prefix(n));
    }
    let (ts, n) = syslog_time(rest, year)?;
    if rest.get(n) != Some(&b' ') {
        return None;
    }
    let h = producer::syslog_host(&rest[n + 1..], pos + n + 1, m)?;
    m.ts_ms = Some(ts);
    Some(Step::Prefix(n + 1 + h))
}

/// Open MPI's `--timestamp-output`: a C `ctime()` time glued to the rank tag it precedes
/// (`Fri Aug 11 12:31:45 2023[1,0]<stdout>:`), or followed by a space.
fn ctime_stamp(rest: &[u8], m: &mut LineMeta) -> Option<usize> {
    let (ts, n) = ctime(rest)?;
    let len = match rest.get(n) {
        Some(b'[') => n,
        Some(b' ') => n + 1,
        _ => return None,
    };
    (m.ts_ms, m.ts_dated) = (Some(ts), true);
    Some(len)
}

/// A leading date-time: asctime-style `2026-11-30 12:00:05,123 INFO ` (or Ray's tab form), an
/// ISO syslog time followed by a host, or a timestamp column (`<time> `, `<time>: `).
fn leading_time(rest: &[u8], pos: usize, m: &mut LineMeta) -> Option<Step> {
    let (ts, n) = iso_datetime(rest)?;
    let mut k = n;
    if rest[k..].starts_with(b": ") {
        k += 1;
    }
    if !matches!(rest.get(k), Some(b' ') | Some(b'\t')) {
        return None;
    }
    k += 1;
    (m.ts_ms, m.ts_dated) = (Some(ts), true);
    if let Some(n) = producer::tf_severity_site(&rest[k..], m) {
        return Some(Step::Producer(k + n));
    }
    if let Some((lvl, ln)) = producer::level_word(&rest[k..]) {
        m.level = lvl;
        k += ln;
        while matches!(rest.get(k), Some(b' ') | Some(b':') | Some(b'-')) {
            k += 1;
        }
        return Some(Step::Producer(k));
    }
    if let Some(n) = producer::named_logger_level(&rest[k..], m) {
        return Some(Step::Producer(k + n));
    }
    if let Some(h) = producer::syslog_host(&rest[k..], pos + k, m) {
        return Some(Step::Prefix(k + h));
    }
    Some(Step::Prefix(k))
}

#[cfg(test)]
mod shape_tests;
#[cfg(test)]
mod tests;
