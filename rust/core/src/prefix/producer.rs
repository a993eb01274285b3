//! Producer prefixes: the header the program that wrote the message put in front of it (NCCL,
//! c10, torch logging, Python's stdlib logging, syslog, libfabric). Each parser is anchored at
//! the start of the slice it gets; `anchor` finds them further into a line.

use super::launcher::position;
use super::{is_host_byte, Level, LineMeta, Producer};
use crate::timefmt::{ctime, digits, leading_number, mmdd_hms};
use memchr::memmem;
use std::sync::OnceLock;

/// Parses `[<digits>]` at `b`, returning the number and length.
pub(super) fn bracket_number(b: &[u8]) -> Option<(u64, usize)> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let (v, n) = leading_number(&b[1..], 10)?;
    if b.get(1 + n) != Some(&b']') {
        return None;
    }
    Some((v, n + 2))
}

/// How far past `NCCL ` the marker may sit: `[dev] file:line (func) ` or a trace float.
const NCCL_MARKER_WINDOW: usize = 160;

/// `NCCL <LEVEL> ` at the start of `b`: the level and the bytes consumed (trailing space too).
pub(super) fn nccl_level(b: &[u8]) -> Option<(Level, usize)> {
    let rest = b.strip_prefix(b"NCCL ")?;
    let (level, n) = if rest.starts_with(b"WARN") {
        (Level::Warn, 4)
    } else if rest.starts_with(b"INFO") {
        (Level::Info, 4)
    } else if rest.starts_with(b"TRACE") {
        (Level::Info, 5)
    } else if rest.starts_with(b"CALL") {
        (Level::Info, 4)
    } else if rest.starts_with(b"ABORT") {
        (Level::Error, 5)
    } else {
        return None;
    };
    let mut end = 5 + n;
    match b.get(end) {
        None => {}
        Some(b' ') => end += 1,
        Some(_) => return None,
    }
    Some((level, end))
}

/// `NCCL ` as a prebuilt searcher: this runs on every NCCL line.
pub(super) fn find_nccl_marker(b: &[u8]) -> Option<usize> {
    static FINDER: OnceLock<memmem::Finder<'static>> = OnceLock::new();
    FINDER.get_or_init(|| memmem::Finder::new(b"NCCL ")).find(b)
}

/// NCCL `host:pid:tid [dev] ` optionally followed by `file:line [(func)] NCCL WARN ` or
/// `NCCL INFO `, `%f file:line NCCL TRACE `, or `NCCL CALL ` (no device). `off` is where `b`
/// starts in the line, so the host range is absolute.
pub(super) fn nccl(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let mut i = redacted_host(b).unwrap_or(0);
    if i == 0 {
        while i < b.len() && is_host_byte(b[i]) {
            i += 1;
        }
    }
    // Posters often blank the host name out (`:166:1226 [0] NCCL WARN ...`, or `::166:1226`
    // where the name held a colon too); such a header still names the process and its GPU,
    // but only with the `NCCL ` marker after it.
    let blank_host = i == 0;
    if blank_host && b.starts_with(b"::") {
        i = 1;
    }
    if b.get(i) != Some(&b':') {
        return None;
    }
    let host = (off, off + i);
    let (pid, n) = leading_number(&b[i + 1..], 10)?;
    let mut j = i + 1 + n;
    if b.get(j) != Some(&b':') {
        return None;
    }
    let (tid, n) = leading_number(&b[j + 1..], 10)?;
    j += 1 + n;
    if b.get(j) != Some(&b' ') {
        return None;
    }
    j += 1;
    let mut dev = None;
    if let Some((d, n)) = bracket_number(&b[j..]) {
        dev = u16::try_from(d).ok();
        j += n;
        if b.get(j) == Some(&b' ') {
            j += 1;
        }
    }
    let (level, end) = match find_nccl_marker(&b[j..b.len().min(j + NCCL_MARKER_WINDOW)]) {
        Some(pos) => {
            let (level, n) = nccl_level(&b[j + pos..])?;
            (level, j + pos + n)
        }
        // Without the marker, insist on the whole old header so `12:34:56 INFO` stays a time.
        None if dev.is_some() && !blank_host && !b[..i].iter().all(u8::is_ascii_digit) => {
            let (level, n) = pre_2_3_level(&b[j..])?;
            (level, j + n)
        }
        None => return None,
    };
    m.host = (!blank_host).then_some(host);
    m.pid = u32::try_from(pid).ok();
    m.tid = u32::try_from(tid).ok();
    m.cuda_dev = dev;
    m.level = level;
    m.producer = Producer::Nccl;
    Some(end)
}

/// A vendor NCCL build's bracketed header (Alibaba's ACCL on PAI):
/// `[host][pid:tid][dev][file:line] NCCL LEVEL `. `off` is where `b` starts in the line.
pub(super) fn nccl_bracketed(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let host_end = 1 + b.get(1..)?.iter().take_while(|c| is_host_byte(**c)).count();
    if b.first() != Some(&b'[') || host_end == 1 || b.get(host_end) != Some(&b']') {
        return None;
    }
    let (pid, tid, mut j) = bracketed_pid_tid(b, host_end + 1)?;
    let (dev, n) = bracket_number(&b[j..])?;
    j += n;
    j += bracketed_source(&b[j..])?;
    if b.get(j) != Some(&b' ') {
        return None;
    }
    let (level, n) = nccl_level(&b[j + 1..])?;
    m.host = Some((off + 1, off + host_end));
    m.pid = u32::try_from(pid).ok();
    m.tid = u32::try_from(tid).ok();
    m.cuda_dev = u16::try_from(dev).ok();
    m.level = level;
    m.producer = Producer::Nccl;
    Some(j + 1 + n)
}

/// `[pid:tid]` at `at`: both numbers and the index just past the bracket.
fn bracketed_pid_tid(b: &[u8], at: usize) -> Option<(u64, u64, usize)> {
    if b.get(at) != Some(&b'[') {
        return None;
    }
    let (pid, n) = leading_number(b.get(at + 1..)?, 10)?;
    let j = at + 1 + n;
    if b.get(j) != Some(&b':') {
        return None;
    }
    let (tid, n) = leading_number(b.get(j + 1..)?, 10)?;
    let j = j + 1 + n;
    (b.get(j) == Some(&b']')).then_some((pid, tid, j + 1))
}

