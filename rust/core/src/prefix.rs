//! Prefix peeling: strips the layers real training logs wrap around a message (ANSI residue,
//! launcher labels, torchrun tee headers, rank prefixes, timestamps, NCCL / c10 / torch-logging
//! / stdlib / syslog producer prefixes) and keeps every field it removes.
//! See shared/reference/log-formats.md for the shapes.

use crate::timefmt::{digits, iso_datetime, leading_number, mmdd_hms, syslog_time};

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
}

/// Everything peeled off one line. Host is a byte range into the (cleaned) line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LineMeta {
    pub msg_start: usize,
    pub host: Option<(usize, usize)>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub cuda_dev: Option<u16>,
    pub grank: Option<u32>,
    pub local_rank: Option<u16>,
    pub ts_ms: Option<i64>,
    pub level: Level,
    pub producer: Producer,
    /// CRI envelope partial flag (`P`): the runtime split this line and the rest follows.
    pub cri_partial: bool,
    pub cri: bool,
}

impl LineMeta {
    pub fn host<'a>(&self, line: &'a str) -> Option<&'a str> {
        self.host.map(|(a, b)| &line[a..b])
    }
}

fn is_host_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-' || c == b'_' || c == b'.'
}

/// Parses `[<digits>]` at `b`, returning the number and length.
fn bracket_number(b: &[u8]) -> Option<(u64, usize)> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let (v, n) = leading_number(&b[1..], 10)?;
    if b.get(1 + n) != Some(&b']') {
        return None;
    }
    Some((v, n + 2))
}

/// ANSI colour residue at the start: `ESC[36m` or the ESC-less `[36m`.
fn ansi(b: &[u8]) -> Option<usize> {
    let start = usize::from(b.first() == Some(&0x1b));
    if b.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = start + 1;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b';') {
        i += 1;
    }
    if i < b.len() && b[i] == b'm' && (i > start + 1 || start == 1) {
        Some(i + 1)
    } else {
        None
    }
}

