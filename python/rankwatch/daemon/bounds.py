"""How many entries each of the daemon's own bookkeeping structures keeps (the published-
diagnosis index, the job map, the fleet ledger), so that they stay inside the memory budget
however many jobs come and go within their time windows.

Each structure is also pruned by time (an hour or more, a day for the fleet ledger); by time
alone, 10,000 short jobs within that time grew the daemon by about 12 KiB of resident memory
per job, twice a 50 MiB budget. Past the bound the oldest entries go first, except those of
jobs the engine still holds (their count is bounded by the engine's own budget): forgetting
them would publish a live job's next version as new, or again during a replay, and leave the
job in the engine when its partition is revoked."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from rankwatch.daemon import budget

_K = TypeVar("_K")

# Resident bytes one entry may cost, all counted: its objects, the dict and set slots, and the
# allocator pages they keep from being reused (3-12 KiB per job over the three, measured).
ENTRY_RESIDENT_BYTES = 4 * 1024
# The three structures together get the bookkeeping share of the memory budget (budget.py).
STRUCTURES = 3
# Never fewer than this (tiny budgets in tests).
MIN_ENTRIES = 256


def max_entries(memory_budget_bytes: int) -> int:
    """Entries each bookkeeping structure keeps under `memory_budget_bytes`."""
    share = budget.share(memory_budget_bytes, budget.BOOKKEEPING_PERCENT) // STRUCTURES
    return max(MIN_ENTRIES, share // ENTRY_RESIDENT_BYTES)


def oldest_not_kept(
    items: Iterable[tuple[_K, str]], excess: int, keep: Callable[[str], bool]
) -> list[_K]:
    """The first `excess` keys of (key, job) `items`, oldest first, whose job `keep` refuses."""
    gone: list[_K] = []
    if excess <= 0:
        return gone
    for key, job in items:
        if not keep(job):
            gone.append(key)
            if len(gone) == excess:
                break
    return gone
