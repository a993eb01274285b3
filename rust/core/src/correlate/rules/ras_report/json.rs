//! The `ncclras -f json` report (NCCL 2.28.7 and later, `rasDumpCommsToJSON` in
//! src/ras/client_support.cc), read into the same [`Report`] as the text report so that one
//! rule draws the same findings from either.
//!
//! NCCL prints the document one key per line:
//!
//! ```text
//! {
//!   "nccl_version": "2.28.7",
//!   "cuda_runtime_version": 12080, "cuda_driver_version": 12080, "timestamp": "...",
//!   "communicators_count": 1,
//!   "communicators": [
//!     { "hash": "0x...", "secondary_hash": "0x...:0x...", "size": 8, "ranks_count": 7,
//!       "missing_ranks_count": 1,
//!       "ranks": [ { "rank": 0, "host": "10.1.2.3", "pid": 4120, "cuda_dev": 0,
//!                    "nvml_dev": 0, "status": { "init_state": 0, "async_error": 0,
//!                    "finalize_called": false, "destroy_flag": false, "abort_flag": false },
//!                    "collective_counts": { "Broadcast": 0, "Reduce": 0, "AllGather": 0,
//!                    "ReduceScatter": 0, "AllReduce": 9316 } }, ... ],
//!       "missing_ranks": [ { "rank": 7, "host": "10.1.2.4", "pid": 4127, "cuda_dev": 3,
//!                            "nvml_dev": 3, "status": { "unresponsive": true,
//!                            "considered_dead": true } } ] } ],
//!   "ras": { "collection_time_sec": 0.004, "timeouts_count": 0 }
//! }
//! ```
//!
//! Unlike the text report it states no verdict: every rank's status and operation counts
//! are listed, and the comparisons the text report prints (which ranks are behind, in
//! another state, in error) are made here the way client_support.cc makes them for the text.
//! It has no DEAD section either: a dead process shows as a missing rank whose
//! `considered_dead` is true. `host` is the process's IP address (as the text report's
//! `on node`), `"unknown"` with pid -1 when RAS does not know the process.
//!
//! NCCL 2.28.7 and 2.28.9 print no comma after a missing rank's `"nvml_dev"` value (fixed in
//! 2.29.2), so their report with a missing rank is not valid JSON; that one omission is
//! repaired before parsing. Anything else that does not parse, or does not have the fields
//! and types NCCL prints, is not read (the caller notes why).

use super::{Comm, Group, Proc, Report};
use crate::digits::is_whole_number;
use serde::Deserialize;
use std::collections::BTreeMap;

/// A document longer than this is not read (NCCL prints about 500 bytes per rank of each
/// communicator; the per-process ring keeps far less by default).
pub const MAX_BYTES: usize = 64 << 20;

/// NCCL's order of the collectives (`ncclFunc_t` up to `NCCL_NUM_FUNCTIONS`).
const COLLECTIVES: &[&str] = &[
    "Broadcast",
    "Reduce",
    "AllGather",
    "ReduceScatter",
    "AllReduce",
];

#[derive(Deserialize)]
struct JReport {
    communicators: Vec<JComm>,
}

#[derive(Deserialize)]
struct JComm {
    hash: String,
    size: u32,
    ranks: Vec<JRank>,
    missing_ranks: Vec<JMissing>,
}

#[derive(Deserialize)]
struct JRank {
    rank: u32,
    host: String,
    pid: i64,
    cuda_dev: i64,
    status: JStatus,
    collective_counts: BTreeMap<String, u64>,
}

#[derive(Deserialize)]
struct JStatus {
    init_state: i64,
    async_error: i64,
    finalize_called: bool,
    destroy_flag: bool,
    abort_flag: bool,
}

#[derive(Deserialize)]
struct JMissing {
    rank: u32,
    host: String,
    pid: i64,
    cuda_dev: i64,
    status: JMissingStatus,
}

#[derive(Deserialize)]
struct JMissingStatus {
    unresponsive: bool,
    considered_dead: bool,
}

/// The message text of a line without its indentation.
fn key_line(m: &str) -> &str {
    m.trim()
}

/// Whether `lines[i]` opens a report: `{` followed by `"nccl_version"`, or the whole
/// document on one line (`jq -c`).
fn opens(lines: &[(u64, String)], i: usize) -> bool {
    let m = key_line(&lines[i].1);
    if m == "{" {
        return lines
            .get(i + 1)
            .is_some_and(|(_, n)| key_line(n).starts_with("\"nccl_version\""));
    }
    m.starts_with("{\"nccl_version\"") || m.starts_with("{ \"nccl_version\"")
}

