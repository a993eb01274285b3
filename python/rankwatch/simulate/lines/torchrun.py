"""The torchrun (torchelastic) agent's lines: launch, rendezvous, closing signals, the
ChildFailedError report and the traceback when the rendezvous store goes away. Agent lines use
TorchLogsFormatter (`I1130 12:00:00.123000 <pid> <file>:<line>] ...`)."""

from __future__ import annotations

from rankwatch.simulate.fleet import Host
from rankwatch.simulate.job import Job
from rankwatch.simulate.lines.pytorch import SITE
from rankwatch.simulate.lines.records import ERR

_LAUNCHER_API = "torch/distributed/launcher/api.py"
_AGENT_API = "torch/distributed/elastic/agent/server/api.py"
_LOCAL_AGENT = "torch/distributed/elastic/agent/server/local_elastic_agent.py"
_DYN_RDZV = "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py"
_C10D_RDZV = "torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py"
_MP_API = "torch/distributed/elastic/multiprocessing/api.py"


def tl(job: Job, h: Host, t: float, lvl: str, src: str, msg: str, flag: int = 0) -> None:
    """A TorchLogsFormatter line (each line of msg gets the prefix)."""
    pre = f"{lvl}{job.clock.torchelastic(h.local_time(t))} {h.agent_pid} {src}]"
    text = "\n".join(f"{pre} {ln}" for ln in msg.split("\n"))
    job.agent_recs[h.idx].append((t, ERR, text, flag))


def agent_raw(job: Job, h: Host, t: float, text: str) -> None:
    job.agent_recs[h.idx].append((t, ERR, text, 0))


def agent_start(job: Job, h: Host) -> None:
    """From launch to the worker group's start, on every host."""
    t = job.rng.uniform(0.0, 1.2)
    tl(
        job,
        h,
        t,
        "W",
        "torch/distributed/run.py:792",
        "\n*****************************************\nSetting OMP_NUM_THREADS environment "
        "variable for each process to be 1 in default, to avoid your system being "
        "overloaded, please further tune the variable for optimal performance in your "
        "application as needed. \n*****************************************",
    )
    _launch_config(job, h, t)
    _rendezvous(job, h, t)
    tr = job.schedule.rendezvous_t + job.rng.uniform(0.0, 0.05)
    tl(job, h, tr, "I", f"{_AGENT_API}:525", _rendezvous_result(job, h))
    tl(job, h, tr + 0.001, "I", f"{_AGENT_API}:685", "[default] Starting worker group")
    tl(job, h, tr + 0.002, "I", f"{_LOCAL_AGENT}:298", "use_agent_store: True")
    tl(
        job,
        h,
        tr + 0.003,
        "I",
        f"{_LOCAL_AGENT}:192",
        "Environment variable 'TORCHELASTIC_ENABLE_FILE_TIMER' not found. Do not start "
        "FileTimerServer.",
    )
    tl(
        job,
        h,
        tr + 0.004,
        "I",
        f"{_LOCAL_AGENT}:236",
        "Environment variable 'TORCHELASTIC_HEALTH_CHECK_PORT' not found. Do not start health "
        "check.",
    )


def _launch_config(job: Job, h: Host, t: float) -> None:
    logdir = (
        f"/logs/{job.name}"
        if job.layout == "torchrun-logdir"
        else f"/tmp/torchelastic_{h.suffix[::-1]}"
    )
    cfg = (
        "Starting elastic_operator with launch configs:\n"
        "  entrypoint       : train.py\n"
        f"  min_nodes        : {job.nodes}\n"
        f"  max_nodes        : {job.nodes}\n"
        f"  nproc_per_node   : {job.per_host}\n"
        f"  run_id           : {job.name}\n"
        "  rdzv_backend     : c10d\n"
        f"  rdzv_endpoint    : {job.hosts[0].name}:29400\n"
        "  rdzv_configs     : {'timeout': 900}\n"
        "  max_restarts     : 0\n"
        "  monitor_interval : 0.1\n"
        f"  log_dir          : {logdir}\n"
        "  metrics_cfg      : {}\n"
    )
    tl(job, h, t + 0.002, "I", f"{_LAUNCHER_API}:194", cfg)
    tl(
        job,
        h,
        t + 0.004,
        "I",
        f"{_LOCAL_AGENT}:240",
        f"log directory set to: {logdir}/{job.name}_{h.suffix}",
    )
    tl(
        job,
        h,
        t + 0.005,
        "I",
        f"{_AGENT_API}:870",
        "[default] starting workers for entrypoint: python3",
    )
    tl(job, h, t + 0.006, "I", f"{_AGENT_API}:677", "[default] Rendezvous'ing worker group")


def _rendezvous(job: Job, h: Host, t: float) -> None:
    node = f"{h.name}_{h.agent_pid}_0"
    tl(
        job,
        h,
        t + 0.2,
        "I",
        f"{_DYN_RDZV}:1144",
        f"The node '{node}' attempts to join the next round of the rendezvous '{job.name}'.",
    )
    tj = job.schedule.rendezvous_t - job.rng.uniform(0.05, 0.3)
    tl(
        job,
        h,
        tj,
        "I",
        f"{_DYN_RDZV}:1181",
        f"The node '{node}' has joined round 0 of the rendezvous '{job.name}' as rank {h.idx} "
        f"in a world of size {job.nodes}.",
    )


def _rendezvous_result(job: Job, h: Host) -> str:
    ranks = [job.ranks[r].rank for r in h.ranks]
    return (
        "[default] Rendezvous complete for workers. Result:\n"
        "  restart_count=0\n"
        f"  master_addr={job.hosts[0].name}\n"
        f"  master_port={job.master_port}\n"
        f"  group_rank={h.idx}\n"
        f"  group_world_size={job.nodes}\n"
        f"  local_ranks={list(range(job.per_host))}\n"
        f"  role_ranks={ranks}\n"
        f"  global_ranks={ranks}\n"
        f"  role_world_sizes={[job.world_size] * job.per_host}\n"
        f"  global_world_sizes={[job.world_size] * job.per_host}\n"
    )


