//! The engine: streams of bytes in, per-job state updated line by line, diagnoses out.
//! Callers own I/O and time; the engine owns everything that touches every line.

use crate::baseline::Baseline;
use crate::catalog::{Catalog, Role, Sync};
use crate::correlate::{self, Diagnosis};
use crate::job::{ContextObs, Hit, Incident, Job, SourceKey, SyncObs, CONTEXT_FIELDS};
use crate::matcher::Scratch;
use crate::memsize;
use crate::prefix::{peel, Level, Producer};
use crate::records::{decode, DecoderConfig};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct Config {
    pub ring_lines: usize,
    pub ring_bytes: usize,
    pub memory_budget_bytes: usize,
    pub settle_ms: i64,
    pub incident_horizon_ms: i64,
    pub max_wait_ms: i64,
    pub max_line_bytes: usize,
    pub preceding_lines: usize,
    pub max_hits_per_job: usize,
    pub hits_per_source_signature: u32,
    pub default_year: i32,
    pub clock_uncertainty_ms: i64,
    /// A job quiet for this long (wall time, as seen by `poll`) gets its final diagnoses and
    /// its state released. 0 keeps jobs until evicted or dropped.
    pub release_quiet_ms: i64,
    /// Processes (sources) tracked per job; lines of further ones share one overflow source
    /// and are counted in the diagnosis. The budget may lower it (a quarter of the budget).
    pub max_sources_per_job: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring_lines: 256,
            ring_bytes: 64 * 1024,
            memory_budget_bytes: 1 << 30,
            settle_ms: 5_000,
            incident_horizon_ms: 20 * 60_000,
            max_wait_ms: 30_000,
            max_line_bytes: 16 * 1024,
            preceding_lines: 100,
            max_hits_per_job: 200_000,
            hits_per_source_signature: 4,
            default_year: 2026,
            clock_uncertainty_ms: 1_500,
            release_quiet_ms: 60 * 60_000,
            max_sources_per_job: 100_000,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub lines: u64,
    pub bytes: u64,
    pub blank_lines: u64,
    pub truncated_lines: u64,
    pub invalid_utf8_lines: u64,
    pub signature_hits: u64,
    pub hits_by_signature: HashMap<u16, u64>,
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
    /// Jobs whose state was released after their final diagnoses (quiet for
    /// `release_quiet_ms`).
    pub jobs_released: u64,
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
    host_noted: bool,
}

struct Stream {
    /// Bytes this stream was last accounted at (`Stream::heap_bytes` then).
    accounted: usize,
    cache: RouteCache,
    job: String,
    origin: Arc<str>,
    hints: StreamHints,
    key: Option<SourceKey>,
    partial: Vec<u8>,
    cri_buf: String,
    line_no: u64,
    last_source: Option<u32>,
    after_last_error: bool,
    in_traceback: bool,
    /// Where the current multi-line record started (its first line's seq).
    record_start: u64,
    open_hit: Option<usize>,
}

pub struct Engine {
    catalog: Arc<Catalog>,
    scratch: Scratch,
    pub cfg: Config,
    jobs: HashMap<String, Job>,
    streams: HashMap<u64, Stream>,
    next_stream: u64,
    tick: u64,
    pub stats: Stats,
    pending: Vec<Diagnosis>,
    expr_buf: Vec<u32>,
    sig_buf: Vec<u16>,
    wall_ms: i64,
    /// job -> source -> stream id, for record-fed streams.
    record_streams: HashMap<String, HashMap<String, u64>>,
    baseline: Baseline,
    /// Accounted bytes of all jobs (the sum of their `mem_bytes`, taken out or not).
    jobs_bytes: usize,
    /// Accounted bytes of all streams and the record-stream index.
    streams_bytes: usize,
    /// Bytes of jobs released, evicted or dropped since free pages were last handed back.
    freed_since_trim: usize,
    /// Bytes of the diagnoses in `pending` (of evicted jobs, until the next poll).
    pending_bytes: usize,
}

impl Stream {
    /// Heap the stream owns (its slot in the streams table is counted with the table).
    fn heap_bytes(&self) -> usize {
        use memsize::{arc_str, string, vec};
        let key = match &self.key {
            Some(SourceKey::Hint(k)) => arc_str(k.len()),
            _ => 0,
        };
        string(&self.job)
            + arc_str(self.origin.len())
            + self.hints.source_key.as_ref().map_or(0, string)
            + self.hints.host.as_ref().map_or(0, string)
            + key
            + vec(&self.partial)
            + string(&self.cri_buf)
            + vec(&self.cache.local)
            + self.cache.host.as_ref().map_or(0, |(h, _)| string(h))
    }
}

