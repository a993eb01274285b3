//! Field regexes, checked when the catalog loads and compiled when first used.
//!
//! A catalog holds hundreds of field regexes and a run usually matches a few dozen signatures,
//! so compiling them all at load time was most of the start-up left once the Hyperscan database
//! comes from the cache. Loading parses each one (syntax, Unicode classes, group names), which
//! catches every error a user can make; only a regex beyond the compiled-size limit could still
//! fail later, and then it extracts nothing.

use regex::{Regex, RegexBuilder};
use regex_syntax::ast::{self, Ast, GroupKind, Visitor};
use std::sync::OnceLock;

#[derive(Debug, Clone)]
pub struct FieldRegex {
    pattern: String,
    names: Vec<String>,
    compiled: OnceLock<Option<Compiled>>,
}

/// The compiled regex and, for each of `names`, its capture group's index (so that a match is
/// read by index, not by hashing the name).
#[derive(Debug, Clone)]
struct Compiled {
    regex: Regex,
    groups: Vec<usize>,
}

impl FieldRegex {
    /// Checks `pattern` the way compiling it would, without compiling it.
    pub fn parse(pattern: &str) -> Result<FieldRegex, String> {
        let tree = ast::parse::Parser::new()
            .parse(pattern)
            .map_err(|e| e.to_string())?;
        regex_syntax::hir::translate::Translator::new()
            .translate(pattern, &tree)
            .map_err(|e| e.to_string())?;
        let names = ast::visit(&tree, GroupNames(Vec::new())).unwrap_or_default();
        Ok(FieldRegex {
            pattern: pattern.to_string(),
            names,
            compiled: OnceLock::new(),
        })
    }

    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Named capture groups, in pattern order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The compiled regex (compiled on the first call). ASCII classes (`\d`, `\b`, `\w`) keep
    /// the fast DFA engines usable on every line; patterns that need Unicode semantics (`.`,
    /// negated classes) keep them.
    pub fn regex(&self) -> Option<&Regex> {
        self.compiled().map(|c| &c.regex)
    }

    fn compiled(&self) -> Option<&Compiled> {
        self.compiled
            .get_or_init(|| {
                let regex = RegexBuilder::new(&self.pattern)
                    .unicode(false)
                    .build()
                    .or_else(|_| Regex::new(&self.pattern))
                    .ok()?;
                let groups = self
                    .names
                    .iter()
                    .map(|n| regex.capture_names().position(|g| g == Some(n.as_str())))
                    .collect::<Option<Vec<usize>>>()?;
                Some(Compiled { regex, groups })
            })
            .as_ref()
    }

    /// Matches `text` and appends `(name, value)` for each named group that took part in the
    /// match and whose name is not in `out` yet.
    pub fn capture_into(&self, text: &str, out: &mut Vec<(String, String)>) {
        let Some(c) = self.compiled() else { return };
        let mut locs = c.regex.capture_locations();
        if c.regex.captures_read(&mut locs, text).is_none() {
            return;
        }
        for (name, &group) in self.names.iter().zip(&c.groups) {
            if let Some((start, end)) = locs.get(group) {
                if !out.iter().any(|(k, _)| k == name) {
                    out.push((name.clone(), text[start..end].to_string()));
                }
            }
        }
    }
}

struct GroupNames(Vec<String>);

impl Visitor for GroupNames {
    type Output = Vec<String>;
    type Err = ();

    fn finish(self) -> Result<Vec<String>, ()> {
        Ok(self.0)
    }

    fn visit_pre(&mut self, node: &Ast) -> Result<(), ()> {
        if let Ast::Group(g) = node {
            if let GroupKind::CaptureName { name, .. } = &g.kind {
                self.0.push(name.name.clone());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_out_in_pattern_order_and_match_the_compiled_regex() {
        let f =
            FieldRegex::parse(r"to (?P<peer_addr>[0-9.]+)<(\d+)> failed : (?<error>.+)").unwrap();
        assert_eq!(f.names(), ["peer_addr", "error"]);
        let re = f.regex().unwrap();
        let compiled: Vec<&str> = re.capture_names().flatten().collect();
        assert_eq!(compiled, f.names());
        let caps = re.captures("Connect to 1.2.3.4<5> failed : gone").unwrap();
        assert_eq!(&caps["peer_addr"], "1.2.3.4");
    }

    #[test]
    fn capture_into_reads_named_groups_by_index_and_keeps_earlier_values() {
        let f =
            FieldRegex::parse(r"(\w+) to (?P<peer>[0-9.]+)(?:<(?P<port>\d+)>)?(?P<x>!)?").unwrap();
        let mut out = vec![("peer".to_string(), "kept".to_string())];
        f.capture_into("Connect to 1.2.3.4<5> failed", &mut out);
        assert_eq!(
            out,
            [("peer", "kept"), ("port", "5")].map(|(k, v)| (k.to_string(), v.to_string()))
        );
        let mut none = Vec::new();
        f.capture_into("no address here", &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn errors_are_found_without_compiling() {
        assert!(FieldRegex::parse(r"SeqNum=(?P<seq>\d+").is_err());
        assert!(FieldRegex::parse(r"(?P<x>\p{NoSuchClass})").is_err());
        assert!(FieldRegex::parse(r"(?P<a>x)(?P<a>y)").is_err());
    }

    #[test]
    fn unicode_is_kept_where_the_pattern_needs_it() {
        let f = FieldRegex::parse(r"name=(?P<name>[^ ]+)").unwrap();
        let caps = f.regex().unwrap().captures("name=größe x").unwrap();
        assert_eq!(&caps["name"], "größe");
    }
}
