//! A poster's mark for lines left out of an excerpt (`...`, `…`, `[...]`, `<snip>`): not a line
//! any process printed, so never the line a diagnosis points at.

/// Whether `text` is only an elision mark.
pub fn is_elision_mark(text: &str) -> bool {
    let t = text.trim();
    let inner = t
        .strip_prefix(['[', '(', '<', '{'])
        .and_then(|s| s.strip_suffix([']', ')', '>', '}']))
        .unwrap_or(t)
        .trim();
    let dots = inner.chars().all(|c| c == '.' || c == '…' || c == ' ');
    let dotted = dots && (inner.contains('…') || inner.matches('.').count() >= 3);
    dotted
        || matches!(
            inner.to_ascii_lowercase().as_str(),
            "snip" | "snipped" | "truncated"
        )
}

#[cfg(test)]
mod tests {
    use super::is_elision_mark;

    #[test]
    fn dots_and_snips_are_marks() {
        for t in [
            "...", "  ....  ", "…", "[...]", "(...)", "<snip>", "[ ... ]", ". . .",
        ] {
            assert!(is_elision_mark(t), "{t}");
        }
    }

    #[test]
    fn lines_with_words_or_short_dots_are_not() {
        for t in [
            "",
            "..",
            "Loading...",
            "[rank0]: ...done",
            "<eos>",
            "snip the wire",
        ] {
            assert!(!is_elision_mark(t), "{t}");
        }
    }
}