/// What the record-stream index holds for one job (its table, its key and the source names).
fn index_bytes(job: &String, sources: &HashMap<String, u64>) -> usize {
    memsize::string(job)
        + memsize::map(sources)
        + sources.keys().map(memsize::string).sum::<usize>()
}

/// `raw` cut to at most `max` bytes, not inside a UTF-8 character (`raw` is longer).
fn cut_at_char(raw: &[u8], max: usize) -> &[u8] {
    let mut cut = max;
    while cut > 0 && (raw[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    &raw[..cut]
}

/// Lines of a multi-line record kept with a hit: whole records for causes, the head only for
/// symptoms (thousands of ranks print the same symptom record).
/// A Kafka record as handed over: value, key, job header, broker time in ms.
pub type RawRecord<'a> = (&'a [u8], Option<&'a [u8]>, Option<&'a [u8]>, Option<i64>);

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

fn is_exception_line(msg: &str) -> bool {
    // `pkg.mod.SomeError: text` / `SomeException` at the end of a traceback.
    let head = msg.split(':').next().unwrap_or("");
    !head.is_empty()
        && !head.contains(' ')
        && (head.ends_with("Error")
            || head.ends_with("Exception")
            || head.ends_with("Interrupt")
            || head.ends_with("Exit")
            || head.ends_with("Failure"))
        && head
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
}

fn is_continuation(msg: &str, stream: &Stream) -> bool {
    let b = msg.as_bytes();
    if b.first().is_some_and(|c| *c == b' ' || *c == b'\t') {
        return true;
    }
    if stream.after_last_error {
        return true;
    }
    msg.starts_with("frame #")
        || msg.starts_with("Exception raised from ")
        || msg.starts_with("Last error:")
        || msg.starts_with("During handling of the above exception")
        || msg.starts_with("The above exception was the direct cause")
        || (stream.in_traceback && is_exception_line(msg))
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.char_indices().peekable();
    while let Some((_, c)) = it.next() {
        if c == '\x1b' {
            if it.peek().map(|(_, c)| *c) == Some('[') {
                it.next();
                for (_, c) in it.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

impl Engine {
    pub fn new(catalog: Arc<Catalog>, cfg: Config) -> Engine {
        let scratch = catalog.matcher().scratch();
        Engine {
            catalog,
            scratch,
            cfg,
            jobs: HashMap::new(),
            streams: HashMap::new(),
            next_stream: 1,
            tick: 0,
            stats: Stats::default(),
            pending: Vec::new(),
            expr_buf: Vec::new(),
            sig_buf: Vec::new(),
            wall_ms: 0,
            record_streams: HashMap::new(),
            baseline: Baseline::default(),
            jobs_bytes: 0,
            streams_bytes: 0,
            freed_since_trim: 0,
            pending_bytes: 0,
        }
    }

    /// Brings a job's accounted bytes, and the engine's total, up to date after it changed.
    fn settle(&mut self, job: &mut Job) {
        if job.tables_dirty {
            job.tables_cache = job.tables_bytes();
            job.tables_dirty = false;
        }
        let now = job.tables_cache + job.content_bytes;
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
            + memsize::map(&self.jobs)
            + memsize::map(&self.streams)
            + memsize::map(&self.record_streams);
        self.stats.peak_memory_bytes = self.stats.peak_memory_bytes.max(self.stats.memory_bytes);
    }

    /// Accounted bytes less the diagnoses waiting for the next poll.
    fn state_bytes(&self) -> usize {
        self.stats.memory_bytes.saturating_sub(self.pending_bytes)
    }

    /// The diagnoses of evicted jobs, handed out (no longer counted).
    fn take_pending(&mut self) -> Vec<Diagnosis> {
        self.pending_bytes = 0;
        let out = std::mem::take(&mut self.pending);
        self.settle_total();
        out
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
        let mut st = Stream {
            accounted: 0,
            cache: RouteCache::default(),
            job: job.to_string(),
            origin: Arc::from(origin),
            hints,
            key,
            partial: Vec::new(),
            cri_buf: String::new(),
            line_no: 0,
            last_source: None,
            after_last_error: false,
            in_traceback: false,
            record_start: 0,
            open_hit: None,
        };
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
        self.chunk_into(&mut job, &mut st, data, ingest_ms, event_ms);
        self.settle_stream(&mut st);
        self.put_back(job, st, stream_id);
        true
    }

    /// Splits a chunk into lines; a trailing partial line waits in the stream for the next.
    fn chunk_into(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        data: &[u8],
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        self.stats.bytes += data.len() as u64;
        let mut start = 0;
        if !st.partial.is_empty() {
            match memchr::memchr(b'\n', data) {
                Some(nl) => {
                    self.keep_partial(st, &data[..nl]);
                    self.partial_line(job, st, ingest_ms, event_ms);
                    start = nl + 1;
                }
                None => {
                    self.keep_partial(st, data);
                    return;
                }
            }
        }
        let rest = &data[start..];
        // One check per chunk instead of per line: when the complete lines hold no '\r', no
        // ESC and valid UTF-8, each line can skip those checks.
        let whole = memchr::memrchr(b'\n', rest).map_or(&rest[..0], |i| &rest[..i]);
        let plain =
            memchr::memchr2(b'\r', 0x1b, whole).is_none() && std::str::from_utf8(whole).is_ok();
        let mut pos = 0;
        for nl in memchr::memchr_iter(b'\n', rest) {
            if plain && nl - pos <= self.cfg.max_line_bytes {
                // SAFETY: `whole` is valid UTF-8 and a '\n' byte is always a char boundary.
                let line = unsafe { std::str::from_utf8_unchecked(&rest[pos..nl]) };
                self.plain_line(job, st, line, ingest_ms, event_ms);
            } else {
                self.raw_line(job, st, &rest[pos..nl], ingest_ms, event_ms);
            }
            pos = nl + 1;
        }
        if pos < rest.len() {
            self.keep_partial(st, &rest[pos..]);
        }
    }

    /// Feeds lines that arrived whole (a record's text), each with the record's times.
    fn lines_into(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        text: &[u8],
        event_ms: Option<i64>,
        ingest_ms: Option<i64>,
    ) {
        self.stats.bytes += text.len() as u64 + 1;
        for part in text.split(|c| *c == b'\n') {
            self.raw_line(job, st, part, ingest_ms, event_ms);
        }
    }

    /// Decodes and feeds a batch of Kafka records `(value, key, job header, broker time ms)`.
    /// Returns the index and reason of every record that was rejected. Consecutive records of
    /// one job are fed without putting the job back in between.
    pub fn feed_records(
        &mut self,
        cfg: &DecoderConfig,
        origin: &str,
        records: &[RawRecord<'_>],
    ) -> Vec<(usize, &'static str)> {
        let mut rejected = Vec::new();
        let mut current: Option<Job> = None;
        for (i, (value, key, header, broker_ms)) in records.iter().enumerate() {
            self.stats.records += 1;
            let d = match decode(cfg, value, *key, *header) {
                Ok(d) => d,
                Err(reason) => {
                    *self.stats.rejected.entry(reason).or_default() += 1;
                    rejected.push((i, reason));
                    continue;
                }
            };
            let id = self.record_stream(origin, &d.job, &d.source, d.rank, &d.host);
            let Some(mut st) = self.streams.remove(&id) else {
                continue;
            };
            let mut job = match current.take() {
                Some(j) if j.name == d.job => j,
                other => {
                    if let Some(j) = other {
                        let name = j.name.clone();
                        self.jobs.insert(name, j);
                    }
                    self.take_job(&d.job)
                }
            };
            if d.chunked {
                self.chunk_into(&mut job, &mut st, d.text.as_bytes(), *broker_ms, d.event_ms);
            } else {
                self.lines_into(&mut job, &mut st, d.text.as_bytes(), d.event_ms, *broker_ms);
            }
            self.settle_stream(&mut st);
            self.streams.insert(id, st);
            current = Some(job);
        }
        if let Some(j) = current {
            let name = j.name.clone();
            self.jobs.insert(name, j);
        }
        self.settle_total();
        rejected
    }

    /// The stream that feeds the records of `source` in `job`, opened if new. A job's sources
    /// beyond its cap share one overflow stream (and source), so that a shipper that puts a
    /// pid or a pod hash in the rank field cannot grow the engine without bound.
    fn record_stream(
        &mut self,
        origin: &str,
        job: &str,
        source: &str,
        rank: Option<u32>,
        host: &Option<String>,
    ) -> u64 {
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
            let hints = StreamHints {
                source_key: Some(source.to_string()),
                rank,
                local_rank: None,
                host: host.clone(),
            };
            (source, hints)
        };
        let name = if full {
            "(sources over the cap)"
        } else {
            source
        };
        let id = self.open_stream(job, &format!("{origin}/{name}"), hints);
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

    /// Processes the line that waited in `st.partial`, cut (and counted) first when it grew
    /// past `max_line_bytes` (see `keep_partial`).
    fn partial_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        let line = std::mem::take(&mut st.partial);
        let mut raw = line.as_slice();
        if raw.len() > self.cfg.max_line_bytes {
            self.stats.truncated_lines += 1;
            raw = cut_at_char(raw, self.cfg.max_line_bytes);
        }
        self.raw_line(job, st, raw, ingest_ms, event_ms);
    }

    /// Adds the next bytes of an unfinished line. A line longer than `max_line_bytes` keeps
    /// only its head (one byte over, so that `partial_line` sees it was cut); the rest is
    /// dropped until its newline, so the line stays one line with its own number and prefix.
    fn keep_partial(&self, st: &mut Stream, data: &[u8]) {
        let room = (self.cfg.max_line_bytes + 1).saturating_sub(st.partial.len());
        st.partial.extend_from_slice(&data[..data.len().min(room)]);
    }

    fn take_job(&mut self, name: &str) -> Job {
        self.tick += 1;
        let epoch = self.tick;
        let mut job = self
            .jobs
            .remove(name)
            .unwrap_or_else(|| Job::new(name, self.cfg.ring_lines, epoch));
        job.last_activity = self.tick;
        job.last_wall_ms = self.wall_ms;
        job
    }

    fn put_back(&mut self, job: Job, st: Stream, id: u64) {
        let name = st.job.clone();
        self.streams.insert(id, st);
        self.jobs.insert(name, job);
        self.settle_total();
    }

    pub fn close_stream(&mut self, stream_id: u64) {
        if let Some(mut st) = self.streams.remove(&stream_id) {
            self.streams_bytes = self.streams_bytes.saturating_sub(st.accounted);
            if !st.partial.is_empty() || !st.cri_buf.is_empty() {
                let mut job = self.take_job(&st.job);
                if !st.partial.is_empty() {
                    self.partial_line(&mut job, &mut st, None, None);
                }
                if !st.cri_buf.is_empty() {
                    let text = std::mem::take(&mut st.cri_buf);
                    self.text_line(&mut job, &mut st, &text, None, None);
                }
                self.jobs.insert(st.job.clone(), job);
            }
            self.settle_total();
        }
    }

    fn raw_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        raw: &[u8],
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        let mut raw = raw;
        if raw.last() == Some(&b'\r') {
            raw = &raw[..raw.len() - 1];
        }
        // Progress bars rewrite a line with '\r': keep what was displayed last.
        if let Some(p) = memchr::memrchr(b'\r', raw) {
            raw = &raw[p + 1..];
        }
        if raw.len() > self.cfg.max_line_bytes {
            self.stats.truncated_lines += 1;
            raw = cut_at_char(raw, self.cfg.max_line_bytes);
        }
        match std::str::from_utf8(raw) {
            Ok(s) => self.text_line(job, st, s, ingest_ms, event_ms),
            Err(_) => {
                self.stats.invalid_utf8_lines += 1;
                let s = String::from_utf8_lossy(raw).into_owned();
                self.text_line(job, st, &s, ingest_ms, event_ms);
            }
        }
    }

    fn text_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        line: &str,
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        if memchr::memchr(0x1b, line.as_bytes()).is_some() {
            let cleaned = strip_ansi(line);
            self.plain_line(job, st, &cleaned, ingest_ms, event_ms);
        } else {
            self.plain_line(job, st, line, ingest_ms, event_ms);
        }
    }

    /// A line known to be free of '\r' and ANSI escapes.
    fn plain_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        line: &str,
        ingest_ms: Option<i64>,
        event_ms: Option<i64>,
    ) {
        st.line_no += 1;
        if line.trim().is_empty() {
            self.stats.blank_lines += 1;
            return;
        }
        let meta = peel(line, self.cfg.default_year);
        if meta.cri {
            let content = &line[meta.msg_start..];
            if meta.cri_partial {
                if st.cri_buf.len() < self.cfg.max_line_bytes {
                    st.cri_buf.push_str(content);
                }
                return;
            }
            let joined = if st.cri_buf.is_empty() {
                content.to_string()
            } else {
                let mut j = std::mem::take(&mut st.cri_buf);
                j.push_str(content);
                j
            };
            st.line_no -= 1;
            return self.text_line(job, st, &joined, ingest_ms.or(meta.ts_ms), event_ms);
        }
        if meta.message(line).trim().is_empty() {
            // A prefix with nothing behind it (`[default6]:` before an NCCL WARN's blank line).
            self.stats.blank_lines += 1;
            return;
        }
        self.stats.lines += 1;
        job.seq += 1;
        let seq = job.seq;
        let msg = meta.message(line);
        let continuation = is_continuation(msg, st);

        // Route the line to a source. Routes and host ids are cached per stream; the cache is
        // tied to this job instance (an evicted and recreated job starts afresh).
        if st.cache.epoch != job.epoch {
            st.cache = RouteCache {
                epoch: job.epoch,
                ..RouteCache::default()
            };
        }
        let host = match meta.host(line).or(st.hints.host.as_deref()) {
            None => None,
            Some(h) => match &st.cache.host {
                Some((name, id)) if name == h => Some(*id),
                _ => {
                    let id = job.host_id(h);
                    st.cache.host = Some((h.to_string(), id));
                    Some(id)
                }
            },
        };
        if let (Some(h), Some(_), false) = (host, meta.host, st.cache.host_noted) {
            if matches!(meta.producer, Producer::Nccl) {
                job.stream_hosts.entry(st.origin.clone()).or_insert(h);
                job.tables_dirty = true;
                st.cache.host_noted = true;
            }
        }
        let capped_before = self.stats.sources_capped;
        let src = if let Some(l) = meta.local_rank {
            match st.cache.local.iter().find(|(x, _)| *x == l) {
                Some((_, s)) => *s,
                None => {
                    let key = SourceKey::StreamLocal(st.origin.clone(), l);
                    let s = self.route(job, key, &st.origin);
                    if self.stats.sources_capped == capped_before {
                        st.cache.local.push((l, s));
                    }
                    s
                }
            }
        } else if let Some(k) = &st.key {
            match st.cache.key_src {
                Some(s) => s,
                None => {
                    let s = self.route(job, k.clone(), &st.origin);
                    if self.stats.sources_capped == capped_before {
                        st.cache.key_src = Some(s);
                    }
                    s
                }
            }
        } else if let Some(r) = meta.grank {
            self.route(job, SourceKey::Rank(r), &st.origin)
        } else if let (Some(h), Some(p), Producer::Nccl) = (host, meta.pid, meta.producer) {
            self.route(job, SourceKey::HostPid(h, p), &st.origin)
        } else if continuation && st.last_source.is_some() {
            st.last_source.unwrap_or_default()
        } else {
            self.route(job, SourceKey::Stream(st.origin.clone()), &st.origin)
        };
        st.last_source = Some(src);
        let capped = self.stats.sources_capped != capped_before;

        // Learn identity (not from a line whose process was over the cap: its source is the
        // stream's, shared by every process beyond the cap).
        if !capped {
            let needs_index;
            {
                let s = &mut job.sources[src as usize];
                if s.host.is_none() && !matches!(meta.producer, Producer::Kernel | Producer::Syslog)
                {
                    s.host = host;
                }
                if meta.producer == Producer::Nccl && s.pid.is_none() {
                    s.pid = meta.pid;
                }
                if s.local_rank.is_none() {
                    s.local_rank = meta.local_rank.or(st.hints.local_rank);
                }
                if s.rank.is_none() {
                    s.rank = meta.grank.or(st.hints.rank);
                    needs_index = s.rank;
                } else {
                    needs_index = None;
                }
            }
            if let Some(r) = needs_index {
                job.index_rank(src, r);
            }
        }

        // Time: printed on the line, else the record's, else carried from the source.
        let (ts, exact) = match meta.ts_ms.or(event_ms) {
            Some(t) => (Some(t), true),
            None => (job.sources[src as usize].last_ts.or(ingest_ms), false),
        };
        if let Some(t) = ts {
            let s = &mut job.sources[src as usize];
            if exact {
                s.last_ts = Some(t);
                if s.first_ts.is_none() {
                    s.first_ts = Some(t);
                }
                job.max_event_ms = Some(job.max_event_ms.map_or(t, |m| m.max(t)));
            }
        }

        // Level, traceback and record tracking.
        let mut level = meta.level;
        if msg.starts_with("Traceback (most recent call last):") {
            level = level.max(Level::Error);
            st.in_traceback = true;
        } else if st.in_traceback && !continuation {
            st.in_traceback = false;
        }
        if is_exception_line(msg) && (st.in_traceback || msg.contains(": ")) {
            level = level.max(Level::Error);
        }
        if level >= Level::Error {
            job.failure_seen = true;
        }
        st.after_last_error = msg.trim_end() == "Last error:";
        if continuation {
            if let Some(h) = st.open_hit {
                if let Some(hit) = job.hits.get_mut(h) {
                    let is_cause = hit
                        .sig
                        .is_some_and(|s| self.catalog.signatures[s as usize].role == Role::Cause);
                    let cap = if is_cause {
                        CAUSE_RECORD_LINES
                    } else {
                        SYMPTOM_RECORD_LINES
                    };
                    if hit.record.len() < cap {
                        let before = memsize::vec(&hit.record);
                        let line = line.to_string();
                        let added = memsize::string(&line);
                        hit.record.push(line);
                        job.content_bytes = (job.content_bytes + added + memsize::vec(&hit.record))
                            .saturating_sub(before);
                    }
                }
            }
        } else {
            st.record_start = seq;
            st.open_hit = None;
        }

        // Remember the line.
        {
            let ring_lines = job.ring_lines;
            let s = &mut job.sources[src as usize];
            let before = s.ring.heap_bytes();
            s.ring
                .push(seq, ts, continuation, line, ring_lines, self.cfg.ring_bytes);
            job.content_bytes = (job.content_bytes + s.ring.heap_bytes()).saturating_sub(before);
        }

        // Classify.
        self.expr_buf.clear();
        let catalog = self.catalog.clone();
        catalog
            .matcher()
            .scan_into(msg.as_bytes(), &mut self.scratch, &mut self.expr_buf);
        let mut opened = false;
        if !self.expr_buf.is_empty() {
            job.tables_dirty = true;
            let mut sigs = std::mem::take(&mut self.sig_buf);
            catalog.signatures_for(&self.expr_buf, &mut sigs);
            for &sig in &sigs {
                self.stats.signature_hits += 1;
                *self.stats.hits_by_signature.entry(sig).or_default() += 1;
                let spec = &catalog.signatures[sig as usize];
                let is_hit = spec.role != Role::Context;
                opened |= is_hit;
                // Hits over the per-process cap are only counted: no fields, no copy.
                if is_hit && !self.admit(job, src, Some(sig), spec.role == Role::Cause) {
                    continue;
                }
                let mut fields = Vec::new();
                if spec.ingest_fields {
                    catalog.extract_fields(sig, msg, true, &mut fields);
                }
                self.learn_from_fields(job, src, sig, &fields, line, seq, ts, exact, st);
                if is_hit {
                    if spec.role == Role::Cause || level >= Level::Error {
                        job.failure_seen = true;
                    }
                    let hit = Hit {
                        sig: Some(sig),
                        warn_only: false,
                        source: src,
                        seq,
                        line_no: st.line_no,
                        ts_ms: ts,
                        ts_exact: exact,
                        ingest_ms,
                        text: line.to_string(),
                        origin: st.origin.clone(),
                        fields,
                        record: job.sources[src as usize]
                            .ring
                            .record_from(
                                st.record_start,
                                if spec.role == Role::Cause {
                                    CAUSE_RECORD_LINES
                                } else {
                                    SYMPTOM_RECORD_LINES
                                },
                            )
                            .into_iter()
                            .map(|l| l.text)
                            .collect(),
                    };
                    st.open_hit = Some(self.add_hit(job, hit, spec.role == Role::Cause));
                }
            }
            self.sig_buf = sigs;
        }
        // A warning or worse that no signature recognises is still evidence; whether a
        // warning-only incident is a failure is decided from the job's outcome.
        if !opened && level >= Level::Warn && !continuation {
            self.stats.unclassified_errors += 1;
            // The per-process cap of admit() keeps the first two of these.
            if self.admit(job, src, None, false) {
                let hit = Hit {
                    sig: None,
                    warn_only: level < Level::Error,
                    source: src,
                    seq,
                    line_no: st.line_no,
                    ts_ms: ts,
                    ts_exact: exact,
                    ingest_ms,
                    text: line.to_string(),
                    origin: st.origin.clone(),
                    fields: Vec::new(),
                    record: job.sources[src as usize]
                        .ring
                        .record_from(st.record_start, SYMPTOM_RECORD_LINES)
                        .into_iter()
                        .map(|l| l.text)
                        .collect(),
                };
                st.open_hit = Some(self.add_hit(job, hit, false));
            }
        }
        self.settle(job);
        if self.stats.memory_bytes > self.cfg.memory_budget_bytes + self.pending_bytes {
            self.relieve_memory(job);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn learn_from_fields(
        &mut self,
        job: &mut Job,
        src: u32,
        sig: u16,
        fields: &[(String, String)],
        line: &str,
        seq: u64,
        ts: Option<i64>,
        exact: bool,
        st: &Stream,
    ) {
        let spec = &self.catalog.signatures[sig as usize];
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if spec.role == Role::Context {
            if let Some(d) = get("cuda_dev").and_then(|v| v.parse::<u16>().ok()) {
                job.sources[src as usize].cuda_dev = Some(d);
            }
            if let Some(b) = get("bus_id") {
                let b = b.trim_start_matches("0x").to_lowercase();
                let s = &mut job.sources[src as usize];
                let old = s.bus_id.as_ref().map_or(0, memsize::string);
                job.content_bytes = (job.content_bytes + memsize::string(&b)).saturating_sub(old);
                s.bus_id = Some(b);
            }
            if let (Some(r), Some(n)) = (
                get("rank").and_then(|v| v.parse::<u32>().ok()),
                get("nranks").and_then(|v| v.parse::<u32>().ok()),
            ) {
                job.learn_rank(src, r, n);
            }
            let host = job.source_host(src);
            for &f in CONTEXT_FIELDS {
                let Some(v) = get(f) else { continue };
                if let (Some(h), "ip") = (host, f) {
                    if !job.ip_host.contains_key(v) {
                        job.content_bytes += memsize::block(v.len());
                        job.ip_host.insert(v.to_string(), h);
                    }
                }
                let weight = spec.weight;
                let replace = match job.context.get(&(f, src)) {
                    None => true,
                    Some(o) => self.catalog.signatures[o.sig as usize].weight < weight,
                };
                if replace {
                    let obs = ContextObs {
                        value: v.to_string(),
                        source: src,
                        seq,
                        ts_ms: ts,
                        line: line.to_string(),
                        origin: st.origin.clone(),
                        line_no: st.line_no,
                        sig,
                    };
                    job.content_bytes += obs.heap_bytes();
                    if let Some(old) = job.context.insert((f, src), obs) {
                        job.content_bytes = job.content_bytes.saturating_sub(old.heap_bytes());
                    }
                }
            }
        }
        // Clock-sync points are kept per process; its host may only be learned later.
        if let (Some(sync), Some(t), true) = (spec.sync, ts, exact) {
            let key = match sync {
                Sync::Seq => get("seq").and_then(|v| v.parse::<u64>().ok()),
                Sync::Init => Some(0),
            };
            if let (Some(key), true) = (key, job.sync.len() < 200_000) {
                job.tables_dirty = true;
                job.sync.push(SyncObs {
                    sig,
                    key,
                    source: src,
                    ts_ms: t,
                });
            }
        }
    }

    /// Counts a hit of `sig` from `source` and says whether it is kept (per-process caps).
    fn admit(&mut self, job: &mut Job, source: u32, sig: Option<u16>, is_cause: bool) -> bool {
        job.tables_dirty = true;
        let count = job.hit_counts.entry((source, sig)).or_default();
        *count += 1;
        let cap = if is_cause {
            self.cfg.hits_per_source_signature
        } else {
            self.cfg.hits_per_source_signature.min(2)
        };
        if *count > cap || job.hits.len() >= self.cfg.max_hits_per_job {
            self.stats.dropped_hits += 1;
            return false;
        }
        true
    }

    fn add_hit(&mut self, job: &mut Job, hit: Hit, is_cause: bool) -> usize {
        if is_cause && job.sources[hit.source as usize].snapshot.is_none() {
            let snap = job.sources[hit.source as usize]
                .ring
                .before(hit.seq, self.cfg.preceding_lines);
            job.content_bytes += crate::job::snapshot_bytes(&snap);
            job.sources[hit.source as usize].snapshot = Some(snap);
        }
        let idx = job.hits.len();
        let incidents = |j: &Job| j.incidents.iter().map(Incident::heap_bytes).sum::<usize>();
        let before = incidents(job);
        correlate::assign_incident(job, &hit, idx as u32, &self.cfg, self.now_wall());
        job.content_bytes =
            (job.content_bytes + incidents(job) + hit.heap_bytes()).saturating_sub(before);
        job.tables_dirty = true;
        job.hits.push(hit);
        idx
    }

    fn now_wall(&self) -> i64 {
        self.wall_ms
    }

    /// Keeps total memory under the budget while `active` (taken out of the map) is being
    /// fed: idle jobs are finalized and evicted first (least recently active first), then the
    /// active job's rings are halved.
    fn relieve_memory(&mut self, active: &mut Job) {
        // Free down to 90% of the budget so relief is not needed again on the next line.
        // Diagnoses waiting for the next poll are not chased: evicting more jobs would only
        // add to them (they are counted, and handed out at the next poll).
        let budget = self.cfg.memory_budget_bytes / 10 * 9;
        if self.state_bytes() > budget {
            let mut order: Vec<(u64, String)> = self
                .jobs
                .iter()
                .map(|(n, j)| (j.last_activity, n.clone()))
                .collect();
            order.sort();
            for (_, name) in order {
                if self.state_bytes() <= budget {
                    break;
                }
                if let Some(mut job) = self.jobs.remove(&name) {
                    let diags = correlate::diagnose_ready(
                        &mut job,
                        &self.catalog,
                        &self.cfg,
                        i64::MAX,
                        true,
                    );
                    self.pending_bytes += diags
                        .iter()
                        .map(|d| {
                            memsize::json(&d.json)
                                + memsize::string(&d.id)
                                + memsize::string(&d.job)
                        })
                        .sum::<usize>();
                    self.pending.extend(diags);
                    self.forget_job_bytes(&job);
                    self.forget_record_streams(&name);
                    self.stats.jobs_evicted += 1;
                    self.settle_total();
                }
            }
            self.trim_if_freed();
        }
        while self.state_bytes() > budget && active.ring_lines > MIN_RING_LINES {
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
        if self.state_bytes() > budget {
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
    fn annotate(&self, mut out: Vec<Diagnosis>) -> Vec<Diagnosis> {
        if self.baseline.is_empty() {
            return out;
        }
        for d in &mut out {
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
            let diff = self.baseline.first_new(&lines, self.cfg.default_year).map(
                |i| serde_json::json!({"line": lines[i], "is_root_cause": i + 1 == lines.len()}),
            );
            d.json["baseline_diff"] = diff.unwrap_or(serde_json::Value::Null);
        }
        out
    }

    /// Diagnoses whose incidents are ready (event-time watermark past start + settle, or
    /// waited `max_wait_ms` of wall time) and new or changed since last published.
    pub fn poll(&mut self, now_wall_ms: i64) -> Vec<Diagnosis> {
        self.wall_ms = now_wall_ms;
        let mut out = self.take_pending();
        for job in self.jobs.values_mut() {
            out.extend(correlate::diagnose_ready(
                job,
                &self.catalog,
                &self.cfg,
                now_wall_ms,
                false,
            ));
        }
        out.extend(self.release_quiet_jobs(now_wall_ms));
        self.stats.diagnoses_emitted += out.len() as u64;
        self.annotate(out)
    }

    /// Final diagnoses of the jobs quiet for `release_quiet_ms`, whose state is then released.
    /// A job no poll has seen yet starts its quiet time at this poll (it may have been fed
    /// before the first one, when the engine's wall clock was still 0).
    fn release_quiet_jobs(&mut self, now_wall_ms: i64) -> Vec<Diagnosis> {
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
        let mut out = Vec::new();
        for name in quiet {
            if let Some(job) = self.jobs.get_mut(&name) {
                out.extend(correlate::diagnose_ready(
                    job,
                    &self.catalog,
                    &self.cfg,
                    i64::MAX,
                    true,
                ));
            }
            self.release_job(&name);
        }
        self.trim_if_freed();
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
                out.extend(correlate::diagnose_ready(
                    job,
                    &self.catalog,
                    &self.cfg,
                    i64::MAX,
                    true,
                ));
            }
        }
        self.stats.diagnoses_emitted += out.len() as u64;
        self.annotate(out)
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
        self.trim_if_freed();
    }

    /// Where the accounted memory is, in bytes, counted from scratch: rings, hits (with
    /// their incidents), snapshots, context, sources (their slots, keys and identity
    /// tables), streams (with the record-stream index and the engine's tables), other (the
    /// remaining job tables: sync points, hit counters, names; diagnoses of evicted jobs
    /// waiting for the next poll). Sums to `memory_bytes`.
    pub fn memory_breakdown(&self) -> [usize; 7] {
        use memsize::{map, string, vec};
        let mut out = [0usize; 7];
        for j in self.jobs.values() {
            let rings: usize = j.sources.iter().map(|s| s.ring.heap_bytes()).sum();
            let snaps: usize = j.sources.iter().map(|s| s.heap_bytes()).sum::<usize>() - rings;
            let hits = vec(&j.hits)
                + j.hits.iter().map(Hit::heap_bytes).sum::<usize>()
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
            out[6] += total - rings - hits - snaps - context - sources;
        }
        out[6] += self.pending_bytes + vec(&self.pending);
        out[5] = self.streams.values().map(Stream::heap_bytes).sum::<usize>()
            + self
                .record_streams
                .iter()
                .map(|(k, m)| index_bytes(k, m))
                .sum::<usize>()
            + map(&self.jobs)
            + map(&self.streams)
            + map(&self.record_streams);
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
            memsize::map(&self.jobs)
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
            assert_eq!(j.mem_bytes, j.heap_bytes(), "job {}", j.name);
        }
        let b = e.memory_breakdown();
        let tables =
            memsize::map(&e.jobs) + memsize::map(&e.streams) + memsize::map(&e.record_streams);
        assert_eq!(b[5], e.streams_bytes + tables);
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
