//! `feed_files` gives what feeding the same files one by one gives, with any number of
//! threads, whatever the files hold (long lines across chunks, CRLF, gzip, damage).

use super::*;
use crate::catalog::tests::small;
use crate::config::Config;
use crate::files::read_all;
use flate2::write::GzEncoder;
use flate2::Compression;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

const CAUSE: &str = "node-3:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: \
    Connect to 172.17.0.1<39275> failed : Network is unreachable";

fn gz(data: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A per-node console: `[defaultN]:` lines of 8 ranks, some long, some CRLF.
fn node_log(node: usize, lines: usize, cause_at: Option<usize>) -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..lines {
        let r = i % 8;
        let text = match i % 97 {
            _ if Some(i) == cause_at => CAUSE.to_string(),
            0 => format!("node-{node}:{r}:{r} [{r}] NCCL INFO NET/Socket : Using [0]eth0:10.0.{node}.{r}<0>"),
            1 => format!("[rank{r}]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={i}, OpType=ALLREDUCE)"),
            2 => "x".repeat(20_000 + i),
            3 => format!("progress 10%\rprogress {i}%\r"),
            4 => "bad \u{fffd} utf8".to_string(),
            _ => format!("step {i} loss {}", i * 7919 % 1000),
        };
        out.extend(format!("[default{r}]:{text}").bytes());
        out.extend(if i % 5 == 0 { &b"\r\n"[..] } else { &b"\n"[..] });
    }
    out.extend(b"[default0]:no newline at the end");
    out
}

/// A job folder; returns its files in the order discovery would give.
fn job(dir: &Path) -> Vec<FileInput> {
    std::fs::create_dir_all(dir).unwrap();
    let mut paths = Vec::new();
    for node in 0..6 {
        let lines = if node == 2 { 40_000 } else { 3_000 };
        let data = node_log(node, lines, (node == 3).then_some(1_234));
        let (name, bytes) = match node {
            4 => (format!("node-{node}.log.gz"), gz(&data)),
            5 => {
                let whole = gz(&data);
                (
                    format!("node-{node}.log.gz"),
                    whole[..whole.len() / 2].to_vec(),
                )
            }
            _ => (format!("node-{node}.log"), data),
        };
        std::fs::write(dir.join(&name), bytes).unwrap();
        paths.push(dir.join(name));
    }
    paths.insert(1, dir.join("missing.log"));
    paths
        .into_iter()
        .map(|path| FileInput {
            origin: path.display().to_string(),
            path,
            job: "j".into(),
            hints: StreamHints::default(),
        })
        .collect()
}

/// Diagnoses and the line counters after feeding `files` one by one, as the Python reader
/// did: chunks of `CHUNK_BYTES`.
fn one_by_one(cfg: &Config, files: &[FileInput]) -> (String, [u64; 6]) {
    let mut e = Engine::new(Arc::new(small()), cfg.clone());
    for f in files {
        let id = e.open_stream(&f.job, &f.origin, f.hints.clone());
        let (bytes, _) = read_all(&f.path);
        for chunk in bytes.chunks(CHUNK_BYTES) {
            e.feed(id, chunk, None);
        }
        e.close_stream(id);
    }
    outcome(&mut e)
}

fn outcome(e: &mut Engine) -> (String, [u64; 6]) {
    let diags: Vec<_> = e.finish().into_iter().map(|d| d.json).collect();
    let s = &e.stats;
    let counts = [
        s.lines,
        s.bytes,
        s.blank_lines,
        s.truncated_lines,
        s.invalid_utf8_lines,
        s.signature_hits,
    ];
    (serde_json::to_string(&diags).unwrap(), counts)
}

/// The diagnoses without their preceding lines, and how many those were.
fn without_preceding_lines(diagnoses: &str) -> (serde_json::Value, Vec<usize>) {
    let mut v: serde_json::Value = serde_json::from_str(diagnoses).unwrap();
    let counts = v
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .map(|d| {
            let lines = d.as_object_mut().unwrap().remove("preceding_lines");
            lines.and_then(|l| l.as_array().map(Vec::len)).unwrap_or(0)
        })
        .collect();
    (v, counts)
}

