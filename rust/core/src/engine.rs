//! The engine: streams of bytes in, per-job state updated line by line, diagnoses out.
//! Callers own I/O and time; the engine owns everything that touches every line.

mod apply;
mod files;
mod lines;

pub use files::{FileInput, FilesReport};

use lines::{Batch, LineDecoder, LineState, Times};

use crate::baseline::Baseline;
use crate::catalog::{Catalog, Role};
use crate::correlate::{self, Diagnosis};
use crate::job::{Hit, Job, SourceKey, SyncObs};
use crate::records::{DecoderConfig, RecordDecoder};
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
    /// Lines whose process was new when its job already had as many sources as the budget
    /// allows (routed to their stream's source).
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
}

pub struct Engine {
    catalog: Arc<Catalog>,
    decoder: LineDecoder,
    batch: Batch,
    pub cfg: Config,
    jobs: HashMap<String, Job>,
    streams: HashMap<u64, Stream>,
    next_stream: u64,
    tick: u64,
    pub stats: Stats,
    pending: Vec<Diagnosis>,
    wall_ms: i64,
    /// job -> source -> stream id, for record-fed streams.
    record_streams: HashMap<String, HashMap<String, u64>>,
    baseline: Baseline,
}

/// A Kafka record as handed over: value, key, job header, broker time in ms.
pub type RawRecord<'a> = (&'a [u8], Option<&'a [u8]>, Option<&'a [u8]>, Option<i64>);

