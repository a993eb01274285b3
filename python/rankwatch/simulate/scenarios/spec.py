"""What a scenario module declares: its name and one-line description, the build it injects
its failure with, and the few ways its fleet differs from the common model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rankwatch.simulate.job import Job


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    about: str  # what it injects, for `rankwatch simulate --list`
    # writes every rank's lines (after the agents' start-up) and runs the fleet's teardown
    build: Callable[[Job], None]
    nccl: str  # the job's NCCL version
    transport: str  # inter-node: "IB" or "Socket"
    # the node-local communicator is created before the default one (and prints the banner)
    intra_first: bool = True
    needs_two_hosts: bool = False
    injects_failure: bool = True  # on even seeds the culprit host's clock is set behind
    culprit_bus: str | None = None  # the culprit is the rank on this bus, where the host has it
    host_wide: bool = False  # the whole culprit host is odd: its lowest rank is the culprit
    culprit_nccl: str | None = None  # the culprit host runs this NCCL; its banner is the root
    # the culprit host bootstraps on docker0 (NCCL_SOCKET_IFNAME=^lo lets it); the line that
    # shows it is the root cause
    culprit_on_docker0: bool = False
    desync_debug: bool = False  # TORCH_NCCL_DESYNC_DEBUG=1
    connect_retry_p: float = 0.0  # chance a rank logs connect retries in the default comm init
    # one host with P2P disabled between GPUs 1 and 2, every third host on an older driver
    noisy_fleet: bool = False
    # the agent's `failed (exitcode ...)` line for the culprit is the root cause (a worker
    # killed without last words)
    root_in_agent_log: bool = False
