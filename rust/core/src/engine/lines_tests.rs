//! Lines are scanned in runs after peeling; each line must still get exactly the hits and
//! fields that scanning its own message alone gives, whatever path decoded it (plain chunk,
//! cleaned, CRI-joined, carried over between chunks, whole record text).

use super::*;
use crate::catalog::tests::small;

const CAUSE: &str = "node-3:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: \
    Connect to 172.17.0.";
const TIMEOUT: &str = "[rank3]:[E1201 10:00:00.000000 1 ProcessGroupNCCL.cpp:1] Watchdog \
    caught collective operation timeout: WorkNCCL(SeqNum=";
const USING: &str = "node-3:812:812 [3] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.";

/// Line `i` of a mixed log: matches of every signature at irregular places, lines that
/// match none, blank lines and prefix-only lines.
fn line(i: usize) -> String {
    match i % 23 {
        0 | 7 => format!("{CAUSE}{}<{i}> failed : Network is unreachable", i % 250),
        5 => format!("{TIMEOUT}{i}, OpType=ALLREDUCE) ran for 600000 milliseconds"),
        11 | 12 => format!("{USING}{}<0>", i % 250),
        13 => String::new(),
        17 => "[default3]:".to_string(),
        _ => format!("[default{}]:step {i} loss 0.{i}", i % 8),
    }
}

/// What scanning `msg` alone gives: signatures and their fields, in the engine's order.
fn reference(catalog: &Catalog, msg: &str) -> Vec<(u16, Vec<(String, String)>)> {
    catalog
        .signatures_matching(msg.as_bytes())
        .iter()
        .map(|&sig| {
            let mut fields = Vec::new();
            if catalog.signatures[sig as usize].ingest_fields {
                catalog.extract_fields(sig, msg, true, &mut fields);
            }
            (sig, fields)
        })
        .collect()
}

/// Checks every decoded line of `batch` (decoded from `chunk`) against `reference`;
/// returns the lines' texts and the number of hits seen.
fn check(catalog: &Catalog, chunk: &[u8], batch: &mut Batch) -> (Vec<String>, usize) {
    let (text, lines, hits, fields) = batch.parts(chunk);
    let mut seen = 0;
    let mut texts = Vec::new();
    for d in lines {
        let line = text(d);
        let got: Vec<_> = hits[Batch::hits_of(d)]
            .iter()
            .map(|h| {
                let msg = d.meta.message(line);
                let spans = &fields[h.fields.clone()];
                (h.sig, catalog.field_pairs(h.sig, msg, spans).collect())
            })
            .collect();
        assert_eq!(
            got,
            reference(catalog, d.meta.message(line)),
            "line {line:?}"
        );
        seen += got.len();
        texts.push(line.to_string());
    }
    (texts, seen)
}

fn decoder() -> (Arc<Catalog>, LineDecoder) {
    let catalog = Arc::new(small());
    let decoder = LineDecoder::new(catalog.clone(), 4096, 2026);
    (catalog, decoder)
}

#[test]
fn runs_of_lines_get_each_lines_own_hits() {
    let (catalog, mut dec) = decoder();
    // Several runs' worth, not a multiple of the run length, cut into chunks at awkward
    // places so that lines are carried over between chunks.
    let n = 5 * SCAN_RUN + 19;
    let text: String = (0..n).map(|i| line(i) + "\n").collect();
    let bytes = text.as_bytes();
    let mut st = LineState::default();
    let (mut texts, mut hits) = (Vec::new(), 0);
    let mut pos = 0;
    for cut in [1, 97, 4000, 4001, 9000, bytes.len()] {
        let chunk = &bytes[pos..cut.min(bytes.len())];
        let mut batch = Batch::default();
        dec.chunk(&mut st, chunk, Times::default(), &mut batch);
        let (t, h) = check(&catalog, chunk, &mut batch);
        texts.extend(t);
        hits += h;
        pos = cut.min(bytes.len());
    }
    let mut batch = Batch::default();
    dec.finish(&mut st, &mut batch);
    assert!(batch.lines.is_empty());
    let expected: Vec<String> = (0..n)
        .map(line)
        .filter(|l| !l.is_empty() && l != "[default3]:")
        .collect();
    assert_eq!(texts, expected);
    // 4 matching kinds of line out of 23 (the timeout line matches one signature).
    assert!(hits >= 4 * (n / 23), "{hits} hits");
}

