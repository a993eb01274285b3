//! The engine: streams of bytes in, per-job state updated line by line, diagnoses out.
//! Callers own I/O and time; the engine owns everything that touches every line.

mod apply;
mod console_rows;
mod files;
mod lines;
mod local_routes;
mod numbered_lines;
mod ras_lines;

pub use files::{FileInput, FilesReport};

use lines::{Batch, LineCounts, LineDecoder, LineState, Times};

use crate::baseline::Baseline;
use crate::catalog::{Catalog, Role};
use crate::config::Config;
use crate::correlate::{self, Diagnosis};
use crate::filetext::{FileTexts, TextAt};
use crate::job::{ContextObs, FastMap, Incident, Job, SourceKey};
use crate::memsize;
use crate::records::{Decoded, DecoderConfig, RecordDecoder};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub lines: u64,
    pub bytes: u64,
    pub blank_lines: u64,
    pub truncated_lines: u64,
    pub invalid_utf8_lines: u64,
    pub signature_hits: u64,
    /// Lines each signature matched, by signature index (a vector: it is counted per line).
    pub hits_by_signature: Vec<u64>,
    pub unclassified_errors: u64,
    pub dropped_hits: u64,
    pub jobs_evicted: u64,
    pub ring_shrinks: u64,
    pub diagnoses_emitted: u64,
    pub memory_bytes: usize,
    pub peak_memory_bytes: usize,
    pub records: u64,
    pub rejected: HashMap<&'static str, u64>,
    pub compacted_hits: u64,
    /// Lines whose process was new when its job already had as many sources as the cap
    /// allows (routed to the job's overflow source).
    pub sources_capped: u64,
    /// Lines whose time was more than `max_ts_ahead_ms` ahead of their record's broker time.
    pub ts_ahead_clamped: u64,
    /// Jobs whose state was released after their final diagnoses (quiet for
    /// `release_quiet_ms`).
    pub jobs_released: u64,
    /// NCCL RAS reports longer than `ras_report_bytes`, not read.
    pub ras_reports_over_cap: u64,
}

/// Identity a caller knows about a stream before reading it.
#[derive(Debug, Clone, Default)]
pub struct StreamHints {
    pub source_key: Option<String>,
    pub rank: Option<u32>,
    pub local_rank: Option<u16>,
    pub host: Option<String>,
}

/// Per-stream memo of routing decisions for the job instance with `epoch`.
#[derive(Default)]
struct RouteCache {
    epoch: u64,
    key_src: Option<u32>,
    local: Vec<(u16, u32)>,
    host: Option<(String, crate::job::HostId)>,
    /// The hosts the stream's NCCL (or libfabric) lines named.
    named_hosts: NamedHosts,
}

/// The hosts a stream's lines named so far: none, one (the stream's host, for its lines that
/// name none), or several (a mixed stream: its lines that name none have no host).
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum NamedHosts {
    #[default]
    None,
    One(crate::job::HostId),
    Several,
}

struct Stream {
    /// Bytes this stream was last accounted at (`Stream::heap_bytes` then).
    accounted: usize,
    cache: RouteCache,
    job: String,
    origin: Arc<str>,
    hints: StreamHints,
    key: Option<SourceKey>,
    lines: LineState,
    last_source: Option<u32>,
    /// Where the current multi-line record started (its first line's seq).
    record_start: u64,
    open_hit: Option<usize>,
    /// Where the piece being applied starts in its file, when its lines stay there (a plain
    /// local file): its lines are kept in the rings by reference.
    text_at: Option<TextAt>,
    /// Its lines arrive in the order they were written (see `DecoderConfig::in_order`).
    in_order: bool,
    /// The innermost call of a Python traceback whose exception has not been printed yet: a
    /// hit of the source line under its latest frame (`apply::note_traceback_call`).
    cut_call: Option<Box<crate::job::Hit>>,
}

pub struct Engine {
    catalog: Arc<Catalog>,
    decoder: LineDecoder,
    batch: Batch,
    segment: Segment,
    pub cfg: Config,
    // Boxed: a table's entries are its buckets, and a table that doubles by hundreds of
    // bytes per entry jumps past the budget between two checks.
    jobs: FastMap<String, Box<Job>>,
    streams: FastMap<u64, Box<Stream>>,
    next_stream: u64,
    tick: u64,
    pub stats: Stats,
    /// Final diagnoses of evicted jobs, as compact JSON until the next poll hands them out.
    pending: Vec<Parked>,
    wall_ms: i64,
    /// job -> source -> stream id, for record-fed streams.
    record_streams: FastMap<String, FastMap<String, u64>>,
    baseline: Baseline,
    /// Accounted bytes of all jobs (the sum of their `mem_bytes`, taken out or not).
    jobs_bytes: usize,
    /// Accounted bytes of all streams and the record-stream index.
    streams_bytes: usize,
    /// Bytes of jobs released, evicted or dropped since free pages were last handed back.
    freed_since_trim: usize,
    /// Bytes of the diagnoses in `pending` (of evicted jobs, until the next poll).
    pending_bytes: usize,
    /// The job after which the next poll resumes its walk of the jobs table, when the last
    /// poll stopped at its byte bound (so that every job gets its turn).
    resume_after: Option<String>,
    /// Jobs the last `poll_bounded` call with `hold` left an incident of undiagnosed although
    /// its input changed (`Job::held`): their records fed so far are not all reflected in a
    /// diagnosis yet.
    pub held_jobs: Vec<String>,
    /// The origins of the records that fed those jobs (`Job::fed_origins`): the input
    /// positions a caller may not commit past yet.
    pub held_origins: Vec<Arc<str>>,
    /// The local files whose lines the rings keep by reference.
    file_texts: Arc<FileTexts>,
}

impl Stream {
    /// Heap the stream owns (its slot in the streams table is counted with the table).
    fn heap_bytes(&self) -> usize {
        use memsize::{arc_str, string, vec};
        let key = match &self.key {
            Some(SourceKey::Hint(k)) => arc_str(k.len()),
            _ => 0,
        };
        memsize::block(std::mem::size_of::<Stream>())
            + string(&self.job)
            + arc_str(self.origin.len())
            + self.hints.source_key.as_ref().map_or(0, string)
            + self.hints.host.as_ref().map_or(0, string)
            + key
            + self.lines.heap_bytes()
            + vec(&self.cache.local)
            + self.cache.host.as_ref().map_or(0, |(h, _)| string(h))
            + self.cut_call.as_ref().map_or(0, |h| h.kept_bytes())
    }
}

/// What the record-stream index holds for one job (its table, its key and the source names).
fn index_bytes(job: &String, sources: &FastMap<String, u64>) -> usize {
    memsize::string(job)
        + memsize::map(sources)
        + sources.keys().map(memsize::string).sum::<usize>()
}

/// A record of a `feed_records` segment: its index in the call, its stream, where its lines
/// end in the segment's batch and the line counters up to its end.
#[derive(Clone, Copy)]
struct FedRecord {
    index: usize,
    stream: u64,
    lines_end: usize,
    counts: LineCounts,
}

