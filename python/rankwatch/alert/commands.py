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
from rankwatch.logging_setup import setup_logging
from rankwatch.settings.flags import add_option_flags
from rankwatch.settings.options import ConfigError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


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
    add_option_flags(p, OPTIONS, env_name, aliases=ALIASES)
    p.set_defaults(func=cmd_alert)
