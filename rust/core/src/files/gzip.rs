//! gzip members one after another, as `gzip -d` reads them: a file may be several members
//! (concatenated or appended logs), and zero bytes after the last one (a preallocated or
//! padded file) are not a member.

use flate2::bufread::GzDecoder;
use std::io::{BufRead, Read};

pub(super) struct Members<R: BufRead> {
    /// The member being decompressed; None after the last.
    member: Option<GzDecoder<R>>,
}

impl<R: BufRead> Members<R> {
    pub(super) fn new(input: R) -> Members<R> {
        Members {
            member: Some(GzDecoder::new(input)),
        }
    }
}

/// Skips zero bytes; says whether anything follows them.
fn skip_zeros(input: &mut impl BufRead) -> std::io::Result<bool> {
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(false);
        }
        let zeros = buf.iter().take_while(|b| **b == 0).count();
        let more = zeros < buf.len();
        input.consume(zeros);
        if more {
            return Ok(true);
        }
    }
}

impl<R: BufRead> Read for Members<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while let Some(member) = self.member.as_mut() {
            let n = member.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            // The member ended: another may follow.
            if let Some(ended) = self.member.take() {
                let mut input = ended.into_inner();
                if skip_zeros(&mut input)? {
                    self.member = Some(GzDecoder::new(input));
                }
            }
        }
        Ok(0)
    }
}
