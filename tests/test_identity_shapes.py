"""The odd host, told by comparing what ranks print about themselves (issue 22, item 3), and
the false alarms of healthy single-host runs. Every line is invented in our own words, in the
shapes real NCCL and torch logs have (NCCL #224, #286, #529, #1634, nccl-tests #188 and
#244, the failure hub's docker0 case): other hosts, numbers and values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from one_log import diagnose, root, root_line, signature
from rankwatch.catalog_loader import Catalog
from rankwatch.engine import Engine, EngineConfig
from rankwatch.local import analyze_files, discover


def diagnose_job(tmp_path: Path, files: dict[str, str]) -> list[dict[str, Any]]:
    """Several files of one job, as `rankwatch analyze FOLDER` reads them."""
    case = tmp_path / "job"
    case.mkdir()
    for name, text in files.items():
        (case / name).write_text(text)
    found, _ = discover([str(case)], job="job")
    engine = Engine(Catalog([]), EngineConfig())
    result = analyze_files(engine, found, progress=False, on_error=lambda _m: None)
    return [dict(d) for d in result.diagnoses]


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


def four_nodes(**odd: Any) -> dict[str, str]:
    """Four nodes of two ranks' worth of lines each; node c gets `odd`'s init values; every
    node's first rank times out in the same all-reduce."""
    files = {}
    for i, name in enumerate(["gpu-a07", "gpu-a08", "gpu-a09", "gpu-a10"]):
        kwargs = odd if i == 2 else {}
        text = node_init(name, 4100 + i, f"10.52.3.{11 + i}", rank=i * 4, **kwargs)
        files[f"{name}.log"] = text + timeout(i * 4)
    return files


def test_the_node_that_loaded_another_nccl_is_the_root_of_the_timeouts(tmp_path: Path) -> None:
    diagnoses = diagnose_job(tmp_path, four_nodes(version="2.18.1"))
    assert root_line(diagnoses) == "gpu-a09:4102:4102 [0] NCCL INFO NCCL version 2.18.1+cuda12.3"
    assert root(diagnoses)["host"] == "gpu-a09"
    assert diagnoses[0]["first_warning"]["line"].startswith("[rank")
    assert diagnoses[0]["facts"]["odd_value"] == "2.18.1"
    assert diagnoses[0]["facts"]["job_value"].startswith("2.20.5")


def test_the_node_that_fell_back_to_sockets_is_the_root(tmp_path: Path) -> None:
    diagnoses = diagnose_job(tmp_path, four_nodes(network="Socket"))
    line = root_line(diagnoses)
    assert line.startswith("gpu-a09:4102:"), line
    assert "NET/Socket" in line or "Using network Socket" in line, line


def test_an_address_family_only_one_node_uses(tmp_path: Path) -> None:
    files = four_nodes()
    files["gpu-a09.log"] = files["gpu-a09.log"].replace(
        "Using ens8f0:10.52.3.13<0>", "Using ens8f0:fd00:52:3::13<0>"
    )
    diagnoses = diagnose_job(tmp_path, files)
    assert root_line(diagnoses) == (
        "gpu-a09:4102:4102 [0] NCCL INFO Bootstrap : Using ens8f0:fd00:52:3::13<0>"
    )


def test_a_setting_only_one_node_has(tmp_path: Path) -> None:
    files = four_nodes()
    setting = "gpu-a09:4102:4163 [0] NCCL INFO NCCL_PROTO set by environment to LL128"
    files["gpu-a09.log"] = files["gpu-a09.log"].replace(
        "Using network IB\n", f"Using network IB\n{setting}\n", 1
    )
    diagnoses = diagnose_job(tmp_path, files)
    assert root_line(diagnoses) == setting


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


def test_two_machines_with_one_name_and_a_socket_type_mismatch(tmp_path: Path) -> None:
    # Both machines call themselves `dgx`; the accepting process expected the socket
    # transport (3) and its peer spoke IB (4): the side on sockets is the root.
    socket_line = (
        "dgx:52110:52160 [0] NCCL INFO Channel 01/0 : 11[3] -> 0[0] [receive] via NET/Socket/0"
    )
    text = (
        "dgx:61402:61450 [2] NCCL INFO Channel 00/0 : 10[2] -> 11[3] via P2P/IPC/read\n"
        f"{socket_line}\n"
        "dgx:52113:52163 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC/read\n"
        "dgx:52110:52171 [0] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3\n"
        "dgx:52110:52171 [0] NCCL INFO misc/socket.cc:561 -> 3\n"
        "dgx:52110:52171 [0] NCCL INFO transport/net_socket.cc:378 -> 3\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == socket_line
    assert "wrong type" in diagnoses[0]["first_warning"]["line"]


def test_a_healthy_job_with_different_nodes_gives_no_diagnosis(tmp_path: Path) -> None:
    files = {name: text.split("[rank")[0] for name, text in four_nodes(version="2.18.1").items()}
    assert diagnose_job(tmp_path, files) == []


def test_a_single_host_run_listing_a_veth_interface_gives_no_diagnosis(tmp_path: Path) -> None:
    text = ""
    for local in range(4):
        pid = 2250 + local
        text += (
            f"worker-5:{pid}:{pid} [{local}] NCCL INFO Bootstrap : Using eth0:172.19.0.6<0>\n"
            f"worker-5:{pid}:{pid + 50} [{local}] NCCL INFO NET/Socket : Using "
            "[0]eth0:172.19.0.6<0> [1]veth91ab2c:fe80::c8a4:3eff:fe10:5b21%veth91ab2c<0>\n"
            f"worker-5:{pid}:{pid + 50} [{local}] NCCL INFO Using network Socket\n"
            f"worker-5:{pid}:{pid + 50} [{local}] NCCL INFO comm 0x7f3c rank {local} nranks 4 "
            f"cudaDev {local} busId {local + 1}000 - Init COMPLETE\n"
        )
    assert diagnose(tmp_path, text) == []


def test_a_single_host_run_on_an_ipv6_link_local_address_gives_no_diagnosis(
    tmp_path: Path,
) -> None:
    text = (
        "lab-2:880:880 [0] NCCL INFO Bootstrap : Using eth0:fe80::5054:ff:fe3a:c1d2%eth0<0>\n"
        "lab-2:880:931 [0] NCCL INFO NET/Socket : Using [0]eth0:fe80::5054:ff:fe3a:c1d2%eth0<0>\n"
        "lab-2:880:931 [0] NCCL INFO comm 0x55e1 rank 0 nranks 2 cudaDev 0 busId 3000 - "
        "Init COMPLETE\n"
        "lab-2:881:932 [1] NCCL INFO comm 0x55e2 rank 1 nranks 2 cudaDev 1 busId 4000 - "
        "Init COMPLETE\n"
    )
    assert diagnose(tmp_path, text) == []


def test_a_link_local_bootstrap_with_ranks_elsewhere_is_still_diagnosed(tmp_path: Path) -> None:
    # Only one container of a larger job is visible: the link-local address it advertises is
    # still the cause (NCCL #529's shape).
    line = (
        "pod-3:97:221 [0] NCCL INFO Bootstrap : Using [0]ip6tnl0:fe80::d4c1:aff:fe20:b1%ip6tnl0<0>"
    )
    text = f"{line}\npod-3:97:221 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == line
    assert signature(diagnoses) == "nccl_iface_link_local"
