//! The fast path must peel exactly what the general chain peels: the same `LineMeta` for every
//! line, whether the fast path finishes it, hands it on, or leaves it alone.

use super::super::{peel, peel_general};
use super::*;
use proptest::prelude::*;

fn same_as_general(line: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(peel(line, 2026), peel_general(line, 2026), "{:?}", line);
    Ok(())
}

/// Real shapes (from shared/corpus/real and the generator) and near misses of the fast path.
const LINES: &[&str] = &[
    "[default3]:node-07:40213:40213 [3] NCCL INFO Using network IB",
    "[default0]:node-001:36315:36400 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
    "node-07:40213:40213 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB eth0:10.0.0.7<0>",
    "node12:81234:81301 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<39275> failed",
    "[default5]:node-07:40213:40213 [5] include/socket.h:318 NCCL WARN Net : Socket creation failed",
    "[15]worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv failed",
    "[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket creation failed",
    "[rank3]:[E710 18:00:32.426182607 ProcessGroupNCCL.cpp:757] [Rank 3] Watchdog caught collective operation timeout",
    "[default3]:[rank3]: Traceback (most recent call last):",
    "[rank0]:node-1:1:1 [0] NCCL INFO x",
    "[trainer0|0]:node-1:1:1 [0] NCCL INFO x",
    "[default3]:2026-11-30 12:00:05,123 INFO step=7 loss=1.25 tokens/s=1000",
    "[default3]:NCCL version 2.21.5+cuda12.4",
    "[default6]:",
    "[default6]: ",
    "[default1]:node-1:1:1 [0] NCCL INFO Ring 00 : 26[2] -> 30[6] via P2P/IPC [repeated 3x across cluster]",
    "node-1:1:1 [0] NCCL INFO x [repeated 3x across cluster]",
    "2026-03-14T09:22:05.412233870Z stdout F node-1:1:1 [0] NCCL INFO x",
    "ip-10-0-0-T:1:1 [0] NCCL INFO this line is long enough for the CRI check",
    "<cluster_name>:922:1158 [3] NCCL INFO NET/Socket : Using [0]eth0:10.1.1.1<0>",
    "node-1:12345678901:1 [0] NCCL INFO pid too long",
    "node-1:1:1 [65536] NCCL INFO device too large",
    "node-1:1:1 [12345] NCCL INFO five-digit device",
    "node-1:1:1 [0]  NCCL INFO two spaces",
    "node-1:1:1 [0]NCCL INFO glued",
    "node-1:1:1 NCCL CALL ncclCommInitRank",
    "node-1:1:1 [0] NCCL INFOx not a level",
    "node-1:1:1 [0] NCCL ABORT",
    "node-1:1:1 [0] NCCL TRACE 1.0 x",
    "node-1:1:1 [0] INFO NCCL 2.2 shape",
    "12:34:56 INFO a time, not a host",
    "[default99999]:node-1:1:1 [0] NCCL INFO index past u16",
    "[default12345]:node-1:1:1 [0] NCCL INFO five-digit index",
    "[3m5]:node-1:1:1 [0] NCCL INFO an ANSI-looking label",
    "[36m(Ray pid=1) node-1:1:1 [0] NCCL INFO x",
    "[abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrst0]:node-1:1:1 [0] NCCL INFO wide label",
    "[default3]:[default3]:node-1:1:1 [0] NCCL INFO stacked",
    "[default3]:10.10.23.10: node-1:1:1 [0] NCCL INFO pdsh inside",
    "[default3]: | 2026-01-01T00:00:00Z | node-1:1:1 [0] NCCL INFO",
    "\"node-1:1:1 [0] NCCL INFO quoted\"",
    "node-1:1:1 [0] NCCL INFO",
    "node-1:1:1 [0] NCCL INFO ",
    "[default0]:node-1:1:1 [0] NCCL WARN",
    "x",
    "[",
    "[default3]",
    "[default3]:",
    "[default3]:node-1:1:1 [0] NCCL INFO padded to the terminal width   ",
    "node-1:1:1 [0] NCCL INFO padded with a tab\t ",
    "node-1:1:1 [0] NCCL INFO    ",
    ":5120:5377 [6] NCCL INFO a blanked host",
    "[default3]::5120:5377 [6] misc/socket.cc:50 NCCL WARN socketProgress: x",
];

#[test]
fn listed_lines_peel_as_the_general_chain_does() {
    for line in LINES {
        same_as_general(line).unwrap();
    }
}