/// `[file:line]` at the start of `b`: its length.
fn bracketed_source(b: &[u8]) -> Option<usize> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &b[..b.len().min(96)])?;
    let colon = memchr::memrchr(b':', &b[1..close])? + 1;
    let line_no = &b[colon + 1..close];
    let ok = colon > 1 && !line_no.is_empty() && line_no.iter().all(u8::is_ascii_digit);
    ok.then_some(close + 1)
}

/// NCCL 2.2 and older printed no `NCCL ` marker: `host:pid:tid [dev] INFO msg` and
/// `host:pid:tid [dev] file:line WARN msg`. Only tried once the `host:pid:tid ` header parsed.
fn pre_2_3_level(b: &[u8]) -> Option<(Level, usize)> {
    let bare = |b: &[u8]| -> Option<(Level, usize)> {
        let level = if b.starts_with(b"WARN ") {
            Level::Warn
        } else if b.starts_with(b"INFO ") {
            Level::Info
        } else {
            return None;
        };
        Some((level, 5))
    };
    if let Some(found) = bare(b) {
        return Some(found);
    }
    let sp = position(&b[..b.len().min(NCCL_MARKER_WINDOW)], b' ')?;
    let colon = memchr::memrchr(b':', &b[..sp])?;
    let line_no = &b[colon + 1..sp];
    if colon == 0 || line_no.is_empty() || !line_no.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let (level, n) = bare(&b[sp + 1..])?;
    Some((level, sp + 1 + n))
}

/// A host name a poster redacted (`<cluster_name>:922:1158 [3] ...`): the length of `<name>`.
fn redacted_host(b: &[u8]) -> Option<usize> {
    if b.first() != Some(&b'<') {
        return None;
    }
    let close = b.iter().take(64).position(|c| *c == b'>')?;
    (close > 1 && b[1..close].iter().all(|c| is_host_byte(*c))).then_some(close + 1)
}

/// An NCCL line whose `host:pid:tid [dev]` was cut off or never printed:
/// `include/shm.h:28 NCCL WARN ` / `ibvwrap.c:174 (func) NCCL WARN `.
#[inline]
pub(super) fn nccl_bare(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let sp = position(&b[..b.len().min(NCCL_MARKER_WINDOW)], b' ')?;
    let after = &b[sp + 1..];
    if !after.starts_with(b"NCCL ") && !after.starts_with(b"(") {
        return None;
    }
    let colon = memchr::memrchr(b':', &b[..sp])?;
    let line_no = &b[colon + 1..sp];
    if colon == 0 || line_no.is_empty() || !line_no.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut j = sp + 1;
    if b.get(j) == Some(&b'(') {
        j = memchr::memchr(b')', &b[j..b.len().min(j + 96)])? + j + 1;
        if b.get(j) != Some(&b' ') {
            return None;
        }
        j += 1;
    }
    let (level, n) = nccl_level(&b[j..])?;
    m.level = level;
    m.producer = Producer::Nccl;
    Some(j + n)
}

/// NCCL 2.3 and older with the `host:pid:tid [dev]` header cut off: `include/socket.h:344 WARN
/// msg`. Without the `NCCL` marker only a C/C++/CUDA source file keeps this from matching any
/// `file:line WARN` a tool might print.
#[inline]
pub(super) fn nccl_bare_pre_2_3(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let sp = position(&b[..b.len().min(NCCL_MARKER_WINDOW)], b' ')?;
    if !b[sp + 1..].starts_with(b"WARN ") {
        return None;
    }
    let colon = memchr::memrchr(b':', &b[..sp])?;
    let line_no = &b[colon + 1..sp];
    if line_no.is_empty() || !line_no.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if !is_c_source(&b[..colon]) {
        return None;
    }
    m.level = Level::Warn;
    m.producer = Producer::Nccl;
    Some(sp + 1 + b"WARN ".len())
}

/// NCCL 1.x, which printed no host header and put the level first: `WARN src/reduce.cu:126
/// Cuda failure 'invalid resource handle'`. Its INFO lines (`INFO rank 0 using device 0`)
/// carry no source file and are left alone: a bare `INFO ` opens many tools' lines.
#[inline]
pub(super) fn nccl_v1_warn(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let rest = b.strip_prefix(b"WARN ")?;
    let sp = position(&rest[..rest.len().min(NCCL_MARKER_WINDOW)], b' ')?;
    let colon = memchr::memrchr(b':', &rest[..sp])?;
    let line_no = &rest[colon + 1..sp];
    if line_no.is_empty() || !line_no.iter().all(u8::is_ascii_digit) || !is_c_source(&rest[..colon])
    {
        return None;
    }
    m.level = Level::Warn;
    m.producer = Producer::Nccl;
    Some(b"WARN ".len() + sp + 1)
}

/// A C, C++ or CUDA source path (`include/socket.h`, `src/reduce.cu`): what keeps a bare
/// `file:line WARN` from matching any tool's warning.
fn is_c_source(file: &[u8]) -> bool {
    let Some(dot) = memchr::memrchr(b'.', file) else {
        return false;
    };
    dot > 0
        && file[..dot].iter().all(|c| is_host_byte(*c) || *c == b'/')
        && matches!(
            &file[dot + 1..],
            b"h" | b"c" | b"cc" | b"cu" | b"cpp" | b"hpp"
        )
}

fn severity_letter(c: u8) -> Option<Level> {
    match c {
        b'F' => Some(Level::Fatal),
        b'E' => Some(Level::Error),
        b'W' => Some(Level::Warn),
        b'I' | b'V' => Some(Level::Info),
        _ => None,
    }
}

/// `file:line]` closing a c10 or torch-logging header at `b[i]` (a space); returns the end.
fn file_line_close(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let close = memchr::memchr(b']', &b[i..])? + i;
    let inner = &b[i + 1..close];
    let colon = memchr::memrchr(b':', inner)?;
    if colon == 0 || !inner[colon + 1..].iter().all(u8::is_ascii_digit) || inner.contains(&b' ') {
        return None;
    }
    let mut end = close + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    Some(end)
}

/// A year-less time a producer's header carries, unless the line already has a dated one
/// (`LineMeta::ts_dated`).
fn keep_dated_time(m: &mut LineMeta, ts: Option<i64>) {
    if !m.ts_dated && ts.is_some() {
        m.ts_ms = ts;
    }
}

/// c10 `[E1130 12:00:01.123456789 File.cpp:616] ` or the old `[E File.cpp:475] `.
pub(super) fn c10(b: &[u8], year: i32, m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b'[') {
        return None;
    }
    c10_after_bracket(b, 1, year, m)
}

