//! The rank ProcessGroupNCCL prints at the start of its messages: `[Rank n]` (per-work
//! messages) or a PG prefix (`[PG 0 Rank n]`, `[PG 0 (default_pg) Rank n]`,
//! `[PG ID 4 PG GUID 20(mesh_tp) Rank n]`). `n` is the rank inside that process group: it is a
//! global rank only for the default group (id 0 or described as `default_pg`).

use crate::timefmt::leading_number;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgRank {
    /// `[Rank n]`: the group is not named (the default group unless sub-groups are in use).
    Unnamed(u32),
    /// The default process group: `n` is the global rank.
    Default(u32),
    /// A sub-group (tensor/pipeline/expert parallel mesh, `new_group`): never a global rank.
    SubGroup(u32),
}

impl PgRank {
    /// The rank as a global rank, where the prefix allows reading it as one.
    pub fn global(self) -> Option<u32> {
        match self {
            PgRank::Unnamed(r) | PgRank::Default(r) => Some(r),
            PgRank::SubGroup(_) => None,
        }
    }
}

/// Reads the PG rank prefix at the start of a c10 message.
pub fn pg_rank(msg: &[u8]) -> Option<PgRank> {
    if msg.first() != Some(&b'[') {
        return None;
    }
    let close = memchr::memchr(b']', &msg[..msg.len().min(128)])?;
    let inner = &msg[1..close];
    if let Some(num) = inner.strip_prefix(b"Rank ") {
        return whole_number(num).map(PgRank::Unnamed);
    }
    if !inner.starts_with(b"PG ") {
        return None;
    }
    let at = memchr::memmem::rfind(inner, b" Rank ")?;
    let rank = whole_number(&inner[at + 6..])?;
    let default = inner.starts_with(b"PG 0 ")
        || inner.starts_with(b"PG ID 0 ")
        || memchr::memmem::find(inner, b"(default_pg)").is_some();
    Some(if default {
        PgRank::Default(rank)
    } else {
        PgRank::SubGroup(rank)
    })
}

/// The rank of a C++ exception's `what():` line that carries a ProcessGroupNCCL message
/// (`  what():  [Rank 1] Watchdog caught collective operation timeout: ...`). The terminate
/// handler prints its own process's exception, so the rank is the printer's: a console of
/// several ranks shows whose abort it is.
pub fn what_rank(msg: &[u8]) -> Option<u32> {
    let rest = msg.trim_ascii_start().strip_prefix(b"what():")?;
    pg_rank(rest.trim_ascii_start()).and_then(PgRank::global)
}

fn whole_number(b: &[u8]) -> Option<u32> {
    let (v, n) = leading_number(b, 9)?;
    (n == b.len()).then(|| u32::try_from(v).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminate_handlers_what_line_names_its_printer() {
        let line =
            b"  what():  [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)";
        assert_eq!(what_rank(line), Some(1));
        assert_eq!(
            what_rank(b"what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog"),
            Some(3)
        );
        assert_eq!(
            what_rank(b"  what():  [PG ID 4 PG GUID 20(mesh_tp) Rank 1] x"),
            None
        );
        assert_eq!(what_rank(b"  what():  NCCL error in: x"), None);
        assert_eq!(what_rank(b"[Rank 1] Watchdog caught"), None);
    }

    #[test]
    fn default_and_sub_groups() {
        assert_eq!(
            pg_rank(b"[PG ID 0 PG GUID 0(default_pg) Rank 11] Process group watchdog"),
            Some(PgRank::Default(11))
        );
        assert_eq!(
            pg_rank(b"[PG 0 (default_pg) Rank 2] x"),
            Some(PgRank::Default(2))
        );
        assert_eq!(pg_rank(b"[PG 0 Rank 13] x"), Some(PgRank::Default(13)));
        assert_eq!(
            pg_rank(b"[PG ID 4 PG GUID 20(mesh_tp) Rank 1]  failure detected"),
            Some(PgRank::SubGroup(1))
        );
        assert_eq!(
            pg_rank(b"[PG 5 Rank 0] Heartbeat"),
            Some(PgRank::SubGroup(0))
        );
        assert_eq!(
            pg_rank(b"[PG ID 1 PG GUID 1 Rank 3] x"),
            Some(PgRank::SubGroup(3))
        );
        assert_eq!(pg_rank(b"[Rank 1] Watchdog"), Some(PgRank::Unnamed(1)));
        assert_eq!(PgRank::SubGroup(1).global(), None);
    }

    #[test]
    fn other_brackets_are_not_ranks() {
        assert_eq!(pg_rank(b"[c10d] The client socket"), None);
        assert_eq!(pg_rank(b"[Rank x] y"), None);
        assert_eq!(pg_rank(b"Rank 3"), None);
    }
}
