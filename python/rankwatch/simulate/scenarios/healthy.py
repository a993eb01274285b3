"""healthy: a run that trains to the end, with the harmless warnings real jobs print; no
failure injected, no diagnosis expected."""

from __future__ import annotations

from rankwatch.simulate.baseline import baseline, training
from rankwatch.simulate.fleet import Rank
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.nccl import info
from rankwatch.simulate.lines.pytorch import app, err
from rankwatch.simulate.lines.torchrun import agent_success
from rankwatch.simulate.scenarios.spec import Scenario


def build(job: Job) -> None:
    train_to_the_end(job, noisy=False)
    job.notes.append("clean run with harmless warnings; no diagnosis expected")


def train_to_the_end(job: Job, noisy: bool) -> None:
    """Every rank trains all steps and shuts down cleanly; every agent reports success.
    noisy: about one rank in 20 also logs dynamo recompile warnings."""
    rng = job.rng
    for r in job.ranks:
        baseline(job, r)
        training(job, r)
        if noisy and rng.random() < 0.05:
            _recompile_warning(job, r, job.schedule.step_t(2) + rng.uniform(0.1, 0.5))
        t_end = job.schedule.last_step_t + rng.uniform(0.5, 1.0)
        _clean_exit(job, r, t_end)
        job.own_exit_t[r.rank] = t_end + 0.3
        job.death_t[r.rank] = t_end + 0.3 + rng.uniform(0.0, 0.2)
    for h in job.hosts:
        t = max(job.death_t[r] for r in h.ranks) + rng.uniform(0.01, 0.1)
        agent_success(job, h, t)


def _recompile_warning(job: Job, r: Rank, tw: float) -> None:
    stamp = job.clock.torchelastic(r.host.local_time(tw))
    pre = f"[rank{r.rank}]:W{stamp} {r.pid} torch/_dynamo/convert_frame.py:964]"
    err(
        job,
        r,
        tw,
        f"{pre} [0/8] torch._dynamo hit config.recompile_limit (8)\n"
        f"{pre} [0/8]    function: 'forward' (/workspace/model.py:388)\n"
        f"{pre} [0/8]    last reason: 0/7: tensor 'L['input_ids']' size mismatch at "
        "index 1. expected 4096, actual 3968\n"
        f"{pre} [0/8] To log all recompilation reasons, use "
        'TORCH_LOGS="recompiles".',
    )


def _clean_exit(job: Job, r: Rank, t_end: float) -> None:
    """Rank 0's `training done`, and both communicators destroyed."""
    if r.rank == 0:
        app(
            job,
            r,
            t_end - 0.3,
            "INFO",
            f"training done: {job.steps} steps in {job.steps * job.schedule.step_s:.1f}s",
        )
    for k, (comm, intra) in enumerate(((r.comm_intra, True), (r.comm, False))):
        rank = r.local if intra else r.rank
        nranks = job.per_host if intra else job.world_size
        info(
            job,
            r,
            t_end + k * 0.01,
            f"comm {comm} rank {rank} nranks {nranks} cudaDev {r.local} busId {r.bus} - "
            "Destroy COMPLETE",
        )


SCENARIO = Scenario(
    name="healthy",
    about="a run that trains to the end; no failure injected",
    build=build,
    nccl="2.21.5",
    transport="Socket",
    injects_failure=False,
    connect_retry_p=0.08,
)
