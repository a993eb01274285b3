//! The flat scanner must give exactly what serde_json gives: the same values at the wanted
//! paths (borrowed or not does not matter), the same "is an object", and an error exactly
//! when serde_json errs (the scanner never errs itself: it leaves such documents to serde).

use super::*;
use proptest::prelude::*;

fn paths(nested: bool) -> FieldPaths {
    let owned: Vec<Vec<String>> = ["job", "rank", "host", "ts", "line", "source"]
        .iter()
        .map(|k| vec![k.to_string()])
        .chain(nested.then(|| vec!["k".to_string(), "a".to_string()]))
        .chain(nested.then(|| vec!["line".to_string()]))
        .collect();
    let refs: Vec<Option<&[String]>> = owned.iter().map(|p| Some(p.as_slice())).collect();
    FieldPaths::new(&refs)
}

fn same_as_serde(fp: &FieldPaths, doc: &str) -> Result<(), TestCaseError> {
    let mut fast = vec![Scalar::Missing; fp.slots()];
    let mut slow = vec![Scalar::Missing; fp.slots()];
    let a = fp.extract(doc, &mut fast);
    let b = fp.extract_serde(doc, &mut slow);
    match (a, b) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a, b, "is_object of {:?}", doc);
            prop_assert_eq!(fast, slow, "values of {:?}", doc);
        }
        (Err(a), Err(b)) => prop_assert_eq!(a.classify(), b.classify()),
        (a, b) => prop_assert!(false, "{:?}: {:?} vs serde {:?}", doc, a, b),
    }
    Ok(())
}

/// A string literal, each char raw, short-escaped or `\u`-escaped, with now and then a lone
/// surrogate, a bad escape or a raw control char.
fn string_lit() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        10 => any::<char>().prop_map(|c| match c {
            '"' | '\\' => format!("\\{c}"),
            c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32),
            c => c.to_string(),
        }),
        6 => "[a-z \\[\\]:.]{1,8}",
        2 => any::<char>().prop_map(|c| {
            let mut units = [0u16; 2];
            c.encode_utf16(&mut units).iter().map(|u| format!("\\u{u:04X}")).collect()
        }),
        2 => prop::sample::select(vec![
            "\\n", "\\t", "\\r", "\\b", "\\f", "\\/", "\\\"", "\\\\", "\\u001b[0m",
        ])
        .prop_map(str::to_string),
        1 => prop::sample::select(vec![
            "\\ud800", "\\udc00", "\\ud800\\u0041", "\\ud83d\\ude00", "\\x", "\\u12g4", "\\u12",
            "\t", "\u{1}", "\\", "\\U0041", "\\ud800\\ud800",
        ])
        .prop_map(str::to_string),
    ];
    prop::collection::vec(piece, 0..6).prop_map(|p| format!("\"{}\"", p.concat()))
}

fn number_lit() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        (0u32..100).prop_map(|n| n.to_string()),
        prop::sample::select(vec![
            "0",
            "-0",
            "01",
            "-01",
            "1.5",
            "1e400",
            "-1e400",
            "1E+2",
            "2e-3",
            "1.",
            "1e",
            "1e+",
            "-",
            ".5",
            "00",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775808",
            "-9223372036854775809",
            "0.0",
            "-0.0",
            "+1",
            "1.5e3",
        ])
        .prop_map(str::to_string),
    ]
}

fn leaf_lit() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => string_lit(),
        4 => number_lit(),
        1 => prop::sample::select(vec!["true", "false", "null", "tru", "nul", "nulll", "True"])
            .prop_map(str::to_string),
    ]
}

/// Mostly scalars (the flat shape), now and then an array or object nested up to 3 deep.
fn value_lit() -> impl Strategy<Value = String> {
    let nested = leaf_lit().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key_lit(), inner), 0..4).prop_map(|m| {
                let members: Vec<String> = m.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    });
    prop_oneof![12 => leaf_lit(), 1 => nested]
}

fn key_lit() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(vec![
            "job", "rank", "host", "ts", "line", "source", "k", "a", "x", "", "lin", "linee",
        ])
        .prop_map(|k| format!("\"{k}\"")),
        1 => prop::sample::select(vec!["\"li\\u006ee\"", "\"j\\u006fb\"", "\"a\\\"b\"", "job"])
            .prop_map(str::to_string),
        1 => string_lit(),
    ]
}