/// c10's header at the start of a line whose opening `[` a paste lost (an excerpt that
/// starts one byte into its first line): `E ProcessGroupNCCL.cpp:587] `.
pub(super) fn c10_unbracketed(b: &[u8], year: i32, m: &mut LineMeta) -> Option<usize> {
    c10_after_bracket(b, 0, year, m)
}

fn c10_after_bracket(b: &[u8], start: usize, year: i32, m: &mut LineMeta) -> Option<usize> {
    if b.len() < start + 5 {
        return None;
    }
    let level = severity_letter(b[start])?;
    let mut i = start + 1;
    let mut ts = None;
    if b[i].is_ascii_digit() {
        let n = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n != 3 && n != 4 {
            return None;
        }
        ts = Some(mmdd_hms(&b[i..], n, year)?);
        i += n + 1 + 8;
        if b.get(i) == Some(&b'.') {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    let end = file_line_close(b, i)?;
    m.level = level;
    keep_dated_time(m, ts);
    m.producer = Producer::C10;
    Some(end)
}

/// torch logging `W0529 16:25:00.123000 81200 path/file.py:900] `. Older releases print the
/// thread id (up to 20 digits) where newer ones print the pid; only a value that fits a pid
/// is kept as one.
pub(super) fn torch_log(b: &[u8], year: i32, m: &mut LineMeta) -> Option<usize> {
    if b.len() < 30 {
        return None;
    }
    let level = match b[0] {
        b'C' => Level::Fatal,
        b'D' => Level::Info,
        c => severity_letter(c)?,
    };
    // glog 0.7 and absl print the year too: `W20250825 11:10:33.595331`.
    let (base, dot) = match digits(&b[1..], 8).filter(|_| b[9] == b' ') {
        Some(ymd) => (mmdd_hms(&b[5..], 4, (ymd / 10_000) as i32)?, 18),
        None => (mmdd_hms(&b[1..], 4, year)?, 14),
    };
    if b[dot] != b'.' {
        return None;
    }
    let mut i = dot + 1;
    let frac_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let ms = i64::from(digits(&b[frac_start..], 3).unwrap_or(0));
    // glog pads the thread id to five columns.
    let pad = b[i..].iter().take_while(|&&c| c == b' ').count();
    if pad == 0 {
        return None;
    }
    let (id, n) = leading_number(&b[i + pad..], 20)?;
    i += pad + n;
    let end = file_line_close(b, i)?;
    m.level = level;
    keep_dated_time(m, Some(base + ms));
    m.pid = u32::try_from(id).ok();
    m.producer = Producer::TorchLog;
    Some(end)
}

/// vLLM's logger: `ERROR 07-03 14:43:50 worker_base.py:148] ` (releases before 0.8) or
/// `INFO 05-12 09:10:11 [core.py:58] ` (later ones; a few configurations add `.mmm` to the
/// time). A multi-line message repeats the header on every line, tracebacks included.
pub(super) fn level_date_site(b: &[u8], year: i32, m: &mut LineMeta) -> Option<usize> {
    let (level, n) = level_word(b)?;
    let i = n + 1;
    // `MM-DD HH:MM:SS`: the date's dash makes it `MMDD` for mmdd_hms.
    let d = b.get(i..i + 14)?;
    if b[n] != b' ' || d[2] != b'-' || d[5] != b' ' {
        return None;
    }
    let mmdd = [
        d[0], d[1], d[3], d[4], b' ', d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13],
    ];
    let mut ts = mmdd_hms(&mmdd, 4, year)?;
    let mut k = i + 14;
    if b.get(k) == Some(&b'.') {
        let frac = b[k + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        ts += i64::from(digits(&b[k + 1..], frac.min(3)).unwrap_or(0));
        k += 1 + frac;
    }
    if b.get(k) != Some(&b' ') {
        return None;
    }
    k += 1;
    let site = if b.get(k) == Some(&b'[') {
        1 + source_location(&b[k + 1..], b"]")?
    } else {
        source_location(&b[k..], b"]")?
    };
    k += site;
    if b.get(k) == Some(&b' ') {
        k += 1;
    }
    m.level = level;
    keep_dated_time(m, Some(ts));
    m.producer = Producer::Stdlib;
    Some(k)
}

/// stdlib default format `LEVEL:logger.name:message`.
pub(super) fn stdlib(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let (level, n) = [
        (&b"CRITICAL:"[..], Level::Fatal),
        (&b"ERROR:"[..], Level::Error),
        (&b"WARNING:"[..], Level::Warn),
        (&b"INFO:"[..], Level::Info),
        (&b"DEBUG:"[..], Level::Info),
    ]
    .iter()
    .find(|(p, _)| b.starts_with(p))
    .map(|(p, l)| (*l, p.len()))?;
    let rest = &b[n..];
    let i = rest
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'.' || **c == b'_')
        .count();
    if i == 0 || rest.get(i) != Some(&b':') {
        return None;
    }
    m.level = level;
    m.producer = Producer::Stdlib;
    Some(n + i + 1)
}

pub(super) fn level_word(b: &[u8]) -> Option<(Level, usize)> {
    for (w, l) in [
        (&b"CRITICAL"[..], Level::Fatal),
        (&b"FATAL"[..], Level::Fatal),
        (&b"ERROR"[..], Level::Error),
        (&b"WARNING"[..], Level::Warn),
        (&b"WARN"[..], Level::Warn),
        (&b"INFO"[..], Level::Info),
        (&b"DEBUG"[..], Level::Info),
    ] {
        if b.starts_with(w) && b.get(w.len()).is_none_or(|c| !c.is_ascii_alphanumeric()) {
            return Some((l, w.len()));
        }
    }
    None
}

/// Python logging's `%(asctime)s - %(name)s - %(levelname)s - ` after its time:
/// `- cosmos - ERROR - `.
pub(super) fn named_logger_level(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let rest = b.strip_prefix(b"- ")?;
    let name_len = rest[..rest.len().min(64)]
        .windows(3)
        .position(|w| w == b" - ")?;
    if rest[..name_len].contains(&b' ') {
        return None;
    }
    let after_name = 2 + name_len + 3;
    let (level, n) = level_word(&b[after_name..])?;
    let end = after_name + n;
    if !b[end..].starts_with(b" - ") {
        return None;
    }
    m.level = level;
    m.producer = Producer::Stdlib;
    Some(end + 3)
}

/// `host kernel: ` / `host prog[pid]: ` after a syslog time.
pub(super) fn syslog_host(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let i = b.iter().take_while(|c| is_host_byte(**c)).count();
    if i == 0 || b.get(i) != Some(&b' ') {
        return None;
    }
    let host = (off, off + i);
    let prog_start = i + 1;
    let colon = memchr::memchr(b':', &b[prog_start..b.len().min(prog_start + 64)])? + prog_start;
    let prog = &b[prog_start..colon];
    if prog.is_empty() || prog.contains(&b' ') {
        return None;
    }
    let mut end = colon + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    if end >= b.len() {
        // `host prog:` with nothing behind it is a message ending in a colon (`Last error:`
        // after a timestamp column), not a syslog header.
        return None;
    }
    m.host = Some(host);
    m.producer = if prog == b"kernel" {
        Producer::Kernel
    } else {
        Producer::Syslog
    };
    Some(end)
}

/// The rest of Ray's C++ log header after its time: ` E 7046 7269] logging.cc:361: `.
pub(super) fn glog_tail(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b' ') || b.get(2) != Some(&b' ') {
        return None;
    }
    let level = severity_letter(*b.get(1)?)?;
    let (pid, n) = leading_number(&b[3..], 10)?;
    let close = memchr::memchr(b']', &b[3 + n..b.len().min(3 + n + 24)])? + 3 + n;
    if !b[3 + n..close]
        .iter()
        .all(|c| *c == b' ' || c.is_ascii_digit())
    {
        return None;
    }
    let mut end = close + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    if let Some(n) = source_location(&b[end..], b": ") {
        end += n;
    }
    m.level = level;
    m.pid = u32::try_from(pid).ok();
    m.producer = Producer::Stdlib;
    Some(end)
}

