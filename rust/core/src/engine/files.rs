//! Local analysis on every core: files are read, decompressed, cut into lines, peeled and
//! scanned on worker threads (one Hyperscan scratch each, one shared database), and their
//! lines are applied to the job state on the calling thread, file after file in the given
//! order, exactly as feeding the files one by one would. So the result does not depend on
//! the number of threads or on which finishes first.
//!
//! The stages are a pipeline with bounded queues: each file has a queue of at most
//! `QUEUED_PIECES` decoded pieces, and a worker takes the next file only when it has handed
//! over the last piece of its current one, so at most `workers × (QUEUED_PIECES + 2)` pieces
//! (each at most `PIECE_BYTES` of text and its decoded lines) are held at once, however large
//! the job. Scoped threads rather than a pool crate: the work is one fan-out per call, and the
//! ordered hand-over needs a queue per file, which a parallel iterator would not give.

use super::lines::{Batch, LineDecoder, LineState, Times};
use super::{piece_end, Engine, StreamHints, PIECE_BYTES};
use crate::files::{LogReader, ReadError, CHUNK_BYTES};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Decoded pieces a file's queue holds before its worker waits.
const QUEUED_PIECES: usize = 4;

/// One file to analyze and what its path says about its lines.
#[derive(Debug, Clone)]
pub struct FileInput {
    pub path: PathBuf,
    pub job: String,
    /// The file's name as diagnoses show it.
    pub origin: String,
    pub hints: StreamHints,
}

/// What `feed_files` did.
#[derive(Debug, Default)]
pub struct FilesReport {
    /// Bytes fed (decompressed).
    pub bytes: u64,
    /// Files not read, or not read to the end: (index in the input, why).
    pub problems: Vec<(usize, ReadError)>,
    /// Where the time went, in seconds: reading and decompressing, and decoding and
    /// scanning (summed over the workers); applying to the job state, and waiting for the
    /// workers (on the calling thread).
    pub read_s: f64,
    pub decode_s: f64,
    pub apply_s: f64,
    pub wait_s: f64,
}

/// Seconds a worker spent reading and decoding.
#[derive(Default)]
struct WorkerTime {
    read_s: f64,
    decode_s: f64,
}

/// What a worker hands over for a file, in order.
enum Piece {
    /// Decoded lines; their text is `chunk[range]`.
    Lines {
        chunk: Arc<Vec<u8>>,
        range: std::ops::Range<usize>,
        batch: Batch,
    },
    /// The file is done; why it was not read to the end, if it was not.
    End(Option<ReadError>),
}

/// The number of workers for `threads` (0: one per available core) and `files` files.
fn worker_count(threads: usize, files: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let wanted = if threads == 0 { cores } else { threads };
    wanted.clamp(1, files.max(1))
}

