"""The `rankwatch` command as a user runs it: exit codes, JSON schema, errors without
tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from rankwatch.simulate import fleetgen


def rw(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def failing_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, fleetgen.Truth]:
    out = tmp_path_factory.mktemp("cli") / "llm-fail"
    truth = fleetgen.generate("ib_link_down", out, ranks=64, layout="per-node", seed=21)
    return out, truth


def test_analyze_json_schema(failing_job: tuple[Path, fleetgen.Truth]) -> None:
    path, truth = failing_job
    r = rw("analyze", path, "--json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["schema"] == "rankwatch.report/1"
    [d] = doc["diagnoses"]
    for key in (
        "id",
        "job",
        "signature",
        "root_cause",
        "first_warning",
        "suspects",
        "collateral",
        "preceding_lines",
        "fix",
        "verify",
        "confidence",
        "alternatives",
    ):
        assert key in d, key
    assert set(d["signature"]) >= {"id", "title", "subsystem", "role"}
    assert set(d["root_cause"]) >= {"rank", "host", "device", "pid", "ts", "line", "origin"}
    assert d["root_cause"]["line"] == truth.root_cause["line"]
    assert d["job"] == "llm-fail"
    again = orjson.loads(rw("analyze", path, "--json").stdout)["diagnoses"][0]
    assert again["id"] == d["id"], "ids are deterministic"


def test_analyze_human_report_puts_root_cause_first(
    failing_job: tuple[Path, fleetgen.Truth],
) -> None:
    path, truth = failing_job
    r = rw("analyze", path, "--job", "named")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.index("ROOT CAUSE") < out.index("Collateral") < out.index("Fix")
    assert truth.root_cause["line"] in out
    assert "job named" in out


def test_healthy_job_has_empty_diagnoses(tmp_path: Path) -> None:
    fleetgen.generate("healthy", tmp_path / "ok", ranks=32, layout="per-rank", seed=1)
    r = rw("analyze", tmp_path / "ok", "--json")
    assert r.returncode == 0
    assert orjson.loads(r.stdout)["diagnoses"] == []


def test_bad_paths_exit_2_without_traceback(tmp_path: Path) -> None:
    r = rw("analyze", tmp_path / "nope")
    assert r.returncode == 2
    assert "no such file" in r.stderr and "Traceback" not in r.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    r = rw("analyze", empty)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = rw("analyze")
    assert r.returncode == 2


def test_undecodable_bytes_are_analyzed(tmp_path: Path) -> None:
    (tmp_path / "rank-0.log").write_bytes(bytes(range(256)) * 400 + b"\xff\xfe\n" * 10)
    r = rw("analyze", tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr


def test_catalog_commands(tmp_path: Path) -> None:
    r = rw("catalog", "list")
    assert r.returncode == 0 and "nccl_sock_connect_failed" in r.stdout
    r = rw("catalog", "show", "pt_watchdog_timeout")
    assert r.returncode == 0 and orjson.loads(r.stdout)["role"] == "symptom"
    r = rw("catalog", "show", "no_such_signature")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = rw(
        "catalog",
        "test",
        "[rank3]:[E1130 12:00:01.123456789 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    )
    assert r.returncode == 0 and "pt_watchdog_timeout" in r.stdout and "rank=3" in r.stdout
    assert rw("validate").returncode == 0


def test_catalog_test_escapes_control_characters_of_the_line() -> None:
    """Probe F24: the line was echoed with its ESC and ^A bytes raw (a terminal clears)."""
    r = rw("catalog", "test", "a\x01b\x1b[2Jc NCCL WARN oops")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x01" not in r.stdout
    assert "a\\x01b\\x1b[2Jc" in r.stdout


def test_user_catalog_is_added_and_validated(tmp_path: Path) -> None:
    good = tmp_path / "site.toml"
    good.write_text(
        """
[[signature]]
id = "site_fabric_manager_down"
title = "Fabric Manager is not running"
subsystem = "p2p"
role = "cause"
severity = "critical"
patterns = ['nv-fabricmanager\\.service: Failed with result']
cause = "The NVSwitch fabric manager died, so NVLink peers cannot be reached."
fix = "Restart nvidia-fabricmanager and drain the node if it fails again."
verify = "systemctl is-active nvidia-fabricmanager"
"""
    )
    r = rw(
        "catalog",
        "test",
        "nv-fabricmanager.service: Failed with result 'exit-code'.",
        "--catalog",
        good,
    )
    assert r.returncode == 0 and "site_fabric_manager_down" in r.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text(
        good.read_text().replace('role = "cause"', 'role = "cause"\nexplains = ["nope"]')
    )
    r = rw("validate", "--catalog", bad)
    assert r.returncode == 2
    assert str(bad) in r.stderr and "site_fabric_manager_down" in r.stderr and "nope" in r.stderr
    assert "Traceback" not in r.stderr


def test_version_is_the_packages() -> None:
    import tomllib

    import rankwatch

    root = Path(__file__).resolve().parents[2]
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    assert rankwatch.__version__ == version, "rankwatch.__version__ and pyproject.toml disagree"
    r = rw("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"rankwatch {version} (Hyperscan "), r.stdout
    assert rankwatch.hyperscan_version().strip() in r.stdout
    assert r.stdout.count("\n") == 1 and not r.stderr
    helped = rw("--help")
    assert "--version" in helped.stdout
