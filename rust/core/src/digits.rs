//! Digit-blind patterns, so that scan results can be shared between messages that differ only
//! in their digits.
//!
//! Log lines of one kind differ mostly in numbers (ranks, channels, addresses, sizes). A
//! pattern that treats every ASCII digit alike (`\d`, `[0-9a-f]`, `.`, `\S`) matches a message
//! exactly when it matches the same message with every digit replaced by `0` (but one right
//! before an `x`, so that `0x` prefixes stay as written: see [`mask_digits`]), so one scan
//! answers for every message of that shape. A pattern that tells digits apart (`error 802`,
//! `exitcode: -9`, `P2P`, `[1-9]`) is *widened*: each literal digit becomes `\d` and each
//! class holding some digits also takes the others. The widened pattern matches a superset
//! and is digit-blind; a hit of it is confirmed with the original pattern.
//!
//! The widening is textual (Hyperscan compiles the result) and then checked on the parsed
//! form: a pattern whose widened form still tells digits apart, or that the parser here does
//! not understand, is reported as an error, and the caller scans without sharing.

use regex_syntax::hir::{Class, Hir, HirKind};
use regex_syntax::ParserBuilder;

/// What a catalog pattern is compiled as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blind {
    /// Already treats every digit alike: compiled as written.
    AsIs,
    /// Tells digits apart: compiled as this widened text; hits need confirming.
    Widened(String),
}

/// The digit-blind form of `pattern` (Hyperscan syntax), or why there is none.
///
/// The widening reads the pattern as Hyperscan does; the parsed check after it guards against
/// a form read differently here. Where the two could disagree (a pattern the parser reads as
/// digit-blind although the widening changed it), the pattern counts as telling digits apart.
pub fn blind(pattern: &str, caseless: bool) -> Result<Blind, String> {
    if spells_no_digit(pattern) {
        return Ok(Blind::AsIs);
    }
    let wide = widen(pattern)?;
    if !is_digit_blind(&wide, caseless)? {
        return Err(format!("widened form {wide:?} still tells digits apart"));
    }
    Ok(if wide == pattern {
        Blind::AsIs
    } else {
        Blind::Widened(wide)
    })
}

/// Whether a field regex (Rust syntax, compiled as [`crate::fieldre`] does: ASCII classes
/// where the pattern allows, Unicode otherwise) finds the same spans in any two messages that
/// differ only in their ASCII digits.
pub fn field_regex_is_digit_blind(pattern: &str) -> bool {
    if spells_no_digit(pattern) {
        return true;
    }
    let parse = |unicode: bool| {
        ParserBuilder::new()
            .unicode(unicode)
            .build()
            .parse(pattern)
            .ok()
    };
    parse(false)
        .or_else(|| parse(true))
        .is_some_and(|hir| hir_is_digit_blind(&hir))
}

