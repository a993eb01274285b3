"""Command-line flags for the keys of a command's configuration (`rankwatch.settings.options`):
one flag per key, `--key-name`, whose help names the variable that also sets it; and the
values given on the command line as typed overrides for the command's loader."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any

from rankwatch.settings.options import (
    AUTO_BOOL,
    BOOL,
    CHOICE,
    INT,
    LIST,
    PATH,
    Options,
    flag_help,
    flag_name,
    parse_path,
    parse_text,
)


def _flag_kwargs(key: str, options: Options, env: str) -> dict[str, Any]:
    meta = options[key].metadata
    kind = meta["kind"]
    kw: dict[str, Any] = {"dest": key, "default": argparse.SUPPRESS, "help": flag_help(meta, env)}
    if meta["metavar"]:
        kw["metavar"] = meta["metavar"]
    if kind == INT:
        kw.update(type=int, metavar=meta["metavar"] or ("MS" if key.endswith("_ms") else "N"))
    elif kind == BOOL:
        kw["action"] = argparse.BooleanOptionalAction
    elif kind == AUTO_BOOL:
        kw.update(nargs="?", const=True, metavar="auto|true|false")
        kw["type"] = partial(parse_text, key, where=flag_name(key), options=options)
    elif kind == LIST:
        kw["action"] = "append"
    elif kind == CHOICE:
        kw["choices"] = meta["choices"]
    elif kind == PATH:
        kw["metavar"] = "KEYS"
    return kw


def add_option_flags(
    parser: argparse.ArgumentParser,
    options: Options,
    env_name: Callable[[str], str],
    *,
    keys: Collection[str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> None:
    """Adds a flag for each key of `options` (only those in `keys` when given); `env_name`
    names a key's variable; `aliases` maps earlier key names to current ones, each of which
    also gets the earlier name's flag."""
    for key in options:
        if keys is not None and key not in keys:
            continue
        old = [flag_name(a) for a, new in (aliases or {}).items() if new == key]
        parser.add_argument(flag_name(key), *old, **_flag_kwargs(key, options, env_name(key)))


def flag_values(args: argparse.Namespace, options: Options) -> dict[str, Any]:
    """The keys given as flags, with their values (a field path parsed into its keys)."""
    out: dict[str, Any] = {}
    for key, f in options.items():
        if not hasattr(args, key):
            continue
        value = getattr(args, key)
        if f.metadata["kind"] == PATH and isinstance(value, str):
            value = parse_path(value, flag_name(key))
        out[key] = value
    return out
