"""The healthy part of every worker's life: Python start-up warnings, init_process_group and
both communicator inits, then the training steps. Scenarios write it for every rank and inject
their failure into it or after it."""

from __future__ import annotations

import math

from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl_init import comm_init, process_init
from rankwatch.simulate.lines.pytorch import SITE, app, barrier_warning, err, pg_init


def startup(job: Job, r: Rank, t0: float) -> None:
    """Python-side lines before init_process_group."""
    rng = job.rng
    if r.local == 0 or rng.random() < 0.5:
        err(
            job,
            r,
            t0 + rng.uniform(0.5, 2.5),
            "/workspace/train.py:118: FutureWarning: `torch.cuda.amp.GradScaler(args...)` "
            "is deprecated. Please use `torch.amp.GradScaler('cuda', args...)` instead.\n"
            "  scaler = torch.cuda.amp.GradScaler()",
        )


def baseline(job: Job, r: Rank, global_stage: str = "complete") -> float:
    """Startup, PG init and both communicator inits; returns the end time.

    When the default communicator fails (global_stage != "complete"), its init stops at
    the given stage and the function returns the time where the failure happens.
    """
    rng = job.rng
    pg_t = job.schedule.pg_init_t
    startup(job, r, job.schedule.rendezvous_t + rng.uniform(0.1, 0.4))
    pg_init(job, r, pg_t + rng.uniform(0.0, 0.18))
    t = process_init(job, r, pg_t + 0.35 + rng.uniform(0.0, 0.05))
    if job.spec.intra_first:
        t = comm_init(job, r, t, True, "complete", True)
        t = max(t, pg_t + 2.4) + rng.uniform(0.0, 0.04)
        barrier_warning(job, r, t)
        t = comm_init(job, r, t + 0.002, False, global_stage, False)
    else:
        barrier_warning(job, r, t)
        t = comm_init(job, r, t + 0.002, False, global_stage, True)
        if global_stage == "complete":
            t = comm_init(job, r, max(t, pg_t + 2.6), True, "complete", False)
    return t


def training(job: Job, r: Rank, upto: int | None = None) -> None:
    """The script's start line and one line per step, up to step `upto` (default: all)."""
    rng = job.rng
    sched = job.schedule
    t_ready = sched.pg_init_t + 3.4 + rng.uniform(0.0, 0.1)
    app(
        job,
        r,
        t_ready,
        "INFO",
        f"rank={r.rank} local_rank={r.local} world_size={job.world_size} device=cuda:{r.local} "
        "model=llama-7b seq_len=4096 micro_batch=2",
    )
    if rng.random() < 0.3:
        err(
            job,
            r,
            t_ready + rng.uniform(0.1, 0.5),
            f"{SITE}/torch/utils/data/dataloader.py:624: UserWarning: This DataLoader will "
            "create 16 worker processes in total. Our suggested max number of worker in "
            "current system is 12, which is smaller than what this DataLoader is going to "
            "create. Please be aware that excessive worker creation might get DataLoader "
            "running slow or even freeze, lower the worker number to avoid potential "
            "slowness/freeze if necessary.\n  warnings.warn(",
        )
    last = job.steps if upto is None else upto
    for k in range(1, last + 1):
        t = sched.step_t(k) + rng.uniform(0.0, 0.04)
        loss = 2.0 + (sched.loss0 - 2.0) * math.exp(-k / 6.0) + rng.uniform(-0.02, 0.02)
        tps = sched.tokens_per_s + rng.randint(-900, 900)
        app(job, r, t, "INFO", f"step={k} loss={loss:.4f} tokens/s={tps}")
