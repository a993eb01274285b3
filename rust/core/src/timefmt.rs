//! Timestamp parsing for the shapes real training logs carry. All times are taken as UTC
//! milliseconds since the epoch; logs rarely print a zone, and only differences matter.

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

pub fn epoch_ms(y: i64, mo: u32, d: u32, h: u32, mi: u32, s: u32, ms: u32) -> Option<i64> {
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some(((days * 24 + h as i64) * 60 + mi as i64) * 60_000 + s as i64 * 1000 + ms as i64)
}

/// Parses exactly `n` ASCII digits at the start of `b`.
pub fn digits(b: &[u8], n: usize) -> Option<u32> {
    if b.len() < n {
        return None;
    }
    let mut v: u32 = 0;
    for &c in &b[..n] {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (c - b'0') as u32;
    }
    Some(v)
}

/// Parses a run of 1..=max digits; returns the value and how many bytes were used.
pub fn leading_number(b: &[u8], max: usize) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    let mut n = 0;
    while n < b.len() && n < max && b[n].is_ascii_digit() {
        v = v * 10 + (b[n] - b'0') as u64;
        n += 1;
    }
    if n == 0 {
        None
    } else {
        Some((v, n))
    }
}

/// `HH:MM:SS` at the start of `b`.
pub fn hms(b: &[u8]) -> Option<(u32, u32, u32)> {
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    Some((digits(b, 2)?, digits(&b[3..], 2)?, digits(&b[6..], 2)?))
}

/// `YYYY-MM-DD[ T]HH:MM:SS` followed by an optional fraction (`.` or `,`) and an optional zone
/// (`Z` or `+HH:MM`). Returns the time and the length consumed.
pub fn iso_datetime(b: &[u8]) -> Option<(i64, usize)> {
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || (b[10] != b' ' && b[10] != b'T') {
        return None;
    }
    let y = digits(b, 4)? as i64;
    let mo = digits(&b[5..], 2)?;
    let d = digits(&b[8..], 2)?;
    let (h, mi, s) = hms(&b[11..])?;
    let mut i = 19;
    let mut ms = 0;
    if i < b.len() && (b[i] == b'.' || b[i] == b',') {
        let start = i + 1;
        let mut j = start;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j == start {
            return None;
        }
        let frac = &b[start..j];
        let mut v = 0u32;
        for k in 0..3 {
            v = v * 10 + frac.get(k).map(|c| (c - b'0') as u32).unwrap_or(0);
        }
        ms = v;
        i = j;
    }
    let mut t = epoch_ms(y, mo, d, h, mi, s, ms)?;
    if i < b.len() && b[i] == b'Z' {
        i += 1;
    } else if i + 6 <= b.len() && (b[i] == b'+' || b[i] == b'-') && b[i + 3] == b':' {
        let oh = digits(&b[i + 1..], 2)? as i64;
        let om = digits(&b[i + 4..], 2)? as i64;
        let off = (oh * 60 + om) * 60_000;
        t = if b[i] == b'+' { t - off } else { t + off };
        i += 6;
    }
    Some((t, i))
}

/// How far into a file its first full date is looked for.
pub const YEAR_SNIFF_BYTES: usize = 64 * 1024;

/// The year of the first `YYYY-MM-DD HH:MM:SS` timestamp in the first `YEAR_SNIFF_BYTES` of
/// `b`: the year a file's stamps without one (glog's `E0421 04:13:43`, syslog's `Apr 21`) were
/// written in, where a log mixes them with dated lines.
pub fn year_stated_in(b: &[u8]) -> Option<i32> {
    let b = &b[..b.len().min(YEAR_SNIFF_BYTES)];
    memchr::memchr_iter(b'-', b).find_map(|p| {
        let start = p.checked_sub(4)?;
        let boundary = start == 0 || !b[start - 1].is_ascii_digit();
        let year = digits(&b[start..], 4)? as i32;
        (boundary && (1990..=2100).contains(&year) && iso_datetime(&b[start..]).is_some())
            .then_some(year)
    })
}

