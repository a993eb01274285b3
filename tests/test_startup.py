"""Local commands start without the daemon: `rankwatch analyze` and `validate` must not import
asyncio, the Kafka client or rankwatch.daemon (start-up time; measured in bench/, not here)."""

from __future__ import annotations

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
