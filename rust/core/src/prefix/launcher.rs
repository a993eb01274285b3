//! Launcher and transport prefixes: what launchers, log shippers, consoles and the people who
//! pasted a log put in front of a producer's line. Each parser is anchored at the start of the
//! slice it gets and returns how many bytes it consumed; fields it finds go into `LineMeta`.

use super::producer::{
    bracket_number, libfabric, nccl, nccl_bare, nccl_bare_pre_2_3, nccl_level, torch_log,
};
use super::{is_exception_line, is_host_byte, quoted_whole, LineMeta};
use crate::timefmt::{iso_datetime, leading_number};

/// `memchr` for the few bytes a prefix spans: a plain scan is cheaper than its setup there.
pub(super) fn position(b: &[u8], byte: u8) -> Option<usize> {
    b.iter().position(|c| *c == byte)
}

/// ANSI colour residue at the start: `ESC[36m` or the ESC-less `[36m`. A reset (`[0m`) ends a
/// coloured launcher prefix, so the one space after it belongs to the prefix too.
#[inline]
pub(super) fn ansi(b: &[u8]) -> Option<usize> {
    let start = usize::from(b.first() == Some(&0x1b));
    if b.get(start) != Some(&b'[') {
        return None;
    }
    let mut i = start + 1;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b';') {
        i += 1;
    }
    if i >= b.len() || b[i] != b'm' || (i == start + 1 && start == 0) {
        return None;
    }
    let code = &b[start + 1..i];
    let mut end = i + 1;
    if (code.is_empty() || code == b"0") && b.get(end) == Some(&b' ') {
        end += 1;
    }
    Some(end)
}

/// `[rank13]:` (c10/torch global rank, followed by more prefix), `[rank13]: ` (excepthook),
/// `[default5]:` (torchrun tee, local rank), `[13]:` (a `${rank}` template: global rank) and
/// `[trainer0|0]:` (a template naming role and local index before the bar). Returns the bytes
/// consumed; an excepthook prefix is marked by `is_excepthook`.
#[inline]
pub(super) fn rank_or_tee(b: &[u8], m: &mut LineMeta, is_excepthook: &mut bool) -> Option<usize> {
    if b.first() != Some(&b'[') {
        return None;
    }
    label_after_bracket(b, 1, m, is_excepthook)
}

/// `rank13]:` at the start of a line whose opening `[` a paste lost (an excerpt that starts
/// one byte into its first line). Only the `rank` label: a bare `13]:` or `default5]:` is too
/// common a shape in other text.
pub(super) fn rank_unbracketed(
    b: &[u8],
    m: &mut LineMeta,
    is_excepthook: &mut bool,
) -> Option<usize> {
    if !b.starts_with(b"rank") || !b.get(4).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    label_after_bracket(b, 0, m, is_excepthook)
}

fn label_after_bracket(
    b: &[u8],
    start: usize,
    m: &mut LineMeta,
    is_excepthook: &mut bool,
) -> Option<usize> {
    let close = memchr::memchr(b']', &b[..b.len().min(48)])?;
    if b.get(close + 1) != Some(&b':') {
        return None;
    }
    let mut inner = &b[start..close];
    if let Some(bar) = position(inner, b'|') {
        if inner[bar + 1..].is_empty() || !inner[bar + 1..].iter().all(u8::is_ascii_digit) {
            return None;
        }
        inner = &inner[..bar];
    }
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
            m.local_rank = u16::try_from(num).ok();
            return Some(after);
        }
        m.grank = u32::try_from(num).ok();
        if b.get(after) == Some(&b' ') {
            *is_excepthook = true;
            return Some(after + 1);
        }
        return Some(after);
    }
    if role.is_empty() {
        m.grank = u32::try_from(num).ok();
    } else {
        m.local_rank = u16::try_from(num).ok();
    }
    Some(after)
}

/// Open MPI `[job,rank]<stream>:` (optionally `[host:pid]` after the rank bracket), and
/// horovodrun's `[rank]<stream>:`.
#[inline]
pub(super) fn openmpi(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &b[..b.len().min(96)])?;
    if !matches!(b.get(close + 1), Some(b'<') | Some(b'[')) {
        return None;
    }
    let inner = &b[1..close];
    let rank_at = position(inner, b',').map_or(0, |comma| comma + 1);
    let (rank, n) = leading_number(&inner[rank_at..], 9)?;
    if rank_at + n != inner.len() {
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
        m.grank = u32::try_from(rank).ok();
    }
    Some(end)
}

