use super::*;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh file under the system's temporary folder, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str) -> TempFile {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rw-files-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempFile(dir.join(name))
    }

    fn with(name: &str, bytes: &[u8]) -> TempFile {
        let f = TempFile::new(name);
        std::fs::write(&f.0, bytes).unwrap();
        f
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn lines(n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|i| format!("step {i} loss {}\n", i * 7919 % 1000).into_bytes())
        .collect()
}

fn chunks(path: &Path, max: usize) -> (Vec<Vec<u8>>, Option<ReadError>) {
    let mut r = LogReader::open(path).unwrap();
    let mut out = Vec::new();
    loop {
        match r.next_chunk(max) {
            Ok(Some(c)) => out.push(c),
            Ok(None) => return (out, None),
            Err(e) => return (out, Some(e)),
        }
    }
}

#[test]
fn plain_file_comes_in_full_chunks() {
    let data = lines(10_000);
    let f = TempFile::with("rank-0.log", &data);
    let (got, err) = chunks(&f.0, 4096);
    assert_eq!(err, None);
    assert!(got[..got.len() - 1].iter().all(|c| c.len() == 4096));
    assert_eq!(got.concat(), data);
}

#[test]
fn gzip_members_and_zero_padding_are_read_through() {
    let (a, b) = (lines(3_000), b"NCCL WARN second member\n".to_vec());
    let mut bytes = gz(&a);
    bytes.extend(gz(&b));
    bytes.extend([0u8; 100]);
    let f = TempFile::with("rank-1.log.gz", &bytes);
    let (got, err) = read_all(&f.0);
    assert_eq!(err, None);
    assert_eq!(got, [a, b].concat());
}

#[test]
fn truncated_gzip_delivers_its_readable_part_then_says_so() {
    let data = lines(200_000);
    let whole = gz(&data);
    let f = TempFile::with("rank-3.log.gz", &whole[..whole.len() * 2 / 3]);
    let (got, err) = read_all(&f.0);
    assert!(got.len() > data.len() / 3 && data.starts_with(&got));
    let Some(ReadError::Partial(why)) = err else {
        panic!("{err:?}")
    };
    let n = thousands(got.len() as u64);
    assert_eq!(why, format!("gzip file ends early, after {n} bytes"));
}

#[test]
fn garbage_after_a_member_is_corrupt_gzip_data() {
    let data = lines(1_000);
    let mut bytes = gz(&data);
    bytes.extend(b"not gzip at all");
    let f = TempFile::with("rank-4.log.gz", &bytes);
    let (got, err) = read_all(&f.0);
    assert_eq!(got, data);
    let Some(ReadError::Partial(why)) = err else {
        panic!("{err:?}")
    };
    assert!(why.starts_with("corrupt gzip data after "), "{why}");
}

#[test]
fn a_gzip_header_alone_ends_early_after_nothing() {
    let f = TempFile::with("rank-5.log.gz", &[0x1f, 0x8b]);
    let (got, err) = read_all(&f.0);
    assert!(got.is_empty());
    let want = ReadError::Partial("gzip file ends early, after 0 bytes".into());
    assert_eq!(err, Some(want));
}

#[test]
fn empty_file_has_no_chunks() {
    let f = TempFile::with("rank-6.log", b"");
    assert_eq!(chunks(&f.0, 16), (vec![], None));
}

#[test]
fn fifo_and_folder_are_refused_without_blocking() {
    let f = TempFile::new("pipe.log");
    let c = std::ffi::CString::new(f.0.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let not_regular = ReadError::Unreadable("not a regular file".into());
    assert_eq!(LogReader::open(&f.0).err(), Some(not_regular.clone()));
    let dir = f.0.parent().unwrap();
    assert_eq!(LogReader::open(dir).err(), Some(not_regular));
}

#[test]
fn a_missing_file_is_named_as_the_os_words_it() {
    let f = TempFile::new("gone.log");
    let err = LogReader::open(&f.0).err();
    assert_eq!(
        err,
        Some(ReadError::Unreadable("No such file or directory".into()))
    );
}

#[test]
fn thousands_separates_groups_of_three() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1_000), "1,000");
    assert_eq!(thousands(1_958_971), "1,958,971");
}

#[test]
fn a_file_that_grows_while_read_is_read_to_its_size_at_open() {
    let data = lines(1_000);
    let f = TempFile::with("rank-0.log", &data);
    let mut r = LogReader::open(&f.0).unwrap();
    let first = r.next_chunk(4096).unwrap().unwrap();
    let mut w = std::fs::OpenOptions::new().append(true).open(&f.0).unwrap();
    w.write_all(&lines(5_000)).unwrap();
    let mut got = first;
    while let Some(c) = r.next_chunk(4096).unwrap() {
        got.extend(c);
    }
    assert_eq!(got, data);
}
