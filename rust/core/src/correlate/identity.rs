//! The identity table compared: for each key (NCCL version, driver, network, the transport
//! channels use between nodes, the interface's subnet and address family, GPU model, torch
//! version, `NCCL_*` settings), the machines whose value differs from the rest of the job.
//!
//! Machines vote, not processes: an excerpt that shows eight processes of one host and one of
//! each other host must not make the eight the majority. A machine's value is the one most of
//! its processes showed. Within one machine, processes can still disagree (two machines that
//! share a host name, two runs posted side by side): then its processes are compared.
//!
//! A finding is `clear` when a majority of at least two machines, twice as many as the odd
//! ones, agrees; when only two machines (or two processes of one) show the key and they
//! differ, both are findings, neither clear: the logs alone cannot say which one is wrong.

use super::util::subnet_of;
use super::view::View;
use crate::identity::{ip_family, Machine, Sighting};
use std::collections::BTreeMap;

/// One machine (or process) whose value of a key differs from the job's.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The compared key: a table key, or `subnet` / `ip_family` derived from `ip`.
    pub key: String,
    pub machine: Machine,
    /// Its value, as compared.
    pub value: String,
    /// What the rest of the job shows (the majority, or the other machine's value).
    pub others: String,
    /// The sighting whose line shows the value (index into the identity table).
    pub sighting: u32,
    /// A clear minority (else one of two that differ).
    pub clear: bool,
}

/// How much a difference in `key` says about a failure, for a clear minority; a pair that
/// differs gets half. The reasons, with the cases behind them, are in the headers of the
/// rules that use it (`identity_outlier`, `identity_pair`).
pub fn key_weight(key: &str) -> i32 {
    match key {
        "nccl_version" | "transport" | "net_transport" | "net_plugin" | "ip_family" => 60,
        "subnet" => 50,
        "nccl_cuda" | "torch_version" => 40,
        k if k.starts_with("env:") => 40,
        "cuda_driver" => 35,
        "iface" | "gpu_model" => 25,
        _ => 0,
    }
}

/// A key as the report names it.
pub fn key_label(key: &str) -> String {
    match key {
        "nccl_version" => "NCCL version".into(),
        "nccl_cuda" => "CUDA version NCCL was built for".into(),
        "cuda_driver" => "CUDA driver version".into(),
        "transport" => "NCCL network".into(),
        "net_transport" => "transport between nodes".into(),
        "net_plugin" => "NCCL net plugin".into(),
        "ip_family" => "address family".into(),
        "subnet" => "subnet".into(),
        "iface" => "interface".into(),
        "gpu_model" => "GPU model".into(),
        "torch_version" => "torch version".into(),
        k => match k.strip_prefix("env:") {
            Some(var) => var.to_string(),
            None => k.to_string(),
        },
    }
}

/// Values of one key on one machine: (value, processes, sighting), first seen first.
type Values = Vec<(String, u32, u32)>;

/// The compared keys of the job, each with its values per machine.
fn compared(v: &View) -> BTreeMap<String, BTreeMap<Machine, Values>> {
    let t = &v.job.identity;
    let mut out: BTreeMap<String, BTreeMap<Machine, Values>> = BTreeMap::new();
    for (machine, key, idxs) in t.slots() {
        let name = t.key_name(key);
        for &i in idxs {
            let s: &Sighting = &t.sightings[i as usize];
            let derived: Vec<(String, String)> = if name == "ip" {
                [
                    subnet_of(&s.obs.value).map(|x| ("subnet".to_string(), x)),
                    ip_family(&s.obs.value).map(|x| ("ip_family".to_string(), x.to_string())),
                ]
                .into_iter()
                .flatten()
                .collect()
            } else if key_weight(name) > 0 {
                vec![(name.to_string(), s.obs.value.clone())]
            } else {
                Vec::new()
            };
            for (k, val) in derived {
                let vals = out
                    .entry(k)
                    .or_default()
                    .entry(machine.clone())
                    .or_default();
                // Two addresses of one process in one subnet are still one process.
                match vals.iter_mut().find(|(x, _, _)| *x == val) {
                    Some(e) => e.1 = e.1.max(s.n_sources),
                    None => vals.push((val, s.n_sources, i)),
                }
            }
        }
    }
    out
}

/// A machine's own value: the one most of its processes showed, the first of equals.
fn own_value(vals: &Values) -> &(String, u32, u32) {
    let best = vals.iter().map(|v| v.1).max().unwrap_or(0);
    vals.iter()
        .find(|v| v.1 == best)
        .expect("a machine with a key has a value")
}

/// Every finding of the job, strongest key first.
pub fn findings(v: &View) -> Vec<Finding> {
    let mut out = Vec::new();
    for (key, machines) in compared(v) {
        across_machines(&key, &machines, &mut out);
        if !key.starts_with("env:") {
            for (m, vals) in &machines {
                within_machine(v, &key, m, vals, &mut out);
            }
        }
    }
    // Settings: a variable set on a minority of the machines that print their settings,
    // absent on the rest.
    env_set_on_few(v, &mut out);
    out.sort_by(|a, b| {
        key_weight(&b.key)
            .cmp(&key_weight(&a.key))
            .then(b.clear.cmp(&a.clear))
            .then(a.key.cmp(&b.key))
            .then(a.machine.cmp(&b.machine))
    });
    out
}

