//! The odd host: in a job that failed, a machine (or a process) whose own account of itself
//! differs from a clear majority of the job (`correlate::identity`) is where the fault is, and
//! its version, network, interface or settings line, often in another file than the failure,
//! becomes its root line. Jobs that did not fail never get here (no incident).
//!
//! Weights, by what the difference is (a clear minority; `identity_pair` takes half):
//! - 60: NCCL version (a host that loaded another libnccl fails init with invalid usage or
//!   hangs in the first collective: the generated `version_mismatch` fleet, NCCL #354 where
//!   the maintainer's first question was different NCCL versions per node), network or
//!   inter-node transport or net plugin (one node on NET/Socket while the others use IB:
//!   nccl-tests #188, `socketFinalizeAccept: wrong type`; HPC-X's plugin on part of the nodes:
//!   NCCL #1634, a hang), address family (one host advertising IPv6 while the others use
//!   IPv4: NCCL #224's `address family` failures). These beat every generic NCCL cause
//!   (30-55: error-return traces, internal errors, timeouts as symptoms) but not a specific
//!   local fault another host printed (65+: CUDA errors, OOM, ECC, IB completion errors).
//! - 50: the subnet of the advertised address (a host on another network; `docker0`'s
//!   172.17/16 in the failure hub's case).
//! - 40: the CUDA version NCCL was built for, torch's version, an `NCCL_*` setting (a host
//!   where NCCL_IB_DISABLE=1 or another NCCL_SOCKET_IFNAME was set): often the reason, but
//!   mixed builds and per-host settings also run fine.
//! - 35: the CUDA driver (drivers differ across healthy fleets: the `healthy_noisy` fleet runs
//!   two; a driver too old for the runtime fails on its own host with a CUDA error, which
//!   then joins this evidence).
//! - 25: the interface name or GPU model (hosts name NICs differently, fleets mix models).
//! - +20 when the failing lines point at that machine (an address, host or rank they name):
//!   the peers failed to reach it (the failure hub's `Connect to 172.17.0.1 failed`).
//! - +30 when a cause of the incident lists the key in `blames_outlier` (a failure of exactly
//!   the kind that difference makes: `Mismatched NCCL version detected`), plus that cause's
//!   weight on a machine that printed no cause itself, so that its line, not the witnesses',
//!   is the root.
//!
//! The identity line replaces the candidate's own cause line as its root only when the
//! evidence here outweighs that cause (a host with an odd driver whose own CUDA error names
//! the failure keeps the CUDA error as its root).

use super::Scope;
use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::identity::{findings, key_label, key_weight, Finding};
use crate::correlate::view::{View, Who};
use crate::identity::Machine;
use crate::report::OddContext;

/// Cause hits of the incident whose signature blames configuration outliers.
pub fn blaming_causes(v: &View, hits: &[usize]) -> Vec<usize> {
    hits.iter()
        .copied()
        .filter(|&i| {
            v.sig(v.hit(i))
                .is_some_and(|s| s.role == Role::Cause && !s.blames_outlier.is_empty())
        })
        .collect()
}

/// The strongest cause of the incident that blames `key` (weight, signature).
fn blamed_by(v: &View, blaming: &[usize], key: &str) -> Option<(u8, u16)> {
    let field = key.split(':').next().unwrap_or(key);
    blaming
        .iter()
        .filter_map(|&i| {
            let h = v.hit(i);
            let s = v.sig(h)?;
            s.blames_outlier
                .iter()
                .any(|f| f == field || (f == "env" && key.starts_with("env:")))
                .then(|| (s.weight, h.sig.unwrap_or_default()))
        })
        .max_by_key(|(w, _)| *w)
}

/// Whether a failing line of the incident names the machine (by address, host or rank).
pub fn named_by_failures(v: &View, scope: &Scope, m: &Machine) -> bool {
    let Machine::Host(host) = m else {
        return false;
    };
    scope.hits.iter().any(|&i| {
        let h = v.hit(i);
        v.host_of(h.source) != Some(*host)
            && v.named(h).iter().any(|w| v.who_host(*w) == Some(*host))
    })
}

