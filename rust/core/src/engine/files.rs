//! Local analysis on every core: files are read, decompressed, cut into lines, peeled and
//! scanned on worker threads (one Hyperscan scratch each, one shared database), and their
//! lines are applied to the job state on the calling thread, file after file in the given
//! order, exactly as feeding the files one by one would. So the result does not depend on
//! the number of threads or on which finishes first.
//!
//! The stages are a pipeline with bounded queues: each file has a queue of at most
//! `QUEUED_PIECES` decoded pieces, and a worker takes the next file only when it has handed
//! over the last piece of its current one and that file is at most `LOOKAHEAD_FILES` per
//! worker past the one being applied. So at most `workers × (QUEUED_PIECES + 2)` pieces of
//! a large file, or the pieces of a few small files (each at most `PIECE_BYTES` of text and
//! its decoded lines, plus one `CHUNK_BYTES` read buffer per worker), are held at once,
//! however large the job. Without the file bound, workers ran ahead through a job of small
//! files (a queue never fills) and held most of it decoded in fresh memory. Piece buffers go back to a
//! small pool once applied: allocating on one thread and freeing on another costs glibc's
//! allocator more than the decoding. Scoped threads rather than a pool crate: the work is one
//! fan-out per call, and the ordered hand-over needs a queue per file, which a parallel
//! iterator would not give.

use super::lines::{Batch, LineDecoder, LineState, Times};
use super::{piece_end, Engine, StreamHints, PIECE_BYTES};
use crate::files::{LogReader, ReadError, CHUNK_BYTES};
use crate::filetext::{FileIdentity, TextAt};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvError, SyncSender};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Decoded pieces a file's queue holds before its worker waits.
const QUEUED_PIECES: usize = 4;
/// Files per worker that may be decoded past the one being applied.
const LOOKAHEAD_FILES: usize = 4;

/// How far the apply stage has come: the workers wait for it to come near their next file.
struct Gate {
    applied: Mutex<usize>,
    moved: Condvar,
    ahead: usize,
}

impl Gate {
    fn new(ahead: usize) -> Gate {
        Gate {
            applied: Mutex::new(0),
            moved: Condvar::new(),
            ahead,
        }
    }

    /// Waits until file `i` is close enough to the one being applied.
    fn wait_for(&self, i: usize) {
        let mut applied = self.applied.lock().unwrap_or_else(|p| p.into_inner());
        while i >= applied.saturating_add(self.ahead) {
            applied = self.moved.wait(applied).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The apply stage is at file `i` (`usize::MAX`: done, nobody waits any more).
    fn applying(&self, i: usize) {
        *self.applied.lock().unwrap_or_else(|p| p.into_inner()) = i;
        self.moved.notify_all();
    }
}

/// Opens the gate for good when the apply stage ends, also by a panic.
struct OpenOnDrop<'a>(&'a Gate);

impl Drop for OpenOnDrop<'_> {
    fn drop(&mut self) {
        self.0.applying(usize::MAX);
    }
}

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
// Nearly every piece is `Lines`: the rare `End` wastes its padding, boxing would cost an
// allocation per piece.
#[allow(clippy::large_enum_variant)]
enum Piece {
    /// Decoded lines, decoded from `text`; `at`: the file and where `text` starts in it,
    /// when those are the file's own bytes (a plain file).
    Lines {
        text: Vec<u8>,
        batch: Batch,
        at: Option<(FileIdentity, u64)>,
    },
    /// The file is done; why it was not read to the end, if it was not.
    End(Option<ReadError>),
}

/// The files' queues, each made when its file comes within the look-ahead window: made for
/// every file up front, the empty queues of 60,000 one-line files held 1.6 KiB each.
struct Queues<'a> {
    senders: &'a [Mutex<Option<SyncSender<Piece>>>],
    receivers: VecDeque<Receiver<Piece>>,
    made: usize,
}

impl Queues<'_> {
    /// Makes the queues of the files before `end`.
    fn make_up_to(&mut self, end: usize) {
        while self.made < end.min(self.senders.len()) {
            let (tx, rx) = sync_channel::<Piece>(QUEUED_PIECES);
            *self.senders[self.made]
                .lock()
                .unwrap_or_else(|p| p.into_inner()) = Some(tx);
            self.receivers.push_back(rx);
            self.made += 1;
        }
    }

    /// The queue of the next file to apply (they are applied in order).
    fn next(&mut self) -> Option<Receiver<Piece>> {
        self.receivers.pop_front()
    }
}

