//! A differential check of the Hyperscan library against the `regex` crate on a catalog's
//! patterns: every message is scanned by both, and each pattern one of them matches and the
//! other does not is reported with an example.
//!
//! Why: Vectorscan 5.4.9 (Debian's package) misses some matches on lines longer than about
//! 90 bytes, for instance `File "[^"]+", line` on a Python traceback frame with a long path,
//! while `"[^"]+"` alone or `[^"\n]+` match. A miss is silent: the signature just never
//! fires. The catalog's patterns are checked this way in the tests (on the documented
//! examples, stretched) and on real logs with `examples/hs_differential.rs`.
use crate::catalog::Catalog;
use crate::matcher::{Expression, Matcher, FLAG_CASELESS, FLAG_SINGLEMATCH};
use regex_automata::util::syntax;
use regex_automata::{meta, Input, MatchKind, PatternSet};
use std::collections::{BTreeMap, BTreeSet};

/// One pattern on which the two engines disagreed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disagreement {
    pub signature: String,
    pub pattern: String,
    /// Messages the reference matched and Hyperscan did not.
    pub missed: u64,
    /// Messages Hyperscan matched and the reference did not.
    pub extra: u64,
    /// The first message that showed it.
    pub example: String,
}

struct Pattern<'a> {
    signature: &'a str,
    text: &'a str,
    caseless: bool,
}

/// Every pattern of `catalog` compared on every message; the patterns that disagree, in
/// catalog order. Patterns the `regex` crate cannot parse are left out.
pub fn compare<'m>(
    catalog: &Catalog,
    messages: impl IntoIterator<Item = &'m str>,
) -> Vec<Disagreement> {
    let patterns: Vec<Pattern> = catalog
        .signatures
        .iter()
        .flat_map(|s| {
            s.patterns.iter().map(|p| Pattern {
                signature: &s.id,
                text: p,
                caseless: s.caseless,
            })
        })
        .collect();
    let hs = hyperscan_of(&patterns);
    let (reference, ids) = reference_of(&patterns);
    let mut scratch = hs.scratch();
    let mut found = Vec::new();
    let mut set = PatternSet::new(reference.pattern_len());
    let mut diffs: BTreeMap<usize, Disagreement> = BTreeMap::new();
    for msg in messages {
        found.clear();
        hs.scan_into(msg.as_bytes(), &mut scratch, &mut found);
        let by_hs: BTreeSet<usize> = found.iter().map(|&i| i as usize).collect();
        set.clear();
        reference.which_overlapping_matches(&Input::new(msg.as_bytes()), &mut set);
        let by_reference: BTreeSet<usize> = set.iter().map(|p| ids[p.as_usize()]).collect();
        let mut note = |i: usize, missed: bool| {
            let d = diffs.entry(i).or_insert_with(|| Disagreement {
                signature: patterns[i].signature.to_string(),
                pattern: patterns[i].text.to_string(),
                missed: 0,
                extra: 0,
                example: msg.to_string(),
            });
            if missed {
                d.missed += 1;
            } else {
                d.extra += 1;
            }
        };
        for &i in by_reference.difference(&by_hs) {
            note(i, true);
        }
        for &i in by_hs.difference(&by_reference) {
            if ids.binary_search(&i).is_ok() {
                note(i, false);
            }
        }
    }
    diffs.into_values().collect()
}

/// `msg` with every run of path-like characters repeated `times` times: the same shapes,
/// longer, since the misses seen so far needed long lines.
pub fn stretched(msg: &str, times: usize) -> String {
    let mut out = String::with_capacity(msg.len() * times);
    let mut run = String::new();
    for c in msg.chars() {
        if c.is_ascii_alphanumeric() || "/_.-".contains(c) {
            run.push(c);
        } else {
            out.push_str(&run.repeat(times));
            run.clear();
            out.push(c);
        }
    }
    out.push_str(&run.repeat(times));
    out
}