/// Ray `(Actor pid=N, ip=X) `: the pid, and the node (`ip=`) as the host when nothing more
/// specific named one.
#[inline]
pub(super) fn ray(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    if b.first() != Some(&b'(') {
        return None;
    }
    let close = memchr::memchr(b')', &b[..b.len().min(192)])?;
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
    if b.get(end) == Some(&b' ') {
        end += 1;
    } else if b[end - 1] != b' ' {
        return None;
    }
    if let Some(ip) = memchr::memmem::find(inner, b", ip=") {
        let start = 1 + ip + 5;
        let len = b[start..close].iter().take_while(|c| **c != b',').count();
        if len > 0 && m.host.is_none() {
            m.host = Some((off + start, off + start + len));
        }
    }
    m.pid = u32::try_from(pid).ok();
    Some(end)
}

/// Ray's de-duplication notice at the end of a line: ` [repeated 3x across cluster]`.
/// Returns where the message ends without it, and the count.
#[inline]
pub(super) fn ray_repeated_suffix(b: &[u8]) -> Option<(usize, u32)> {
    if b.last() != Some(&b']') {
        return None;
    }
    let body = b.strip_suffix(b"x across cluster]")?;
    let open = memchr::memmem::rfind(body, b" [repeated ")?;
    let count = &body[open + 11..];
    if count.is_empty() || !count.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let (n, _) = leading_number(count, 9)?;
    Some((open, u32::try_from(n).ok()?))
}

/// kubectl `[pod/<pod>/<container>] `.
#[inline]
pub(super) fn kubectl(b: &[u8]) -> Option<usize> {
    if !b.starts_with(b"[pod/") {
        return None;
    }
    let close = memchr::memchr(b']', b)?;
    (b.get(close + 1) == Some(&b' ')).then_some(close + 2)
}

fn is_ipv4(token: &[u8]) -> bool {
    let parts = token.split(|c| *c == b'.');
    let mut count = 0;
    for p in parts {
        count += 1;
        if p.is_empty() || p.len() > 3 || !p.iter().all(u8::is_ascii_digit) {
            return false;
        }
    }
    count == 4
}

/// A launcher label: pdsh `host: `, srun -l ` 5: ` (or `P1 13: ` in a heterogeneous job).
/// `Word: ` is also ordinary message text, so a name is only peeled when it holds a digit and
/// a known inner prefix, the start of a Python error or PyTorch's `Last error:` follows (srun
/// and pdsh label every line a process prints, its tracebacks included), or when it is an
/// IPv4 address (pdsh run against addresses). A task number is always peeled: a line that
/// opens with a number, a colon and a space is a label far more often than message text.
#[inline]
pub(super) fn launcher_label(b: &[u8], m: &mut LineMeta, off: usize, year: i32) -> Option<usize> {
    let mut start = b.iter().take_while(|c| **c == b' ').count();
    start += het_component(&b[start..]);
    let i = start + b[start..].iter().take_while(|c| is_host_byte(**c)).count();
    if i == start || b.get(i) != Some(&b':') || b.get(i + 1) != Some(&b' ') {
        return None;
    }
    let token = &b[start..i];
    let numeric = token.iter().all(u8::is_ascii_digit);
    if numeric {
        let stall_entry = horovod_stall_entry(&b[i + 2..]);
        return (token.len() <= MAX_TASK_DIGITS && !stall_entry).then_some(i + 2);
    }
    // `accelerate test` (and other wrappers that run the job as a child) echo its streams as
    // `stdout: ` / `stderr: `: a stream's name, never a host, whatever follows.
    if start == 0 && matches!(token, b"stdout" | b"stderr") {
        return Some(i + 2);
    }
    // The Ascend runtime's error code (`EI0006: [PID: 41] …`) opens its message.
    if is_cann_code(token) {
        return None;
    }
    let rest = &b[i + 2..];
    let mut probe = LineMeta::default();
    // A whole NCCL header behind it makes even a host name without digits a label.
    let inner_nccl = nccl(rest, 0, &mut probe).is_some();
    // nccl-tests names the host before its own failure lines (`node-a: Test NCCL failure …`).
    let nccl_tests =
        rest.starts_with(b"Test NCCL failure ") || rest.starts_with(b"Test CUDA failure ");
    if !inner_nccl && !nccl_tests && !token.iter().any(u8::is_ascii_digit) {
        return None;
    }
    let inner_known = inner_nccl
        || nccl_tests
        || is_ipv4(token)
        || rest.first() == Some(&b'[')
        || torch_log(rest, year, &mut probe).is_some()
        || libfabric(rest, 0, &mut probe).is_some()
        || cloudwatch(rest, &mut probe).is_some()
        || nccl_bare(rest, &mut probe).is_some()
        || nccl_bare_pre_2_3(rest, &mut probe).is_some()
        || nccl_level(rest).is_some()
        || ray(rest, 0, &mut probe).is_some()
        || quoted_whole(rest).is_some()
        || opens_python_error(rest)
        || rest.starts_with(b"Last error:")
        || elastic_summary_row(rest);
    if !inner_known {
        return None;
    }
    if m.host.is_none() {
        m.host = Some((off + start, off + i));
    }
    Some(i + 2)
}