/// A line only an ncclras JSON report prints.
pub fn is_marker(m: &str) -> bool {
    let m = key_line(m);
    m.starts_with("\"communicators_count\":") || m.starts_with("\"missing_ranks_count\":")
}

/// Where the last JSON report in `lines` starts: `Ok(Some(i))`; `Ok(None)` when the lines
/// hold none; `Err` when they hold lines of one whose start is no longer among them.
pub fn locate(lines: &[(u64, String)]) -> Result<Option<usize>, String> {
    if let Some(i) = (0..lines.len()).rev().find(|&i| opens(lines, i)) {
        return Ok(Some(i));
    }
    if lines.iter().any(|(_, m)| is_marker(m)) {
        return Err(format!(
            "only its last {} lines are still in memory, not its beginning (raise the lines \
             and bytes kept per process to read a report this large)",
            lines.len()
        ));
    }
    Ok(None)
}

/// `"nvml_dev": 3` with no comma, followed by `"status"`: the 2.28.7/2.28.9 omission.
fn lacks_comma(m: &str, next: Option<&str>) -> bool {
    let m = key_line(m);
    let Some(v) = m.strip_prefix("\"nvml_dev\":") else {
        return false;
    };
    let v = v.trim();
    let v = v.strip_prefix('-').unwrap_or(v);
    is_whole_number(v) && next.is_some_and(|n| key_line(n).starts_with("\"status\""))
}

/// The report that starts at `lines[0]` (see [`locate`]).
pub fn read(lines: &[(u64, String)]) -> Result<Report, String> {
    let mut text = String::new();
    for (i, (_, m)) in lines.iter().enumerate() {
        if text.len() + m.len() + 2 > MAX_BYTES {
            return Err(format!("it is longer than {} MiB", MAX_BYTES >> 20));
        }
        text.push_str(m);
        if lacks_comma(m, lines.get(i + 1).map(|(_, n)| n.as_str())) {
            text.push(',');
        }
        text.push('\n');
    }
    // The document is the first JSON value; whatever the log printed after it is not part of it.
    let doc: JReport = match serde_json::Deserializer::from_str(&text)
        .into_iter::<JReport>()
        .next()
    {
        Some(Ok(d)) => d,
        Some(Err(e)) if e.is_eof() => {
            return Err("it ends before the document does (cut off)".to_string())
        }
        Some(Err(e)) => return Err(format!("it is not the JSON NCCL prints: {e}")),
        None => return Err("it is empty".to_string()),
    };
    Ok(convert(&doc, &rank_lines(lines, &doc)))
}

/// The line of each rank entry (`"rank": N`), per communicator: ranks, then missing ranks,
/// in the order NCCL prints them. Where the lines do not follow that layout (the document
/// on one line), every entry gets the document's first line.
fn rank_lines(lines: &[(u64, String)], doc: &JReport) -> Vec<Vec<u64>> {
    let first = lines.first().map_or(0, |(s, _)| *s);
    let mut per_comm: Vec<Vec<u64>> = Vec::new();
    for (seq, m) in lines {
        let m = key_line(m);
        if m.starts_with("\"hash\":") {
            per_comm.push(Vec::new());
        } else if m.starts_with("\"rank\":") {
            if let Some(c) = per_comm.last_mut() {
                c.push(*seq);
            }
        }
    }
    let fits = per_comm.len() == doc.communicators.len()
        && per_comm
            .iter()
            .zip(&doc.communicators)
            .all(|(s, c)| s.len() == c.ranks.len() + c.missing_ranks.len());
    if fits {
        per_comm
    } else {
        doc.communicators
            .iter()
            .map(|c| vec![first; c.ranks.len() + c.missing_ranks.len()])
            .collect()
    }
}

/// `ncclResult_t` as the text report names it (`ncclErrorToString` in client_support.cc).
fn error_name(code: i64) -> &'static str {
    match code {
        1 => "Unhandled CUDA error",
        2 => "System error",
        3 => "Internal error",
        4 => "Invalid argument",
        5 => "Invalid usage",
        6 => "Remote process error",
        7 => "NCCL operation in progress",
        _ => "Unexpected error",
    }
}

