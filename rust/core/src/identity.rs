//! What each machine of a job says about itself: the NCCL build and the CUDA it targets, the
//! driver, the net plugin and network, the transport its channels use between nodes, the
//! interface and address it advertises, the GPU model, torch's version and the `NCCL_*`
//! settings it picked up. The engine records every distinct value once per machine (with the
//! first line that showed it and the processes that showed it), so the table grows with hosts
//! and settings, not with ranks or lines. `correlate::identity` compares machines.

use crate::job::{ContextObs, FastMap, HostId, Job};
use crate::memsize;
use std::sync::Arc;

/// Field names whose values are a process's identity. `env_var`/`env_value` come in pairs
/// (`NCCL_IB_DISABLE set by environment to 1`) and make the key `env:NAME`; `gpu_host` is not
/// a value but the machine a line describes when that is not its printer (nccl-tests prints
/// every rank's GPU from rank 0).
pub const IDENTITY_FIELDS: &[&str] = &[
    "nccl_version",
    "nccl_version_seen",
    "nccl_cuda",
    "cuda_driver",
    "net_plugin",
    "transport",
    "net_transport",
    "ofi_provider",
    "libfabric_version",
    "iface",
    "ip",
    "gpu_model",
    "torch_version",
    "env_var",
    "env_value",
    "gpu_host",
];

/// Settings whose value says nothing about the machine (how much NCCL logs).
const IGNORED_ENV_PREFIXES: &[&str] = &["NCCL_DEBUG", "TORCH_CPP_LOG", "TORCH_DISTRIBUTED_DEBUG"];

/// Distinct values kept per key and machine; beyond that a key varies per process and says
/// nothing about the machine.
const MAX_VALUES: usize = 8;
/// Processes listed per value of a host (the count goes on).
pub const MAX_SOURCES: usize = 64;
/// Processes listed per value of the processes with no known host (each is compared).
pub const MAX_UNNAMED_SOURCES: usize = 8192;
/// A value already seen on this many machines keeps no line for further machines: it is the
/// job's majority, and only a minority value or one of a pair stands as a root line.
const SHARED_VALUE_MACHINES: u32 = 3;
/// Values kept per job, over all machines and keys.
const MAX_SIGHTINGS: usize = 1 << 16;
/// Distinct keys per job (`env:` names come from the input).
const MAX_KEYS: usize = 512;

/// Where a value was seen: a host. Lines of processes whose host is not known (torch's own
/// lines in a per-rank file) are kept together under `Unnamed` and compared process by
/// process, each as the file it came from (`File`), or as its host once that is known.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Machine {
    Host(HostId),
    Unnamed,
    File(Arc<str>),
}

/// One value of one key on one machine.
#[derive(Debug, Clone)]
pub struct Sighting {
    pub machine: Machine,
    pub key: u16,
    /// The first line that showed the value (its `value` is the value).
    pub obs: ContextObs,
    /// The first processes that showed it (at most `MAX_SOURCES`).
    pub sources: Vec<u32>,
    /// How many distinct processes showed it (exact while `sources` is not full).
    pub n_sources: u32,
    /// How plainly `obs`'s line states the value (a context line above a failure that
    /// mentions it, then by signature weight): a plainer line of the same value replaces it
    /// (NCCL's banner over torch's echo of its version), whatever came first.
    pub weight: u8,
}

impl Sighting {
    fn heap_bytes(&self) -> usize {
        self.obs.heap_bytes() + memsize::vec(&self.sources)
    }
}

#[derive(Debug, Default)]
pub struct IdentityTable {
    keys: Vec<Box<str>>,
    key_ids: FastMap<Box<str>, u16>,
    pub sightings: Vec<Sighting>,
    by_slot: FastMap<(Machine, u16), Vec<u32>>,
    /// Machines per (key, value), to leave the line out of a value most machines share.
    machines_per_value: FastMap<(u16, Box<str>), u32>,
    /// Values not kept because a cap was reached (or memory was short).
    pub dropped: u64,
}

impl IdentityTable {
    pub fn key_name(&self, id: u16) -> &str {
        &self.keys[id as usize]
    }

    pub fn key_id(&self, name: &str) -> Option<u16> {
        self.key_ids.get(name).copied()
    }

    fn slots_len(&self) -> usize {
        self.by_slot.len() + self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sightings.is_empty()
    }

    /// Indexes of the sightings of one key on one machine, first seen first.
    pub fn slot(&self, machine: &Machine, key: u16) -> &[u32] {
        self.by_slot
            .get(&(machine.clone(), key))
            .map_or(&[], Vec::as_slice)
    }

    /// Every (machine, key) that has a value.
    pub fn slots(&self) -> impl Iterator<Item = (&Machine, u16, &[u32])> {
        self.by_slot.iter().map(|((m, k), v)| (m, *k, v.as_slice()))
    }

    /// The job's tables themselves (what their entries own is counted by `content_bytes`).
    pub fn tables_bytes(&self) -> usize {
        memsize::vec(&self.keys)
            + memsize::map(&self.key_ids)
            + memsize::vec(&self.sightings)
            + memsize::map(&self.by_slot)
            + memsize::map(&self.machines_per_value)
    }

