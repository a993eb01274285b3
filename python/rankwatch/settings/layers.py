"""Where a command's values come from, in order, a later layer winning: the TOML file, the
environment, the flags. Each value is parsed and checked as its key's kind says
(`options.py`), and an error names the layer and key it came from."""

from __future__ import annotations

import tomllib
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from rankwatch.settings.options import (
    ConfigError,
    Options,
    check_value,
    flag_name,
    parse_text,
    suggest,
)


def read_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read config file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None
    return data


def layered_values(
    options: Options,
    path: str | Path | None,
    env: Mapping[str, str],
    env_names: Iterable[tuple[str, str]],
    overrides: Mapping[str, Any] | None,
    *,
    aliases: Mapping[str, str] | None = None,
    tables: Collection[str] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The values of `options` from the TOML file at `path`, then from the variables of
    `env_names` ((key, variable), a later one winning), then from `overrides` (typed values
    from flags). Earlier key names (`aliases`) are read as the current ones. Returns the
    values and the file's tables named in `tables`, which the command checks itself."""
    aliases = aliases or {}
    values: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    if path is not None:
        for name, value in read_toml(path).items():
            if name in tables:
                raw[name] = value
                continue
            key = aliases.get(name, name)
            if key not in options:
                raise ConfigError(f"{path}: unknown key {key!r}{suggest(key, [*options, *tables])}")
            values[key] = check_value(key, value, f"{path}: {key}", options)
    for key, name in env_names:
        if name in env:
            text = parse_text(key, env[name], name, options)
            values[key] = check_value(key, text, name, options)
    for name, value in (overrides or {}).items():
        key = aliases.get(name, name)
        if key not in options:
            raise ConfigError(f"unknown option {key!r}")
        values[key] = check_value(key, value, flag_name(key), options)
    return values, raw