/// The per-process context field a key is read from, where the job keeps one per process.
fn context_field(key: &str) -> Option<&'static str> {
    Some(match key {
        "subnet" | "ip_family" => "ip",
        "iface" => "iface",
        "nccl_version" => "nccl_version",
        "cuda_driver" => "cuda_driver",
        "transport" => "transport",
        _ => return None,
    })
}

/// The candidate a finding is about and the line that stands for it: the process the finding
/// names, else the machine's lowest rank that showed the value (as `bad_interface` picks it),
/// with that process's own line where the job keeps one per process, else the line the table
/// kept (none for a value most machines share: it stands for no root).
pub fn candidate(v: &View, f: &Finding) -> (Who, Option<crate::job::HostId>, u32, Option<LineRef>) {
    let s = &v.job.identity.sightings[f.sighting as usize];
    let kept = (!s.obs.line.is_empty()).then_some(LineRef::Identity(f.sighting));
    let host = match &f.machine {
        Machine::Host(h) => Some(*h),
        Machine::Unnamed | Machine::File(_) => f.source.and_then(|x| v.host_of(x)),
    };
    // A line that describes another host (nccl-tests lists every rank's GPU) stands for
    // that host, not for the process that printed it.
    if let (Machine::Host(h), Some(p)) = (&f.machine, v.host_of(s.obs.source)) {
        if *h != p && f.source.is_none() {
            return (Who::Host(*h), host, s.obs.source, kept);
        }
    }
    // Between processes of one rank (its stdout and stderr files, say), the one whose own
    // line states the value most specifically: not whichever was read first.
    let stated_by = |x: u32| {
        context_field(&f.key)
            .and_then(|field| v.job.context.get(&(field, x)))
            .map_or(0, |o| v.cat.signatures[o.sig as usize].weight)
    };
    let pick = f.source.unwrap_or_else(|| {
        s.sources
            .iter()
            .copied()
            .min_by_key(|&x| {
                let rank = v.rank_of(x).unwrap_or(u32::MAX);
                (rank, std::cmp::Reverse(stated_by(x)), x)
            })
            .unwrap_or(s.obs.source)
    });
    let own_line = context_field(&f.key)
        .filter(|field| v.job.context.contains_key(&(*field, pick)))
        .map(|field| LineRef::Context(pick, field));
    let (src, line) = match (own_line, kept) {
        // The process's own most specific line for the field, whichever line of it was read
        // first (a process's stdout and stderr reach the daemon in another order than files).
        (Some(l), _) => (pick, Some(l)),
        (_, Some(l)) if pick == s.obs.source || f.source.is_none() => (s.obs.source, Some(l)),
        (_, kept) => (pick, kept.filter(|_| pick == s.obs.source)),
    };
    let who = v.process(src);
    (who, host, src, line)
}