/// glog-style `MMDD HH:MM:SS` (month not zero-padded in c10: `E709` is July 9). `mmdd_len`
/// is 3 or 4. The year comes from the caller.
pub fn mmdd_hms(b: &[u8], mmdd_len: usize, year: i32) -> Option<i64> {
    let mmdd = digits(b, mmdd_len)?;
    if b.get(mmdd_len) != Some(&b' ') {
        return None;
    }
    let (h, mi, s) = hms(&b[mmdd_len + 1..])?;
    epoch_ms(year as i64, mmdd / 100, mmdd % 100, h, mi, s, 0)
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// Syslog `Mon DD HH:MM:SS` (day space-padded). Returns time and length (15).
pub fn syslog_time(b: &[u8], year: i32) -> Option<(i64, usize)> {
    if b.len() < 15 || b[3] != b' ' || b[6] != b' ' {
        return None;
    }
    let mo = MONTHS.iter().position(|m| &b[..3] == *m)? as u32 + 1;
    let d = if b[4] == b' ' {
        digits(&b[5..], 1)?
    } else {
        digits(&b[4..], 2)?
    };
    let (h, mi, s) = hms(&b[7..])?;
    Some((epoch_ms(year as i64, mo, d, h, mi, s, 0)?, 15))
}

const WEEKDAYS: [&[u8; 3]; 7] = [b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat", b"Sun"];

/// C `ctime()` `Www Mmm DD HH:MM:SS YYYY` (day space-padded), as Open MPI's
/// `--timestamp-output` prints it. Returns time and length (24).
pub fn ctime(b: &[u8]) -> Option<(i64, usize)> {
    if b.len() < 24 || b[3] != b' ' || b[19] != b' ' {
        return None;
    }
    if !WEEKDAYS.iter().any(|d| &b[..3] == *d) {
        return None;
    }
    let year = digits(&b[20..], 4)? as i32;
    let (ts, n) = syslog_time(&b[4..], year)?;
    Some((ts, 4 + n + 5))
}

/// Milliseconds of the c10/torch sub-second field are deliberately ignored by callers where
/// they are CLOCK_MONOTONIC (c10); torch logging's microseconds are wall-clock and usable.
pub fn micros_to_ms(b: &[u8]) -> u32 {
    digits(b, 3).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_files_year_is_its_first_full_timestamps() {
        let log = b"[rank6]:[E421 04:13:43.457 Gloo.cpp:143] x\n[2025-04-21 04:13:43 TP6] y\n";
        assert_eq!(year_stated_in(log), Some(2025));
        assert_eq!(
            year_stated_in(b"v2.21.5-1 built 12025-01-01 and 2024-13-99 10:00:00"),
            None
        );
        assert_eq!(year_stated_in(b"E0421 04:13:43 no date here"), None);
    }

    #[test]
    fn civil_roundtrip_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11017);
        assert_eq!(epoch_ms(2026, 11, 30, 12, 0, 1, 5), Some(1_796_040_001_005));
    }

    #[test]
    fn iso_variants() {
        let (t, n) = iso_datetime(b"2026-03-14T09:22:05.412233870Z stderr").unwrap();
        assert_eq!(n, 30);
        assert_eq!(t % 1000, 412);
        let (t2, n2) = iso_datetime(b"2026-03-14 09:22:05,412 INFO").unwrap();
        assert_eq!(n2, 23);
        assert_eq!(t, t2);
        let (t3, _) = iso_datetime(b"2026-03-14T10:22:05.412+01:00").unwrap();
        assert_eq!(t3, t);
        assert!(iso_datetime(b"2026-13-14 09:22:05").is_none());
    }

    #[test]
    fn ctime_as_open_mpi_prints_it() {
        let (t, n) = ctime(b"Tue Mar  3 07:05:09 2026[1,4]<stdout>:").unwrap();
        assert_eq!(n, 24);
        assert_eq!(t, epoch_ms(2026, 3, 3, 7, 5, 9, 0).unwrap());
        assert!(ctime(b"Tue Mar  3 07:05:09 26[1,4]<stdout>:").is_none());
        assert!(ctime(b"Tuesday Mar 3 07:05:09 2026").is_none());
    }

    #[test]
    fn glog_and_syslog() {
        let a = mmdd_hms(b"709 18:00:32.426", 3, 2026).unwrap();
        let b = epoch_ms(2026, 7, 9, 18, 0, 32, 0).unwrap();
        assert_eq!(a, b);
        let (s, n) = syslog_time(b"Nov  3 12:00:01 node-007 kernel:", 2026).unwrap();
        assert_eq!(n, 15);
        assert_eq!(s, epoch_ms(2026, 11, 3, 12, 0, 1, 0).unwrap());
    }
}
