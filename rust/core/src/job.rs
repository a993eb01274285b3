//! Per-job state: the processes (sources) seen, their rings, identity maps (host+pid -> rank,
//! host+local rank -> rank, address -> host), context observations, clock-sync observations
//! and the signature hits that correlation works from.

use crate::memsize;
use crate::ring::{Ring, RingLine};
use std::collections::HashMap;
use std::sync::Arc;

/// The engine's and the jobs' tables are looked up once or more per line; SipHash was a
/// seventh of the daemon's cost per record. Job, host and source names come from the input,
/// so the hash is seeded at random per process (foldhash's `RandomState`): an input cannot
/// choose colliding names without knowing the seed.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

pub type HostId = u32;

/// How lines are routed to a source (one process, as far as the logs let us tell).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SourceKey {
    /// Given by the caller (a per-rank file, a torchrun log-dir folder, a record's rank).
    Hint(Arc<str>),
    /// `[defaultN]:` inside one stream (per-node console files).
    StreamLocal(Arc<str>, u16),
    /// `[rankN]:` global rank prefix in a mixed stream.
    Rank(u32),
    /// Every process beyond the job's source cap (their lines share one source).
    Overflow,
    /// NCCL `host:pid` in a mixed stream.
    HostPid(HostId, u32),
    /// Lines of a stream that carry no identity of their own (agent output, plain text).
    Stream(Arc<str>),
    /// A second producer's lines (libfabric's own log) of one pid in a stream whose host is
    /// not known yet: the host comes from the stream or the file's name (`Job::source_host`).
    StreamPid(Arc<str>, u32),
}

#[derive(Debug, Default)]
pub struct Source {
    pub origin: Arc<str>,
    pub host: Option<HostId>,
    pub pid: Option<u32>,
    pub local_rank: Option<u16>,
    /// Rank stated by a hint or a `[rankN]:` prefix.
    pub rank: Option<u32>,
    /// (rank, nranks) from the NCCL communicator init line with the largest nranks.
    pub init_rank: Option<(u32, u32)>,
    /// Where (job sequence number) this process last printed NCCL's `Init START`,
    /// `Init COMPLETE` or a channel's transport.
    pub init_seen_at: Option<u64>,
    pub cuda_dev: Option<u16>,
    pub bus_id: Option<String>,
    pub ring: Ring,
    pub first_ts: Option<i64>,
    pub last_ts: Option<i64>,
    /// Lines that preceded this source's first cause hit, kept when the hit happened.
    pub snapshot: Option<Vec<RingLine>>,
    /// The last collective calls NCCL traced for this process (`NCCL_DEBUG_SUBSYS=COLL`),
    /// oldest first, at most [`COLL_CALLS_KEPT`].
    pub coll_calls: Vec<CollCall>,
    /// (communicator pointer, communicator id) from this process's NCCL init lines: the id
    /// is the same on every rank of a communicator, the pointer is this process's own.
    pub comm_ids: Vec<(String, String)>,
    /// The last main-thread stack this process's log showed (py-spy, faulthandler).
    pub stack: Option<Stack>,
    /// A second producer's source (`SourceKey::StreamPid`) or a tool's capture (an `ibstat`
    /// port state): its host may come from its file's name.
    pub host_from_name: bool,
    /// The last NCCL RAS report this source printed, kept whole (`ras_capture`).
    pub ras_report: Option<Box<crate::ras_capture::Capture>>,
    /// The events of `ncclras -m` this source printed (`ras_monitor`).
    pub ras_monitor: Option<Box<crate::ras_monitor::Monitor>>,
    /// The network devices (`via NET/Socket/1`: bit 1) this process's channels use.
    pub net_devs_used: u32,
}

/// Frames kept per stack: the innermost ones say where the thread is.
pub const STACK_FRAMES_KEPT: usize = 48;

/// One thread's stack from a dump printed into the log, innermost frame first.
#[derive(Debug, Clone, Default)]
pub struct Stack {
    /// The dump's header line and where it sits.
    pub header: String,
    pub seq: u64,
    pub ts_ms: Option<i64>,
    pub frames: Vec<StackFrame>,
    /// Frames are still being added (the thread is the main one and no other line came).
    pub open: bool,
}

