"""The `rankwatch alert` subcommand: flags for every key of `AlertConfig` (the same scheme as
`rankwatch run`), errors as one line, exit status 2 for bad configuration, 1 when it cannot go
on. aiohttp and aiokafka are imported only when the command runs."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from rankwatch.alert.config import ALIASES, OPTIONS, env_name, load_alert_config
from rankwatch.daemon.config import BOOL, CHOICE, INT, LIST, ConfigError, flag_help, flag_name
from rankwatch.daemon.logs import setup_logging

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def _add_flags(p: argparse.ArgumentParser) -> None:
    for key, f in OPTIONS.items():
        meta = f.metadata
        kw: dict[str, Any] = {
            "dest": key,
            "default": argparse.SUPPRESS,
            "help": flag_help(meta, env_name(key)),
        }
        if meta["metavar"]:
            kw["metavar"] = meta["metavar"]
        if meta["kind"] == INT:
            kw.update(type=int, metavar=meta["metavar"] or ("MS" if key.endswith("_ms") else "N"))
        elif meta["kind"] == BOOL:
            kw["action"] = argparse.BooleanOptionalAction
        elif meta["kind"] == LIST:
            kw["action"] = "append"
        elif meta["kind"] == CHOICE:
            kw["choices"] = meta["choices"]
        aliases = [flag_name(old) for old, new in ALIASES.items() if new == key]
        p.add_argument(flag_name(key), *aliases, **kw)


def cmd_alert(args: argparse.Namespace) -> int:
    from rankwatch.alert.service import AlertError, AlertService

    overrides = {k: getattr(args, k) for k in OPTIONS if hasattr(args, k)}
    try:
        cfg = load_alert_config(args.config, overrides=overrides)
    except ConfigError as e:
        print(f"rankwatch: {e}", file=sys.stderr)
        return EXIT_USAGE
    setup_logging(cfg.log_level)
    logging.getLogger("rankwatch.alert").debug("config: %s", cfg.describe())

    async def run(service: AlertService) -> None:
        service.install_signal_handlers()
        await service.run()

    try:
        asyncio.run(run(AlertService(cfg)))
    except AlertError as e:
        print(f"rankwatch: {e}", file=sys.stderr)
        return EXIT_FAILURE
    return EXIT_OK


def register(subparsers: Any) -> None:
    """Adds `alert` to the `rankwatch` subcommand parsers."""
    p = subparsers.add_parser(
        "alert",
        help="deliver diagnoses to Alertmanager, PagerDuty and webhooks; serve incident pages",
        description=(
            "Read the diagnoses topic as its own consumer group and deliver each diagnosis to "
            "the configured sinks (offsets are committed after the sinks accepted it), and "
            "serve /incidents. Every option can be set in the TOML file (--config), as "
            "RANKWATCH_<KEY> in the environment, or as a flag; flags win, then the "
            "environment, then the file."
        ),
    )
    p.add_argument("--config", metavar="FILE", help="TOML config file")
    _add_flags(p)
    p.set_defaults(func=cmd_alert)