/// NCCL `host:pid:tid [dev] ` optionally followed by `file:line [(func)] NCCL WARN ` or
/// `NCCL INFO `, `%f file:line NCCL TRACE `, or `NCCL CALL ` (no device).
fn nccl(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let mut i = 0;
    while i < b.len() && is_host_byte(b[i]) {
        i += 1;
    }
    if i == 0 || b.get(i) != Some(&b':') {
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
        dev = Some(d as u16);
        j += n;
        if b.get(j) == Some(&b' ') {
            j += 1;
        }
    }
    // Find the "NCCL " marker within a short window (file:line, func, trace float).
    let window = &b[j..b.len().min(j + 160)];
    let pos = memchr::memmem::find(window, b"NCCL ")?;
    let k = j + pos + 5;
    let rest = &b[k..];
    let (level, skip) = if rest.starts_with(b"WARN") {
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
    let mut end = k + skip;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    m.host = Some(host);
    m.pid = Some(pid as u32);
    m.tid = Some(tid as u32);
    m.cuda_dev = dev;
    m.level = level;
    m.producer = Producer::Nccl;
    Some(end)
}

/// c10 `[E1130 12:00:01.123456789 File.cpp:616] ` or the old `[E File.cpp:475] `.
fn c10(b: &[u8], year: i32, m: &mut LineMeta) -> Option<usize> {
    if b.len() < 6 || b[0] != b'[' {
        return None;
    }
    let level = match b[1] {
        b'F' => Level::Fatal,
        b'E' => Level::Error,
        b'W' => Level::Warn,
        b'I' | b'V' => Level::Info,
        _ => return None,
    };
    let mut i = 2;
    let mut ts = None;
    if b[i].is_ascii_digit() {
        let mut n = 0;
        while i + n < b.len() && b[i + n].is_ascii_digit() {
            n += 1;
        }
        if n != 3 && n != 4 {
            return None;
        }
        ts = mmdd_hms(&b[i..], n, year);
        ts?;
        i += n + 1 + 8;
        if b.get(i) == Some(&b'.') {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
    }
    if b.get(i) != Some(&b' ') {
        return None;
    }
    // " File.cpp:616] "
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
    m.level = level;
    m.ts_ms = ts;
    m.producer = Producer::C10;
    Some(end)
}

/// torch logging `W0529 16:25:00.123000 81200 path/file.py:900] `.
fn torch_log(b: &[u8], year: i32, m: &mut LineMeta) -> Option<usize> {
    if b.len() < 30 {
        return None;
    }
    let level = match b[0] {
        b'C' => Level::Fatal,
        b'E' => Level::Error,
        b'W' => Level::Warn,
        b'I' | b'V' | b'D' => Level::Info,
        _ => return None,
    };
    let base = mmdd_hms(&b[1..], 4, year)?;
    if b[14] != b'.' {
        return None;
    }
    let mut i = 15;
    let frac_start = i;
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    let ms = digits(&b[frac_start..], 3).unwrap_or(0) as i64;
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let (pid, n) = leading_number(&b[i + 1..], 10)?;
    i += 1 + n;
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let close = memchr::memchr(b']', &b[i..])? + i;
    let inner = &b[i + 1..close];
    let colon = memchr::memrchr(b':', inner)?;
    if !inner[colon + 1..].iter().all(u8::is_ascii_digit) || inner.contains(&b' ') {
        return None;
    }
    let mut end = close + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    m.level = level;
    m.ts_ms = Some(base + ms);
    m.pid = Some(pid as u32);
    m.producer = Producer::TorchLog;
    Some(end)
}

/// stdlib default format `LEVEL:logger.name:message`.
fn stdlib(b: &[u8], m: &mut LineMeta) -> Option<usize> {
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
    let mut i = 0;
    while i < rest.len() && (rest[i].is_ascii_alphanumeric() || rest[i] == b'.' || rest[i] == b'_')
    {
        i += 1;
    }
    if i == 0 || rest.get(i) != Some(&b':') {
        return None;
    }
    m.level = level;
    m.producer = Producer::Stdlib;
    Some(n + i + 1)
}

fn level_word(b: &[u8]) -> Option<(Level, usize)> {
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

/// `host kernel: ` / `host prog[pid]: ` after a syslog time.
fn syslog_host(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let mut i = 0;
    while i < b.len() && is_host_byte(b[i]) {
        i += 1;
    }
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
    m.host = Some(host);
    m.producer = if prog == b"kernel" {
        Producer::Kernel
    } else {
        Producer::Syslog
    };
    let mut end = colon + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    Some(end)
}

/// `[rank13]:` (c10/torch global rank, followed by more prefix), `[rank13]: ` (excepthook) or
/// `[default5]:` (torchrun tee, local rank). Returns (consumed, is_excepthook).
fn rank_or_tee(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &b[..b.len().min(48)])?;
    if b.get(close + 1) != Some(&b':') {
        return None;
    }
    let inner = &b[1..close];
    let dstart = inner
        .iter()
        .rposition(|c| !c.is_ascii_digit())
        .map_or(0, |p| p + 1);
    if dstart == inner.len() {
        return None;
    }
    let role = &inner[..dstart];
    if !role
        .iter()
        .all(|c| c.is_ascii_alphanumeric() || *c == b'_' || *c == b'-')
    {
        return None;
    }
    let (num, _) = leading_number(&inner[dstart..], 9)?;
    let after = close + 2;
    if role == b"rank" {
        // A stacked `[rankA]:[rankB]` means the outer one is a tee header named "rank".
        if b[after..].starts_with(b"[rank") && m.local_rank.is_none() {
            m.local_rank = Some(num as u16);
            return Some(after);
        }
        m.grank = Some(num as u32);
        if b.get(after) == Some(&b' ') {
            m.producer = Producer::Excepthook;
            return Some(after + 1);
        }
        return Some(after);
    }
    if role.is_empty() {
        // Custom tee template `[${rank}]:`: a global rank.
        m.grank = Some(num as u32);
    } else {
        m.local_rank = Some(num as u16);
    }
    Some(after)
}

/// Open MPI `[job,rank]<stream>:` (optionally `[host:pid]` after the rank bracket).
fn openmpi(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &b[..b.len().min(96)])?;
    let inner = &b[1..close];
    let comma = memchr::memchr(b',', inner)?;
    let (rank, n) = leading_number(&inner[comma + 1..], 9)?;
    if comma + 1 + n != inner.len() {
        return None;
    }
    let mut i = close + 1;
    if b.get(i) == Some(&b'[') {
        i = memchr::memchr(b']', &b[i..])? + i + 1;
    }
    if b.get(i) != Some(&b'<') {
        return None;
    }
    let gt = memchr::memchr(b'>', &b[i..])? + i;
    let stream = &b[i + 1..gt];
    if stream != b"stdout" && stream != b"stderr" && stream != b"stddiag" {
        return None;
    }
    if b.get(gt + 1) != Some(&b':') {
        return None;
    }
    let mut end = gt + 2;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    if m.grank.is_none() {
        m.grank = Some(rank as u32);
    }
    Some(end)
}

/// Ray `(Actor pid=N, ip=X) `.
fn ray(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b'(') {
        return None;
    }
    let close = memchr::memchr(b')', &b[..b.len().min(128)])?;
    let inner = &b[1..close];
    let p = memchr::memmem::find(inner, b"pid=")?;
    if p > 0 && inner[p - 1] != b' ' {
        return None;
    }
    let (pid, _) = leading_number(&inner[p + 4..], 10)?;
    let mut end = close + 1;
    if let Some(n) = ansi(&b[end..]) {
        end += n;
    }
    if b.get(end) != Some(&b' ') {
        return None;
    }
    m.pid = Some(pid as u32);
    Some(end + 1)
}