#[derive(Debug, Clone)]
pub struct StackFrame {
    pub func: String,
    pub file: String,
    pub seq: u64,
    pub line_no: u64,
    pub text: String,
}

impl Stack {
    pub fn heap_bytes(&self) -> usize {
        memsize::string(&self.header)
            + memsize::vec(&self.frames)
            + self
                .frames
                .iter()
                .map(|f| {
                    memsize::string(&f.func) + memsize::string(&f.file) + memsize::string(&f.text)
                })
                .sum::<usize>()
    }
}

/// Collective calls kept per process: a hang or mismatch is decided at the last few calls.
pub const COLL_CALLS_KEPT: usize = 8;

/// Who stated a collective call, which decides how its group is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// NCCL's COLL trace: a communicator pointer and size, a hex operation counter.
    NcclTrace,
    /// PyTorch's debug wrapper: the process group's sequence number; `tensors` is false for
    /// a collective without tensors (a barrier), whose count and dtype say nothing.
    TorchWrapper { tensors: bool },
}

/// One collective call as NCCL's trace or PyTorch's debug wrapper stated it on one process.
#[derive(Debug, Clone)]
pub struct CollCall {
    pub kind: CallKind,
    /// The operation as printed (`AllReduce`, `BROADCAST`, ...).
    pub op: String,
    /// The communicator's operation counter, or the wrapper's sequence number (the same call
    /// has the same number on every rank).
    pub op_count: u64,
    pub count: u64,
    pub datatype: u32,
    pub redop: u32,
    pub root: i64,
    pub nranks: u32,
    /// The communicator pointer as printed (this process's own).
    pub comm: String,
    pub seq: u64,
    pub line_no: u64,
    pub ts_ms: Option<i64>,
    pub line: String,
    pub origin: Arc<str>,
}

impl CollCall {
    pub fn heap_bytes(&self) -> usize {
        memsize::string(&self.op) + memsize::string(&self.line) + memsize::string(&self.comm)
    }
}

impl Source {
    /// Heap this source owns (its slot in the job's table is counted with the table).
    pub fn heap_bytes(&self) -> usize {
        self.ring.heap_bytes()
            + self.bus_id.as_ref().map_or(0, memsize::string)
            + self.snapshot.as_ref().map_or(0, snapshot_bytes)
            + self.coll_calls_bytes()
            + self.comm_ids_bytes()
            + self.stack.as_ref().map_or(0, Stack::heap_bytes)
            + self.ras_report.as_ref().map_or(0, |c| c.heap_bytes())
            + self.ras_monitor.as_ref().map_or(0, |m| m.heap_bytes())
    }

    pub fn comm_ids_bytes(&self) -> usize {
        memsize::vec(&self.comm_ids)
            + self
                .comm_ids
                .iter()
                .map(|(p, i)| memsize::string(p) + memsize::string(i))
                .sum::<usize>()
    }

    /// The id of the communicator this process knows by `ptr`, where its init line said.
    pub fn comm_id(&self, ptr: &str) -> Option<&str> {
        self.comm_ids
            .iter()
            .find(|(p, _)| p == ptr)
            .map(|(_, i)| i.as_str())
    }

    pub fn coll_calls_bytes(&self) -> usize {
        memsize::vec(&self.coll_calls)
            + self
                .coll_calls
                .iter()
                .map(CollCall::heap_bytes)
                .sum::<usize>()
    }

    /// Remembers a traced collective call, forgetting the oldest beyond the cap; returns the
    /// change in heap bytes as (added, removed).
    pub fn push_coll_call(&mut self, call: CollCall) -> (usize, usize) {
        let before = self.coll_calls_bytes();
        if self.coll_calls.len() >= COLL_CALLS_KEPT {
            self.coll_calls.remove(0);
        } else if self.coll_calls.capacity() == 0 {
            self.coll_calls.reserve_exact(COLL_CALLS_KEPT);
        }
        self.coll_calls.push(call);
        (self.coll_calls_bytes(), before)
    }

    pub fn stated_rank(&self) -> Option<u32> {
        self.rank.or(self.init_rank.map(|(r, _)| r))
    }
}