/// Applied pieces' buffers, for the workers to fill again.
struct Pool {
    texts: Mutex<Vec<Vec<u8>>>,
    batches: Mutex<Vec<Batch>>,
    /// The most buffers of each kind kept.
    keep: usize,
}

impl Pool {
    fn new(workers: usize) -> Pool {
        Pool {
            texts: Mutex::new(Vec::new()),
            batches: Mutex::new(Vec::new()),
            keep: workers * (QUEUED_PIECES + 2 + 2 * LOOKAHEAD_FILES),
        }
    }

    fn text(&self) -> Vec<u8> {
        let reused = self.texts.lock().ok().and_then(|mut v| v.pop());
        reused.unwrap_or_default()
    }

    fn batch(&self) -> Batch {
        let reused = self.batches.lock().ok().and_then(|mut v| v.pop());
        reused.unwrap_or_default()
    }

    /// Takes back a piece's buffers; big texts (a whole chunk) are not kept.
    fn put(&self, mut text: Vec<u8>, mut batch: Batch) {
        if text.capacity() <= 2 * PIECE_BYTES {
            text.clear();
            if let Ok(mut v) = self.texts.lock() {
                if v.len() < self.keep {
                    v.push(text);
                }
            }
        }
        batch.clear();
        if let Ok(mut v) = self.batches.lock() {
            if v.len() < self.keep {
                v.push(batch);
            }
        }
    }
}

/// Workers per core at most: more than a few per core only add memory (each holds its chunk,
/// batches and scratch) and contention, even when reads wait on a network filesystem.
const MAX_WORKERS_PER_CORE: usize = 4;

/// The number of workers for `threads` (0: one per available core) and `files` files.
fn worker_count(threads: usize, files: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    worker_count_on(cores, threads, files)
}

