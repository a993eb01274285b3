"""Messy real folders and bad usage, as a demanding user meets them: every case ends with a
clear message and the right exit status, never a hang, a traceback or "internal error"."""

from __future__ import annotations

import gzip
import io
import logging
import os
import shutil
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from rankwatch.kafka.replay import interleave
from rankwatch.local import LogFile
from rankwatch.logging_setup import setup_logging

CAUSE = (
    "node12:812:812 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "172.17.0.1<39275> failed : Network is unreachable"
)
OTHER_CAUSE = (
    "node40:77:77 [1] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
    "10.9.9.9<4000> failed : Network is unreachable"
)
# Reports the peak resident memory of the command it runs (kB), its own: VmHWM starts afresh at
# exec, while getrusage's ru_maxrss keeps the spawning process's size across it (a pytest
# process grown to 550 MB by the tests before made every command "use" 550 MB).
MEASURED = (
    "import sys\n"
    "from rankwatch.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "with open('/proc/self/status') as f:\n"
    "    kb = next(int(line.split()[1]) for line in f if line.startswith('VmHWM:'))\n"
    "sys.stderr.write(f'\\nMAXRSS_KB {kb}\\n')\n"
    "sys.exit(code)\n"
)


def rw(*args: str | Path, cwd: Path | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it; a hang fails the test instead of stalling the suite."""
    return subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        errors="replace",
        **kw,
    )


def rw_rss_mb(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], float]:
    r = subprocess.run(
        [sys.executable, "-c", MEASURED, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    kb = int(r.stderr.rsplit("MAXRSS_KB", 1)[1].split()[0])
    return r, kb / 1024


def clean_failure(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr


def usage_error(r: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2 with one `rankwatch: error: ...` line that gives the reason."""
    clean_failure(r)
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    errors = [line for line in r.stderr.splitlines() if line.startswith("rankwatch: error: ")]
    assert len(errors) == 1, r.stderr
    for w in words:
        assert w in errors[0], (w, errors[0])


def report(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    clean_failure(r)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = orjson.loads(r.stdout)
    return doc


def job_folder(root: Path, *lines: str) -> Path:
    root.mkdir(parents=True)
    (root / "rank-3.log").write_text("\n".join(lines) + "\n")
    return root


# --- files that are not regular -----------------------------------------------------------


def test_fifo_and_device_link_in_a_folder_are_skipped(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", "starting", CAUSE)
    os.mkfifo(logs / "rank-4.log")
    (logs / "rank-5.log").symlink_to("/dev/zero")
    r = rw("analyze", logs, "--json")
    doc = report(r)
    assert [d["root_cause"]["line"] for d in doc["diagnoses"]] == [CAUSE]
    assert f"rankwatch: skipped {logs}/rank-4.log: not a regular file" in r.stderr
    assert f"rankwatch: skipped {logs}/rank-5.log:" in r.stderr
    assert doc["input"]["files"] == 1


def test_fifo_given_directly_is_skipped_and_nothing_left_is_an_error(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.log")
    r = rw("analyze", tmp_path / "pipe.log")
    usage_error(r, "no log files")
    assert f"skipped {tmp_path}/pipe.log: not a regular file" in r.stderr


def test_fifo_as_catalog_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "site.toml")
    usage_error(rw("validate", "--catalog", tmp_path / "site.toml"), "not a regular file")
    usage_error(rw("validate", "--catalog", tmp_path), "not a regular file")
    logs = job_folder(tmp_path / "logs", CAUSE)
    usage_error(rw("analyze", logs, "--catalog", tmp_path), "not a regular file")


def test_replay_never_opens_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "rank-1.log")
    # In a child process: a blocking open would hang until the timeout fails the test.
    code = (
        "import sys; from pathlib import Path; from rankwatch.kafka.replay import interleave;"
        "from rankwatch.local import LogFile;"
        "print(list(interleave([LogFile(path=Path(sys.argv[1]), job='j')])))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "rank-1.log")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr
    files = [LogFile(path=tmp_path / "rank-1.log", job="j")]
    problems: list[str] = []
    assert list(interleave(files, problems.append)) == []
    assert problems == [f"{tmp_path}/rank-1.log: not a regular file"]


# --- damaged gzip -------------------------------------------------------------------------


def _padding(n: int) -> bytes:
    return b"".join(b"step %d loss %d\n" % (i, i * 7919 % 1000) for i in range(n))


def test_corrupt_gzip_keeps_its_readable_part(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    good = gzip.compress((CAUSE + "\n").encode() + _padding(200_000))
    # Valid up to the middle, then bytes no deflate stream can hold: zlib.error.
    (logs / "rank-3.log.gz").write_bytes(good[: len(good) // 2] + b"\xff" * 64 + b"\x00" * 64)
    r = rw("analyze", logs, "--json")
    doc = report(r)
    assert [d["root_cause"]["line"] for d in doc["diagnoses"]] == [CAUSE]
    assert "rankwatch: partially read" in r.stderr and "rank-3.log.gz" in r.stderr
    assert doc["input"]["partially_read"], doc["input"]


def test_truncated_gzip_keeps_its_readable_part(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    whole = gzip.compress((CAUSE + "\n").encode() + _padding(20_000))
    (logs / "rank-3.log.gz").write_bytes(whole[: len(whole) * 2 // 3])
    r = rw("analyze", logs, "--json")
    doc = report(r)
    assert [d["root_cause"]["line"] for d in doc["diagnoses"]] == [CAUSE]
    assert "ends early" in r.stderr
    assert doc["input"]["lines"] > 1_000


def test_gzip_bomb_as_baseline_is_streamed(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", "starting", CAUSE)
    member = gzip.compress(b"healthy step 1 loss 0.5\n" * 40_000)  # ~1 MB each when inflated
    (tmp_path / "healthy.log.gz").write_bytes(member * 400)
    r, rss_mb = rw_rss_mb("analyze", logs, "--json", "--baseline", tmp_path / "healthy.log.gz")
    doc = report(r)
    assert [d["root_cause"]["line"] for d in doc["diagnoses"]] == [CAUSE]
    # 400 MB inflated: reading it whole needed more than that; streamed it is a chunk at a time.
    assert rss_mb < 300, rss_mb


# --- names -------------------------------------------------------------------------------


def test_file_name_that_is_not_utf8_is_analyzed(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", CAUSE)
    (logs / os.fsdecode(b"rank-4-\xff\xfe.log")).write_text("ok\n")
    doc = report(rw("analyze", logs, "--json"))
    assert doc["input"]["files"] == 2 and len(doc["diagnoses"]) == 1


def test_control_characters_in_names_are_escaped(tmp_path: Path) -> None:
    logs = tmp_path / "job\x1b]0;pwned\x07"
    logs.mkdir()
    forged = "rank-3\x1b[2J\nROOT CAUSE  rank 0 on forged-host.log"
    (logs / forged).write_text(CAUSE + "\n")
    os.mkfifo(logs / "rank-9\r\x1b[1A.log")
    r = rw("analyze", logs)
    clean_failure(r)
    assert r.returncode == 0
    for text in (r.stdout, r.stderr):
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert not any(line.startswith("ROOT CAUSE  rank 0") for line in r.stdout.splitlines())
    assert "rank-3\\x1b[2J\\nROOT CAUSE" in r.stdout
    assert "job(s) job\\x1b]0;pwned\\x07" in r.stdout
    assert "rank-9\\r\\x1b[1A.log: not a regular file" in r.stderr


# --- folders -------------------------------------------------------------------------------


def test_link_out_of_the_folder_is_not_read(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", CAUSE)
    secret = tmp_path / "elsewhere.log"
    secret.write_text(OTHER_CAUSE + "\n")
    (logs / "rank-7.log").symlink_to(secret)
    (logs / "rank-8.log").symlink_to(logs / "rank-8.log")
    r = rw("analyze", logs, "--json")
    doc = report(r)
    assert [d["root_cause"]["line"] for d in doc["diagnoses"]] == [CAUSE]
    assert f"skipped {logs}/rank-7.log: link to {secret}, outside {logs}" in r.stderr
    assert f"skipped {logs}/rank-8.log: link loop" in r.stderr
    usage_error(rw("analyze", logs / "rank-8.log"), "rank-8.log")


def test_folders_a_thousand_deep_are_walked(tmp_path: Path) -> None:
    folder = tmp_path / "deep"
    folder.mkdir()
    for _ in range(1_100):
        folder = folder / "d"
        folder.mkdir()
    (folder / "rank-3.log").write_text(CAUSE + "\n")
    try:
        doc = report(rw("analyze", "deep", "--json", cwd=tmp_path))
    finally:  # pytest's own clean-up recurses, and would fail on this tree
        subprocess.run(["rm", "-rf", str(tmp_path / "deep")], check=True)
    assert len(doc["diagnoses"]) == 1


def _without_root_powers() -> list[str]:
    """A command prefix under which folder permissions hold (root bypasses them)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]


def test_unreadable_subfolder_is_reported(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", CAUSE)
    hidden = logs / "node7"
    hidden.mkdir()
    (hidden / "rank-0.log").write_text(OTHER_CAUSE + "\n")
    hidden.chmod(0)
    try:
        command = [sys.executable, "-m", "rankwatch.cli", "analyze", str(logs), "--json"]
        r = subprocess.run(
            [*_without_root_powers(), *command], capture_output=True, text=True, timeout=60
        )
    finally:
        hidden.chmod(0o700)
    doc = report(r)
    assert [d["root_cause"]["line"] for d in doc["diagnoses"]] == [CAUSE]
    assert f"rankwatch: skipped {hidden}: folder not read: Permission denied" in r.stderr
    assert any("node7" in s for s in doc["input"]["skipped"])


def test_two_paths_with_one_folder_name_are_two_jobs(tmp_path: Path) -> None:
    one = job_folder(tmp_path / "run1" / "logs", CAUSE)
    two = job_folder(tmp_path / "run2" / "logs", OTHER_CAUSE)
    r = rw("analyze", one, two, "--json")
    doc = report(r)
    jobs = {d["job"]: d["root_cause"]["line"] for d in doc["diagnoses"]}
    assert jobs == {"logs": CAUSE, "logs-2": OTHER_CAUSE}
    assert f"rankwatch: note: {two} is job logs-2: job logs is {one}" in r.stderr


def test_same_path_twice_is_read_once(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", "starting", "loading data", CAUSE)
    once = report(rw("analyze", logs, "--json"))
    r = rw("analyze", logs, logs, str(logs) + "/", logs / "rank-3.log", "--json")
    twice = report(r)
    assert twice["input"]["lines"] == once["input"]["lines"] == 3
    assert twice["input"]["files"] == 1
    assert "given twice" in r.stderr


# --- usage ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--rank-pattern", "("], "not a valid regex"),
        (["--rank-pattern", r"(?P<rank>[a-z]+)-\d"], "not a rank number"),
        (["--rank-pattern", r"node(?P<rank>\d+)"], "matches no input file"),
        (["--ring-lines", "-1"], "--ring-lines"),
        (["--incident-horizon-ms", "-5"], "--incident-horizon-ms"),
        (["--memory-budget-bytes", str(1 << 70)], "--memory-budget-bytes"),
        (["--context", "x"], "--context"),
        (["--job", ""], "--job"),
    ],
)
def test_bad_analyze_usage_exits_2_with_the_reason(
    tmp_path: Path, args: list[str], reason: str
) -> None:
    logs = job_folder(tmp_path / "logs", CAUSE)
    usage_error(rw("analyze", logs, *args), reason)


def test_empty_path_is_not_the_current_folder(tmp_path: Path) -> None:
    job_folder(tmp_path / "logs", CAUSE)
    usage_error(rw("analyze", "", cwd=tmp_path / "logs"), "empty PATH")


def test_catalog_options_may_follow_the_action(tmp_path: Path) -> None:
    site = tmp_path / "site.toml"
    site.write_text(
        """
[[signature]]
id = "site_fabric_manager_down"
title = "Fabric Manager is not running"
subsystem = "p2p"
role = "cause"
severity = "critical"
patterns = ['nv-fabricmanager\\.service: Failed with result']
cause = "The NVSwitch fabric manager died."
fix = "Restart nvidia-fabricmanager."
verify = "systemctl is-active nvidia-fabricmanager"
"""
    )
    line = "nv-fabricmanager.service: Failed with result 'exit-code'."
    for args in (
        ["catalog", "test", "--catalog", site, line],
        ["catalog", "--catalog", site, "test", line],
        ["catalog", "test", line, "--catalog", site],
    ):
        r = rw(*args)
        clean_failure(r)
        assert r.returncode == 0 and "site_fabric_manager_down" in r.stdout, (args, r.stderr)
    r = rw("catalog", "test", "--json", line, "--catalog", site)
    assert orjson.loads(r.stdout)["hits"][0]["id"] == "site_fabric_manager_down"
    usage_error(rw("catalog", "test"), "LINE")


# --- daemon configuration -------------------------------------------------------------------


def test_config_type_error_does_not_echo_a_secret(tmp_path: Path) -> None:
    cfg = tmp_path / "rankwatch.toml"
    cfg.write_text('topic = ["logs"]\nsasl_password = ["Hunter2Secret"]\n')
    r = rw("validate", "--config", cfg)
    usage_error(r, "sasl_password", "list")
    assert "Hunter2Secret" not in r.stderr + r.stdout


@pytest.mark.parametrize(
    "setting",
    [
        'topic = ["training logs"]',
        'topic = ["logs"]\noutput_topic = "diag/noses"',
        'topic = ["logs"]\ndead_letter_topic = ".."',
        'topic = ["' + "t" * 250 + '"]',
        'topic = ["logs"]\n[topics."bad name!"]\nformat = "canonical"',
    ],
)
def test_validate_refuses_topic_names_kafka_refuses(tmp_path: Path, setting: str) -> None:
    cfg = tmp_path / "rankwatch.toml"
    cfg.write_text(setting + "\n")
    usage_error(rw("validate", "--config", cfg), "not a valid Kafka topic name")


def test_replay_refuses_an_invalid_topic_before_connecting(tmp_path: Path) -> None:
    logs = job_folder(tmp_path / "logs", CAUSE)
    r = rw("replay", logs, "--topic", "no such/topic", "--bootstrap-servers", "127.0.0.1:1")
    usage_error(r, "not a valid Kafka topic name")


@pytest.fixture
def daemon_log() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    real = sys.stderr
    sys.stderr = stream
    try:
        setup_logging("info")
    finally:
        sys.stderr = real
    yield stream
    root.handlers[:], level = saved
    root.setLevel(level)


def test_job_names_are_escaped_and_cut_in_daemon_logs(daemon_log: io.StringIO) -> None:
    log = logging.getLogger("rankwatch.daemon")
    log.info("diagnosis %s job=%s", "rw-1", "llm\n2026-01-01 rankwatch.daemon INFO forged")
    log.info("diagnosis %s job=%s", "rw-2", "j" * 100_000)
    lines = daemon_log.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("job=llm\\n2026-01-01 rankwatch.daemon INFO forged")
    assert len(lines[1]) < 1_000 and "more chars" in lines[1]


# --- long lines ------------------------------------------------------------------------------


def test_replay_reads_a_huge_line_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "rank-0.log"
    with open(path, "wb") as fh:
        fh.write(b"before\n")
        for _ in range(64):
            fh.write(b"x" * (1 << 20))
        fh.write(b"\nafter\n")
    tracemalloc.start()
    try:
        lines = [line for _, line in interleave([LogFile(path=path, job="j")])]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(x) for x in lines] == [6, 256 * 1024, 5]
    assert peak < 16 << 20, peak


def test_a_line_longer_than_a_read_chunk_stays_one_line(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    with open(logs / "rank-3.log", "wb") as fh:
        fh.write(b"starting\n")
        for i in range(48):  # 3 MiB: longer than a read chunk, and with prefixes inside
            fh.write(b"[rank%d]: NCCL WARN " % i + b"y" * (64 << 10))
        fh.write(b"\n" + CAUSE.encode() + b"\n")
    doc = report(rw("analyze", logs, "--json"))
    assert doc["input"]["lines"] == 3
    [d] = doc["diagnoses"]
    assert d["root_cause"]["line"] == CAUSE
    assert d["root_cause"]["origin"].endswith("rank-3.log:3")


def test_a_million_rank_prefixes_stay_within_the_memory_budget(tmp_path: Path) -> None:
    with open(tmp_path / "mixed.log", "w") as fh:
        fh.writelines(f"[rank{i}]: step 1 loss 0.5\n" for i in range(1_000_000))
        fh.write(f"[rank7]: {CAUSE}\n")
    r, rss_mb = rw_rss_mb(
        "analyze", tmp_path / "mixed.log", "--json", "--memory-budget-bytes", "10000000"
    )
    doc = report(r)
    assert [d["root_cause"]["rank"] for d in doc["diagnoses"]] == [7]
    # Each of a million sources used to cost about 900 bytes outside the budget.
    assert rss_mb < 400, rss_mb
