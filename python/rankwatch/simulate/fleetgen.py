"""Fleet log generator: the logs a failed (or healthy) PyTorch/NCCL job leaves behind.

``generate(scenario, out_dir, ...)`` writes the per-process log files of an N-rank torchrun
job in one of three layouts, plus ``truth.json`` naming the root-cause line (rank, host, the
exact line as written, the catalog signature id and the file it is in). Every line is built
from the real NCCL / c10 / torchelastic / excepthook formats described in
``shared/reference/nccl-messages.md`` and ``log-formats.md``; only hosts (``node-001`` ...),
addresses (``10.20.x.y``), pids, tids, bus ids and pointers are invented.

Model of the job (the same in every scenario):
  * one torchrun agent per host (TorchLogsFormatter lines, rendezvous, failure handling);
  * global rank = node_index * gpus_per_node + local_rank, cudaDev = local_rank;
  * two NCCL communicators per process: the default (global) one and a node-local one from
    ``dist.new_subgroups()`` (hybrid sharding). NCCL prints its version banner once per
    process, from the first communicator in which the process is rank 0, so the banner shows
    up on each host's local rank 0 only;
  * every host clock runs at true time + an offset drawn from [-skew_s, +skew_s]; every
    timestamp a process prints uses its host's clock. NCCL INFO lines carry no timestamp.

Failures follow the timing windows of nccl-messages.md section 3.2 item 9: watchdog timeouts
Timeout(ms)=600000 after the stuck collective was enqueued, SIGABRT about 60 s after the
timeout lines, IB retry-exceeded about 30 s after a link stops, the agent SIGTERMs the other
local workers when one exits, and when the agent that hosts the rendezvous store (node 0)
exits, the agents still running fail with ``RendezvousConnectionError``.

The package: `scenarios/` (one module per scenario and `REGISTRY`), `lines/` (how NCCL,
c10/Python, torchrun and the kernel format their lines; host clocks), `fleet` and `job` (hosts,
ranks, the culprit, the schedule; the state of a job being generated), `baseline` (a rank's
healthy life), `teardown` (agents reacting to exits, cascades), `layouts` (files) and `truth`.
This module is the public entry point and the command line.

CLI (`rankwatch simulate` wraps the same generator; see `rankwatch simulate --help`)::

    python -m rankwatch.simulate.fleetgen --scenario desync --ranks 64 --layout per-node --out DIR
    python -m rankwatch.simulate.fleetgen --all --ranks 64 --out DIR --check
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rankwatch.simulate.job import LAYOUTS, Job
from rankwatch.simulate.layouts import write
from rankwatch.simulate.lines.clock import BASE, START_MS
from rankwatch.simulate.lines.torchrun import agent_start
from rankwatch.simulate.scenarios import REGISTRY
from rankwatch.simulate.truth import Truth, check_truth, truth_of

__all__ = ["LAYOUTS", "SCENARIOS", "START_MS", "Truth", "check_truth", "generate", "main"]

SCENARIOS: tuple[str, ...] = tuple(REGISTRY)
_BASE = BASE  # the generator's logs print times without a year; tests take it from here


def generate(
    scenario: str,
    out_dir: Path,
    ranks: int = 64,
    gpus_per_node: int = 8,
    layout: str = "per-rank",
    skew_s: float = 5.0,
    seed: int = 0,
    steps: int = 20,
    job: str | None = None,
    line_times: dict[str, list[float]] | None = None,
) -> Truth:
    """Write the logs of one scenario into ``out_dir`` (plus ``truth.json``) and return the truth.

    Use an empty ``out_dir``: files of an earlier run with another layout are not removed.
    ``line_times``, when given, receives for each file written (its path relative to
    ``out_dir``) the true time of every line in it, in seconds after ``START_MS`` on the
    true clock (host clocks run at true time + ``host_offsets_s``): the moments a log
    shipper could read them, for feeding the lines as timed records.
    """
    spec = REGISTRY.get(scenario)
    if spec is None:
        raise ValueError(f"unknown scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    built = Job(spec, ranks, gpus_per_node, layout, skew_s, seed, steps, job)
    built.line_times = line_times
    for h in built.hosts:
        agent_start(built, h)
    spec.build(built)
    out_dir = Path(out_dir)
    write(built, out_dir)
    truth = truth_of(built)
    (out_dir / "truth.json").write_text(truth.to_json(), encoding="utf-8")
    return truth


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--scenario", choices=SCENARIOS)
    ap.add_argument("--all", action="store_true", help="every scenario into OUT/<scenario>/")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--layout", choices=LAYOUTS, default="per-rank")
    ap.add_argument("--skew-s", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--job", default=None)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--check", action="store_true", help="verify truth.json against the files")
    args = ap.parse_args(argv)
    if not args.all and not args.scenario:
        ap.error("give --scenario or --all")
    todo = list(SCENARIOS) if args.all else [args.scenario]
    rc = 0
    for sc in todo:
        out = args.out / sc if args.all else args.out
        t0 = time.perf_counter()
        truth = generate(
            sc,
            out,
            ranks=args.ranks,
            gpus_per_node=args.gpus_per_node,
            layout=args.layout,
            skew_s=args.skew_s,
            seed=args.seed,
            steps=args.steps,
            job=args.job,
        )
        dt = time.perf_counter() - t0
        rcause = truth.root_cause
        where = f"rank {rcause['rank']} {rcause['host']} {rcause['file']}" if rcause else "-"
        print(f"{sc:18s} {args.layout:16s} {args.ranks:6d} ranks {dt:7.2f}s  root: {where}")
        if args.check:
            for p in check_truth(out, truth):
                print(f"    {p}")
                if not p.startswith("note:"):
                    rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
