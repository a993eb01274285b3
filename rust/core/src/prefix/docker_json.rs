//! Docker's `json-file` log driver: each line a process printed becomes one JSON object,
//! `{"log":"<the line>\n","stream":"stdout","time":"<RFC 3339>"}`. A long line is split into
//! several objects; only the last one's `log` ends with the newline.

use crate::timefmt::iso_datetime;
use serde::Deserialize;
use std::borrow::Cow;

/// One object's text: the line or a piece of it.
#[derive(Debug, PartialEq, Eq)]
pub struct DockerPiece<'a> {
    /// The text without its newline.
    pub text: Cow<'a, str>,
    /// The text ends the line (its `log` ended with a newline).
    pub complete: bool,
    /// The `time` the daemon received it, as epoch milliseconds.
    pub ts_ms: Option<i64>,
}

#[derive(Deserialize)]
struct Object<'a> {
    #[serde(borrow)]
    log: Cow<'a, str>,
    #[serde(borrow, default)]
    time: Option<Cow<'a, str>>,
}

/// The piece `line` carries, if it is a json-file object (Docker writes `log` first; a line
/// that only looks like one is left as it is).
pub fn docker_json(line: &str) -> Option<DockerPiece<'_>> {
    if !line.starts_with("{\"log\":") {
        return None;
    }
    let object: Object = serde_json::from_str(line).ok()?;
    let ts_ms = object
        .time
        .as_deref()
        .and_then(|t| iso_datetime(t.as_bytes()))
        .map(|(ms, _)| ms);
    let complete = object.log.ends_with('\n');
    let text = match object.log {
        Cow::Borrowed(s) => Cow::Borrowed(s.trim_end_matches(['\n', '\r'])),
        Cow::Owned(mut s) => {
            s.truncate(s.trim_end_matches(['\n', '\r']).len());
            Cow::Owned(s)
        }
    };
    Some(DockerPiece {
        text,
        complete,
        ts_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_give_their_line_and_time() {
        let p = docker_json(r#"{"log":"node-07:40213:40213 [5] NCCL INFO Using network IB\n","stream":"stdout","time":"2026-03-14T09:10:02.551203761Z"}"#).unwrap();
        assert_eq!(p.text, "node-07:40213:40213 [5] NCCL INFO Using network IB");
        assert!(p.complete);
        assert_eq!(p.ts_ms, Some(1_773_479_402_551));
        let p = docker_json(r#"{"log":"\u001b[31mRuntimeError: \"x\"\r\n","stream":"stderr"}"#)
            .unwrap();
        assert_eq!(p.text, "\u{1b}[31mRuntimeError: \"x\"");
        assert_eq!(p.ts_ms, None);
    }

    #[test]
    fn a_split_line_is_marked_incomplete() {
        let p = docker_json(r#"{"log":"first half of a long line","stream":"stdout","time":"2026-03-14T09:10:02Z"}"#).unwrap();
        assert!(!p.complete);
        assert_eq!(p.text, "first half of a long line");
    }

    #[test]
    fn other_lines_are_not_objects() {
        for line in [
            r#"{"message":"x"}"#,
            r#"{"log":"cut short by the line limit"#,
            r#"{"log":42}"#,
            "plain text",
        ] {
            assert_eq!(docker_json(line), None, "{line}");
        }
    }
}