/// TensorFlow's C++ log header after its time (`2019-08-26 18:41:15.943905: `): the severity
/// letter and the call site, `E tensorflow/stream_executor/cuda/cuda_driver.cc:828] `.
pub(super) fn tf_severity_site(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let level = severity_letter(*b.first()?)?;
    if b.get(1) != Some(&b' ') {
        return None;
    }
    let n = source_location(&b[2..], b"] ")?;
    m.level = level;
    m.producer = Producer::Stdlib;
    Some(2 + n)
}

/// The SHARP library's own log header (libsharp, under NCCL's SHARP plugin):
/// `[C25L18:0:24972 - comm.c:374] ERROR ` — host, the SHARP rank, pid, call site, level — or
/// `[node:0:3745196 unique id 9370583446459220315][2024-09-24 16:15:29] ERROR `.
pub(super) fn sharp(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let host = b[1..]
        .iter()
        .take(64)
        .take_while(|&&c| is_host_byte(c))
        .count();
    let mut i = 1 + host;
    if host == 0 || b.get(i) != Some(&b':') {
        return None;
    }
    let (_, n) = leading_number(&b[i + 1..], 10)?;
    i += 1 + n;
    if b.get(i) != Some(&b':') {
        return None;
    }
    let (pid, n) = leading_number(&b[i + 1..], 10)?;
    i += 1 + n;
    if b[i..].starts_with(b" - ") {
        i += 3;
        i += source_location(&b[i..], b"]")?;
    } else {
        i += b[i..].strip_prefix(b" unique id ").map(|_| 11)?;
        let (_, n) = leading_number(&b[i..], 20)?;
        i += n;
        if b.get(i) != Some(&b']') {
            return None;
        }
        i += 1;
    }
    // Newer releases add the wall-clock time in a bracket of its own.
    if b.get(i) == Some(&b'[') {
        i += memchr::memchr(b']', &b[i..b.len().min(i + 40)])? + 1;
    }
    i += blanks(&b[i..]);
    let (level, n) = level_word(&b[i..])?;
    i += n;
    i += blanks(&b[i..]);
    m.host = Some((off + 1, off + 1 + host));
    m.pid = u32::try_from(pid).ok();
    m.level = level;
    m.producer = Producer::Stdlib;
    Some(i)
}

/// `file.ext:<line>` (optionally `:func`) then `terminator`, as loggers print their call site.
fn source_location(b: &[u8], terminator: &[u8]) -> Option<usize> {
    let limit = b.len().min(128);
    let end = memchr::memmem::find(&b[..limit], terminator)?;
    let loc = &b[..end];
    let colon = memchr::memchr(b':', loc)?;
    let after = &loc[colon + 1..];
    let digits_len = after.iter().take_while(|c| c.is_ascii_digit()).count();
    let ok = colon > 0
        && !loc[..colon].contains(&b' ')
        && digits_len > 0
        && (digits_len == after.len() || after[digits_len] == b':')
        && !after.contains(&b' ');
    ok.then_some(end + terminator.len())
}

/// A logger's bracketed level (DeepSpeed and many applications):
/// `[ERROR] [launch.py:434:sigkill_handler] ` — the call site is part of the header.
pub(super) fn bracketed_level(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let (level, n) = level_word(b.get(1..)?)?;
    if b.get(1 + n) != Some(&b']') {
        return None;
    }
    let mut end = 2 + n;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    if b.get(end) == Some(&b'[') {
        if let Some(k) = source_location(&b[end + 1..], b"]") {
            end += 1 + k;
            if b.get(end) == Some(&b' ') {
                end += 1;
            }
        }
    }
    m.level = level;
    m.producer = Producer::Stdlib;
    Some(end)
}

/// Cray MPICH's header in front of a fatal error (HPE Cray EX: Frontier, Perlmutter, LUMI):
/// `MPICH ERROR [Rank 8281] [job id 1410467.0] [Wed Aug 23 06:05:55 2023] [frontier01982] -
/// Abort(136982671) (rank 8281 in comm 0): `, then MPICH's own `Fatal error in …`. It names
/// the failing rank, its node and the time.
pub(super) fn cray_mpich(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let rest = b.strip_prefix(b"MPICH ERROR [Rank ")?;
    let (rank, n) = leading_number(rest, 10)?;
    let mut at = b.len() - rest.len() + n;
    at += b[at..]
        .strip_prefix(b"] [job id ")
        .map(|r| 10 + memchr::memchr(b']', &r[..r.len().min(40)]).unwrap_or(r.len()))?;
    let stamp = b.get(at..)?.strip_prefix(b"] [")?;
    let ts = ctime(stamp).filter(|&(_, n)| stamp.get(n) == Some(&b']'));
    let (ts, n) = ts?;
    at += 3 + n;
    let host = b.get(at..)?.strip_prefix(b"] [")?;
    let host_len = host.iter().take_while(|c| is_host_byte(**c)).count();
    if host_len == 0 || !host[host_len..].starts_with(b"] - ") {
        return None;
    }
    m.host = Some((off + at + 3, off + at + 3 + host_len));
    at += 3 + host_len + 4;
    // `Abort(code) (rank N in comm C): ` says the same rank again; the message follows it.
    if b[at..].starts_with(b"Abort(") {
        if let Some(k) = memmem::find(&b[at..b.len().min(at + 120)], b"): ") {
            at += k + 3;
        }
    }
    m.grank = u32::try_from(rank).ok();
    (m.ts_ms, m.ts_dated) = (Some(ts), true);
    m.level = Level::Error;
    Some(at)
}

