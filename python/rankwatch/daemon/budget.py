"""How the daemon splits its one `memory_budget_bytes` between the parts that grow with input.

The budget bounds what the daemon holds above its fixed baseline (Python, the catalog, the
Hyperscan database, aiokafka and its connections). Giving it all to the engine left nothing
for the rest: in a burst of 10,000 short jobs read from a backlog, the engine held its whole
budget of not yet released jobs while aiokafka's fetch buffers, the fetched records, the
diagnoses' JSON and the bookkeeping came on top (2.2-3.3x the budget). So the engine gets a
share, and each other part is bounded by its own:

- engine state (`ENGINE_PERCENT`): rings, hits, sources, streams (the engine's accounted bytes).
  45%, not 60%: in a burst of 10,000 short jobs the engine holds its whole share while jobs
  are fed, evicted and released, and the heaps hold more than it accounts (malloc's in-use
  bytes 46.5 MiB at the peak for 29 MiB accounted, 11.6 MiB free but resident); at 60% that
  burst reached 1.3x the budget on a quiet machine (bench/history/11-memory.md, "Session 7");
- fetch (`FETCH_PERCENT`): aiokafka's fetch response per request (`fetch_max_bytes`) and per
  partition (`max_partition_fetch_bytes`), held until the records are handed out;
- batch (`BATCH_PERCENT`): the records handed to the engine per fetch (`max_batch_records`),
  two batches alive at once (one being fed while the next is fetched);
- bookkeeping (`BOOKKEEPING_PERCENT`): the published-diagnosis index, the job map and the fleet
  ledger (bounds.py);
- outbox (`OUTBOX_PERCENT`): diagnoses on their way out, as JSON: the records the publisher
  keeps until the broker acknowledged them, and the updates held for the next checkpoint.
  Above it the feed waits for acknowledgements (or checkpoints early): decision.py. Without it
  a burst of 10,000 jobs queued ~20,000 versions of ~7 KB with nothing slowing the feed.
  One engine poll hands out at most half of it (`poll_bytes`); a burst comes in parts, each
  published before the next is made (a poll of 1,105 diagnoses, 7.6 MiB, was seen at once);
- the rest: the allocator's free-but-resident pages.

Fetch sizes and the batch size are derived from the budget unless set; a set value above its
share is a configuration error that says what the share is."""

from __future__ import annotations

from dataclasses import dataclass

ENGINE_PERCENT = 45
FETCH_PERCENT = 10
BATCH_PERCENT = 10
BOOKKEEPING_PERCENT = 10
OUTBOX_PERCENT = 5
# Whatever the budget, the outbox may hold a few large diagnoses (a request is 1 MiB by default)
MIN_OUTBOX_BYTES = 1 << 20
# Of the outbox's share, what one poll may hand out: the rest is for what the publisher keeps
POLL_OUTBOX_DIVISOR = 2
# Resident bytes of one fetched record while it waits in a batch: aiokafka's parsed record
# object, its value and key bytes (a few hundred bytes of log line and envelope).
RECORD_RESIDENT_BYTES = 1024
BATCHES_ALIVE = 2
# aiokafka's own default for a whole fetch response; the derived value never exceeds it.
AIOKAFKA_FETCH_MAX_BYTES = 50 << 20
# Kafka's default per-partition fetch size (aiokafka uses 1 MiB; 4 MiB read backlogs faster).
PARTITION_FETCH_BYTES = 4 << 20
MAX_BATCH_RECORDS = 10_000
# Floors, whatever the budget (tiny budgets in tests): a fetch must make progress.
MIN_FETCH_BYTES = 64 << 10
MIN_BATCH_RECORDS = 100


@dataclass(frozen=True)
class BudgetSplit:
    """What each part of the daemon may hold, from one `memory_budget_bytes`."""

    engine_bytes: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_batch_records: int
    bookkeeping_bytes: int
    outbox_bytes: int
    poll_bytes: int


def share(budget: int, percent: int) -> int:
    return budget * percent // 100


def fetch_share(budget: int) -> int:
    """Bytes one fetch response may take."""
    return max(MIN_FETCH_BYTES, share(budget, FETCH_PERCENT))


def batch_share(budget: int) -> int:
    """Records one batch may hold."""
    per_batch = share(budget, BATCH_PERCENT) // (BATCHES_ALIVE * RECORD_RESIDENT_BYTES)
    return max(MIN_BATCH_RECORDS, per_batch)


def split(budget: int, partition_fetch_bytes: int = 0, batch_records: int = 0) -> BudgetSplit:
    """The split of `budget`; `partition_fetch_bytes` and `batch_records` are the configured
    values (0: derived), already checked against their shares by `problems`."""
    fetch = min(AIOKAFKA_FETCH_MAX_BYTES, fetch_share(budget))
    partition = partition_fetch_bytes or min(PARTITION_FETCH_BYTES, fetch)
    outbox = max(MIN_OUTBOX_BYTES, share(budget, OUTBOX_PERCENT))
    return BudgetSplit(
        engine_bytes=share(budget, ENGINE_PERCENT),
        fetch_max_bytes=max(fetch, partition),
        max_partition_fetch_bytes=partition,
        max_batch_records=batch_records or min(MAX_BATCH_RECORDS, batch_share(budget)),
        bookkeeping_bytes=share(budget, BOOKKEEPING_PERCENT),
        outbox_bytes=outbox,
        poll_bytes=outbox // POLL_OUTBOX_DIVISOR,
    )


def problems(budget: int, partition_fetch_bytes: int, batch_records: int) -> list[str]:
    """Why configured fetch or batch sizes do not fit their shares of `budget` (empty: fine)."""
    out = []
    fetch = fetch_share(budget)
    if partition_fetch_bytes > fetch:
        out.append(
            f"max_partition_fetch_bytes ({partition_fetch_bytes:,}) is above its share of "
            f"memory_budget_bytes ({fetch:,} = {FETCH_PERCENT}% of {budget:,}): lower it, raise "
            "the budget, or leave it unset (0) to derive it from the budget"
        )
    records = batch_share(budget)
    if batch_records > records:
        out.append(
            f"max_batch_records ({batch_records:,}) is above what its share of "
            f"memory_budget_bytes holds ({records:,} records of ~{RECORD_RESIDENT_BYTES:,} bytes "
            f"in {BATCH_PERCENT}% of {budget:,}, {BATCHES_ALIVE} batches at once): lower it, "
            "raise the budget, or leave it unset (0) to derive it from the budget"
        )
    return out
