//! Host clock offsets, estimated from lines every rank prints at the same moment (catalog
//! signatures with `sync = "seq"` or `"init"`).

use crate::config::Config;
use crate::job::{HostId, Job};
use std::collections::{BTreeMap, HashMap};

pub struct Offsets {
    pub by_host: HashMap<HostId, i64>,
    pub uncertainty_ms: i64,
    pub events_used: usize,
}

fn median(v: &mut [i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

pub fn estimate_offsets(job: &Job, cfg: &Config) -> Offsets {
    let mut groups: BTreeMap<(u16, u64), HashMap<HostId, Vec<i64>>> = BTreeMap::new();
    for o in &job.sync {
        let Some(host) = job.source_host(o.source) else {
            continue;
        };
        groups
            .entry((o.sig, o.key))
            .or_default()
            .entry(host)
            .or_default()
            .push(o.ts_ms);
    }
    let mut deltas: HashMap<HostId, Vec<i64>> = HashMap::new();
    let mut used = 0;
    for (_, per_host) in groups {
        if per_host.len() < 2 {
            continue;
        }
        let mut meds: Vec<(HostId, i64)> = per_host
            .into_iter()
            .filter_map(|(h, mut v)| median(&mut v).map(|m| (h, m)))
            .collect();
        let mut all: Vec<i64> = meds.iter().map(|(_, m)| *m).collect();
        let Some(reference) = median(&mut all) else {
            continue;
        };
        used += 1;
        for (h, m) in meds.drain(..) {
            deltas.entry(h).or_default().push(m - reference);
        }
    }
    let mut by_host = HashMap::new();
    let mut spread = 0i64;
    for (h, mut d) in deltas {
        if let Some(m) = median(&mut d) {
            let mut dev: Vec<i64> = d.iter().map(|x| (x - m).abs()).collect();
            spread = spread.max(median(&mut dev).unwrap_or(0));
            by_host.insert(h, m);
        }
    }
    Offsets {
        by_host,
        uncertainty_ms: cfg.clock_uncertainty_ms + spread,
        events_used: used,
    }
}
