//! Reading a few fields out of a JSON object without building it: the record decoder needs
//! at most six values (job, rank, host, time, line, source) from records that may carry many
//! more. Values at the wanted paths are kept (strings borrowed from the input when they hold
//! no escape); everything else is skipped by the parser without being materialised.
//!
//! The result is what looking the paths up in a fully parsed `serde_json::Value` gives, with
//! one difference: values outside the wanted paths are only checked for JSON syntax, so a
//! number too large for an `f64` or a lone UTF-16 surrogate escape there no longer makes the
//! document unreadable (both are valid JSON grammar; serde_json rejects them only when it
//! builds the value), and skipped values are not held to the 128-level nesting limit.

mod flat;
#[cfg(test)]
mod flat_tests;

use serde::de::{DeserializeSeed, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A value found at a wanted path.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Scalar<'a> {
    /// Nothing at the path (a key missing, or a value on the way that is not an object).
    #[default]
    Missing,
    Str(Cow<'a, str>),
    U64(u64),
    I64(i64),
    F64(f64),
    /// null, a boolean, an array or an object.
    Other,
}

impl Scalar<'_> {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One object key on the way to wanted values.
#[derive(Debug, Default)]
struct Node {
    name: String,
    /// Output slots filled with the value at this node.
    slots: Vec<usize>,
    children: Vec<Node>,
}

impl Node {
    fn insert(&mut self, path: &[String], slot: usize) {
        match path.split_first() {
            None => self.slots.push(slot),
            Some((head, rest)) => {
                let i = match self.children.iter().position(|c| &c.name == head) {
                    Some(i) => i,
                    None => {
                        self.children.push(Node {
                            name: head.clone(),
                            ..Node::default()
                        });
                        self.children.len() - 1
                    }
                };
                self.children[i].insert(rest, slot);
            }
        }
    }

    fn clear(&self, out: &mut [Scalar<'_>]) {
        for &s in &self.slots {
            out[s] = Scalar::Missing;
        }
        for c in &self.children {
            c.clear(out);
        }
    }
}

/// The wanted paths, compiled into a tree of keys. Slot `i` of the output is path `i`.
#[derive(Debug)]
pub struct FieldPaths {
    root: Node,
    slots: usize,
}

impl FieldPaths {
    /// `None` paths are not wanted (their slot stays `Missing`).
    pub fn new(paths: &[Option<&[String]>]) -> FieldPaths {
        let mut root = Node::default();
        for (slot, path) in paths.iter().enumerate() {
            if let Some(path) = path {
                root.insert(path, slot);
            }
        }
        FieldPaths {
            root,
            slots: paths.len(),
        }
    }

    /// How many output slots [`FieldPaths::extract`] fills.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Parses `json` (the whole input must be one JSON value) and returns whether it is an
    /// object; `out` (at least [`FieldPaths::slots`] long, all `Missing`) receives the values
    /// at the wanted paths.
    pub fn extract<'a>(
        &self,
        json: &'a str,
        out: &mut [Scalar<'a>],
    ) -> Result<bool, serde_json::Error> {
        if let Some(is_object) = flat::extract(&self.root, json, out) {
            return Ok(is_object);
        }
        self.root.clear(out);
        self.extract_serde(json, out)
    }

    /// [`FieldPaths::extract`] by serde_json alone, for documents the flat scanner leaves.
    fn extract_serde<'a>(
        &self,
        json: &'a str,
        out: &mut [Scalar<'a>],
    ) -> Result<bool, serde_json::Error> {
        // From a `str`, the parser takes strings as valid UTF-8 without checking each again.
        let mut de = serde_json::Deserializer::from_str(json);
        let is_object = NodeSeed {
            node: &self.root,
            out,
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok(is_object)
    }
}

/// Visits the value at `node`: fills its slots, descends into wanted keys of an object.
struct NodeSeed<'n, 'o, 'a> {
    node: &'n Node,
    out: &'o mut [Scalar<'a>],
}

impl<'a> NodeSeed<'_, '_, 'a> {
    fn set(&mut self, value: Scalar<'a>) {
        if let Some((last, rest)) = self.node.slots.split_last() {
            for &s in rest {
                self.out[s] = value.clone();
            }
            self.out[*last] = value;
        }
    }

    fn found<E>(mut self, value: Scalar<'a>) -> Result<bool, E> {
        self.set(value);
        Ok(false)
    }
}

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, '_, 'de> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, '_, 'de> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E: Error>(self, v: &'de str) -> Result<bool, E> {
        self.found(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: Error>(self, v: &str) -> Result<bool, E> {
        self.found(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: Error>(self, v: String) -> Result<bool, E> {
        self.found(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_u64<E: Error>(self, v: u64) -> Result<bool, E> {
        self.found(Scalar::U64(v))
    }
    fn visit_i64<E: Error>(self, v: i64) -> Result<bool, E> {
        // as serde_json's `Number` keeps it: non-negative integers are unsigned
        self.found(u64::try_from(v).map_or(Scalar::I64(v), Scalar::U64))
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<bool, E> {
        self.found(Scalar::F64(v))
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<bool, E> {
        self.found(Scalar::Other)
    }
    fn visit_unit<E: Error>(self) -> Result<bool, E> {
        self.found(Scalar::Other)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        self.found(Scalar::Other)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<bool, A::Error> {
        self.set(Scalar::Other);
        let children = &self.node.children;
        while let Some(key) = map.next_key_seed(KeySeed(children))? {
            match key {
                Some(i) => {
                    // A repeated key replaces what an earlier one held (as in a parsed map).
                    children[i].clear(self.out);
                    map.next_value_seed(NodeSeed {
                        node: &children[i],
                        out: &mut *self.out,
                    })?;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(true)
    }
}

/// An object key: the index of the wanted child it names, without allocating.
struct KeySeed<'n>(&'n [Node]);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|c| c.name == v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    fn extract<'a>(paths: &[Vec<String>], json: &'a str) -> (bool, Vec<Scalar<'a>>) {
        let refs: Vec<Option<&[String]>> = paths.iter().map(|p| Some(p.as_slice())).collect();
        let fp = FieldPaths::new(&refs);
        let mut out = vec![Scalar::Missing; fp.slots()];
        let is_object = fp.extract(json, &mut out).unwrap();
        (is_object, out)
    }

    #[test]
    fn top_level_and_nested_values_borrowed_when_unescaped() {
        let paths = [
            path(&["line"]),
            path(&["k", "labels", "job"]),
            path(&["rank"]),
        ];
        let (obj, v) = extract(
            &paths,
            r#"{"x":[1,{"line":"no"}],"line":"a\"b","k":{"labels":{"job":"j1"}},"rank":7}"#,
        );
        assert!(obj);
        assert_eq!(v[0], Scalar::Str(Cow::Owned("a\"b".into())));
        assert!(matches!(&v[1], Scalar::Str(Cow::Borrowed("j1"))));
        assert_eq!(v[2], Scalar::U64(7));
    }

    #[test]
    fn non_objects_on_the_way_and_repeated_keys() {
        let paths = [path(&["k", "a"]), path(&["k"]), path(&[])];
        let (_, v) = extract(&paths, r#"{"k":{"a":1},"k":{"b":2}}"#);
        assert_eq!(v, [Scalar::Missing, Scalar::Other, Scalar::Other]);
        let (_, v) = extract(&paths, r#"{"k":{"a":-1},"k":"s"}"#);
        assert_eq!(v[0], Scalar::Missing);
        assert_eq!(v[1].as_str(), Some("s"));
        let (obj, v) = extract(&paths, r#"[{"k":{"a":1}}]"#);
        assert!(!obj);
        assert_eq!(v, [Scalar::Missing, Scalar::Missing, Scalar::Other]);
    }

    #[test]
    fn one_path_fills_several_slots() {
        let paths = [path(&["h"]), path(&["h"])];
        let (_, v) = extract(&paths, r#"{"h":2.5}"#);
        assert_eq!(v, [Scalar::F64(2.5), Scalar::F64(2.5)]);
    }

    #[test]
    fn syntax_errors_anywhere_are_errors() {
        let fp = FieldPaths::new(&[Some(&path(&["line"]))]);
        for bad in [
            r#"{"x":[1,}"#,
            r#"{"line":"a"} x"#,
            r#"{"x":"a"#,
            "",
            r#"{"x":tru}"#,
        ] {
            let mut out = [Scalar::Missing];
            assert!(fp.extract(bad, &mut out).is_err(), "{bad}");
        }
    }
}
