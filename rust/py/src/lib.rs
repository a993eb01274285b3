//! pyo3 bindings over rankwatch-core. Thin by design: structured results cross the boundary
//! as JSON bytes (parsed with orjson on the Python side), and every call that touches lines
//! releases the GIL.

use pyo3::create_exception;
use pyo3::exceptions::{PyKeyError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use rankwatch_core::catalog::Role;
use rankwatch_core::correlate::Diagnosis;
use rankwatch_core::dbcache::{DbCache, DbOrigin};
use rankwatch_core::engine::RawRecord;
use rankwatch_core::files::ReadError;
use rankwatch_core::prefix::{docker_json, peel};
use rankwatch_core::records::{DecoderConfig, RecordDecoder};
use rankwatch_core::{Catalog, Config, Engine, FileInput, StreamHints};
use serde_json::{json, Value};
use std::collections::{HashSet, VecDeque};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod fr;
mod options;
use options::EngineOptions;

/// A file for `Engine.feed_files`: path (bytes, as the OS names it), job, origin, source key,
/// rank, local rank.
type FileTuple = (
    Vec<u8>,
    String,
    String,
    Option<String>,
    Option<u32>,
    Option<u16>,
);
/// What `Engine.feed_files` returns: bytes fed, problems, timing (see there).
type FedFiles = (
    u64,
    Vec<(usize, &'static str, String)>,
    [(&'static str, f64); 4],
);

/// What `Engine.feed_consumer_records` returns: (index, reason) of each rejected record, the
/// distinct record keys, and the distinct job-header values of the records that have headers.
type FedConsumerRecords<'py> = (
    Vec<(usize, &'static str)>,
    Vec<Option<Bound<'py, PyBytes>>>,
    Vec<Option<Bound<'py, PyBytes>>>,
);

/// Counts the bytes `Engine.feed_files` has fed so far; another thread may read it while the
/// call runs (the call releases the GIL).
#[pyclass(name = "FeedProgress", module = "rankwatch._core", frozen)]
struct PyFeedProgress {
    bytes: Arc<AtomicU64>,
}

#[pymethods]
impl PyFeedProgress {
    #[new]
    fn new() -> Self {
        PyFeedProgress {
            bytes: Arc::new(AtomicU64::new(0)),
        }
    }

    #[getter]
    fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

/// The diagnoses of one `Engine.poll_each`, one JSON document each, handed to Python one at a
/// time: a burst of a thousand diagnoses (7 MB) is held once, as Rust strings, not twice (the
/// strings and all their Python copies at once).
#[pyclass(name = "EncodedDiagnoses", module = "rankwatch._core")]
struct PyEncodedDiagnoses {
    docs: VecDeque<String>,
    waiting: usize,
    more: bool,
    held_jobs: Vec<String>,
    held_origins: Vec<String>,
}

#[pymethods]
impl PyEncodedDiagnoses {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> Option<Py<PyBytes>> {
        let doc = self.docs.pop_front()?;
        self.waiting -= doc.len();
        Some(PyBytes::new(py, doc.as_bytes()).unbind())
    }

    fn __len__(&self) -> usize {
        self.docs.len()
    }

    /// Bytes of the documents not yet handed out.
    #[getter]
    fn waiting_bytes(&self) -> usize {
        self.waiting
    }

    /// Whether the poll stopped at its byte bound with more diagnoses ready: poll again.
    #[getter]
    fn more(&self) -> bool {
        self.more
    }

    /// Jobs with an incident this poll's `hold` left undiagnosed although its input changed:
    /// their records fed so far are not all reflected in a diagnosis yet.
    #[getter]
    fn held_jobs(&self) -> Vec<String> {
        self.held_jobs.clone()
    }

    /// The origins (`feed_records`' `origin`) of the records that fed those jobs: input
    /// positions not to commit past until a diagnosis reflects them.
    #[getter]
    fn held_origins(&self) -> Vec<String> {
        self.held_origins.clone()
    }
}

create_exception!(_core, CatalogError, PyValueError);

fn bytes(py: Python<'_>, v: &Value) -> Py<PyBytes> {
    PyBytes::new(py, v.to_string().as_bytes()).unbind()
}

#[pyclass(name = "Catalog", module = "rankwatch._core", frozen)]
struct PyCatalog {
    inner: Arc<Catalog>,
}

#[pymethods]
impl PyCatalog {
    /// Builds a catalog from (file name, TOML text) pairs; with `use_cache`, the compiled
    /// database comes from (and goes to) the user's cache directory (see dbcache.rs).
    #[new]
    #[pyo3(signature = (sources, use_cache = true))]
    fn new(py: Python<'_>, sources: Vec<(String, String)>, use_cache: bool) -> PyResult<Self> {
        let cache = use_cache.then(DbCache::from_env).flatten();
        let cat = py
            .detach(|| Catalog::from_sources_cached(&sources, cache.as_ref()))
            .map_err(|e| CatalogError::new_err(e.to_string()))?;
        Ok(PyCatalog {
            inner: Arc::new(cat),
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// "cache" when the Hyperscan database was loaded from the cache, else "compiled".
    #[getter]
    fn database_origin(&self) -> &'static str {
        match self.inner.cache_report.origin {
            DbOrigin::Cached => "cache",
            DbOrigin::Compiled => "compiled",
        }
    }

    /// The cache file consulted (None when no cache was used).
    #[getter]
    fn cache_path(&self) -> Option<String> {
        let path = self.inner.cache_report.path.as_ref();
        path.map(|p| p.display().to_string())
    }

    /// Why an existing cache entry was ignored or the cache could not be written.
    #[getter]
    fn cache_note(&self) -> Option<String> {
        self.inner.cache_report.note.clone()
    }

    fn ids(&self) -> Vec<String> {
        self.inner.signatures.iter().map(|s| s.id.clone()).collect()
    }

    /// All signatures as a JSON array.
    fn signatures_json(&self, py: Python<'_>) -> Py<PyBytes> {
        bytes(
            py,
            &serde_json::to_value(&self.inner.signatures).unwrap_or(Value::Null),
        )
    }

    /// Benchmark ceiling: scans every newline-separated line of `data` with the catalog's
    /// Hyperscan database (no decoding, no state). Returns (lines, matches).
    fn scan_lines(&self, py: Python<'_>, data: &[u8]) -> (u64, u64) {
        let cat = &self.inner;
        py.detach(|| {
            let m = cat.matcher();
            let mut scratch = m.scratch();
            let (mut lines, mut matches) = (0u64, 0u64);
            for line in data.split(|b| *b == b'\n') {
                if line.is_empty() {
                    continue;
                }
                lines += 1;
                matches += m.count_matches(line, &mut scratch);
            }
            (lines, matches)
        })
    }

    /// Peels and classifies one line, as the engine would; returns JSON.
    fn test_line(&self, py: Python<'_>, line: &str, year: i32) -> Py<PyBytes> {
        // A container runtime's envelope (Docker json-file, CRI) is unwrapped first, as the
        // engine does once it has joined the pieces.
        let docker = docker_json(line);
        let line = docker.as_ref().map_or(line, |p| &p.text);
        let mut meta = peel(line, year);
        let line = if meta.cri {
            let content = &line[meta.msg_start..];
            meta = peel(content, year);
            content
        } else {
            line
        };
        let msg = meta.message(line);
        let sigs = self.inner.signatures_matching(msg.as_bytes());
        let hits: Vec<Value> = sigs
            .iter()
            .map(|&s| {
                let sig = &self.inner.signatures[s as usize];
                let mut f = Vec::new();
                self.inner.extract_fields(s, msg, false, &mut f);
                let fields: serde_json::Map<String, Value> =
                    f.into_iter().map(|(k, v)| (k, Value::String(v))).collect();
                json!({"id": sig.id, "title": sig.title, "role": match sig.role {
                    Role::Cause => "cause", Role::Symptom => "symptom", Role::Context => "context" },
                    "subsystem": sig.subsystem, "weight": sig.weight, "fields": fields})
            })
            .collect();
        let v = json!({
            "message": msg,
            "host": meta.host(line),
            "pid": meta.pid,
            "tid": meta.tid,
            "cuda_dev": meta.cuda_dev,
            "rank": meta.grank,
            "local_rank": meta.local_rank,
            "ts": meta.ts_ms.map(rankwatch_core::correlate::iso_ms),
            "level": meta.level.as_str(),
            "repeated": meta.repeated,
            "hits": hits,
        });
        bytes(py, &v)
    }
}

fn config_from_json(text: Option<&str>) -> PyResult<Config> {
    let options = match text {
        Some(text) => EngineOptions::from_json(text).map_err(PyValueError::new_err)?,
        None => EngineOptions::default(),
    };
    options.config().map_err(PyValueError::new_err)
}

fn diagnoses_json(d: Vec<Diagnosis>) -> Value {
    Value::Array(d.into_iter().map(|d| d.json).collect())
}

/// A parsed record decoder (format preset plus field-path overrides).
#[pyclass(name = "Decoder", module = "rankwatch._core", frozen)]
struct PyDecoder {
    inner: DecoderConfig,
}

#[pymethods]
impl PyDecoder {
    #[new]
    fn new(config_json: &str) -> PyResult<Self> {
        let mut cfg: DecoderConfig = serde_json::from_str(config_json)
            .map_err(|e| PyValueError::new_err(format!("decoder config: {e}")))?;
        cfg.fill_defaults();
        Ok(PyDecoder { inner: cfg })
    }

    #[staticmethod]
    fn formats() -> Vec<&'static str> {
        vec![
            "canonical",
            "fluent-bit",
            "vector",
            "docker",
            "cri",
            "text",
            "json",
        ]
    }

    #[staticmethod]
    fn reject_reasons() -> Vec<&'static str> {
        rankwatch_core::records::REASONS.to_vec()
    }

    fn describe(&self) -> String {
        format!("{:?}", self.inner)
    }

    /// The job of each record as `feed_records` would decode it (UTF-8 bytes), or None for a
    /// record it would reject; one call per batch with the GIL released. Lists are parallel:
    /// value bytes, key bytes or None, job header bytes or None.
    fn jobs<'py>(
        &self,
        py: Python<'py>,
        values: &Bound<'py, PyList>,
        keys: &Bound<'py, PyList>,
        headers: &Bound<'py, PyList>,
    ) -> PyResult<Vec<Option<Bound<'py, PyBytes>>>> {
        let n = values.len();
        if keys.len() != n || headers.len() != n {
            return Err(PyValueError::new_err("jobs: lists differ in length"));
        }
        let vals: Vec<Bound<'_, PyBytes>> = values.extract()?;
        let ks: Vec<Option<Bound<'_, PyBytes>>> = keys.extract()?;
        let hs: Vec<Option<Bound<'_, PyBytes>>> = headers.extract()?;
        let values: Vec<&[u8]> = vals.iter().map(|v| v.as_bytes()).collect();
        let keys: Vec<Option<&[u8]>> = ks
            .iter()
            .map(|k| k.as_ref().map(|b| b.as_bytes()))
            .collect();
        let job_headers: Vec<Option<&[u8]>> = hs
            .iter()
            .map(|h| h.as_ref().map(|b| b.as_bytes()))
            .collect();
        let decoder = RecordDecoder::new(&self.inner);
        let jobs: Vec<Option<String>> = py.detach(|| {
            (0..n)
                .map(|i| {
                    decoder
                        .decode(values[i], keys[i], job_headers[i])
                        .ok()
                        .map(|d| d.job.into_owned())
                })
                .collect()
        });
        Ok(jobs
            .into_iter()
            .map(|j| j.map(|j| PyBytes::new(py, j.as_bytes())))
            .collect())
    }
}

/// What the engine reads of one aiokafka `ConsumerRecord`, held (not copied) while it runs.
struct RecordFields<'py> {
    value: Option<Bound<'py, PyBytes>>,
    key: Option<Bound<'py, PyBytes>>,
    header: Option<Bound<'py, PyBytes>>,
    has_headers: bool,
    timestamp: Option<i64>,
}

/// The distinct values, in order of first appearance (the same objects, not copies).
/// Records of a job come in runs, so a value equal to the one before is not hashed again.
fn distinct<'a, 'py: 'a>(
    values: impl Iterator<Item = Option<&'a Bound<'py, PyBytes>>>,
) -> Vec<Option<Bound<'py, PyBytes>>> {
    let mut seen: HashSet<Option<&[u8]>> = HashSet::new();
    let mut last = None;
    values
        .filter(|v| {
            let bytes = v.map(|b| b.as_bytes());
            last != Some(bytes) && {
                last = Some(bytes);
                seen.insert(bytes)
            }
        })
        .map(|v| v.cloned())
        .collect()
}

