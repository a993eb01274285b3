"""The compiled-database cache: warm loads come from disk and classify exactly as a fresh
compile does; a damaged, stale or unwritable cache never breaks loading."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankwatch import Catalog
from rankwatch.cli import main

LINES = [
    "node12:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable",
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "an ordinary line that no signature knows",
]


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("RANKWATCH_CACHE_DIR", str(d))
    return d


def classify(catalog: Catalog) -> list[list[str]]:
    return [[h["id"] for h in catalog.test(line)["hits"]] for line in LINES]


def test_second_load_comes_from_the_cache_and_classifies_the_same(cache_dir: Path) -> None:
    cold = Catalog()
    assert cold.database_origin == "compiled"
    assert cold.cache_path is not None and cold.cache_path.parent == cache_dir
    assert cold.cache_path.is_file()
    warm = Catalog()
    assert warm.database_origin == "cache"
    assert warm.ids() == cold.ids()
    hits = classify(warm)
    assert hits[0] and hits[1] and not hits[2]
    assert hits == classify(Catalog(use_cache=False))


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "empty"])
def test_damaged_cache_file_is_ignored_and_replaced(cache_dir: Path, damage: str) -> None:
    path = Catalog().cache_path
    assert path is not None
    good = path.read_bytes()
    damaged = {
        "garbage": b"not a database at all",
        "truncated": good[: len(good) // 2],
        "flipped": good[:-1] + bytes([good[-1] ^ 0xFF]),
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    catalog = Catalog()
    assert catalog.database_origin == "compiled"
    assert classify(catalog) == classify(Catalog(use_cache=False))
    assert path.read_bytes() == good
    assert Catalog().database_origin == "cache"


def test_edited_user_catalog_is_not_served_a_stale_database(
    cache_dir: Path, tmp_path: Path
) -> None:
    user = tmp_path / "mine.toml"
    template = """
[[signature]]
id = "my_marker"
title = "site marker"
subsystem = "python"
role = "cause"
severity = "error"
patterns = ['{pattern}']
cause = "c"
fix = "f"
verify = "v"
"""
    user.write_text(template.format(pattern="SITE MARKER ONE"))
    first = Catalog([user])
    assert "my_marker" in [h["id"] for h in first.test("x SITE MARKER ONE")["hits"]]
    user.write_text(template.format(pattern="SITE MARKER TWO"))
    edited = Catalog([user])
    assert edited.database_origin == "compiled"
    assert edited.cache_path == first.cache_path
    assert [h["id"] for h in edited.test("x SITE MARKER ONE")["hits"]] == []
    assert "my_marker" in [h["id"] for h in edited.test("x SITE MARKER TWO")["hits"]]


def test_empty_cache_dir_variable_disables_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANKWATCH_CACHE_DIR", "")
    catalog = Catalog()
    assert catalog.database_origin == "compiled"
    assert catalog.cache_path is None


def test_use_cache_false_writes_nothing(cache_dir: Path) -> None:
    catalog = Catalog(use_cache=False)
    assert catalog.cache_path is None
    assert not cache_dir.exists()


def test_unwritable_cache_dir_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the cache directory would go")
    monkeypatch.setenv("RANKWATCH_CACHE_DIR", str(blocker / "rankwatch"))
    assert main(["validate"]) == 0
    out = capsys.readouterr()
    assert "catalog ok" in out.out
    # One line says why every start compiles again, and how to fix or silence it.
    assert out.err.count("\n") == 1
    assert "not cached" in out.err and "RANKWATCH_CACHE_DIR" in out.err


def test_a_cache_dir_every_user_may_write_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("RANKWATCH_CACHE_DIR", str(shared))
    catalog = Catalog()
    assert catalog.database_origin == "compiled"
    assert list(shared.iterdir()) == []
    assert "writable by every user" in capsys.readouterr().err