/// Omniverse Kit's header after its wall-clock time (Isaac Sim, Isaac Lab, every Kit app):
/// `[20,730ms] [Error] [omni.physx.tensors.plugin] `, the milliseconds since the app started,
/// the level in title case and the extension that logged.
pub(super) fn omniverse_kit(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let close = memchr::memchr(b']', &b[..b.len().min(24)])?;
    let uptime = b.get(1..close)?.strip_suffix(b"ms")?;
    if uptime.is_empty() || !uptime.iter().all(|c| c.is_ascii_digit() || *c == b',') {
        return None;
    }
    let rest = b[close + 1..].strip_prefix(b" [")?;
    let level_len = memchr::memchr(b']', &rest[..rest.len().min(10)])?;
    let level = match &rest[..level_len] {
        b"Verbose" | b"Info" => Level::Info,
        b"Warning" => Level::Warn,
        b"Error" => Level::Error,
        b"Fatal" => Level::Fatal,
        _ => return None,
    };
    let mut end = close + 1 + 2 + level_len + 1;
    if let Some(source) = b[end..].strip_prefix(b" [") {
        let named = memchr::memchr(b']', &source[..source.len().min(96)])
            .filter(|&n| n > 0 && !source[..n].contains(&b' '));
        if let Some(n) = named {
            end += 2 + n + 1;
        }
    }
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    m.level = level;
    Some(end)
}

/// libfabric `libfabric:<pid>:<time>::<prov>:<subsys>:<func>():<line><<level>> ` in its three
/// historical forms (v1.8-v1.13 without the time, v1.14 with it, v1.15 on with the log prefix
/// field between). The CXI provider's macros start the text with the node's name
/// (`nid001234: ...`): that name is the printer's host, and an empty one leaves `: `.
/// Spaces before the prefix (a line pasted indented) are part of it.
#[inline]
pub(super) fn libfabric(line: &[u8], line_off: usize, m: &mut LineMeta) -> Option<usize> {
    let indent = line
        .iter()
        .take(8)
        .take_while(|&&c| c == b' ' || c == b'\t')
        .count();
    let (b, off) = (&line[indent..], line_off + indent);
    let rest = b.strip_prefix(b"libfabric:")?;
    let pid = leading_number(rest, 10).map(|(pid, _)| pid);
    let lt = memchr::memchr(b'<', &b[..b.len().min(256)])?;
    if pid.is_none() && !(redacted_field(rest) && ends_with_location(&b[..lt])) {
        return None;
    }
    let gt = memchr::memchr(b'>', &b[lt..b.len().min(lt + 10)])? + lt;
    let level = match &b[lt + 1..gt] {
        b"warn" => Level::Warn,
        b"info" | b"debug" | b"trace" => Level::Info,
        _ => return None,
    };
    let mut end = gt + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    if memmem::find(&b[..lt], b":cxi:").is_some() {
        if let Some(n) = cxi_node(&b[end..]) {
            m.host = Some((off + end, off + end + n));
            end += n + 2;
        } else if b[end..].starts_with(b": ") {
            end += 2;
        }
    }
    m.pid = pid.and_then(|p| u32::try_from(p).ok());
    m.level = level;
    m.producer = Producer::Libfabric;
    Some(indent + end)
}

/// A pid a poster replaced before sharing the line (`libfabric:...:efa:mr:`, `<pid>`): one
/// short token without blanks.
fn redacted_field(rest: &[u8]) -> bool {
    let n = rest.iter().take(17).take_while(|&&c| c != b':').count();
    (1..=16).contains(&n) && rest.get(n) == Some(&b':') && !rest[..n].contains(&b' ')
}

/// The prefix ends in libfabric's source location, `<func>():<line>`.
fn ends_with_location(head: &[u8]) -> bool {
    let digits = head.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && head[..head.len() - digits].ends_with(b"():")
}

/// UCX's log header: `[1718000000.112233] [host:pid:tid]   file.c:123  UCX  ERROR ` (seconds
/// since the epoch, the process, the source location, the level). UCX runs inside the NCCL or
/// MPI process, so its lines join that process by host and pid.
pub(super) fn ucx(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let (secs, n) = leading_number(b.get(1..)?, 11)?;
    if n != 10 || b.get(1 + n) != Some(&b'.') {
        return None;
    }
    let frac = b[2 + n..].iter().take_while(|c| c.is_ascii_digit()).count();
    let mut i = 2 + n + frac;
    if frac == 0 || b.get(i) != Some(&b']') {
        return None;
    }
    i += 1 + blanks(&b[i + 1..]);
    let (host, pid, end) = ucx_process(&b[i..])?;
    let host = (off + i + host.0, off + i + host.1);
    i += end;
    i += blanks(&b[i..]);
    let loc = token_len(&b[i..]);
    if loc == 0 || !b[i..i + loc].contains(&b':') {
        return None;
    }
    i += loc;
    i += blanks(&b[i..]);
    if !b[i..].starts_with(b"UCX") {
        return None;
    }
    i += 3;
    i += blanks(&b[i..]);
    let word = b[i..].iter().take_while(|c| c.is_ascii_uppercase()).count();
    let level = match level_word(&b[i..]) {
        Some((level, _)) => level,
        None if word > 0 => Level::Info,
        None => return None,
    };
    i += word;
    i += blanks(&b[i..]);
    let millis = (frac >= 3)
        .then(|| digits(&b[2 + n..], 3))
        .flatten()
        .unwrap_or(0);
    m.ts_ms = i64::try_from(secs)
        .ok()
        .map(|s| s * 1000 + i64::from(millis));
    m.ts_dated = m.ts_ms.is_some();
    m.host = Some(host);
    m.pid = Some(pid);
    m.level = level;
    m.producer = Producer::Ucx;
    Some(i)
}

