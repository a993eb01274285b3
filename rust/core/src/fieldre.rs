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
    compiled: OnceLock<Option<Regex>>,
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
        self.compiled
            .get_or_init(|| {
                RegexBuilder::new(&self.pattern)
                    .unicode(false)
                    .build()
                    .or_else(|_| Regex::new(&self.pattern))
                    .ok()
            })
            .as_ref()
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