/// Records decoded ahead of applying them (see `Engine::feed_records`): their texts one
/// after another, their lines in one batch. Kept between calls for its buffers.
#[derive(Default)]
struct Segment {
    text: Vec<u8>,
    batch: Batch,
    fed: Vec<FedRecord>,
}

impl Segment {
    fn clear(&mut self) {
        self.text.clear();
        self.batch.clear();
        self.fed.clear();
    }
}

/// The block a job's own fields take (jobs are boxed in the jobs table).
fn job_box() -> usize {
    memsize::block(std::mem::size_of::<Job>())
}

/// Visits the jobs in table order, starting after `start` (from the first if absent) and
/// wrapping around, until `visit` says stop; returns the job it stopped at, unless that was
/// the last of the walk.
fn walk_from(
    jobs: &mut FastMap<String, Box<Job>>,
    start: Option<&str>,
    mut visit: impl FnMut(&str, &mut Job) -> bool,
) -> Option<String> {
    let first = start
        .and_then(|s| jobs.keys().position(|k| k == s))
        .map_or(0, |i| i + 1);
    let n = jobs.len();
    let mut visited = 0;
    for part in [first..n, 0..first] {
        for (name, job) in jobs.iter_mut().skip(part.start).take(part.len()) {
            visited += 1;
            if visit(name, job) {
                return (visited < n).then(|| name.clone());
            }
        }
    }
    None
}

/// A diagnosis waiting in the engine for the next poll, as JSON text: a diagnosis's value
/// tree takes about three times its text (small objects in B-tree nodes), and an evicted
/// job's diagnoses must not weigh more than the state its eviction freed.
struct Parked {
    id: String,
    job: String,
    confidence: f64,
    start_ms: Option<i64>,
    is_final: bool,
    text: Box<str>,
}

impl Parked {
    fn new(d: Diagnosis) -> Parked {
        Parked {
            text: d.json.to_string().into_boxed_str(),
            id: d.id,
            job: d.job,
            confidence: d.confidence,
            start_ms: d.start_ms,
            is_final: d.is_final,
        }
    }

    fn heap_bytes(&self) -> usize {
        memsize::block(self.text.len()) + memsize::string(&self.id) + memsize::string(&self.job)
    }

    fn into_diagnosis(self) -> Diagnosis {
        Diagnosis {
            // The text is our own serialisation of a value: it parses back.
            json: serde_json::from_str(&self.text).unwrap_or(serde_json::Value::Null),
            id: self.id,
            job: self.job,
            confidence: self.confidence,
            start_ms: self.start_ms,
            is_final: self.is_final,
        }
    }
}

/// A Kafka record as handed over: value, key, job header, broker time in ms.
pub type RawRecord<'a> = (&'a [u8], Option<&'a [u8]>, Option<&'a [u8]>, Option<i64>);

/// Lines of a multi-line record kept with a hit: whole records for causes, the head only for
/// symptoms (thousands of ranks print the same symptom record).
const CAUSE_RECORD_LINES: usize = 40;
const SYMPTOM_RECORD_LINES: usize = 0;
/// What a source costs besides its ring's lines: the struct, its key and index entries.
const SOURCE_BYTES: usize = std::mem::size_of::<crate::job::Source>() + 320;
/// The record source that the lines of sources over a job's cap are fed through.
const OVERFLOW_SOURCE: &str = "\u{0}sources over the cap";
/// Lines a ring keeps at least when the budget halves rings.
const MIN_RING_LINES: usize = 4;
/// Sources a job may always have, whatever the budget.
const MIN_SOURCES: usize = 1024;
/// The most bytes of a chunk decoded before its lines are applied (see `chunk_into`).
const PIECE_BYTES: usize = 256 << 10;

/// Where the piece of `data` that starts at `pos` ends: after the last line end within
/// `size` bytes, else after the first line end past them, else at the end of `data`.
fn piece_end(data: &[u8], pos: usize, size: usize) -> usize {
    if data.len() - pos <= size {
        return data.len();
    }
    let limit = pos + size;
    match memchr::memrchr(b'\n', &data[pos..limit]) {
        Some(i) => pos + i + 1,
        None => memchr::memchr(b'\n', &data[limit..]).map_or(data.len(), |i| limit + i + 1),
    }
}

impl Engine {
    pub fn new(catalog: Arc<Catalog>, cfg: Config) -> Engine {
        let decoder = LineDecoder::new(catalog.clone(), cfg.max_line_bytes, cfg.default_year);
        Engine {
            catalog,
            decoder,
            batch: Batch::default(),
            segment: Segment::default(),
            cfg,
            jobs: FastMap::default(),
            streams: FastMap::default(),
            next_stream: 1,
            tick: 0,
            stats: Stats::default(),
            pending: Vec::new(),
            wall_ms: 0,
            record_streams: FastMap::default(),
            baseline: Baseline::default(),
            jobs_bytes: 0,
            streams_bytes: 0,
            freed_since_trim: 0,
            pending_bytes: 0,
            resume_after: None,
            held_jobs: Vec::new(),
            held_origins: Vec::new(),
            file_texts: Arc::default(),
        }
    }

    /// Brings a job's accounted bytes, and the engine's total, up to date after it changed.
    fn settle(&mut self, job: &mut Job) {
        if job.tables_dirty {
            job.tables_cache = job.tables_bytes();
            job.tables_dirty = false;
        }
        let now = job.tables_cache + job.content_bytes + job_box();
        self.jobs_bytes = (self.jobs_bytes + now).saturating_sub(job.mem_bytes);
        job.mem_bytes = now;
        self.settle_total();
    }

    /// Re-accounts a stream after it changed (taken out of the streams table or not).
    fn settle_stream(&mut self, st: &mut Stream) {
        let now = st.heap_bytes();
        self.streams_bytes = (self.streams_bytes + now).saturating_sub(st.accounted);
        st.accounted = now;
    }

    /// The total: jobs, streams and the engine's own tables.
    fn settle_total(&mut self) {
        self.stats.memory_bytes = self.jobs_bytes
            + self.streams_bytes
            + self.pending_bytes
            + memsize::vec(&self.pending)
            + self.resume_after.as_ref().map_or(0, memsize::string)
            + self.decoder.memo_bytes()
            + memsize::map(&self.jobs)
            + memsize::map(&self.streams)
            + memsize::map(&self.record_streams);
        self.stats.peak_memory_bytes = self.stats.peak_memory_bytes.max(self.stats.memory_bytes);
    }

    /// The diagnoses of evicted jobs, handed out (no longer counted).
    fn take_pending(&mut self) -> Vec<Diagnosis> {
        self.pending_bytes = 0;
        let out = std::mem::take(&mut self.pending);
        self.settle_total();
        out.into_iter().map(Parked::into_diagnosis).collect()
    }

    /// Keeps the accounted total within the budget after `active` (taken out of the jobs
    /// map) or one of its streams grew.
    fn enforce_budget(&mut self, active: &mut Job) {
        self.settle_total();
        if self.over_budget() {
            self.relieve_memory(active);
        }
    }