def agent_success(job: Job, h: Host, t: float) -> None:
    tl(
        job,
        h,
        t,
        "I",
        f"{_AGENT_API}:879",
        "[default] worker group successfully finished. Waiting 300 seconds for other agents "
        "to finish.",
    )
    tl(
        job,
        h,
        t + 0.001,
        "I",
        f"{_AGENT_API}:932",
        "Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other "
        "agents to finish",
    )
    tl(
        job,
        h,
        t + 1.2,
        "I",
        f"{_AGENT_API}:946",
        f"Done waiting for other agents. Elapsed: {1.2 + job.rng.uniform(0, 0.3):.4f} seconds",
    )


def sigterm(job: Job, h: Host, t: float, pid: int) -> None:
    tl(job, h, t, "W", f"{_MP_API}:897", f"Sending process {pid} closing signal SIGTERM")


def stopping(job: Job, h: Host, t: float) -> None:
    tl(job, h, t, "I", f"{_AGENT_API}:727", "[default] Stopping worker group")


def _torchrun_tb() -> list[str]:
    return [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        "             ^^^^^^",
        f'  File "{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py", '
        "line 355, in wrapper",
        "    return f(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/torch/distributed/run.py", line 892, in main',
        "    run(args)",
        f'  File "{SITE}/torch/distributed/run.py", line 883, in run',
        "    elastic_launch(",
        f'  File "{SITE}/{_LAUNCHER_API}", line 139, in __call__',
        "    return launch_agent(self._config, self._entrypoint, list(args))",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    ]


def child_failed(
    job: Job, h: Host, t: float, poll: float, failed: list[int], first: int, flag: int
) -> None:
    """The agent's report of the workers that failed in one poll at `poll`: the `failed
    (exitcode ...)` line of `first` at t, then the ChildFailedError traceback."""
    fr = job.ranks[first]
    tl(
        job,
        h,
        t,
        "E",
        f"{_MP_API}:869",
        f"failed (exitcode: {job.own_exit_code[first]}) local_rank: {fr.local} (pid: {fr.pid}) "
        "of binary: /usr/bin/python3",
        flag=flag,
    )
    stamp = job.clock.child_failed(h.local_time(poll))
    blocks = [_failure_block(job, h, idx, r, stamp) for idx, r in enumerate(sorted(failed))]
    root_i = 0  # equal timestamps: the first failure in rank order is reported as root
    others = [b for i, b in enumerate(blocks) if i != root_i]
    tb_lines = [
        *_torchrun_tb(),
        f'  File "{SITE}/{_LAUNCHER_API}", line 270, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        "train.py FAILED",
        "-" * 60,
        "Failures:",
        "\n".join(others) if others else "  <NO_OTHER_FAILURES>",
        "-" * 60,
        "Root Cause (first observed failure):",
        blocks[root_i],
        "=" * 60,
    ]
    agent_raw(job, h, t + job.rng.uniform(0.2, 0.6), "\n".join(tb_lines))


def _failure_block(job: Job, h: Host, idx: int, r: int, stamp: str) -> str:
    rr = job.ranks[r]
    code = job.own_exit_code[r]
    if code < 0:
        sig = {-6: "SIGABRT", -9: "SIGKILL", -15: "SIGTERM"}.get(code, "SIGSEGV")
        tb = f"Signal {-code} ({sig}) received by PID {rr.pid}"
    else:
        tb = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return (
        f"[{idx}]:\n"
        f"  time      : {stamp}\n"
        f"  host      : {h.name}.cluster.local\n"
        f"  rank      : {r} (local_rank: {rr.local})\n"
        f"  exitcode  : {code} (pid: {rr.pid})\n"
        "  error_file: <N/A>\n"
        f"  traceback : {tb}"
    )


def rendezvous_lost(job: Job, h: Host, t: float) -> None:
    """The traceback of an agent whose rendezvous store (on node 0) went away."""
    lines = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/{_C10D_RDZV}", line 113, in _call_store',
        "    return getattr(self._store, store_op)(*args, **kwargs)",
        "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "torch.distributed.DistNetworkError: failed to recv, got 0 bytes",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        *_torchrun_tb(),
        f'  File "{SITE}/{_LAUNCHER_API}", line 261, in launch_agent',
        "    result = agent.run()",
        "             ^^^^^^^^^^^",
        f'  File "{SITE}/torch/distributed/elastic/metrics/api.py", line 138, in wrapper',
        "    result = f(*args, **kwargs)",
        "             ^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/{_AGENT_API}", line 711, in run',
        "    result = self._invoke_run(role)",
        "             ^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/{_AGENT_API}", line 906, in _invoke_run',
        "    num_nodes_waiting = rdzv_handler.num_nodes_waiting()",
        "                        ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/{_DYN_RDZV}", line 1263, in num_nodes_waiting',
        "    self._state_holder.sync()",
        f'  File "{SITE}/{_DYN_RDZV}", line 437, in sync',
        "    get_response = self._backend.get_state()",
        "                   ^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/{_C10D_RDZV}", line 75, in get_state',
        '    base64_state: bytes = self._call_store("get", self._key)',
        "                          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "{SITE}/{_C10D_RDZV}", line 115, in _call_store',
        "    raise RendezvousConnectionError(",
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection "
        "to the C10d store has failed. See inner exception for details.",
    ]
    agent_raw(job, h, t, "\n".join(lines))
