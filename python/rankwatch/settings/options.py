"""The scheme every rankwatch command's configuration follows: one TOML file,
`RANKWATCH_<KEY>` environment overrides and a flag per key (flags win over the environment,
which wins over the file). A command declares its keys as dataclass fields made by `option()`
(their metadata: help, kind, minimum, choices, secret); this module parses text into values of
a kind, checks values, and names flags and variables. Errors are `ConfigError`s naming where the
bad value came from; a secret's value is never shown in one."""

# Hand-written, not pydantic-settings (measured for issue 25 item 2; 2 shared cores, medians
# of 9-11 runs): importing pydantic-settings 2.16 / pydantic 2.14 takes about 180 ms more than
# this scheme (rankwatch.settings.run + alert.config: 66 ms; a pydantic-settings AlertConfig:
# 185 ms), and it imports asyncio, which `analyze` must not (tests/unit/test_startup.py).
# `rankwatch run --help` went from 191 to 297 ms, `analyze` on a 16-rank folder from 130 to
# 224-244 ms (grep -F: 2 ms). The prototype of alert/config.py was longer, 274 lines against
# 261, before flags or strict types: pydantic-settings merges the layers before validating,
# so naming a bad value's layer (file: key, RANKWATCH_X, --flag) took sources of its own plus
# a translation of pydantic's errors into these messages; in lax mode it takes
# `sink_attempts = true`, "5" or 5.0 from the file, and strict mode refuses the environment's
# text unless pydantic-settings' own env source (which loses the layer) reads it. SecretStr
# would also change what `cfg.sasl_password` is.

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import field
from typing import Any

import orjson

ENV_PREFIX = "RANKWATCH_"
LOG_LEVELS = ("debug", "info", "warning", "error")

# The declared keys of one command: name -> dataclass field made by `option()`.
Options = Mapping[str, dataclasses.Field[Any]]


class ConfigError(ValueError):
    """The configuration is invalid; the message names where the bad value came from."""


# Kinds of values: how text (env, flags) is parsed and how values are checked.
STR, OPT_STR, INT, BOOL, LIST, PATH, CHOICE, ADDR, AUTO_BOOL = (
    "str",
    "opt_str",
    "int",
    "bool",
    "list",
    "path",
    "choice",
    "addr",
    "auto_bool",  # true, false, or "auto": decided at run time
)
AUTO = "auto"


def option(
    default: Any,
    help: str,
    *,
    kind: str = STR,
    minimum: int | None = None,
    choices: tuple[str, ...] = (),
    secret: bool = False,
    metavar: str | None = None,
) -> Any:
    meta = {
        "help": help,
        "kind": kind,
        "minimum": minimum,
        "choices": choices,
        "secret": secret,
        "metavar": metavar,
    }
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, repr=not secret, metadata=meta)


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper()


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def flag_help(meta: Mapping[str, Any], env: str) -> str:
    """An option's help with the variable that sets it; a secret's says to prefer that, since
    a flag's value shows in `ps` to every user of the host."""
    if meta["secret"]:
        return f"{meta['help']} [{env}: prefer it, or the config file; a flag shows in ps]"
    return f"{meta['help']} [{env}]"


# --- parsing values -------------------------------------------------------------------------


def suggest(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parse_text(key: str, text: str, where: str, options: Options) -> Any:
    """Turns the text of an environment variable or flag into a value of the key's kind
    (`options`: the keys of the command)."""
    kind = options[key].metadata["kind"]
    if kind == INT:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{where}: expected an integer, got {text!r}") from None
    if kind == AUTO_BOOL and text.strip().lower() == AUTO:
        return AUTO
    if kind in (BOOL, AUTO_BOOL):
        low = text.strip().lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true or false, got {text!r}")
    if kind == LIST:
        return [t.strip() for t in text.split(",") if t.strip()]
    if kind == PATH:
        return parse_path(text, where)
    if text == "" and options[key].default is None:
        return None
    return text


def parse_path(text: str, where: str) -> list[str]:
    """A field path: a JSON list of keys, or a dotted path when no key contains a dot."""
    text = text.strip()
    if text.startswith("["):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise ConfigError(f"{where}: not a JSON list of keys: {text!r}") from None
        return check_path(value, where)
    return check_path(text.split("."), where)


def check_path(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(k, str) and k for k in value):
        raise ConfigError(f"{where}: a field path is a non-empty list of keys, got {value!r}")
    return list(value)


def shown(key: str, value: Any, options: Options) -> str:
    """A value as an error message may show it: secrets only by their type."""
    if options[key].metadata["secret"]:
        return f"a value of type {type(value).__name__} (not shown: a secret)"
    return repr(value)


def check_value(key: str, value: Any, where: str, options: Options) -> Any:
    """Type- and range-checks one value (from any source); returns it normalised."""
    meta = options[key].metadata
    kind = meta["kind"]
    if kind == INT:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {shown(key, value, options)}")
        minimum = meta["minimum"]
        if minimum is not None and value < minimum:
            raise ConfigError(f"{where}: must be at least {minimum:,}, got {value:,}")
        return value
    if kind == BOOL or (kind == AUTO_BOOL and value != AUTO):
        if not isinstance(value, bool):
            expected = "true or false" + (' or "auto"' if kind == AUTO_BOOL else "")
            raise ConfigError(f"{where}: expected {expected}, got {shown(key, value, options)}")
        return value
    if kind == AUTO_BOOL:
        return value
    if kind == LIST:
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise ConfigError(
                f"{where}: expected a list of non-empty strings, got {shown(key, value, options)}"
            )
        return list(value)
    if kind == PATH:
        if value is None:
            return None
        return check_path(value, where)
    if value is None and kind in (OPT_STR, CHOICE):
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {shown(key, value, options)}")
    if kind == CHOICE and value not in meta["choices"]:
        raise ConfigError(
            f"{where}: {shown(key, value, options)} is not one of {', '.join(meta['choices'])}"
        )
    if kind == ADDR:
        check_addr(value, where)
    if kind == STR and not value.strip():
        raise ConfigError(f"{where}: must not be empty")
    return value


def check_addr(value: str, where: str) -> None:
    if value == "off":
        return
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{where}: expected host:port or 'off', got {value!r}")