/// `E<module letter><4 digits>`, the code the Ascend runtime (CANN) opens an error line with.
fn is_cann_code(token: &[u8]) -> bool {
    token.len() == 6
        && token[0] == b'E'
        && token[1].is_ascii_uppercase()
        && token[2..].iter().all(u8::is_ascii_digit)
}

/// The rest of a Horovod stall report's `RANK: [tensor, …]` line (the rank is the message's
/// subject, not a task label): a bracketed list of Horovod op tensors.
fn horovod_stall_entry(rest: &[u8]) -> bool {
    rest.first() == Some(&b'[') && rest.ends_with(b"]") && rest.windows(7).any(|w| w == b"Horovod")
}

/// A log viewer's stream or container column in front of a whole NCCL header, a word and one
/// space with no colon: `trainer node-3:411:502 [0] NCCL WARN …`. A word is ordinary message
/// text, so it is peeled only when the complete NCCL header (with its `NCCL ` marker) follows;
/// the host stays the header's own.
#[inline]
pub(super) fn word_label(b: &[u8]) -> Option<usize> {
    let n = leading_word(b);
    if n == 0 || b.get(n) != Some(&b' ') {
        return None;
    }
    nccl(&b[n + 1..], 0, &mut LineMeta::default())?;
    Some(n + 1)
}

/// pytest's marker on the lines of a failure it reports (`E   ValueError: ...`, with
/// deeper indentation for the lines of a long message): the test runner's, not the
/// message's. Its length, the `E` and three blanks.
#[inline]
pub(super) fn pytest_failure_marker(b: &[u8]) -> Option<usize> {
    const MARKER: &[u8] = b"E   ";
    (b.starts_with(MARKER) && b.len() > MARKER.len()).then_some(MARKER.len())
}

/// A runner's name for the process and the stream it captured: `opt-1_3b.0 [stderr] `
/// (milabench) or a bare `[stdout] `. A bracketed stream name is not message text, so the
/// label before it is peeled whatever follows; it names a process, not a host.
#[inline]
pub(super) fn stream_label(b: &[u8]) -> Option<usize> {
    let n = leading_word(b);
    let at = if n > 0 && b.get(n) == Some(&b' ') {
        n + 1
    } else {
        0
    };
    let rest = &b[at..];
    let stream = [b"[stdout]".as_slice(), b"[stderr]"]
        .into_iter()
        .find(|tag| rest.starts_with(tag))?;
    match rest.get(stream.len()) {
        None => Some(at + stream.len()),
        Some(b' ') => Some(at + stream.len() + 1),
        Some(_) => None,
    }
}

