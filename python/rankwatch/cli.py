"""The `rankwatch` command."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import orjson

from rankwatch._core import prefer_huge_pages
from rankwatch.catalog_loader import Catalog, CatalogError
from rankwatch.engine import Engine, EngineConfig
from rankwatch.local import InputError, analyze_files
from rankwatch.report import Style, render_report
from rankwatch.safe_text import printable

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

REPORT_SCHEMA = "rankwatch.report/1"

# Commands that need neither the daemon nor the Kafka client: for these the parser is built
# without the daemon's subcommands, so that asyncio, aiokafka and the daemon are never imported.
LOCAL_COMMANDS = frozenset({"analyze", "catalog", "validate", "demo"})


# Under `run`, what a local command built and the process no longer needs: the process ends
# without freeing it (the engine state of a 16k-rank job takes about 0.1 s of CPU to free).
# None when `main` is called in-process (tests), where everything is freed as usual.
_LEFT_FOR_EXIT: list[object] | None = None


class UsageError(Exception):
    """Bad usage or input: printed as one line, exit status 2."""


def _load_catalog(paths: Sequence[str]) -> Catalog:
    try:
        return Catalog(paths)
    except CatalogError as e:
        raise UsageError(f"catalog: {e}") from None


def cmd_analyze(args: argparse.Namespace) -> int:
    from rankwatch.cli_inputs import find_inputs, say
    from rankwatch.flight_recorder.local import feed_job_dumps, given_dumps
    from rankwatch.inputs import DumpFile
    from rankwatch.local import feed_baseline

    if not args.paths and not args.flight_recorder:
        raise UsageError("give a PATH to analyze, or --flight-recorder PATH")
    # The job's lines are all held at once: huge pages spare the kernel most page faults.
    prefer_huge_pages()
    catalog = _load_catalog(args.catalog)
    cfg = EngineConfig(
        ring_lines=args.ring_lines,
        memory_budget_bytes=args.memory_budget_bytes,
        incident_horizon_ms=args.incident_horizon_ms,
    )
    dumps: list[DumpFile] = []
    files, skipped = (
        find_inputs(args.paths, args.job, args.rank_pattern, dumps=dumps)
        if args.paths
        else ([], [])
    )
    if args.flight_recorder:
        dumps += given_dumps(args.flight_recorder, args.job, files, dumps, say("skipped"))
        if not files and not dumps:
            raise InputError("--flight-recorder: no Flight Recorder dump found")
    engine = Engine(catalog, cfg)
    if _LEFT_FOR_EXIT is not None:
        _LEFT_FOR_EXIT.append(engine)
    if args.baseline:
        base_files, _ = find_inputs(args.baseline, "baseline", None, what="--baseline: ")
        feed_baseline(engine, base_files, on_error=say("skipped baseline"))
    fr = feed_job_dumps(
        engine,
        dumps,
        args.max_dump_bytes,
        on_problem=say("skipped Flight Recorder dump"),
        on_note=say("note:"),
        memory_bytes=args.memory_budget_bytes,
    )
    result = analyze_files(
        engine,
        files,
        progress=sys.stderr.isatty() and not args.quiet,
        on_error=say("skipped"),
        on_partial=say("partially read"),
        threads=args.threads,
    )
    if args.json:
        doc = {
            "schema": REPORT_SCHEMA,
            "diagnoses": result.diagnoses,
            "input": {
                "files": result.files,
                "bytes": result.bytes,
                "lines": result.lines,
                "truncated_lines": result.stats.get("truncated_lines", 0),
                "skipped": skipped + result.skipped,
                "partially_read": result.partial,
                "seconds": round(result.seconds, 3),
                "flight_recorder": fr.as_json(),
            },
        }
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        style = Style(color=sys.stdout.isatty() and "NO_COLOR" not in os.environ)
        jobs = sorted({printable(f.job) for f in files} | {printable(d.job) for d in dumps})
        dumps_read = f" and {fr.dumps} Flight Recorder dump(s)" if dumps else ""
        cut = int(str(result.stats.get("truncated_lines", 0)))
        cut_note = f" ({cut:,} cut at {cfg.max_line_bytes:,} bytes)" if cut else ""
        header = (
            f"rankwatch: {len(result.diagnoses)} incident(s) in job(s) {', '.join(jobs)}; "
            f"{result.lines:,} lines{cut_note} from {result.files} files{dumps_read} in "
            f"{result.seconds:.1f} s"
        )
        print(render_report(result.diagnoses, style, header, context_lines=args.context))
    return EXIT_OK


def cmd_catalog(args: argparse.Namespace) -> int:
    catalog = _load_catalog([*args.catalog, *getattr(args, "catalog_late", [])])
    if args.action == "list":
        for s in catalog.signatures():
            print(f"{s['id']:<40} {s['role']:<8} {s['subsystem']:<10} {s['title']}")
        print(f"{len(catalog)} signatures from {len(catalog.files)} files", file=sys.stderr)
        return EXIT_OK
    if args.action == "show":
        sig = catalog.signature(args.arg)
        if sig is None:
            raise UsageError(f"no signature with id {args.arg!r} (see `rankwatch catalog list`)")
        sys.stdout.buffer.write(orjson.dumps(sig, option=orjson.OPT_INDENT_2) + b"\n")
        return EXIT_OK
    result = catalog.test(args.arg)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
        return EXIT_OK
    # The line and what was taken from it are the user's text: escaped, so a control
    # character in it cannot clear the terminal or forge an output line.
    ident = {k: result[k] for k in ("host", "pid", "cuda_dev", "rank", "local_rank", "ts", "level")}
    print("message: " + printable(result["message"], limit=None))
    prefix = ", ".join(f"{k}={v}" for k, v in ident.items() if v is not None)
    print("prefix:  " + printable(prefix, limit=None))
    if not result["hits"]:
        print("no signature matched")
    for h in result["hits"]:
        fields = printable(", ".join(f"{k}={v}" for k, v in h["fields"].items()), limit=None)
        print(f"match:   {h['id']} ({h['role']}, weight {h['weight']}) {fields}")
    return EXIT_OK


def cmd_validate(args: argparse.Namespace) -> int:
    catalog = _load_catalog(args.catalog)
    print(f"catalog ok: {len(catalog)} signatures from {len(catalog.files)} files")
    if args.config:
        from rankwatch.settings.options import ConfigError
        from rankwatch.settings.run import validate_config

        try:
            cfg = validate_config(args.config)
        except ConfigError as e:
            raise UsageError(f"config: {e}") from None
        print(f"config ok: {len(cfg.input_topics())} input topic(s) -> {cfg.output_topic}")
        for topic in cfg.repartitioned_topics():
            print(f"  {topic} re-keyed by job through {cfg.repartition_topic(topic)}")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from rankwatch.demo import DemoError, run_demo

    try:
        return run_demo(
            port=args.port,
            settle_ms=args.settle_ms,
            timeout_s=args.timeout_s,
            bootstrap=args.bootstrap_servers,
        )
    except DemoError as e:
        raise UsageError(str(e)) from None


def package_version() -> str:
    """The installed distribution's version (the wheel's metadata), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rankwatch")
    except PackageNotFoundError:  # imported from a source tree that was never installed
        from rankwatch import __version__

        return __version__


