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
use std::collections::{BTreeMap, BTreeSet};

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
    /// The process the finding is about when its unit is one process (no known host).
    pub source: Option<u32>,
}

/// How much a difference in `key` says about a failure, for a clear minority; a pair that
/// differs gets half. The reasons, with the cases behind them, are in the headers of the
/// rules that use it (`identity_outlier`, `identity_pair`).
pub fn key_weight(key: &str) -> i32 {
    match key {
        "nccl_version" | "transport" | "net_transport" | "net_plugin" | "ip_family" => 60,
        "ofi_provider" => 60,
        "libfabric_version" => 40,
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
        "ofi_provider" => "libfabric provider".into(),
        "libfabric_version" => "libfabric version".into(),
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

/// One value of one key on one comparison unit: the value, the processes that showed it (a
/// machine's count may pass the listed ones), the sighting that shows it, and the process the
/// unit is when it is one (a process with no known host).
#[derive(Debug, Clone)]
struct Val {
    value: String,
    sources: BTreeSet<u32>,
    n: u32,
    sighting: u32,
    own: Option<u32>,
}

impl Val {
    fn count(&self) -> u32 {
        self.n.max(self.sources.len() as u32)
    }
}

/// Values of one key on one unit, first seen first.
type Values = Vec<Val>;

/// The compared keys of the job, each with its values per unit: a host, or a process with no
/// known host (by its file).
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
            // Processes with no known host are units of their own (or join their host).
            let units: Vec<(Machine, BTreeSet<u32>, u32, Option<u32>)> =
                if *machine == Machine::Unnamed {
                    s.sources
                        .iter()
                        .map(|&src| {
                            let unit = v.host_of(src).map_or_else(
                                || Machine::File(v.job.sources[src as usize].origin.clone()),
                                Machine::Host,
                            );
                            let own = matches!(unit, Machine::File(_)).then_some(src);
                            (unit, BTreeSet::from([src]), 1, own)
                        })
                        .collect()
                } else {
                    let srcs = s.sources.iter().copied().collect();
                    vec![(machine.clone(), srcs, s.n_sources, None)]
                };
            for (k, val) in derived {
                for (unit, srcs, n, own) in &units {
                    let vals = out
                        .entry(k.clone())
                        .or_default()
                        .entry(unit.clone())
                        .or_default();
                    // Two addresses of one process in one subnet are still one process.
                    match vals.iter_mut().find(|x| x.value == val) {
                        Some(e) => {
                            e.sources.extend(srcs.iter().copied());
                            e.n = e.n.max(*n);
                            if stands_better(v, i, e.sighting) {
                                e.sighting = i;
                            }
                        }
                        None => vals.push(Val {
                            value: val.clone(),
                            sources: srcs.clone(),
                            n: *n,
                            sighting: i,
                            own: *own,
                        }),
                    }
                }
            }
        }
    }
    // First seen first, whatever order the table's map gives.
    let seq = |x: &Val| t.sightings[x.sighting as usize].obs.seq;
    for units in out.values_mut() {
        for vals in units.values_mut() {
            vals.sort_by_key(|x| (seq(x), x.sighting));
        }
    }
    out
}

/// Whether sighting `a` stands for a value better than `b`: it kept its line, its line states
/// the value more plainly (NCCL's banner over torch's echo of it), it came first.
fn stands_better(v: &View, a: u32, b: u32) -> bool {
    let key = |i: u32| {
        let s = &v.job.identity.sightings[i as usize];
        (
            !s.obs.line.is_empty(),
            s.weight,
            std::cmp::Reverse(s.obs.seq),
        )
    };
    key(a) > key(b)
}

/// A unit's own value: the one most of its processes showed, the first of equals.
fn own_value(vals: &Values) -> &Val {
    let best = vals.iter().map(Val::count).max().unwrap_or(0);
    vals.iter()
        .find(|v| v.count() == best)
        .expect("a unit with a key has a value")
}