/// UCX's header of what it prints outside its logger (a crash handler's `Caught signal`, an
/// IB completion error): `[host:pid:thread:tid] ` and, for an error, the source location
/// (`[master:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on …`). The
/// level is left to the message: the same header carries a backtrace's frames.
pub(super) fn ucx_thread(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let close = memchr::memchr(b']', &b[..b.len().min(160)])?;
    let inner = b.get(1..close)?;
    let mut parts = inner.rsplitn(4, |&c| c == b':');
    let (tid, thread, pid, host) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let all_digits = |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit);
    let named = !host.is_empty() && host.iter().all(|&c| is_host_byte(c));
    if !(named && all_digits(tid) && all_digits(thread) && all_digits(pid)) {
        return None;
    }
    let mut i = close + 1;
    if b.get(i) != Some(&b' ') {
        return None;
    }
    i += blanks(&b[i..]);
    let loc = token_len(&b[i..]);
    if is_source_location(&b[i..i + loc]) {
        i += loc;
        i += blanks(&b[i..]);
    }
    m.host = Some((off + 1, off + 1 + host.len()));
    m.pid = std::str::from_utf8(pid).ok()?.parse().ok();
    m.producer = Producer::Ucx;
    Some(i)
}

/// The length of the word at the start of `b` (a call site such as `ib_mlx5_log.c:139`): up
/// to the first blank, at most 128 bytes.
fn token_len(b: &[u8]) -> usize {
    b.iter()
        .take(128)
        .take_while(|c| !c.is_ascii_whitespace())
        .count()
}

/// `ib_mlx5_log.c:139`: a C source file and a line number.
fn is_source_location(w: &[u8]) -> bool {
    let Some(colon) = w.iter().rposition(|&c| c == b':') else {
        return false;
    };
    let (file, line) = (&w[..colon], &w[colon + 1..]);
    let c_file = [&b".c"[..], b".cc", b".cpp", b".h", b".inl"]
        .iter()
        .any(|ext| file.ends_with(ext));
    c_file && !line.is_empty() && line.iter().all(u8::is_ascii_digit)
}

/// `[host:pid:tid]`: the host's range, the pid and the length through the `]`.
fn ucx_process(b: &[u8]) -> Option<((usize, usize), u32, usize)> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &b[..b.len().min(160)])?;
    let inner = &b[1..close];
    let mut parts = inner.rsplitn(3, |&c| c == b':');
    let (tid, pid, host) = (parts.next()?, parts.next()?, parts.next()?);
    // UCX pads the pid to five columns (`[host:7356 :0]`).
    let pid = pid.trim_ascii_end();
    let all_digits = |v: &[u8]| !v.is_empty() && v.iter().all(u8::is_ascii_digit);
    if !all_digits(tid)
        || !all_digits(pid)
        || host.is_empty()
        || !host.iter().all(|&c| is_host_byte(c))
    {
        return None;
    }
    let pid = std::str::from_utf8(pid).ok()?.parse().ok()?;
    Some(((1, 1 + host.len()), pid, close + 1))
}

/// The spaces and tabs `b` opens with.
pub(super) fn blanks(b: &[u8]) -> usize {
    b.iter().take_while(|&&c| c == b' ' || c == b'\t').count()
}

