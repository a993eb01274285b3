//! The apply stage: one decoded line updates its job (routing to a source, identity, time,
//! ring, signature hits and what they teach).

use super::lines::{Batch, Decoded, LineCounts, SigHit};
use super::{Engine, RouteCache, Stream, CAUSE_RECORD_LINES, SYMPTOM_RECORD_LINES};
use crate::catalog::Catalog;
use crate::catalog::{Role, Sync};
use crate::correlate;
use crate::fieldre::FieldSpan;
use crate::filetext::TextAt;
use crate::job::{ContextObs, Hit, Incident, Job, SourceKey, SyncObs, CONTEXT_FIELDS};
use crate::memsize;
use crate::prefix::{Level, Producer};
use crate::ring::Ring;

/// The fields one signature's regexes found in a line's message, read in place.
struct FieldView<'a> {
    catalog: &'a Catalog,
    sig: u16,
    msg: &'a str,
    spans: &'a [FieldSpan],
}

/// The values the apply stage learns from, found in one pass over a hit's spans (the first
/// span of a name wins). Asking the spans name by name cost a scan of them per name, about
/// a dozen names per context line.
#[derive(Default)]
struct Learned<'a> {
    cuda_dev: Option<&'a str>,
    bus_id: Option<&'a str>,
    rank: Option<&'a str>,
    nranks: Option<&'a str>,
    seq: Option<&'a str>,
    /// By position in `CONTEXT_FIELDS`.
    context: [Option<&'a str>; CONTEXT_FIELDS.len()],
}

impl<'a> FieldView<'a> {
    fn learned(&self) -> Learned<'a> {
        let mut l = Learned::default();
        for s in self.spans {
            let slot = match self.catalog.field_name(self.sig, s) {
                "cuda_dev" => &mut l.cuda_dev,
                "bus_id" => &mut l.bus_id,
                "rank" => &mut l.rank,
                "nranks" => &mut l.nranks,
                "seq" => &mut l.seq,
                name => match CONTEXT_FIELDS.iter().position(|f| *f == name) {
                    Some(i) => &mut l.context[i],
                    None => continue,
                },
            };
            if slot.is_none() {
                *slot = Some(&self.msg[s.range()]);
            }
        }
        l
    }

    fn to_pairs(&self) -> Vec<(String, String)> {
        self.catalog
            .field_pairs(self.sig, self.msg, self.spans)
            .collect()
    }
}

/// Where a line sits: its job sequence number, its number in its stream, its time.
#[derive(Clone, Copy)]
struct LineAt {
    seq: u64,
    line_no: u64,
    ts: Option<i64>,
    exact: bool,
}

impl Engine {
    /// Applies a decoded batch of `st`'s lines to `job`, in order. `chunk` holds the bytes the
    /// batch was decoded from.
    pub(super) fn apply_batch(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        chunk: &[u8],
        batch: &mut Batch,
    ) {
        self.count_lines(batch.counts);
        let all = 0..batch.lines.len();
        self.apply_lines(job, st, chunk, batch, all);
    }

    /// Adds the line stage's counters to the stats.
    pub(super) fn count_lines(&mut self, c: LineCounts) {
        self.stats.bytes += c.bytes;
        self.stats.blank_lines += c.blank;
        self.stats.truncated_lines += c.truncated;
        self.stats.invalid_utf8_lines += c.invalid_utf8;
    }

    /// Applies `batch.lines[range]`, all of `st`'s, to `job`, in order (their counters are
    /// the caller's to add).
    pub(super) fn apply_lines(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        chunk: &[u8],
        batch: &mut Batch,
        range: std::ops::Range<usize>,
    ) {
        let (text, lines, hits, fields) = batch.parts(chunk);
        // One reference for the batch: cloning it per line made the apply thread bounce the
        // catalog's first cache line (the reference count) with the decoding threads.
        let catalog = self.catalog.clone();
        for d in &lines[range] {
            let line = text(d);
            let found = (&*catalog, &hits[Batch::hits_of(d)], fields);
            self.apply_line(job, st, line, d, found);
        }
    }

