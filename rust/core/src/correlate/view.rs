//! A job as the rules see it during one correlation pass: every source resolved to its rank
//! and host once, skew-corrected times, and who a line is about or blames.

use super::clock::Offsets;
use super::util::{bdf_to_bus_id, parse_rank_list};
use crate::catalog::{Catalog, Signature};
use crate::config::Config;
use crate::job::{Hit, HostId, Job};
use std::collections::{BTreeSet, HashMap};

/// Ranks above the highest one a stall report names as ready that can be counted as missing
/// from it (the report does not give the world size; a job's largest communicator may be far
/// larger than the group that stalls).
const MAX_UNSEEN_RANKS: u32 = 64;

/// A process (by rank, or by source when its rank is unknown) or a whole host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Who {
    Rank(u32),
    Source(u32),
    Host(HostId),
}

/// Hits after a timeless one that `time_or_bound` looks through for a stamped line of its file.
const BOUND_LOOKAHEAD_HITS: usize = 256;

pub struct View<'a> {
    pub job: &'a Job,
    pub cat: &'a Catalog,
    pub cfg: &'a Config,
    pub offsets: &'a Offsets,
    ranks: Vec<Option<u32>>,
    hosts: Vec<Option<HostId>>,
    by_rank: HashMap<u32, Vec<u32>>,
    /// The hosts of ranks known only from their lines beyond the source cap.
    beyond_cap_hosts: HashMap<u32, HostId>,
}

impl<'a> View<'a> {
    pub fn new(job: &'a Job, cat: &'a Catalog, cfg: &'a Config, offsets: &'a Offsets) -> Self {
        let n = job.sources.len() as u32;
        let ranks: Vec<Option<u32>> = (0..n).map(|s| job.source_rank(s)).collect();
        let hosts: Vec<Option<HostId>> = (0..n).map(|s| job.source_host(s)).collect();
        let mut by_rank: HashMap<u32, Vec<u32>> = HashMap::new();
        for (s, r) in ranks.iter().enumerate() {
            if let Some(r) = r {
                by_rank.entry(*r).or_default().push(s as u32);
            }
        }
        View {
            job,
            cat,
            cfg,
            offsets,
            ranks,
            hosts,
            by_rank,
            beyond_cap_hosts: beyond_cap_hosts(job),
        }
    }

    /// The rank of a hit's printer: its source's, or what a line beyond the cap says.
    pub fn hit_rank(&self, h: &Hit) -> Option<u32> {
        h.beyond_cap
            .and_then(|i| i.rank)
            .or_else(|| self.rank_of(h.source))
    }

    /// The host of a hit's printer: its source's, or what a line beyond the cap says.
    pub fn hit_host(&self, h: &Hit) -> Option<HostId> {
        h.beyond_cap
            .and_then(|i| i.host)
            .or_else(|| self.host_of(h.source))
    }

    pub fn rank_of(&self, src: u32) -> Option<u32> {
        self.ranks[src as usize]
    }

    /// Who a process is on the board: its rank where known, else the process itself.
    pub fn process(&self, src: u32) -> Who {
        self.rank_of(src).map_or(Who::Source(src), Who::Rank)
    }

    pub fn host_of(&self, src: u32) -> Option<HostId> {
        self.hosts[src as usize]
    }

    pub fn sources_of(&self, rank: u32) -> Vec<u32> {
        self.by_rank.get(&rank).cloned().unwrap_or_default()
    }

    /// The sources behind a candidate.
    pub fn sources_of_who(&self, who: Who) -> Vec<u32> {
        match who {
            Who::Rank(r) => self.sources_of(r),
            Who::Source(s) => vec![s],
            Who::Host(_) => Vec::new(),
        }
    }