#[derive(Debug, Clone)]
pub struct Hit {
    /// Catalog signature index; `None` for a warning-or-worse line no signature matched.
    pub sig: Option<u16>,
    /// An unclassified line at WARN level: a failure only if the job shows one elsewhere.
    pub warn_only: bool,
    pub source: u32,
    pub seq: u64,
    pub line_no: u64,
    pub ts_ms: Option<i64>,
    /// The time was printed on this line (not carried from an earlier one).
    pub ts_exact: bool,
    /// The time is the one its record carried (a shipper's or the broker's): the line printed
    /// none and its process had printed none before it.
    pub ts_from_record: bool,
    pub ingest_ms: Option<i64>,
    pub text: String,
    pub origin: Arc<str>,
    pub fields: Vec<(String, String)>,
    /// The multi-line record this line belongs to: its start and continuation lines.
    pub record: Vec<String>,
    /// The line follows `Last error:` (see `Decoded::last_error_text`).
    pub last_error_text: bool,
    /// Who the line says printed it, for a line of a process beyond the job's source cap:
    /// such lines share one source, which knows no rank or host of its own.
    pub beyond_cap: Option<LineIdentity>,
}

/// The rank and host a line states about its process (its prefixes, or its stream's host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LineIdentity {
    pub rank: Option<u32>,
    pub host: Option<HostId>,
}

impl Hit {
    pub fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Heap this hit owns (its origin is shared with its stream).
    pub fn heap_bytes(&self) -> usize {
        memsize::string(&self.text)
            + memsize::vec(&self.fields)
            + self
                .fields
                .iter()
                .map(|(k, v)| memsize::string(k) + memsize::string(v))
                .sum::<usize>()
            + memsize::vec(&self.record)
            + self.record.iter().map(memsize::string).sum::<usize>()
    }

    /// What the hit takes once a job keeps it: its box and what it owns.
    pub fn kept_bytes(&self) -> usize {
        memsize::block(std::mem::size_of::<Hit>()) + self.heap_bytes()
    }
}

/// Heap of a copy of ring lines (a snapshot of what preceded a cause).
pub fn snapshot_bytes(lines: &Vec<RingLine>) -> usize {
    memsize::vec(lines)
        + lines
            .iter()
            .map(|l| memsize::string(&l.text))
            .sum::<usize>()
}

/// First observation of a context field on a host, with the line that showed it.
#[derive(Debug, Clone)]
pub struct ContextObs {
    pub value: String,
    pub source: u32,
    pub seq: u64,
    pub ts_ms: Option<i64>,
    /// The line, shared by every observation made from it (one line may state several
    /// fields; each used to hold its own copy).
    pub line: Arc<str>,
    pub origin: Arc<str>,
    pub line_no: u64,
    pub sig: u16,
}

impl ContextObs {
    pub fn heap_bytes(&self) -> usize {
        // Each observation is charged the line's bytes, as when each held its own copy: the
        // budget stays as it was (conservative now), and the count does not depend on what
        // else shares the line.
        memsize::string(&self.value) + memsize::block(self.line.len())
    }
}

#[derive(Debug, Clone, Copy)]
pub struct SyncObs {
    pub sig: u16,
    pub key: u64,
    pub source: u32,
    pub ts_ms: i64,
}

/// An incident as tracked while lines stream in. Its id is fixed when it opens.
#[derive(Debug, Clone)]
pub struct Incident {
    pub id: String,
    pub start_ms: Option<i64>,
    pub min_ms: Option<i64>,
    /// `start_ms`/`min_ms` are records' times (no line of the job had printed one yet): the
    /// first printed time replaces them.
    pub record_times: bool,
    /// `start_ms` is the time of a hit that shows a failure (not only a benign warning).
    pub anchored_on_failure: bool,
    pub opened_wall_ms: i64,
    pub hits: Vec<u32>,
    pub published_hash: Option<u64>,
    pub final_published: bool,
    /// (job input version, final?) when last diagnosed.
    pub diagnosed: Option<(usize, bool)>,
    /// Wall time of the last diagnosis (0: none yet, or none with a wall clock). While input
    /// keeps coming (a storm of thousands of ranks), an open incident is diagnosed again at
    /// most once per settle window of wall time, not on every poll.
    pub diagnosed_wall_ms: i64,
    /// Last diagnosed as no failure (only benign warnings in a job that shows no failure).
    pub dismissed: bool,
}

