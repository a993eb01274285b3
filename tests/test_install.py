"""rankwatch as users install it: the wheel built by maturin, installed into a clean venv, run
outside the source tree. `simulate` + `analyze` find the injected root cause, and `demo` runs
end to end against a real broker, printing one diagnosis and later versions as one-liners."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANKWATCH_", "PYTHON"))}
    env.pop("VIRTUAL_ENV", None)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """bin/ of a fresh venv holding only the built wheel and its dependencies."""
    tmp = tmp_path_factory.mktemp("install")
    maturin = Path(sys.executable).parent / "maturin"
    build = _run(
        [str(maturin), "build", "--release", "--auditwheel", "skip", "-o", str(tmp / "dist")],
        cwd=ROOT,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("rankwatch-*.whl")
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp)
    assert made.returncode == 0, made.stderr
    pip = _run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)], cwd=tmp)
    assert pip.returncode == 0, pip.stderr[-3000:]
    yield venv / "bin"


def test_installed_wheel_simulates_and_analyzes(installed: Path, tmp_path: Path) -> None:
    rw = str(installed / "rankwatch")
    helped = _run([rw, "demo", "--help"], cwd=tmp_path)
    assert helped.returncode == 0 and "--bootstrap-servers" in helped.stdout
    sim = _run(
        [rw, "simulate", "ib_link_down", "--ranks", "32", "--seed", "5", "--out", "job"],
        cwd=tmp_path,
    )
    assert sim.returncode == 0, sim.stderr
    truth = orjson.loads((tmp_path / "job" / "truth.json").read_bytes())["root_cause"]
    assert f"rank {truth['rank']} on {truth['host']}" in sim.stdout
    out = _run([rw, "analyze", "job", "--json"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (d,) = orjson.loads(out.stdout)["diagnoses"]
    got = d["root_cause"]
    assert (got["rank"], got["host"], got["line"]) == (truth["rank"], truth["host"], truth["line"])


def test_installed_demo_needs_a_broker_and_says_so(installed: Path, tmp_path: Path) -> None:
    out = _run([str(installed / "rankwatch"), "demo"], cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert "needs a Kafka broker: pass --bootstrap-servers" in out.stderr
    assert "Traceback" not in out.stderr


def test_installed_demo_runs_end_to_end(installed: Path, tmp_path: Path, daemon_kafka: str) -> None:
    out = _run(
        [str(installed / "rankwatch"), "demo", "--bootstrap-servers", daemon_kafka],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("=== diagnosis") == 1, out.stdout
    assert "matches the generator's ground truth" in out.stderr
    assert "healthy jobs: 0 diagnoses" in out.stderr
    assert "rankwatch-demo-" not in out.stdout + out.stderr  # no temporary paths in origins
    assert "/tmp" not in out.stdout


def test_an_update_is_one_line_naming_what_changed() -> None:
    from rankwatch.demo import describe_update

    old = {"id": "rw-1", "confidence": 0.8, "incident": {"hits": 10, "ranks_affected": 4}}
    old["root_cause"] = {"rank": 3, "host": "n1"}
    new = {**old, "confidence": 0.9, "incident": {"hits": 12, "ranks_affected": 4}}
    line = describe_update(old, new)
    assert "\n" not in line and "rw-1 updated" in line
    assert "confidence 0.80 -> 0.90" in line and "12 matched lines (was 10)" in line
    assert "ranks affected" not in line
    moved = {**new, "root_cause": {"rank": 5, "host": "n2"}}
    assert "root cause now rank 5 on n2" in describe_update(new, moved)