    /// Heap owned by the entries, counted from scratch.
    pub fn content_bytes(&self) -> usize {
        self.keys
            .iter()
            .map(|k| 2 * memsize::block(k.len()))
            .sum::<usize>()
            + self
                .sightings
                .iter()
                .map(Sighting::heap_bytes)
                .sum::<usize>()
            + self.by_slot.values().map(memsize::vec).sum::<usize>()
            + self
                .machines_per_value
                .keys()
                .map(|(_, v)| memsize::block(v.len()))
                .sum::<usize>()
    }

    fn intern(&mut self, name: &str) -> Option<(u16, usize)> {
        if let Some(&k) = self.key_ids.get(name) {
            return Some((k, 0));
        }
        if self.keys.len() >= MAX_KEYS {
            return None;
        }
        let id = self.keys.len() as u16;
        self.keys.push(name.into());
        self.key_ids.insert(name.into(), id);
        Some((id, 2 * memsize::block(name.len())))
    }

    /// Records that process `src` on `machine` showed `value` for `key`; `obs` makes the
    /// observation when the value is new there or its line is more specific (`weight`).
    /// Returns the change of the heap bytes the entries own (the tables' own growth is
    /// counted by `tables_bytes`).
    pub fn record(
        &mut self,
        machine: Machine,
        key: &str,
        value: &str,
        src: u32,
        weight: u8,
        obs: impl FnOnce() -> ContextObs,
    ) -> isize {
        if let Some(slot) = self.key_ids.get(key).and_then(|&k| {
            self.by_slot
                .get(&(machine.clone(), k))
                .map(|s| (k, s.as_slice()))
        }) {
            let (_, idxs) = slot;
            if let Some(&i) = idxs
                .iter()
                .find(|&&i| self.sightings[i as usize].obs.value == value)
            {
                let cap = if machine == Machine::Unnamed {
                    MAX_UNNAMED_SOURCES
                } else {
                    MAX_SOURCES
                };
                let s = &mut self.sightings[i as usize];
                let mut added = 0;
                if weight > s.weight && !s.obs.line.is_empty() {
                    let before = s.obs.heap_bytes();
                    let mut better = obs();
                    better.value = std::mem::take(&mut s.obs.value);
                    s.obs = better;
                    s.weight = weight;
                    added = s.obs.heap_bytes() as isize - before as isize;
                }
                let added = |more: usize| added + more as isize;
                if s.sources.contains(&src) {
                    return added(0);
                }
                s.n_sources += 1;
                if s.sources.len() >= cap {
                    return added(0);
                }
                let before = memsize::vec(&s.sources);
                s.sources.push(src);
                return added(memsize::vec(&s.sources) - before);
            }
        }
        if self.sightings.len() >= MAX_SIGHTINGS {
            self.dropped += 1;
            return 0;
        }
        let Some((k, added_key)) = self.intern(key) else {
            self.dropped += 1;
            return 0;
        };
        let mut added = added_key;
        let slot = self.by_slot.entry((machine.clone(), k)).or_default();
        if slot.len() >= MAX_VALUES {
            self.dropped += 1;
            return added as isize;
        }
        let before = memsize::vec(slot);
        slot.push(self.sightings.len() as u32);
        added += memsize::vec(slot) - before;
        let shared = match self.machines_per_value.get_mut(&(k, value.into())) {
            Some(n) => {
                *n += 1;
                *n > SHARED_VALUE_MACHINES
            }
            None => {
                self.machines_per_value.insert((k, value.into()), 1);
                added += memsize::block(value.len());
                false
            }
        };
        let mut obs = obs();
        obs.value = value.to_string();
        if shared {
            obs.line = Arc::from("");
        }
        let s = Sighting {
            machine,
            key: k,
            obs,
            sources: vec![src],
            n_sources: 1,
            weight,
        };
        added += s.heap_bytes();
        self.sightings.push(s);
        added as isize
    }
}

/// Records the identity fields `(name, value)` one line of process `src` showed; `obs` makes
/// the observation of that line. Keeps the job's memory count and table flag up to date.
pub fn learn(
    job: &mut Job,
    src: u32,
    fields: &[(&str, &str)],
    weight: u8,
    obs: impl Fn() -> ContextObs,
) {
    let env_var = fields
        .iter()
        .find(|(n, _)| *n == "env_var")
        .map(|(_, v)| *v);
    let machine = match fields.iter().find(|(n, _)| *n == "gpu_host") {
        Some((_, h)) => Machine::Host(job.host_id(h.trim())),
        None => job.source_host(src).map_or(Machine::Unnamed, Machine::Host),
    };
    for &(name, value) in fields {
        let Some((key, value)) = key_of(name, value, env_var) else {
            continue;
        };
        let (n_before, slots_before) = (job.identity.sightings.len(), job.identity.slots_len());
        let delta = job
            .identity
            .record(machine.clone(), &key, value, src, weight, &obs);
        job.content_bytes = job.content_bytes.saturating_add_signed(delta);
        if job.identity.sightings.len() != n_before || job.identity.slots_len() != slots_before {
            job.tables_dirty = true;
        }
    }
}

