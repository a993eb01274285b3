//! Field regexes, checked when the catalog loads and compiled when first used.
//!
//! A catalog holds hundreds of field regexes and a run usually matches a few dozen signatures,
//! so compiling them all at load time was most of the start-up left once the Hyperscan database
//! comes from the cache. Loading parses each one (syntax, Unicode classes, group names), which
//! catches every error a user can make; only a regex beyond the compiled-size limit could still
//! fail later, and then it extracts nothing.

use regex_automata::meta::{Builder, Regex};
use regex_automata::util::primitives::NonMaxUsize;
use regex_automata::util::syntax;
use regex_automata::{Input, PatternID};
use regex_syntax::ast::{self, Ast, GroupKind, Visitor};
use std::sync::OnceLock;

/// Slots read without a heap buffer (two per capture group, the whole match included).
const STACK_SLOTS: usize = 32;

/// Where one named group matched in the text a field regex ran over: which regex of the
/// signature and which of its names, and the byte range. Kept instead of owned strings so
/// that the line stage allocates nothing per field; the apply stage reads the values in
/// place from the line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSpan {
    pub regex: u16,
    pub name: u16,
    pub start: u32,
    pub end: u32,
}

impl FieldSpan {
    pub fn range(&self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

#[derive(Debug, Clone)]
pub struct FieldRegex {
    pattern: String,
    names: Vec<String>,
    compiled: OnceLock<Option<Compiled>>,
}

/// The compiled regex and, for each of `names`, its capture group's index (so that a match is
/// read by index, not by hashing the name), and how many slots reach the last of them.
#[derive(Debug, Clone)]
struct Compiled {
    regex: Regex,
    groups: Vec<usize>,
    slots: usize,
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

    /// The compiled regex's group names, in order (compiled on the first call; `None` if it
    /// does not compile). ASCII classes (`\d`, `\b`, `\w`) keep the fast DFA engines usable
    /// on every line; patterns that need Unicode semantics (`.`, negated classes) keep them.
    pub fn compiled_names(&self) -> Option<Vec<&str>> {
        let c = self.compiled()?;
        Some(
            c.regex
                .group_info()
                .pattern_names(PatternID::ZERO)
                .flatten()
                .collect(),
        )
    }

    fn compiled(&self) -> Option<&Compiled> {
        self.compiled
            .get_or_init(|| {
                // The same engine the `regex` crate wraps, used directly for its slot API:
                // a match is read into a buffer on the stack, with no allocation.
                let build = |unicode: bool| {
                    Builder::new()
                        .syntax(syntax::Config::new().unicode(unicode))
                        .build(&self.pattern)
                        .ok()
                };
                let regex = build(false).or_else(|| build(true))?;
                let info = regex.group_info();
                let groups = self
                    .names
                    .iter()
                    .map(|n| info.to_index(PatternID::ZERO, n))
                    .collect::<Option<Vec<usize>>>()?;
                let slots = 2 * (groups.iter().max().copied().unwrap_or(0) + 1);
                Some(Compiled {
                    regex,
                    groups,
                    slots,
                })
            })
            .as_ref()
    }

    /// Matches `text` and appends a span for each named group that took part in the match
    /// and that `filled` (shown the spans so far) does not claim yet (`regex` is this regex's
    /// index in its signature). Returns whether it matched.
    pub fn spans_into(
        &self,
        regex: u16,
        text: &str,
        filled: impl Fn(&[FieldSpan], &str) -> bool,
        out: &mut Vec<FieldSpan>,
    ) -> bool {
        let Some(c) = self.compiled() else {
            return false;
        };
        let mut stack = [None::<NonMaxUsize>; STACK_SLOTS];
        let mut heap = Vec::new();
        let slots = if c.slots <= STACK_SLOTS {
            &mut stack[..c.slots]
        } else {
            heap.resize(c.slots, None);
            &mut heap[..]
        };
        if c.regex.search_slots(&Input::new(text), slots).is_none() {
            return false;
        }
        for (i, (name, &group)) in self.names.iter().zip(&c.groups).enumerate() {
            let (Some(start), Some(end)) = (slots[2 * group], slots[2 * group + 1]) else {
                continue;
            };
            if filled(out, name) {
                continue;
            }
            out.push(FieldSpan {
                regex,
                name: i as u16,
                start: start.get() as u32,
                end: end.get() as u32,
            });
        }
        true
    }

    /// Matches `text` and appends `(name, value)` for each named group that took part in the
    /// match and whose name is not in `out` yet.
    pub fn capture_into(&self, text: &str, out: &mut Vec<(String, String)>) {
        let mut spans = Vec::new();
        let known = |_: &[FieldSpan], n: &str| out.iter().any(|(k, _)| k == n);
        self.spans_into(0, text, known, &mut spans);
        for s in spans {
            out.push((
                self.names[s.name as usize].clone(),
                text[s.range()].to_string(),
            ));
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
        assert_eq!(f.compiled_names().unwrap(), f.names());
        let mut out = Vec::new();
        f.capture_into("Connect to 1.2.3.4<5> failed : gone", &mut out);
        assert_eq!(out[0], ("peer_addr".to_string(), "1.2.3.4".to_string()));
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
    fn spans_into_reads_groups_past_the_stack_buffer() {
        // 20 groups need 42 slots, more than the stack buffer holds.
        let pattern: String = (0..20).map(|i| format!("(?P<g{i}>{i})-")).collect();
        let text: String = (0..20).map(|i| format!("{i}-")).collect();
        let f = FieldRegex::parse(&pattern).unwrap();
        let mut spans = Vec::new();
        assert!(f.spans_into(3, &text, |_, n| n == "g1", &mut spans));
        assert_eq!(spans.len(), 19);
        assert_eq!(
            (spans[0].regex, spans[0].name, spans[0].range()),
            (3, 0, 0..1)
        );
        let last = spans[18];
        assert_eq!((last.name, &text[last.range()]), (19, "19"));
        assert!(!f.spans_into(0, "nothing", |_, _| false, &mut spans));
        assert_eq!(spans.len(), 19);
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
        let mut out = Vec::new();
        f.capture_into("name=größe x", &mut out);
        assert_eq!(out, [("name".to_string(), "größe".to_string())]);
    }
}
