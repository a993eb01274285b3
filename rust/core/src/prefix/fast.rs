//! One forward pass over the header most lines of a training log carry: torchrun's tee label
//! and NCCL's own header, `[default3]:node-07:40213:40213 [3] NCCL INFO ` (per-node files), or
//! the NCCL header alone (per-rank files). The general chain in `mod.rs` tries a dozen peelers
//! on every layer before it reaches these two; here they are recognised directly, with the
//! same fields the general chain would fill.
//!
//! Exactness rests on two rules. The fast path accepts only a strict subset of what the
//! general peelers accept (a tee role of letters and at most 4 digits, a host that starts with
//! a host byte, pid and tid of at most 9 digits, a device of at most 4 digits, and `NCCL ` right
//! after the device), and on such a line none of the peelers the general chain tries first can
//! fire: they need a first byte (`ESC`, `[`, `(`, a quote mark, a space or `|`) these shapes
//! do not start with. Anything else goes to the general chain, resumed after the layers already
//! peeled or run from the start. `fast_tests.rs` checks the two give the same `LineMeta`.

use super::producer::nccl_level;
use super::{is_host_byte, trim_end_blanks, LineMeta, Producer};

/// What the fast path leaves to the general chain.
pub(super) enum Fast {
    /// The whole header was recognised: the line is peeled.
    Done(LineMeta),
    /// `layers` layers were peeled up to `pos` (into `meta`): the general chain goes on from
    /// there, as it would have after peeling them itself.
    Resume {
        meta: LineMeta,
        pos: usize,
        layers: usize,
    },
    /// A shape the fast path does not vouch for: the general chain from the start.
    General,
}

/// At most this many digits in a tee label's index and a device: any such number fits the
/// `u16` they are stored in, so the general chain's range checks pass too.
const MAX_SHORT_DIGITS: usize = 4;
/// At most this many digits in a pid or tid: fits the `u32` they are stored in, and stays
/// under the 10 digits the general chain reads.
const MAX_ID_DIGITS: usize = 9;
/// rank_or_tee looks for the closing bracket within this many bytes.
const TEE_WINDOW: usize = 48;

/// Peels `[role N]:` and `host:pid:tid [dev] NCCL LEVEL ` from the start of `b` in one pass.
#[inline]
pub(super) fn common_header(b: &[u8]) -> Fast {
    // The general chain checks two things before any layer: a CRI envelope (an RFC 3339 time
    // with its `T` at byte 10) and Ray's `[repeated Nx across cluster]` suffix (a final `]`).
    if b.is_empty() || (b.len() >= 32 && b[10] == b'T') || b.last() == Some(&b']') {
        return Fast::General;
    }
    let mut meta = LineMeta {
        msg_end: b.len(),
        ..LineMeta::default()
    };
    let mut pos = 0;
    let mut layers = 0;
    if b[0] == b'[' {
        let Some((local_rank, n)) = tee_label(b) else {
            return Fast::General;
        };
        meta.local_rank = Some(local_rank);
        pos = n;
        layers = 1;
    }
    match nccl_header(&b[pos..], pos, &mut meta) {
        Some(n) => {
            meta.msg_start = pos + n;
            meta.msg_end = trim_end_blanks(b, meta.msg_end).max(meta.msg_start);
            Fast::Done(meta)
        }
        None => Fast::Resume { meta, pos, layers },
    }
}

/// Leading ASCII digits of `b`, at most `max` of them (more: `None`), and their value.
#[inline]
fn short_number(b: &[u8], max: usize) -> Option<(u32, usize)> {
    let mut v: u32 = 0;
    let mut n = 0;
    while let Some(c) = b.get(n).filter(|c| c.is_ascii_digit()) {
        if n == max {
            return None;
        }
        v = v * 10 + u32::from(c - b'0');
        n += 1;
    }
    (n > 0).then_some((v, n))
}

/// torchrun's tee label `[default3]:`: a role of ASCII letters (not `rank`, which the general
/// chain reads as a global rank) and a local index. Returns the index and the bytes consumed.
#[inline]
fn tee_label(b: &[u8]) -> Option<(u16, usize)> {
    let letters = b[1..]
        .iter()
        .take_while(|c| c.is_ascii_alphabetic())
        .count();
    if letters == 0 || &b[1..1 + letters] == b"rank" {
        return None;
    }
    let (index, n) = short_number(&b[1 + letters..], MAX_SHORT_DIGITS)?;
    let close = 1 + letters + n;
    if close >= TEE_WINDOW || b.get(close) != Some(&b']') || b.get(close + 1) != Some(&b':') {
        return None;
    }
    Some((u16::try_from(index).ok()?, close + 2))
}

/// `host:pid:tid [dev] NCCL LEVEL ` at the start of `b` (`off` bytes into the line), with
/// `NCCL ` right after the device; fills `m` only when the whole header is there.
#[inline]
fn nccl_header(b: &[u8], off: usize, m: &mut LineMeta) -> Option<usize> {
    let host = b.iter().take_while(|c| is_host_byte(**c)).count();
    if host == 0 || b.get(host) != Some(&b':') {
        return None;
    }
    let mut j = host + 1;
    let (pid, n) = short_number(&b[j..], MAX_ID_DIGITS)?;
    j += n;
    if b.get(j) != Some(&b':') {
        return None;
    }
    j += 1;
    let (tid, n) = short_number(&b[j..], MAX_ID_DIGITS)?;
    j += n;
    if b.get(j) != Some(&b' ') || b.get(j + 1) != Some(&b'[') {
        return None;
    }
    j += 2;
    let (dev, n) = short_number(&b[j..], MAX_SHORT_DIGITS)?;
    let dev = u16::try_from(dev).ok()?;
    j += n;
    if b.get(j) != Some(&b']') || b.get(j + 1) != Some(&b' ') {
        return None;
    }
    j += 2;
    let (level, n) = nccl_level(&b[j..])?;
    m.host = Some((off, off + host));
    m.pid = Some(pid);
    m.tid = Some(tid);
    m.cuda_dev = Some(dev);
    m.level = level;
    m.producer = Producer::Nccl;
    Some(j + n)
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