/// The node name the CXI provider's warnings begin with: a host name with a digit in it
/// (`nid001234`, `x1000c0s0b0n0`), then `: `. Words such as `TXC (` or `EQ:` are not names.
fn cxi_node(b: &[u8]) -> Option<usize> {
    let n = b.iter().take(64).position(|&c| !is_host_byte(c))?;
    let name = &b[..n];
    (n > 0 && b[n..].starts_with(b": ") && name.iter().any(u8::is_ascii_digit)).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_level_needs_a_word_boundary() {
        assert_eq!(nccl_level(b"NCCL WARN x"), Some((Level::Warn, 10)));
        assert_eq!(nccl_level(b"NCCL INFO"), Some((Level::Info, 9)));
        assert_eq!(nccl_level(b"NCCL INFOx"), None);
        assert_eq!(nccl_level(b"NCCL error in: x"), None);
    }

    #[test]
    fn redacted_host_names_are_hosts() {
        let line = "<cluster_name>:922:1158 [3] NCCL INFO misc/socket.cc:567 -> 2";
        let m = crate::prefix::peel(line, 2026);
        assert_eq!(m.host(line), Some("<cluster_name>"));
        assert_eq!((m.pid, m.cuda_dev), (Some(922), Some(3)));
        assert_eq!(m.message(line), "misc/socket.cc:567 -> 2");
        assert_eq!(redacted_host(b"<a b>:1:2"), None);
    }

    #[test]
    fn a_blanked_host_name_still_names_the_process() {
        let line = ":5120:5377 [6] misc/socket.cc:50 NCCL WARN socketProgress: Connection reset";
        let m = crate::prefix::peel(line, 2026);
        assert_eq!(
            (m.host(line), m.pid, m.cuda_dev),
            (None, Some(5120), Some(6))
        );
        assert_eq!((m.level, m.producer), (Level::Warn, Producer::Nccl));
        assert_eq!(m.message(line), "socketProgress: Connection reset");
        let line = "::16674:17023 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /g.xml";
        let m = crate::prefix::peel(line, 2026);
        assert_eq!((m.host(line), m.pid), (None, Some(16674)));
        assert_eq!(
            m.message(line),
            "NCCL_GRAPH_FILE set by environment to /g.xml"
        );
        // Without the marker a leading `:1:2 [3]` is not taken for a header.
        let line = ":12:34 [5] INFO something";
        assert_ne!(crate::prefix::peel(line, 2026).producer, Producer::Nccl);
    }

    #[test]
    fn nccl_2_2_headers_without_the_nccl_marker() {
        let line = "trainbox-7:4410:4410 [2] misc/ibvwrap.cu:63 WARN Unable to open libibverbs";
        let m = crate::prefix::peel(line, 2026);
        assert_eq!(m.message(line), "Unable to open libibverbs");
        assert_eq!((m.host(line), m.level), (Some("trainbox-7"), Level::Warn));
        assert_eq!((m.pid, m.cuda_dev), (Some(4410), Some(2)));
        let line = "trainbox-7:4410:4471 [1] INFO NET : Using interface ens3:10.9.8.7<0>";
        let m = crate::prefix::peel(line, 2026);
        assert_eq!(m.message(line), "NET : Using interface ens3:10.9.8.7<0>");
        assert_eq!((m.level, m.producer), (Level::Info, Producer::Nccl));
        // A clock or a header without a device is not an old NCCL line.
        let line = "12:34:56 INFO loading shards";
        assert_ne!(crate::prefix::peel(line, 2026).producer, Producer::Nccl);
        let line = "trainbox-7:4410:4410 WARN something else";
        assert_ne!(crate::prefix::peel(line, 2026).producer, Producer::Nccl);
        let line = "trainbox-7:4410:4410 [0] note: WARN about x";
        assert_ne!(crate::prefix::peel(line, 2026).producer, Producer::Nccl);
    }

    #[test]
    fn bare_nccl_needs_file_and_line() {
        let mut m = LineMeta::default();
        let b = b"include/shm.h:28 NCCL WARN Error: failed to extend";
        let n = nccl_bare(b, &mut m).unwrap();
        assert_eq!(&b[n..], b"Error: failed to extend");
        assert_eq!(m.level, Level::Warn);
        let b = b"misc/socket.cc:58 (socketProgress) NCCL WARN x";
        assert_eq!(&b[nccl_bare(b, &mut m).unwrap()..], b"x");
        assert!(nccl_bare(b"RuntimeError: NCCL WARN x", &mut m).is_none());
        assert!(nccl_bare(b"socket.cc: NCCL WARN x", &mut m).is_none());
    }

    #[test]
    fn bare_pre_2_3_warn_needs_a_source_file() {
        let mut m = LineMeta::default();
        let b = b"transport/tcp.cu:77 WARN Could not bind listening socket";
        let n = nccl_bare_pre_2_3(b, &mut m).unwrap();
        assert_eq!(&b[n..], b"Could not bind listening socket");
        assert_eq!((m.level, m.producer), (Level::Warn, Producer::Nccl));
        for other in [
            &b"settings.py:12 WARN low disk"[..],
            b"net.cc:abc WARN x",
            b"net.cc:12 INFO x",
            b".cc:12 WARN x",
            b"a b.cc:12 WARN x",
            b"Warning: x.h:3 WARN y",
        ] {
            assert!(nccl_bare_pre_2_3(other, &mut LineMeta::default()).is_none());
        }
    }

    #[test]
    fn nccl_1_puts_the_level_before_a_source_file() {
        let mut m = LineMeta::default();
        let b = b"WARN src/reduce.cu:126 Cuda failure 'invalid resource handle'";
        let n = nccl_v1_warn(b, &mut m).unwrap();
        assert_eq!(&b[n..], b"Cuda failure 'invalid resource handle'");
        assert_eq!((m.level, m.producer), (Level::Warn, Producer::Nccl));
        for other in [
            &b"WARN settings.py:12 low disk"[..],
            b"WARN src/reduce.cu: x",
            b"WARN disk almost full",
            b"INFO src/core.cu:10 x",
        ] {
            assert!(nccl_v1_warn(other, &mut LineMeta::default()).is_none());
        }
    }

    #[test]
    fn torch_log_thread_id_is_not_a_pid() {
        let mut m = LineMeta::default();
        let b = b"W0321 02:07:20.285000 140204748584768 torch/distributed/elastic/multiprocessing/api.py:858] Sending process 48099 closing signal SIGTERM";
        let n = torch_log(b, 2025, &mut m).unwrap();
        assert!(b[n..].starts_with(b"Sending process"));
        assert_eq!((m.level, m.pid), (Level::Warn, None));
    }

    #[test]
    fn glog_with_the_year_and_a_padded_thread_id() {
        let mut m = LineMeta::default();
        let b = b"W20250825 11:10:33.595331   331 util_rdma.h:547] NET/IB: read failed in ncclIbRoceGetVersionNum: Invalid argument";
        let n = torch_log(b, 2020, &mut m).unwrap();
        assert!(b[n..].starts_with(b"NET/IB: read failed"));
        assert_eq!(m.level, Level::Warn);
        assert_eq!(m.ts_ms, Some(1_756_120_233_595));
        let b = b"F0825 11:10:33.595355   331 util_rdma.h:592] Check failed: x";
        let n = torch_log(b, 2025, &mut m).unwrap();
        assert!(b[n..].starts_with(b"Check failed"));
        assert_eq!(m.level, Level::Fatal);
    }

    #[test]
    fn logger_headers() {
        let mut m = LineMeta::default();
        let b = b"[ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3'] exits with return code = -9";
        let n = bracketed_level(b, &mut m).unwrap();
        assert!(b[n..].starts_with(b"['/usr/bin/python3']"));
        assert_eq!(m.level, Level::Error);
        assert!(bracketed_level(b"[Rank 0] x", &mut m).is_none());
        let mut m = LineMeta::default();
        let b = b" E 7046 7269] logging.cc:361:     @     0x7f514b634520  (unknown)";
        let n = glog_tail(b, &mut m).unwrap();
        assert!(b[n..].starts_with(b"    @     0x7f"));
        assert_eq!((m.level, m.pid), (Level::Error, Some(7046)));
    }

    #[test]
    fn libfabric_forms_and_cxi_node() {
        // v1.8-v1.13, v1.14, v1.15 on.
        for b in [
            &b"libfabric:4012:efa:mr:efa_mr_reg_impl():1050<warn> Unable to register MR"[..],
            b"libfabric:4012:1701234567:efa:mr:efa_mr_reg_impl():1050<warn> Unable to register MR",
            b"libfabric:4012:1701234567::efa:mr:efa_mr_reg_impl():1050<warn> Unable to register MR",
        ] {
            let mut m = LineMeta::default();
            let n = libfabric(b, 0, &mut m).unwrap();
            assert_eq!(&b[n..], b"Unable to register MR");
            assert_eq!((m.pid, m.level, m.host), (Some(4012), Level::Warn, None));
        }
        // A pid the poster redacted: the source location still marks the prefix.
        let b = b"libfabric:...:efa:mr:efa_mr_reg_impl():893<warn> Unable to register MR";
        let mut m = LineMeta::default();
        let n = libfabric(b, 0, &mut m).unwrap();
        assert_eq!(
            (&b[n..], m.pid, m.level),
            (&b"Unable to register MR"[..], None, Level::Warn)
        );
        let prose = b"libfabric:... is slow <warn> here";
        assert!(libfabric(prose, 0, &mut LineMeta::default()).is_none());
        let b = b"libfabric:77:1701234567::cxi:core:cxip_gen_auth_key():92<warn> nid001234: Invalid VNI";
        let mut m = LineMeta::default();
        let n = libfabric(b, 5, &mut m).unwrap();
        assert_eq!(&b[n..], b"Invalid VNI");
        let (a, e) = m.host.unwrap();
        assert_eq!(&b[a - 5..e - 5], b"nid001234");
        // A CXI text that does not start with a node name keeps its first word.
        let b = b"libfabric:77:1701234567::cxi:ep_ctrl:cxip_txc():92<warn> TXC (0x1:2): RMA IOV invalid";
        let mut m = LineMeta::default();
        let n = libfabric(b, 0, &mut m).unwrap();
        assert!(b[n..].starts_with(b"TXC (") && m.host.is_none());
        // Pasted indented, and a CXI warning whose node name is empty.
        let b = b" libfabric:9:1741146011::cxi:fabric:cxip_nic_get_rgroup_vni():253<warn> : Failed";
        let mut m = LineMeta::default();
        let n = libfabric(b, 0, &mut m).unwrap();
        assert_eq!((&b[n..], m.pid), (&b"Failed"[..], Some(9)));
    }

    #[test]
    fn vllm_logger_header_in_both_forms() {
        let cases: [(&[u8], Level, &[u8]); 3] = [
            (
                b"ERROR 07-03 14:43:50 worker_base.py:148] Error executing method init_device.",
                Level::Error,
                b"Error executing method init_device.",
            ),
            (
                b"WARNING 05-12 09:10:11 [core.py:58] Traceback (most recent call last):",
                Level::Warn,
                b"Traceback (most recent call last):",
            ),
            (
                b"INFO 11-02 23:01:09.412 [pynccl.py:70] vLLM is using nccl==2.21.5",
                Level::Info,
                b"vLLM is using nccl==2.21.5",
            ),
        ];
        for (b, level, rest) in cases {
            let mut m = LineMeta::default();
            let n = level_date_site(b, 2026, &mut m).unwrap();
            assert_eq!((&b[n..], m.level), (rest, level));
            assert!(m.ts_ms.is_some());
        }
        // Through the whole chain, behind Ray's actor label.
        let line = "(RayWorkerWrapper pid=4139, ip=10.1.2.3) ERROR 07-03 14:43:50 \
                    worker_base.py:148] Error executing method init_device.";
        let m = crate::prefix::peel(line, 2026);
        assert_eq!(m.message(line), "Error executing method init_device.");
        assert_eq!(m.level, Level::Error);
        // Words that only look like it: no date, no call site.
        for b in [
            &b"ERROR 07-03 the job failed"[..],
            b"INFO 07-03 14:43:50 loading model",
        ] {
            assert!(level_date_site(b, 2026, &mut LineMeta::default()).is_none());
        }
    }

    #[test]
    fn python_logging_name_and_level() {
        let mut m = LineMeta::default();
        let b = b"- cosmos - ERROR - Process 1 failed with return code 1";
        let n = named_logger_level(b, &mut m).unwrap();
        assert_eq!(&b[n..], b"Process 1 failed with return code 1");
        assert_eq!(m.level, Level::Error);
        assert!(named_logger_level(b"- a b - ERROR - x", &mut m).is_none());
        assert!(named_logger_level(b"- step 3 - loss 2", &mut m).is_none());
    }

    #[test]
    fn libfabric_level() {
        let mut m = LineMeta::default();
        let b = b"libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list";
        let n = libfabric(b, 0, &mut m).unwrap();
        assert_eq!(&b[n..], b"fi_getinfo: provider efa output empty list");
        assert_eq!((m.level, m.pid), (Level::Warn, Some(85)));
        assert!(libfabric(b"libfabric: a note", 0, &mut m).is_none());
    }
}

