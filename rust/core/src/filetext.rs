//! Lines of local log files kept by reference: where a line is in its file, read back only
//! when a diagnosis shows it.
//!
//! `rankwatch analyze` keeps each process's recent lines in a ring, and on a healthy job no
//! line is ever shown. Copying every line into the rings put a second copy of the whole job
//! in fresh memory (about 250 MB for a 16k-rank job of 177 MB); now a ring record of a plain
//! file's line holds its file and offset, and the text is read again when it is needed.
//!
//! A file is known by its device and inode as well as its path, so that a file replaced
//! after it was read (a rotated log) is noticed instead of showing another file's bytes; a
//! file that only grew (a job still writing) still has the same bytes at the same offsets.
//! One that is shorter, or as long but modified, was rewritten in place: its lines read as
//! gone, so what a diagnosis shows is what was analysed. (A rewrite that makes the file
//! longer cannot be told from a job appending to it without reading it all again.)

use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A file as it was when read: its device and inode, its size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl FileIdentity {
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }

    /// Whether `now` still holds the bytes this file had: the same file, not shorter, and
    /// unmodified unless it grew.
    fn still_holds(&self, now: &FileIdentity) -> bool {
        let same_file = (self.dev, self.ino) == (now.dev, now.ino);
        let appended = now.size > self.size;
        same_file && (appended || (now.size == self.size && now.mtime_ns == self.mtime_ns))
    }
}

/// Where a line's text is: its file (an id of [`FileTexts`]) and its byte offset there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextAt {
    pub file: u32,
    pub offset: u64,
}

/// Reads spanning more than this are split line by line.
const MAX_SPAN_BYTES: u64 = 4 << 20;

/// The files whose lines rings refer to.
#[derive(Debug, Default)]
pub struct FileTexts {
    files: Mutex<Vec<(PathBuf, FileIdentity)>>,
    /// The file read last, kept open: a diagnosis reads one process's lines in a row.
    open: Mutex<Option<(u32, File)>>,
}

impl FileTexts {
    /// Registers a file that was read as `identity`; its id for [`TextAt`].
    pub fn register(&self, path: &Path, identity: FileIdentity) -> u32 {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.push((path.to_path_buf(), identity));
        (files.len() - 1) as u32
    }

    /// The texts of `lines` (where each starts, and its length), read back; a line that
    /// cannot be read as it was (the file is gone, replaced or shorter) is `None`. Lines of
    /// one file close together are read in one call.
    pub fn read(&self, lines: &[(TextAt, usize)]) -> Vec<Option<Vec<u8>>> {
        let mut out = Vec::with_capacity(lines.len());
        let mut rest = lines;
        while let Some(((first, _), _)) = rest.split_first() {
            let run = rest
                .iter()
                .take_while(|(at, len)| {
                    at.file == first.file
                        && at.offset >= first.offset
                        && at.offset + *len as u64 - first.offset <= MAX_SPAN_BYTES
                })
                .count()
                .max(1);
            out.extend(self.read_run(&rest[..run]));
            rest = &rest[run..];
        }
        out
    }

    /// Lines of one file, all within `MAX_SPAN_BYTES` of the first (or just one line).
    fn read_run(&self, run: &[(TextAt, usize)]) -> Vec<Option<Vec<u8>>> {
        let start = run[0].0.offset;
        let end = run
            .iter()
            .map(|(at, len)| at.offset + *len as u64)
            .max()
            .unwrap_or(start);
        let span = self.read_span(run[0].0.file, start, (end - start) as usize);
        if span.is_none() && run.len() > 1 {
            // The file may have lost its end: each line that is still there is read alone.
            return run
                .iter()
                .flat_map(|l| self.read_run(std::slice::from_ref(l)))
                .collect();
        }
        run.iter()
            .map(|(at, len)| {
                let span = span.as_ref()?;
                let from = (at.offset - start) as usize;
                let text = span.get(from..from + len)?;
                (!text.contains(&b'\n')).then(|| text.to_vec())
            })
            .collect()
    }

    fn read_span(&self, file: u32, offset: u64, len: usize) -> Option<Vec<u8>> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(&*open, Some((id, _)) if *id == file) {
            *open = None;
            *open = Some((file, self.open_checked(file)?));
        }
        let (_, handle) = open.as_ref()?;
        let mut buf = vec![0u8; len];
        handle.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }

    /// Opens a registered file if it is still the one that was read.
    fn open_checked(&self, file: u32) -> Option<File> {
        let (path, identity) = {
            let files = self.files.lock().unwrap_or_else(|p| p.into_inner());
            files.get(file as usize)?.clone()
        };
        // Non-blocking: a FIFO put in the file's place must not hang the report.
        let handle = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(path)
            .ok()?;
        let meta = handle.metadata().ok()?;
        (meta.is_file() && identity.still_holds(&FileIdentity::of(&meta))).then_some(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registered(texts: &FileTexts, path: &Path) -> u32 {
        let identity = FileIdentity::of(&std::fs::metadata(path).unwrap());
        texts.register(path, identity)
    }

    #[test]
    fn reads_lines_back_by_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
        std::fs::write(&a, "first line\nsecond\nthird one\n").unwrap();
        std::fs::write(&b, "other file\n").unwrap();
        let texts = FileTexts::default();
        let (fa, fb) = (registered(&texts, &a), registered(&texts, &b));
        let at = |file, offset| TextAt { file, offset };
        let got = texts.read(&[
            (at(fa, 18), 9),
            (at(fb, 0), 10),
            (at(fa, 0), 10),
            (at(fa, 11), 6),
        ]);
        let want: Vec<Option<Vec<u8>>> = ["third one", "other file", "first line", "second"]
            .iter()
            .map(|s| Some(s.as_bytes().to_vec()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_file_rewritten_in_place_or_swapped_for_a_fifo_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank1.log");
        std::fs::write(&path, "analysed line\n").unwrap();
        let texts = FileTexts::default();
        let id = registered(&texts, &path);
        let line = (
            TextAt {
                file: id,
                offset: 0,
            },
            13,
        );
        // Same size, same inode, other bytes, later modification time.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        std::io::Write::write_all(&mut f, b"injected text\n").unwrap();
        drop(f);
        assert_eq!(texts.read(&[line]), vec![None]);
        std::fs::remove_file(&path).unwrap();
        let fifo = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        drop(texts.open.lock().unwrap().take());
        assert_eq!(texts.read(&[line]), vec![None]);
    }

    #[test]
    fn a_replaced_or_shortened_file_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rank0.log");
        std::fs::write(&path, "kept line\nlost line\n").unwrap();
        let texts = FileTexts::default();
        let id = registered(&texts, &path);
        let line = |offset, len| (TextAt { file: id, offset }, len);
        // Appending keeps what was read.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, b"appended\n").unwrap();
        assert_eq!(
            texts.read(&[line(10, 9)]),
            vec![Some(b"lost line".to_vec())]
        );
        // A range that holds a line break is not the line.
        assert_eq!(texts.read(&[line(5, 9)]), vec![None]);
        // Truncated (copytruncate rotation): what is at the old offsets now may be new text.
        f.set_len(12).unwrap();
        drop(texts.open.lock().unwrap().take());
        assert_eq!(texts.read(&[line(10, 9), line(0, 9)]), vec![None, None]);
        // A new file under the same name is another file.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "kept line\nlost line\n").unwrap();
        drop(texts.open.lock().unwrap().take());
        assert_eq!(texts.read(&[line(0, 9)]), vec![None]);
    }
}
