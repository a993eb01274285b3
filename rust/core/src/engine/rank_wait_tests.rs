//! A first diagnosis whose root cause names no rank waits a little for the line that names it:
//! a kernel Xid line names a pid, and the process's NCCL init line, which maps that pid to a
//! rank, may arrive a moment later. The wait is bounded: with no such line, the diagnosis goes
//! out without the rank once the grace has passed.

use super::*;
use crate::correlate::testkit::shipped_catalog;

const SETTLE_MS: i64 = 5_000;
const XID: &[u8] = b"[Thu Dec  3 10:00:10 2026] NVRM: Xid (PCI:0000:1b:00): 79, pid=200, \
                     GPU has fallen off the bus.\n";

fn init_line(pid: u32, rank: u32) -> Vec<u8> {
    format!(
        "node-a:{pid}:{pid} [{rank}] NCCL INFO comm 0x5{rank} rank {rank} nranks 2 cudaDev \
         {rank} busId {rank}b000 - Init COMPLETE\n"
    )
    .into_bytes()
}

fn engine() -> Engine {
    let cfg = Config {
        settle_ms: SETTLE_MS,
        ..Config::default()
    };
    Engine::new(Arc::new(shipped_catalog()), cfg)
}

/// Feeds rank 0's init and the Xid on node-a at `t0` (wall time = event time here).
fn xid_job(e: &mut Engine, t0: i64) {
    e.poll(t0);
    let hints = StreamHints {
        host: Some("node-a".into()),
        ..StreamHints::default()
    };
    let r0 = e.open_stream("j", "rank0.log", hints.clone());
    e.feed(r0, &init_line(100, 0), Some(t0));
    let kern = e.open_stream("j", "kern.log", hints);
    e.feed(kern, XID, Some(t0));
}

#[test]
fn the_first_diagnosis_waits_for_the_rank_learnt_within_the_grace() {
    let mut e = engine();
    let t0 = 1_764_756_010_000; // 2026-12-03 10:00:10 UTC, the Xid line's own time
    xid_job(&mut e, t0);
    assert!(
        e.poll(t0 + SETTLE_MS + 500).is_empty(),
        "published with no rank"
    );
    let r1 = e.open_stream("j", "rank1.log", StreamHints::default());
    e.feed(r1, &init_line(200, 1), Some(t0 + SETTLE_MS + 700));
    // Due again once the job has been quiet for a settle window after that line.
    let first = e.poll(t0 + 2 * SETTLE_MS + 1_000);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].json["root_cause"]["rank"], 1);
}

#[test]
fn without_the_rank_the_diagnosis_goes_out_after_the_grace() {
    let mut e = engine();
    let t0 = 1_764_756_010_000;
    xid_job(&mut e, t0);
    assert!(e.poll(t0 + SETTLE_MS + 500).is_empty());
    let late = e.poll(t0 + 2 * SETTLE_MS + 500);
    assert_eq!(late.len(), 1);
    assert!(late[0].json["root_cause"]["rank"].is_null());
}
