//! The ranks processes announce as they start ("GLOBAL_RANK: 1, MEMBER: 2/4"). Two processes
//! claiming one rank before every rank of the world has been claimed is a launch that cannot
//! form its group: the launcher numbered the processes wrongly (Slurm starting fewer tasks per
//! node than the framework expects, so each node numbers its ranks from 0), and the job hangs
//! at start-up with no error line. A process announcing again after a restart is not one:
//! only a claim by another process, or by the same one moments later, counts.

use crate::job::FastMap;
use crate::memsize;

/// Worlds (distinct sizes) followed per job: a job has one, a few with subgroups.
const MAX_WORLDS: usize = 4;
/// Larger worlds are not followed (a bad field, or a fleet too big to need this check).
const MAX_WORLD_SIZE: u32 = 1 << 20;
/// Within one process, a second claim this close to the first is a second process whose
/// lines share the stream, not a restart.
const SAME_STREAM_NEAR_MS: i64 = 5_000;
const SAME_STREAM_NEAR_LINES: u64 = 16;

/// Who claimed a rank, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub source: u32,
    pub seq: u64,
    pub ts_ms: Option<i64>,
}

#[derive(Debug, Default)]
struct World {
    size: u32,
    first: FastMap<u32, Claim>,
    /// Every rank was claimed (the table is then dropped) or a double claim was reported.
    settled: bool,
}

#[derive(Debug, Default)]
pub struct Announced {
    worlds: Vec<World>,
}

impl Announced {
    /// Notes `rank` of a world of `size` claimed by `claim`. Returns the earlier claim when
    /// this one claims the same rank again before the world is complete (once per world).
    pub fn note(&mut self, rank: u32, size: u32, claim: Claim) -> Option<Claim> {
        if rank >= size || size > MAX_WORLD_SIZE {
            return None;
        }
        let w = self.world(size)?;
        if w.settled {
            return None;
        }
        match w.first.get(&rank).copied() {
            None => {
                w.first.insert(rank, claim);
                if w.first.len() == size as usize {
                    w.settled = true;
                    w.first = FastMap::default();
                }
                None
            }
            Some(earlier) if claimed_again(earlier, claim) => {
                w.settled = true;
                w.first = FastMap::default();
                Some(earlier)
            }
            // The same process announcing again later: a restart, which the next claim
            // is compared with.
            Some(earlier) => {
                if earlier.source == claim.source {
                    w.first.insert(rank, claim);
                }
                None
            }
        }
    }

    fn world(&mut self, size: u32) -> Option<&mut World> {
        match self.worlds.iter().position(|w| w.size == size) {
            Some(i) => Some(&mut self.worlds[i]),
            None if self.worlds.len() < MAX_WORLDS => {
                self.worlds.push(World {
                    size,
                    ..World::default()
                });
                self.worlds.last_mut()
            }
            None => None,
        }
    }

    pub fn tables_bytes(&self) -> usize {
        memsize::vec(&self.worlds)
            + self
                .worlds
                .iter()
                .map(|w| memsize::map(&w.first))
                .sum::<usize>()
    }
}

fn claimed_again(earlier: Claim, now: Claim) -> bool {
    if earlier.source != now.source {
        return true;
    }
    match (earlier.ts_ms, now.ts_ms) {
        (Some(a), Some(b)) => (b - a).abs() <= SAME_STREAM_NEAR_MS,
        _ => now.seq.saturating_sub(earlier.seq) <= SAME_STREAM_NEAR_LINES,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(source: u32, seq: u64, ts_ms: Option<i64>) -> Claim {
        Claim { source, seq, ts_ms }
    }

    #[test]
    fn two_processes_claiming_one_rank_of_an_incomplete_world_are_reported_once() {
        let mut a = Announced::default();
        assert_eq!(a.note(1, 4, claim(0, 1, None)), None);
        assert_eq!(a.note(1, 4, claim(1, 2, None)), Some(claim(0, 1, None)));
        assert_eq!(a.note(0, 4, claim(0, 3, None)), None);
        assert_eq!(a.note(0, 4, claim(1, 4, None)), None);
    }

    #[test]
    fn a_process_announcing_again_after_a_restart_is_not_a_double_claim() {
        let mut a = Announced::default();
        assert_eq!(a.note(0, 2, claim(0, 1, Some(0))), None);
        assert_eq!(a.note(0, 2, claim(0, 900, Some(600_000))), None);
        // Lines of two processes in one stream, moments apart, are.
        assert!(a.note(0, 2, claim(0, 902, Some(600_001))).is_some());
    }

    #[test]
    fn a_complete_world_announced_again_is_a_relaunch() {
        let mut a = Announced::default();
        for r in 0..4 {
            assert_eq!(a.note(r, 4, claim(r, u64::from(r), None)), None);
        }
        assert_eq!(a.note(2, 4, claim(7, 5, None)), None);
        assert_eq!(a.tables_bytes(), memsize::vec(&a.worlds));
    }

    #[test]
    fn ranks_outside_their_world_are_ignored() {
        let mut a = Announced::default();
        assert_eq!(a.note(4, 4, claim(0, 1, None)), None);
        assert_eq!(a.note(4, 4, claim(1, 2, None)), None);
    }
}