/// Whether `s` is a whole number written in ASCII digits only (no sign, not empty).
pub fn is_whole_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Replaces the ASCII digits of `msg` with `0` into `out` (the key digit-blind results
/// share), except a digit right before `x` or `X`: so `0x` stays apart from `1x`, and the many
/// patterns that spell a hex number `0x[0-9a-f]+` count as digit-blind.
pub fn mask_digits(msg: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let Some((&last, head)) = msg.split_last() else {
        return;
    };
    out.resize(msg.len(), 0);
    // Branch-free over equal-length slices (each byte and the one after it), so it vectorises.
    for ((o, &b), &next) in out.iter_mut().zip(head).zip(&msg[1..]) {
        let digit = b.wrapping_sub(b'0') < 10;
        let before_x = next | 0x20 == b'x';
        *o = if digit & !before_x { b'0' } else { b };
    }
    out[head.len()] = if last.is_ascii_digit() { b'0' } else { last };
}

/// A pattern with no digit in its text and no escape that could stand for one (`\x`, `\u`,
/// `\U`, `\o`) is digit-blind without parsing it (most of a catalog; parsing all of them
/// would cost every start-up about 20 ms): a literal digit must be written, and a class
/// range whose ends are not digits holds all ten digits or none.
fn spells_no_digit(pattern: &str) -> bool {
    let b = pattern.as_bytes();
    !b.iter().any(u8::is_ascii_digit)
        && !b
            .windows(2)
            .any(|w| w[0] == b'\\' && matches!(w[1], b'x' | b'u' | b'U' | b'o'))
}

fn parse(pattern: &str, caseless: bool) -> Result<Hir, String> {
    ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .case_insensitive(caseless)
        .build()
        .parse(pattern)
        .map_err(|e| format!("cannot parse {pattern:?}: {e}"))
}

fn is_digit_blind(pattern: &str, caseless: bool) -> Result<bool, String> {
    Ok(hir_is_digit_blind(&parse(pattern, caseless)?))
}

fn hir_is_digit_blind(hir: &Hir) -> bool {
    match hir.kind() {
        HirKind::Literal(lit) => literal_is_digit_blind(&lit.0),
        HirKind::Class(class) => matches!(digits_in(class), 0 | 10),
        HirKind::Repetition(rep) => hir_is_digit_blind(&rep.sub),
        HirKind::Capture(cap) => hir_is_digit_blind(&cap.sub),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs.iter().all(hir_is_digit_blind),
        HirKind::Empty | HirKind::Look(_) => true,
    }
}

/// No digit in `lit` but one right before an `x` or `X` of the literal, which the mask keeps
/// ([`mask_digits`]): messages of one key hold the same digit there.
fn literal_is_digit_blind(lit: &[u8]) -> bool {
    lit.iter()
        .enumerate()
        .all(|(i, b)| !b.is_ascii_digit() || matches!(lit.get(i + 1), Some(b'x' | b'X')))
}

/// How many of the ten ASCII digits `class` holds.
fn digits_in(class: &Class) -> u32 {
    let overlap = |lo: u32, hi: u32| hi.min(0x39).saturating_sub(lo.max(0x30) - 1).min(10);
    match class {
        Class::Bytes(c) => c
            .ranges()
            .iter()
            .filter(|r| r.end() >= b'0' && r.start() <= b'9')
            .map(|r| overlap(r.start() as u32, r.end() as u32))
            .sum(),
        Class::Unicode(c) => c
            .ranges()
            .iter()
            .filter(|r| r.end() >= '0' && r.start() <= '9')
            .map(|r| overlap(r.start() as u32, r.end() as u32))
            .sum(),
    }
}

/// `pattern` with each literal digit as `\d` and each class that holds some digits as
/// `(?:class|\d)`; quantifier counts, group names and other escapes are left alone.
fn widen(pattern: &str) -> Result<String, String> {
    let b = pattern.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len() + 16);
    let mut i = 0;
    while i < b.len() {
        let step = match b[i] {
            b'\\' => escape(b, i, &mut out)?,
            b'[' => class(pattern, i, &mut out)?,
            b'{' => copy(b, i, quantifier_len(&b[i..]).unwrap_or(1), &mut out),
            b'(' if b.get(i + 1) == Some(&b'?') => copy(b, i, group_header_len(&b[i..])?, &mut out),
            b'(' if b.get(i + 1) == Some(&b'*') => return Err("verbs are not supported".into()),
            d if d.is_ascii_digit() && !matches!(b.get(i + 1), Some(b'x' | b'X')) => {
                out.extend_from_slice(br"\d");
                1
            }
            _ => copy(b, i, 1, &mut out),
        };
        i += step;
    }
    String::from_utf8(out).map_err(|_| "widening broke UTF-8".into())
}

fn copy(b: &[u8], i: usize, n: usize, out: &mut Vec<u8>) -> usize {
    let n = n.min(b.len() - i);
    out.extend_from_slice(&b[i..i + n]);
    n
}

/// An escape at `b[i]`; returns the bytes it spans.
fn escape(b: &[u8], i: usize, out: &mut Vec<u8>) -> Result<usize, String> {
    match b.get(i + 1) {
        None => Err("pattern ends with a backslash".into()),
        Some(c) if c.is_ascii_digit() => {
            Err("octal escapes and back references are not supported".into())
        }
        Some(b'Q' | b'E') => Err(r"\Q...\E quoting is not supported".into()),
        Some(b'x') => {
            let (value, len) = hex_escape(&b[i..]).ok_or("malformed \\x escape")?;
            if value.is_ascii_digit() {
                out.extend_from_slice(br"\d");
            } else {
                out.extend_from_slice(&b[i..i + len]);
            }
            Ok(len)
        }
        Some(b'c') => Ok(copy(b, i, 3, out)),
        Some(_) => Ok(copy(b, i, 2, out)),
    }
}

