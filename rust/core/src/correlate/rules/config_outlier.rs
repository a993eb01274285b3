//! When the best causes of an incident are of a kind configuration explains (their signature
//! lists `blames_outlier` fields), the host whose value of such a field differs from the
//! job's majority (another subnet, interface, NCCL version, transport) is where the fault is:
//! its context line becomes the candidate's root line (+30, +20 more when the failing
//! connections point at that host's address, plus the cause's weight).

use crate::catalog::{Role, OUTLIER_FIELDS};
use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::util::subnet_of;
use crate::correlate::view::{View, Who};
use crate::job::HostId;
use serde_json::json;
use std::collections::BTreeMap;

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

/// (field, weight, signature) of the strongest cause that blames each field.
fn fields_blamed(v: &View, blaming: &[usize]) -> Vec<(&'static str, u8, u16)> {
    let mut out: Vec<(&'static str, u8, u16)> = Vec::new();
    for &i in blaming {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        for f in &sig.blames_outlier {
            let Some(&ff) = OUTLIER_FIELDS.iter().find(|x| *x == f) else {
                continue;
            };
            let sig_idx = h.sig.unwrap_or_default();
            match out.iter_mut().find(|(x, _, _)| *x == ff) {
                None => out.push((ff, sig.weight, sig_idx)),
                Some(e) if e.1 < sig.weight => *e = (ff, sig.weight, sig_idx),
                Some(_) => {}
            }
        }
    }
    out
}

fn observed_value(field: &str, raw: &str) -> Option<String> {
    if field == "subnet" {
        subnet_of(raw)
    } else {
        Some(raw.to_string())
    }
}

/// Hosts whose value of `field` differs from the job's majority, each with its
/// representative process (lowest rank, then lowest source index).
pub fn outliers(v: &View, field: &'static str) -> Vec<(HostId, u32)> {
    let want = if field == "subnet" { "ip" } else { field };
    let mut per_host: BTreeMap<HostId, BTreeMap<String, Vec<u32>>> = BTreeMap::new();
    for ((f, src), obs) in &v.job.context {
        if *f != want {
            continue;
        }
        let (Some(host), Some(value)) = (v.host_of(*src), observed_value(field, &obs.value)) else {
            continue;
        };
        per_host
            .entry(host)
            .or_default()
            .entry(value)
            .or_default()
            .push(*src);
    }
    if per_host.len() < 3 {
        return Vec::new();
    }
    let mut host_value: BTreeMap<HostId, (String, Vec<u32>)> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (h, vals) in per_host {
        if let Some((val, srcs)) = vals.into_iter().max_by_key(|(_, s)| s.len()) {
            *counts.entry(val.clone()).or_default() += 1;
            host_value.insert(h, (val, srcs));
        }
    }
    let Some((major, n_major)) = counts.iter().max_by_key(|(_, c)| **c) else {
        return Vec::new();
    };
    let odd: Vec<HostId> = host_value
        .iter()
        .filter(|(_, (val, _))| val != major)
        .map(|(h, _)| *h)
        .collect();
    if odd.is_empty() || odd.len() * 4 > host_value.len() || *n_major < 2 * odd.len() {
        return Vec::new();
    }
    odd.into_iter()
        .filter_map(|h| {
            let (_, srcs) = &host_value[&h];
            srcs.iter()
                .min_by_key(|&&s| (v.rank_of(s).unwrap_or(u32::MAX), s))
                .map(|&s| (h, s))
        })
        .collect()
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let blaming = blaming_causes(v, scope.hits);
    for (field, weight, blaming_sig) in fields_blamed(v, &blaming) {
        for (host, src) in outliers(v, field) {
            let obs_field = if field == "subnet" { "ip" } else { field };
            let Some(obs) = v.job.context.get(&(obs_field, src)) else {
                continue;
            };
            let linked = blaming.iter().any(|&i| {
                v.named(v.hit(i))
                    .iter()
                    .any(|w| v.who_host(*w) == Some(host))
            });
            let shown = observed_value(field, &obs.value).unwrap_or_else(|| obs.value.clone());
            scope.notes.borrow_mut().push(json!({
                "field": field, "host": v.host_name(host), "value": shown,
                "named_by_failures": linked,
            }));
            let who = v.rank_of(src).map_or(Who::Source(src), Who::Rank);
            let c = board.cand(who, Some(host));
            if c.has_rule("config_outlier") {
                continue;
            }
            match &mut c.config {
                Some((_, fix_sig @ None)) => *fix_sig = Some(blaming_sig),
                Some(_) => {}
                None => c.config = Some((LineRef::Context(src, obs_field), Some(blaming_sig))),
            }
            let extra = if c.cause.is_none() { weight as i32 } else { 0 };
            c.cause_weight = c.cause_weight.max(weight);
            c.ts = v.corrected(src, obs.ts_ms);
            let why = format!("its {field} ({shown}) differs from the rest of the job");
            board.add(who, Some(host), "config_outlier", 30 + extra, why);
            if linked {
                let why = "the failing connections point at this host's address".to_string();
                board.add(who, Some(host), "config_outlier", 20, why);
            }
        }
    }
}
