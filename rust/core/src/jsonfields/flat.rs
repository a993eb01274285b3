//! The record shape nearly every log shipper writes, read without serde: one flat object of
//! strings, integers, `true`/`false`/`null` and skipped values of any syntax-valid number.
//!
//! Why hand-written: for a 200-byte record serde's visitor machinery costs about 3,300 of the
//! 4,000 instructions of the decode (callgrind), while all this needs is a byte walk. The SIMD
//! crates (simd-json, sonic-rs) build or tape the whole document and need a mutable or padded
//! copy of it; for six fields of a small object they do more work, not less. So this scanner
//! accepts only what it can read exactly and gives up (`None`) on anything else: a nested
//! object or array, a wanted path deeper than one key, an escape it cannot decode (a lone
//! surrogate), a float or negative number at a wanted key, or any syntax error. The caller then
//! parses the document with serde_json as before, which decides the value or the error; the
//! proptests in `tests` hold what this returns to what serde_json returns.

use super::{Node, Scalar};
use std::borrow::Cow;

/// Reads `json` when it is a flat object: fills the slots of `root`'s children (leaf keys
/// only) and returns `Some(true)`; `None` when serde_json must decide. On `None`, `out` may
/// hold values of the keys read so far.
pub(super) fn extract<'a>(root: &Node, json: &'a str, out: &mut [Scalar<'a>]) -> Option<bool> {
    let b = json.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    set(out, &root.slots, Scalar::Other);
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        let mut next_child = 0;
        loop {
            i = member(root, json, i, &mut next_child, out)?;
            i = skip_ws(b, i);
            match b.get(i)? {
                b',' => i = skip_ws(b, i + 1),
                b'}' => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_ws(b, i) == b.len()).then_some(true)
}

/// One `"key": value` starting at `i`; returns the index after the value. Shippers write
/// the keys in one order, mostly that of the wanted paths, so the child after the last one
/// found is tried first.
fn member<'a>(
    root: &Node,
    json: &'a str,
    i: usize,
    next_child: &mut usize,
    out: &mut [Scalar<'a>],
) -> Option<usize> {
    let b = json.as_bytes();
    if b.get(i) != Some(&b'"') {
        return None;
    }
    let end = plain_string_end(b, i + 1)?; // an escaped key could spell a wanted one
    let key = &json[i + 1..end];
    let mut i = skip_ws(b, end + 1);
    if b.get(i) != Some(&b':') {
        return None;
    }
    i = skip_ws(b, i + 1);
    let children = &root.children;
    let found = match children.get(*next_child) {
        Some(c) if c.name == key => Some(*next_child),
        _ => children.iter().position(|c| c.name == key),
    };
    if let Some(k) = found {
        *next_child = k + 1;
    }
    match found.map(|k| &children[k]) {
        None => skip_value(b, i),
        Some(node) if node.children.is_empty() => {
            let (value, next) = wanted_value(json, i)?;
            set(out, &node.slots, value);
            Some(next)
        }
        Some(_) => None,
    }
}

fn set<'a>(out: &mut [Scalar<'a>], slots: &[usize], value: Scalar<'a>) {
    if let Some((last, rest)) = slots.split_last() {
        for &s in rest {
            out[s] = value.clone();
        }
        out[*last] = value;
    }
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(i) {
        i += 1;
    }
    i
}

/// The value at `i` as serde_json visits it, and the index after it.
fn wanted_value(json: &str, i: usize) -> Option<(Scalar<'_>, usize)> {
    let b = json.as_bytes();
    match *b.get(i)? {
        b'"' => {
            let (end, escaped) = string_end(b, i + 1)?;
            let raw = &json[i + 1..end];
            let s = if escaped {
                Cow::Owned(unescape(raw)?)
            } else {
                Cow::Borrowed(raw)
            };
            Some((Scalar::Str(s), end + 1))
        }
        b'0'..=b'9' => {
            let end = number_end(b, i)?;
            // Only plain non-negative integers: serde_json's `-0`, floats and overflow to f64
            // are left to it.
            let digits = &json[i..end];
            let n = digits
                .bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| digits.parse::<u64>().ok())??;
            Some((Scalar::U64(n), end))
        }
        _ => Some((Scalar::Other, literal_end(b, i)?)),
    }
}