/// An error state as the text report counts one: not success, not in progress.
fn is_error(code: i64) -> bool {
    code != 0 && code != 7
}

/// The hash as the text report prints it (`%016lx`): `0x7c1e` -> `0000000000007c1e`.
fn text_hash(h: &str) -> String {
    let h = h.trim();
    let h = h
        .strip_prefix("0x")
        .or_else(|| h.strip_prefix("0X"))
        .unwrap_or(h);
    format!("{:0>16}", h.to_ascii_lowercase())
}

fn proc_of(rank: Option<u32>, host: &str, pid: i64, gpu: i64, seq: u64) -> Proc {
    Proc {
        comm_rank: rank,
        pid: u32::try_from(pid).ok(),
        node: (host != "unknown" && !host.is_empty()).then(|| host.to_string()),
        gpu: (gpu >= 0).then(|| gpu.to_string()),
        seq,
        comm_size: None,
    }
}

/// Groups of `(value, member)` by value, in order of first appearance.
fn groups(members: Vec<(String, Proc)>) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for (value, p) in members {
        match out.iter_mut().find(|g| g.value == value) {
            Some(g) => {
                g.size += 1;
                g.members.push(p);
            }
            None => out.push(Group {
                value,
                size: 1,
                seq: p.seq,
                members: vec![p],
            }),
        }
    }
    out
}

fn convert(doc: &JReport, seqs: &[Vec<u64>]) -> Report {
    let mut r = Report::default();
    let mut dead_seen = std::collections::BTreeSet::new();
    for (ci, (jc, seqs)) in doc.communicators.iter().zip(seqs).enumerate() {
        let group = ci as u32;
        r.sizes.insert(group, jc.size);
        let mut c = Comm {
            hash: text_hash(&jc.hash),
            table_group: Some(group),
            ..Comm::default()
        };
        let (rank_seqs, missing_seqs) = seqs.split_at(jc.ranks.len().min(seqs.len()));
        let ranks: Vec<(&JRank, u64)> = jc.ranks.iter().zip(rank_seqs.iter().copied()).collect();
        let proc_at = |x: &JRank, seq: u64| proc_of(Some(x.rank), &x.host, x.pid, x.cuda_dev, seq);

        // Missing ranks: dead (the text report's DEAD section, by process), unresponsive (its
        // INCOMPLETE sections), or answering without this communicator (status NOCOMM).
        let mut status: Vec<(String, Proc)> = Vec::new();
        for (m, seq) in jc.missing_ranks.iter().zip(missing_seqs.iter().copied()) {
            let p = proc_of(Some(m.rank), &m.host, m.pid, m.cuda_dev, seq);
            if m.status.considered_dead && dead_seen.insert((m.pid, m.host.clone())) {
                r.dead.push(Proc {
                    comm_size: Some(jc.size),
                    ..p.clone()
                });
            }
            if m.status.unresponsive || m.status.considered_dead {
                c.missing.push(p);
            } else {
                status.push(("NOCOMM".to_string(), p));
            }
        }

        // States (client_support.cc's order: abort, finalize, running, init).
        for &(x, seq) in &ranks {
            let s = &x.status;
            let word = if s.abort_flag {
                "ABORT"
            } else if s.finalize_called || s.destroy_flag {
                "FINALIZE"
            } else if s.init_state == 0 {
                "RUNNING"
            } else {
                "INIT"
            };
            status.push((word.to_string(), proc_at(x, seq)));
        }
        let status = groups(status);
        if status.len() > 1 {
            c.status = status;
        }

        // Errors of initialization and asynchronous ones, by error.
        for (kind, code) in [
            (
                "Initialization",
                (|s: &JStatus| s.init_state) as fn(&JStatus) -> i64,
            ),
            ("Asynchronous", |s: &JStatus| s.async_error),
        ] {
            let members: Vec<(String, Proc)> = ranks
                .iter()
                .filter(|(x, _)| is_error(code(&x.status)))
                .map(|&(x, seq)| (error_name(code(&x.status)).to_string(), proc_at(x, seq)))
                .collect();
            if !members.is_empty() {
                c.errors.push((kind.to_string(), groups(members)));
            }
        }

        // Operation counts, per collective: NCCL's five first, then any other it names.
        let mut colls: Vec<&str> = COLLECTIVES.to_vec();
        for x in &jc.ranks {
            for k in x.collective_counts.keys() {
                if !colls.contains(&k.as_str()) {
                    colls.push(k);
                }
            }
        }
        for coll in colls {
            let members: Vec<(String, Proc)> = ranks
                .iter()
                .map(|&(x, seq)| {
                    let n = x.collective_counts.get(coll).copied().unwrap_or(0);
                    (n.to_string(), proc_at(x, seq))
                })
                .collect();
            let g = groups(members);
            if g.len() > 1 {
                c.ops.push((coll.to_string(), g));
            }
        }
        r.comms.push(c);
    }
    r
}