fn across_machines(key: &str, machines: &BTreeMap<Machine, Values>, out: &mut Vec<Finding>) {
    if machines.len() < 2 {
        return;
    }
    let own: Vec<(&Machine, &(String, u32, u32))> = machines
        .iter()
        .map(|(m, vals)| (m, own_value(vals)))
        .collect();
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, (val, _, _)) in &own {
        *votes.entry(val.as_str()).or_default() += 1;
    }
    if votes.len() < 2 {
        return;
    }
    let (major, m) = votes
        .iter()
        .max_by_key(|(_, c)| **c)
        .map(|(v, c)| (*v, *c))
        .unwrap_or_default();
    let tied = votes.values().filter(|&&c| c == m).count() > 1;
    let odd: Vec<&(&Machine, &(String, u32, u32))> =
        own.iter().filter(|(_, (val, _, _))| val != major).collect();
    if !tied && m >= 2 && m >= 2 * odd.len() {
        let others = format!("{major} on {m} hosts");
        for (mach, (val, _, s)) in odd {
            out.push(Finding {
                key: key.to_string(),
                machine: (*mach).clone(),
                value: val.clone(),
                others: others.clone(),
                sighting: *s,
                clear: true,
            });
        }
    } else if own.len() == 2 {
        for (i, (mach, (val, _, s))) in own.iter().enumerate() {
            let other = &own[1 - i].1 .0;
            out.push(Finding {
                key: key.to_string(),
                machine: (*mach).clone(),
                value: val.clone(),
                others: format!("{other} on the other host"),
                sighting: *s,
                clear: false,
            });
        }
    }
}

/// Processes of one machine that disagree: a clear minority when at least twice as many
/// processes agree on the other value, else (one against one) both. A process that lists
/// several values (NCCL 2.3's one `NET : Using interface` line per interface) disagrees with
/// nobody.
fn within_machine(v: &View, key: &str, m: &Machine, vals: &Values, out: &mut Vec<Finding>) {
    if vals.len() != 2 {
        return;
    }
    let (a, b) = (&vals[0], &vals[1]);
    let srcs = |i: u32| &v.job.identity.sightings[i as usize].sources;
    if srcs(a.2).iter().any(|s| srcs(b.2).contains(s)) {
        return;
    }
    let (major, minor) = if a.1 >= b.1 { (a, b) } else { (b, a) };
    if major.1 >= 2 && major.1 >= 2 * minor.1 {
        out.push(Finding {
            key: key.to_string(),
            machine: m.clone(),
            value: minor.0.clone(),
            others: format!("{} on {} other processes of this host", major.0, major.1),
            sighting: minor.2,
            clear: true,
        });
    } else if major.1 == 1 && minor.1 == 1 {
        for (x, y) in [(a, b), (b, a)] {
            out.push(Finding {
                key: key.to_string(),
                machine: m.clone(),
                value: x.0.clone(),
                others: format!("{} on another process of this host", y.0),
                sighting: x.2,
                clear: false,
            });
        }
    }
}

fn env_set_on_few(v: &View, out: &mut Vec<Finding>) {
    let t = &v.job.identity;
    // Machines that print settings at all, and per variable the machines that set it.
    let mut printing: BTreeMap<&Machine, ()> = BTreeMap::new();
    let mut set: BTreeMap<&str, Vec<(&Machine, u32)>> = BTreeMap::new();
    for (m, key, idxs) in t.slots() {
        let name = t.key_name(key);
        if name.starts_with("env:") {
            printing.insert(m, ());
            if let Some(&first) = idxs.first() {
                set.entry(name).or_default().push((m, first));
            }
        }
    }
    for (name, on) in set {
        let unset = printing.len() - on.len();
        if on.is_empty() || unset < 2 || unset < 2 * on.len() {
            continue;
        }
        for (m, s) in on {
            out.push(Finding {
                key: name.to_string(),
                machine: m.clone(),
                value: t.sightings[s as usize].obs.value.clone(),
                others: format!("not set on {unset} hosts"),
                sighting: s,
                clear: true,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::diagnose_files;

    fn host_lines(host: &str, pid: u32, ver: &str, net: &str) -> String {
        format!(
            "{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using eth0:10.0.0.{}<0>\n\
             {host}:{pid}:{pid} [0] NCCL INFO NCCL version {ver}+cuda12.2\n\
             {host}:{pid}:{p2} [0] NCCL INFO Using network {net}\n",
            pid % 200,
            p2 = pid + 40,
        )
    }

    #[test]
    fn machines_vote_not_processes() {
        // Host a shows three processes, b and c one each; a is the odd one.
        let mut a = String::new();
        for p in [100, 101, 102] {
            a.push_str(&host_lines("a", p, "2.18.3", "IB"));
        }
        let b = host_lines("b", 200, "2.21.5", "IB");
        let c = host_lines("c", 300, "2.21.5", "IB");
        let fail = "a:100:140 [0] init.cc:100 NCCL WARN Cuda failure 'unspecified'\n";
        let d = diagnose_files(&[
            ("a.log", &format!("{a}{fail}")),
            ("b.log", &b),
            ("c.log", &c),
        ]);
        let notes = d[0].json["odd_context"].to_string();
        assert!(notes.contains("2.18.3"), "{notes}");
    }
}