/// Skips the value at `i` (checked for syntax, as serde_json's `IgnoredAny` does).
fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => Some(string_end(b, i + 1)?.0 + 1),
        b'-' | b'0'..=b'9' => number_end(b, i),
        _ => literal_end(b, i),
    }
}

fn literal_end(b: &[u8], i: usize) -> Option<usize> {
    let rest = &b[i..];
    [&b"true"[..], b"false", b"null"]
        .into_iter()
        .find(|lit| rest.starts_with(lit))
        .map(|lit| i + lit.len())
}

/// The end of the JSON number at `i`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
fn number_end(b: &[u8], mut i: usize) -> Option<usize> {
    let digits = |b: &[u8], i: usize| i + b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i)? {
        b'0' => i += 1,
        b'1'..=b'9' => i = digits(b, i),
        _ => return None,
    }
    if b.get(i) == Some(&b'.') {
        let end = digits(b, i + 1);
        if end == i + 1 {
            return None;
        }
        i = end;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let end = digits(b, i);
        if end == i {
            return None;
        }
        i = end;
    }
    // serde_json reads `01` as `0` then fails on `1`; so does the caller on what follows.
    Some(i)
}

/// The index of the closing quote of a string without escapes whose text starts at `i`.
fn plain_string_end(b: &[u8], i: usize) -> Option<usize> {
    match string_end(b, i)? {
        (end, false) => Some(end),
        (_, true) => None,
    }
}

/// The index of the closing quote of the string whose text starts at `i`, and whether the
/// string holds escapes (checked for syntax, `\uXXXX` as four hex digits, as serde_json skips
/// them).
fn string_end(b: &[u8], mut i: usize) -> Option<(usize, bool)> {
    let mut escaped = false;
    loop {
        let end = special_byte(b, i)?;
        match b[end] {
            b'"' => return Some((end, escaped)),
            b'\\' => {
                escaped = true;
                i = match *b.get(end + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => end + 2,
                    b'u' if b.get(end + 2..end + 6)?.iter().all(u8::is_ascii_hexdigit) => end + 6,
                    _ => return None,
                };
            }
            _ => return None, // a control byte, which JSON allows only escaped
        }
    }
}

/// The index of the first `"`, `\` or control byte from `i` on, eight bytes at a time: in
/// each word, the lowest byte flagged by the zero-byte and less-than tests is exact (a borrow
/// can only flag bytes above a true one).
pub(super) fn special_byte(b: &[u8], mut i: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let zero_in = |x: u64| x.wrapping_sub(ONES) & !x;
    while let Some(word) = b.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().ok()?);
        let flags = zero_in(w ^ (ONES * u64::from(b'"')))
            | zero_in(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w);
        if flags & HIGH != 0 {
            return Some(i + (flags & HIGH).trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    let k = b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)?;
    Some(i + k)
}

/// The text of a string whose escapes [`string_end`] checked; `None` for a lone surrogate.
fn unescape(raw: &str) -> Option<String> {
    let mut s = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(k) = rest.find('\\') {
        s.push_str(&rest[..k]);
        let esc = rest.as_bytes()[k + 1];
        rest = &rest[k + 2..];
        s.push(match esc {
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let (c, after) = unicode_escape(rest)?;
                rest = after;
                c
            }
            other => other as char, // `"`, `\`, `/`
        });
    }
    s.push_str(rest);
    Some(s)
}

/// The character of a `\u` escape (its four hex digits start `rest`), a surrogate pair
/// joined; `None` for a lone surrogate (serde_json rejects it in a string it reads).
fn unicode_escape(rest: &str) -> Option<(char, &str)> {
    let hex = |s: &str| u32::from_str_radix(s.get(..4)?, 16).ok();
    let hi = hex(rest)?;
    let rest = &rest[4..];
    match hi {
        0xD800..=0xDBFF => {
            let lo = hex(rest.strip_prefix("\\u")?)?;
            if !(0xDC00..=0xDFFF).contains(&lo) {
                return None;
            }
            let c = char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))?;
            Some((c, &rest[6..]))
        }
        _ => Some((char::from_u32(hi)?, rest)),
    }
}
