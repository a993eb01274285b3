//! The catalog of a folder, for the examples that take one (apart from `common`: the others
//! would not use it, and unused code is an error under clippy).

use crate::common::files;
use std::path::Path;

/// The catalog of every `.toml` file under `dir` (the shipped catalog or a user's folder).
pub fn load_catalog(dir: &str) -> rankwatch_core::Catalog {
    let mut cat_files = Vec::new();
    files(Path::new(dir), &mut cat_files);
    let sources: Vec<(String, String)> = cat_files
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|f| (f.display().to_string(), std::fs::read_to_string(f).unwrap()))
        .collect();
    rankwatch_core::Catalog::from_sources(&sources).unwrap()
}
