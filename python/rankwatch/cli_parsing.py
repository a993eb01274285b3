"""Command-line parsing pieces: a parser whose errors are one line and exit status 2, and
integer options checked against the range the engine can take."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line, `rankwatch: error: ...`, and exit status 2
    (subcommand parsers inherit the class)."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"rankwatch: error: {message} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_USAGE)


def bounded_int(minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse `type` for an integer in [minimum, maximum], with a message that says so."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"must be between {minimum:,} and {maximum:,}, got {text[:40]!r}"
            )
        return value

    parse.__name__ = "integer"
    return parse


COUNT = bounded_int(1, 1_000_000)
CONTEXT_LINES = bounded_int(0, 1_000_000)
MEMORY_BYTES = bounded_int(1 << 16, 1 << 50)
THREADS = bounded_int(0, 4096)
# Ten years: far above any incident, far below where event-time arithmetic could overflow.
SPAN_MS = bounded_int(1, 10 * 365 * 86_400_000)


def add_catalog_parser(
    sub: argparse._SubParsersAction[Parser], command: Callable[[argparse.Namespace], int]
) -> None:
    """`rankwatch catalog list|show ID|test LINE`, its options before or after the action."""
    c = sub.add_parser("catalog", help="list, show or test signatures")
    c.add_argument(
        "--catalog",
        action="append",
        default=[],
        metavar="PATH",
        help="extra catalog file or folder (repeatable)",
    )
    c.add_argument("--json", action="store_true", help="print JSON (show, test)")
    c.set_defaults(func=command)
    # The options are accepted after the action too (`catalog test --catalog F LINE`).
    late = Parser(add_help=False)
    late.add_argument(
        "--catalog",
        action="append",
        dest="catalog_late",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="extra catalog file or folder (repeatable)",
    )
    late.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON (show, test)"
    )
    actions = c.add_subparsers(dest="action", required=True, metavar="{list,show,test}")
    actions.add_parser("list", parents=[late], help="every signature, one a line")
    show = actions.add_parser("show", parents=[late], help="one signature as JSON")
    show.add_argument("arg", metavar="ID", help="signature id")
    test = actions.add_parser("test", parents=[late], help="peel and classify one log line")
    test.add_argument("arg", metavar="LINE", help="a log line")