    /// Whether memory must be relieved now: a line, a hit or a table's growth adds a few
    /// KiB between two checks, so relief starts a little before the budget and the
    /// accounted total never passes it.
    fn over_budget(&self) -> bool {
        let budget = self.cfg.memory_budget_bytes;
        self.stats.memory_bytes > budget - budget / 32
    }

    /// Gives back the engine's tables once they are mostly empty (after a burst of jobs was
    /// released or evicted): a table keeps its buckets otherwise, tens of bytes per stream
    /// and job that once were, counted and resident while no job is held.
    fn shrink_tables(&mut self) {
        fn sparse(len: usize, capacity: usize) -> bool {
            capacity > 64 && len * 4 < capacity
        }
        let mut shrunk = false;
        if sparse(self.jobs.len(), self.jobs.capacity()) {
            self.jobs.shrink_to(self.jobs.len() * 2);
            shrunk = true;
        }
        if sparse(self.streams.len(), self.streams.capacity()) {
            self.streams.shrink_to(self.streams.len() * 2);
            shrunk = true;
        }
        if sparse(self.record_streams.len(), self.record_streams.capacity()) {
            self.record_streams.shrink_to(self.record_streams.len() * 2);
            shrunk = true;
        }
        if sparse(self.pending.len(), self.pending.capacity()) {
            self.pending.shrink_to(self.pending.len() * 2);
            shrunk = true;
        }
        if shrunk {
            self.settle_total();
        }
    }

    /// Forgets a job's accounted bytes (it was removed from the engine).
    fn forget_job_bytes(&mut self, job: &Job) {
        self.jobs_bytes = self.jobs_bytes.saturating_sub(job.mem_bytes);
        self.freed_since_trim += job.mem_bytes;
    }

    /// Hands free pages back to the system once the jobs freed since the last time add up to
    /// a sixteenth of the budget (so that released and evicted jobs do not stay resident).
    fn trim_if_freed(&mut self) {
        if self.freed_since_trim >= (self.cfg.memory_budget_bytes / 16).max(1 << 20) {
            self.freed_since_trim = 0;
            memsize::return_free_memory();
        }
    }

    /// Removes the streams that records opened for a job, and their index.
    fn forget_record_streams(&mut self, name: &str) {
        if let Some((key, streams)) = self.record_streams.remove_entry(name) {
            let index = index_bytes(&key, &streams);
            self.streams_bytes = self.streams_bytes.saturating_sub(index);
            for id in streams.values() {
                if let Some(st) = self.streams.remove(id) {
                    self.streams_bytes = self.streams_bytes.saturating_sub(st.accounted);
                }
            }
        }
    }

