"""The failure-hub entry rankwatch was started from (`shared/reference/failure-hub-entry.txt`),
end to end through `rankwatch analyze`: one host picks an interface its peers cannot reach,
the peers print the hub's literal line or NCCL's real forms, and the diagnosis names the odd
host's `Using` line, the first occurrence (skew-corrected) with 100 lines before it, the
collateral as ranges, and a fix with the real interface. Siblings (refused, no route, timed
out, cannot assign, link-local, missing interface, IB) each get their own cause and fix.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import hub_jobs

LAYOUTS = ["per-rank", "per-node"]
WRONG_IFACE = ["literal", "net_connect", "socket_start_connect", "poll_connect_227"]


def analyze(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rankwatch.cli", "analyze", str(folder), *extra],
        capture_output=True,
        text=True,
        check=False,
    )


def diagnose(folder: Path) -> dict[str, Any]:
    proc = analyze(folder, "--json")
    assert proc.returncode == 0, proc.stderr
    diagnoses = orjson.loads(proc.stdout)["diagnoses"]
    assert len(diagnoses) == 1, [d["summary"] for d in diagnoses]
    d: dict[str, Any] = diagnoses[0]
    return d


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, Any]]:
    root = tmp_path_factory.mktemp("hub")
    out = {}
    for variant in hub_jobs.VARIANTS:
        for layout in LAYOUTS:
            folder = root / variant / layout
            out[(variant, layout)] = (folder, hub_jobs.make(folder, variant, layout))
    return out


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("variant", WRONG_IFACE)
def test_wrong_interface_is_named_by_the_odd_hosts_using_line(
    jobs: dict[tuple[str, str], tuple[Path, Any]], variant: str, layout: str
) -> None:
    folder, truth = jobs[(variant, layout)]
    d = diagnose(folder)
    root = d["root_cause"]
    assert (root["host"], root["rank"]) == (truth.host, truth.rank), d["summary"]
    assert truth.line_contains in root["line"] and "docker0:172.17.0.1" in root["line"]
    assert root["device"] == 0 and root["pid"] is not None
    # The first occurrence of the connect failure, after clock correction: node-001's clock
    # runs 3 s ahead, so its line looks later than node-004's but happened first.
    fw = d["first_warning"]
    assert (fw["host"], fw["rank"]) == (truth.first_warning_host, truth.first_warning_rank)
    assert "Network is unreachable" in fw["line"]
    assert len(fw["preceding_lines"]) >= 100
    assert all("Network is unreachable" not in x for x in fw["preceding_lines"])
    # Collateral as ranges, the culprit excluded.
    assert d["collateral_ranks"] == f"0-{truth.rank - 1},{truth.rank + 1}-31"
    # Fix and verify with the facts: which host chose what, what the rest used.
    assert "export NCCL_SOCKET_IFNAME=eth0" in d["fix"]
    assert "node-005" in d["cause"] and "docker0" in d["cause"]
    assert d["verify"] and "<" not in d["verify"]
    assert d["confidence"] >= 0.75 and not d["tie"]


def test_hub_literal_line_is_the_socket_connect_failure() -> None:
    from rankwatch import Catalog

    cat = Catalog()
    line = (
        "node-004:24034:24104 [2] misc/socket.cc:484 NCCL WARN "
        "Connection failed : Network is unreachable"
    )
    result = cat.test(line)
    hits = [h for h in result["hits"] if h["role"] == "cause"]
    assert hits, result
    assert cat.signature(hits[0]["id"])["subsystem"] == "socket"  # type: ignore[index]
    last_error = (
        "[rank4]: socketStartConnect: Connect to 172.17.0.1<43004> failed : Network is unreachable"
    )
    assert any(h["role"] != "context" for h in cat.test(last_error)["hits"])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_report_shows_the_first_occurrence_and_its_preceding_lines(
    jobs: dict[tuple[str, str], tuple[Path, Any]], layout: str
) -> None:
    folder, _ = jobs[("socket_start_connect", layout)]
    proc = analyze(folder)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "ROOT CAUSE" in out and "docker0" in out
    assert "First warning" in out or "FIRST WARNING" in out
    assert "export NCCL_SOCKET_IFNAME=eth0" in out


SIBLINGS = [
    "refused",
    "no_route",
    "timed_out",
    "cannot_assign",
    "link_local",
    "missing_iface",
    "ib_transport",
]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_siblings_each_get_their_own_cause_and_fix(
    jobs: dict[tuple[str, str], tuple[Path, Any]], layout: str
) -> None:
    seen: dict[str, tuple[str, str]] = {}
    for variant in [*SIBLINGS, "socket_start_connect"]:
        folder, truth = jobs[(variant, layout)]
        d = diagnose(folder)
        root = d["root_cause"]
        assert root["host"] == truth.host, (variant, d["summary"])
        if truth.rank is not None:
            assert root["rank"] == truth.rank, (variant, d["summary"])
        if truth.line_contains:
            assert truth.line_contains in root["line"], (variant, root["line"])
        assert d["signature"]["subsystem"] in {truth_subsystem(variant), "socket", "bootstrap"}
        seen[variant] = (d["cause"], d["fix"])
    causes = [c for c, _ in seen.values()]
    fixes = [f for _, f in seen.values()]
    assert len(set(causes)) == len(causes), "two siblings share a cause text"
    assert len(set(fixes)) == len(fixes), "two siblings share a fix text"


def truth_subsystem(variant: str) -> str:
    return hub_jobs.VARIANTS[variant].expected_subsystem


@pytest.mark.parametrize("variant", ["refused", "timed_out"])
def test_ambiguous_siblings_list_the_competing_hypotheses(
    jobs: dict[tuple[str, str], tuple[Path, Any]], variant: str
) -> None:
    folder, _ = jobs[(variant, "per-rank")]
    d = diagnose(folder)
    hyps = d["hypotheses"]
    assert len(hyps) >= 2
    assert all(h["cause"] and h["separate_by"] for h in hyps)


def test_daemon_gives_the_same_diagnosis_as_analyze(
    jobs: dict[tuple[str, str], tuple[Path, Any]],
    daemon_kafka: str,
    fresh_topics: Any,
    daemon_factory: Any,
) -> None:
    """The same per-node logs replayed into Kafka: `rankwatch run` publishes the diagnosis
    `analyze` gives (root line, first warning, collateral, fix), with the preceding lines."""
    from daemon_fixtures import read_topic, wait_settled
    from test_daemon_kafka import base_settings, rankwatch, versions_by_id

    folder, truth = jobs[("socket_start_connect", "per-node")]
    local = diagnose(folder)
    logs, out = fresh_topics("logs", 2), fresh_topics("diagnoses", 1)
    sent = rankwatch("replay", str(folder), "--topic", logs, "--bootstrap-servers", daemon_kafka)
    assert sent.returncode == 0, sent.stderr
    group = "hub-parity"
    d = daemon_factory("hub", **base_settings(logs, out, group)).start()
    wait_settled(daemon_kafka, [logs], group, [d])
    versions = versions_by_id(read_topic(daemon_kafka, out))
    assert len(versions) == 1, list(versions)
    remote = next(iter(versions.values()))[-1]
    for key in ("fix", "verify", "cause", "collateral_ranks"):
        assert remote[key] == local[key], key
    rc, lrc = remote["root_cause"], local["root_cause"]
    assert (rc["host"], rc["rank"], rc["line"]) == (lrc["host"], lrc["rank"], lrc["line"])
    assert (rc["host"], rc["rank"]) == (truth.host, truth.rank)
    fw, lfw = remote["first_warning"], local["first_warning"]
    assert (fw["host"], fw["rank"], fw["line"]) == (lfw["host"], lfw["rank"], lfw["line"])
    assert len(fw["preceding_lines"]) >= 100
    assert d.stop() == 0