#[test]
fn cleaned_and_joined_lines_get_their_own_hits() {
    let (catalog, mut dec) = decoder();
    let mut text = String::new();
    for i in 0..3 * SCAN_RUN {
        match i % 5 {
            // CRLF and ANSI make the chunk take the per-line cleaning path.
            0 => text += &format!("\x1b[31m{}\x1b[0m\r\n", line(i)),
            // A CRI envelope split in two pieces, joined into one line.
            1 => {
                let l = line(i);
                let (a, b) = l.split_at(l.len() / 2);
                text += &format!("2026-12-01T10:00:00.000000000Z stderr P {a}\n");
                text += &format!("2026-12-01T10:00:00.000000001Z stderr F {b}\n");
            }
            _ => text += &format!("{}\n", line(i)),
        }
    }
    // No newline at the end: the last line waits for `finish`.
    let bytes = text.trim_end_matches('\n').as_bytes();
    let mut st = LineState::default();
    let mut batch = Batch::default();
    dec.chunk(&mut st, bytes, Times::default(), &mut batch);
    let (texts, hits) = check(&catalog, bytes, &mut batch);
    assert!(hits > 0);
    let mut last = Batch::default();
    dec.finish(&mut st, &mut last);
    let (tail, _) = check(&catalog, &[], &mut last);
    assert_eq!(tail.len(), 1);
    let shown = (0..3 * SCAN_RUN)
        .filter(|&i| !line(i).is_empty() && line(i) != "[default3]:")
        .count();
    assert_eq!(texts.len() + tail.len(), shown);

    // Record text: lines arrive whole, with the record's times.
    let mut rec = Batch::default();
    let body: String = (0..2 * SCAN_RUN + 3).map(|i| line(i) + "\n").collect();
    let body = body.trim_end_matches('\n').as_bytes();
    dec.whole_lines(&mut LineState::default(), body, Times::default(), &mut rec);
    let (_, hits) = check(&catalog, body, &mut rec);
    assert!(hits > 0);
}

#[test]
fn repeated_messages_get_the_fields_of_their_own_text() {
    // The same message from many ranks (field spans taken from the decoder's memo), other
    // messages of the same signature between them, and messages too long to be remembered.
    let (catalog, mut dec) = decoder();
    let long_error = "x".repeat(2 * MEMO_MAX_MSG);
    let mut text = String::new();
    for i in 0..3 * SCAN_RUN {
        let addr = if i % 7 == 3 { 9 } else { 5 };
        let error = if i % 11 == 5 {
            &long_error
        } else {
            "Network is unreachable"
        };
        text += &format!(
            "node-{r}:8{r}:8{r} [{r}] misc/socket.cc:484 NCCL WARN socketStartConnect: \
             Connect to 172.17.0.{addr}<7> failed : {error}\n",
            r = i % 8
        );
    }
    let bytes = text.as_bytes();
    let mut batch = Batch::default();
    dec.chunk(
        &mut LineState::default(),
        bytes,
        Times::default(),
        &mut batch,
    );
    let (texts, hits) = check(&catalog, bytes, &mut batch);
    assert_eq!(texts.len(), 3 * SCAN_RUN);
    assert!(hits >= 3 * SCAN_RUN, "{hits} hits");
    let sig = catalog.index_of("sock_connect").unwrap();
    let memo = &dec.field_memo[sig as usize];
    assert!(memo.entries.len() <= FIELD_MEMO_ENTRIES);
    let kept = |memo: &FieldMemo, tail: &[u8]| {
        memo.entries
            .iter()
            .any(|e| e.key.ends_with(tail) && !e.spans.is_empty())
    };
    assert!(kept(memo, b"failed : Network is unreachable"));

    // A message over the limit is not kept; the others stay.
    let mut batch = Batch::default();
    let line = format!("node-1:1:1 [1] NCCL WARN socketStartConnect: Connect to 172.17.0.5<7> failed : {long_error}\n");
    dec.chunk(
        &mut LineState::default(),
        line.as_bytes(),
        Times::default(),
        &mut batch,
    );
    check(&catalog, line.as_bytes(), &mut batch);
    let memo = &dec.field_memo[sig as usize];
    assert!(!kept(memo, long_error.as_bytes()));
    assert!(kept(memo, b"failed : Network is unreachable"));
}

/// The first-byte shortcuts answer exactly what trimming answers, for ASCII and Unicode
/// white space at either end.
#[test]
fn blank_and_suffix_checks_match_trimming() {
    let samples = [
        "",
        " ",
        "\t",
        "\u{b}",
        "\u{c}",
        "\r",
        "\u{a0}",
        "\u{3000}",
        "\u{2028}",
        "x",
        " x",
        "x ",
        "\u{3000}x",
        "x\u{3000}",
        "é",
        "Last error:",
        "Last error: ",
        "Last error:\u{3000}",
        "Last error:\u{b}",
        "a Last error:",
        "Last error:x",
        "Last error",
        "\u{a0}\u{a0}",
    ];
    for s in samples {
        assert_eq!(is_blank(s), s.trim().is_empty(), "{s:?}");
        assert_eq!(
            ends_with_trimmed(s, "Last error:"),
            s.trim_end().ends_with("Last error:"),
            "{s:?}"
        );
    }
}