fn opt_bytes<'py>(v: Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
    if v.is_none() {
        Ok(None)
    } else {
        Ok(Some(v.cast_into::<PyBytes>()?))
    }
}

impl<'py> RecordFields<'py> {
    fn read(r: &Bound<'py, PyAny>, job_header: &str) -> PyResult<Self> {
        let py = r.py();
        let headers = r.getattr(intern!(py, "headers"))?;
        let mut header = None;
        let has_headers = headers.is_truthy()?;
        if has_headers {
            for h in headers.try_iter()? {
                let (name, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = h?.extract()?;
                if name.eq(job_header)? {
                    header = opt_bytes(value)?;
                    break;
                }
            }
        }
        Ok(RecordFields {
            value: opt_bytes(r.getattr(intern!(py, "value"))?)?,
            key: opt_bytes(r.getattr(intern!(py, "key"))?)?,
            header,
            has_headers,
            timestamp: r.getattr(intern!(py, "timestamp"))?.extract()?,
        })
    }

    fn raw(&self) -> RawRecord<'_> {
        (
            self.value.as_ref().map_or(&b""[..], |v| v.as_bytes()),
            self.key.as_ref().map(|k| k.as_bytes()),
            self.header.as_ref().map(|h| h.as_bytes()),
            self.timestamp,
        )
    }
}