/// TorchX's label on every line a replica prints (NeMo-Run and TorchRec's launchers use it):
/// `<role>/<replica> `, as in `trainer/0 [1]:…` or `pynemo/0 [<UCX header>] …`. The replica
/// is a node's index within its role, not a rank; the line's own prefixes say which process.
#[inline]
pub(super) fn torchx_role(b: &[u8]) -> Option<usize> {
    if !b.first()?.is_ascii_alphabetic() {
        return None;
    }
    let role = b
        .iter()
        .take(MAX_WORD_LABEL)
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
        .count();
    if b.get(role) != Some(&b'/') {
        return None;
    }
    let digits = b[role + 1..]
        .iter()
        .take(MAX_TASK_DIGITS + 1)
        .take_while(|c| c.is_ascii_digit())
        .count();
    let end = role + 1 + digits;
    (digits > 0 && digits <= MAX_TASK_DIGITS && b.get(end) == Some(&b' ')).then_some(end + 1)
}

/// The length of the label-like word at the start of `b` (host-name bytes, at most
/// `MAX_WORD_LABEL`).
fn leading_word(b: &[u8]) -> usize {
    b.iter()
        .take(MAX_WORD_LABEL)
        .take_while(|c| is_host_byte(**c))
        .count()
}

/// A column label longer than this is not a label.
const MAX_WORD_LABEL: usize = 48;

/// Task ids of srun labels have at most this many digits.
const MAX_TASK_DIGITS: usize = 6;

/// `P1 ` before the task id of a heterogeneous job step's label: its length, or 0.
fn het_component(b: &[u8]) -> usize {
    if b.first() != Some(&b'P') {
        return 0;
    }
    let digits = b[1..].iter().take_while(|c| c.is_ascii_digit()).count();
    let spaces = b[1 + digits..].iter().take_while(|c| **c == b' ').count();
    if digits == 0 || spaces == 0 {
        return 0;
    }
    1 + digits + spaces
}

/// A row of torch elastic's failure summary (`ChildFailedError`): `  exitcode  : -9 (pid: N)`.
fn elastic_summary_row(rest: &[u8]) -> bool {
    const KEYS: [&[u8]; 6] = [
        b"time",
        b"host",
        b"rank",
        b"exitcode",
        b"error_file",
        b"traceback",
    ];
    let Some(row) = rest.strip_prefix(b"  ") else {
        return false;
    };
    KEYS.iter().any(|k| {
        row.strip_prefix(*k).is_some_and(|after| {
            let pad = after.iter().take_while(|c| **c == b' ').count();
            after.get(pad) == Some(&b':')
        })
    })
}

/// What Python prints for an uncaught exception: the traceback header, its frames, and the
/// closing `SomeError: text` line.
fn opens_python_error(rest: &[u8]) -> bool {
    rest.starts_with(b"Traceback (most recent call last):")
        || rest.starts_with(b"  File \"")
        || opens_cpp_trace(rest)
        || std::str::from_utf8(rest).is_ok_and(|s| is_exception_line(s) && s.contains(": "))
}

/// The lines of a c10 exception's C++ trace: `Exception raised from f at file:N (most recent
/// call first):` and its `frame #N: ` lines.
fn opens_cpp_trace(rest: &[u8]) -> bool {
    let frame = rest
        .strip_prefix(b"frame #")
        .is_some_and(|r| r.first().is_some_and(u8::is_ascii_digit));
    frame || (rest.starts_with(b"Exception raised from ") && rest.ends_with(b"):"))
}

/// grep's file-name column when several files were searched: `LOG1.3.txt:` (and the line
/// number `LOG1.3.txt:120:` with -n). Only log-like extensions, so `file.py:12:` in a Python
/// warning stays message text.
#[inline]
pub(super) fn grep_file(b: &[u8]) -> Option<usize> {
    let name_len = b[..b.len().min(128)]
        .iter()
        .position(|c| !is_host_byte(*c) && *c != b'/')?;
    if b[name_len] != b':' {
        return None;
    }
    let name = &b[..name_len];
    let dot = name.iter().rposition(|c| *c == b'.')?;
    if dot == 0 || !matches!(&name[dot + 1..], b"txt" | b"log" | b"out" | b"err") {
        return None;
    }
    let mut end = name_len + 1;
    if let Some((_, n)) = leading_number(&b[end..], 9) {
        if b.get(end + n) == Some(&b':') {
            end += n + 1;
        }
    }
    Some(end)
}