impl Incident {
    pub fn heap_bytes(&self) -> usize {
        memsize::string(&self.id) + memsize::vec(&self.hits)
    }
}

/// The second rank's init line of two ranks of one communicator on one GPU.
#[derive(Debug, Clone)]
pub struct SharedGpu {
    pub src: u32,
    pub rank: u32,
    pub other_rank: u32,
    pub bus_id: String,
    pub comm_id: String,
    pub text: String,
    pub seq: u64,
    pub line_no: u64,
    pub ts_ms: Option<i64>,
}

#[derive(Debug, Default)]
pub struct Job {
    pub name: String,
    /// A `socket_ifname` context observation is kept: one per job is all the rule reads, and
    /// one per process would grow the context table by a field for every rank.
    pub socket_ifname_kept: bool,
    pub hosts: Vec<String>,
    pub host_ids: FastMap<String, HostId>,
    /// Boxed: a job of thousands of processes grows this vector an eighth at a time, and
    /// each growth then copies pointers rather than whole sources.
    pub sources: Vec<Box<Source>>,
    pub source_keys: FastMap<SourceKey, u32>,
    pub stream_hosts: FastMap<Arc<str>, HostId>,
    pub by_host_pid: FastMap<(HostId, u32), u32>,
    pub by_host_local: FastMap<(HostId, u16), u32>,
    pub by_host_bus: FastMap<(HostId, String), u32>,
    pub ip_host: FastMap<String, HostId>,
    /// (field, source) -> the observation from the most specific signature (highest weight).
    pub context: FastMap<(&'static str, u32), ContextObs>,
    /// What each machine says about itself, compared across machines (`crate::identity`).
    pub identity: crate::identity::IdentityTable,
    /// The ranks processes announced at start-up (`crate::announce`).
    pub announced: crate::announce::Announced,
    pub sync: Vec<SyncObs>,
    /// Boxed: a job's hits grow to hundreds of thousands in a storm, and the vector grows by
    /// copying (`push_gently`); pointers copy a twenty-fifth of the bytes the hits would.
    pub hits: Vec<Box<Hit>>,
    pub hit_counts: FastMap<(u32, Option<u16>), u32>,
    /// Per process, where it last printed a wait marked `fails_when_last`, kept whether or not
    /// the hit itself was (a barrier prints its wait every few seconds, over the hit cap).
    pub last_waits: FastMap<u32, u64>,
    /// Per process and signature some cause is `cleared_by`, where the process last printed it.
    pub last_clearing: FastMap<(u32, u16), u64>,
    /// Per process that printed native stack frames, what its latest dump shows (`native_stacks`).
    pub native_stacks: FastMap<u32, crate::native_stacks::NativeStack>,
    /// Two ranks of one communicator that said they run on the same GPU of one host
    /// (`note_shared_gpu`): the first such pair, on the line of the second rank.
    pub shared_gpu: Option<SharedGpu>,
    /// No more input will come for this job: the end of `analyze`'s files, or a release after
    /// its sources went quiet (not an eviction, which only makes room).
    pub input_ended: bool,
    pub incidents: Vec<Incident>,
    pub max_nranks: u32,
    /// Some line showed a failure outcome: an error or worse, a cause signature.
    pub failure_seen: bool,
    pub seq: u64,
    /// Accounted bytes: `tables_bytes()` plus `content_bytes` when last settled by the engine.
    pub mem_bytes: usize,
    /// Heap owned by the entries of the job's tables (rings, hits, strings), kept up to date
    /// by the engine as they change; `heap_bytes()` recounts it from scratch.
    pub content_bytes: usize,
    /// `tables_bytes()` when last computed; recomputed when `tables_dirty`.
    pub tables_cache: usize,
    /// Some table may have grown since `tables_cache` was computed.
    pub tables_dirty: bool,
    /// Lines whose process was beyond the per-job source cap (routed to the overflow source).
    pub lines_over_source_cap: u64,
    pub last_activity: u64,
    /// The latest time printed on a line (event time, the hosts' clocks).
    pub max_event_ms: Option<i64>,
    /// The latest time a record gave a line that printed none, of a process that had printed
    /// none yet (ingest time: a shipper's or the broker's clock).
    pub max_record_ms: Option<i64>,
    pub last_wall_ms: i64,
    pub ring_lines: usize,
    /// Identifies this job instance (a job evicted and seen again is a new instance).
    pub epoch: u64,
    /// Hits before this index were already considered for compaction under memory pressure.
    pub compacted_upto: usize,
    /// Symptom hits per signature that kept their text through compaction.
    pub kept_text: FastMap<Option<u16>, u32>,
    /// Lines that fed the per-process tables (collective traces, communicator ids, stacks).
    pub table_lines_seen: usize,
    /// `table_lines_seen` when those tables were last checked for a failure no line states.
    pub table_lines_checked: usize,
    /// The last poll with `hold` left an incident of this job undiagnosed although its
    /// input changed (`correlate::diagnose_ready`): what was fed since its last diagnosis is
    /// not reflected in any published diagnosis yet.
    pub held: bool,
    /// The input origins (the daemon's `topic/partition`) whose records fed this job
    /// (`Engine::feed_records`): what a held diagnosis of it leaves unreflected is on them.
    pub fed_origins: Vec<Arc<str>>,
    /// The links within a node NCCL printed at init (`p2p_links`).
    pub p2p_links: crate::p2p_links::P2pLinks,
}

/// What a process says it uses, kept per process as context.
const USED_FIELDS: [&str; 7] = [
    "nccl_version",
    "cuda_driver",
    "iface",
    "ip",
    "ib_dev",
    "transport",
    "socket_ifname",
];
const SETTINGS: &[&str] = crate::catalog::SETTING_FIELDS;

/// The context fields kept per process: what it uses, then the settings a cause may blame.
pub const CONTEXT_FIELDS: [&str; USED_FIELDS.len() + SETTINGS.len()] = {
    let mut out = [""; USED_FIELDS.len() + SETTINGS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = if i < USED_FIELDS.len() {
            USED_FIELDS[i]
        } else {
            SETTINGS[i - USED_FIELDS.len()]
        };
        i += 1;
    }
    out
};

impl Job {
    /// Notes that a record from `origin` fed this job (`fed_origins`).
    pub fn note_origin(&mut self, origin: &str) {
        if self.fed_origins.last().is_some_and(|o| &**o == origin)
            || self.fed_origins.iter().any(|o| &**o == origin)
        {
            return;
        }
        self.fed_origins.push(Arc::from(origin));
    }

