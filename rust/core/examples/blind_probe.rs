//! Probe: which widened patterns hit the messages of a log folder, and how often their
//! original form confirms the hit.
use rankwatch_core::digits::{blind, Blind};
use rankwatch_core::matcher::{Expression, Matcher, FLAG_CASELESS, FLAG_SINGLEMATCH};
use rankwatch_core::Catalog;
use std::collections::BTreeMap;
use std::path::Path;
mod common;
use common::{files, peeled_messages};
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut cat_files = Vec::new();
    files(Path::new(&args[1]), &mut cat_files);
    let sources: Vec<(String, String)> = cat_files
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|f| (f.display().to_string(), std::fs::read_to_string(f).unwrap()))
        .collect();
    let c = Catalog::from_sources(&sources).unwrap();
    let mut pats = Vec::new();
    for s in &c.signatures {
        for p in &s.patterns {
            let flags = FLAG_SINGLEMATCH | if s.caseless { FLAG_CASELESS } else { 0 };
            if let Ok(Blind::Widened(w)) = blind(p, s.caseless) {
                pats.push((p.clone(), w, flags));
            }
        }
    }
    let mk = |wide: bool| {
        let e: Vec<Expression> = pats
            .iter()
            .enumerate()
            .map(|(i, (p, w, f))| Expression {
                pattern: if wide { w } else { p },
                id: i as u32,
                flags: *f,
            })
            .collect();
        Matcher::compile(&e).unwrap()
    };
    let (wide, orig) = (mk(true), mk(false));
    let (mut sw, mut so) = (wide.scratch(), orig.scratch());
    let mut paths = Vec::new();
    files(Path::new(&args[2]), &mut paths);
    let texts: Vec<String> = paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    let lines: Vec<&str> = texts.iter().flat_map(|t| t.lines()).collect();
    let msgs = peeled_messages(&lines);
    let mut counts: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut any = 0;
    for m in &msgs {
        a.clear();
        b.clear();
        wide.scan_into(m.as_bytes(), &mut sw, &mut a);
        orig.scan_into(m.as_bytes(), &mut so, &mut b);
        any += usize::from(!a.is_empty());
        for &id in &a {
            let e = counts.entry(id).or_default();
            e.0 += 1;
            e.1 += u64::from(b.contains(&id));
        }
    }
    println!("{} messages, {} hit a widened pattern", msgs.len(), any);
    for (id, (w, o)) in counts {
        println!("{w:>8} widened {o:>8} original  {}", pats[id as usize].0);
    }
}