/// A bare `[N]` in front of the line. Glued to an NCCL header (`[15]worker-23:83:2526 [0] …`)
/// it is the launcher's rank tag (Horovod / PRRTE `--output rank`). Followed by a space it is
/// as often a log viewer's or poster's line number (`[80846] W0321 …`) as an MPICH rank, so it
/// is peeled without claiming a rank.
#[inline]
pub(super) fn bracket_tag(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let (n, len) = bracket_number(b)?;
    match b.get(len) {
        Some(b' ') => Some(len + 1),
        Some(c) if is_host_byte(*c) => {
            nccl(&b[len..], 0, &mut LineMeta::default())?;
            if m.grank.is_none() {
                m.grank = u32::try_from(n).ok();
            }
            Some(len)
        }
        _ => None,
    }
}

/// An application's own tag in front of its log header: `[cosmos] 2026-05-14 05:28:06,261 …`.
/// A bracketed word is also message text (`[c10d] …`), so it is peeled only when a date follows.
#[inline]
pub(super) fn app_tag(b: &[u8]) -> Option<usize> {
    let close = memchr::memchr(b']', &b[..b.len().min(40)])?;
    let word = &b[1..close];
    if word.is_empty()
        || !word
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-'))
    {
        return None;
    }
    if b.get(close + 1) != Some(&b' ') {
        return None;
    }
    iso_datetime(&b[close + 2..])?;
    Some(close + 2)
}

/// Metaflow's task label after its time: `[177/train/578 (pid 28936)] ` (run, step, task and
/// the task's process).
#[inline]
pub(super) fn metaflow_task(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    let close = memchr::memchr(b']', &b[..b.len().min(128)])?;
    let inner = std::str::from_utf8(&b[1..close]).ok()?;
    let (path, pid) = inner.strip_suffix(')')?.split_once(" (pid ")?;
    let word = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_');
    // Three words: counted as they are read, with no list made for each bracketed line.
    let words = path.split('/').try_fold(0, |n, p| word(p).then_some(n + 1));
    if words != Some(3) {
        return None;
    }
    m.pid = Some(pid.parse().ok()?);
    Some(close + 1 + usize::from(b.get(close + 1) == Some(&b' ')))
}

/// A request or attempt id in brackets before the message: `[09c561ee-a44c-4795-967c-7183a83b3160] `.
#[inline]
pub(super) fn uuid_tag(b: &[u8]) -> Option<usize> {
    let id = b.get(1..37)?;
    let hex_at = |i: usize| id[i].is_ascii_hexdigit();
    let dashes = [8, 13, 18, 23];
    let is_uuid = (0..36).all(|i| {
        if dashes.contains(&i) {
            id[i] == b'-'
        } else {
            hex_at(i)
        }
    });
    (is_uuid && b.get(37) == Some(&b']')).then(|| 38 + usize::from(b.get(38) == Some(&b' ')))
}

/// CRI `2026-03-14T09:22:05.412233870Z stdout F `.
#[inline]
pub(super) fn cri(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    // RFC 3339 with a `T`: rules out asctime-style lines before parsing anything.
    if b.len() < 32 || b[10] != b'T' {
        return None;
    }
    let (ts, n) = iso_datetime(b)?;
    let rest = &b[n..];
    if !rest.starts_with(b" stdout ") && !rest.starts_with(b" stderr ") {
        return None;
    }
    let tag = *rest.get(8)?;
    if tag != b'P' && tag != b'F' {
        return None;
    }
    let mut end = n + 9;
    if b.get(end) == Some(&b' ') {
        end += 1;
    }
    m.cri = true;
    m.cri_partial = tag == b'P';
    if m.ts_ms.is_none() {
        (m.ts_ms, m.ts_dated) = (Some(ts), true);
    }
    Some(end)
}

/// A row copied from the CloudWatch console: `  | <RFC 3339 time>` then ` | ` or the message
/// glued straight to the time.
#[inline]
pub(super) fn cloudwatch(b: &[u8], m: &mut LineMeta) -> Option<usize> {
    if !matches!(b.first(), Some(b' ' | b'|')) {
        return None;
    }
    let sp = b.iter().take_while(|c| **c == b' ').count();
    if !b[sp..].starts_with(b"| ") {
        return None;
    }
    let start = sp + 2;
    let (ts, n) = iso_datetime(&b[start..])?;
    let mut end = start + n;
    if b[end..].starts_with(b" | ") {
        end += 3;
    } else if b.get(end) == Some(&b' ') {
        end += 1;
    }
    (m.ts_ms, m.ts_dated) = (Some(ts), true);
    Some(end)
}