#[pyclass(name = "Engine", module = "rankwatch._core")]
struct PyEngine {
    inner: Engine,
}

#[pymethods]
impl PyEngine {
    #[new]
    #[pyo3(signature = (catalog, config_json=None))]
    fn new(catalog: &PyCatalog, config_json: Option<&str>) -> PyResult<Self> {
        let cfg = config_from_json(config_json)?;
        Ok(PyEngine {
            inner: Engine::new(catalog.inner.clone(), cfg),
        })
    }

    #[pyo3(signature = (job, origin, source_key=None, rank=None, local_rank=None, host=None))]
    fn open_stream(
        &mut self,
        job: &str,
        origin: &str,
        source_key: Option<String>,
        rank: Option<u32>,
        local_rank: Option<u16>,
        host: Option<String>,
    ) -> u64 {
        self.inner.open_stream(
            job,
            origin,
            StreamHints {
                source_key,
                rank,
                local_rank,
                host,
            },
        )
    }

    /// Feeds a chunk of a stream's bytes (any size; partial lines carry over).
    #[pyo3(signature = (stream, data, ingest_ms=None))]
    fn feed(
        &mut self,
        py: Python<'_>,
        stream: u64,
        data: &[u8],
        ingest_ms: Option<i64>,
    ) -> PyResult<()> {
        let engine = &mut self.inner;
        let ok = py.detach(|| engine.feed(stream, data, ingest_ms));
        if ok {
            Ok(())
        } else {
            Err(PyKeyError::new_err(format!("unknown stream {stream}")))
        }
    }