/// The patterns as the engine compiles them for a plain scan.
fn hyperscan_of(patterns: &[Pattern]) -> Matcher {
    let exprs: Vec<Expression> = patterns
        .iter()
        .enumerate()
        .map(|(i, p)| Expression {
            pattern: p.text,
            id: i as u32,
            flags: FLAG_SINGLEMATCH | if p.caseless { FLAG_CASELESS } else { 0 },
        })
        .collect();
    Matcher::compile(&exprs).expect("a loaded catalog compiles")
}

/// One multi-pattern regex reading the patterns as Hyperscan does (bytes, ASCII classes),
/// and the pattern index of each of its patterns (ascending).
fn reference_of(patterns: &[Pattern]) -> (meta::Regex, Vec<usize>) {
    let config = syntax::Config::new().unicode(false).utf8(false);
    let (ids, sources): (Vec<usize>, Vec<String>) = patterns
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let source = if p.caseless {
                format!("(?i:{})", p.text)
            } else {
                p.text.to_string()
            };
            (i, source)
        })
        .filter(|(_, source)| syntax::parse_with(source, &config).is_ok())
        .unzip();
    let regex = meta::Regex::builder()
        .syntax(config)
        .configure(
            meta::Regex::config()
                .match_kind(MatchKind::All)
                .nfa_size_limit(None),
        )
        .build_many(&sources)
        .expect("patterns that parse compile");
    (regex, ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(patterns: &[&str]) -> Catalog {
        let sigs: String = patterns
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(
                    "[[signature]]\nid = \"probe_{i}\"\ntitle = \"t\"\nsubsystem = \"python\"\n\
                     role = \"cause\"\nseverity = \"error\"\npatterns = ['{p}']\ncause = \"c\"\n\
                     fix = \"f\"\nverify = \"v\"\n\n"
                )
            })
            .collect();
        Catalog::from_sources(&[("probe.toml".into(), sigs)]).unwrap()
    }

    #[test]
    fn agreeing_engines_report_nothing() {
        let cat = catalog(&[r"connect \[[^\]]+\]:\d+", r"^NET/IB : \w+"]);
        let msgs = [
            "connect [10.0.0.1]:6000: Connection refused",
            "NET/IB : Got",
        ];
        assert!(compare(&cat, msgs).is_empty());
    }

    #[test]
    fn stretched_repeats_path_runs_only() {
        assert_eq!(stretched("a/b: x=1", 2), "a/ba/b: xx=11");
        assert_eq!(stretched("", 3), "");
    }

    /// The shipped catalog's patterns scan alike in the linked library and in the `regex`
    /// crate on every documented example (tests/data/catalog_examples.toml) and on the same
    /// examples stretched to long lines.
    #[test]
    fn shipped_patterns_scan_alike_on_long_and_short_examples() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/data/catalog_examples.toml");
        let doc: toml::Table = std::fs::read_to_string(path).unwrap().parse().unwrap();
        let texts: Vec<String> = doc["example"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e.get("text")?.as_str().map(str::to_string))
            .collect();
        assert!(texts.len() > 100, "examples file read: {}", texts.len());
        let mut messages = texts.clone();
        for times in [2, 4, 8] {
            messages.extend(texts.iter().map(|t| stretched(t, times)));
        }
        let catalog = crate::correlate::testkit::shipped_catalog();
        let found = compare(&catalog, messages.iter().map(String::as_str));
        let listed: Vec<String> = found
            .iter()
            .map(|d| {
                format!(
                    "{} {:?}: missed {} extra {} e.g. {:?}",
                    d.signature, d.pattern, d.missed, d.extra, d.example
                )
            })
            .collect();
        assert!(
            listed.is_empty(),
            "patterns that scan differently:\n{}",
            listed.join("\n")
        );
    }

    /// The shape that Debian's Vectorscan 5.4.9 misses: whichever library is linked, the
    /// check and the reference must agree that the frame matches.
    #[test]
    fn a_long_traceback_frame_is_compared() {
        let cat = catalog(&[r#"File "[^"]+", line"#]);
        let frame = r#"  File "/usr/local/lib/python3.10/dist-packages/torch/nn/parallel/distributed.py", line 1156, in forward"#;
        let found = compare(&cat, [frame]);
        // On a library with the miss, it is reported as a miss; never as an extra match.
        assert!(found.iter().all(|d| d.missed == 1 && d.extra == 0));
    }
}