    pub fn host_name(&self, h: HostId) -> &'a str {
        &self.job.hosts[h as usize]
    }

    pub fn sig(&self, hit: &Hit) -> Option<&'a Signature> {
        hit.sig.map(|s| &self.cat.signatures[s as usize])
    }

    pub fn hit(&self, i: usize) -> &'a Hit {
        &self.job.hits[i]
    }

    pub fn corrected(&self, src: u32, ts: Option<i64>) -> Option<i64> {
        let t = ts?;
        let off = self
            .host_of(src)
            .and_then(|h| self.offsets.by_host.get(&h).copied())
            .unwrap_or(0);
        Some(t - off)
    }

    /// The hit's time on its process's clock: printed on it or carried from the process's
    /// last printed line. A record's time (when the line was read, on a shipper's or the
    /// broker's clock) stands in only for a process that prints no time at all: once its
    /// process printed one, the order of its stream places the line, as in a file.
    fn own_time(&self, h: &Hit) -> Option<i64> {
        match (h.ts_from_record, self.first_ts(h.source)) {
            (true, Some(_)) => None,
            _ => h.ts_ms,
        }
    }

    fn first_ts(&self, src: u32) -> Option<i64> {
        self.job.sources.get(src as usize).and_then(|s| s.first_ts)
    }

    pub fn hit_time(&self, h: &Hit) -> Option<i64> {
        self.corrected(h.source, self.own_time(h))
    }

    /// A hit's skew-corrected time or, for a line without one, a time it happened no later
    /// than: that of the first later hit of its file that has a time (a pasted excerpt whose
    /// first line lost its header, a wrapped line's tail). Arrival order then keeps it ahead
    /// of that line, instead of behind every timed line of the job.
    pub fn time_or_bound(&self, i: usize) -> Option<i64> {
        let h = self.hit(i);
        self.hit_time(h).or_else(|| {
            // A bounded look: a job with thousands of timeless candidates (files without
            // times) must not scan all its hits for each.
            let later = self
                .job
                .hits
                .get(i + 1..)?
                .iter()
                .take(BOUND_LOOKAHEAD_HITS);
            let next = later
                .filter(|n| n.origin == h.origin)
                .find_map(|n| Some((n.source, self.own_time(n)?)))?;
            self.corrected(next.0, Some(next.1))
        })
    }

    /// Order of two hits: skew-corrected time, then arrival order (unknown times last). A line
    /// with no time of its own that came before the first timed line of its source (an excerpt
    /// whose first header lost its date, a record read before its process printed a time)
    /// happened no later than that line, so it takes that time and arrival order keeps it
    /// first.
    pub fn order_key(&self, i: usize) -> (i64, u64) {
        let h = self.hit(i);
        let t = self.own_time(h).or_else(|| self.first_ts(h.source));
        (self.corrected(h.source, t).unwrap_or(i64::MAX), h.seq)
    }

    pub fn printer(&self, h: &Hit) -> Who {
        match self.hit_rank(h) {
            Some(r) => Who::Rank(r),
            None => Who::Source(h.source),
        }
    }

    pub fn host_named(&self, name: &str) -> Option<HostId> {
        if let Some(&h) = self.job.host_ids.get(name) {
            return Some(h);
        }
        let short = name.split('.').next().unwrap_or(name);
        self.job.host_ids.get(short).copied()
    }

    pub fn who_host(&self, w: Who) -> Option<HostId> {
        match w {
            Who::Host(h) => Some(h),
            Who::Source(s) => self.host_of(s),
            Who::Rank(r) => self
                .by_rank
                .get(&r)
                .and_then(|v| v.iter().find_map(|&s| self.host_of(s)))
                .or_else(|| self.beyond_cap_hosts.get(&r).copied()),
        }
    }

    /// The process a cause line is about: for launcher/kernel lines the named pid, rank or
    /// GPU; otherwise the printer.
    pub fn subject(&self, h: &Hit) -> Who {
        let printer_host = self.hit_host(h);
        if let Some(r) = h.field("subject_rank").and_then(|v| v.parse().ok()) {
            return Who::Rank(r);
        }
        let host = h
            .field("host")
            .and_then(|n| self.host_named(n))
            .or(printer_host);
        let local = h.field("local_rank").and_then(|v| v.parse::<u16>().ok());
        if let Some(pid) = h.field("pid").and_then(|v| v.parse::<u32>().ok()) {
            if let Some(r) = self.job.rank_of_pid(pid, host, local) {
                return Who::Rank(r);
            }
        }
        if let (Some(bdf), Some(hh)) = (h.field("bdf"), host) {
            if let Some(&r) = self.job.by_host_bus.get(&(hh, bdf_to_bus_id(bdf))) {
                return Who::Rank(r);
            }
        }
        if let (Some(l), Some(hh)) = (local, host) {
            if h.field("pid").is_some() || h.field("exitcode").is_some() {
                if let Some(&r) = self.job.by_host_local.get(&(hh, l)) {
                    return Who::Rank(r);
                }
            }
        }
        if h.field("pid").is_some() || h.field("bdf").is_some() {
            if let Some(hh) = host {
                if printer_host != Some(hh) || self.hit_rank(h).is_none() {
                    return Who::Host(hh);
                }
            }
        }
        self.printer(h)
    }

    /// Who a line blames besides its subject: peers by address, host name or rank.
    pub fn named(&self, h: &Hit) -> Vec<Who> {
        let mut out = Vec::new();
        if let Some(a) = h.field("peer_addr") {
            if let Some(&host) = self.job.ip_host.get(a) {
                out.push(Who::Host(host));
            }
        }
        if let Some(n) = h.field("peer_host") {
            if let Some(host) = self.host_named(n) {
                out.push(Who::Host(host));
            }
        }
        if let Some(v) = h.field("peer_rank") {
            out.extend(parse_rank_list(v).into_iter().map(Who::Rank));
        }
        out.extend(self.lagging_ranks(h).into_iter().map(Who::Rank));
        out
    }

    /// The ranks a line says the others wait for: those it names as lagging, or the ranks of
    /// the job missing from the ones it names as ready (old Horovod stall reports list only
    /// those). The job's ranks are those below its world size, at least one past every rank
    /// named ready.
    pub fn lagging_ranks(&self, h: &Hit) -> Vec<u32> {
        if let Some(v) = h.field("lagging_ranks") {
            return parse_rank_list(v);
        }
        let Some(ready) = h.field("ready_ranks").map(parse_rank_list) else {
            return Vec::new();
        };
        let Some(&top) = ready.iter().max() else {
            return Vec::new();
        };
        let ready: BTreeSet<u32> = ready.into_iter().collect();
        let world = self
            .world_size()
            .max(top + 1)
            .min(top + 1 + MAX_UNSEEN_RANKS);
        (0..world).filter(|r| !ready.contains(r)).collect()
    }

    /// World size: the largest communicator seen, or one past the largest stated rank.
    pub fn world_size(&self) -> u32 {
        let job = self.job;
        job.max_nranks.max(
            job.sources
                .iter()
                .filter_map(|s| s.stated_rank())
                .max()
                .map_or(0, |m| m + 1),
        )
    }
}