impl Engine {
    /// Reads, decodes and feeds every file (each a stream of its job, opened and closed
    /// here) with `threads` workers (0: one per core). The result is the same as feeding the
    /// files one after another. `progress`, if given, counts the bytes fed so far.
    pub fn feed_files(
        &mut self,
        files: &[FileInput],
        threads: usize,
        progress: Option<&AtomicU64>,
    ) -> FilesReport {
        let workers = worker_count(threads, files.len());
        let (senders, receivers): (Vec<_>, Vec<_>) = files
            .iter()
            .map(|_| {
                let (tx, rx) = sync_channel::<Piece>(QUEUED_PIECES);
                (Mutex::new(Some(tx)), rx)
            })
            .collect();
        let next = AtomicUsize::new(0);
        let (catalog, max_line, year) = (
            self.catalog.clone(),
            self.cfg.max_line_bytes,
            self.cfg.default_year,
        );
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let (senders, next, catalog) = (&senders, &next, catalog.clone());
                    s.spawn(move || {
                        let mut decoder = LineDecoder::new(catalog, max_line, year);
                        let mut time = WorkerTime::default();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(slot) = senders.get(i) else { break };
                            let tx = slot.lock().ok().and_then(|mut t| t.take());
                            if let Some(tx) = tx {
                                decode_file(&mut decoder, &files[i].path, &tx, &mut time);
                            }
                        }
                        time
                    })
                })
                .collect();
            let mut report = self.apply_files(files, receivers, progress);
            for time in handles.into_iter().filter_map(|h| h.join().ok()) {
                report.read_s += time.read_s;
                report.decode_s += time.decode_s;
            }
            report
        })
    }

    /// Takes each file's pieces in file order and applies them to its stream.
    fn apply_files(
        &mut self,
        files: &[FileInput],
        receivers: Vec<Receiver<Piece>>,
        progress: Option<&AtomicU64>,
    ) -> FilesReport {
        let mut report = FilesReport::default();
        let mut clock = Instant::now();
        let mut lap = |into: &mut f64| {
            let now = Instant::now();
            *into += (now - clock).as_secs_f64();
            clock = now;
        };
        for (i, (f, rx)) in files.iter().zip(receivers).enumerate() {
            let id = self.open_stream(&f.job, &f.origin, f.hints.clone());
            let problem = loop {
                let piece = rx.recv();
                lap(&mut report.wait_s);
                match piece {
                    Ok(Piece::Lines {
                        chunk,
                        range,
                        mut batch,
                    }) => {
                        let n = batch.counts.bytes;
                        self.apply_piece(id, &chunk[range], &mut batch);
                        drop(batch);
                        lap(&mut report.apply_s);
                        report.bytes += n;
                        if let Some(p) = progress {
                            p.fetch_add(n, Ordering::Relaxed);
                        }
                    }
                    Ok(Piece::End(problem)) => break problem,
                    // Its worker stopped without saying why (it panicked).
                    Err(_) => break Some(ReadError::Unreadable("reading stopped".into())),
                }
            };
            self.close_stream(id);
            if let Some(p) = problem {
                report.problems.push((i, p));
            }
        }
        report
    }

    fn apply_piece(&mut self, stream_id: u64, text: &[u8], batch: &mut Batch) {
        let Some(mut st) = self.streams.remove(&stream_id) else {
            return;
        };
        let mut job = self.take_job(&st.job);
        self.apply_batch(&mut job, &mut st, text, batch);
        self.put_back(job, st, stream_id);
    }
}

/// Reads and decodes one file into its queue; stops early if nobody takes the pieces.
fn decode_file(
    decoder: &mut LineDecoder,
    path: &std::path::Path,
    tx: &SyncSender<Piece>,
    time: &mut WorkerTime,
) {
    let started = Instant::now();
    let mut reader = match LogReader::open(path) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Piece::End(Some(e)));
            return;
        }
    };
    let mut st = LineState::default();
    let mut clock = started;
    let problem = loop {
        let chunk = match reader.next_chunk(CHUNK_BYTES) {
            Ok(Some(c)) => Arc::new(c),
            Ok(None) => break None,
            Err(e) => break Some(e),
        };
        let mut pos = 0;
        while pos < chunk.len() {
            let end = piece_end(&chunk, pos, PIECE_BYTES);
            let mut batch = Batch::default();
            let decode = Instant::now();
            time.read_s += (decode - clock).as_secs_f64();
            decoder.chunk(&mut st, &chunk[pos..end], Times::default(), &mut batch);
            clock = Instant::now();
            time.decode_s += (clock - decode).as_secs_f64();
            let piece = Piece::Lines {
                chunk: chunk.clone(),
                range: pos..end,
                batch,
            };
            if tx.send(piece).is_err() {
                return;
            }
            pos = end;
            clock = Instant::now();
        }
    };
    // The end of the file (also after an error): its unfinished last line is a line.
    let mut batch = Batch::default();
    decoder.finish(&mut st, &mut batch);
    let last = Piece::Lines {
        chunk: Arc::new(Vec::new()),
        range: 0..0,
        batch,
    };
    if tx.send(last).is_ok() {
        let _ = tx.send(Piece::End(problem));
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