    pub fn new(name: &str, ring_lines: usize, epoch: u64) -> Job {
        Job {
            name: name.to_string(),
            ring_lines,
            epoch,
            tables_dirty: true,
            ..Default::default()
        }
    }

    /// Changes whenever something correlation reads was added (hits, processes, context,
    /// clock-sync points).
    pub fn input_version(&self) -> usize {
        self.hits.len()
            + self.sources.len()
            + self.context.len()
            + self.sync.len()
            + self.table_lines_seen
    }

    pub fn host_id(&mut self, name: &str) -> HostId {
        if let Some(&id) = self.host_ids.get(name) {
            return id;
        }
        let id = self.hosts.len() as HostId;
        let name = name.to_string();
        self.content_bytes += 2 * memsize::string(&name);
        self.tables_dirty = true;
        self.hosts.push(name.clone());
        self.host_ids.insert(name, id);
        id
    }

    /// The job's tables themselves (buckets and slots, not what their entries own): O(1).
    pub fn tables_bytes(&self) -> usize {
        use memsize::{map, string, vec};
        // The name twice: the job's own and the engine's key for it.
        2 * string(&self.name)
            + vec(&self.hosts)
            + map(&self.host_ids)
            + vec(&self.sources)
            + self.sources.len() * memsize::block(std::mem::size_of::<Source>())
            + map(&self.source_keys)
            + map(&self.stream_hosts)
            + map(&self.by_host_pid)
            + map(&self.by_host_local)
            + map(&self.by_host_bus)
            + map(&self.ip_host)
            + map(&self.context)
            + vec(&self.sync)
            + vec(&self.hits)
            + map(&self.hit_counts)
            + map(&self.last_waits)
            + map(&self.last_clearing)
            + map(&self.native_stacks)
            + vec(&self.incidents)
            + map(&self.kept_text)
            + self.identity.tables_bytes()
            + self.announced.tables_bytes()
    }