/// kubectl `[pod/<pod>/<container>] `.
fn kubectl(b: &[u8]) -> Option<usize> {
    if !b.starts_with(b"[pod/") {
        return None;
    }
    let close = memchr::memchr(b']', b)?;
    if b.get(close + 1) == Some(&b' ') {
        Some(close + 2)
    } else {
        None
    }
}

/// A launcher label (`host: ` from pdsh or ` 5: ` from srun -l) is only peeled when a known
/// inner prefix follows, because `Word: ` is also ordinary message text.
fn launcher_label(b: &[u8], m: &mut LineMeta, off: usize, year: i32) -> Option<usize> {
    let mut i = 0;
    while i < b.len() && b[i] == b' ' {
        i += 1;
    }
    let start = i;
    while i < b.len() && is_host_byte(b[i]) {
        i += 1;
    }
    if i == start || b.get(i) != Some(&b':') || b.get(i + 1) != Some(&b' ') {
        return None;
    }
    let token = &b[start..i];
    let numeric = token.iter().all(u8::is_ascii_digit);
    if !numeric && !token.iter().any(u8::is_ascii_digit) {
        return None;
    }
    let rest = &b[i + 2..];
    let mut probe = LineMeta::default();
    let inner_known = rest.first() == Some(&b'[')
        || nccl(rest, 0, &mut probe).is_some()
        || torch_log(rest, year, &mut probe).is_some();
    if !inner_known {
        return None;
    }
    if !numeric && m.host.is_none() {
        m.host = Some((off + start, off + i));
    }
    Some(i + 2)
}

/// CRI `2026-03-14T09:22:05.412233870Z stdout F `.
fn cri(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    // RFC 3339 with a `T`: rules out asctime-style lines before parsing anything.
    if b.len() < 32 || b[10] != b'T' {
        return None;
    }
    let (ts, n) = iso_datetime(b)?;
    let rest = &b[n..];
    let stream_len = if rest.starts_with(b" stdout ") || rest.starts_with(b" stderr ") {
        8
    } else {
        return None;
    };
    let tag = *rest.get(stream_len)?;
    if tag != b'P' && tag != b'F' {
        return None;
    }
    let mut end = n + stream_len + 1;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    m.cri = true;
    m.cri_partial = tag == b'P';
    if m.ts_ms.is_none() {
        m.ts_ms = Some(ts);
    }
    Some(end)
}

