"""`python -m rankwatch.daemon run|replay|stats ...`: the daemon commands on their own."""

from __future__ import annotations

import argparse
import sys

from rankwatch.daemon.commands import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rankwatch")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