fn worker_count_on(cores: usize, threads: usize, files: usize) -> usize {
    let wanted = if threads == 0 { cores } else { threads };
    wanted
        .min(cores * MAX_WORKERS_PER_CORE)
        .clamp(1, files.max(1))
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
        let ahead = workers * LOOKAHEAD_FILES;
        let senders: Vec<Mutex<Option<SyncSender<Piece>>>> =
            files.iter().map(|_| Mutex::new(None)).collect();
        let mut queues = Queues {
            senders: &senders,
            receivers: VecDeque::new(),
            made: 0,
        };
        queues.make_up_to(ahead);
        let next = AtomicUsize::new(0);
        let gate = Gate::new(ahead);
        let pool = Pool::new(workers);
        let (catalog, max_line, year) = (
            self.catalog.clone(),
            self.cfg.max_line_bytes,
            self.cfg.default_year,
        );
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    let (senders, next, pool, gate) = (&senders, &next, &pool, &gate);
                    let mut worker = Worker {
                        decoder: LineDecoder::new(catalog.clone(), max_line, year),
                        pool,
                        chunk: Vec::new(),
                        time: WorkerTime::default(),
                    };
                    s.spawn(move || {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(slot) = senders.get(i) else { break };
                            gate.wait_for(i);
                            let tx = slot.lock().ok().and_then(|mut t| t.take());
                            if let Some(tx) = tx {
                                worker.decode_file(&files[i].path, &tx);
                            }
                        }
                        worker.time
                    })
                })
                .collect();
            let open = OpenOnDrop(&gate);
            let mut report = self.apply_files(files, &mut queues, progress, &pool, &gate);
            drop(open);
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
        queues: &mut Queues,
        progress: Option<&AtomicU64>,
        pool: &Pool,
        gate: &Gate,
    ) -> FilesReport {
        let mut report = FilesReport::default();
        let mut clock = Instant::now();
        let mut lap = |into: &mut f64| {
            let now = Instant::now();
            *into += (now - clock).as_secs_f64();
            clock = now;
        };
        for (i, f) in files.iter().enumerate() {
            queues.make_up_to(i.saturating_add(gate.ahead));
            gate.applying(i);
            let rx = queues.next();
            let id = self.open_stream(&f.job, &f.origin, f.hints.clone());
            let mut registered = None;
            let problem = loop {
                let piece = rx.as_ref().map_or(Err(RecvError), Receiver::recv);
                lap(&mut report.wait_s);
                match piece {
                    Ok(Piece::Lines {
                        text,
                        mut batch,
                        at,
                    }) => {
                        let n = batch.counts.bytes;
                        let at = at.map(|(identity, offset)| TextAt {
                            file: *registered
                                .get_or_insert_with(|| self.file_texts.register(&f.path, identity)),
                            offset,
                        });
                        self.apply_piece(id, &text, &mut batch, at);
                        pool.put(text, batch);
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

    fn apply_piece(&mut self, stream_id: u64, text: &[u8], batch: &mut Batch, at: Option<TextAt>) {
        let Some(mut st) = self.streams.remove(&stream_id) else {
            return;
        };
        let mut job = self.take_job(&st.job);
        st.text_at = at;
        self.apply_batch(&mut job, &mut st, text, batch);
        st.text_at = None;
        self.put_back(job, st, stream_id);
    }
}

/// A decoding thread: its decoder, the read buffer it reuses, where its time went.
struct Worker<'a> {
    decoder: LineDecoder,
    pool: &'a Pool,
    chunk: Vec<u8>,
    time: WorkerTime,
}

impl Worker<'_> {
    /// Reads and decodes one file into its queue; stops early if nobody takes the pieces.
    fn decode_file(&mut self, path: &std::path::Path, tx: &SyncSender<Piece>) {
        let mut clock = Instant::now();
        let mut reader = match LogReader::open(path) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Piece::End(Some(e)));
                return;
            }
        };
        let mut st = LineState::default();
        let mut chunk = std::mem::take(&mut self.chunk);
        let identity = reader.identity();
        let mut first_chunk = true;
        let problem = loop {
            let chunk_at = identity.map(|id| (id, reader.delivered()));
            match reader.next_chunk_into(&mut chunk, CHUNK_BYTES) {
                Ok(true) => {}
                Ok(false) => break None,
                Err(e) => break Some(e),
            }
            if first_chunk {
                // Stamps with no year (glog's `E0421`) take the year of the file's dated lines.
                st.year = crate::timefmt::year_stated_in(&chunk);
                st.console_width = super::console_rows::console_width(&chunk);
                st.numbered = super::numbered_lines::numbered(&chunk);
                first_chunk = false;
            }
            let decode = Instant::now();
            self.time.read_s += (decode - clock).as_secs_f64();
            let sent = self.send_pieces(&mut st, (&mut chunk, chunk_at), tx);
            clock = Instant::now();
            self.time.decode_s += (clock - decode).as_secs_f64();
            if !sent {
                return;
            }
        };
        self.chunk = chunk;
        // The end of the file (also after an error): its unfinished last line is a line.
        let mut batch = self.pool.batch();
        self.decoder.finish(&mut st, &mut batch);
        let last = Piece::Lines {
            text: Vec::new(),
            batch,
            at: None,
        };
        if tx.send(last).is_ok() {
            let _ = tx.send(Piece::End(problem));
        }
    }

    /// Decodes a chunk a piece at a time and queues the pieces; false if nobody takes them.
    /// A chunk that is one piece (a small file) is handed over whole, else each piece is a
    /// copy (the chunk buffer is read into again).
    fn send_pieces(
        &mut self,
        st: &mut LineState,
        (chunk, chunk_at): (&mut Vec<u8>, Option<(FileIdentity, u64)>),
        tx: &SyncSender<Piece>,
    ) -> bool {
        let mut pos = 0;
        while pos < chunk.len() {
            let end = piece_end(chunk, pos, PIECE_BYTES);
            let text = if pos == 0 && end == chunk.len() {
                std::mem::replace(chunk, self.pool.text())
            } else {
                let mut t = self.pool.text();
                t.extend_from_slice(&chunk[pos..end]);
                t
            };
            let mut batch = self.pool.batch();
            self.decoder.chunk(st, &text, Times::default(), &mut batch);
            let at = chunk_at.map(|(id, offset)| (id, offset + pos as u64));
            if tx.send(Piece::Lines { text, batch, at }).is_err() {
                return false;
            }
            pos = end;
        }
        true
    }
}
#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