/// Peels every layer it recognises from `line`. `year` fills in dates that print no year.
pub fn peel(line: &str, year: i32) -> LineMeta {
    let b = line.as_bytes();
    let mut m = LineMeta::default();
    let mut pos = 0;
    for _ in 0..12 {
        let rest = &b[pos..];
        if rest.is_empty() {
            break;
        }
        if let Some(n) = ansi(rest) {
            pos += n;
            continue;
        }
        if pos == 0 {
            if let Some(n) = cri(rest, &mut m) {
                pos += n;
                continue;
            }
        }
        if let Some(n) = rank_or_tee(rest, &mut m) {
            pos += n;
            if m.producer == Producer::Excepthook {
                break;
            }
            continue;
        }
        if let Some(n) = openmpi(rest, &mut m) {
            pos += n;
            continue;
        }
        if let Some(n) = kubectl(rest) {
            pos += n;
            continue;
        }
        if let Some(n) = ray(rest, &mut m) {
            pos += n;
            continue;
        }
        // Bracketed wall-clock time: `[2025-05-29 16:25:00] ` (NCCL 2.26+ WARN) and similar.
        if rest.first() == Some(&b'[') {
            if let Some((ts, n)) = iso_datetime(&rest[1..]) {
                if rest.get(1 + n) == Some(&b']') {
                    m.ts_ms = Some(ts);
                    pos += 2 + n;
                    if b.get(pos) == Some(&b' ') {
                        pos += 1;
                    }
                    continue;
                }
            }
            // dmesg `[183422.511734] `: seconds since boot, not a wall clock.
            if let Some((_, n)) = leading_number(&rest[1..], 12).or_else(|| {
                let sp = rest[1..].iter().take_while(|c| **c == b' ').count();
                leading_number(&rest[1 + sp..], 12).map(|(v, n)| (v, n + sp))
            }) {
                if rest.get(1 + n) == Some(&b'.') {
                    let fr = rest[2 + n..]
                        .iter()
                        .take_while(|c| c.is_ascii_digit())
                        .count();
                    if fr > 0 && rest.get(2 + n + fr) == Some(&b']') {
                        pos += 3 + n + fr;
                        if b.get(pos) == Some(&b' ') {
                            pos += 1;
                        }
                        m.producer = Producer::Kernel;
                        continue;
                    }
                }
            }
            if let Some(n) = c10(rest, year, &mut m) {
                pos += n;
                break;
            }
        }
        if let Some(n) = nccl(rest, pos, &mut m) {
            pos += n;
            break;
        }
        if rest[0].is_ascii_uppercase() {
            if let Some(n) = torch_log(rest, year, &mut m) {
                pos += n;
                break;
            }
            if let Some(n) = stdlib(rest, &mut m) {
                pos += n;
                break;
            }
            if let Some((ts, n)) = syslog_time(rest, year) {
                if rest.get(n) == Some(&b' ') {
                    if let Some(h) = syslog_host(&rest[n + 1..], pos + n + 1, &mut m) {
                        m.ts_ms = Some(ts);
                        pos += n + 1 + h;
                        continue;
                    }
                }
            }
        }
        if rest[0].is_ascii_digit() {
            if let Some((ts, n)) = iso_datetime(rest) {
                // asctime-style `2026-11-30 12:00:05,123 INFO ` or Ray's tab form, or an ISO
                // syslog time followed by a host.
                let mut k = n;
                if rest.get(k) == Some(&b' ') || rest.get(k) == Some(&b'\t') {
                    k += 1;
                    m.ts_ms = Some(ts);
                    if let Some((lvl, ln)) = level_word(&rest[k..]) {
                        m.level = lvl;
                        k += ln;
                        while matches!(rest.get(k), Some(b' ') | Some(b':') | Some(b'-')) {
                            k += 1;
                        }
                        pos += k;
                        break;
                    }
                    if let Some(h) = syslog_host(&rest[k..], pos + k, &mut m) {
                        pos += k + h;
                        continue;
                    }
                    pos += k;
                    continue;
                }
            }
        }
        if let Some(n) = launcher_label(rest, &mut m, pos, year) {
            pos += n;
            continue;
        }
        break;
    }
    m.msg_start = pos.min(b.len());
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(line: &str) -> (&str, LineMeta) {
        let m = peel(line, 2026);
        (&line[m.msg_start..], m)
    }

    #[test]
    fn nccl_warn_all_versions() {
        let (t, m) = msg("node12:81234:81301 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<39275> failed : Software caused connection abort");
        assert!(t.starts_with("socketStartConnect: Connect"));
        assert_eq!(m.pid, Some(81234));
        assert_eq!(m.cuda_dev, Some(3));
        assert_eq!(m.level, Level::Warn);
        let line = "[2025-05-29 16:25:00] node12:81234:81301 [3] transport/net_ib.cc:2458 NCCL WARN NET/IB: Got completion";
        let (t, m) = msg(line);
        assert_eq!(t, "NET/IB: Got completion");
        assert_eq!(m.host(line), Some("node12"));
        assert!(m.ts_ms.is_some());
        let (t, _) = msg("[2026-06-11 11:44:19] node12:81234:81301 [3] misc/socket.cc:58 (socketProgress) NCCL WARN socketProgress: x");
        assert_eq!(t, "socketProgress: x");
        let (t, m) = msg("node12:81234:81234 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB");
        assert_eq!(t, "NET/IB : Using [0]mlx5_0:1/IB");
        assert_eq!(m.level, Level::Info);
    }

    #[test]
    fn c10_and_rank_prefixes() {
        let (t, m) = msg("[rank3]:[E710 18:00:32.426182607 ProcessGroupNCCL.cpp:757] [Rank 3] Watchdog caught collective operation timeout");
        assert_eq!(t, "[Rank 3] Watchdog caught collective operation timeout");
        assert_eq!(m.grank, Some(3));
        assert_eq!(m.level, Level::Error);
        assert!(m.ts_ms.is_some());
        let (t, m) = msg("[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught");
        assert_eq!(t, "[Rank 1] Watchdog caught");
        assert_eq!(m.ts_ms, None);
        let (t, m) = msg("[default3]:[rank3]: Traceback (most recent call last):");
        assert_eq!(t, "Traceback (most recent call last):");
        assert_eq!((m.local_rank, m.grank), (Some(3), Some(3)));
        assert_eq!(m.producer, Producer::Excepthook);
        let (t, m) = msg("[default5]:node-07:40213:40213 [5] NCCL INFO Using network IB");
        assert_eq!(t, "Using network IB");
        assert_eq!(m.local_rank, Some(5));
    }

    #[test]
    fn launchers_and_envelopes() {
        let line = " 5: [default5]:[rank13]:[E314 09:22:05.407719231 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 13]  failure detected";
        let (t, m) = msg(line);
        assert!(t.starts_with("[PG ID 0"));
        assert_eq!((m.local_rank, m.grank), (Some(5), Some(13)));
        let line = "node-07: [default5]:[rank13]: Traceback (most recent call last):";
        let (_, m) = msg(line);
        assert_eq!(m.host(line), Some("node-07"));
        let (t, m) = msg("[1,13]<stdout>:node-07:40213:40213 [5] NCCL INFO Using network IB");
        assert_eq!(t, "Using network IB");
        assert_eq!(m.grank, Some(13));
        let (t, m) = msg(
            "\x1b[36m(RayTrainWorker pid=40213, ip=10.20.3.7)\x1b[0m [rank13]: RuntimeError: x",
        );
        assert_eq!(t, "RuntimeError: x");
        assert_eq!(m.pid, Some(40213));
        let (t, m) = msg("2026-03-14T09:22:05.412233870Z stdout P node-07:40213:40213 [5] NCCL INFO Channel 00/02 :");
        assert_eq!(t, "Channel 00/02 :");
        assert!(m.cri_partial);
    }

    #[test]
    fn python_side_and_kernel() {
        let (t, m) = msg("E0314 09:32:05.771000 40190 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 40213)");
        assert!(t.starts_with("failed (exitcode: -9)"));
        assert_eq!(m.pid, Some(40190));
        assert_eq!(m.level, Level::Error);
        let (t, m) =
            msg("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)");
        assert_eq!(t, "failed (exitcode: 1)");
        assert_eq!(m.level, Level::Error);
        let line = "Nov 30 12:00:01 node-007 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, GPU has fallen off the bus.";
        let (t, m) = msg(line);
        assert!(t.starts_with("NVRM: Xid"));
        assert_eq!(m.host(line), Some("node-007"));
        assert_eq!(m.producer, Producer::Kernel);
        let (t, _) = msg("[183422.511734] NVRM: Xid (PCI:0000:9a:00): 79");
        assert!(t.starts_with("NVRM"));
        let (t, m) = msg("2026-11-30 12:00:05,123 INFO step=12 loss=2.3");
        assert_eq!(t, "step=12 loss=2.3");
        assert_eq!(m.level, Level::Info);
    }

    #[test]
    fn message_text_is_not_peeled() {
        for line in [
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "Error: failed to extend /dev/shm/nccl-1 to 9637892 bytes",
            "[Rank 3] Watchdog caught collective operation timeout",
            "  exitcode  : -9 (pid: 40213)",
            "NCCL version 2.21.5+cuda12.4",
        ] {
            let (t, _) = msg(line);
            assert_eq!(t, line);
        }
    }
}
