"""Root cause on generated fleets: every fault scenario, every layout, several sizes and seeds,
host clocks skewed by up to ±5 s. Healthy jobs (with scary but harmless lines) give nothing."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import GenerateAndAnalyze
from rankwatch.simulate import fleetgen

FAULTS = [s for s in fleetgen.SCENARIOS if not s.startswith("healthy")]
HEALTHY = [s for s in fleetgen.SCENARIOS if s.startswith("healthy")]


def check_root_cause(truth: Any, diagnoses: list[dict[str, Any]]) -> None:
    assert truth.expect_diagnosis
    assert len(diagnoses) == 1, [d["summary"] for d in diagnoses]
    d = diagnoses[0]
    rc = d["root_cause"]
    want = truth.root_cause
    got = (rc["rank"], rc["host"], rc["line"])
    assert got == (want["rank"], want["host"], want["line"]), (
        f"{truth.scenario}: got {got}\nwant {want}\nsuspects {d['suspects']}"
    )
    assert d["signature"]["id"] == want["signature"]
    assert d["job"] == truth.job
    assert d["preceding_lines"] or truth.scenario in ("wrong_iface", "version_mismatch")


def test_all_kinds_of_fault_are_generated() -> None:
    assert len(FAULTS) >= 8
    assert {
        "wrong_iface",
        "ib_link_down",
        "cuda_error",
        "oom_kill",
        "desync",
        "version_mismatch",
        "shm_full",
    } <= set(FAULTS)


@pytest.mark.parametrize("layout", fleetgen.LAYOUTS)
@pytest.mark.parametrize("scenario", FAULTS)
def test_root_cause_every_layout(
    scenario: str, layout: str, generate_and_analyze: GenerateAndAnalyze
) -> None:
    seed = 11 + FAULTS.index(scenario) * 7 + fleetgen.LAYOUTS.index(layout)
    truth, diagnoses = generate_and_analyze(
        scenario, ranks=64, layout=layout, skew_s=5.0, seed=seed
    )
    check_root_cause(truth, diagnoses)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("scenario", FAULTS)
def test_root_cause_other_seeds_and_sizes(
    scenario: str, seed: int, generate_and_analyze: GenerateAndAnalyze
) -> None:
    ranks = {1: 32, 2: 128, 3: 512}[seed]
    truth, diagnoses = generate_and_analyze(
        scenario, ranks=ranks, layout="per-node", skew_s=5.0, seed=100 + seed
    )
    check_root_cause(truth, diagnoses)


@pytest.mark.parametrize("scenario", ["oom_kill", "wrong_iface", "desync"])
def test_root_cause_4096_ranks(scenario: str, generate_and_analyze: GenerateAndAnalyze) -> None:
    truth, diagnoses = generate_and_analyze(
        scenario, ranks=4096, layout="per-rank", skew_s=5.0, seed=4096, steps=5
    )
    check_root_cause(truth, diagnoses)


@pytest.mark.parametrize("layout", fleetgen.LAYOUTS)
@pytest.mark.parametrize("scenario", HEALTHY)
def test_healthy_jobs_give_no_diagnosis(
    scenario: str, layout: str, generate_and_analyze: GenerateAndAnalyze
) -> None:
    truth, diagnoses = generate_and_analyze(scenario, ranks=64, layout=layout, seed=5)
    assert not truth.expect_diagnosis
    assert diagnoses == [], [d["summary"] + " | " + d["root_cause"]["line"] for d in diagnoses]


def test_collateral_is_reported_as_ranges(generate_and_analyze: GenerateAndAnalyze) -> None:
    truth, diagnoses = generate_and_analyze("cuda_error", ranks=64, layout="per-rank", seed=9)
    d = diagnoses[0]
    culprit = truth.root_cause["rank"]
    assert d["collateral_rank_count"] >= 32
    assert str(culprit) not in d["collateral_ranks"].split(",")
    assert any(c["explained_by_root_cause"] for c in d["collateral"])


def test_wrong_interface_reports_the_peers_first_warning(
    generate_and_analyze: GenerateAndAnalyze,
) -> None:
    truth, diagnoses = generate_and_analyze("wrong_iface", ranks=64, layout="per-rank", seed=3)
    d = diagnoses[0]
    assert d["first_warning"] is not None
    assert d["first_warning"]["signature"] == truth.first_warning["signature"]
    assert d["odd_context"], "the odd host must be named"
