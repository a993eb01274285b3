"""oom_kill: the kernel's OOM killer SIGKILLs the culprit with no last words; its agent
reports exitcode -9 (the root cause line) and SIGTERMs the host's other workers; the socket
neighbours on the adjacent hosts see the connection close; the rest time out. The kernel's
lines are written (dmesg-<host>.log) in the per-rank layout only."""

from __future__ import annotations

from functools import partial

from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.kernel import NVRM_LOAD, kern
from rankwatch.simulate.scenarios.common import (
    full_baseline,
    peer_gone_in_training,
    timeouts_for_all,
)
from rankwatch.simulate.scenarios.spec import Scenario
from rankwatch.simulate.teardown import run_fleet


def build(job: Job) -> None:
    full_baseline(job)
    cul = job.culprit
    h = cul.host
    T = job.culprit_time()
    job.set_exit(cul, T, -9)
    job.root_meta = (cul.rank, h.name, "elastic_worker_killed")
    if job.layout == "per-rank":
        kern(job, h, -3100.0, NVRM_LOAD)
        kern(
            job,
            h,
            T - 0.04,
            "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
            "order=0, oom_score_adj=0",
        )
        kern(
            job,
            h,
            T - 0.03,
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,"
            f"global_oom,task_memcg=/system.slice/slurmstepd.scope,task=python3,pid={cul.pid},"
            "uid=1000",
        )
        kern(
            job,
            h,
            T - 0.02,
            f"Out of memory: Killed process {cul.pid} (python3) total-vm:1095736240kB, "
            "anon-rss:1002345120kB, file-rss:123456kB, shmem-rss:2097152kB, UID:1000 "
            "pgtables:1987654kB oom_score_adj:0",
        )
    job.notes.append(
        f"rank {cul.rank} (pid {cul.pid}) on {h.name} was SIGKILLed by the kernel OOM killer "
        f"at true t={T:.3f}s with no last words; the agent reports exitcode -9; socket "
        "neighbours on the adjacent hosts see the connection close; the rest time out."
    )
    job.cascade = lambda hi, t_dead: _socket_neighbours(job, hi)
    timeouts_for_all(job, skip=[cul.rank])
    run_fleet(job)


def _socket_neighbours(job: Job, hi: int) -> None:
    """The culprit host's workers are gone: the ring neighbours on the hosts either side,
    connected to them by NET/Socket, see their connection close."""
    if hi != job.culprit_host or job.nodes < 2:
        return
    g = job.per_host
    pairs = [
        (job.ranks[((hi - 1) % job.nodes) * g + g - 1], job.ranks[hi * g], False),
        (job.ranks[((hi + 1) % job.nodes) * g], job.ranks[hi * g + g - 1], True),
    ]
    seen: set[int] = set()
    for b, dead, recv in pairs:
        if b.host.idx == hi or b.rank in seen:
            continue
        seen.add(b.rank)
        t = job.death_t[dead.rank] + job.rng.uniform(0.001, 0.03)
        job.trigger(t, b, partial(peer_gone_in_training, job, b, dead, recv, t))


SCENARIO = Scenario(
    name="oom_kill",
    about="the kernel's OOM killer kills one worker; torchrun tears the job down",
    build=build,
    nccl="2.26.2",
    transport="Socket",
    root_in_agent_log=True,
)
