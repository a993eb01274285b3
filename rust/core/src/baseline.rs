//! A healthy run's lines, normalised, to find the first line of a failing process that a
//! healthy run never printed. Normalising masks what changes between runs (numbers, hex ids,
//! addresses, times) so only the shape of a message is compared.

use crate::prefix::peel;
use std::collections::HashSet;

#[derive(Debug, Default)]
pub struct Baseline {
    shapes: HashSet<u64>,
}

/// FNV-1a over the message with digit runs and hex-looking runs collapsed to one marker.
pub fn shape(message: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    let mut mix = |b: u8| {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    };
    let bytes = message.trim().as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() || (c == b'0' && bytes.get(i + 1) == Some(&b'x')) {
            // 0x7f.., 42, 10.20.3.7, 9a000: one marker for the whole run.
            while i < bytes.len()
                && (bytes[i].is_ascii_hexdigit() || matches!(bytes[i], b'x' | b'.' | b':'))
            {
                i += 1;
            }
            mix(b'#');
            continue;
        }
        mix(c);
        i += 1;
    }
    h
}

impl Baseline {
    pub fn add(&mut self, data: &[u8], year: i32) {
        for raw in data.split(|b| *b == b'\n') {
            let line = String::from_utf8_lossy(raw);
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let m = peel(line, year);
            self.shapes.insert(shape(m.message(line)));
        }
    }

    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    /// Index of the first line whose shape the healthy run never printed.
    pub fn first_new<S: AsRef<str>>(&self, lines: &[S], year: i32) -> Option<usize> {
        lines.iter().position(|l| {
            let l = l.as_ref();
            let m = peel(l, year);
            !self.shapes.contains(&shape(m.message(l)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_ids_do_not_matter_but_words_do() {
        let mut b = Baseline::default();
        b.add(
            b"node-01:4012:4012 [0] NCCL INFO NET/Socket : Using [0]eth0:10.20.1.7<0>\n\
                2026-11-30 12:00:01,000 INFO step=1 loss=2.3\n",
            2026,
        );
        let lines = [
            "node-09:777:777 [3] NCCL INFO NET/Socket : Using [0]eth0:10.20.9.1<0>",
            "2026-11-30 12:09:01,000 INFO step=912 loss=1.7",
            "node-09:777:777 [3] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.1<0>",
        ];
        assert_eq!(b.first_new(&lines, 2026), Some(2));
        assert_eq!(b.first_new(&lines[..2], 2026), None);
    }
}