/// Rank -> host as the lines of processes beyond the source cap state them (their shared
/// source has neither).
fn beyond_cap_hosts(job: &Job) -> HashMap<u32, HostId> {
    if job.lines_over_source_cap == 0 {
        return HashMap::new();
    }
    job.hits
        .iter()
        .filter_map(|h| h.beyond_cap)
        .filter_map(|i| Some((i.rank?, i.host?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose_records, diagnose_untimed, root_line};
    use crate::prefix::peel;

    #[test]
    fn a_line_read_before_its_process_printed_a_time_keeps_its_place_in_the_stream() {
        // The process's first failure line prints no time; the record carrying it was
        // stamped a day later (its logs were shipped after the job). The repeat that
        // follows prints its time. In the stream, as in the file, the first line came first.
        let first = "[default3]:  what():  [PG ID 0 PG GUID 0(default_pg) Rank 43] Process \
            group watchdog thread terminated with exception: [Rank 43] Watchdog caught \
            collective operation timeout: WorkNCCL(SeqNum=113, OpType=ALLREDUCE, \
            NumelIn=6553600, NumelOut=6553600, Timeout(ms)=600000) ran for 600018 \
            milliseconds before timing out.";
        let repeat = "[default3]:[rank43]:[E1130 12:12:12.536201443 ProcessGroupNCCL.cpp:2070] \
            [PG ID 0 PG GUID 0(default_pg) Rank 43] Process group watchdog thread terminated \
            with exception: [Rank 43] Watchdog caught collective operation timeout: \
            WorkNCCL(SeqNum=113, OpType=ALLREDUCE, NumelIn=6553600, NumelOut=6553600, \
            Timeout(ms)=600000) ran for 600018 milliseconds before timing out.";
        let t = peel(repeat, 2026).ts_ms.unwrap();
        let later = t + 86_400_000;
        let files = diagnose_untimed(&format!("{first}\n{repeat}\n"));
        let records = diagnose_records(&[
            ("node-006.log", first, Some(later), later),
            ("node-006.log", repeat, Some(later), later),
        ]);
        assert_eq!(root_line(&files), first);
        assert_eq!(root_line(&records), first);
    }

    #[test]
    fn an_untimed_line_before_the_first_timed_one_keeps_its_place() {
        // A framework error printed on two lines; the poster's excerpt cut the first header's
        // date, so the first message has no time while the repeat that follows has one.
        let first =
            "INTERNAL: gpu/collectives.cc:91: NCCL operation ncclCommInitRank(&comm, n, id, r) \
            failed: unhandled system error";
        let text = format!(
            "W gpu/runtime/intercept.cc:58] Runtime error caught:\n{first}\n\
             2024-03-05 11:02:07.118200: E pjrt/client.cc:2101] Execution of replica 1 failed: \
             INTERNAL: gpu/collectives.cc:91: NCCL operation ncclCommInitRank(&comm, n, id, r) \
             failed: unhandled system error\n"
        );
        let d = diagnose_untimed(&text);
        assert_eq!(root_line(&d), first);
    }
}