    /// Everything the job holds on the heap, counted from scratch (what `content_bytes` plus
    /// `tables_bytes()` must equal).
    pub fn heap_bytes(&self) -> usize {
        use memsize::string;
        let content = self.hosts.iter().map(string).sum::<usize>()
            + self.host_ids.keys().map(string).sum::<usize>()
            + self.sources.iter().map(|s| s.heap_bytes()).sum::<usize>()
            + self
                .by_host_bus
                .keys()
                .map(|(_, b)| string(b))
                .sum::<usize>()
            + self.ip_host.keys().map(string).sum::<usize>()
            + self
                .context
                .values()
                .map(ContextObs::heap_bytes)
                .sum::<usize>()
            + self.hits.iter().map(|h| h.kept_bytes()).sum::<usize>()
            + self
                .incidents
                .iter()
                .map(Incident::heap_bytes)
                .sum::<usize>()
            + self.identity.content_bytes()
            + self.p2p_links.heap_bytes()
            + self
                .native_stacks
                .values()
                .map(crate::native_stacks::NativeStack::heap_bytes)
                .sum::<usize>();
        self.tables_bytes() + content
    }

    pub fn source_for(&mut self, key: SourceKey, origin: &Arc<str>) -> u32 {
        if let Some(&i) = self.source_keys.get(&key) {
            return i;
        }
        let i = self.sources.len() as u32;
        let mut s = Source {
            origin: origin.clone(),
            ..Default::default()
        };
        match &key {
            SourceKey::Rank(r) => s.rank = Some(*r),
            SourceKey::HostPid(h, p) => {
                s.host = Some(*h);
                s.pid = Some(*p);
            }
            SourceKey::StreamLocal(_, l) => s.local_rank = Some(*l),
            SourceKey::StreamPid(_, p) => {
                s.pid = Some(*p);
                s.host_from_name = true;
            }
            _ => {}
        }
        crate::memsize::push_gently(&mut self.sources, Box::new(s));
        self.source_keys.insert(key, i);
        self.tables_dirty = true;
        i
    }

    /// The source shared by the processes beyond the job's source cap.
    pub fn is_overflow(&self, src: u32) -> bool {
        self.source_keys.get(&SourceKey::Overflow) == Some(&src)
    }

    /// The host a source runs on: its own, or the host seen elsewhere in its stream, or for a
    /// second producer's file (libfabric's log beside NCCL's) the host its file is named after.
    pub fn source_host(&self, src: u32) -> Option<HostId> {
        let s = &self.sources[src as usize];
        s.host
            .or_else(|| self.stream_hosts.get(&s.origin).copied())
            .or_else(|| {
                s.host_from_name
                    .then(|| self.host_named_in(&s.origin))
                    .flatten()
            })
    }

    /// The job's host whose name is a word of the file's name (`node-003.libfabric.log`,
    /// `libfabric-node-003.txt`, `node-003/fi.log`), as a whole word (`names_word`). The
    /// longest such name wins.
    pub fn host_named_in(&self, origin: &str) -> Option<HostId> {
        let mut best: Option<(usize, HostId)> = None;
        for (i, h) in self.hosts.iter().enumerate() {
            if h.is_empty() || best.is_some_and(|(n, _)| n >= h.len()) {
                continue;
            }
            if names_word(origin, h) {
                best = Some((h.len(), i as HostId));
            }
        }
        best.map(|(_, id)| id)
    }

    /// Best-known global rank of a source.
    pub fn source_rank(&self, src: u32) -> Option<u32> {
        let s = &self.sources[src as usize];
        if let Some(r) = s.stated_rank() {
            return Some(r);
        }
        let host = self.source_host(src)?;
        if let Some(pid) = s.pid {
            if let Some(&r) = self.by_host_pid.get(&(host, pid)) {
                return Some(r);
            }
        }
        if let Some(l) = s.local_rank {
            if let Some(&r) = self.by_host_local.get(&(host, l)) {
                return Some(r);
            }
        }
        None
    }