class _VersionAction(argparse.Action):
    """`--version`: looked up only when asked, so that other commands do not pay for it."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS)
        self.help = "print rankwatch's version (and its Hyperscan's) and exit"

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from rankwatch import hyperscan_version

        print(f"rankwatch {package_version()} (Hyperscan {hyperscan_version().strip()})")
        parser.exit()


def build_parser(with_daemon: bool = True) -> argparse.ArgumentParser:
    from rankwatch.cli_parsing import (
        CONTEXT_LINES,
        COUNT,
        MEMORY_BYTES,
        SPAN_MS,
        THREADS,
        Parser,
        add_catalog_parser,
    )

    p = Parser(
        prog="rankwatch",
        description=(
            "Find the rank, host, GPU and line that started a distributed-training failure."
        ),
    )
    p.add_argument("--version", action=_VersionAction)
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("analyze", help="analyze local log files or folders (no upload)")
    a.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="log files or folders; Flight Recorder dumps among them are found by content",
    )
    a.add_argument(
        "--flight-recorder",
        action="append",
        default=[],
        metavar="PATH",
        help="PyTorch Flight Recorder dumps (file, folder or glob; repeatable), read as "
        "evidence beside the logs",
    )
    a.add_argument(
        "--max-dump-bytes",
        type=MEMORY_BYTES,
        default=256 << 20,
        metavar="BYTES",
        help="larger Flight Recorder dumps are reported and skipped",
    )
    a.add_argument("--job", help="treat all inputs as one job with this name")
    a.add_argument("--json", action="store_true", help="print rankwatch.report/1 JSON")
    a.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="PATH",
        help="logs of a healthy run: report the first line the failing process printed that "
        "the healthy run never did",
    )
    a.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="PATH",
        help="extra catalog file or folder (repeatable)",
    )
    a.add_argument(
        "--rank-pattern",
        metavar="REGEX",
        help="regex with (?P<rank>...) that finds the rank in a file path",
    )
    a.add_argument(
        "--context",
        type=CONTEXT_LINES,
        default=20,
        metavar="N",
        help="preceding lines to print per incident (JSON always has all)",
    )
    a.add_argument(
        "--ring-lines",
        type=COUNT,
        default=256,
        metavar="N",
        help="lines kept per process for the preceding-lines context (default 256)",
    )
    a.add_argument(
        "--memory-budget-bytes",
        type=MEMORY_BYTES,
        default=1 << 30,
        metavar="BYTES",
        help="memory the analysis may hold, in bytes (default 1073741824: 1 GiB)",
    )
    a.add_argument(
        "--incident-horizon-ms",
        type=SPAN_MS,
        default=20 * 60_000,
        metavar="MS",
        help="failure lines this close in time, in milliseconds, belong to one incident "
        "(default 1,200,000: 20 min)",
    )
    a.add_argument(
        "--threads",
        type=THREADS,
        default=0,
        metavar="N",
        help="threads that read, decode and scan the files (default 0: one per core; at most "
        "four per core are used); the result does not depend on it",
    )
    a.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    a.set_defaults(func=cmd_analyze)

    add_catalog_parser(sub, cmd_catalog)

    v = sub.add_parser("validate", help="validate the catalog (and config)")
    v.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="PATH",
        help="extra catalog file or folder to validate with the shipped one (repeatable)",
    )
    v.add_argument("--config", metavar="FILE", help="daemon config (TOML) to check")
    v.set_defaults(func=cmd_validate)

    if with_daemon:
        from rankwatch.alert.commands import register as register_alert
        from rankwatch.daemon.commands import register as register_daemon
        from rankwatch.simulate.command import register as register_simulate

        register_daemon(sub)
        register_alert(sub)
        register_simulate(sub)

    d = sub.add_parser("demo", help="end to end on a local Kafka: broker, daemon, a failing job")
    d.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="use this Kafka broker (fresh topics per run); default: start the dev broker of a "
        "source checkout",
    )
    d.add_argument("--port", type=int, default=19192, help="dev broker port")
    d.add_argument(
        "--settle-ms",
        type=int,
        default=3000,
        metavar="MS",
        help="the daemon's settle window, in milliseconds of log time (default 3000)",
    )
    d.add_argument(
        "--timeout-s",
        type=float,
        default=180.0,
        metavar="S",
        help="give up when no diagnosis came within this many seconds (default 180)",
    )
    d.set_defaults(func=cmd_demo)
    return p


def _local_command(argv: Sequence[str]) -> bool:
    """True when the first word is a local command or --version (the top level has no other
    options but -h)."""
    return bool(argv) and (argv[0] in LOCAL_COMMANDS or argv[0] == "--version")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(with_daemon=not _local_command(argv))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except (UsageError, InputError) as e:
        print(f"rankwatch: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("rankwatch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # a bug: say so plainly, without a traceback
        print(f"rankwatch: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        if os.environ.get("RANKWATCH_DEBUG"):
            raise
        return EXIT_FAILURE


def run() -> None:
    """The `rankwatch` command: `main`, then the process ends. After `analyze` it ends at
    once, once its output is flushed, without freeing the engine or tearing down the
    interpreter; every other command exits the usual way."""
    global _LEFT_FOR_EXIT
    _LEFT_FOR_EXIT = []
    code = main()
    if not _LEFT_FOR_EXIT:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        pass
    os._exit(code)


if __name__ == "__main__":
    run()