    /// Decodes and feeds a batch of records in one call with the GIL released. Lists are
    /// parallel: value bytes, key bytes or None, job header bytes or None, broker time in ms
    /// or None. Returns (index, reason) for each rejected record.
    #[allow(clippy::too_many_arguments)]
    fn feed_records(
        &mut self,
        py: Python<'_>,
        decoder: &PyDecoder,
        origin: &str,
        values: &Bound<'_, PyList>,
        keys: &Bound<'_, PyList>,
        headers: &Bound<'_, PyList>,
        timestamps: &Bound<'_, PyList>,
    ) -> PyResult<Vec<(usize, &'static str)>> {
        let n = values.len();
        if keys.len() != n || headers.len() != n || timestamps.len() != n {
            return Err(PyValueError::new_err(
                "feed_records: lists differ in length",
            ));
        }
        let vals: Vec<Bound<'_, PyBytes>> = values.extract()?;
        let ks: Vec<Option<Bound<'_, PyBytes>>> = keys.extract()?;
        let hs: Vec<Option<Bound<'_, PyBytes>>> = headers.extract()?;
        let ts: Vec<Option<i64>> = timestamps.extract()?;
        let records: Vec<RawRecord<'_>> = (0..n)
            .map(|i| {
                (
                    vals[i].as_bytes(),
                    ks[i].as_ref().map(|b| b.as_bytes()),
                    hs[i].as_ref().map(|b| b.as_bytes()),
                    ts[i],
                )
            })
            .collect();
        let engine = &mut self.inner;
        let cfg = &decoder.inner;
        Ok(py.detach(|| engine.feed_records(cfg, origin, &records)))
    }

