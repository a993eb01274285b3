"""Two runs from two machines posted side by side, differing in their net plugin while the
failure names neither: both nodes are suspects, with low confidence, by comparing what the
ranks print about themselves (issue 22, item 3; the odd-host cases are in
tests/cases/config_version/). Lines invented in the shapes real NCCL and torch logs have."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose_job


def node_init(
    host: str,
    pid: int,
    ip: str,
    *,
    version: str = "2.20.5",
    driver: int = 12030,
    network: str = "IB",
    rank: int = 0,
    nranks: int = 16,
) -> str:
    """What one NCCL process prints at init with NCCL_DEBUG=INFO (2.20-era shapes)."""
    tid = pid + 61
    net_channel = "NET/IB/0/GDRDMA" if network == "IB" else f"NET/{network}/0"
    peer = (rank + 8) % nranks
    return (
        f"{host}:{pid}:{pid} [0] NCCL INFO Bootstrap : Using ens8f0:{ip}<0>\n"
        f"{host}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion {driver}\n"
        f"{host}:{pid}:{pid} [0] NCCL INFO NCCL version {version}+cuda12.3\n"
        f"{host}:{pid}:{tid} [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens8f0\n"
        f"{host}:{pid}:{tid} [0] NCCL INFO Using network {network}\n"
        f"{host}:{pid}:{tid} [0] NCCL INFO comm 0x55d3a1c0 rank {rank} nranks {nranks} "
        f"cudaDev 0 nvmlDev 0 busId 18000 commId 0x4f1e2d3c4b5a6978 - Init START\n"
        f"{host}:{pid}:{tid} [0] NCCL INFO Channel 00/0 : {peer}[0] -> {rank}[0] [receive] "
        f"via {net_channel}\n"
        f"{host}:{pid}:{tid} [0] NCCL INFO comm 0x55d3a1c0 rank {rank} nranks {nranks} "
        f"cudaDev 0 nvmlDev 0 busId 18000 commId 0x4f1e2d3c4b5a6978 - Init COMPLETE\n"
    )


def timeout(rank: int, seq: int = 7) -> str:
    return (
        f"[rank{rank}]:[E1014 08:21:44.112233445 ProcessGroupNCCL.cpp:632] [Rank {rank}] "
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        "OpType=ALLREDUCE, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=600000) ran for "
        "600087 milliseconds before timing out.\n"
    )


def test_two_runs_posted_side_by_side_make_both_nodes_suspects(tmp_path: Path) -> None:
    # Two files from two machines that differ in their net plugin; the failure names neither.
    left = node_init("trainer-0", 912, "10.7.0.2", rank=0, nranks=2).replace(
        "Using network IB",
        "NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)\n"
        "trainer-0:912:973 [0] NCCL INFO Using network IB",
    )
    right = node_init("trainer-1", 877, "10.7.0.3", rank=1, nranks=2).replace(
        "Using network IB",
        "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
        "trainer-1:877:938 [0] NCCL INFO Using network IB",
    )
    diagnoses = diagnose_job(
        tmp_path, {"run-a.txt": left + timeout(0), "run-b.txt": right + timeout(1)}
    )
    hosts = {s["host"] for s in diagnoses[0]["suspects"][:2]}
    assert hosts == {"trainer-0", "trainer-1"}
    assert diagnoses[0]["confidence"] <= 0.6
    reasons = str(diagnoses[0]["suspects"])
    assert "identity_pair" in reasons
