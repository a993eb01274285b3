//! What the profiling examples share.

use std::path::{Path, PathBuf};

/// Every log file under `dir`, depth first in name order (fleetgen's `.json` manifests left out).
pub fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let p = e.path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_none_or(|x| x != "json") {
            out.push(p);
        }
    }
}

/// Each line's message, as the engine scans it: what is left once the prefixes are peeled.
pub fn peeled_messages<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    lines
        .iter()
        .map(|l| {
            let m = rankwatch_core::prefix::peel(l, 2026);
            &l[m.msg_start..m.msg_end.max(m.msg_start)]
        })
        .collect()
}
