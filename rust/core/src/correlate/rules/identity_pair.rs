//! Two machines that differ: when only two hosts (or two processes of one host, such as two
//! machines that share a host name, or two runs posted side by side) show a key and their
//! values differ, the logs cannot say which one is wrong. In a job that failed both are
//! suspects, at half the weight `identity_outlier` gives a clear minority (30 for a version,
//! network or transport, 20 for a setting, 17 for a driver, ...), so that a cause either of
//! them printed, or the failing lines pointing at one of them (+20), decides; left alone they
//! tie, and the diagnosis says so with a lower confidence.
//!
//! Cases: nccl-tests #188 (two machines both named `user`: one side on NET/Socket, the other
//! on NET/IB, the accept side's `wrong type` warning decides, see `transport_mismatch`);
//! NCCL #286 and #1634 (two nodes, one with another interface name or a plugin the other
//! lacks: the failure itself does not say which node is wrong).

use super::identity_outlier::apply_finding;
use super::Scope;
use crate::correlate::board::Board;
use crate::correlate::identity::{findings, key_weight};
use crate::correlate::view::View;

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    if v.job.identity.is_empty() {
        return;
    }
    for f in findings(v).iter().filter(|f| !f.clear) {
        apply_finding(
            v,
            scope,
            board,
            f,
            ("identity_pair", key_weight(&f.key) / 2),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::diagnose_files;

    fn node(name: &str, pid: u32, ver: &str) -> String {
        format!(
            "{name}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:10.4.0.{}<0>\n\
             {name}:{pid}:{pid} [0] NCCL INFO NCCL version {ver}+cuda12.1\n",
            pid / 100
        )
    }

    #[test]
    fn two_hosts_that_differ_are_both_suspects_at_lower_confidence() {
        let fail = "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1331, \
                    invalid usage, NCCL version 2.19.3";
        let a = format!("{}{fail}\n", node("left", 100, "2.19.3"));
        let b = node("right", 200, "2.17.1");
        let out = diagnose_files(&[("left.log", &a), ("right.log", &b)]);
        let d = &out[0].json;
        let suspects = d["suspects"].to_string();
        assert!(suspects.contains("identity_pair"), "{suspects}");
        assert!(
            suspects.contains("\"left\"") && suspects.contains("\"right\""),
            "{suspects}"
        );
        assert!(out[0].confidence <= 0.6, "{}", out[0].confidence);
    }

    #[test]
    fn the_host_the_failures_name_is_the_one() {
        let a = format!(
            "{}left:100:150 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to \
             10.4.0.2<43211> failed : Connection refused\n",
            node("left", 100, "2.19.3")
        );
        let b = node("right", 200, "2.17.1");
        let out = diagnose_files(&[("left.log", &a), ("right.log", &b)]);
        assert_eq!(out[0].json["root_cause"]["host"], "right");
    }
}