/// Every finding of the job, strongest key first.
pub fn findings(v: &View) -> Vec<Finding> {
    let mut out = Vec::new();
    for (key, machines) in compared(v) {
        across_machines(&key, &machines, &mut out);
        if !key.starts_with("env:") {
            for (m, vals) in &machines {
                within_machine(&key, m, vals, &mut out);
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
    let own: Vec<(&Machine, &Val)> = machines
        .iter()
        .map(|(m, vals)| (m, own_value(vals)))
        .collect();
    let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, x) in &own {
        *votes.entry(x.value.as_str()).or_default() += 1;
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
    let odd: Vec<&(&Machine, &Val)> = own.iter().filter(|(_, x)| x.value != major).collect();
    let unit = if own.iter().all(|(m, _)| matches!(m, Machine::File(_))) {
        "processes"
    } else {
        "hosts"
    };
    if !tied && m >= 2 && m >= 2 * odd.len() {
        let others = format!("{major} on {m} {unit}");
        for (mach, x) in odd {
            out.push(Finding {
                key: key.to_string(),
                machine: (*mach).clone(),
                value: x.value.clone(),
                others: others.clone(),
                sighting: x.sighting,
                clear: true,
                source: x.own,
            });
        }
    } else if own.len() == 2 {
        for (i, (mach, x)) in own.iter().enumerate() {
            let other = &own[1 - i].1.value;
            out.push(Finding {
                key: key.to_string(),
                machine: (*mach).clone(),
                value: x.value.clone(),
                others: format!("{other} on the other one"),
                sighting: x.sighting,
                clear: false,
                source: x.own,
            });
        }
    }
}

/// Processes of one machine that disagree: a clear minority when at least twice as many
/// processes agree on the other value, else (one against one) both. A process that lists
/// several values (NCCL 2.3's one `NET : Using interface` line per interface) disagrees with
/// nobody.
fn within_machine(key: &str, m: &Machine, vals: &Values, out: &mut Vec<Finding>) {
    if vals.len() != 2 {
        return;
    }
    let (a, b) = (&vals[0], &vals[1]);
    if a.sources.iter().any(|s| b.sources.contains(s)) {
        return;
    }
    let (major, minor) = if a.count() >= b.count() {
        (a, b)
    } else {
        (b, a)
    };
    let (nj, nm) = (major.count(), minor.count());
    // The unit is one process: the value's own process stands for it.
    let own = |x: &Val| x.sources.iter().next().copied();
    if nj >= 2 && nj >= 2 * nm {
        out.push(Finding {
            key: key.to_string(),
            machine: m.clone(),
            value: minor.value.clone(),
            others: format!("{} on {nj} other processes of this host", major.value),
            sighting: minor.sighting,
            clear: true,
            source: own(minor),
        });
    } else if nj == 1 && nm == 1 {
        for (x, y) in [(a, b), (b, a)] {
            out.push(Finding {
                key: key.to_string(),
                machine: m.clone(),
                value: x.value.clone(),
                others: format!("{} on another process of this host", y.value),
                sighting: x.sighting,
                clear: false,
                source: own(x),
            });
        }
    }
}

fn env_set_on_few(v: &View, out: &mut Vec<Finding>) {
    let t = &v.job.identity;
    // A setting missing from a machine only counts when nothing was left unrecorded.
    if t.dropped > 0 {
        return;
    }
    // Machines that print settings at all, and per variable the machines that set it.
    let mut printing: BTreeMap<&Machine, ()> = BTreeMap::new();
    let mut set: BTreeMap<&str, Vec<(&Machine, u32)>> = BTreeMap::new();
    for (m, key, idxs) in t.slots() {
        let name = t.key_name(key);
        if name.starts_with("env:") && *m != Machine::Unnamed {
            printing.insert(m, ());
            if let Some(&first) = idxs.first() {
                set.entry(name).or_default().push((m, first));
            }
        }
    }
    for (name, mut on) in set {
        on.sort();
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
                source: None,
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