/// `\xhh` or `\x{h..}` at the start of `b`: the value (if a byte) and the length.
fn hex_escape(b: &[u8]) -> Option<(u8, usize)> {
    let rest = &b[2..];
    let (digits, len) = if rest.first() == Some(&b'{') {
        let close = rest.iter().position(|&c| c == b'}')?;
        (&rest[1..close], close + 3)
    } else {
        let n = rest
            .iter()
            .take(2)
            .take_while(|c| c.is_ascii_hexdigit())
            .count();
        (&rest[..n], n + 2)
    };
    let text = std::str::from_utf8(digits).ok()?;
    let value = u32::from_str_radix(text, 16).ok()?;
    Some((u8::try_from(value).unwrap_or(0xff), len))
}

/// A bracket class at `i`: copied, or wrapped as `(?:class|\d)` when it holds some digits.
fn class(pattern: &str, i: usize, out: &mut Vec<u8>) -> Result<usize, String> {
    let len = class_len(&pattern.as_bytes()[i..]).ok_or("unterminated character class")?;
    let text = &pattern[i..i + len];
    let hir = parse(text, false)?;
    let digits = match hir.kind() {
        HirKind::Class(c) => digits_in(c),
        HirKind::Literal(lit) => lit.0.iter().filter(|b| b.is_ascii_digit()).count() as u32,
        _ => return Err(format!("unexpected class form {text:?}")),
    };
    if matches!(digits, 0 | 10) {
        out.extend_from_slice(text.as_bytes());
    } else {
        out.extend_from_slice(b"(?:");
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(br"|\d)");
    }
    Ok(len)
}

