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
/// For a world of unknown size, the second claim comes within a few lines of the first: two
/// processes' headers printed together. A run that printed a results table between them is
/// another run (a test repeated, or another host's pasted after it: ten lines and more).
const UNSIZED_NEAR_LINES: u64 = 6;

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
    /// Claims of a world whose size no line states (nccl-tests lists its ranks' devices), and
    /// whether a double claim was reported for it.
    unsized_first: FastMap<u32, Claim>,
    unsized_settled: bool,
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

    /// Notes `rank` claimed in a world of unknown size. With no size there is no complete
    /// world, so only a claim of the same rank a few lines later in the same stream counts
    /// (two processes' start-up lines interleaved in one console); claims further apart, or in
    /// other files, are other runs (a test repeated, two hosts tested one by one).
    pub fn note_unsized(&mut self, rank: u32, claim: Claim) -> Option<Claim> {
        if self.unsized_settled {
            return None;
        }
        match self.unsized_first.insert(rank, claim) {
            Some(earlier)
                if earlier.source == claim.source
                    && claim.seq.saturating_sub(earlier.seq) <= UNSIZED_NEAR_LINES =>
            {
                self.unsized_settled = true;
                self.unsized_first = FastMap::default();
                Some(earlier)
            }
            _ => None,
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
        memsize::map(&self.unsized_first)
            + memsize::vec(&self.worlds)
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
    fn a_rank_of_an_unsized_world_claimed_twice_in_one_stream_moments_apart_is_reported() {
        let mut a = Announced::default();
        assert_eq!(a.note_unsized(0, claim(1, 10, None)), None);
        assert_eq!(
            a.note_unsized(0, claim(1, 11, None)),
            Some(claim(1, 10, None))
        );
        assert_eq!(a.note_unsized(0, claim(1, 12, None)), None, "once");
    }

    #[test]
    fn unsized_claims_far_apart_or_in_other_files_are_other_runs() {
        let mut a = Announced::default();
        assert_eq!(a.note_unsized(0, claim(1, 10, None)), None);
        assert_eq!(a.note_unsized(0, claim(1, 22, None)), None);
        assert_eq!(a.note_unsized(0, claim(2, 23, None)), None);
        assert_eq!(a.note_unsized(1, claim(2, 24, None)), None);
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
