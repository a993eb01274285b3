//! Flight Recorder dumps read from their files in one call: each file is stat-ed, read,
//! recognised, decoded and checked by the fast path of [`crate::flight_recorder`], on a few
//! threads, each with one read buffer and one node arena reused from dump to dump (a fresh
//! buffer per dump cost as much as decoding it: the kernel zeroes every new page).
//!
//! Like the fast path itself this only ever accepts. A file it does not take whole (not a
//! regular file, over the size limit, unreadable, not a pickle that names a dump's keys,
//! refused or malformed, an entry that fails a check, a top-level value it does not convert)
//! is `None`, and the caller's reader (`rankwatch.flight_recorder.reader`) decides it and
//! gives the reason, so no protection of that reader is lost here.

use crate::flight_recorder::{self as fr, Arena, Checked, Doc, Node};
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The first bytes searched for a dump's keys (`reader.SNIFF_BYTES`).
const SNIFF_BYTES: usize = 64 << 10;
/// The keys `reader.sniff` looks for in a pickle's first bytes.
const PICKLE_KEYS: [&[u8]; 4] = [b"entries", b"pg_config", b"profiling_name", b"version"];
/// The top-level values the caller checks itself.
pub const TOP_KEYS: [&str; 4] = ["version", "rank", "pg_config", "pg_status"];
/// Nesting converted below a top-level value (a group's configuration is three deep).
const MAX_DEPTH: u32 = 6;

/// A decoded top-level value, owned (so the file's bytes can be reused for the next dump).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(Value, Value)>),
}

/// One dump taken whole: its top-level values by name (those of [`TOP_KEYS`] it has) and
/// its checked entries.
#[derive(Debug)]
pub struct Taken {
    pub top: Vec<(&'static str, Value)>,
    pub checked: Checked,
}

/// Whether the first bytes are a pickle that names a dump's keys (`reader.sniff`).
pub fn sniff_pickle(data: &[u8]) -> bool {
    let head = &data[..data.len().min(SNIFF_BYTES)];
    head.len() >= 2
        && head[0] == 0x80
        && (2..=5).contains(&head[1])
        && PICKLE_KEYS
            .iter()
            .any(|k| memchr::memmem::find(head, k).is_some())
}

/// `doc`'s node `id` owned, within `budget` nodes in all (a pickle can refer to one list
/// many times for a few bytes a reference: the copies are bounded, not the references).
fn owned(doc: &Doc<'_>, id: u32, depth: u32, budget: &mut usize) -> Option<Value> {
    if depth > MAX_DEPTH || *budget == 0 {
        return None;
    }
    *budget -= 1;
    let mut items = |ids: &[u32]| -> Option<Vec<Value>> {
        ids.iter()
            .map(|&i| owned(doc, i, depth + 1, budget))
            .collect()
    };
    Some(match doc.node(id) {
        Node::None => Value::None,
        Node::Bool(b) => Value::Bool(*b),
        Node::Int(i) => Value::Int(*i),
        Node::BigInt => return None,
        Node::Float(f) => Value::Float(*f),
        Node::Str(..) => Value::Str(doc.text(id)?.to_owned()),
        Node::Bytes(..) => Value::Bytes(doc.bytes(id)?.to_vec()),
        Node::List(_) => Value::List(items(doc.seq(id))?),
        Node::Tuple(_) => Value::Tuple(items(doc.seq(id))?),
        Node::Dict(s) => {
            let mut out = Vec::with_capacity(s.len as usize);
            for (k, v) in doc.pairs(id) {
                out.push((
                    owned(doc, k, depth + 1, budget)?,
                    owned(doc, v, depth + 1, budget)?,
                ));
            }
            Value::Dict(out)
        }
    })
}

/// Decodes and checks one dump's bytes; `arena` is reused (and handed back).
pub fn take_bytes(data: &[u8], keep_last: Option<usize>, arena: &mut Arena) -> Option<Taken> {
    if !sniff_pickle(data) {
        return None;
    }
    // what the reader allows the walk: the file's size and a margin (`reader.load_dump`)
    let work_limit = data.len() + 100_000;
    let doc = fr::parse_reusing(data, std::mem::take(arena)).ok()?;
    let got = (|| {
        let checked = fr::check(&doc, keep_last, Some(work_limit))?;
        let mut budget = work_limit;
        let mut top = Vec::new();
        for key in TOP_KEYS {
            if let Some(id) = doc.get(doc.root, key) {
                top.push((key, owned(&doc, id, 0, &mut budget)?));
            }
        }
        Some(Taken { top, checked })
    })();
    *arena = doc.into_arena();
    got
}

/// Reads one file into `buf` (emptied first): `false` when it is not a regular file, is
/// over `max_bytes`, or cannot be read.
fn read_file(path: &PathBuf, max_bytes: u64, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    // stat first: opening a FIFO would wait for a writer
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() <= max_bytes => {}
        _ => return false,
    }
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    match f.take(max_bytes + 1).read_to_end(buf) {
        Ok(n) => n as u64 <= max_bytes,
        Err(_) => false,
    }
}