#[test]
fn any_number_of_threads_gives_the_one_by_one_result() {
    let dir = std::env::temp_dir().join(format!("rw-feed-files-{}", std::process::id()));
    let files = job(&dir);
    for budget in [1 << 30, 300_000] {
        let cfg = Config {
            memory_budget_bytes: budget,
            ..Config::default()
        };
        let want = one_by_one(&cfg, &files);
        assert!(want.0.contains("socketStartConnect"), "{}", want.0);
        let mut first = None;
        for threads in [1, 2, 5] {
            let mut e = Engine::new(Arc::new(small()), cfg.clone());
            let progress = AtomicU64::new(0);
            let report = e.feed_files(&files, threads, Some(&progress));
            let got = outcome(&mut e);
            assert_eq!(
                &got,
                first.get_or_insert_with(|| got.clone()),
                "{threads} threads"
            );
            if budget == 1 << 30 {
                assert_eq!(got, want, "{threads} threads, budget {budget}");
            } else {
                // Lines kept by reference take less memory than copies, so a tight budget
                // trims the rings later: the same diagnoses, with at least as many lines.
                let (got_diags, got_lines) = without_preceding_lines(&got.0);
                let (want_diags, want_lines) = without_preceding_lines(&want.0);
                assert_eq!((got_diags, got.1), (want_diags, want.1));
                assert!(got_lines.iter().zip(&want_lines).all(|(g, w)| g >= w));
                assert!(got_lines.iter().sum::<usize>() > want_lines.iter().sum::<usize>());
            }
            assert_eq!(report.bytes, want.1[1]);
            assert_eq!(progress.load(Ordering::Relaxed), report.bytes);
            let problems: Vec<_> = report.problems.iter().map(|(i, e)| (*i, e)).collect();
            let [(1, ReadError::Unreadable(gone)), (6, ReadError::Partial(cut))] = &problems[..]
            else {
                panic!("{problems:?}")
            };
            assert_eq!(gone, "No such file or directory");
            assert!(cut.starts_with("gzip file ends early, after "), "{cut}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn lines_of_files_replaced_after_reading_are_marked_not_read_from_the_new_file() {
    let dir = std::env::temp_dir().join(format!("rw-feed-replaced-{}", std::process::id()));
    let files = job(&dir);
    let mut e = Engine::new(Arc::new(small()), Config::default());
    e.feed_files(&files, 2, None);
    // Every plain file is replaced by one of the same size before the diagnoses are made.
    for f in files
        .iter()
        .filter(|f| !f.path.to_string_lossy().ends_with(".gz"))
    {
        if let Ok(len) = std::fs::metadata(&f.path).map(|m| m.len()) {
            std::fs::remove_file(&f.path).unwrap();
            std::fs::write(&f.path, "z".repeat(len as usize)).unwrap();
        }
    }
    let (diagnoses, _) = outcome(&mut e);
    let _ = std::fs::remove_dir_all(dir);
    assert!(diagnoses.contains("socketStartConnect"), "{diagnoses}");
    assert!(diagnoses.contains(crate::ring::UNREADABLE), "{diagnoses}");
    assert!(!diagnoses.contains("zzzz"), "{diagnoses}");
}

#[test]
fn no_files_is_nothing_to_do() {
    let mut e = Engine::new(Arc::new(small()), Config::default());
    let report = e.feed_files(&[], 0, None);
    assert_eq!((report.bytes, report.problems.len()), (0, 0));
}

#[test]
fn workers_are_capped_at_a_few_per_core_and_at_the_files() {
    assert_eq!(worker_count_on(8, 0, 1_000), 8);
    assert_eq!(worker_count_on(8, 4_096, 100_000), 32);
    assert_eq!(worker_count_on(8, 12, 3), 3);
    assert_eq!(worker_count_on(2, 0, 0), 1);
}