/// Lines of a multi-line record kept with a hit: whole records for causes, the head only for
/// symptoms (thousands of ranks print the same symptom record).
const CAUSE_RECORD_LINES: usize = 40;
const SYMPTOM_RECORD_LINES: usize = 0;
/// What a source costs besides its ring's lines: the struct, its key and index entries.
const SOURCE_BYTES: usize = std::mem::size_of::<crate::job::Source>() + 256;
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
            cfg,
            jobs: HashMap::new(),
            streams: HashMap::new(),
            next_stream: 1,
            tick: 0,
            stats: Stats::default(),
            pending: Vec::new(),
            wall_ms: 0,
            record_streams: HashMap::new(),
            baseline: Baseline::default(),
        }
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
        self.streams.insert(
            id,
            Stream {
                cache: RouteCache::default(),
                job: job.to_string(),
                origin: Arc::from(origin),
                hints,
                key,
                lines: LineState::default(),
                last_source: None,
                record_start: 0,
                open_hit: None,
            },
        );
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
    /// Returns the index and reason of every record that was rejected. Consecutive records of
    /// one job are fed without putting the job back in between.
    pub fn feed_records(
        &mut self,
        cfg: &DecoderConfig,
        origin: &str,
        records: &[RawRecord<'_>],
    ) -> Vec<(usize, &'static str)> {
        let decoder = RecordDecoder::new(cfg);
        let mut rejected = Vec::new();
        let mut current: Option<Job> = None;
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
            let known = self
                .record_streams
                .get(d.job.as_ref())
                .and_then(|m| m.get(d.source.as_ref()))
                .copied()
                .filter(|id| self.streams.contains_key(id));
            let id = match known {
                Some(id) => id,
                None => {
                    let hints = StreamHints {
                        source_key: Some(d.source.to_string()),
                        rank: d.rank,
                        local_rank: None,
                        host: d.host.as_deref().map(str::to_string),
                    };
                    let id = self.open_stream(&d.job, &format!("{origin}/{}", d.source), hints);
                    self.record_streams
                        .entry(d.job.to_string())
                        .or_default()
                        .insert(d.source.to_string(), id);
                    id
                }
            };
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
            let t = Times {
                ingest_ms: *broker_ms,
                event_ms: d.event_ms,
            };
            if d.chunked {
                self.chunk_into(&mut job, &mut st, d.text.as_bytes(), t);
            } else {
                self.lines_into(&mut job, &mut st, d.text.as_bytes(), t);
            }
            self.streams.insert(id, st);
            current = Some(job);
        }
        if let Some(j) = current {
            let name = j.name.clone();
            self.jobs.insert(name, j);
        }
        rejected
    }

    /// The source of `key`, created if new and counted against the memory budget. Sources
    /// take at most a quarter of the budget: past that, a new process's lines go to the
    /// stream's own source (counted in `sources_capped`), so that a million distinct
    /// `[rankN]:` prefixes cannot outgrow the budget.
    fn route(&mut self, job: &mut Job, key: SourceKey, origin: &Arc<str>) -> u32 {
        if let Some(&i) = job.source_keys.get(&key) {
            return i;
        }
        let max_sources = (self.cfg.memory_budget_bytes / 4 / SOURCE_BYTES).max(MIN_SOURCES);
        let key = if job.sources.len() >= max_sources && !matches!(key, SourceKey::Stream(_)) {
            self.stats.sources_capped += 1;
            SourceKey::Stream(origin.clone())
        } else {
            key
        };
        let before = job.sources.len();
        let src = job.source_for(key, origin);
        if job.sources.len() > before {
            job.mem_bytes += SOURCE_BYTES;
            self.stats.memory_bytes += SOURCE_BYTES;
        }
        src
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
    }

    pub fn close_stream(&mut self, stream_id: u64) {
        if let Some(mut st) = self.streams.remove(&stream_id) {
            if !st.lines.is_idle() {
                let mut job = self.take_job(&st.job);
                self.finish_lines(&mut job, &mut st);
                self.jobs.insert(st.job.clone(), job);
            }
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
                    );
                    self.pending.extend(diags);
                    self.stats.memory_bytes = self.stats.memory_bytes.saturating_sub(job.mem_bytes);
                    self.stats.jobs_evicted += 1;
                    self.record_streams.remove(&name);
                }
            }
        }
        while self.stats.memory_bytes > budget && active.ring_lines > 16 {
            active.ring_lines /= 2;
            self.stats.ring_shrinks += 1;
            let mut freed = 0usize;
            for s in &mut active.sources {
                let before = s.ring.bytes();
                s.ring.shrink_to(active.ring_lines);
                freed += before - s.ring.bytes();
            }
            active.mem_bytes = active.mem_bytes.saturating_sub(freed);
            self.stats.memory_bytes = self.stats.memory_bytes.saturating_sub(freed);
        }
        if self.stats.memory_bytes > budget {
            // Last resort: symptom lines beyond the first few per signature keep their
            // signature, source, time and fields (enough for collateral and sequence analysis)
            // but give up their text.
            let mut freed = 0usize;
            let start = active.compacted_upto;
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
                freed += hit.text.len() + hit.record.iter().map(|l| l.len() + 24).sum::<usize>();
                hit.text = String::new();
                hit.record = Vec::new();
                self.stats.compacted_hits += 1;
            }
            active.mem_bytes = active.mem_bytes.saturating_sub(freed);
            self.stats.memory_bytes = self.stats.memory_bytes.saturating_sub(freed);
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
        let mut out = std::mem::take(&mut self.pending);
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
        out
    }

    /// Forgets a job's state and the streams records opened for it. Streams a caller opened
    /// stay usable: feeding one again starts a new instance of the job.
    fn release_job(&mut self, name: &str) {
        if let Some(streams) = self.record_streams.remove(name) {
            for id in streams.values() {
                self.streams.remove(id);
            }
        }
        if let Some(j) = self.jobs.remove(name) {
            self.stats.memory_bytes = self.stats.memory_bytes.saturating_sub(j.mem_bytes);
            self.stats.jobs_released += 1;
        }
    }

    /// Every incident of every job, diagnosed now (end of input).
    pub fn finish(&mut self) -> Vec<Diagnosis> {
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.close_stream(id);
        }
        let mut out = std::mem::take(&mut self.pending);
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
        for id in streams {
            self.streams.remove(&id);
        }
        self.record_streams.remove(name);
        if let Some(j) = self.jobs.remove(name) {
            self.stats.memory_bytes = self.stats.memory_bytes.saturating_sub(j.mem_bytes);
        }
    }

    /// Where the accounted memory is: (rings, hits, snapshots, context, sync) in bytes.
    pub fn memory_breakdown(&self) -> [usize; 5] {
        let mut out = [0usize; 5];
        for j in self.jobs.values() {
            for s in &j.sources {
                out[0] += s.ring.bytes();
                out[2] += s
                    .snapshot
                    .as_ref()
                    .map_or(0, |v| v.iter().map(|l| l.text.len() + 48).sum());
            }
            out[1] += j.hits.iter().map(Hit::approx_bytes).sum::<usize>();
            out[3] += j
                .context
                .iter()
                .map(|((_, _), o)| o.line.len() + o.value.len() + 160)
                .sum::<usize>();
            out[4] += j.sync.len() * std::mem::size_of::<SyncObs>();
        }
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
            assert_eq!(lines::is_exception_line(c), reference(c), "{c:?}");
        }
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
        assert_eq!(e.stats.memory_bytes, 0);
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
        assert_eq!((e.stats.jobs_evicted, e.stats.memory_bytes), (0, 0));
        assert!(e.streams.is_empty() && e.record_streams.is_empty());
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