/// Reads, decodes and checks `paths` on up to `threads` threads; one result per path, in
/// order (`None`: left to the caller's reader, see the module doc).
pub fn read_dumps(
    paths: &[PathBuf],
    keep_last: Option<usize>,
    max_bytes: u64,
    threads: usize,
) -> Vec<Option<Taken>> {
    let next = AtomicUsize::new(0);
    let work = || {
        let mut buf = Vec::new();
        let mut arena = Arena::default();
        let mut got = Vec::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(path) = paths.get(i) else { break };
            let taken = if read_file(path, max_bytes, &mut buf) {
                take_bytes(&buf, keep_last, &mut arena)
            } else {
                None
            };
            got.push((i, taken));
        }
        got
    };
    let threads = threads.clamp(1, paths.len().max(1));
    let mut out: Vec<Option<Taken>> = (0..paths.len()).map(|_| None).collect();
    let parts: Vec<Vec<(usize, Option<Taken>)>> = if threads == 1 {
        vec![work()]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads).map(|_| s.spawn(work)).collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    for (i, taken) in parts.into_iter().flatten() {
        out[i] = taken;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // {"version": "2.10", "rank": 3, "entries": [{"profiling_name": "nccl:all_reduce",
    //  "collective_seq_id": 7}]} as pickle protocol 2
    const DUMP: &[u8] = b"\x80\x02}q\x00(X\x07\x00\x00\x00versionq\x01X\x04\x00\x00\x002.10q\x02X\x04\x00\x00\x00rankq\x03K\x03X\x07\x00\x00\x00entriesq\x04]q\x05}q\x06(X\x0e\x00\x00\x00profiling_nameq\x07X\x0f\x00\x00\x00nccl:all_reduceq\x08X\x11\x00\x00\x00collective_seq_idq\tK\x07uau.";

    #[test]
    fn a_clean_dump_is_taken_with_its_top_values() {
        let mut arena = Arena::default();
        let t = take_bytes(DUMP, None, &mut arena).unwrap();
        assert_eq!(t.checked.entries.len(), 1);
        assert_eq!(
            t.top,
            vec![
                ("version", Value::Str("2.10".into())),
                ("rank", Value::Int(3))
            ]
        );
        // the arena comes back for the next dump
        assert!(take_bytes(DUMP, None, &mut arena).is_some());
    }

    #[test]
    fn what_is_not_a_clean_dump_is_left_to_the_caller() {
        let mut nodes = Arena::default();
        // a global: refused
        assert!(take_bytes(
            b"\x80\x02cos\nsystem\nX\x07\x00\x00\x00entriesR.",
            None,
            &mut nodes
        )
        .is_none());
        // a pickle that names none of the keys
        assert!(take_bytes(b"\x80\x02}q\x00.", None, &mut nodes).is_none());
        // truncated
        assert!(take_bytes(&DUMP[..DUMP.len() - 3], None, &mut nodes).is_none());
        // JSON
        assert!(take_bytes(
            b"{\"entries\": [], \"version\": \"2.10\"}",
            None,
            &mut nodes
        )
        .is_none());
    }

    #[test]
    fn shared_top_values_are_copied_within_a_budget() {
        // pg_config = a list holding one list 40 times, that list holding another 40 times...
        let mut p = b"\x80\x02}(X\x07\x00\x00\x00entries]X\x09\x00\x00\x00pg_config".to_vec();
        p.extend_from_slice(b"]q\x00");
        for level in 1..6u8 {
            p.extend_from_slice(b"0("); // the level below is only in the memo
            for _ in 0..40 {
                p.extend_from_slice(&[b'h', level - 1]);
            }
            p.extend_from_slice(&[b'l', b'q', level]);
        }
        p.extend_from_slice(b"u.");
        let doc = fr::parse(&p).unwrap();
        let id = doc.get(doc.root, "pg_config").unwrap();
        let mut budget = p.len() + 100_000;
        assert!(owned(&doc, id, 0, &mut budget).is_none());
    }

    #[test]
    fn files_are_read_in_order_and_odd_ones_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for i in 0..9 {
            let p = dir.path().join(format!("nccl_trace_rank_{i}"));
            let data: &[u8] = if i == 4 { b"not a dump" } else { DUMP };
            std::fs::write(&p, data).unwrap();
            paths.push(p);
        }
        paths.push(dir.path().to_path_buf()); // a folder
        paths.push(dir.path().join("absent"));
        for threads in [1, 3] {
            let got = read_dumps(&paths, Some(1), 1 << 20, threads);
            let taken: Vec<bool> = got.iter().map(Option::is_some).collect();
            let mut want = vec![true; 9];
            want[4] = false;
            want.extend([false, false]);
            assert_eq!(taken, want);
        }
        // over the size limit
        assert!(read_dumps(&paths[..1], None, 10, 1)[0].is_none());
    }
}
