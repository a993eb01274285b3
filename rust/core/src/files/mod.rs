//! Reading log files in bounded chunks: plain or gzip (members one after another), never more
//! than a chunk in memory, never blocking on something that is not a regular file.
//!
//! A damaged gzip file delivers what could be decompressed and then reports
//! [`ReadError::Partial`], so that the readable part is analyzed and the file is named as
//! partially read.

mod gzip;

use crate::filetext::FileIdentity;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most bytes one chunk holds (the same cut as the Python reader it replaces, so that a
/// file is cut into the same chunks).
pub const CHUNK_BYTES: usize = 1 << 20;
/// Bytes read from disk at a time when decompressing.
const GZIP_INPUT_BYTES: usize = 64 << 10;
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Why a file was not (entirely) read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Nothing (more) could be read: the reason, as the OS words it.
    Unreadable(String),
    /// The readable part was delivered; the rest could not be read (the reason).
    Partial(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Unreadable(why) | ReadError::Partial(why) => f.write_str(why),
        }
    }
}

/// `e` as `strerror` words it ("Permission denied"), without Rust's " (os error 13)".
fn os_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.rfind(" (os error ") {
        Some(i) if e.raw_os_error().is_some() => text[..i].to_string(),
        _ => text,
    }
}

/// 1958971 -> "1,958,971".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A file read no further than the size it had when opened: a file that keeps growing (a
/// job still writing) is analysed as it was, and `analyze` ends.
type Snapshot = std::io::Take<File>;

enum Source {
    Plain(BufReader<Snapshot>),
    Gzip(Box<gzip::Members<BufReader<Snapshot>>>),
}

impl Read for Source {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Source::Plain(r) => r.read(buf),
            Source::Gzip(r) => r.read(buf),
        }
    }
}

/// A log file being read chunk by chunk.
pub struct LogReader {
    source: Source,
    /// Bytes delivered so far (decompressed).
    delivered: u64,
    /// Bytes the file had when opened: sizes the first chunk of a small file.
    size_hint: u64,
    /// An error met after the bytes of the last chunk: reported on the next call.
    failed: Option<ReadError>,
    done: bool,
    identity: FileIdentity,
}

impl LogReader {
    /// Opens a log file. A FIFO, device, socket or folder is refused ("not a regular file")
    /// without blocking: it is opened non-blocking and checked before any read.
    pub fn open(path: &Path) -> Result<LogReader, ReadError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| ReadError::Unreadable(os_reason(&e)))?;
        let meta = file
            .metadata()
            .map_err(|e| ReadError::Unreadable(os_reason(&e)))?;
        if !meta.is_file() {
            return Err(ReadError::Unreadable("not a regular file".into()));
        }
        let mut reader = BufReader::with_capacity(GZIP_INPUT_BYTES, file.take(meta.len()));
        let head = reader
            .fill_buf()
            .map_err(|e| ReadError::Unreadable(os_reason(&e)))?;
        let source = if head.starts_with(&GZIP_MAGIC) {
            Source::Gzip(Box::new(gzip::Members::new(reader)))
        } else {
            Source::Plain(reader)
        };
        Ok(LogReader {
            source,
            delivered: 0,
            size_hint: meta.len(),
            failed: None,
            done: false,
            identity: FileIdentity::of(&meta),
        })
    }

    /// The file, if its bytes are the ones delivered (a plain file, not a compressed one):
    /// then a delivered byte can be read again at its offset.
    pub fn identity(&self) -> Option<FileIdentity> {
        matches!(self.source, Source::Plain(_)).then_some(self.identity)
    }

    /// Bytes delivered so far: the offset of the next chunk's first byte.
    pub fn delivered(&self) -> u64 {
        self.delivered
    }

    /// The next at most `max` bytes (decompressed for gzip); `Ok(None)` at the end. Chunks
    /// are full but for the last: a file is cut the same way however the OS hands it over.
    pub fn next_chunk(&mut self, max: usize) -> Result<Option<Vec<u8>>, ReadError> {
        let mut buf = Vec::new();
        Ok(self.next_chunk_into(&mut buf, max)?.then_some(buf))
    }

    /// `next_chunk` into `buf` (cleared first, its capacity reused); false at the end.
    pub fn next_chunk_into(&mut self, buf: &mut Vec<u8>, max: usize) -> Result<bool, ReadError> {
        buf.clear();
        if let Some(e) = self.failed.take() {
            self.done = true;
            return Err(e);
        }
        if self.done {
            return Ok(false);
        }
        let hint = match self.source {
            Source::Plain(_) => self.size_hint.saturating_sub(self.delivered) as usize + 1,
            Source::Gzip(_) => GZIP_INPUT_BYTES * 4,
        };
        buf.reserve(hint.min(max));
        let result = (&mut self.source).take(max as u64).read_to_end(buf);
        self.delivered += buf.len() as u64;
        match result {
            Ok(0) => {
                self.done = true;
                Ok(false)
            }
            Ok(_) => Ok(true),
            Err(e) => {
                let err = self.reason(&e);
                if buf.is_empty() {
                    self.done = true;
                    Err(err)
                } else {
                    self.failed = Some(err);
                    Ok(true)
                }
            }
        }
    }

    fn reason(&self, e: &std::io::Error) -> ReadError {
        let gzip = matches!(self.source, Source::Gzip(_));
        if !gzip || e.raw_os_error().is_some() {
            return ReadError::Unreadable(os_reason(e));
        }
        let after = thousands(self.delivered);
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ReadError::Partial(format!("gzip file ends early, after {after} bytes"))
        } else {
            ReadError::Partial(format!("corrupt gzip data after {after} bytes ({e})"))
        }
    }
}

/// A whole log file (decompressed), for tests and small files: the bytes read, and why the
/// rest was not.
pub fn read_all(path: &Path) -> (Vec<u8>, Option<ReadError>) {
    let mut out = Vec::new();
    let mut reader = match LogReader::open(path) {
        Ok(r) => r,
        Err(e) => return (out, Some(e)),
    };
    loop {
        match reader.next_chunk(CHUNK_BYTES) {
            Ok(Some(chunk)) => out.extend_from_slice(&chunk),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[cfg(test)]
mod tests;