#[test]
fn fuzz_logs_peel_as_the_general_chain_does() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/fuzz");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "log") {
            let bytes = std::fs::read(&path).unwrap();
            for line in String::from_utf8_lossy(&bytes).split('\n') {
                same_as_general(line).unwrap();
                seen += 1;
            }
        }
    }
    assert!(seen > 100, "{seen} lines");
}

#[test]
fn common_shapes_take_the_fast_path() {
    for line in &LINES[..3] {
        assert!(
            matches!(common_header(line.as_bytes()), Fast::Done(_)),
            "{line}"
        );
    }
    // A WARN header has a source location before `NCCL `: the general chain reads it, after
    // the tee label the fast path peeled.
    assert!(matches!(
        common_header(LINES[4].as_bytes()),
        Fast::Resume {
            pos: 11,
            layers: 1,
            ..
        }
    ));
    assert!(matches!(common_header(LINES[5].as_bytes()), Fast::General));
}

/// One of several choices for each part of a header, mostly the common shape, now and then a
/// near miss of it.
fn label() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u32..12).prop_map(|n| format!("[default{n}]:")),
        3 => Just(String::new()),
        1 => (0u32..200_000).prop_map(|n| format!("[default{n}]:")),
        1 => "\\[[a-zA-Z0-9_|;-]{0,6}[0-9]{0,3}\\]:?".prop_map(String::from),
        1 => Just("[rank3]:".to_string()),
        1 => Just("[3]:".to_string()),
        1 => Just("\u{1b}[0m ".to_string()),
    ]
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (1u32..999).prop_map(|n| format!("node-{n:03}")),
        1 => "[a-zA-Z0-9._<> -]{0,12}".prop_map(String::from),
        1 => Just("<redacted>".to_string()),
        1 => Just(String::new()),
        1 => Just("2026-03-14T09:22:05.412233870Z stdout F".to_string()),
    ]
}

fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..100_000).prop_map(|n| n.to_string()),
        1 => (0u64..u64::MAX).prop_map(|n| n.to_string()),
        1 => "[0-9a-z]{0,3}".prop_map(String::from),
    ]
}

fn device() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u32..8).prop_map(|n| format!(" [{n}] ")),
        1 => (0u32..200_000).prop_map(|n| format!(" [{n}] ")),
        1 => "[ \\[\\]0-9x]{0,5}".prop_map(String::from),
    ]
}

fn marker() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => Just("NCCL INFO ".to_string()),
        1 => Just("NCCL WARN ".to_string()),
        1 => Just("misc/socket.cc:484 NCCL WARN ".to_string()),
        1 => Just("transport/net_ib.cc:2458 (ncclIbGetRequest) NCCL WARN ".to_string()),
        1 => "(NCCL|INFO|WARN|TRACE|CALL|ABORT| |x){0,3}".prop_map(String::from),
    ]
}

fn message() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => Just("Ring 00 : 26[2] -> 30[6] via P2P/IPC".to_string()),
        1 => Just("Using network IB".to_string()),
        1 => Just(String::new()),
        1 => Just("x [repeated 3x across cluster]".to_string()),
        1 => Just("a | a".to_string()),
        1 => Just("padded \t  ".to_string()),
        1 => "[ -~]{0,40}".prop_map(String::from),
    ]
}

fn header_line() -> impl Strategy<Value = String> {
    (label(), host(), id(), id(), device(), marker(), message())
        .prop_map(|(l, h, p, t, d, mk, msg)| format!("{l}{h}:{p}:{t}{d}{mk}{msg}"))
}

/// A header line with one byte replaced, inserted or removed somewhere (char boundaries
/// only: the peelers take `&str`).
fn mutated_line() -> impl Strategy<Value = String> {
    (
        header_line(),
        any::<prop::sample::Index>(),
        0u8..3,
        b' '..=b'~',
    )
        .prop_map(|(line, at, op, byte)| {
            let bounds: Vec<usize> = (0..=line.len())
                .filter(|i| line.is_char_boundary(*i))
                .collect();
            let i = bounds[at.index(bounds.len())];
            let mut s = line.clone();
            let c = char::from(byte);
            match op {
                0 => s.insert(i, c),
                1 if i < s.len() => {
                    s.remove(i);
                }
                _ if i < s.len() => s.replace_range(
                    i..i + s[i..].chars().next().map_or(0, char::len_utf8),
                    &c.to_string(),
                ),
                _ => s.push(c),
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4096, ..ProptestConfig::default() })]

    #[test]
    fn generated_headers_peel_as_the_general_chain_does(line in header_line()) {
        same_as_general(&line)?;
    }

    #[test]
    fn mutated_headers_peel_as_the_general_chain_does(line in mutated_line()) {
        same_as_general(&line)?;
    }
}
