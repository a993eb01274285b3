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