    /// Reads, decodes and feeds whole files in one call, GIL released: decoding and scanning
    /// on `threads` worker threads (0: one per core), lines applied in file order. Returns
    /// (bytes fed, problems, timing): each problem is (file index, "unreadable" or "partial",
    /// reason); timing is seconds spent reading, decoding (both summed over the workers),
    /// applying and waiting for the workers.
    #[pyo3(signature = (files, threads=0, progress=None))]
    fn feed_files(
        &mut self,
        py: Python<'_>,
        files: Vec<FileTuple>,
        threads: usize,
        progress: Option<PyRef<'_, PyFeedProgress>>,
    ) -> FedFiles {
        let inputs: Vec<FileInput> = files
            .into_iter()
            .map(
                |(path, job, origin, source_key, rank, local_rank)| FileInput {
                    path: PathBuf::from(OsString::from_vec(path)),
                    job,
                    origin,
                    hints: StreamHints {
                        source_key,
                        rank,
                        local_rank,
                        host: None,
                    },
                },
            )
            .collect();
        let counter = progress.map(|p| p.bytes.clone());
        let engine = &mut self.inner;
        let report = py.detach(|| engine.feed_files(&inputs, threads, counter.as_deref()));
        let problems = report
            .problems
            .into_iter()
            .map(|(i, e)| match e {
                ReadError::Unreadable(why) => (i, "unreadable", why),
                ReadError::Partial(why) => (i, "partial", why),
            })
            .collect();
        let timing = [
            ("read", report.read_s),
            ("decode", report.decode_s),
            ("apply", report.apply_s),
            ("wait", report.wait_s),
        ];
        (report.bytes, problems, timing)
    }