/// Reports in the layout NCCL prints, for tests.
#[cfg(test)]
pub(super) mod sample {
    /// A rank entry as NCCL 2.29+ prints it.
    pub fn rank(
        r: u32,
        host: &str,
        pid: i64,
        counts: [u64; 5],
        status: (i64, i64, bool),
    ) -> String {
        let names = super::COLLECTIVES;
        let counts: Vec<String> = names
            .iter()
            .zip(counts)
            .map(|(n, c)| format!("            \"{n}\": {c}"))
            .collect();
        format!(
            "        {{\n          \"rank\": {r},\n          \"host\": \"{host}\",\n          \
             \"pid\": {pid},\n          \"cuda_dev\": {d},\n          \"nvml_dev\": {d},\n          \
             \"status\": {{\n            \"init_state\": {i},\n            \"async_error\": {a},\n            \
             \"finalize_called\": false,\n            \"destroy_flag\": false,\n            \
             \"abort_flag\": {ab}\n          }},\n          \"collective_counts\": {{\n{c}\n          }}\n        }}",
            d = r % 4,
            i = status.0,
            a = status.1,
            ab = status.2,
            c = counts.join(",\n")
        )
    }

    pub fn missing(r: u32, host: &str, pid: i64, dead: bool, comma: bool) -> String {
        format!(
            "        {{\n          \"rank\": {r},\n          \"host\": \"{host}\",\n          \
             \"pid\": {pid},\n          \"cuda_dev\": {d},\n          \"nvml_dev\": {d}{c}\n          \
             \"status\": {{\n            \"unresponsive\": true,\n            \"considered_dead\": {dead}\n          \
             }}\n        }}",
            d = r % 4,
            c = if comma { "," } else { "" }
        )
    }