/// JSON whitespace, and now and then a space JSON does not allow.
fn ws() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        40 => prop::sample::select(vec!["", "", "", " ", "\n", "\t", "\r\n "]),
        1 => prop::sample::select(vec!["\u{a0}", "\u{b}", "\u{c}"]),
    ]
}

/// An object of members (or now and then another value), with random whitespace, trailing
/// commas, missing colons, trailing text, and cuts.
fn document() -> impl Strategy<Value = String> {
    let member =
        (key_lit(), ws(), ws(), value_lit(), ws(), 0u8..80).prop_map(|(k, w1, w2, v, w3, odd)| {
            match odd {
                0 => format!("{k}{w1}{w2}{v}{w3}"), // no colon
                1 => format!("{k}{w1}:{w2}{v}{w3},"),
                _ => format!("{k}{w1}:{w2}{v}{w3}"),
            }
        });
    let object = (
        ws(),
        prop::collection::vec(member, 0..9),
        ws(),
        ws(),
        0u8..30,
    )
        .prop_map(|(w1, members, w2, w3, odd)| {
            let body = format!("{w1}{{{}{w2}}}{w3}", members.join(","));
            match odd {
                0 => format!("{body} x"),
                1 => format!("{body}{{}}"),
                2 => body.replacen('}', "", 1),
                _ => body,
            }
        });
    prop_oneof![8 => object, 1 => value_lit()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn flat_scanner_returns_what_serde_returns(doc in document(), nested in any::<bool>()) {
        same_as_serde(&paths(nested), &doc)?;
    }

    #[test]
    fn cut_documents_too(doc in document(), cut in any::<prop::sample::Index>()) {
        let mut at = cut.index(doc.len() + 1);
        while !doc.is_char_boundary(at) {
            at -= 1;
        }
        same_as_serde(&paths(false), &doc[..at])?;
    }
}

proptest! {
    #[test]
    fn special_byte_is_the_first_quote_backslash_or_control(
        bytes in prop::collection::vec(prop_oneof![
            8 => 0x20u8..0x7f, 2 => 0x80u8..=0xff, 1 => Just(b'"'), 1 => Just(b'\\'), 1 => 0u8..0x20,
        ], 0..40),
        from in any::<prop::sample::Index>(),
    ) {
        let i = from.index(bytes.len() + 1);
        let naive = bytes[i..]
            .iter()
            .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
            .map(|k| i + k);
        prop_assert_eq!(flat::special_byte(&bytes, i), naive);
    }
}

#[test]
fn fuzz_corpus_records_as_serde_reads_them() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/fuzz/records.jsonl"
    );
    let data = std::fs::read_to_string(path).unwrap();
    assert!(data.lines().count() >= 20);
    for line in data.lines() {
        for nested in [false, true] {
            same_as_serde(&paths(nested), line).unwrap();
        }
    }
}

/// The shapes shippers write are read by the scanner itself, not left to serde.
#[test]
fn common_records_take_the_flat_path() {
    let fp = paths(false);
    for doc in [
        r#"{"job":"j","rank":3,"host":null,"ts":null,"line":"[rank3]: step 7","source":"r3"}"#,
        r#" { "job" : "j", "line" : "File \"a.py\", line 3\ttab \u001b[0m \ud83d\ude00 é" } "#,
        r#"{"line":"x","n":-1.5e3,"b":true,"s":"\\\/"}"#,
        "{}",
    ] {
        let mut out = vec![Scalar::Missing; fp.slots()];
        let flat = flat::extract(&fp.root, doc, &mut out);
        assert_eq!(flat, Some(true), "{doc}");
        same_as_serde(&fp, doc).unwrap();
    }
    let mut out = vec![Scalar::Missing; fp.slots()];
    flat::extract(&fp.root, r#"{"line":"a\"b","rank":7}"#, &mut out);
    assert_eq!(out[4].as_str(), Some("a\"b"));
    assert_eq!(out[1], Scalar::U64(7));
}