    /// Decodes and feeds a partition batch of aiokafka records (`ConsumerRecord`s or the parsed
    /// records they wrap: anything with these attributes) in one call: value
    /// (None is empty), key, broker timestamp and the first header named `job_header` are
    /// read from each record here, so that no per-record lists are built in Python. Returns
    /// (index, reason) for each rejected record, the distinct keys and the distinct job-header
    /// values (None for a record with headers but not that one; records without headers are
    /// left out), so that the caller never walks the records itself.
    fn feed_consumer_records<'py>(
        &mut self,
        py: Python<'py>,
        decoder: &PyDecoder,
        origin: &str,
        records: &Bound<'py, PyList>,
        job_header: &str,
    ) -> PyResult<FedConsumerRecords<'py>> {
        let fields: Vec<RecordFields<'_>> = records
            .iter()
            .map(|r| RecordFields::read(&r, job_header))
            .collect::<PyResult<_>>()?;
        let raw: Vec<RawRecord<'_>> = fields.iter().map(RecordFields::raw).collect();
        let engine = &mut self.inner;
        let cfg = &decoder.inner;
        let rejected = py.detach(|| engine.feed_records(cfg, origin, &raw));
        let keys = distinct(fields.iter().map(|f| f.key.as_ref()));
        let headers = distinct(
            fields
                .iter()
                .filter(|f| f.has_headers)
                .map(|f| f.header.as_ref()),
        );
        Ok((rejected, keys, headers))
    }

    fn close_stream(&mut self, py: Python<'_>, stream: u64) {
        let engine = &mut self.inner;
        py.detach(|| engine.close_stream(stream));
    }

    /// Diagnoses that became ready or changed, as a JSON array.
    fn poll(&mut self, py: Python<'_>, now_ms: i64) -> Py<PyBytes> {
        let engine = &mut self.inner;
        let v = py.detach(|| diagnoses_json(engine.poll(now_ms)));
        bytes(py, &v)
    }

    /// `poll`, one JSON document per diagnosis: a caller that decodes and drops them one at a
    /// time never holds a whole burst of diagnoses as Python objects (several times the JSON).
    /// With `max_bytes` (0: no bound) the poll stops once its documents reach that size; the
    /// rest come, in order, from the next call (`more` says whether there are any). With
    /// `hold`, an open incident diagnosed within the last settle window of wall time is not
    /// diagnosed again yet (a storm would have it rebuilt on every poll); a poll without
    /// `hold` diagnoses it with everything fed so far (poll so before committing offsets).
    #[pyo3(signature = (now_ms, max_bytes = 0, hold = false))]
    fn poll_each(
        &mut self,
        py: Python<'_>,
        now_ms: i64,
        max_bytes: usize,
        hold: bool,
    ) -> PyEncodedDiagnoses {
        let engine = &mut self.inner;
        let bound = if max_bytes == 0 {
            usize::MAX
        } else {
            max_bytes
        };
        let (docs, more, held_jobs, held_origins) = py.detach(|| {
            let mut docs = VecDeque::new();
            let more = engine.poll_bounded(now_ms, bound, hold, |d| {
                let mut doc = d.json.to_string();
                doc.shrink_to_fit(); // serialising doubles the buffer as it grows
                let len = doc.len();
                docs.push_back(doc);
                len
            });
            let origins = engine.held_origins.iter().map(|o| o.to_string()).collect();
            (docs, more, std::mem::take(&mut engine.held_jobs), origins)
        });
        let waiting = docs.iter().map(String::len).sum();
        PyEncodedDiagnoses {
            docs,
            waiting,
            more,
            held_jobs,
            held_origins,
        }
    }

    /// Ends the input: every incident is diagnosed; JSON array.
    fn finish(&mut self, py: Python<'_>) -> Py<PyBytes> {
        let engine = &mut self.inner;
        let v = py.detach(|| diagnoses_json(engine.finish()));
        bytes(py, &v)
    }

    /// Adds a healthy run's log bytes to the comparison baseline (GIL released).
    fn add_baseline(&mut self, py: Python<'_>, data: &[u8]) {
        let engine = &mut self.inner;
        py.detach(|| engine.add_baseline(data));
    }

    /// Names of the jobs the engine currently holds state for.
    fn jobs(&self) -> Vec<String> {
        let mut v = self.inner.job_names();
        v.sort();
        v
    }

    fn drop_job(&mut self, job: &str) {
        self.inner.drop_job(job);
    }

    /// The engine's counters as JSON. `memory_bytes` is kept as the engine goes; with
    /// `breakdown` it is also counted from scratch by part (`memory_breakdown`: a walk over
    /// every hit and line of every job, too slow for a caller that asks on every batch).
    #[pyo3(signature = (breakdown = true))]
    fn stats_json(&self, py: Python<'_>, breakdown: bool) -> Py<PyBytes> {
        let s = &self.inner.stats;
        let cat = self.inner.catalog();
        let by_sig: serde_json::Map<String, Value> = s
            .hits_by_signature
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| (cat.signatures[k].id.clone(), json!(v)))
            .collect();
        let mut v = json!({
            "lines": s.lines, "bytes": s.bytes, "blank_lines": s.blank_lines,
            "truncated_lines": s.truncated_lines, "invalid_utf8_lines": s.invalid_utf8_lines,
            "signature_hits": s.signature_hits, "hits_by_signature": by_sig,
            "unclassified_errors": s.unclassified_errors, "dropped_hits": s.dropped_hits,
            "jobs": self.inner.job_count(), "incidents": self.inner.incident_count(),
            "jobs_evicted": s.jobs_evicted, "jobs_released": s.jobs_released,
            "ring_shrinks": s.ring_shrinks,
            "compacted_hits": s.compacted_hits, "sources_capped": s.sources_capped,
            "ts_ahead_clamped": s.ts_ahead_clamped,
            "ras_reports_over_cap": s.ras_reports_over_cap,
            "diagnoses_emitted": s.diagnoses_emitted, "memory_bytes": s.memory_bytes,
            "peak_memory_bytes": s.peak_memory_bytes,
            "memory_budget_bytes": self.inner.cfg.memory_budget_bytes,
            "records": s.records,
            "rejected": s.rejected,
        });
        if breakdown {
            let b = self.inner.memory_breakdown();
            v["memory_breakdown"] = json!({"rings": b[0], "hits": b[1], "snapshots": b[2],
                "context": b[3], "sources": b[4], "streams": b[5], "other": b[6]});
        }
        bytes(py, &v)
    }
}

