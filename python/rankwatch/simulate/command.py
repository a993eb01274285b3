"""`rankwatch simulate`: generate a job's logs (one scenario, with its ground truth) into a
folder, or replay them straight into a Kafka topic to exercise a running pipeline."""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path
from typing import Any

from rankwatch.simulate.fleetgen import LAYOUTS, SCENARIOS, Truth, generate
from rankwatch.simulate.scenarios import REGISTRY

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _error(message: str, code: int) -> int:
    print(f"rankwatch: {message}", file=sys.stderr)
    return code


def _generate(args: argparse.Namespace, out: Path) -> Truth:
    return generate(
        args.scenario,
        out,
        ranks=args.ranks,
        gpus_per_node=args.gpus_per_node,
        layout=args.layout,
        skew_s=args.skew_s,
        seed=args.seed,
        steps=args.steps,
        job=args.job,
    )


def describe(truth: Truth) -> str:
    rc = truth.root_cause
    if rc is None:
        return f"job {truth.job}: {truth.scenario}, {truth.ranks} ranks, no failure injected"
    return (
        f"job {truth.job}: {truth.scenario}, {truth.ranks} ranks; injected root cause: rank "
        f"{rc['rank']} on {rc['host']} ({rc['signature']}) in {rc['file']}"
    )


def _replay(args: argparse.Namespace, folder: Path, job: str) -> int:
    from aiokafka.errors import KafkaError

    from rankwatch.kafka.clients import connection_kwargs
    from rankwatch.kafka.replay import replay_files
    from rankwatch.local import discover
    from rankwatch.logging_setup import quiet_kafka
    from rankwatch.settings.options import ConfigError
    from rankwatch.settings.run import connection_config

    try:
        cfg = connection_config(args)
    except ConfigError as e:
        return _error(str(e), EXIT_USAGE)
    files, _ = discover([folder], job=job)
    files = [f for f in files if f.path.name != "truth.json"]
    quiet_kafka()
    try:
        result = asyncio.run(replay_files(files, args.topic, connection_kwargs(cfg)))
    except KafkaError as e:
        return _error(f"replay to {args.topic} at {cfg.bootstrap_servers} failed: {e}", 1)
    print(f"sent {result.records:,} records from {result.files} file(s) to {args.topic}")
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    if args.list:
        width = max(map(len, SCENARIOS))
        print("\n".join(f"{name:<{width}}  {REGISTRY[name].about}" for name in SCENARIOS))
        return EXIT_OK
    if args.scenario is None:
        return _error("simulate needs a SCENARIO (see --list)", EXIT_USAGE)
    if (args.out is None) == (args.topic is None):
        return _error("give exactly one of --out DIR and --topic TOPIC", EXIT_USAGE)
    if args.ranks < 2 or args.gpus_per_node < 1 or args.steps < 1:
        return _error("--ranks must be >= 2, --gpus-per-node and --steps >= 1", EXIT_USAGE)
    args.job = args.job or f"sim-{args.scenario}"
    if args.out is not None:
        out = Path(args.out)
        if out.exists() and any(out.iterdir()):
            return _error(f"{out}: not empty (simulate writes into an empty folder)", EXIT_USAGE)
        try:
            truth = _generate(args, out)
        except OSError as e:
            return _error(f"writing {out} failed: {e.strerror}", EXIT_FAILURE)
        print(describe(truth))
        print(f"logs and truth.json in {out}")
        return EXIT_OK
    with tempfile.TemporaryDirectory(prefix="rankwatch-simulate-") as tmp:
        truth = _generate(args, Path(tmp))
        print(describe(truth))
        return _replay(args, Path(tmp), args.job)


def register(subparsers: Any) -> None:
    from rankwatch.settings.connection import CONNECTION_KEYS
    from rankwatch.settings.flags import add_option_flags
    from rankwatch.settings.options import env_name
    from rankwatch.settings.run import OPTIONS

    s = subparsers.add_parser(
        "simulate",
        help="generate a failing (or healthy) job's logs into a folder or a Kafka topic",
        description=(
            "Write the logs an N-rank torchrun/NCCL job leaves behind in one failure scenario "
            "(or a healthy run), with truth.json naming the injected root cause; or replay "
            "them into a Kafka topic to test a running pipeline end to end."
        ),
    )
    s.add_argument("scenario", nargs="?", choices=SCENARIOS, metavar="SCENARIO")
    s.add_argument("--list", action="store_true", help="list the scenarios, what each injects")
    s.add_argument("--out", metavar="DIR", help="write the logs into this (empty) folder")
    s.add_argument("--topic", help="replay the logs into this Kafka topic instead")
    s.add_argument("--job", help="job name (default sim-SCENARIO)")
    s.add_argument(
        "--ranks", type=int, default=64, metavar="N", help="ranks in the job (default 64)"
    )
    s.add_argument(
        "--gpus-per-node", type=int, default=8, metavar="N", help="ranks per host (default 8)"
    )
    s.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="per-node",
        help="one log file per rank, one per host, or torchrun's --log-dir tree (default per-node)",
    )
    s.add_argument(
        "--skew-s",
        type=float,
        default=5.0,
        metavar="S",
        help="host clocks are off by up to this many seconds (default 5)",
    )
    s.add_argument(
        "--seed", type=int, default=0, help="the same seed gives the same logs (default 0)"
    )
    s.add_argument(
        "--steps",
        type=int,
        default=20,
        metavar="N",
        help="training steps before the failure, or in all for a healthy run (default 20)",
    )
    s.add_argument("--config", metavar="FILE", help="TOML config file (connection settings)")
    add_option_flags(s, OPTIONS, env_name, keys=CONNECTION_KEYS)
    s.set_defaults(func=cmd_simulate)
