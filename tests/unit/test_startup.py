"""Local commands start without the daemon: `rankwatch analyze` and `validate` must not import
asyncio, the Kafka client or rankwatch.daemon (start-up time; measured in bench/, not here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys
from rankwatch.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as e:  # --help and argparse errors exit from inside the parser
    code = e.code
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {"asyncio", "aiokafka"}
               or m.startswith("rankwatch.daemon"))
print("HEAVY:" + ",".join(heavy))
sys.exit(code)
"""


def run_probe(*argv: str) -> tuple[int, str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=60
    )
    marker = [ln for ln in proc.stdout.splitlines() if ln.startswith("HEAVY:")]
    assert marker, proc.stderr
    heavy = [m for m in marker[-1].removeprefix("HEAVY:").split(",") if m]
    return proc.returncode, proc.stdout, heavy


@pytest.mark.parametrize("command", ["analyze", "validate"])
def test_local_commands_do_not_import_the_daemon(tmp_path: Path, command: str) -> None:
    log = tmp_path / "rank-0.log"
    log.write_text("node1:11:11 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n")
    argv = ["analyze", "-q", "--json", str(log)] if command == "analyze" else ["validate"]
    code, out, heavy = run_probe(*argv)
    assert code == 0, out
    assert heavy == []


def test_daemon_commands_still_parse() -> None:
    code, out, heavy = run_probe("stats", "--help")
    assert code == 0
    assert "--bootstrap-servers" in out
    assert "rankwatch.daemon.commands" in heavy
    code, out, _ = run_probe("--help")
    assert code == 0
    assert "replay" in out and "analyze" in out


def run_cli(entry: str, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    code = f"import sys; from rankwatch.cli import {entry}; sys.exit({entry}())"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, timeout=120)


@pytest.mark.parametrize("report", ["--json", "--context=50"])
def test_the_command_ends_after_its_whole_report_is_written(tmp_path: Path, report: str) -> None:
    # `run` ends the process without tearing it down after `analyze`: the report (JSON
    # larger than a pipe's buffer, or text left in Python's buffer) must still arrive whole,
    # with the exit status `main` gives.
    from rankwatch.simulate import fleetgen

    jobs = [tmp_path / s for s in ("cuda_error", "xid79", "ib_link_down", "desync")]
    for job in jobs:
        fleetgen.generate(job.name, job, ranks=32, seed=5, layout="per-node", job=job.name)
    argv = ["analyze", "-q", report, *map(str, jobs)]
    ended, returned = run_cli("run", argv), run_cli("main", argv)
    assert ended.stderr == b""
    assert ended.returncode == returned.returncode
    assert len(ended.stdout) > 16384, len(ended.stdout)
    timing = re.compile(rb'in [0-9.]+ s\b|"seconds": [0-9.]+')
    assert timing.sub(b"", ended.stdout) == timing.sub(b"", returned.stdout)