#[pyfunction]
fn hyperscan_version() -> String {
    rankwatch_core::matcher::library_version()
}

/// The core's allocator. The engine allocates and frees many small blocks (ring blocks, line
/// texts, piece buffers handed between threads), often on another thread than the one that
/// allocated them; mimalloc handles that pattern with less work than glibc's malloc, and can
/// back its memory with huge pages (`prefer_huge_pages`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Backs the core's memory allocated from now on with transparent huge pages where the kernel
/// offers them. For `analyze`, which holds a whole job's lines at once: the kernel's work to
/// fault in and zero fresh 4 KiB pages was a third of its main thread's time. Not for the
/// daemon, whose resident memory should follow its budget closely.
#[pyfunction]
fn prefer_huge_pages() {
    // SAFETY: sets one of mimalloc's global options; no memory is touched.
    unsafe {
        libmimalloc_sys::mi_option_set_enabled(libmimalloc_sys::mi_option_large_os_pages, true)
    }
}

/// Returns the memory the core has freed to the operating system now, instead of after
/// mimalloc's purge delay: resident memory then shows what the engine still holds (a
/// measurement, a daemon that has just released jobs).
#[pyfunction]
fn release_free_memory() {
    // SAFETY: asks mimalloc to purge the pages it holds free; no live block is touched.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// mimalloc's `mi_option_purge_delay` (mimalloc.h: between `eager_commit_delay`, 14, and
/// `use_numa_nodes`, 16); libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays resident before mimalloc returns it to the OS. mimalloc 3
/// waits a second; a daemon that frees a batch's transient blocks many times a second then
/// holds them all, about 20 MiB above what it keeps on a 50 MiB budget (the 500k-rank memory
/// test). 10 ms is mimalloc 2's default. `MIMALLOC_PURGE_DELAY` still decides where it is set.
const PURGE_DELAY_MS: std::os::raw::c_long = 10;

fn purge_freed_memory_promptly() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's global options; no memory is touched.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    purge_freed_memory_promptly();
    m.add_class::<PyCatalog>()?;
    m.add_class::<PyEngine>()?;
    m.add_class::<PyDecoder>()?;
    m.add_class::<PyFeedProgress>()?;
    m.add_class::<PyEncodedDiagnoses>()?;
    m.add("CatalogError", m.py().get_type::<CatalogError>())?;
    m.add_function(wrap_pyfunction!(hyperscan_version, m)?)?;
    m.add_function(wrap_pyfunction!(prefer_huge_pages, m)?)?;
    m.add_function(wrap_pyfunction!(release_free_memory, m)?)?;
    fr::register(m)?;
    Ok(())
}
