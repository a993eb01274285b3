//! Small helpers shared by the correlator: rank lists, bus ids, subnets, timestamps, ids.

use std::collections::BTreeSet;

/// FNV-1a over the parts, each followed by a separator byte.
pub fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0xffu8)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// Parses `1, 5-7` / `[1,2]` / `{3}` into ranks.
pub fn parse_rank_list(s: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in s.split([',', ' ', '[', ']', '{', '}']) {
        if part.is_empty() {
            continue;
        }
        if let Some((a, b)) = part.split_once('-') {
            if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                if b >= a && b - a < 100_000 {
                    out.extend(a..=b);
                }
            }
        } else if let Ok(v) = part.parse::<u32>() {
            out.push(v);
        }
    }
    out
}

/// Formats ranks as compact ranges: `0-12,14-63`.
pub fn rank_ranges(ranks: &BTreeSet<u32>) -> String {
    let mut out = String::new();
    let mut it = ranks.iter().copied().peekable();
    while let Some(a) = it.next() {
        let mut b = a;
        while it.peek() == Some(&(b + 1)) {
            b = it.next().unwrap_or(b);
        }
        if !out.is_empty() {
            out.push(',');
        }
        if a == b {
            out.push_str(&a.to_string());
        } else {
            out.push_str(&format!("{a}-{b}"));
        }
    }
    out
}

/// NCCL prints bus ids as the hex digits of `dddd:bb:dd.f` run together (`0000:9a:00.0` ->
/// `9a000`); Xid lines print `0000:9a:00`.
pub fn bdf_to_bus_id(bdf: &str) -> String {
    let mut digits: String = bdf.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    if !bdf.contains('.') {
        digits.push('0');
    }
    let t = digits.trim_start_matches('0');
    if t.is_empty() {
        "0".into()
    } else {
        t.to_lowercase()
    }
}

/// The /16 of an IPv4 address or the /64 of an IPv6 one (zone ids dropped).
pub fn subnet_of(ip: &str) -> Option<String> {
    let ip = ip.split('%').next().unwrap_or(ip);
    let parts: Vec<&str> = ip.split('.').collect();
    if parts.len() == 4 && parts.iter().all(|p| p.parse::<u8>().is_ok()) {
        Some(format!("{}.{}.0.0/16", parts[0], parts[1]))
    } else if ip.contains(':') {
        let groups: Vec<&str> = ip.split(':').take(4).collect();
        Some(format!("{}::/64", groups.join(":")))
    } else {
        None
    }
}

pub fn iso_ms(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    // civil_from_days (inverse of timefmt::days_from_civil)
    let z = days + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        y,
        m,
        d,
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// A message with its variable parts masked, so the same unrecognised error groups across
/// ranks: hex and numbers become `<n>`, dotted or colon-separated addresses `<addr>`, paths
/// `<path>`.
pub fn template(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for (i, word) in msg.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        push_masked_word(word, &mut out);
    }
    out
}

/// A dotted quad or an IPv6-like run of colons.
fn looks_like_address(s: &[u8]) -> bool {
    let (mut dots, mut colons) = (0, 0);
    for &b in s {
        dots += usize::from(b == b'.');
        colons += usize::from(b == b':');
    }
    dots >= 3 || colons >= 2
}

/// Punctuation around a word that is not part of its value.
fn is_wrapper(b: u8) -> bool {
    matches!(
        b,
        b'(' | b')' | b'[' | b']' | b'<' | b'>' | b',' | b';' | b'\'' | b'"'
    )
}

fn push_masked_word(word: &str, out: &mut String) {
    let bytes = word.as_bytes();
    if let Some(port) = bytes.iter().position(|&b| b == b'<') {
        if looks_like_address(&bytes[..port]) {
            out.push_str("<addr>");
            return;
        }
    }
    // Wrappers are ASCII, so the trimmed ends are character boundaries.
    let start = bytes.iter().position(|&b| !is_wrapper(b));
    let end = bytes.iter().rposition(|&b| !is_wrapper(b));
    let (Some(start), Some(last)) = (start, end) else {
        out.push_str(word);
        return;
    };
    let core = &word[start..=last];
    out.push_str(&word[..start]);
    if core.len() > 1 && core.as_bytes().contains(&b'/') {
        out.push_str("<path>");
    } else if looks_like_address(core.as_bytes()) {
        out.push_str("<addr>");
    } else {
        push_masked_numbers(core, out);
    }
    out.push_str(&word[last + 1..]);
}

/// `s` with each run of digits (or `0x` and hex digits) as `<n>`.
fn push_masked_numbers(s: &str, out: &mut String) {
    let b = s.as_bytes();
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let hex = b[i] == b'0' && b.get(i + 1).is_some_and(|c| *c == b'x' || *c == b'X');
        let mut j = if hex { i + 2 } else { i };
        while j < b.len() && (b[j].is_ascii_hexdigit() && (hex || b[j].is_ascii_digit())) {
            j += 1;
        }
        // Digits are ASCII, so both ends are character boundaries.
        out.push_str(&s[copied..i]);
        out.push_str("<n>");
        i = j.max(i + 1);
        copied = i;
    }
    out.push_str(&s[copied..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_and_ranges() {
        assert_eq!(parse_rank_list("[1, 5-7]"), vec![1, 5, 6, 7]);
        assert_eq!(parse_rank_list("{3}"), vec![3]);
        let s: BTreeSet<u32> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(rank_ranges(&s), "0-2,4,6-7");
    }

    #[test]
    fn bus_ids_match_nccl_form() {
        assert_eq!(bdf_to_bus_id("0000:9a:00"), "9a000");
        assert_eq!(bdf_to_bus_id("0000:18:00.0"), "18000");
    }

    #[test]
    fn iso_formatting() {
        assert_eq!(iso_ms(1_796_040_001_005), "2026-11-30T12:00:01.005Z");
        assert_eq!(iso_ms(0), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn templates_group_variable_parts() {
        assert_eq!(
            template("ncclSocketInit: connecting to address  with family 1 is neither AF_INET(2) nor AF_INET6(10)"),
            "ncclSocketInit: connecting to address  with family <n> is neither AF_INET(<n>) nor AF_INET<n>(<n>)"
        );
        assert_eq!(
            template("comm 0x7f3a5c001230 failed on /dev/shm/nccl-x at 10.1.2.3<4000>"),
            "comm <n> failed on <path> at <addr>"
        );
    }

    #[test]
    fn templates_keep_other_text_as_written() {
        assert_eq!(
            template("Fehler beim Öffnen: 12 Geräte"),
            "Fehler beim Öffnen: <n> Geräte"
        );
        assert_eq!(template("x0x1f,y 9 (7)"), "x<n>,y <n> (<n>)");
    }

    #[test]
    fn subnets() {
        assert_eq!(subnet_of("172.17.0.1").as_deref(), Some("172.17.0.0/16"));
        assert_eq!(
            subnet_of("fe80::e866:19ff:fe1e:a688%ip6tnl0").as_deref(),
            Some("fe80::e866:19ff::/64")
        );
        assert_eq!(subnet_of("nope"), None);
    }
}
