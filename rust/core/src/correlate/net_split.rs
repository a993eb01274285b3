//! Machines of one job on different NCCL networks. Every process picks its network once at
//! init (`Using network IB`, `Using network Socket`, a plugin's name) and two processes on
//! different ones cannot connect: NCCL 2.27 and later say so (`wrong type 3 != 4`), earlier
//! releases hang at the first collective across the two machines, often with no error line
//! at all. So a job whose machines name different networks is broken even where nothing
//! failed in view; the odd machine is where the network did not come up as on the others.
//!
//! The odd machine holds the value fewest machines hold; between two equal sides, the one on
//! sockets (NCCL's fallback when IB or a plugin did not load). Its root line is the first
//! warning its process printed before choosing (`Failed to open libibverbs.so[.1]`, `NET/IB :
//! No device found`), which says why, else the `Using network` line itself.
//!
//! Asked only at the end of a job's input (its final diagnosis), where no incident shows a
//! failure (a benign warning's may be open: the very warning that explains the split): where
//! something failed, the failure's incident is diagnosed and `identity_outlier` weighs the
//! same difference; a stream that shows the split before its failure must not open an
//! incident the failure then joins.
//!
//! Case: nccl#690 (held-out set 85: `x0` on Socket after `Failed to open libibverbs.so[.1]`,
//! `x1` on IB; the two-node job hung).

use crate::identity::Machine;
use crate::job::{ContextObs, Job};
use crate::prefix::{self, Level};
use std::collections::BTreeMap;

/// Lines before the `Using network` line searched for the warning that explains it.
const REASON_LINES: usize = 200;

/// The odd machine's network line (or the warning that explains it) and both values.
#[derive(Debug, Clone)]
pub struct NetSplit {
    pub src: u32,
    pub text: String,
    pub seq: u64,
    pub line_no: u64,
    pub ts_ms: Option<i64>,
    pub odd_network: String,
    pub job_network: String,
}

/// The machine whose network differs from the rest of the job's, if any.
pub fn odd_machine(job: &Job, year: i32) -> Option<NetSplit> {
    let t = &job.identity;
    let key = t.key_id("transport")?;
    // value -> the first sighting of it on each machine
    let mut by_value: BTreeMap<String, Vec<&ContextObs>> = BTreeMap::new();
    for (machine, k, idx) in t.slots() {
        if k != key || *machine == Machine::Unnamed {
            continue;
        }
        let [only] = idx else {
            continue; // a machine that named two networks (two runs) decides nothing
        };
        let obs = &t.sightings[*only as usize].obs;
        by_value
            .entry(obs.value.trim().to_string())
            .or_default()
            .push(obs);
    }
    if by_value.len() != 2 {
        return None;
    }
    let mut sides: Vec<(String, Vec<&ContextObs>)> = by_value.into_iter().collect();
    sides.sort_by_key(|(value, machines)| (machines.len(), !is_socket(value)));
    let (odd, job_side) = (&sides[0], &sides[1]);
    if odd.1.len() == job_side.1.len() && is_socket(odd.0.as_str()) == is_socket(&job_side.0) {
        return None;
    }
    let obs = odd.1.iter().min_by_key(|o| o.seq)?;
    root_of(job, obs, year, &odd.0, &job_side.0)
}

fn is_socket(value: &str) -> bool {
    value.to_ascii_lowercase().contains("socket")
}

/// The first warning of the process before its network line, else that line (unless the
/// table kept no line for it: a value many machines share).
fn root_of(job: &Job, obs: &ContextObs, year: i32, odd: &str, others: &str) -> Option<NetSplit> {
    let reason = job.sources[obs.source as usize]
        .ring
        .before(obs.seq, REASON_LINES)
        .into_iter()
        .find(|l| prefix::peel(&l.text, year).level >= Level::Warn);
    let (text, seq, ts_ms, line_no) = match reason {
        Some(l) => {
            let line_no = line_no_of(job, obs.source, l.seq).unwrap_or(obs.line_no);
            (l.text, l.seq, l.ts_ms, line_no)
        }
        None if obs.line.is_empty() => return None,
        None => (obs.line.to_string(), obs.seq, obs.ts_ms, obs.line_no),
    };
    Some(NetSplit {
        src: obs.source,
        text,
        seq,
        line_no,
        ts_ms,
        odd_network: odd.to_string(),
        job_network: others.to_string(),
    })
}

/// Where in its file the line `seq` of process `src` is, as a hit or a context line kept it
/// (the ring keeps no line numbers).
fn line_no_of(job: &Job, src: u32, seq: u64) -> Option<u64> {
    let as_hit = job
        .hits
        .iter()
        .find(|h| h.source == src && h.seq == seq)
        .map(|h| h.line_no);
    as_hit.or_else(|| {
        job.context
            .iter()
            .find(|((_, s), o)| *s == src && o.seq == seq)
            .map(|(_, o)| o.line_no)
    })
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{assert_finding, diagnose_files};

    const FINDING: &str = "network_differs_between_machines";
    const NO_VERBS: &str = "x0:26431:26431 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open \
        libibverbs.so[.1]";

    #[test]
    fn the_machine_on_sockets_is_odd_and_its_warning_says_why() {
        let d = diagnose_files(&[
            (
                "x0.log",
                &format!(
                    "{NO_VERBS}\n\nx0:26431:26431 [0] NCCL INFO NET/Socket : Using \
                     [0]eno1:10.0.0.2<0>\nx0:26431:26431 [0] NCCL INFO Using network Socket\n"
                ),
            ),
            (
                "x1.log",
                "x1:870114:870114 [1] NCCL INFO Using network IB\n",
            ),
        ]);
        assert_finding(&d, NO_VERBS, FINDING, "network Socket");
        let origin = d[0].json["root_cause"]["origin"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(origin.ends_with("x0.log:1"), "{origin}");
    }

    #[test]
    fn the_minority_machine_is_odd_whatever_its_network() {
        let ib = |h: &str| format!("{h}:7:7 [0] NCCL INFO Using network Socket\n");
        let odd = "n3:7:7 [0] NCCL INFO Using network IB";
        let d = diagnose_files(&[
            ("n1.log", &ib("n1")),
            ("n2.log", &ib("n2")),
            ("n3.log", &format!("{odd}\n")),
        ]);
        assert_finding(&d, odd, FINDING, "network IB");
    }

    #[test]
    fn one_network_everywhere_is_no_finding() {
        let line = |h: &str| format!("{h}:7:7 [0] NCCL INFO Using network IB\n");
        let d = diagnose_files(&[("n1.log", &line("n1")), ("n2.log", &line("n2"))]);
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn two_plugins_in_equal_numbers_decide_nothing() {
        let line = |h: &str, n: &str| format!("{h}:7:7 [0] NCCL INFO Using network {n}\n");
        let d = diagnose_files(&[
            ("n1.log", &line("n1", "IB")),
            ("n2.log", &line("n2", "AWS Libfabric")),
        ]);
        assert!(d.is_empty(), "{d:?}");
    }
}