/// The key and value a field of an identity line stands for, or None when the field is not
/// a value of its own (`env_value`, `gpu_host`) or the setting is one to ignore.
pub fn key_of<'a>(
    field: &'a str,
    value: &'a str,
    env_var: Option<&'a str>,
) -> Option<(String, &'a str)> {
    let value = value.trim().trim_end_matches('.').trim();
    if value.is_empty() {
        return None;
    }
    match field {
        "gpu_host" | "env_var" => None,
        // The version an NCCL error message names is the printer's own.
        "nccl_version_seen" => Some(("nccl_version".to_string(), value)),
        "env_value" => {
            let var = env_var?;
            if IGNORED_ENV_PREFIXES.iter().any(|p| var.starts_with(p)) {
                return None;
            }
            Some((format!("env:{var}"), value))
        }
        f => Some((f.to_string(), value)),
    }
}

/// The address family of an address as NCCL prints it: IPv4, IPv6, or IPv6 link-local.
pub fn ip_family(ip: &str) -> Option<&'static str> {
    let ip = ip.split('%').next().unwrap_or(ip);
    if ip.parse::<std::net::Ipv4Addr>().is_ok() {
        Some("IPv4")
    } else if let Ok(a) = ip.parse::<std::net::Ipv6Addr>() {
        if a.segments()[0] & 0xffc0 == 0xfe80 {
            Some("IPv6 link-local")
        } else if a.to_ipv4_mapped().is_some() {
            Some("IPv4")
        } else {
            Some("IPv6")
        }
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(src: u32) -> ContextObs {
        ContextObs {
            value: String::new(),
            source: src,
            seq: src as u64,
            ts_ms: None,
            line: format!("line of {src}").into(),
            origin: Arc::from("f.log"),
            line_no: 1,
            sig: 0,
        }
    }

    #[test]
    fn a_value_is_kept_once_per_machine_with_its_processes() {
        let mut t = IdentityTable::default();
        for src in 0..70 {
            t.record(Machine::Host(0), "nccl_version", "2.21.5", src, 10, || {
                obs(src)
            });
        }
        t.record(Machine::Host(1), "nccl_version", "2.18.3", 30, 10, || {
            obs(30)
        });
        assert_eq!(t.sightings.len(), 2);
        let s = &t.sightings[0];
        assert_eq!((s.n_sources, s.sources.len()), (70, MAX_SOURCES));
        assert_eq!(s.obs.value, "2.21.5");
        assert_eq!(s.obs.source, 0);
        let k = t.key_id("nccl_version").unwrap();
        assert_eq!(t.slot(&Machine::Host(1), k), &[1]);
    }

    #[test]
    fn the_count_matches_a_recount() {
        let mut t = IdentityTable::default();
        let mut added = 0;
        for src in 0..40u32 {
            let m = Machine::Host(src % 3);
            added += t.record(
                m.clone(),
                "env:NCCL_IB_HCA",
                &format!("mlx5_{}", src % 9),
                src,
                0,
                || obs(src),
            );
            added += t.record(m, "cuda_driver", "12040", src, (src % 7) as u8, || obs(src));
        }
        assert_eq!(added, t.content_bytes() as isize);
    }

    #[test]
    fn a_more_specific_line_of_the_same_value_takes_over() {
        let mut t = IdentityTable::default();
        let mut echo = obs(1);
        echo.line = "[rank3]: ProcessGroupNCCL environments: NCCL version: 2.18.3".into();
        let mut added = t.record(Machine::Host(0), "nccl_version", "2.18.3", 1, 5, || echo);
        let mut banner = obs(2);
        banner.line = "NCCL version 2.18.3+cuda12.2".into();
        added += t.record(Machine::Host(0), "nccl_version", "2.18.3", 2, 10, || banner);
        assert_eq!(&*t.sightings[0].obs.line, "NCCL version 2.18.3+cuda12.2");
        assert_eq!(t.sightings[0].obs.value, "2.18.3");
        assert_eq!(t.sightings[0].sources, [1, 2]);
        assert_eq!(added, t.content_bytes() as isize);
    }

    #[test]
    fn settings_that_only_change_logging_are_not_identity() {
        assert_eq!(key_of("env_value", "INFO", Some("NCCL_DEBUG")), None);
        assert_eq!(
            key_of("env_value", "1.", Some("NCCL_IB_DISABLE")),
            Some(("env:NCCL_IB_DISABLE".to_string(), "1"))
        );
        assert_eq!(key_of("gpu_host", "n1", None), None);
    }

    #[test]
    fn address_families() {
        assert_eq!(ip_family("10.1.2.3"), Some("IPv4"));
        assert_eq!(ip_family("fe80::1%eth0"), Some("IPv6 link-local"));
        assert_eq!(ip_family("2a02:6b8::1"), Some("IPv6"));
        assert_eq!(ip_family("::ffff:10.0.0.1"), Some("IPv4"));
        assert_eq!(ip_family("eth0"), None);
    }
}