    pub fn doc(ranks: &[String], missing: &[String]) -> String {
        format!(
            "{{\n  \"nccl_version\": \"2.29.2\",\n  \"cuda_runtime_version\": 12080,\n  \
             \"cuda_driver_version\": 12080,\n  \"timestamp\": \"2026-01-12 08:41:07\",\n  \
             \"communicators_count\": 1,\n  \"communicators\": [\n    {{\n      \
             \"hash\": \"0x5d1e00a2b4d3f95\",\n      \"secondary_hash\": \"0x1:0x2\",\n      \
             \"size\": {n},\n      \"ranks_count\": {nr},\n      \"missing_ranks_count\": {nm},\n      \
             \"ranks\": [\n{r}\n      ],\n      \"missing_ranks\": [\n{m}\n      ]\n    }}\n  ],\n  \
             \"ras\": {{\n    \"collection_time_sec\": 0.004,\n    \"timeouts_count\": 0\n  }}\n}}\n",
            n = ranks.len() + missing.len(),
            nr = ranks.len(),
            nm = missing.len(),
            r = ranks.join(",\n"),
            m = missing.join(",\n")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::sample::{doc, missing, rank};
    use super::*;

    fn lines(text: &str) -> Vec<(u64, String)> {
        text.lines()
            .enumerate()
            .map(|(i, l)| (i as u64 + 1, l.to_string()))
            .collect()
    }

    fn four(lag: u32) -> Vec<String> {
        (0..4)
            .map(|r| {
                let n = if r == lag { 41 } else { 42 };
                rank(
                    r,
                    "10.9.0.1",
                    700 + r as i64,
                    [0, 0, 0, 0, n],
                    (0, 0, false),
                )
            })
            .collect()
    }

    fn report_of(text: &str) -> Result<Report, String> {
        let l = lines(text);
        let start = locate(&l)?.ok_or("no report")?;
        read(&l[start..])
    }

    #[test]
    fn the_lowest_count_is_one_group_with_its_rank_line() {
        let text = doc(&four(2), &[]);
        let r = report_of(&text).unwrap();
        let c = &r.comms[0];
        assert_eq!(c.hash, "05d1e00a2b4d3f95");
        assert_eq!(r.sizes[&0], 4);
        let (coll, g) = &c.ops[0];
        assert_eq!(coll, "AllReduce");
        let low = g.iter().find(|g| g.value == "41").unwrap();
        assert_eq!(low.members.len(), 1);
        let p = &low.members[0];
        assert_eq!((p.comm_rank, p.pid), (Some(2), Some(702)));
        let at = lines(&text)
            .into_iter()
            .find(|(s, _)| *s == p.seq)
            .unwrap()
            .1;
        assert_eq!(at.trim(), "\"rank\": 2,");
        assert!(c.status.is_empty() && c.errors.is_empty());
    }

    #[test]
    fn a_dead_missing_rank_is_dead_and_missing_also_in_the_2_28_shape() {
        for comma in [true, false] {
            let m = missing(3, "10.9.0.2", 703, true, comma);
            let r = report_of(&doc(&four(9)[..3], &[m])).unwrap();
            assert_eq!(r.dead.len(), 1, "comma {comma}");
            assert_eq!(r.dead[0].pid, Some(703));
            assert_eq!(r.dead[0].node.as_deref(), Some("10.9.0.2"));
            assert_eq!(r.comms[0].missing[0].comm_rank, Some(3));
        }
    }

    #[test]
    fn states_and_own_errors_are_grouped_as_the_text_report_does() {
        let mut ranks = four(9);
        ranks[1] = rank(1, "10.9.0.1", 701, [0, 0, 0, 0, 42], (0, 1, false));
        ranks[3] = rank(3, "10.9.0.1", 703, [0, 0, 0, 0, 42], (7, 0, false));
        let r = report_of(&doc(&ranks, &[])).unwrap();
        let c = &r.comms[0];
        let (kind, g) = &c.errors[0];
        assert_eq!(
            (kind.as_str(), g[0].value.as_str()),
            ("Asynchronous", "Unhandled CUDA error")
        );
        assert_eq!(c.errors.len(), 1, "in progress is no error");
        let init = c.status.iter().find(|g| g.value == "INIT").unwrap();
        assert_eq!(init.members[0].comm_rank, Some(3));
    }

    #[test]
    fn hostile_documents_are_refused_with_a_reason() {
        let good = doc(&four(2), &[]);
        let cases = [
            // cut off in the middle
            good[..good.len() / 2].to_string(),
            // a count that is a string
            good.replacen("\"AllReduce\": 41", "\"AllReduce\": \"41\"", 1),
            // a negative rank, a count beyond u64
            good.replacen("\"rank\": 2,", "\"rank\": -2,", 1),
            good.replacen(
                "\"AllReduce\": 41",
                "\"AllReduce\": 99999999999999999999999",
                1,
            ),
            // a field missing
            good.replacen("\"size\": 4,", "", 1),
            // garbage inside
            good.replacen("\"ranks\": [", "\"ranks\": [ ] ] }", 1),
        ];
        for (i, t) in cases.iter().enumerate() {
            assert!(report_of(t).is_err(), "case {i} was read");
        }
        // Deep nesting and a long document do not crash.
        let deep = format!(
            "{{\n\"nccl_version\": \"2.29.2\",\n\"communicators\": {}{}\n}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        assert!(report_of(&deep).is_err());
        let huge = vec![
            (1, "{".to_string()),
            (2, "\"nccl_version\": \"x\",".to_string()),
        ]
        .into_iter()
        .chain((3..).take(3000).map(|i| (i, "x".repeat(1 << 15))))
        .collect::<Vec<_>>();
        assert!(read(&huge).unwrap_err().contains("longer than"));
    }

    #[test]
    fn a_report_whose_start_left_memory_is_not_guessed_at() {
        let text = doc(&four(2), &[]);
        let l = lines(&text);
        let cut = &l[3..];
        assert!(locate(cut).is_err());
        assert_eq!(locate(&lines("plain\nlog\n")), Ok(None));
    }

    #[test]
    fn the_document_on_one_line_is_read_too() {
        let one: String = doc(&four(1), &[]).lines().map(str::trim).collect();
        let r = report_of(&one).unwrap();
        let low = r.comms[0].ops[0]
            .1
            .iter()
            .find(|g| g.value == "41")
            .unwrap();
        assert_eq!(low.members[0].comm_rank, Some(1));
    }
}