    /// One decoded line updates its job: source, identity, time, record, ring, hits.
    fn apply_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        line: &str,
        d: &Decoded,
        (catalog, sig_hits, field_spans): (&Catalog, &[SigHit], &[FieldSpan]),
    ) {
        let (meta, continuation, level) = (&d.meta, d.continuation, d.level);
        let (ingest_ms, event_ms, line_no) = (d.ingest_ms, d.event_ms, d.line_no);
        self.stats.lines += 1;
        job.seq += 1;
        let seq = job.seq;

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

        // Record tracking.
        if level >= Level::Error {
            job.failure_seen = true;
        }
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

        // Remember the line: by reference where it stays in its file, else a copy.
        {
            let caps = (job.ring_lines, self.cfg.ring_bytes);
            let s = &mut job.sources[src as usize];
            let before = s.ring.heap_bytes();
            let at = st
                .text_at
                .zip(d.chunk_start())
                .map(|(piece, start)| TextAt {
                    file: piece.file,
                    offset: piece.offset + start as u64,
                });
            match at {
                Some(at) => {
                    let line_at = (line.len(), at);
                    let texts = &self.file_texts;
                    s.ring
                        .push_at(seq, ts, continuation, line_at, texts, caps.0, caps.1)
                }
                None => s.ring.push(seq, ts, continuation, line, caps.0, caps.1),
            }
            job.content_bytes = (job.content_bytes + s.ring.heap_bytes()).saturating_sub(before);
        }

        // Classify (the line stage scanned it).
        let mut opened = false;
        if !sig_hits.is_empty() {
            let msg = meta.message(line);
            for sh in sig_hits {
                let sig = sh.sig;
                self.stats.signature_hits += 1;
                let by_sig = &mut self.stats.hits_by_signature;
                if by_sig.len() <= sig as usize {
                    by_sig.resize(catalog.signatures.len().max(sig as usize + 1), 0);
                }
                by_sig[sig as usize] += 1;
                let spec = &catalog.signatures[sig as usize];
                let is_hit = spec.role != Role::Context;
                opened |= is_hit;
                // Hits over the per-process cap are only counted: no fields, no copy.
                if is_hit && !self.admit(job, src, Some(sig), spec.role == Role::Cause) {
                    continue;
                }
                let fields = FieldView {
                    catalog,
                    sig,
                    msg,
                    spans: &field_spans[sh.fields.clone()],
                };
                let at = LineAt {
                    seq,
                    line_no,
                    ts,
                    exact,
                };
                self.learn_from_fields(job, src, sig, &fields, line, at, st);
                if is_hit {
                    // A cause that healthy runs print too counts only once the job fails.
                    let needs_failure = spec.only_with_failure;
                    let alone_fails = !needs_failure && !spec.only_across_hosts;
                    if (spec.role == Role::Cause && alone_fails) || level >= Level::Error {
                        job.failure_seen = true;
                    }
                    let hit = Hit {
                        sig: Some(sig),
                        warn_only: needs_failure,
                        source: src,
                        seq,
                        line_no,
                        ts_ms: ts,
                        ts_exact: exact,
                        ingest_ms,
                        text: line.to_string(),
                        origin: st.origin.clone(),
                        fields: fields.to_pairs(),
                        record: hit_record(
                            &job.sources[src as usize].ring,
                            (st.record_start, seq, line),
                            if spec.role == Role::Cause {
                                CAUSE_RECORD_LINES
                            } else {
                                SYMPTOM_RECORD_LINES
                            },
                        ),
                        last_error_text: d.last_error_text,
                    };
                    st.open_hit = Some(self.add_hit(job, hit, spec.role == Role::Cause));
                }
            }
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
                    line_no,
                    ts_ms: ts,
                    ts_exact: exact,
                    ingest_ms,
                    text: line.to_string(),
                    origin: st.origin.clone(),
                    fields: Vec::new(),
                    record: hit_record(
                        &job.sources[src as usize].ring,
                        (st.record_start, seq, line),
                        SYMPTOM_RECORD_LINES,
                    ),
                    last_error_text: d.last_error_text,
                };
                st.open_hit = Some(self.add_hit(job, hit, false));
            }
        }
        self.settle(job);
        if self.over_budget() {
            self.relieve_memory(job);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn learn_from_fields(
        &mut self,
        job: &mut Job,
        src: u32,
        sig: u16,
        fields: &FieldView<'_>,
        line: &str,
        at: LineAt,
        st: &Stream,
    ) {
        let LineAt {
            seq,
            line_no,
            ts,
            exact,
        } = at;
        let spec = &self.catalog.signatures[sig as usize];
        let got = fields.learned();
        if spec.role == Role::Context {
            if let Some(d) = got.cuda_dev.and_then(|v| v.parse::<u16>().ok()) {
                job.sources[src as usize].cuda_dev = Some(d);
            }
            if let Some(b) = got.bus_id {
                let b = b.trim_start_matches("0x").to_ascii_lowercase();
                let s = &mut job.sources[src as usize];
                let old = s.bus_id.as_ref().map_or(0, memsize::string);
                job.content_bytes = (job.content_bytes + memsize::string(&b)).saturating_sub(old);
                s.bus_id = Some(b);
            }
            if let (Some(r), Some(n)) = (
                got.rank.and_then(|v| v.parse::<u32>().ok()),
                got.nranks.and_then(|v| v.parse::<u32>().ok()),
            ) {
                job.learn_rank(src, r, n);
            }
            for (&f, v) in CONTEXT_FIELDS.iter().zip(got.context) {
                let Some(v) = v else { continue };
                if f == "socket_ifname" {
                    if job.socket_ifname_kept {
                        continue;
                    }
                    job.socket_ifname_kept = true;
                }
                // The host is looked up only for the one field that needs it.
                let ip_host = (f == "ip").then(|| job.source_host(src)).flatten();
                if let Some(h) = ip_host {
                    if !job.ip_host.contains_key(v) {
                        job.content_bytes += memsize::block(v.len());
                        job.ip_host.insert(v.to_string(), h);
                        job.tables_dirty = true;
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
                        line_no,
                        sig,
                    };
                    job.content_bytes += obs.heap_bytes();
                    match job.context.insert((f, src), obs) {
                        Some(old) => {
                            job.content_bytes = job.content_bytes.saturating_sub(old.heap_bytes())
                        }
                        None => job.tables_dirty = true,
                    }
                }
            }
        }
        // What the process says about itself (versions, network, settings).
        let ids: Vec<(&str, &str)> = fields
            .spans
            .iter()
            .map(|s| (fields.catalog.field_name(sig, s), &fields.msg[s.range()]))
            .filter(|(n, _)| crate::identity::IDENTITY_FIELDS.contains(n))
            .collect();
        // Under memory pressure the table stops growing (its comparisons then leave out
        // what was not recorded; see IdentityTable::dropped).
        if !ids.is_empty() && self.over_budget() {
            job.identity.dropped += 1;
        } else if !ids.is_empty() {
            let origin = st.origin.clone();
            // A context line states a value more plainly than a failure that mentions it.
            let specificity = match spec.role {
                Role::Context => spec.weight.saturating_add(101),
                _ => spec.weight.min(100),
            };
            crate::identity::learn(job, src, &ids, specificity, || ContextObs {
                value: String::new(),
                source: src,
                seq,
                ts_ms: ts,
                line: line.to_string(),
                origin: origin.clone(),
                line_no,
                sig,
            });
        }
        // Clock-sync points are kept per process; its host may only be learned later.
        if let (Some(sync), Some(t), true) = (spec.sync, ts, exact) {
            let key = match sync {
                Sync::Seq => got.seq.and_then(|v| v.parse::<u64>().ok()),
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
}

/// The lines of a hit's record (its first line at `start`, the hit's line at `seq`): the
/// hit's line alone when it starts its record, without reading it back from the ring (where
/// it may be kept by reference).
fn hit_record(ring: &Ring, (start, seq, line): (u64, u64, &str), max: usize) -> Vec<String> {
    if start == seq && max > 0 && ring.newest_is(seq) {
        return vec![line.to_string()];
    }
    ring.record_from(start, max)
        .into_iter()
        .map(|l| l.text)
        .collect()
}