/// The length of the bracket class at the start of `b` (PCRE rules: a `]` first is literal,
/// escapes and POSIX `[:name:]` inside).
fn class_len(b: &[u8]) -> Option<usize> {
    let mut j = 1;
    if b.get(j) == Some(&b'^') {
        j += 1;
    }
    if b.get(j) == Some(&b']') {
        j += 1;
    }
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'[' if b.get(j + 1) == Some(&b':') => {
                let close = b[j + 2..].windows(2).position(|w| w == b":]")?;
                j += close + 4;
            }
            b']' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The length of a `{m}`, `{m,}` or `{m,n}` quantifier at the start of `b`; anything else
/// starting with `{` is a literal brace in PCRE.
fn quantifier_len(b: &[u8]) -> Option<usize> {
    let close = b.iter().position(|&c| c == b'}')?;
    let inner = &b[1..close];
    let (min, max) = match inner.iter().position(|&c| c == b',') {
        Some(comma) => (&inner[..comma], &inner[comma + 1..]),
        None => (inner, &b"0"[..]),
    };
    let all_digits = |s: &[u8]| s.iter().all(u8::is_ascii_digit);
    (!min.is_empty() && all_digits(min) && all_digits(max)).then_some(close + 1)
}

/// The length of a `(?...` group header: flags up to `:` or `)`, a name up to `>` or `'`, or
/// a whole `(?#comment)`.
fn group_header_len(b: &[u8]) -> Result<usize, String> {
    let upto = |end: u8| {
        b.iter()
            .position(|&c| c == end)
            .map(|p| p + 1)
            .ok_or_else(|| "unterminated group header".to_string())
    };
    match (b.get(2), b.get(3)) {
        (Some(b'#'), _) => upto(b')'),
        (Some(b'P'), Some(b'<')) => upto(b'>'),
        (Some(b'<'), Some(c)) if *c != b'=' && *c != b'!' => upto(b'>'),
        (Some(b'\''), _) => b[3..]
            .iter()
            .position(|&c| c == b'\'')
            .map(|p| p + 4)
            .ok_or_else(|| "unterminated group name".into()),
        _ => {
            let flags = b[2..]
                .iter()
                .take_while(|c| c.is_ascii_alphabetic() || **c == b'-')
                .count();
            let end = b.get(2 + flags);
            Ok(2 + flags + usize::from(matches!(end, Some(b':' | b')' | b'=' | b'!'))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widened(p: &str) -> String {
        match blind(p, false).unwrap() {
            Blind::AsIs => p.to_string(),
            Blind::Widened(w) => w,
        }
    }

    #[test]
    fn patterns_that_treat_digits_alike_are_kept() {
        for p in [
            r"^Channel \d+/\d+ : \d+\[\d+\] -> \d+",
            r"Connect to \S+ failed",
            r"busId [0-9a-fA-F]+ .*",
            r"rank \d{1,5}\b",
            r"[^)]*\) failed: ",
            r"(?:\d|x)+",
            r"[[:digit:]x]+",
            r"(?P<rank2>\d+)",
            r"comm 0x[0-9a-f]+ rank \d+",
            r"size=0X[0-9A-F]+",
        ] {
            assert_eq!(blind(p, false), Ok(Blind::AsIs), "{p}");
        }
    }

    #[test]
    fn literal_digits_and_partial_classes_are_widened() {
        assert_eq!(widened(r"error 802\b"), r"error \d\d\d\b");
        assert_eq!(
            widened(r"exitcode: -(?:9|1|2)\) "),
            r"exitcode: -(?:\d|\d|\d)\) "
        );
        assert_eq!(
            widened(r"comm 0x[0-9a-f]+ rank 1\d{2}"),
            r"comm 0x[0-9a-f]+ rank \d\d{2}"
        );
        assert_eq!(widened(r"code [1-9]\d*"), r"code (?:[1-9]|\d)\d*");
        assert_eq!(widened(r"x86_64\x31{3,}"), r"x\d\d_\d\d\d{3,}");
        assert_eq!(widened(r"(?P<v>2)\.(?i:ab1)"), r"(?P<v>\d)\.(?i:ab\d)");
        // PCRE reads `{,3}` as literal text, so its digit must not pass as blind.
        assert_ne!(blind(r"a{,3}", false), Ok(Blind::AsIs));
    }

    #[test]
    fn the_shortcut_agrees_with_the_parsed_check() {
        for p in [
            r"^Channel \d+/\d+ : \S+ via [\w/]+",
            r"[!-~]+ [+-~] [^)]* [[:alnum:]]",
            r"(?i)NET/IB : .*failed",
        ] {
            assert!(spells_no_digit(p), "{p}");
            assert!(is_digit_blind(p, false).unwrap(), "{p}");
        }
        for p in [r"\x31", r"a\u0030", r"[0-4]", r"x{2}"] {
            assert!(!spells_no_digit(p), "{p}");
        }
        assert!(matches!(blind(r"\x31", false), Ok(Blind::Widened(_))));
    }

    #[test]
    fn what_cannot_be_widened_is_an_error() {
        assert!(blind(r"(a)\1", false).is_err());
        assert!(blind(r"\Q1\E", false).is_err());
        assert!(blind(r"[12", false).is_err());
        assert!(blind(r"(*UTF8)1", false).is_err());
    }

    #[test]
    fn field_regexes_are_judged_as_compiled() {
        assert!(field_regex_is_digit_blind(
            r"^NCCL version (?P<v>\d+\.\d+\.\d+)"
        ));
        assert!(field_regex_is_digit_blind(r"via (?P<t>\S+)"));
        assert!(field_regex_is_digit_blind(r"peer (?P<p>[^ ]+)"));
        assert!(field_regex_is_digit_blind(r"comm (?P<c>0x[0-9a-f]+)"));
        assert!(!field_regex_is_digit_blind(r"comm (?P<c>0[0-9a-f]+)"));
        assert!(!field_regex_is_digit_blind(r"P2P (?P<n>[1-9])"));
        assert!(!field_regex_is_digit_blind(r"(?P<x>1"));
    }

    #[test]
    fn masking_keeps_length_and_other_bytes() {
        let mut out = Vec::new();
        mask_digits(b"rank 12 of 0x7f3a", &mut out);
        assert_eq!(out, b"rank 00 of 0x0f0a");
        // A digit right before `x` is kept: `0x` and `1x` are different shapes.
        mask_digits(b"1x5 0x9 7X", &mut out);
        assert_eq!(out, b"1x0 0x0 7X");
    }
}
