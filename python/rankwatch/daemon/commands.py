"""The `run`, `replay` and `stats` subcommands. `register(subparsers)` adds them to the
`rankwatch` parser; each command prints errors as one line and returns 2 for bad usage or
configuration, 1 when Kafka fails, 0 otherwise. The Kafka client and the daemon are imported
only when one of these commands runs, so other commands start as fast as before."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import sys
from typing import Any

import orjson

from rankwatch.daemon.allocator import avoid_huge_pages, fix_thresholds, limit_arenas
from rankwatch.inputs import InputError
from rankwatch.logging_setup import quiet_kafka, setup_logging
from rankwatch.settings.connection import CONNECTION_KEYS
from rankwatch.settings.flags import add_option_flags, flag_values
from rankwatch.settings.options import ConfigError, env_name
from rankwatch.settings.run import (
    OPTIONS,
    DaemonConfig,
    connection_config,
    load_catalog,
    load_config,
)

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _error(message: str, code: int) -> int:
    print(f"rankwatch: {message}", file=sys.stderr)
    return code


# --- run ----------------------------------------------------------------------------------


def tune_gc() -> None:
    """Every fetched record is a few container objects (aiokafka's ConsumerRecord and its
    attribute dict) that live until their batch was fed. With the default thresholds the cyclic
    collector runs dozens of times per batch and, as those objects age, walks the whole heap
    (a tenth of the event loop's time in a profile). The daemon makes no reference cycles per
    record: objects from start-up are frozen out of collection, and collections are rarer."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def cmd_run(args: argparse.Namespace) -> int:
    from rankwatch.daemon.service import Daemon, DaemonError

    async def run(daemon: Daemon) -> None:
        daemon.install_signal_handlers()
        await daemon.run()

    try:
        cfg = load_config(args.config, overrides=flag_values(args, OPTIONS))
        catalog = load_catalog(cfg)
    except ConfigError as e:
        return _error(str(e), EXIT_USAGE)
    setup_logging(cfg.log_level)
    logging.getLogger("rankwatch.daemon").debug("config: %s", cfg.describe())
    tune_gc()
    limit_arenas()  # before the engine and event-loop threads allocate
    fix_thresholds()
    avoid_huge_pages()
    try:
        asyncio.run(run(Daemon(cfg, catalog)))
    except DaemonError as e:
        return _error(str(e), EXIT_FAILURE)
    return EXIT_OK


# --- replay ---------------------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    from rankwatch.cli_inputs import find_inputs, say
    from rankwatch.kafka.clients import connection_kwargs
    from rankwatch.kafka.replay import ReplayFailed, replay_files
    from rankwatch.settings.run import check_topic_name

    if args.rate is not None and not 0 < args.rate < float("inf"):
        return _error("--rate must be a positive number of lines per second", EXIT_USAGE)
    if args.skip_records < 0:
        return _error("--skip-records must be 0 or more", EXIT_USAGE)
    try:
        check_topic_name(args.topic, "--topic")
        cfg = connection_config(args)
        files, _ = find_inputs(args.paths, args.job, args.rank_pattern)
    except (ConfigError, InputError) as e:
        return _error(f"error: {e}", EXIT_USAGE)
    quiet_kafka()
    try:
        result = asyncio.run(
            replay_files(
                files,
                args.topic,
                connection_kwargs(cfg),
                rate=args.rate,
                on_error=say("skipped"),
                skip=args.skip_records,
            )
        )
    except ReplayFailed as e:
        return _error(
            f"replay to {args.topic} at {cfg.bootstrap_servers} failed after {e.sent:,} "
            f"records: {e.cause!r}; the first {e.acknowledged:,} are on the topic, and up to "
            f"{e.sent - e.acknowledged:,} after them were in flight (the broker may still "
            f"write them): run again with --skip-records {e.acknowledged} to send the rest "
            f"(only records that were in flight can arrive twice)",
            EXIT_FAILURE,
        )
    except KafkaError as e:
        return _error(f"replay to {args.topic} at {cfg.bootstrap_servers} failed: {e}", 1)
    skipped = f" (skipped the first {result.skipped:,})" if result.skipped else ""
    print(
        f"sent {result.records:,} records ({result.bytes:,} bytes) from {result.files} file(s) "
        f"of {result.jobs} job(s) to {args.topic} in {result.seconds:.2f} s{skipped}"
    )
    return EXIT_OK


# --- stats ----------------------------------------------------------------------------------


class NoSuchTopic(Exception):
    """The diagnoses topic is not there: no statistics rather than an empty fleet."""


class NotDiagnoses(Exception):
    """The topic holds records and none is a diagnosis: most likely the log topic."""


async def _fleet(
    cfg: DaemonConfig, topic: str, since_ms: int | None, buckets: int
) -> dict[str, Any]:
    from rankwatch.daemon.stats import read_topic, topic_stats
    from rankwatch.kafka.clients import reader_consumer
    from rankwatch.kafka.tail import topic_partitions

    reader = reader_consumer(cfg)
    try:
        await reader.start()
        if not await topic_partitions(reader, topic):
            raise NoSuchTopic(f"topic {topic} does not exist at {cfg.bootstrap_servers}")
        read = await read_topic(reader, topic)
    finally:
        await reader.stop()
    if read.records and read.not_diagnoses == read.records:
        raise NotDiagnoses(
            f"none of the {read.records} record(s) on {topic} is a rankwatch diagnosis: "
            "stats reads the diagnoses topic (rankwatch run's output_topic), not the log topic"
        )
    return topic_stats(read, since_ms=since_ms, buckets=buckets)


def cmd_stats(args: argparse.Namespace) -> int:
    from aiokafka.errors import KafkaError

    from rankwatch.daemon.stats import SinceError, parse_since, render_stats

    if args.buckets < 1:
        return _error("--buckets must be at least 1", EXIT_USAGE)
    try:
        cfg = connection_config(args)
        since_ms = parse_since(args.since) if args.since else None
    except (ConfigError, SinceError) as e:
        return _error(str(e), EXIT_USAGE)
    topic = args.topic or cfg.output_topic
    quiet_kafka()
    try:
        stats = asyncio.run(_fleet(cfg, topic, since_ms, args.buckets))
    except (NoSuchTopic, NotDiagnoses) as e:
        return _error(f"error: {e}", EXIT_FAILURE)
    except KafkaError as e:
        return _error(f"reading {topic} at {cfg.bootstrap_servers} failed: {e}", EXIT_FAILURE)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(stats, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(render_stats(stats))
    return EXIT_OK


# --- registration ---------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Adds `run`, `replay` and `stats` to the `rankwatch` subcommand parsers."""
    r = subparsers.add_parser(
        "run",
        help="run the Kafka daemon (one consumer-group member)",
        description=(
            "Consume log records from Kafka, diagnose failing jobs, publish diagnoses. Every "
            "option can be set in the TOML file (--config), as RANKWATCH_<KEY> in the "
            "environment, or as a flag; flags win, then the environment, then the file. "
            "A record's job comes from its value, then the job header, then the record key; "
            "the whole key is the job name (so `sweep/2` or `1234/7` stay one job) unless "
            "key_format is job/rank, which reads a number after the last / as the rank. "
            "One daemon must see all of a job: records not partitioned by job (unkeyed, as "
            "Fluent Bit and Vector send them) need repartition = true for their topic, which "
            "re-keys them by job through the internal topic <group_id>-repartition-<topic>."
        ),
    )
    r.add_argument("--config", metavar="FILE", help="TOML config file")
    add_option_flags(r, OPTIONS, env_name)
    r.set_defaults(func=cmd_run)

    p = subparsers.add_parser(
        "replay",
        help="load log files into a Kafka topic as records",
        description=(
            "Send log files to a topic as canonical records keyed by job, lines of all files "
            "interleaved; Kafka timestamps are now, line times are read by the engine."
        ),
    )
    p.add_argument("paths", nargs="+", metavar="FILE")
    p.add_argument("--topic", required=True, help="topic to write to")
    p.add_argument("--job", help="treat all inputs as one job with this name")
    p.add_argument("--rate", type=float, metavar="LINES_PER_S", help="send at most this fast")
    p.add_argument(
        "--skip-records",
        type=int,
        default=0,
        metavar="N",
        help="do not send the first N records: after a failed run, the N it reported as "
        "acknowledged (the order is the same for the same files), so nothing is sent twice",
    )
    p.add_argument(
        "--rank-pattern",
        metavar="REGEX",
        help="regex with (?P<rank>...) that finds the rank in a file path",
    )
    p.add_argument("--config", metavar="FILE", help="TOML config file (connection settings)")
    add_option_flags(p, OPTIONS, env_name, keys=CONNECTION_KEYS)
    p.set_defaults(func=cmd_replay)

    s = subparsers.add_parser(
        "stats",
        help="fleet statistics from the diagnoses topic",
        description=(
            "Read the diagnoses topic and count incidents by signature, subsystem and host; "
            "hosts that initiated incidents in two or more jobs are suspect nodes (the rule "
            "and the counting of the daemon's rankwatch_suspect_host_jobs metric). An incident "
            "counts at the time its first diagnosis was published."
        ),
    )
    s.add_argument("--topic", help="diagnoses topic (default: output_topic of the config)")
    s.add_argument(
        "--since",
        metavar="WHEN",
        help="only incidents first published since then: a duration ago (30m, 24h, 7d) or an "
        "ISO time; the daemon's suspect window is --suspect-window-ms (default 24h)",
    )
    s.add_argument(
        "--buckets",
        type=int,
        default=8,
        metavar="N",
        help="trend buckets per signature and host over the window (default 8)",
    )
    s.add_argument("--json", action="store_true", help="print rankwatch.fleet-stats/1 JSON")
    s.add_argument("--config", metavar="FILE", help="TOML config file (connection settings)")
    add_option_flags(s, OPTIONS, env_name, keys=CONNECTION_KEYS)
    s.set_defaults(func=cmd_stats)
