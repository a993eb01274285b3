"""The scenarios, one module each; `REGISTRY` is what `rankwatch simulate`, `fleetgen` and its
bench/ shim enumerate. To add one, write a module with a `SCENARIO` and list it here; the
order is the order of `--list`, of `SCENARIOS`, and of the seeds tests derive from it."""

from __future__ import annotations

from rankwatch.simulate.scenarios import (
    cuda_error,
    cuda_oom,
    desync,
    healthy,
    healthy_noisy,
    ib_link_down,
    oom_kill,
    shm_full,
    version_mismatch,
    wrong_iface,
    xid79,
)
from rankwatch.simulate.scenarios.spec import Scenario

REGISTRY: dict[str, Scenario] = {
    m.SCENARIO.name: m.SCENARIO
    for m in (
        wrong_iface,
        ib_link_down,
        cuda_error,
        oom_kill,
        desync,
        version_mismatch,
        shm_full,
        cuda_oom,
        xid79,
        healthy,
        healthy_noisy,
    )
}

__all__ = ["REGISTRY", "Scenario"]
