//! Routes of torchrun's `[defaultN]:` lines. A local rank names a process only within its
//! node: a stream that holds several nodes' lines (per-node files concatenated, a job's lines
//! sent without a source) has a process per node behind each local rank. So a stream's route
//! for a local rank follows the process whose lines come: a line that states another global
//! rank or another NCCL pid than the route's process has is another process's, and the route
//! moves to the source of what that line states. Lines that state nothing more than the
//! local rank go where the route last led.

use super::{Engine, Stream};
use crate::job::{HostId, Job, Source, SourceKey};
use crate::prefix::{LineMeta, Producer};

impl Engine {
    /// The source of a line with local rank `local` in stream `st`; `host` is the line's
    /// host (its own or the stream's).
    pub(super) fn route_local(
        &mut self,
        job: &mut Job,
        st: &mut Stream,
        local: u16,
        (meta, host): (&LineMeta, Option<HostId>),
    ) -> u32 {
        let at = st.cache.local.iter().position(|(l, _)| *l == local);
        let key = match at {
            Some(i) => {
                let current = st.cache.local[i].1;
                match another_process(&job.sources[current as usize], meta, host) {
                    Some(key) => key,
                    None => return current,
                }
            }
            None => SourceKey::StreamLocal(st.origin.clone(), local),
        };
        let capped_before = self.stats.sources_capped;
        let src = self.route(job, key, &st.origin);
        if self.stats.sources_capped == capped_before {
            match at {
                Some(i) => st.cache.local[i].1 = src,
                None => st.cache.local.push((local, src)),
            }
        }
        src
    }
}

/// The key of the process a line states it is, when that is not the process of `current`:
/// its global rank differs, or its NCCL pid does (a line's host alone decides nothing: the
/// stream's host may be named differently from the one NCCL prints).
fn another_process(current: &Source, meta: &LineMeta, host: Option<HostId>) -> Option<SourceKey> {
    if let (Some(r), Some(known)) = (meta.grank, current.rank) {
        return (r != known).then_some(SourceKey::Rank(r));
    }
    match (meta.producer, meta.pid, current.pid, host) {
        (Producer::Nccl, Some(p), Some(known), Some(h)) if p != known => {
            Some(SourceKey::HostPid(h, p))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, diagnose_files};

    /// Two nodes' torchrun consoles, each local rank 0 and 1; node-2's rank 3 fails.
    fn node_console(host: &str, base: u32, failing: Option<u32>) -> String {
        let mut text = String::new();
        for l in 0..2u32 {
            let (r, pid) = (base + l, 4000 + 100 * base + l);
            text.push_str(&format!("[default{l}]:  warnings.warn(\n"));
            text.push_str(&format!(
                "[default{l}]:{host}:{pid}:{pid} [{l}] NCCL INFO cudaDriverVersion 12080\n"
            ));
            text.push_str(&format!("[default{l}]:[rank{r}]: step 1 loss 2.5\n"));
        }
        if let Some(r) = failing {
            let l = r - base;
            text.push_str(&format!(
                "[default{l}]:[rank{r}]: RuntimeError: CUDA error: an illegal memory access \
                 was encountered\n"
            ));
        }
        text
    }

    fn root(d: &[crate::Diagnosis]) -> (Option<u64>, Option<&str>) {
        let rc = &d[0].json["root_cause"];
        (rc["rank"].as_u64(), rc["host"].as_str())
    }

    #[test]
    fn per_node_consoles_in_one_stream_keep_their_processes_apart() {
        let one = node_console("node-1", 0, None);
        let two = node_console("node-2", 2, Some(3));
        let d = diagnose(&format!("{one}{two}"));
        assert_eq!(root(&d), (Some(3), Some("node-2")));
        // As when each node's console is a file of its own.
        let d = diagnose_files(&[("node-1.log", &one), ("node-2.log", &two)]);
        assert_eq!(root(&d), (Some(3), Some("node-2")));
    }

    #[test]
    fn an_nccl_pid_of_another_process_moves_the_route() {
        // Node 2's lines state no global rank: its NCCL pid tells its process apart.
        let one = node_console("node-1", 0, None);
        let two = "[default1]:node-2:7001:7001 [1] NCCL INFO cudaDriverVersion 12080\n\
            [default1]:node-2:7001:7090 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: \
            Connect to 10.0.0.9<39275> failed : No route to host\n";
        let d = diagnose(&format!("{one}{two}"));
        let rc = &d[0].json["root_cause"];
        assert_eq!(rc["host"], "node-2");
        assert_eq!(rc["pid"], 7001);
    }
}
