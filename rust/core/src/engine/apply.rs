//! The apply stage: one decoded line updates its job (routing to a source, identity, time,
//! ring, signature hits and what they teach).

use super::lines::{Batch, Decoded, LineCounts, SigHit};
use super::{Engine, NamedHosts, RouteCache, Stream, CAUSE_RECORD_LINES, SYMPTOM_RECORD_LINES};
use crate::announce::Claim;
use crate::catalog::Catalog;
use crate::catalog::{HostScope, Role, Severity, Sync};
use crate::correlate;
use crate::fieldre::FieldSpan;
use crate::filetext::TextAt;
use crate::job::{
    CallKind, CollCall, ContextObs, Hit, HostId, Job, LineIdentity, SharedGpu, SourceKey, Stack,
    StackFrame, SyncObs, CONTEXT_FIELDS, STACK_FRAMES_KEPT,
};
use crate::memsize;
use crate::p2p_links::P2pLink;
use crate::prefix::{Level, LineMeta, Producer};
use crate::ring::Ring;
use std::sync::Arc;

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
    op_count: Option<&'a str>,
    wrapper_seq: Option<&'a str>,
    comm_ptr: Option<&'a str>,
    comm_id: Option<&'a str>,
    stack_thread: Option<&'a str>,
    frame_func: Option<&'a str>,
    native_frame: Option<&'a str>,
    native_func: Option<&'a str>,
    announced_rank: Option<&'a str>,
    announced_world: Option<&'a str>,
    net_dev: Option<&'a str>,
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
                "op_count" => &mut l.op_count,
                "wrapper_seq" => &mut l.wrapper_seq,
                "comm_ptr" => &mut l.comm_ptr,
                "comm_id" => &mut l.comm_id,
                "stack_thread" => &mut l.stack_thread,
                "frame_func" => &mut l.frame_func,
                "native_frame" => &mut l.native_frame,
                "native_func" => &mut l.native_func,
                "announced_rank" => &mut l.announced_rank,
                "announced_world" => &mut l.announced_world,
                "net_dev" => &mut l.net_dev,
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

/// The finding a second claim of one rank opens.
const DOUBLE_CLAIM: &str = "rank_claimed_twice";
const TESTS_RAN_APART: &str = "nccl_tests_ran_apart";

/// Communicators remembered per process (a job creates a few: world, data and tensor
/// parallel groups; a process that creates thousands is not tracked past this).
const MAX_COMMS_PER_SOURCE: usize = 64;