/// Puts one finding on the board under `rule` with `weight` (plus what the incident adds).
pub fn apply_finding(
    v: &View,
    scope: &Scope,
    board: &mut Board,
    f: &Finding,
    (rule, weight): (&'static str, i32),
) {
    let blaming = blaming_causes(v, scope.hits);
    let blamed = blamed_by(v, &blaming, &f.key);
    let linked = named_by_failures(v, scope, &f.machine);
    let (who, host, src, line) = candidate(v, f);
    let label = key_label(&f.key);
    let place = match (&f.machine, host) {
        (_, Some(h)) => v.host_name(h).to_string(),
        (Machine::File(file), None) => file.to_string(),
        (Machine::Host(h), None) => v.host_name(*h).to_string(),
        (Machine::Unnamed, None) => v.job.sources[src as usize].origin.to_string(),
    };
    let problem = if f.clear {
        format!("the rest of the job: {}", f.others)
    } else {
        format!(
            "{}; the logs do not say which of the two is wrong",
            f.others
        )
    };
    scope.notes.borrow_mut().push(OddContext {
        field: f.key.clone(),
        host: Some(place),
        value: f.value.clone(),
        problem,
        others: Some(f.others.clone()),
        named_by_failures: Some(linked),
        clear: Some(f.clear),
    });
    let c = board.cand(who, host);
    let own_cause = c.cause_weight as i32;
    let mut total = weight;
    let why = format!(
        "its {label} ({}) differs from the rest of the job ({})",
        f.value, f.others
    );
    board.add(who, host, rule, weight, why);
    if linked {
        total += 20;
        let why = "the failing lines point at this host".to_string();
        board.add(who, host, rule, 20, why);
    }
    if let Some((w, sig)) = blamed {
        let c = board.cand(who, host);
        let extra = if c.cause.is_none() { w as i32 } else { 0 };
        total += 30 + extra;
        let id = &v.cat.signatures[sig as usize].id;
        let why = format!("{id} is a failure a different {label} causes");
        board.add(who, host, rule, 30 + extra, why);
        let c = board.cand(who, host);
        c.cause_weight = c.cause_weight.max(w);
    }
    let c = board.cand(who, host);
    let Some(line) = line else { return };
    if c.config.is_none() && (c.cause.is_none() || total > own_cause) {
        let ts = match line {
            LineRef::Context(s, field) => v.job.context[&(field, s)].ts_ms,
            _ => v.job.identity.sightings[f.sighting as usize].obs.ts_ms,
        };
        c.config = Some((line, blamed.map(|(_, s)| s)));
        c.ts = v.corrected(src, ts);
    }
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    if v.job.identity.is_empty() {
        return;
    }
    for f in findings(v).iter().filter(|f| f.clear) {
        apply_finding(v, scope, board, f, ("identity_outlier", key_weight(&f.key)));
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose_files, root_line};

    /// The init lines a host prints, with its NCCL version and network.
    fn host(name: &str, pid: u32, ip: &str, ver: &str, net: &str) -> String {
        format!(
            "{name}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using ens5:{ip}<0>\n\
             {name}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 12040\n\
             {name}:{pid}:{pid} [0] NCCL INFO NCCL version {ver}+cuda12.4\n\
             {name}:{pid}:{t} [0] NCCL INFO Using network {net}\n\
             {name}:{pid}:{t} [0] NCCL INFO comm 0x7f01 rank {r} nranks 4 cudaDev 0 busId 1000 - Init COMPLETE\n",
            t = pid + 50,
            r = pid / 100 - 1,
        )
    }

    const TIMEOUT: &str = "[E ProcessGroupNCCL.cpp:475] [Rank 0] Watchdog caught collective \
        operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, \
        Timeout(ms)=600000) ran for 600012 milliseconds before timing out.";

    #[test]
    fn the_host_with_another_nccl_is_the_root_of_a_timeout() {
        let a = host("gpu-a", 100, "10.2.0.11", "2.21.5", "IB");
        let b = host("gpu-b", 200, "10.2.0.12", "2.21.5", "IB");
        let c = host("gpu-c", 300, "10.2.0.13", "2.18.3", "IB");
        let d = host("gpu-d", 400, "10.2.0.14", "2.21.5", "IB");
        let a = format!("{a}[rank0]:{TIMEOUT}\n");
        let out = diagnose_files(&[("a.log", &a), ("b.log", &b), ("c.log", &c), ("d.log", &d)]);
        assert_eq!(
            root_line(&out),
            "gpu-c:300:300 [0] NCCL INFO NCCL version 2.18.3+cuda12.4"
        );
        assert_eq!(out[0].json["root_cause"]["host"], "gpu-c");
        let ev = out[0].json["suspects"][0]["evidence"].to_string();
        assert!(ev.contains("identity_outlier"), "{ev}");
    }

    #[test]
    fn the_host_on_another_network_is_the_root() {
        let a = host("gpu-a", 100, "10.2.0.11", "2.21.5", "IB");
        let b = host("gpu-b", 200, "10.2.0.12", "2.21.5", "Socket");
        let c = host("gpu-c", 300, "10.2.0.13", "2.21.5", "IB");
        let a = format!("{a}[rank0]:{TIMEOUT}\n");
        let out = diagnose_files(&[("a.log", &a), ("b.log", &b), ("c.log", &c)]);
        assert_eq!(
            root_line(&out),
            "gpu-b:200:250 [0] NCCL INFO Using network Socket"
        );
    }

    #[test]
    fn an_odd_driver_alone_is_the_root_with_modest_confidence() {
        let a = host("gpu-a", 100, "10.2.0.11", "2.21.5", "IB");
        let b = host("gpu-b", 200, "10.2.0.12", "2.21.5", "IB")
            .replace("cudaDriverVersion 12040", "cudaDriverVersion 12020");
        let c = host("gpu-c", 300, "10.2.0.13", "2.21.5", "IB");
        let a = format!("{a}[rank0]:{TIMEOUT}\n");
        let out = diagnose_files(&[("a.log", &a), ("b.log", &b), ("c.log", &c)]);
        assert_eq!(
            root_line(&out),
            "gpu-b:200:200 [0] NCCL INFO cudaDriverVersion 12020"
        );
        assert_eq!(out[0].confidence, 0.6);
    }

    #[test]
    fn a_job_that_did_not_fail_reports_nothing() {
        // Hosts on two networks cannot connect at all: that split is a finding of its own
        // (`net_split`). Another NCCL on one host can still work, and nothing failed.
        let a = host("gpu-a", 100, "10.2.0.11", "2.21.5", "IB");
        let b = host("gpu-b", 200, "10.2.0.12", "2.21.5", "IB");
        let c = host("gpu-c", 300, "10.2.0.13", "2.18.3", "IB");
        let out = diagnose_files(&[("a.log", &a), ("b.log", &b), ("c.log", &c)]);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn a_specific_fault_elsewhere_outranks_an_odd_driver() {
        let a = host("gpu-a", 100, "10.2.0.11", "2.21.5", "IB");
        let b = host("gpu-b", 200, "10.2.0.12", "2.21.5", "IB");
        let c = host("gpu-c", 300, "10.2.0.13", "2.21.5", "IB")
            .replace("cudaDriverVersion 12040", "cudaDriverVersion 12080");
        let oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 \
                   has a total capacity of 79.15 GiB of which 1.02 GiB is free.";
        let a = format!("{a}[rank0]: {oom}\n");
        let out = diagnose_files(&[("a.log", &a), ("b.log", &b), ("c.log", &c)]);
        assert!(
            root_line(&out).contains("CUDA out of memory"),
            "{}",
            root_line(&out)
        );
    }

    #[test]
    fn a_setting_only_one_host_made_is_the_root() {
        let mut files = Vec::new();
        for (i, name) in ["n1", "n2", "n3", "n4"].iter().enumerate() {
            let pid = 100 * (i as u32 + 1);
            let mut text = host(name, pid, &format!("10.9.0.{}", i + 1), "2.21.5", "IB");
            text.push_str(&format!(
                "{name}:{pid}:{pid} [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens5\n"
            ));
            if i == 2 {
                text.push_str(&format!(
                    "{name}:{pid}:{pid} [0] NCCL INFO NCCL_PROTO set by environment to Simple\n"
                ));
            }
            if i == 0 {
                text.push_str(&format!("[rank0]:{TIMEOUT}\n"));
            }
            files.push((format!("{name}.log"), text));
        }
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        let out = diagnose_files(&refs);
        assert_eq!(
            root_line(&out),
            "n3:300:300 [0] NCCL INFO NCCL_PROTO set by environment to Simple"
        );
    }
}