    /// Sources a job may track: the configured cap, lowered so that sources alone take at
    /// most a quarter of the budget.
    fn max_sources(&self) -> usize {
        let by_budget = (self.cfg.memory_budget_bytes / 4 / SOURCE_BYTES).max(MIN_SOURCES);
        self.cfg.max_sources_per_job.min(by_budget).max(1)
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    pub fn open_stream(&mut self, job: &str, origin: &str, hints: StreamHints) -> u64 {
        let id = self.next_stream;
        self.next_stream += 1;
        let key = if let Some(k) = &hints.source_key {
            Some(SourceKey::Hint(Arc::from(
                format!("{job}\u{0}{k}").as_str(),
            )))
        } else {
            hints.rank.map(SourceKey::Rank)
        };
        let mut st = Box::new(Stream {
            accounted: 0,
            cache: RouteCache::default(),
            job: job.to_string(),
            origin: Arc::from(origin),
            hints,
            key,
            lines: LineState::default(),
            last_source: None,
            record_start: 0,
            open_hit: None,
            text_at: None,
            in_order: true,
            cut_call: None,
        });
        self.settle_stream(&mut st);
        self.streams.insert(id, st);
        self.settle_total();
        id
    }

    /// Feeds a chunk of bytes of a stream; complete lines are processed, a trailing partial
    /// line is kept for the next chunk.
    pub fn feed(&mut self, stream_id: u64, data: &[u8], ingest_ms: Option<i64>) -> bool {
        self.feed_chunk(stream_id, data, ingest_ms, None)
    }

    fn feed_chunk(
        &mut self,
        stream_id: u64,
        data: &[u8],
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) -> bool {
        let Some(mut st) = self.streams.remove(&stream_id) else {
            return false;
        };
        let mut job = self.take_job(&st.job);
        let t = Times {
            ingest_ms,
            event_ms,
        };
        self.chunk_into(&mut job, &mut st, data, t);
        self.settle_stream(&mut st);
        self.enforce_budget(&mut job);
        self.put_back(job, st, stream_id);
        true
    }

    /// Decodes a chunk of a stream and applies its lines, a piece of at most about
    /// `PIECE_BYTES` at a time (cut after a line end), so that the decoded lines held at once
    /// stay small whatever the chunk's size.
    fn chunk_into(&mut self, job: &mut Job, st: &mut Stream, data: &[u8], t: Times) {
        let mut batch = std::mem::take(&mut self.batch);
        let mut pos = 0;
        loop {
            let end = piece_end(data, pos, PIECE_BYTES);
            let piece = &data[pos..end];
            batch.clear();
            self.decoder.chunk(&mut st.lines, piece, t, &mut batch);
            self.apply_batch(job, st, piece, &mut batch);
            pos = end;
            if pos >= data.len() {
                break;
            }
        }
        self.batch = batch;
    }

    /// Decodes and applies lines that arrived whole (a record's text).
    fn lines_into(&mut self, job: &mut Job, st: &mut Stream, text: &[u8], t: Times) {
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        self.decoder.whole_lines(&mut st.lines, text, t, &mut batch);
        self.apply_batch(job, st, text, &mut batch);
        self.batch = batch;
    }

    /// The end of a stream's bytes: its unfinished last line is a line now.
    fn finish_lines(&mut self, job: &mut Job, st: &mut Stream) {
        let mut batch = std::mem::take(&mut self.batch);
        batch.clear();
        self.decoder.finish(&mut st.lines, &mut batch);
        self.apply_batch(job, st, &[], &mut batch);
        self.batch = batch;
    }

    /// Decodes and feeds a batch of Kafka records `(value, key, job header, broker time ms)`.
    /// Returns the index and reason of every record that was rejected.
    ///
    /// Records are one line each, mostly, and of many streams interleaved: decoding and
    /// scanning them one by one would scan one line at a time. So the records are taken a
    /// segment (about `PIECE_BYTES` of text) at a time: every record of the segment is
    /// decoded and its lines peeled with its stream's line state into one batch, scanned in
    /// runs across records, then the lines are applied record by record, in record order,
    /// switching job only when the job changes. The line stage reads no job state, so the
    /// result is that of feeding the records one at a time (see `tests::batched_feed`).
    pub fn feed_records(
        &mut self,
        cfg: &DecoderConfig,
        origin: &str,
        records: &[RawRecord<'_>],
    ) -> Vec<(usize, &'static str)> {
        let decoder = RecordDecoder::new(cfg);
        let mut rejected = Vec::new();
        let mut current: Option<Box<Job>> = None;
        let mut seg = std::mem::take(&mut self.segment);
        seg.clear();
        for (i, (value, key, header, broker_ms)) in records.iter().enumerate() {
            self.stats.records += 1;
            let d = match decoder.decode(value, *key, *header) {
                Ok(d) => d,
                Err(reason) => {
                    *self.stats.rejected.entry(reason).or_default() += 1;
                    rejected.push((i, reason));
                    continue;
                }
            };
            let t = Times {
                ingest_ms: *broker_ms,
                event_ms: d.event_ms,
            };
            if d.text.len() > PIECE_BYTES {
                // A large record is decoded a piece at a time (`chunk_into`), after the
                // records before it.
                self.apply_segment(&mut seg, &mut current, &decoder, origin, records);
                self.feed_record(&mut current, origin, &d, t, cfg.in_order);
                continue;
            }
            let id = self.record_stream(origin, &d, cfg.in_order);
            self.decode_record(&mut seg, id, i, &d, t);
            if seg.text.len() >= PIECE_BYTES {
                self.apply_segment(&mut seg, &mut current, &decoder, origin, records);
            }
        }
        self.apply_segment(&mut seg, &mut current, &decoder, origin, records);
        self.segment = seg;
        if let Some(j) = current {
            let name = j.name.clone();
            self.jobs.insert(name, j);
        }
        self.settle_total();
        rejected
    }

    /// Decodes record `index`'s lines (`d`, of stream `id`) into the segment, unscanned yet.
    fn decode_record(
        &mut self,
        seg: &mut Segment,
        id: u64,
        index: usize,
        d: &Decoded<'_>,
        t: Times,
    ) {
        let Some(st) = self.streams.get_mut(&id) else {
            return;
        };
        let start = seg.text.len();
        seg.text.extend_from_slice(d.text.as_bytes());
        let range = start..seg.text.len();
        if d.chunked {
            self.decoder
                .chunk_lines_in(&mut st.lines, &seg.text, range, t, &mut seg.batch);
        } else {
            self.decoder
                .whole_lines_in(&mut st.lines, &seg.text, range, t, &mut seg.batch);
        }
        seg.fed.push(FedRecord {
            index,
            stream: id,
            lines_end: seg.batch.lines.len(),
            counts: seg.batch.counts,
        });
    }

    /// Scans the segment's lines and applies them record by record. A record whose stream is
    /// gone (its job was evicted to free memory while the segment was applied) is decoded
    /// again and fed alone, as it would have been had it come after the eviction.
    fn apply_segment(
        &mut self,
        seg: &mut Segment,
        current: &mut Option<Box<Job>>,
        decoder: &RecordDecoder<'_>,
        origin: &str,
        records: &[RawRecord<'_>],
    ) {
        self.decoder.scan_rest(&seg.text, &mut seg.batch);
        let (mut first, mut counted) = (0, LineCounts::default());
        for k in 0..seg.fed.len() {
            let f = seg.fed[k];
            let lines = first..f.lines_end;
            let counts = f.counts.since(counted);
            (first, counted) = (f.lines_end, f.counts);
            let Some(mut st) = self.streams.remove(&f.stream) else {
                let (value, key, header, broker_ms) = records[f.index];
                if let Ok(d) = decoder.decode(value, key, header) {
                    let t = Times {
                        ingest_ms: broker_ms,
                        event_ms: d.event_ms,
                    };
                    self.feed_record(current, origin, &d, t, decoder.in_order());
                }
                continue;
            };
            self.count_lines(counts);
            let mut job = self.job_of(current, &st.job);
            job.note_origin(origin);
            self.apply_lines(&mut job, &mut st, &seg.text, &mut seg.batch, lines);
            self.settle_stream(&mut st);
            self.enforce_budget(&mut job);
            self.streams.insert(f.stream, st);
            *current = Some(job);
        }
        seg.clear();
    }

    /// One decoded record fed on its own: its stream found or opened, its lines decoded and
    /// applied.
    fn feed_record(
        &mut self,
        current: &mut Option<Box<Job>>,
        origin: &str,
        d: &Decoded<'_>,
        t: Times,
        in_order: bool,
    ) {
        let id = self.record_stream(origin, d, in_order);
        let Some(mut st) = self.streams.remove(&id) else {
            return;
        };
        let mut job = self.job_of(current, &d.job);
        job.note_origin(origin);
        if d.chunked {
            self.chunk_into(&mut job, &mut st, d.text.as_bytes(), t);
        } else {
            self.lines_into(&mut job, &mut st, d.text.as_bytes(), t);
        }
        self.settle_stream(&mut st);
        self.enforce_budget(&mut job);
        self.streams.insert(id, st);
        *current = Some(job);
    }

    /// The job `name`, taken out of the engine: `current` when it is that job, else `current`
    /// is put back first.
    fn job_of(&mut self, current: &mut Option<Box<Job>>, name: &str) -> Box<Job> {
        match current.take() {
            Some(j) if j.name == name => j,
            other => {
                if let Some(j) = other {
                    let name = j.name.clone();
                    self.jobs.insert(name, j);
                }
                self.take_job(name)
            }
        }
    }

    /// The stream that feeds the records of `d`'s source in its job, opened if new. A job's
    /// sources beyond its cap share one overflow stream (and source), so that a shipper that
    /// puts a pid or a pod hash in the rank field cannot grow the engine without bound.
    fn record_stream(&mut self, origin: &str, d: &Decoded<'_>, in_order: bool) -> u64 {
        let (job, source) = (d.job.as_ref(), d.source.as_ref());
        let index = self.record_streams.get(job);
        let known = index
            .and_then(|m| m.get(source))
            .copied()
            .filter(|id| self.streams.contains_key(id));
        if let Some(id) = known {
            return id;
        }
        let full = index.is_some_and(|m| m.len() >= self.max_sources());
        let (source, hints) = if full {
            let overflow = index
                .and_then(|m| m.get(OVERFLOW_SOURCE))
                .copied()
                .filter(|id| self.streams.contains_key(id));
            if let Some(id) = overflow {
                return id;
            }
            let hints = StreamHints {
                source_key: Some(OVERFLOW_SOURCE.to_string()),
                ..StreamHints::default()
            };
            (OVERFLOW_SOURCE, hints)
        } else {
            // A stream the record did not name holds many processes' lines, perhaps: without
            // a source key its lines are routed by their own prefixes, as a file's whose name
            // names no rank.
            let hints = StreamHints {
                source_key: d.source_named.then(|| source.to_string()),
                rank: d.rank,
                local_rank: None,
                host: d.host.as_deref().map(str::to_string),
            };
            (source, hints)
        };
        let name = if full {
            "(sources over the cap)"
        } else {
            source
        };
        let id = self.open_stream(job, &format!("{origin}/{name}"), hints);
        if let Some(st) = self.streams.get_mut(&id) {
            st.in_order = in_order;
        }
        let before = self.record_streams.get(job).map_or(0, memsize::map);
        let new_job = !self.record_streams.contains_key(job);
        let m = self.record_streams.entry(job.to_string()).or_default();
        let old = m.insert(source.to_string(), id);
        let mut added = memsize::map(m) - before;
        if new_job {
            added += memsize::block(job.len());
        }
        if old.is_none() {
            added += memsize::block(source.len());
        }
        self.streams_bytes += added;
        self.settle_total();
        id
    }

    /// The source of `key`, created if new. Past the job's source cap (or when the budget is
    /// spent and the job already has `MIN_SOURCES`), a new process's lines go to the job's
    /// one overflow source and are counted (`sources_capped`, and in the diagnosis), so that
    /// a million distinct `[rankN]:` prefixes cannot outgrow the budget.
    fn route(&mut self, job: &mut Job, key: SourceKey, origin: &Arc<str>) -> u32 {
        if let Some(&i) = job.source_keys.get(&key) {
            return i;
        }
        let spent = self.stats.memory_bytes > self.cfg.memory_budget_bytes
            && job.sources.len() >= MIN_SOURCES;
        let overflow_stream = matches!(&key, SourceKey::Hint(k) if k.ends_with(OVERFLOW_SOURCE));
        let key = if job.sources.len() >= self.max_sources() || spent || overflow_stream {
            self.stats.sources_capped += 1;
            job.lines_over_source_cap += 1;
            SourceKey::Overflow
        } else {
            key
        };
        job.source_for(key, origin)
    }

    fn take_job(&mut self, name: &str) -> Box<Job> {
        self.tick += 1;
        let epoch = self.tick;
        let mut job = self
            .jobs
            .remove(name)
            .unwrap_or_else(|| Box::new(Job::new(name, self.cfg.ring_lines, epoch)));
        job.last_activity = self.tick;
        job.last_wall_ms = self.wall_ms;
        job
    }

    fn put_back(&mut self, job: Box<Job>, st: Box<Stream>, id: u64) {
        let name = st.job.clone();
        self.streams.insert(id, st);
        self.jobs.insert(name, job);
        self.settle_total();
    }

    pub fn close_stream(&mut self, stream_id: u64) {
        if let Some(mut st) = self.streams.remove(&stream_id) {
            self.streams_bytes = self.streams_bytes.saturating_sub(st.accounted);
            if !st.lines.is_idle() {
                let mut job = self.take_job(&st.job);
                self.finish_lines(&mut job, &mut st);
                self.jobs.insert(st.job.clone(), job);
            }
            if let Some(call) = st.cut_call.take() {
                let mut job = self.take_job(&st.job);
                self.close_cut_traceback(&mut job, &st, *call);
                self.jobs.insert(st.job.clone(), job);
            }
            self.settle_total();
        }
    }

    fn now_wall(&self) -> i64 {
        self.wall_ms
    }

    /// Keeps total memory under the budget while `active` (taken out of the map) is being
    /// fed: idle jobs are finalized and evicted first (least recently active first), then the
    /// active job's rings are halved.
    fn relieve_memory(&mut self, active: &mut Job) {
        // Free down to 90% of the budget so relief is not needed again on the next line.
        // The diagnoses of evicted jobs wait for the next poll inside the budget too: kept as
        // text they weigh less than the state their eviction frees, so evicting converges.
        let budget = self.cfg.memory_budget_bytes / 10 * 9;
        if self.stats.memory_bytes > budget {
            let mut order: Vec<(u64, String)> = self
                .jobs
                .iter()
                .map(|(n, j)| (j.last_activity, n.clone()))
                .collect();
            order.sort();
            for (_, name) in order {
                if self.stats.memory_bytes <= budget {
                    break;
                }
                if let Some(mut job) = self.jobs.remove(&name) {
                    let diags = correlate::diagnose_ready(
                        &mut job,
                        &self.catalog,
                        &self.cfg,
                        i64::MAX,
                        true,
                        false,
                    );
                    let parked: Vec<Parked> = diags.into_iter().map(Parked::new).collect();
                    self.pending_bytes += parked.iter().map(Parked::heap_bytes).sum::<usize>();
                    self.pending.extend(parked);
                    self.forget_job_bytes(&job);
                    self.forget_record_streams(&name);
                    self.stats.jobs_evicted += 1;
                    self.settle_total();
                }
            }
            self.shrink_tables();
            self.trim_if_freed();
        }
        while self.stats.memory_bytes > budget && active.ring_lines > MIN_RING_LINES {
            active.ring_lines /= 2;
            self.stats.ring_shrinks += 1;
            for s in &mut active.sources {
                let before = s.ring.heap_bytes();
                s.ring.shrink_to(active.ring_lines);
                active.content_bytes =
                    (active.content_bytes + s.ring.heap_bytes()).saturating_sub(before);
            }
            self.settle(active);
        }
        if self.stats.memory_bytes > budget {
            // Last resort: symptom lines beyond the first few per signature keep their
            // signature, source, time and fields (enough for collateral and sequence analysis)
            // but give up their text.
            let mut freed = 0usize;
            let start = active.compacted_upto.min(active.hits.len());
            active.compacted_upto = active.hits.len();
            for hit in &mut active.hits[start..] {
                let is_cause = hit
                    .sig
                    .is_some_and(|s| self.catalog.signatures[s as usize].role == Role::Cause);
                let n = active.kept_text.entry(hit.sig).or_default();
                *n += 1;
                if is_cause || *n <= 16 || hit.text.is_empty() {
                    continue;
                }
                let before = hit.heap_bytes();
                hit.text = String::new();
                hit.record = Vec::new();
                freed += before - hit.heap_bytes();
                self.stats.compacted_hits += 1;
            }
            active.content_bytes = active.content_bytes.saturating_sub(freed);
            active.tables_dirty = true;
            self.settle(active);
        }
    }

    /// Adds a healthy run's log bytes to the baseline that diagnoses are compared against.
    pub fn add_baseline(&mut self, data: &[u8]) {
        self.baseline.add(data, self.cfg.default_year);
    }

    /// Marks the first line of the initiating process that the healthy baseline never printed.
    fn annotate(&self, d: &mut Diagnosis) {
        if self.baseline.is_empty() {
            return;
        }
        let mut lines: Vec<String> = d.json["preceding_lines"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(l) = d.json["root_cause"]["line"].as_str() {
            lines.push(l.to_string());
        }
        let diff = self
            .baseline
            .first_new(&lines, self.cfg.default_year)
            .map(|i| serde_json::json!({"line": lines[i], "is_root_cause": i + 1 == lines.len()}));
        d.json["baseline_diff"] = diff.unwrap_or(serde_json::Value::Null);
    }

    /// Diagnoses whose incidents are ready (event-time watermark past start + settle, or
    /// waited `max_wait_ms` of wall time) and new or changed since last published.
    pub fn poll(&mut self, now_wall_ms: i64) -> Vec<Diagnosis> {
        let mut out = Vec::new();
        self.poll_each(now_wall_ms, |d| out.push(d));
        out
    }

    /// `poll`, handing each diagnosis to `sink` as soon as its job is diagnosed: a caller
    /// that serialises them one at a time never holds a burst's value trees at once.
    pub fn poll_each(&mut self, now_wall_ms: i64, mut sink: impl FnMut(Diagnosis)) {
        self.poll_bounded(now_wall_ms, usize::MAX, false, |d| {
            sink(d);
            0
        });
    }

    /// `poll_each`, stopping once the sizes `sink` returns add up to `max_bytes`: a burst
    /// of thousands of jobs diagnosed at once (megabytes of JSON) comes out in parts. What
    /// was not handed out stays where it was (evicted jobs' diagnoses parked, in order;
    /// jobs not yet visited, quiet jobs not yet released) for the next call, which resumes
    /// where this one stopped. Returns whether it stopped early (poll again for the rest).
    ///
    /// With `hold`, an open incident diagnosed within the last settle window of wall time is
    /// not diagnosed again yet (a storm's thousands of ranks would have it rebuilt on every
    /// poll); a poll without `hold` diagnoses it with everything fed so far, so a caller that
    /// commits its input's positions polls without `hold` first.
    pub fn poll_bounded(
        &mut self,
        now_wall_ms: i64,
        max_bytes: usize,
        hold: bool,
        mut sink: impl FnMut(Diagnosis) -> usize,
    ) -> bool {
        self.wall_ms = now_wall_ms;
        self.held_jobs.clear();
        self.held_origins.clear();
        let mut sent = 0usize;
        let mut emit = |engine: &mut Engine, diags: Vec<Diagnosis>, sent: &mut usize| {
            for mut d in diags {
                engine.stats.diagnoses_emitted += 1;
                engine.annotate(&mut d);
                *sent = sent.saturating_add(sink(d));
            }
        };
        // At least one diagnosis (or one job's) per call, whatever the bound: callers that
        // poll again while `more` always make progress.
        let full = |sent: usize| sent > 0 && sent >= max_bytes;
        let mut parked = std::mem::take(&mut self.pending).into_iter();
        while !full(sent) {
            let Some(p) = parked.next() else { break };
            emit(self, vec![p.into_diagnosis()], &mut sent);
        }
        self.repark_front(parked.collect());
        if !self.pending.is_empty() {
            return true;
        }
        // Taken out while diagnosed: `emit` counts and annotates on the engine, which reads
        // no job.
        let mut jobs = std::mem::take(&mut self.jobs);
        let start = self.resume_after.take();
        let (mut held, mut held_origins) = (Vec::new(), Vec::<Arc<str>>::new());
        let stopped = walk_from(&mut jobs, start.as_deref(), |_, job| {
            let ready =
                correlate::diagnose_ready(job, &self.catalog, &self.cfg, now_wall_ms, false, hold);
            if job.held {
                held.push(job.name.clone());
                for o in &job.fed_origins {
                    if !held_origins.contains(o) {
                        held_origins.push(o.clone());
                    }
                }
            }
            emit(self, ready, &mut sent);
            full(sent)
        });
        self.jobs = jobs;
        self.held_jobs = held;
        self.held_origins = held_origins;
        let mut more = stopped.is_some();
        self.resume_after = stopped;
        if !more {
            for name in self.quiet_jobs(now_wall_ms) {
                if full(sent) {
                    more = true; // the rest are released by the next call
                    break;
                }
                let ready = self.release_job_finally(&name);
                emit(self, ready, &mut sent);
            }
        }
        self.settle_total();
        self.shrink_tables();
        self.trim_if_freed();
        more
    }

    /// Puts diagnoses a bounded poll did not hand out back in front of `pending`, counted.
    fn repark_front(&mut self, mut rest: Vec<Parked>) {
        self.pending_bytes = 0;
        rest.append(&mut self.pending);
        self.pending = rest;
        self.pending_bytes = self.pending.iter().map(Parked::heap_bytes).sum();
        self.settle_total();
    }

    /// The jobs quiet for `release_quiet_ms`, to be released after their final diagnoses.
    /// A job no poll has seen yet starts its quiet time at this poll (it may have been fed
    /// before the first one, when the engine's wall clock was still 0).
    fn quiet_jobs(&mut self, now_wall_ms: i64) -> Vec<String> {
        let quiet_ms = self.cfg.release_quiet_ms;
        if quiet_ms <= 0 {
            return Vec::new();
        }
        let mut quiet = Vec::new();
        for (name, job) in &mut self.jobs {
            if job.last_wall_ms <= 0 {
                job.last_wall_ms = now_wall_ms;
            } else if now_wall_ms - job.last_wall_ms >= quiet_ms {
                quiet.push(name.clone());
            }
        }
        quiet.sort();
        quiet
    }

    /// A quiet job's final diagnoses; its state is released.
    fn release_job_finally(&mut self, name: &str) -> Vec<Diagnosis> {
        let out = match self.jobs.get_mut(name) {
            Some(job) => {
                job.input_ended = true;
                correlate::diagnose_ready(job, &self.catalog, &self.cfg, i64::MAX, true, false)
            }
            None => Vec::new(),
        };
        self.release_job(name);
        out
    }

    /// Forgets a job's state and the streams records opened for it. Streams a caller opened
    /// stay usable: feeding one again starts a new instance of the job.
    fn release_job(&mut self, name: &str) {
        self.forget_record_streams(name);
        if let Some(j) = self.jobs.remove(name) {
            self.forget_job_bytes(&j);
            self.stats.jobs_released += 1;
        }
        self.settle_total();
    }

    /// Every incident of every job, diagnosed now (end of input).
    pub fn finish(&mut self) -> Vec<Diagnosis> {
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.close_stream(id);
        }
        let mut out = self.take_pending();
        let mut names: Vec<String> = self.jobs.keys().cloned().collect();
        names.sort();
        for n in names {
            if let Some(job) = self.jobs.get_mut(&n) {
                job.input_ended = true;
                out.extend(correlate::diagnose_ready(
                    job,
                    &self.catalog,
                    &self.cfg,
                    i64::MAX,
                    true,
                    false,
                ));
            }
        }
        self.stats.diagnoses_emitted += out.len() as u64;
        for d in &mut out {
            self.annotate(d);
        }
        out
    }

    pub fn job_names(&self) -> Vec<String> {
        self.jobs.keys().cloned().collect()
    }

    /// Forgets a job entirely (after its final diagnosis, or when told to).
    pub fn drop_job(&mut self, name: &str) {
        let streams: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.job == name)
            .map(|(id, _)| *id)
            .collect();
        self.forget_record_streams(name);
        for id in streams {
            if let Some(st) = self.streams.remove(&id) {
                self.streams_bytes = self.streams_bytes.saturating_sub(st.accounted);
            }
        }
        if let Some(j) = self.jobs.remove(name) {
            self.forget_job_bytes(&j);
        }
        self.settle_total();
        self.shrink_tables();
        self.trim_if_freed();
    }

    /// Where the accounted memory is, in bytes, counted from scratch: rings, hits (with
    /// their incidents), snapshots, context, sources (their slots, keys and identity
    /// tables), streams (with the record-stream index, the engine's tables and its decoder's
    /// remembered field results), other (the remaining job tables: sync points, hit
    /// counters, names; diagnoses of evicted jobs waiting for the next poll; where a bounded
    /// poll resumes). Sums to `memory_bytes`.
    pub fn memory_breakdown(&self) -> [usize; 7] {
        use memsize::{map, string, vec};
        let mut out = [0usize; 7];
        for j in self.jobs.values() {
            let rings: usize = j.sources.iter().map(|s| s.ring.heap_bytes()).sum();
            let snaps: usize = j.sources.iter().map(|s| s.heap_bytes()).sum::<usize>() - rings;
            let hits = vec(&j.hits)
                + j.hits.iter().map(|h| h.kept_bytes()).sum::<usize>()
                + vec(&j.incidents)
                + j.incidents.iter().map(Incident::heap_bytes).sum::<usize>();
            let context = map(&j.context)
                + j.context
                    .values()
                    .map(ContextObs::heap_bytes)
                    .sum::<usize>();
            let sources = vec(&j.sources)
                + map(&j.source_keys)
                + map(&j.stream_hosts)
                + map(&j.by_host_pid)
                + map(&j.by_host_local)
                + map(&j.by_host_bus)
                + j.by_host_bus.keys().map(|(_, b)| string(b)).sum::<usize>()
                + map(&j.ip_host)
                + j.ip_host.keys().map(string).sum::<usize>()
                + vec(&j.hosts)
                + map(&j.host_ids)
                + 2 * j.hosts.iter().map(string).sum::<usize>();
            let total = j.heap_bytes();
            out[0] += rings;
            out[1] += hits;
            out[2] += snaps;
            out[3] += context;
            out[4] += sources;
            out[6] += total + job_box() - rings - hits - snaps - context - sources;
        }
        out[6] +=
            self.pending_bytes + vec(&self.pending) + self.resume_after.as_ref().map_or(0, string);
        out[5] = self.streams.values().map(|s| s.heap_bytes()).sum::<usize>()
            + self
                .record_streams
                .iter()
                .map(|(k, m)| index_bytes(k, m))
                .sum::<usize>()
            + map(&self.jobs)
            + map(&self.streams)
            + map(&self.record_streams)
            + self.decoder.memo_bytes_recounted();
        out
    }

    pub fn job_count(&self) -> usize {
        self.jobs.len()
    }

    /// Incidents held, less those diagnosed as no failure (benign warnings only).
    pub fn incident_count(&self) -> usize {
        self.jobs
            .values()
            .map(|j| j.incidents.iter().filter(|i| !i.dismissed).count())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::tests::SMALL;

    const CAUSE: &[u8] = b"node12:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: \
        Connect to 172.17.0.1<39275> failed : Network is unreachable\n";

    fn engine(release_quiet_ms: i64) -> Engine {
        let catalog = Catalog::from_sources(&[("small.toml".into(), SMALL.into())]).unwrap();
        let cfg = Config {
            release_quiet_ms,
            ..Config::default()
        };
        Engine::new(Arc::new(catalog), cfg)
    }

    #[test]
    fn exception_lines_are_told_as_before() {
        // The scan that splits at ':' first, kept as the reference for the early-exit one.
        fn reference(msg: &str) -> bool {
            let head = msg.split(':').next().unwrap_or("");
            !head.is_empty()
                && !head.contains(' ')
                && ["Error", "Exception", "Interrupt", "Exit", "Failure"]
                    .iter()
                    .any(|s| head.ends_with(s))
                && head
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
        }
        let cases = [
            "torch.distributed.DistBackendError: NCCL error",
            "RuntimeError",
            "KeyboardInterrupt",
            "SystemExit: 1",
            "ChildFailedError:",
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "Error",
            ":Error",
            "",
            ":",
            "Some Error: spaced",
            "RuntimeError : spaced colon",
            "ValueError(x): call",
            "my-mod.Error: dash",
            "NCCL WARN Error: not a name",
            "pkg.MyFailure",
            "pkg.MyFailures",
            "Exit:Error",
            "ÜberError: unicode",
            "x.y_z.Exception\ttab",
        ];
        for c in cases {
            assert_eq!(crate::prefix::is_exception_line(c), reference(c), "{c:?}");
        }
    }

    #[test]
    fn a_torchelastic_error_dump_is_named_by_its_message() {
        use crate::correlate::testkit::{diagnose, root_line};
        let msg = r#"    "message": "RendezvousConnectionError: The connection to the C10d store has failed.","#;
        let log = format!(
            "[ERROR] 2022-03-14 09:12:40,402 error_handler: {{\n  \"message\": {{\n{msg}\n"
        );
        assert_eq!(root_line(&diagnose(&log)), msg);
        // Without an exception in it, the dump's header stays the line.
        let plain = "[ERROR] 2022-03-14 09:12:40,402 error_handler: {\n  \"message\": \"lost\",\n";
        assert!(root_line(&diagnose(plain)).ends_with("error_handler: {"));
    }

    #[test]
    fn an_exception_ray_wraps_is_an_exception_line() {
        use crate::prefix::is_exception_line;
        assert!(is_exception_line(
            "ray.exceptions.RayTaskError(NcclError): ray::Worker.compute() (pid=35381)"
        ));
        assert!(is_exception_line("RayTaskError(RuntimeError)"));
        assert!(!is_exception_line(
            "RayTaskError(x): not an exception inside"
        ));
        assert!(!is_exception_line("RayTaskError(NcclError) trailing words"));
    }

    /// Feeds one failing job at `now` and polls then; returns the diagnoses of that poll.
    fn short_job(e: &mut Engine, name: &str, now: i64) -> Vec<Diagnosis> {
        e.poll(now);
        let id = e.open_stream(name, "rank0.log", StreamHints::default());
        e.feed(id, CAUSE, Some(now));
        e.close_stream(id);
        e.poll(now)
    }

    #[test]
    fn quiet_jobs_get_final_diagnoses_then_their_state_is_released() {
        let mut e = engine(60_000);
        short_job(&mut e, "a", 1_000);
        assert_eq!(e.job_count(), 1);
        assert!(e.stats.memory_bytes > 0);
        // Diagnosed (open) once the job went quiet for the settle window; still held.
        let open = e.poll(40_000);
        assert!(open.iter().all(|d| !d.is_final));
        assert_eq!(e.job_count(), 1);
        let last = e.poll(61_000);
        assert_eq!(e.job_count(), 0);
        assert_eq!(e.stats.jobs_released, 1);
        assert_eq!(e.stats.memory_bytes, e.empty_tables_bytes());
        assert!(last.iter().any(|d| d.is_final && d.json["job"] == "a"));
    }

    #[test]
    fn many_successive_short_jobs_stay_bounded() {
        let mut e = engine(60_000);
        let mut now = 1_000;
        for i in 0..300 {
            short_job(&mut e, &format!("job-{i}"), now);
            now += 10_000;
        }
        // Only the jobs of the last minute are held.
        assert!(e.job_count() <= 7, "{} jobs held", e.job_count());
        e.poll(now + 60_000);
        assert_eq!((e.job_count(), e.stats.jobs_released), (0, 300));
        assert_eq!(e.stats.jobs_evicted, 0);
        assert_eq!(e.stats.memory_bytes, e.empty_tables_bytes());
        assert!(e.streams.is_empty() && e.record_streams.is_empty());
    }

    impl Engine {
        /// What an engine without jobs or streams still holds: its tables' buckets.
        fn empty_tables_bytes(&self) -> usize {
            assert_eq!((self.jobs_bytes, self.streams_bytes), (0, 0));
            self.decoder.memo_bytes()
                + memsize::map(&self.jobs)
                + memsize::map(&self.streams)
                + memsize::map(&self.record_streams)
        }
    }

    #[test]
    fn accounted_bytes_equal_a_recount_from_scratch() {
        let mut e = engine(60_000);
        e.poll(1_000);
        let mut mixed = String::new();
        for r in 0..300 {
            mixed.push_str(&format!("[rank{r}]: step 1 loss 2.5\n"));
            mixed.push_str(&format!(
                "node{}:{}:{} [{}] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.{}<0>\n",
                r / 8,
                100 + r,
                100 + r,
                r % 8,
                r / 8
            ));
        }
        let a = e.open_stream("mixed", "all.log", StreamHints::default());
        e.feed(a, mixed.as_bytes(), Some(1_000));
        e.feed(a, b"[rank3]: partial line without its newline", Some(1_000));
        let b = e.open_stream("mixed", "rank9.log", StreamHints::default());
        for _ in 0..50 {
            e.feed(b, CAUSE, Some(2_000));
        }
        let cfg = crate::records::DecoderConfig::preset(crate::records::Format::Canonical);
        let values: Vec<String> = (0..200)
            .map(|r| format!(r#"{{"job":"rec","rank":{r},"host":"h{r}","line":"step {r}"}}"#))
            .collect();
        let records: Vec<RawRecord<'_>> = values
            .iter()
            .map(|v| (v.as_bytes(), None, None, Some(1_000)))
            .collect();
        e.feed_records(&cfg, "t/0", &records);
        e.poll(30_000);
        for j in e.jobs.values() {
            assert_eq!(j.mem_bytes, j.heap_bytes() + job_box(), "job {}", j.name);
        }
        let b = e.memory_breakdown();
        let tables =
            memsize::map(&e.jobs) + memsize::map(&e.streams) + memsize::map(&e.record_streams);
        assert_eq!(b[5], e.streams_bytes + tables + e.decoder.memo_bytes());
        assert_eq!(e.stats.memory_bytes, b.iter().sum::<usize>());
        e.close_stream(a);
        e.drop_job("rec");
        let recount: usize = e.memory_breakdown().iter().sum();
        assert_eq!(e.stats.memory_bytes, recount);
    }

    #[test]
    fn sources_past_the_cap_share_one_overflow_source() {
        let mut e = engine(60_000);
        e.cfg.max_sources_per_job = 10;
        let mut text = String::new();
        for r in 0..100 {
            text.push_str(&format!("[rank{r}]: step 1\n"));
        }
        let s = e.open_stream("wide", "all.log", StreamHints::default());
        e.feed(s, text.as_bytes(), Some(1_000));
        let job = &e.jobs["wide"];
        assert_eq!(job.sources.len(), 11);
        assert_eq!(job.lines_over_source_cap, 90);
        assert_eq!(e.stats.sources_capped, 90);
    }

    const STEP: &str = "[rank0]: step 1";
    const CUDA: &str =
        "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered";

    /// The root cause's (rank, host) after feeding `values` as records of one batch.
    fn record_root(
        format: crate::records::Format,
        values: &[String],
        key: Option<&[u8]>,
        cfg: Config,
    ) -> (Option<u64>, Option<String>) {
        let catalog = crate::correlate::testkit::shipped_catalog();
        let mut e = Engine::new(Arc::new(catalog), cfg);
        let records: Vec<RawRecord<'_>> = values
            .iter()
            .map(|v| (v.as_bytes(), key, None, None))
            .collect();
        let dec = crate::records::DecoderConfig::preset(format);
        assert!(e.feed_records(&dec, "t/0", &records).is_empty());
        let d = e.finish();
        let rc = &d[0].json["root_cause"];
        (rc["rank"].as_u64(), rc["host"].as_str().map(str::to_string))
    }

    #[test]
    fn records_that_name_no_source_are_routed_by_what_their_lines_say() {
        use crate::records::Format;
        let lines = [STEP.to_string(), CUDA.to_string()];
        let file = crate::correlate::testkit::diagnose(&format!("{STEP}\n{CUDA}\n"));
        assert_eq!(file[0].json["root_cause"]["rank"], 3);
        let text = record_root(Format::Text, &lines, Some(b"sweep/4"), Config::default());
        assert_eq!(text, (Some(3), None));
        let canonical: Vec<String> = lines
            .iter()
            .map(|l| serde_json::json!({"job": "j", "host": "node-1", "line": l}).to_string())
            .collect();
        let by_host = record_root(Format::Canonical, &canonical, None, Config::default());
        assert_eq!(by_host, (Some(3), Some("node-1".to_string())));
    }

    #[test]
    fn a_record_that_names_its_source_keeps_its_lines_together() {
        // A named stream is one producer's, as a per-rank file is: its rank decides.
        let values: Vec<String> = [STEP, CUDA]
            .iter()
            .map(|l| serde_json::json!({"job": "j", "rank": 0, "line": l}).to_string())
            .collect();
        let format = crate::records::Format::Canonical;
        assert_eq!(
            record_root(format, &values, None, Config::default()).0,
            Some(0)
        );
    }

    #[test]
    fn a_line_beyond_the_source_cap_keeps_the_rank_and_host_it_states() {
        use crate::records::Format;
        let cfg = || Config {
            max_sources_per_job: 4,
            ..Config::default()
        };
        let mut lines: Vec<String> = (0..10).map(|r| format!("[rank{r}]: step 1")).collect();
        lines.push(CUDA.replace("rank3", "rank8"));
        let text = record_root(Format::Text, &lines, Some(b"wide"), cfg());
        assert_eq!(text, (Some(8), None));
        // Records past the cap share one stream; an NCCL line names its host.
        let mut values: Vec<String> = (0..10)
            .map(|r| serde_json::json!({"job": "j", "rank": r, "line": "step 1"}).to_string())
            .collect();
        let warn = "[rank8]:node-9:4321:4390 [1] misc/socket.cc:484 NCCL WARN \
            socketStartConnect: Connect to 10.0.0.1<39275> failed : No route to host";
        values.push(serde_json::json!({"job": "j", "rank": 8, "line": warn}).to_string());
        let canonical = record_root(Format::Canonical, &values, None, cfg());
        assert_eq!(canonical, (Some(8), Some("node-9".to_string())));
    }

    #[test]
    fn zero_keeps_jobs_and_a_busy_job_is_kept() {
        let mut e = engine(0);
        short_job(&mut e, "a", 1_000);
        e.poll(10 * 3_600_000);
        assert_eq!(e.job_count(), 1);
        let mut e = engine(60_000);
        for t in (1_000..200_000).step_by(20_000) {
            short_job(&mut e, "busy", t);
        }
        assert_eq!((e.job_count(), e.stats.jobs_released), (1, 0));
    }
}

#[cfg(test)]
#[path = "engine/records_tests.rs"]
mod records_tests;

#[cfg(test)]
#[path = "engine/poll_tests.rs"]
mod poll_tests;

#[cfg(test)]
#[path = "engine/rank_wait_tests.rs"]
mod rank_wait_tests;