/// The lines of `text`, decoded as one chunk of a fresh stream.
fn decode_alone(text: &str) -> Batch {
    let (_, mut dec) = decoder();
    let mut batch = Batch::default();
    dec.chunk(
        &mut LineState::default(),
        text.as_bytes(),
        Times::default(),
        &mut batch,
    );
    batch
}

#[test]
fn the_exception_of_a_traceback_cut_above_its_frames_is_an_error() {
    let text = "  File \"/venv/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py\", \
        line 635, in run\n    raise RendezvousClosedError()\n\
        torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n";
    let batch = decode_alone(text);
    let levels: Vec<Level> = batch.lines.iter().map(|d| d.level).collect();
    // The frame and its source line are not errors; the exception is.
    assert_eq!(levels[2], Level::Error, "{levels:?}");
    assert!(
        levels[0] < Level::Warn && levels[1] < Level::Warn,
        "{levels:?}"
    );
}

#[test]
fn a_traceback_opened_at_the_end_of_a_loggers_line_is_one() {
    let text = "[2025-06-02 10:13:52 TP1] Scheduler hit an exception: Traceback (most recent \
        call last):\n  File \"/srv/x.py\", line 3, in run\nValueError: bad shape\n";
    let batch = decode_alone(text);
    assert_eq!(batch.lines[0].level, Level::Error);
    // The exception at its end belongs to that traceback.
    assert!(batch.lines[2].continuation);
}

#[test]
fn the_text_after_last_error_is_the_next_line_of_the_process_that_printed_it() {
    let text = "(Worker pid=7) ERROR 01-15 02:47:32 w.py:1] Last error:\n\
        (Worker pid=8) ERROR 01-15 02:47:32 w.py:1] Traceback (most recent call last):\n\
        (Worker pid=7) ERROR 01-15 02:47:32 w.py:1] Error while creating shared memory segment\n\
        (Worker pid=7) ERROR 01-15 02:47:32 w.py:1] next\n";
    let batch = decode_alone(text);
    let flags: Vec<bool> = batch.lines.iter().map(|d| d.last_error_text).collect();
    assert_eq!(flags, [false, false, true, false]);
}

/// The hits of each decoded line of `rows` (one chunk) read with `console_width`.
fn hits_per_row(rows: &str, console_width: Option<usize>) -> Vec<usize> {
    let (_, mut dec) = decoder();
    let mut st = LineState {
        console_width,
        ..LineState::default()
    };
    let mut batch = Batch::default();
    dec.chunk(&mut st, rows.as_bytes(), Times::default(), &mut batch);
    batch
        .lines
        .iter()
        .map(|d| Batch::hits_of(d).len())
        .collect()
}

#[test]
fn a_full_console_row_gets_what_it_matches_only_with_the_row_after_it() {
    let line = format!("{TIMEOUT}5, OpType=ALLREDUCE) ran for 600000 milliseconds");
    let cut = line.find("collective").unwrap();
    let rows = format!("{}\n{}\nstep 7 loss 0.1\n", &line[..cut], &line[cut..]);
    assert_eq!(hits_per_row(&rows, Some(cut)), vec![1, 0, 0]);
    assert_eq!(hits_per_row(&rows, None), vec![0, 0, 0]);
    // A row that matches alone keeps its own hits, and gets nothing twice.
    let whole = format!("{line}\n{line}\n");
    assert_eq!(hits_per_row(&whole, Some(line.len())), vec![1, 1]);
}

#[test]
fn the_nccl_error_class_under_torchs_error_line_goes_on_with_it() {
    let text = "[rank3]:[E121 09:55:38.624 ProcessGroupNCCL.cpp:542] [Rank 3] Collective \
        WorkNCCL(SeqNum=9, OpType=ALLTOALL) raised the following async exception: NCCL error: \
        unhandled system error, NCCL version 2.21.5\n\
        ncclSystemError: System call (e.g. socket, malloc) or external library call failed.\n\
        nccl team notes: none\n";
    let batch = decode_alone(text);
    let flags: Vec<bool> = batch.lines.iter().map(|d| d.continuation).collect();
    assert_eq!(flags, [false, true, false]);
}

#[test]
fn an_empty_last_error_leaves_the_backtrace_after_it_as_it_is() {
    let text = "ncclSystemError: System call failed.\nLast error:\n\n\
        Exception raised from checkForNCCLErrorsInternal at ../c10d/ProcessGroupNCCL.cpp:2027 \
        (most recent call first):\nframe #0: c10::Error::Error() + 0x96\n";
    let batch = decode_alone(text);
    let flags: Vec<bool> = batch.lines.iter().map(|d| d.last_error_text).collect();
    assert_eq!(flags, [false, false, false, false]);
}
