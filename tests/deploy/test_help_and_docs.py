"""Help and docs (issue 26, item 6): every option of every subcommand says what it does,
`simulate --list` says what each scenario injects, and the README's Layout table names only
paths that exist."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rankwatch.cli import build_parser, main
from rankwatch.simulate.fleetgen import SCENARIOS

ROOT = Path(__file__).resolve().parents[2]


def options(parser: argparse.ArgumentParser, path: str) -> Iterator[tuple[str, argparse.Action]]:
    """(command, option) for every option of `parser` and of its subcommands, all the way down."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, f"{path} {name}")
        elif action.option_strings:
            yield path, action


def test_every_option_of_every_command_has_help() -> None:
    bare = [
        f"{command} {action.option_strings[-1]}"
        for command, action in options(build_parser(), "rankwatch")
        if not (action.help or "").strip()
    ]
    assert bare == []


def test_options_with_a_unit_in_their_name_take_a_value_named_for_it() -> None:
    """`--x-ms MS`, `--x-s S`, `--x-bytes BYTES`: the unit is in the name or the help."""
    units = {"_ms": "MS", "_s": "S", "_bytes": "BYTES"}
    unclear = []
    for command, action in options(build_parser(), "rankwatch"):
        for suffix, metavar in units.items():
            named = action.dest.endswith(suffix) and action.nargs != 0
            if named and action.metavar not in (metavar, "N") and suffix not in str(action.help):
                unclear.append(f"{command} {action.option_strings[-1]} ({action.metavar})")
    assert unclear == []


def test_simulate_list_describes_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(SCENARIOS)
    for line in lines:
        name, _, about = line.partition(" ")
        assert len(about.strip()) > 20, f"{name} has no description"


def layout_paths(readme: str) -> list[str]:
    """The paths the README's Layout table names; a bare file name is in the folder of the
    path named before it in the same cell (`a/b.rs`, `c.rs` is a/c.rs)."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    paths = []
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        folder = ""
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if "/" in name.rstrip("/"):
                folder = name.rsplit("/", 1)[0] if not name.endswith("/") else ""
                paths.append(name)
            else:
                paths.append(f"{folder}/{name}" if folder else name)
    return paths


def test_the_readme_layout_names_only_paths_that_exist() -> None:
    paths = layout_paths((ROOT / "README.md").read_text())
    assert len(paths) > 20
    assert [p for p in paths if not (ROOT / p).exists()] == []