/// Lines of other processes that may come between two frames of one stack (a console that
/// interleaves ranks).
const FRAME_GAP_LINES: u64 = 8;

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
        found: (&Catalog, &[SigHit], &[FieldSpan]),
    ) {
        self.stats.lines += 1;
        job.seq += 1;
        let host = line_host(job, st, line, &d.meta);
        let (src, capped) = self.route_line(job, st, d, host);
        // A line whose process is over the cap shares the stream's source with every process
        // beyond the cap: it teaches that source nothing, and its hits keep what it says.
        let beyond_cap = capped.then_some(LineIdentity {
            rank: d.meta.grank.or(st.hints.rank),
            host,
        });
        if !capped {
            learn_source_identity(job, st, src, &d.meta, host);
        }
        let placed = self.place_in_time(job, st, src, d);
        track_record(job, st, line, d, found.1, &self.catalog);
        self.remember_line(job, st, src, line, d, placed.at.ts);
        let line_ctx = LineCtx {
            src,
            placed,
            d,
            beyond_cap,
        };
        note_traceback_call(st, line, &line_ctx);
        let seen = self.classify(job, st, line, &line_ctx, found);
        self.capture_ras(job, src, line, d, (found.0, found.1));
        // A warning or worse that no signature recognises is still evidence; whether a
        // warning-only incident is a failure is decided from the job's outcome. The exception
        // of a traceback whose header opened no hit (it is not in view) is one of its own.
        let headless_exception = d.continuation
            && st.open_hit.is_none()
            && d.level >= Level::Error
            && crate::prefix::is_exception_line(d.meta.message(line));
        // Context the catalog calls informational keeps an error-level line from being an
        // unknown error; a warning stays a weak hit (a retry is an attempt of what fails next).
        let known = seen.opened || (seen.benign && d.level >= Level::Error);
        if !known && d.level >= Level::Warn && (!d.continuation || headless_exception) {
            self.note_unclassified(job, st, line, &line_ctx);
        }
        self.settle(job);
        if self.over_budget() {
            self.relieve_memory(job);
        }
    }

    /// Routes the line to a source and says whether that source is the stream's shared one
    /// for processes over the cap. Routes are cached per stream.
    fn route_line(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        d: &Decoded,
        host: Option<HostId>,
    ) -> (u32, bool) {
        let meta = &d.meta;
        let capped_before = self.stats.sources_capped;
        let src = if let Some(l) = meta.local_rank {
            self.route_local(job, st, l, (meta, host))
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
        } else if let (Some(p), Producer::Libfabric | Producer::Ucx) = (meta.pid, meta.producer) {
            // A second producer of the same process (libfabric and UCX write its pid): joined to the
            // NCCL process of that host and pid when the stream's host is known, else kept per
            // pid until its host is (`Job::source_host`).
            match host.or_else(|| job.stream_hosts.get(&st.origin).copied()) {
                Some(h) => self.route(job, SourceKey::HostPid(h, p), &st.origin),
                None => self.route(job, SourceKey::StreamPid(st.origin.clone(), p), &st.origin),
            }
        } else if d.continuation && st.last_source.is_some() {
            st.last_source.unwrap_or_default()
        } else {
            self.route(job, SourceKey::Stream(st.origin.clone()), &st.origin)
        };
        st.last_source = Some(src);
        // A continuation of an over-the-cap line is not routed, but is over the cap too.
        let capped = self.stats.sources_capped != capped_before
            || (job.lines_over_source_cap > 0 && job.is_overflow(src));
        (src, capped)
    }

    /// Places the line in time and moves the job's event or record time.
    ///
    /// Printed on the line is exact (the process's own clock); else, within a process the
    /// order of its stream decides, so the line follows its process's last printed time; else
    /// the time its record carries (a shipper's or the broker's: when the line was read, not
    /// printed), which is all a process that prints no time has. Where the stream does not
    /// keep the order (records spread over partitions and merged again), only the record's
    /// time can place such a line among its process's.
    fn place_in_time(&mut self, job: &mut Job, st: &Stream, src: u32, d: &Decoded) -> Placed {
        let (ingest_ms, event_ms) = (d.ingest_ms, d.event_ms);
        let last_printed = job.sources[src as usize].last_ts;
        let (ts, exact) = match (d.meta.ts_ms, last_printed, event_ms) {
            (Some(t), _, _) => (Some(t), true),
            (None, _, Some(t)) if !st.in_order => (Some(t), true),
            (None, Some(t), _) => (Some(t), false),
            (None, None, _) => (event_ms.or(ingest_ms), false),
        };
        match (ts, exact) {
            (Some(t), true) => {
                let s = &mut job.sources[src as usize];
                s.last_ts = Some(t);
                if s.first_ts.is_none() {
                    s.first_ts = Some(t);
                }
                let t = self.bounded_by_broker(t, ingest_ms);
                job.max_event_ms = Some(job.max_event_ms.map_or(t, |m| m.max(t)));
            }
            (Some(t), false) if last_printed.is_none() && event_ms.is_some() => {
                let t = self.bounded_by_broker(t, ingest_ms);
                job.max_record_ms = Some(job.max_record_ms.map_or(t, |m| m.max(t)));
            }
            _ => {}
        }
        Placed {
            at: LineAt {
                seq: job.seq,
                line_no: d.line_no,
                ts,
                exact,
            },
            from_record: !exact && last_printed.is_none() && ts.is_some(),
        }
    }

    /// Remembers the line in its source's ring: by reference where it stays in its file,
    /// else a copy.
    fn remember_line(
        &mut self,
        job: &mut Job,
        st: &Stream,
        src: u32,
        line: &str,
        d: &Decoded,
        ts: Option<i64>,
    ) {
        let (seq, continuation) = (job.seq, d.continuation);
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

    /// Turns the line stage's signature hits into what they teach and into hits; says whether
    /// any of them opens an incident (a cause or symptom, not context) and whether the catalog
    /// knows the line as bookkeeping.
    fn classify(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        line: &str,
        ctx: &LineCtx<'_>,
        (catalog, sig_hits, field_spans): (&Catalog, &[SigHit], &[FieldSpan]),
    ) -> Classified {
        let mut seen = Classified::default();
        if sig_hits.is_empty() {
            return seen;
        }
        let msg = ctx.d.meta.message(line);
        for sh in sig_hits {
            let sig = sh.sig;
            self.count_signature_hit(sig, catalog.signatures.len());
            let spec = &catalog.signatures[sig as usize];
            let is_hit = spec.role != Role::Context;
            let is_cause = spec.role == Role::Cause;
            seen.opened |= is_hit;
            seen.benign |= !is_hit && spec.severity == Severity::Info;
            if spec.fails_when_last || spec.fails_when_last_in_job {
                job.last_waits.insert(ctx.src, ctx.placed.at.seq);
            }
            if spec.clears {
                job.last_clearing.insert((ctx.src, sig), ctx.placed.at.seq);
            }
            // Hits over the per-process cap are only counted: no fields, no copy.
            if is_hit && !self.admit(job, ctx.src, Some(sig), is_cause) {
                continue;
            }
            let fields = FieldView {
                catalog,
                sig,
                msg,
                spans: &field_spans[sh.fields.clone()],
            };
            let claimed_twice =
                self.learn_from_fields(job, ctx.src, sig, &fields, line, ctx.placed.at, st);
            if claimed_twice {
                self.note_double_claim(job, st, line, ctx, &fields);
            }
            if !is_hit {
                continue;
            }
            // A cause that healthy runs print too counts only once the job fails. An NCCL
            // error-return trace fails its own incident, not the job: it may be a probe that
            // its process survives (correlate::shows_failure).
            let needs_failure = spec.only_with_failure;
            let alone_fails = !needs_failure
                && spec.host_scope == HostScope::Any
                && spec.cleared_by.is_empty()
                && spec.id != correlate::ERROR_RETURN;
            if is_cause && alone_fails {
                job.failure_seen = true;
            }
            let mut hit = new_hit(job, st, line, ctx, record_lines(is_cause));
            hit.sig = Some(sig);
            hit.warn_only = needs_failure;
            hit.fields = fields.to_pairs();
            if spec.id == correlate::IB_PORT_STATE {
                hit.fields.extend(self.port_of_state_line(job, ctx.src));
                // A capture saved per host (`node-3.ibstat.txt`) is that host's.
                job.sources[ctx.src as usize].host_from_name = true;
            }
            st.open_hit = Some(self.add_hit(job, hit, is_cause));
        }
        seen
    }

    /// The device and port of an InfiniBand tool's port-state line, from the lines its
    /// process printed before it (the line itself is the ring's newest).
    fn port_of_state_line(&self, job: &Job, src: u32) -> Vec<(String, String)> {
        let lines = job.sources[src as usize]
            .ring
            .before(job.seq, crate::ib_ports::LOOK_BACK_LINES);
        let year = self.cfg.default_year;
        let msgs: Vec<&str> = lines
            .iter()
            .map(|l| crate::prefix::peel(&l.text, year).message(&l.text))
            .collect();
        crate::ib_ports::device_and_port(msgs.into_iter())
    }

    /// A rank claimed a second time before its world was complete: a hit of the
    /// `rank_claimed_twice` finding on this line, naming the rank and the world.
    fn note_double_claim(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        line: &str,
        ctx: &LineCtx<'_>,
        fields: &FieldView<'_>,
    ) {
        // nccl-tests' own device list claims ranks in a world it does not size: a rank listed
        // twice there is a test binary each process ran on its own.
        let finding = match fields.learned().announced_world {
            Some(_) => DOUBLE_CLAIM,
            None => TESTS_RAN_APART,
        };
        let Some(sig) = self.catalog.index_of(finding) else {
            return;
        };
        let mut hit = new_hit(job, st, line, ctx, SYMPTOM_RECORD_LINES);
        hit.sig = Some(sig);
        hit.fields = fields.to_pairs();
        job.failure_seen = true;
        st.open_hit = Some(self.add_hit(job, hit, true));
    }

    fn count_signature_hit(&mut self, sig: u16, signatures: usize) {
        self.stats.signature_hits += 1;
        let by_sig = &mut self.stats.hits_by_signature;
        if by_sig.len() <= sig as usize {
            by_sig.resize(signatures.max(sig as usize + 1), 0);
        }
        by_sig[sig as usize] += 1;
    }

    /// Keeps a warning or error no signature recognised as an unclassified hit.
    fn note_unclassified(&mut self, job: &mut Job, st: &mut Stream, line: &str, ctx: &LineCtx) {
        self.stats.unclassified_errors += 1;
        // The per-process cap of admit() keeps the first two of these.
        if self.admit(job, ctx.src, None, false) {
            let mut hit = new_hit(job, st, line, ctx, SYMPTOM_RECORD_LINES);
            hit.warn_only = ctx.d.level < Level::Error;
            st.open_hit = Some(self.add_hit(job, hit, false));
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
    ) -> bool {
        let LineAt {
            seq,
            line_no,
            ts,
            exact,
        } = at;
        let spec = &self.catalog.signatures[sig as usize];
        let got = fields.learned();
        let mut claimed_twice = false;
        let shared_line = std::cell::OnceCell::<Arc<str>>::new();
        let shared = || shared_line.get_or_init(|| Arc::from(line)).clone();
        if spec.role == Role::Context {
            claimed_twice = note_announcement(job, src, &got, at).is_some();
            if spec.id == P2P_LINK_LINES && job.p2p_links.wants(src) {
                Self::learn_p2p_link(job, src, fields, line, at);
            }
            if INIT_PROGRESS_LINES.contains(&spec.id.as_str()) {
                job.sources[src as usize].init_seen_at = Some(seq);
            }
            if INIT_LINES.contains(&spec.id.as_str()) {
                if let Some(p) = got.comm_ptr {
                    job.content_bytes += job.p2p_links.note_comm(src, p);
                }
            }
            if let Some(d) = got.net_dev.and_then(|v| v.parse::<u32>().ok()) {
                let s = &mut job.sources[src as usize];
                s.net_devs_used |= 1u32.checked_shl(d).unwrap_or(0);
            }
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
                note_shared_gpu(job, src, r, &got, line, at);
                job.learn_rank(src, r, n);
            }
            if let (Some(n), Some(func)) = (got.native_frame, got.native_func) {
                Self::learn_native_frame(job, src, n, func, line, at);
            } else if got.stack_thread.is_some() || got.frame_func.is_some() {
                Self::learn_stack_line(job, src, fields, line, at);
            } else if got.op_count.is_some() || got.wrapper_seq.is_some() {
                Self::learn_coll_call(job, src, fields, line, at, st);
            } else if let (Some(p), Some(id)) = (got.comm_ptr, got.comm_id) {
                let s = &mut job.sources[src as usize];
                if s.comm_id(p).is_none() && s.comm_ids.len() < MAX_COMMS_PER_SOURCE {
                    let before = s.comm_ids_bytes();
                    s.comm_ids.push((p.to_string(), id.to_string()));
                    job.content_bytes =
                        (job.content_bytes + s.comm_ids_bytes()).saturating_sub(before);
                    job.table_lines_seen += 1;
                }
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
                        line: shared(),
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
                line: shared(),
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
        claimed_twice
    }

    /// A line of a stack dump: a main-thread header starts the process's stack afresh (a
    /// later dump replaces an earlier one); frames right after it are added to it.
    fn learn_stack_line(job: &mut Job, src: u32, fields: &FieldView<'_>, line: &str, at: LineAt) {
        let pairs = fields.to_pairs();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let s = &mut job.sources[src as usize];
        let before = s.stack.as_ref().map_or(0, Stack::heap_bytes);
        if get("stack_thread").is_some() {
            // py-spy names its threads: only the main one. faulthandler names none; its
            // `Current thread` (the one that was running) is printed first, so a later
            // unnamed thread of the same dump does not replace it.
            let name = get("thread_name");
            let current = line.contains("Current thread");
            let main = match name {
                Some(n) => n == "MainThread",
                None => {
                    current
                        || s.stack
                            .as_ref()
                            .is_none_or(|k| !k.open && at.seq > k.seq + 1)
                }
            };
            if main {
                s.stack = Some(Stack {
                    header: line.to_string(),
                    seq: at.seq,
                    ts_ms: at.ts,
                    frames: Vec::new(),
                    open: true,
                });
            } else if let Some(k) = s.stack.as_mut() {
                k.open = false;
            }
        } else if let (Some(k), Some(func)) = (s.stack.as_mut(), get("frame_func")) {
            let follows = at.seq <= k.frames.last().map_or(k.seq, |f| f.seq) + FRAME_GAP_LINES;
            if k.open && follows && k.frames.len() < STACK_FRAMES_KEPT {
                k.frames.push(StackFrame {
                    func: func.to_string(),
                    file: get("frame_file").unwrap_or("").to_string(),
                    seq: at.seq,
                    line_no: at.line_no,
                    text: line.to_string(),
                });
            } else if !follows {
                k.open = false;
            }
        }
        let after = s.stack.as_ref().map_or(0, Stack::heap_bytes);
        job.content_bytes = (job.content_bytes + after).saturating_sub(before);
        job.table_lines_seen += 1;
    }

    /// A frame of a native stack dump (gdb): see `native_stacks`.
    fn learn_native_frame(
        job: &mut Job,
        src: u32,
        number: &str,
        func: &str,
        line: &str,
        at: LineAt,
    ) {
        let Ok(number) = number.parse::<u32>() else {
            return;
        };
        let new = !job.native_stacks.contains_key(&src);
        let stack = job.native_stacks.entry(src).or_default();
        let before = stack.heap_bytes();
        stack.learn(number, func, || crate::native_stacks::Frame {
            seq: at.seq,
            line_no: at.line_no,
            ts_ms: at.ts,
            text: line.into(),
        });
        job.content_bytes = (job.content_bytes + stack.heap_bytes()).saturating_sub(before);
        job.tables_dirty |= new;
        job.table_lines_seen += 1;
    }

    /// Keeps a collective call (NCCL's trace, PyTorch's debug wrapper) in its process's short
    /// list of calls.
    fn learn_coll_call(
        job: &mut Job,
        src: u32,
        fields: &FieldView<'_>,
        line: &str,
        at: LineAt,
        st: &Stream,
    ) {
        let pairs = fields.to_pairs();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let Some(call) = stated_call(get, (line, at, &st.origin)) else {
            return;
        };
        let (after, before) = job.sources[src as usize].push_coll_call(call);
        job.content_bytes = (job.content_bytes + after).saturating_sub(before);
        job.table_lines_seen += 1;
    }

    /// Remembers a link within a node that NCCL printed (`p2p_links`).
    fn learn_p2p_link(job: &mut Job, src: u32, fields: &FieldView<'_>, line: &str, at: LineAt) {
        let Some((from, from_dev, to, to_dev)) = crate::p2p_links::parse(fields.msg) else {
            return;
        };
        let link = P2pLink {
            src,
            from,
            from_dev,
            to,
            to_dev,
            seq: at.seq,
            line_no: at.line_no,
            ts_ms: at.ts,
            line: line.into(),
        };
        if let Some(added) = job.p2p_links.push(link) {
            job.content_bytes += added;
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

    /// What a line's time `t` may move the job's event time to: `t`, unless it runs more
    /// than `max_ts_ahead_ms` ahead of the broker's time of its record, then the broker's
    /// time plus that (counted). The job's event time is the latest time seen, so one rank
    /// whose clock is ahead (a bad RTC, milliseconds sent as seconds) would otherwise close
    /// every incident of the job at once. The line keeps its own time: it orders the lines.
    fn bounded_by_broker(&mut self, t: i64, ingest_ms: Option<i64>) -> i64 {
        let Some(broker) = ingest_ms else {
            return t;
        };
        let limit = broker.saturating_add(self.cfg.max_ts_ahead_ms);
        if t <= limit {
            return t;
        }
        self.stats.ts_ahead_clamped += 1;
        limit
    }

    /// A stream that ends inside a Python traceback was cut before its exception: the
    /// innermost call in view is the last thing known to have failed. It names what the
    /// unclassified header's hit failed on when the traceback opened one with a line of its
    /// own (as its exception would have), else it is an unclassified error of its own, whose
    /// text is cut off: any line that says what failed outranks it (a cause, an earlier
    /// error). A record whose own line already says what failed keeps that line.
    /// Cases: OpenRLHF #271 (a weight broadcast, the excerpt ending at its frame), Lightning
    /// #1542 (a traceback header and frames, no exception).
    pub(super) fn close_cut_traceback(&mut self, job: &mut Job, st: &Stream, mut call: Hit) {
        match st.open_hit.and_then(|h| job.hits.get_mut(h)) {
            Some(h)
                if h.sig.is_none() && is_bare_traceback_header(&h.text, self.cfg.default_year) =>
            {
                let before = memsize::string(&h.text);
                h.text = std::mem::take(&mut call.text);
                h.line_no = call.line_no;
                job.content_bytes =
                    (job.content_bytes + memsize::string(&h.text)).saturating_sub(before);
            }
            Some(_) => {}
            None => {
                // No line of the stream came since: the record still starts where it did.
                call.record = hit_record(
                    &job.sources[call.source as usize].ring,
                    (st.record_start, call.seq, &call.text),
                    SYMPTOM_RECORD_LINES,
                );
                job.failure_seen = true;
                self.add_hit(job, call, false);
            }
        }
    }

    fn add_hit(&mut self, job: &mut Job, hit: Hit, is_cause: bool) -> usize {
        if is_cause && job.sources[hit.source as usize].snapshot.is_none() {
            let snap = job.sources[hit.source as usize]
                .ring
                .before(hit.seq, self.cfg.preceding_lines);
            job.content_bytes += crate::job::snapshot_bytes(&snap);
            job.sources[hit.source as usize].snapshot = Some(snap);
        }
        correlate::push_hit(job, hit, &self.catalog, &self.cfg, self.now_wall())
    }
}

/// Records the rank a process announced; returns the earlier claim of the same rank when this
/// one is a second claim (`crate::announce`).
fn note_announcement(job: &mut Job, src: u32, got: &Learned<'_>, at: LineAt) -> Option<Claim> {
    let num = |v: Option<&str>| v.and_then(|v| v.parse::<u32>().ok());
    let rank = num(got.announced_rank)?;
    job.tables_dirty = true;
    let claim = Claim {
        source: src,
        seq: at.seq,
        ts_ms: at.ts,
    };
    match num(got.announced_world) {
        Some(world) => job.announced.note(rank, world, claim),
        None => job.announced.note_unsized(rank, claim),
    }
}

/// What the catalog made of a line.
#[derive(Default)]
struct Classified {
    /// A cause or symptom matched: the line opens or joins an incident.
    opened: bool,
    /// Context the catalog calls informational matched (torch prints `Stack trace of the
    /// failed collective not found` at error level).
    benign: bool,
}

/// Where a line was placed in time, and whether that time is only its record's.
#[derive(Clone, Copy)]
struct Placed {
    at: LineAt,
    from_record: bool,
}

/// What the classify steps need to know of the line being applied.
struct LineCtx<'a> {
    src: u32,
    placed: Placed,
    d: &'a Decoded,
    beyond_cap: Option<LineIdentity>,
}

/// The host the line or its stream names, as the job's id. The stream's cache is tied to
/// this job instance (an evicted and recreated job starts afresh).
fn line_host(job: &mut Job, st: &mut Stream, line: &str, meta: &LineMeta) -> Option<HostId> {
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
    if let (Some(h), Some(_)) = (host, meta.host) {
        if matches!(meta.producer, Producer::Nccl | Producer::Libfabric) {
            note_stream_host(job, st, h);
        }
    }
    host
}

/// Fills what the source does not know yet of its host, pid, local and global rank.
fn learn_source_identity(
    job: &mut Job,
    st: &Stream,
    src: u32,
    meta: &LineMeta,
    host: Option<HostId>,
) {
    let s = &mut job.sources[src as usize];
    if s.host.is_none() && !matches!(meta.producer, Producer::Kernel | Producer::Syslog) {
        s.host = host;
    }
    if meta.producer == Producer::Nccl && s.pid.is_none() {
        s.pid = meta.pid;
    }
    if s.local_rank.is_none() {
        s.local_rank = meta.local_rank.or(st.hints.local_rank);
    }
    if s.rank.is_some() {
        return;
    }
    s.rank = meta.grank.or(st.hints.rank);
    if let Some(r) = s.rank {
        job.index_rank(src, r);
    }
}

/// Follows records across lines: a continuation joins the open hit's record (up to its cap),
/// any other line starts a record.
fn track_record(
    job: &mut Job,
    st: &mut Stream,
    line: &str,
    d: &Decoded,
    sig_hits: &[SigHit],
    catalog: &Catalog,
) {
    // A line healthy runs print too does not fail the job by its level (TensorFlow logs the
    // out-of-memory retries of its start-up reservation at E).
    let healthy_print = sig_hits
        .iter()
        .any(|h| catalog.signatures[h.sig as usize].only_with_failure);
    if d.level >= Level::Error && !healthy_print {
        job.failure_seen = true;
    }
    let unmatched = sig_hits.is_empty();
    if !d.continuation {
        st.record_start = job.seq;
        st.open_hit = None;
        return;
    }
    let Some(hit) = st.open_hit.and_then(|h| job.hits.get_mut(h)) else {
        return;
    };
    if (unmatched && names_the_exception(hit, d, line)) || names_the_dumped_error(hit, d, line) {
        let before = memsize::string(&hit.text);
        hit.text = line.to_string();
        hit.line_no = d.line_no;
        job.content_bytes = (job.content_bytes + memsize::string(&hit.text)).saturating_sub(before);
    }
    let is_cause = hit
        .sig
        .is_some_and(|s| catalog.signatures[s as usize].role == Role::Cause);
    if hit.record.len() < record_lines(is_cause) {
        let before = memsize::vec(&hit.record);
        let line = line.to_string();
        let added = memsize::string(&line);
        hit.record.push(line);
        job.content_bytes =
            (job.content_bytes + added + memsize::vec(&hit.record)).saturating_sub(before);
    }
}

/// Keeps, while a Python traceback waits for its exception, a hit of its innermost call (the
/// source line under its latest frame); any line but a frame or such a source line ends the
/// wait (the exception came, or the traceback was cut and other output followed). Its record
/// is read back only if the traceback turns out cut (`Engine::close_cut_traceback`): every
/// frame of every traceback passes here.
fn note_traceback_call(st: &mut Stream, line: &str, ctx: &LineCtx<'_>) {
    let d = ctx.d;
    if d.source_code {
        let repeated = st
            .cut_call
            .as_ref()
            .is_some_and(|kept| repeats_call(&kept.text, line));
        if !repeated {
            st.cut_call = Some(Box::new(bare_hit(st, line, ctx)));
        }
    } else if st.cut_call.is_some() && !super::lines::is_traceback_frame(d.meta.message(line)) {
        st.cut_call = None;
    }
}

/// Shorter source lines are too common to be read as a copy of a longer one.
const MIN_REPEATED_CALL: usize = 12;

/// Whether source line `line` repeats the call kept from the frame above, whole or cut short
/// (a generator expression's frame shows its enclosing line again; an excerpt that ends
/// mid-line leaves a prefix): the first is where the call was made, and whole.
fn repeats_call(kept: &str, line: &str) -> bool {
    let line = line.trim();
    line.len() >= MIN_REPEATED_CALL && kept.trim().starts_with(line)
}

const TRACEBACK_HEADER: &str = "Traceback (most recent call last):";

/// The header alone after the line's labels: text printed before it on the same line (a
/// logger's message, a progress bar the header ran into, peeled as a prefix but saying how far
/// the work got) says something of its own and stays the hit's line.
fn is_bare_traceback_header(text: &str, year: i32) -> bool {
    let meta = crate::prefix::peel(text, year);
    meta.message(text).trim() == TRACEBACK_HEADER && !text[..meta.msg_start].contains("%|")
}

fn ends_with_traceback_header(text: &str) -> bool {
    text.trim_end().ends_with(TRACEBACK_HEADER)
        || crate::prefix::is_ipython_traceback_header(text.trim_start())
}

/// Whether `line` is the exception that ends the traceback an unclassified hit opened with its
/// `Traceback (most recent call last):` header. The header says only that something failed;
/// the exception line says what, so it becomes the hit's line (the first exception of a
/// chain: the header's text is gone after it). Only for an exception no signature knows: one
/// that a signature knows is a hit of its own.
fn names_the_exception(hit: &Hit, d: &Decoded, line: &str) -> bool {
    hit.sig.is_none()
        && d.level >= Level::Error
        && ends_with_traceback_header(&hit.text)
        && crate::prefix::is_exception_line(d.meta.message(line))
}

/// Whether `line` is the `"message": "SomeError: …"` of the error file torchelastic's error
/// handler dumps under an unclassified `error_handler: {` line: the header says only that a
/// dump follows, the message what failed (whether or not a signature knows it; the inner
/// exception, where in view, is a hit of its own).
fn names_the_dumped_error(hit: &Hit, d: &Decoded, line: &str) -> bool {
    let header = hit.text.trim_end();
    hit.sig.is_none()
        && (header.ends_with("error_handler:{") || header.ends_with("error_handler: {"))
        && d.meta
            .message(line)
            .trim_start()
            .strip_prefix("\"message\": \"")
            .is_some_and(crate::prefix::is_exception_line)
}

/// The context signatures of NCCL's `Init START` and `Init COMPLETE` lines.
const INIT_LINES: [&str; 2] = ["nccl_init_start", "nccl_init_complete"];

/// Lines that show a process's init went on: besides the two above, each channel's transport
/// (NCCL 2.4-2.7 print no `Init COMPLETE`; pytorch#68893's topology probe `net.h:19 -> 2` was
/// followed by its rings).
const INIT_PROGRESS_LINES: [&str; 4] = [
    "nccl_init_start",
    "nccl_init_complete",
    "nccl_channel_transport",
    "nccl_channel_net",
];

/// NCCL's lines of a link within a node (`p2p_links`).
const P2P_LINK_LINES: &str = "nccl_channel_transport";

/// How many lines of its record a hit keeps.
fn record_lines(is_cause: bool) -> usize {
    if is_cause {
        CAUSE_RECORD_LINES
    } else {
        SYMPTOM_RECORD_LINES
    }
}

/// A hit of the line with no signature yet, its record read back up to `record_cap` lines.
fn new_hit(job: &Job, st: &Stream, line: &str, ctx: &LineCtx<'_>, record_cap: usize) -> Hit {
    let mut hit = bare_hit(st, line, ctx);
    hit.record = hit_record(
        &job.sources[ctx.src as usize].ring,
        (st.record_start, hit.seq, line),
        record_cap,
    );
    hit
}

/// A hit of the line with no signature and no record yet.
fn bare_hit(st: &Stream, line: &str, ctx: &LineCtx<'_>) -> Hit {
    let at = ctx.placed.at;
    Hit {
        sig: None,
        warn_only: false,
        source: ctx.src,
        seq: at.seq,
        line_no: at.line_no,
        ts_ms: at.ts,
        ts_exact: at.exact,
        ts_from_record: ctx.placed.from_record,
        ingest_ms: ctx.d.ingest_ms,
        text: line.to_string(),
        origin: st.origin.clone(),
        fields: Vec::new(),
        record: Vec::new(),
        last_error_text: ctx.d.last_error_text,
        beyond_cap: ctx.beyond_cap,
    }
}

/// Notes a host that a line of `st` named. The first is the stream's host; a second one
/// makes it a mixed stream (per-node files concatenated), which has no host of its own.
fn note_stream_host(job: &mut Job, st: &mut Stream, h: HostId) {
    let named = match st.cache.named_hosts {
        NamedHosts::None => {
            job.stream_hosts.entry(st.origin.clone()).or_insert(h);
            NamedHosts::One(h)
        }
        NamedHosts::One(x) if x != h => {
            job.stream_hosts.remove(&st.origin);
            NamedHosts::Several
        }
        NamedHosts::One(_) | NamedHosts::Several => return,
    };
    st.cache.named_hosts = named;
    job.tables_dirty = true;
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

/// A communicator's init line (rank, busId, commId) whose GPU another process of the same
/// communicator already stated with another rank: NCCL refuses two ranks on one GPU, and
/// whether its own `Duplicate GPU detected` WARN is in view or not, the job cannot run.
/// Kept once per job (tensorrt-llm#9263: two workers' `Init START` on busId 100000). It reads
/// the bus id this line already taught its source, as `learn_from_fields` normalised it.
fn note_shared_gpu(job: &mut Job, src: u32, rank: u32, got: &Learned<'_>, line: &str, at: LineAt) {
    let (Some(_), Some(comm_id)) = (got.bus_id, got.comm_id) else {
        return;
    };
    if job.shared_gpu.is_some() {
        return;
    }
    let (Some(host), Some(bus)) = (
        job.source_host(src),
        job.sources[src as usize].bus_id.clone(),
    ) else {
        return;
    };
    let Some(&other_rank) = job.by_host_bus.get(&(host, bus.clone())) else {
        return;
    };
    // The process's own rank in a bigger communicator is no other process: only then (rare)
    // are the sources looked through.
    let me = &job.sources[src as usize];
    if other_rank == rank || me.stated_rank() == Some(other_rank) {
        return;
    }
    let pid = me.pid;
    let same_comm = job.sources.iter().enumerate().any(|(o, other)| {
        o as u32 != src
            && other.pid != pid
            && other.stated_rank() == Some(other_rank)
            && other.bus_id.as_deref() == Some(bus.as_str())
            && other.comm_ids.iter().any(|(_, id)| id == comm_id)
    });
    if !same_comm {
        return;
    }
    job.shared_gpu = Some(SharedGpu {
        src,
        rank,
        other_rank,
        bus_id: bus,
        comm_id: comm_id.to_string(),
        text: line.to_string(),
        seq: at.seq,
        line_no: at.line_no,
        ts_ms: at.ts,
    });
    job.table_lines_seen += 1;
}

/// The call a COLL trace or debug-wrapper line states, from its fields (`get`), at the line's
/// place in the job.
fn stated_call<'a>(
    get: impl Fn(&str) -> Option<&'a str>,
    (line, at, origin): (&str, LineAt, &std::sync::Arc<str>),
) -> Option<CollCall> {
    let num = |k: &str| get(k).and_then(|v| v.parse::<u64>().ok());
    let op = get("coll_op")?.to_string();
    let blank = |kind, op_count| CollCall {
        kind,
        op,
        op_count,
        count: 0,
        datatype: 0,
        redop: 0,
        root: 0,
        nranks: 0,
        comm: String::new(),
        seq: at.seq,
        line_no: at.line_no,
        ts_ms: at.ts,
        line: line.to_string(),
        origin: origin.clone(),
    };
    if let Some(seq) = num("wrapper_seq") {
        let shape = get("tensor_shape");
        let tensors = shape.is_some();
        let mut call = blank(CallKind::TorchWrapper { tensors }, seq);
        call.count = shape.map_or(0, shape_numel);
        call.datatype = get("dtype_name").map_or(u32::MAX, torch_dtype_as_nccl);
        return Some(call);
    }
    let op_count = get("op_count").and_then(|v| u64::from_str_radix(v, 16).ok())?;
    let mut call = blank(CallKind::NcclTrace, op_count);
    call.count = num("count").unwrap_or(0);
    call.datatype = num("datatype").unwrap_or(0) as u32;
    call.redop = num("redop").unwrap_or(0) as u32;
    call.root = get("root").and_then(|v| v.parse().ok()).unwrap_or(0);
    call.nranks = num("coll_nranks").unwrap_or(0) as u32;
    call.comm = get("comm_ptr").unwrap_or("").to_string();
    Some(call)
}

/// Elements of a tensor of the printed shape (`73`, `4, 1024`; an empty shape is a scalar).
fn shape_numel(shape: &str) -> u64 {
    shape
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| d.parse::<u64>().unwrap_or(0))
        .product()
}

/// The NCCL datatype number PyTorch sends a dtype as (ProcessGroupNCCL's mapping), so the
/// wrapper's statements compare and read like NCCL's traces; `u32::MAX` for other dtypes.
fn torch_dtype_as_nccl(name: &str) -> u32 {
    match name {
        "Char" => 0,
        "Byte" | "Bool" => 1,
        "Int" => 2,
        "Long" => 4,
        "Half" => 6,
        "Float" => 7,
        "Double" => 8,
        "BFloat16" => 9,
        _ => u32::MAX,
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{
        diagnose_records, diagnose_untimed, engine_with_records, feed_records,
    };
    use crate::prefix::peel;

    const WATCHDOG: &str = "[default3]:[rank43]:[E1130 12:12:12.536201443 \
        ProcessGroupNCCL.cpp:2070] [PG ID 0 PG GUID 0(default_pg) Rank 43] Process group \
        watchdog thread terminated with exception: [Rank 43] Watchdog caught collective \
        operation timeout: WorkNCCL(SeqNum=113, OpType=ALLREDUCE, NumelIn=6553600, \
        NumelOut=6553600, Timeout(ms)=600000) ran for 600018 milliseconds before timing out.";
    const TERMINATE: &str =
        "[default3]:terminate called after throwing an instance of 'c10::DistBackendError'";
    const WHAT: &str = "[default3]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 43] Process \
        group watchdog thread terminated with exception: [Rank 43] Watchdog caught collective \
        operation timeout: WorkNCCL(SeqNum=113, OpType=ALLREDUCE, NumelIn=6553600, \
        NumelOut=6553600, Timeout(ms)=600000) ran for 600018 milliseconds before timing out.";

    fn printed_ms(line: &str) -> i64 {
        peel(line, 2026).ts_ms.unwrap()
    }

    fn root(d: &[crate::Diagnosis]) -> (&str, usize) {
        (d[0].json["root_cause"]["line"].as_str().unwrap(), d.len())
    }

    #[test]
    fn a_stream_whose_nccl_lines_name_two_hosts_has_no_host_of_its_own() {
        // Two nodes' consoles in one file. The second node's agent names its killed worker by
        // pid: that pid is looked up on the node that ran it, not on the file's first host.
        let node = |host: &str, rank: u32, pid: u32| {
            format!(
                "[default0]:{host}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 12080\n\
                 [default0]:[rank{rank}]: step 1 loss 2.5\n"
            )
        };
        let killed = "E1130 12:00:43.438000 39028 torch/distributed/elastic/multiprocessing/\
            api.py:869] failed (exitcode: -9) local_rank: 0 (pid: 4200) of binary: /usr/bin/python3";
        let text = format!(
            "{}{}{killed}\n",
            node("node-1", 0, 4000),
            node("node-2", 1, 4200)
        );
        let d = diagnose_untimed(&text);
        let rc = &d[0].json["root_cause"];
        assert_eq!(
            (rc["rank"].as_u64(), rc["host"].as_str()),
            (Some(1), Some("node-2"))
        );
    }

    #[test]
    fn a_record_time_does_not_put_a_line_before_its_process_printed_one() {
        // The watchdog line printed its time; torch repeats it in `what():`, which prints
        // none. The records carry an aggregator's time that runs 3 s behind the host: the
        // repeat's record says it came first, the stream says it came after.
        let t = printed_ms(WATCHDOG);
        let behind = |ms: i64| Some(ms - 3_000);
        let records = [
            ("node-006.log", WATCHDOG, behind(t + 400), t + 400),
            ("node-006.log", TERMINATE, behind(t + 400), t + 400),
            ("node-006.log", WHAT, behind(t + 400), t + 400),
        ];
        let files = diagnose_untimed(&format!("{WATCHDOG}\n{TERMINATE}\n{WHAT}\n"));
        assert_eq!(root(&files), (WATCHDOG, 1));
        assert_eq!(root(&diagnose_records(&records)), (WATCHDOG, 1));
    }

    #[test]
    fn records_read_long_after_the_lines_neither_split_nor_finalize_the_incident() {
        // A shipper that reads the logs a day later (from the head of the file) stamps every
        // record with that day: the lines that print no time take their process's printed
        // time, so the watermark stays on the printed clock and the job's one incident stays
        // open until its event time has moved on.
        let t = printed_ms(WATCHDOG);
        let day = 86_400_000;
        let first = "[default3]:node-006:5120:5188 [3] misc/socket.cc:47 NCCL WARN Net : \
            Connection closed by remote peer 10.20.0.9<52716>";
        let records = [
            ("node-006.log", first, Some(t + day), t + day),
            ("node-006.log", WATCHDOG, Some(t + day), t + day),
            ("node-006.log", TERMINATE, Some(t + day + 1), t + day + 1),
            ("node-006.log", WHAT, Some(t + day + 1), t + day + 1),
        ];
        let mut e = engine_with_records(&records);
        let polled = e.poll(1);
        assert!(polled.iter().all(|d| !d.is_final), "{polled:?}");
        let files = diagnose_untimed(&format!("{first}\n{WATCHDOG}\n{TERMINATE}\n{WHAT}\n"));
        let fed = e.finish();
        let last = if fed.is_empty() { &polled } else { &fed };
        assert_eq!(root(last), root(&files));
    }

    #[test]
    fn a_rank_whose_clock_runs_ahead_cannot_close_its_jobs_incident() {
        // Rank 7's record says it is 25 minutes later than the broker knows it is. The job's
        // event time must not jump past the incident's horizon on its word: the root cause
        // that a slow shipper delivers 15 s later still updates the diagnosis.
        let t = 1_764_504_000_000;
        let aborted = "RuntimeError: NCCL communicator was aborted on rank 0.";
        let ib = "node-3:3110:3190 [2] NCCL WARN NET/IB : mlx5_2:1 Got async event : port error";
        let first = [
            ("rank-0", aborted, Some(t + 5_000), t + 5_000),
            ("rank-1", aborted, Some(t + 5_000), t + 5_000),
            (
                "rank-7",
                "step 812 loss 2.01",
                Some(t + 25 * 60_000),
                t + 5_100,
            ),
        ];
        let mut e = engine_with_records(&first);
        assert_eq!(e.stats.ts_ahead_clamped, 1);
        let polled = e.poll(t + 40_000);
        assert!(polled.iter().all(|d| !d.is_final), "{polled:?}");
        feed_records(&mut e, &[("rank-2", ib, Some(t + 1_000), t + 20_000)]);
        let updated = e.finish();
        assert_eq!(root(&updated).0, ib);
    }

    #[test]
    fn a_process_that_prints_no_time_is_placed_by_its_records_times() {
        // Two processes print NCCL warnings without times. Rank 5's line reached the broker
        // last, but its shipper read it 2 s earlier: across processes, event time decides.
        let early = "node-2:5120:5188 [5] misc/socket.cc:47 NCCL WARN Net : Connection closed \
            by remote peer 10.0.0.9<52716>";
        let late = "node-1:4120:4188 [1] misc/socket.cc:47 NCCL WARN Net : Connection closed \
            by remote peer 10.0.0.8<52716>";
        let t = 1_764_504_000_000;
        let records = [
            ("rank-1.log", late, Some(t + 2_000), t + 2_100),
            ("rank-5.log", early, Some(t), t + 4_000),
        ];
        let d = diagnose_records(&records);
        assert_eq!(root(&d), (early, 1));
        // The records' times are the job's event time: past the settle window, it is due.
        let more = [
            ("rank-1.log", late, Some(t + 2_000), t + 2_100),
            ("rank-5.log", early, Some(t), t + 4_000),
            (
                "rank-1.log",
                "node-1:4120:4120 [1] NCCL INFO still here",
                Some(t + 60_000),
                t + 60_000,
            ),
        ];
        let mut e = engine_with_records(&more);
        let polled = e.poll(1);
        assert_eq!(root(&polled), (early, 1));
    }
}

#[cfg(test)]
mod cut_traceback_tests {
    use crate::correlate::testkit::{diagnose_untimed, root_line};

    const FRAMES: &str = " File \"/opt/app/trainer/sync.py\", line 88, in push_weights\n    \
        self._publish()\n  File \"/opt/app/trainer/sync.py\", line 131, in _publish\n    \
        dist.broadcast(tensor, src=0, group=self.sync_group)\n";
    const INNERMOST: &str = "    dist.broadcast(tensor, src=0, group=self.sync_group)";

    #[test]
    fn frames_that_end_the_file_name_their_innermost_call() {
        let d = diagnose_untimed(&format!("step 40 loss 1.25\n{FRAMES}"));
        assert_eq!((root_line(&d).as_str(), d.len()), (INNERMOST, 1));
    }

    #[test]
    fn a_call_repeated_by_the_next_frame_is_named_where_first_printed() {
        let line = "    env = \", \".join(f\"{k} = {os.environ[k]}\" for k in KEYS)";
        let frames = format!(
            "  File \"/opt/app/env.py\", line 31, in setup\n{line}\n  File \
             \"/opt/app/env.py\", line 31, in <genexpr>\n"
        );
        // The excerpt ends inside the repeat, or holds all of it.
        let cut = format!("{frames}{}", &line[..40]);
        assert_eq!(root_line(&diagnose_untimed(&cut)), line);
        let whole = format!("{frames}{line}\n");
        assert_eq!(root_line(&diagnose_untimed(&whole)), line);
        // A different call under the next frame is the innermost one.
        let other = format!("{frames}    os.environ[k]\n");
        assert_eq!(root_line(&diagnose_untimed(&other)), "    os.environ[k]");
    }

    #[test]
    fn a_header_whose_exception_never_came_names_the_innermost_call() {
        let d = diagnose_untimed(&format!("Traceback (most recent call last):\n{FRAMES}"));
        assert_eq!(root_line(&d), INNERMOST);
    }

    #[test]
    fn a_header_glued_to_other_text_keeps_its_line() {
        // A progress bar ran into the header: the bar says how far the work got.
        let glued = "Packing samples:  91%|█████████ | 9100/10000 [29:51<02:57]Traceback (most \
            recent call last):";
        let d = diagnose_untimed(&format!("{glued}\n{FRAMES}"));
        assert_eq!(root_line(&d), glued);
    }

    #[test]
    fn the_exception_when_in_view_and_nothing_when_other_output_follows() {
        let whole =
            format!("Traceback (most recent call last):\n{FRAMES}OSError: [Errno 5] gone\n");
        assert_eq!(
            root_line(&diagnose_untimed(&whole)),
            "OSError: [Errno 5] gone"
        );
        // Frames a logger printed as a stack (no exception, the run went on): not a failure.
        let went_on = format!("{FRAMES}step 41 loss 1.24\n");
        assert!(diagnose_untimed(&went_on).is_empty());
    }

    #[test]
    fn an_error_that_says_what_failed_outranks_the_cut_call() {
        let error = "ERROR: worker 3 exited unexpectedly: shared memory exhausted";
        let d = diagnose_untimed(&format!(
            "{error}\nTraceback (most recent call last):\n{FRAMES}"
        ));
        assert_eq!(root_line(&d), error);
    }
}

#[cfg(test)]
mod double_claim_tests {
    use crate::correlate::testkit::{diagnose_untimed, root_line};

    #[test]
    fn a_rank_announced_twice_before_the_world_formed_is_the_root() {
        let d = diagnose_untimed(
            "GPU available: True, used: True\n\
             initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4\n\
             initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4\n\
             initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4\n\
             initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4\n",
        );
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(
            root_line(&d),
            "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4"
        );
    }

    #[test]
    fn every_rank_announced_once_is_no_diagnosis() {
        let d = diagnose_untimed(
            "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4\n\
             initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/4\n\
             initializing ddp: GLOBAL_RANK: 3, MEMBER: 4/4\n\
             initializing ddp: GLOBAL_RANK: 2, MEMBER: 3/4\n",
        );
        assert!(d.is_empty(), "{d:?}");
    }
}