/// CloudWatch repeats the message in a second column: `X | X`. Returns where the first copy
/// ends when `b` is exactly that.
pub(super) fn repeated_column(b: &[u8]) -> Option<usize> {
    let half = b.len().checked_sub(3)? / 2;
    if half == 0 || half * 2 + 3 != b.len() {
        return None;
    }
    (&b[half..half + 3] == b" | " && b[..half] == b[half + 3..]).then_some(half)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytests_failure_marker_is_peeled_alone() {
        let marker = pytest_failure_marker;
        assert_eq!(
            marker(b"E   ValueError: We detected accelerator mps"),
            Some(4)
        );
        assert_eq!(marker(b"E       and more of the message"), Some(4));
        assert_eq!(marker(b"E   "), None);
        assert_eq!(marker(b"E0421 10:00:00.000 x"), None);
        assert_eq!(marker(b"E  two blanks"), None);
    }

    #[test]
    fn ansi_reset_takes_its_space() {
        assert_eq!(ansi(b"[0m x"), Some(4));
        assert_eq!(ansi(b"\x1b[36m(Ray"), Some(5));
        assert_eq!(ansi(b"[36m x"), Some(4));
        assert_eq!(ansi(b"[m"), None);
        assert_eq!(ansi(b"[rank3]:"), None);
    }

    #[test]
    fn tee_template_with_bar() {
        let mut m = LineMeta::default();
        let mut hook = false;
        assert_eq!(rank_or_tee(b"[trainer0|0]:x", &mut m, &mut hook), Some(13));
        assert_eq!((m.local_rank, m.grank), (Some(0), None));
        assert_eq!(rank_or_tee(b"[a|b]:x", &mut m, &mut hook), None);
    }

    #[test]
    fn ray_suffix_and_columns() {
        let b = b"[Rank 0] To avoid data inconsistency [repeated 3x across cluster]";
        let (end, n) = ray_repeated_suffix(b).unwrap();
        assert_eq!(
            (&b[..end], n),
            (&b"[Rank 0] To avoid data inconsistency"[..], 3)
        );
        assert!(ray_repeated_suffix(b"x [repeated many times across cluster]").is_none());
        assert_eq!(repeated_column(b"ab c | ab c"), Some(4));
        assert_eq!(repeated_column(b"ab c | ab d"), None);
        assert_eq!(repeated_column(b" | "), None);
    }

    #[test]
    fn grep_names_need_a_log_extension() {
        assert_eq!(grep_file(b"LOG1.3.txt:[rank1]:x"), Some(11));
        assert_eq!(grep_file(b"logs/w-3.log:120:node:1:2"), Some(17));
        assert_eq!(grep_file(b"train.py:12: UserWarning: x"), None);
        assert_eq!(grep_file(b"RuntimeError: x"), None);
    }

    #[test]
    fn bracket_tags() {
        let mut m = LineMeta::default();
        assert_eq!(
            bracket_tag(b"[15]worker-23:83:2526 [0] NCCL INFO x", &mut m),
            Some(4)
        );
        assert_eq!(m.grank, Some(15));
        let mut m = LineMeta::default();
        assert_eq!(bracket_tag(b"[80846] W0321 x", &mut m), Some(8));
        assert_eq!(m.grank, None);
        assert_eq!(bracket_tag(b"[3]text", &mut m), None);
    }

    #[test]
    fn ipv4_labels() {
        assert!(is_ipv4(b"10.10.23.10"));
        assert!(!is_ipv4(b"10.10.23"));
        assert!(!is_ipv4(b"a.b.c.d"));
        let mut m = LineMeta::default();
        assert_eq!(
            launcher_label(b"10.10.23.10: hello", &mut m, 0, 2026),
            Some(13)
        );
        assert_eq!(m.host, Some((0, 11)));
        assert_eq!(launcher_label(b"Error: x", &mut m, 0, 2026), None);
    }
}