    /// Records what an identity-bearing line taught us about a source.
    pub fn learn_rank(&mut self, src: u32, rank: u32, nranks: u32) {
        if nranks < self.max_nranks {
            return;
        }
        self.max_nranks = nranks;
        let s = &mut self.sources[src as usize];
        if s.init_rank.is_none_or(|(_, n)| nranks >= n) {
            s.init_rank = Some((rank, nranks));
        }
        self.index_rank(src, rank);
    }

    pub fn index_rank(&mut self, src: u32, rank: u32) {
        self.tables_dirty = true;
        let host = self.source_host(src);
        let s = &self.sources[src as usize];
        if let Some(h) = host {
            if let Some(p) = s.pid {
                self.by_host_pid.insert((h, p), rank);
            }
            if let Some(l) = s.local_rank.or(s.cuda_dev) {
                self.by_host_local.insert((h, l), rank);
            }
            if let Some(b) = s.bus_id.clone() {
                let key_bytes = memsize::string(&b);
                if self.by_host_bus.insert((h, b), rank).is_none() {
                    self.content_bytes += key_bytes;
                }
            }
        }
    }

    /// Resolves a process named by pid (and optionally host and local rank) to a rank.
    pub fn rank_of_pid(&self, pid: u32, host: Option<HostId>, local: Option<u16>) -> Option<u32> {
        if let Some(h) = host {
            if let Some(&r) = self.by_host_pid.get(&(h, pid)) {
                return Some(r);
            }
            if let Some(l) = local {
                if let Some(&r) = self.by_host_local.get(&(h, l)) {
                    return Some(r);
                }
            }
        }
        let mut found: Option<u32> = None;
        for (&(h, p), &r) in &self.by_host_pid {
            if p != pid || host.is_some_and(|x| x != h) {
                continue;
            }
            if let Some(l) = local {
                if self.by_host_local.get(&(h, l)).is_some_and(|&lr| lr != r) {
                    continue;
                }
            }
            if found.is_some_and(|f| f != r) {
                return None;
            }
            found = Some(r);
        }
        found
    }

    /// All sources whose resolved rank is `rank`.
    pub fn sources_of_rank(&self, rank: u32) -> Vec<u32> {
        (0..self.sources.len() as u32)
            .filter(|&s| self.source_rank(s) == Some(rank))
            .collect()
    }
}

/// `name` occurs in `path` as a whole word: the bytes around it are the path's ends or not
/// letters or digits (`node-3.log`, `fi-node-3_x.log`, not `node-30.log`); where two hosts
/// fit (`node-3`, `node-3-2`), `Job::host_named_in` takes the longer.
fn names_word(path: &str, name: &str) -> bool {
    let b = path.as_bytes();
    let word = |c: u8| c.is_ascii_alphanumeric();
    path.match_indices(name).any(|(at, _)| {
        let end = at + name.len();
        (at == 0 || !word(b[at - 1])) && (end == b.len() || !word(b[end]))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_named_after_a_host_joins_it() {
        let mut job = Job::default();
        for h in ["node-3", "node-30", "ip-10-0-1-5"] {
            job.hosts.push(h.to_string());
        }
        assert_eq!(job.host_named_in("job/node-3.libfabric.log"), Some(0));
        assert_eq!(job.host_named_in("job/libfabric-node-30.txt"), Some(1));
        assert_eq!(job.host_named_in("job/node-3/fi.log"), Some(0));
        assert_eq!(job.host_named_in("logs/ip-10-0-1-5_libfabric.log"), Some(2));
        assert_eq!(job.host_named_in("logs/ip-10-0-1-5.fi.log"), Some(2));
        assert_eq!(job.host_named_in("job/node-300.log"), None);
        assert_eq!(job.host_named_in("job/libfabric.log"), None);
    }

    #[test]
    fn a_second_producer_takes_its_host_from_its_file_only() {
        let mut job = Job::default();
        job.hosts.push("node-3".to_string());
        let origin: Arc<str> = Arc::from("job/node-3.libfabric.log");
        let lf = job.source_for(SourceKey::StreamPid(origin.clone(), 3000), &origin);
        let plain = job.source_for(SourceKey::Stream(origin.clone()), &origin);
        assert_eq!(
            (job.source_host(lf), job.sources[lf as usize].pid),
            (Some(0), Some(3000))
        );
        assert_eq!(job.source_host(plain), None);
    }
}