#[cfg(test)]
mod ucx_tests {
    use crate::prefix::{peel, Level, Producer};

    #[test]
    fn ucx_header_gives_time_host_pid_and_level() {
        let line = "[1718000000.112233] [trainer-3:4411:0]        mm_iface.c:768  UCX  ERROR mm_iface failed to allocate receive FIFO";
        let m = peel(line, 2026);
        assert_eq!(m.producer, Producer::Ucx);
        assert_eq!(m.level, Level::Error);
        assert_eq!(m.host(line), Some("trainer-3"));
        assert_eq!(m.pid, Some(4411));
        assert_eq!(m.ts_ms, Some(1_718_000_000_112));
        assert_eq!(m.message(line), "mm_iface failed to allocate receive FIFO");
    }

    #[test]
    fn ucx_header_with_a_padded_pid() {
        let line = "[1700554343.440877] [node-7:7356 :0]            sock.c:323  UCX  ERROR   connect(fd=48, dest_addr=172.17.0.1:42887) failed: Connection refused";
        let m = peel(line, 2026);
        assert_eq!(m.producer, Producer::Ucx);
        assert_eq!(m.pid, Some(7356));
        assert!(m.message(line).starts_with("connect(fd=48"));
    }

    #[test]
    fn ucx_diagnostic_levels_are_information() {
        let line = "[1718000000.5] [h1:7:2]  ucp_worker.c:1888 UCX  DIAG  ucp_context_0 intra-node cfg#1 rma_am(sysv/memory)";
        let m = peel(line, 2026);
        assert_eq!(m.level, Level::Info);
        assert_eq!(
            m.message(line),
            "ucp_context_0 intra-node cfg#1 rma_am(sysv/memory)"
        );
    }

    #[test]
    fn ucx_thread_header_gives_host_and_pid_and_drops_the_source_location() {
        let line = "[master:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 hw_synd 0/0)";
        let m = peel(line, 2026);
        assert_eq!(m.producer, Producer::Ucx);
        assert_eq!(m.host(line), Some("master"));
        assert_eq!(m.pid, Some(19546));
        assert!(m
            .message(line)
            .starts_with("Transport retry count exceeded on"));
        let line = "[nemo02:15050:0:15050] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)";
        let m = peel(line, 2026);
        assert_eq!((m.host(line), m.pid), (Some("nemo02"), Some(15050)));
        assert!(m.message(line).starts_with("Caught signal 11"));
        let line = "[a:b:1:2] not a process";
        assert_ne!(peel(line, 2026).producer, Producer::Ucx);
    }

    #[test]
    fn dmesg_uptime_is_not_taken_for_ucx_time() {
        let line =
            "[183422.511734] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.";
        assert_eq!(peel(line, 2026).producer, Producer::Kernel);
    }
}
