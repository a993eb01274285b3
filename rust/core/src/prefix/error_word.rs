//! An error stated inside a message that no producer's header levelled: a library that prints
//! its own marker mid-line (`CQE ERROR wr_id=3 status=12`, oneCCL's `|CCL_ERROR|`, a SHARP or
//! UCX line behind a prefix we do not peel) or a tool's `prog: error: ` (`slurmstepd: error:`,
//! `srun: error:`). Such a line is an error like any levelled one: without this, a failure
//! whose only account is in another library's words left the job undiagnosed.
//!
//! Only whole words count, and never a setting's value: `TORCH_CPP_LOG_LEVEL=ERROR`, a
//! `--log-level ERROR` flag or a `level: ERROR` column say what a run would log, not that it
//! failed. Lowercase `error` mid-sentence counts only in the `prog: error: ` shape; prose
//! (`no error`, `error rate`) does not.

use memchr::memmem::{self, Finder};
use std::sync::LazyLock;

/// Uppercase markers that state an error as a word of their own, as searchers built once:
/// this runs on every unlevelled line, and building a searcher costs more than most searches.
static MARKERS: LazyLock<[Finder<'static>; 3]> =
    LazyLock::new(|| [&b"ERROR"[..], b"FATAL", b"CRITICAL"].map(Finder::new));

/// Whether an unlevelled message states an error in its own words.
pub fn states_error(msg: &str) -> bool {
    let b = msg.as_bytes();
    (MARKERS.iter().any(|w| has_marker_word(b, w)) && !names_a_log_level(b))
        || tool_error(b)
        || reports_unhandled_exception(b)
}

/// A framework's own report of an exception nothing caught, at the message's start
/// (RETURNN's `Unhandled exception <class 'RuntimeError'> in thread …, proc 2834.`, an
/// `Uncaught exception: …` hook): the process is going down, whatever follows is cut off.
fn reports_unhandled_exception(b: &[u8]) -> bool {
    let Some((b'U' | b'u', rest)) = b.split_first() else {
        return false;
    };
    rest.starts_with(b"nhandled exception") || rest.starts_with(b"ncaught exception")
}

/// `word` as a token of its own, or as the end of an uppercase `LIB_ERROR` token.
fn has_marker_word(b: &[u8], marker: &Finder<'_>) -> bool {
    let word = marker.needle();
    marker.find_iter(b).any(|at| {
        let end = at + word.len();
        let start = token_start(b, at);
        let right_ok = b.get(end).is_none_or(|&c| !is_word_byte(c));
        let token = &b[start..end];
        let left_ok = start == at
            || (token[..at - start].ends_with(b"_")
                && token.iter().all(|c| c.is_ascii_uppercase() || *c == b'_'));
        right_ok && left_ok && b[..start].last() != Some(&b'=')
    })
}

fn token_start(b: &[u8], at: usize) -> usize {
    b[..at]
        .iter()
        .rposition(|&c| !is_word_byte(c))
        .map_or(0, |p| p + 1)
}

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// A line that talks about log levels: its ERROR is a setting, not an event.
fn names_a_log_level(b: &[u8]) -> bool {
    [&b"LEVEL"[..], b"level", b"Level", b"LOG_"]
        .iter()
        .any(|w| memmem::find(b, w).is_some())
}

/// `prog: error: ` / `prog: fatal error: ` at the message's start, `prog` one token
/// (`slurmstepd`, `srun`, `pdsh@node1`).
fn tool_error(b: &[u8]) -> bool {
    let name = b
        .iter()
        .take_while(|&&c| is_word_byte(c) || matches!(c, b'.' | b'-' | b'@' | b'/'))
        .count();
    name > 0
        && [&b": error: "[..], b": fatal error: "]
            .iter()
            .any(|w| b[name..].starts_with(w))
}

#[cfg(test)]
mod tests {
    use super::states_error;

    #[test]
    fn markers_inside_another_librarys_line() {
        for line in [
            "CQE ERROR wr_id=3 status=12(transport retry counter exceeded) opcode=1",
            "2024:05:29-19:16:18:(202165) |CCL_ERROR| worker.cpp:338 ccl_worker_func: caught",
            "[C25L18:0:24972 - comm.c:374] ERROR Failed to lock SAT tree",
            "FATAL: could not open device",
            "slurmstepd: error: execve(): all_reduce_perf: No such file or directory",
            "srun: error: node-3: task 7: Exited with exit code 1",
            "pdsh@node1: fatal error: cannot connect",
            "Unhandled exception <class 'OSError'> in thread <_MainThread(MainThread)>, proc 71.",
            "uncaught exception in worker loop: ValueError",
        ] {
            assert!(states_error(line), "{line}");
        }
    }

    #[test]
    fn settings_and_prose_are_not_errors() {
        for line in [
            "TORCH_CPP_LOG_LEVEL=ERROR",
            "export NCCL_DEBUG=ERROR",
            "--log-level ERROR",
            "log level: ERROR",
            "ERRORS 0",
            "CUDA_ERROR_OUT_OF_MEMORY_HANDLING enabled",
            "no error, moving on",
            "epoch 3 error rate 0.02",
            "ErrorHandler registered",
            "handled exception in retry loop, retrying",
            "Installing handler for unhandled exceptions",
        ] {
            assert!(!states_error(line), "{line}");
        }
    }
}
