"""Gloo's failure messages (python/rankwatch/catalog/gloo.toml). Lines are invented in our own
words with Gloo's message shapes: other hosts, ranks, addresses and numbers."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, signature

LOOPBACK = (
    "[rank3]:[W ProcessGroupGloo.cpp:712] Warning: Unable to resolve hostname to a (local) "
    "address. Using the loopback address as fallback. Manually set the network interface to bind "
    "to with GLOO_SOCKET_IFNAME. (function operator())"
)


def test_loopback_fallback_alone_is_no_failure(tmp_path: Path) -> None:
    text = f"{LOOPBACK}\n[rank3]:step 10 loss 2.114\n[rank3]:step 20 loss 1.982\n"
    assert diagnose(tmp_path, text) == []


def test_loopback_fallback_is_the_cause_of_the_mesh_failure_on_a_peer(tmp_path: Path) -> None:
    text = (
        "[rank0]:INFO 03-11 14:20:07 distributed init tcp://10.8.3.2:29411 world_size=8\n"
        f"{LOOPBACK}\n"
        "[rank2]:[E ProcessGroupGloo.cpp:139] Gloo connectFullMesh failed with "
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:146] no error\n"
        "[rank2]:Traceback (most recent call last):\n"
        '[rank2]:  File "/srv/app/worker.py", line 77, in init_device\n'
        "[rank2]:RuntimeError: Gloo connectFullMesh failed with "
        "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:146] no error\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "gloo_loopback_fallback"
    assert root(diagnoses)["rank"] == 3
    collateral = {c["signature"]: c for c in diagnoses[0]["collateral"]}
    assert collateral["gloo_full_mesh_failed"]["explained_by_root_cause"] is True


def test_missing_interface_beats_the_traceback_that_reports_it(tmp_path: Path) -> None:
    enforce = (
        "RuntimeError: [enforce fail at /opt/pytorch/third_party/gloo/gloo/transport/tcp/"
        "device.cc:83] ifa != nullptr. Unable to find address for: ens9f1"
    )
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 31, in <module>\n'
        '    dist.init_process_group("gloo", rank=rank, world_size=world)\n'
        f"{enforce}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "gloo_interface_not_found"
    assert root(diagnoses)["line"] == enforce
    assert root(diagnoses)["fields"]["gloo_address_of"] == "ens9f1"


def test_peer_closed_pair_is_collateral_of_the_peer_that_crashed(tmp_path: Path) -> None:
    crash = "[rank1]:RuntimeError: CUDA error: an illegal memory access was encountered"
    text = (
        "[rank0]:2025-05-02 09:00:01,100 step 40\n"
        f"{crash}\n"
        "[rank0]:RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:534] "
        "Connection closed by peer [10.12.0.21]:40713. This is typically caused by a remote "
        "worker crashing.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root(diagnoses)["line"] == crash
    collateral = {c["signature"]: c for c in diagnoses[0]["collateral"]}
    assert collateral["gloo_peer_closed"]["ranks"] == "0"


# Issue 28: Gloo's I/O errors as torch raises them, and the loopback-alias case. A host whose
# name resolves to Debian's 127.0.1.1 advertises it as its Gloo address; peers then connect to
# their own loopback and are refused. The lines below are ours, in Gloo's shapes.
PAIR = "../third_party/gloo/gloo/transport/tcp/pair.cc"


def test_one_line_connect_to_a_loopback_peer_is_diagnosed(tmp_path: Path) -> None:
    line = f"[{PAIR}:761] connect [127.0.1.1]:60817: Connection refused"
    [d] = diagnose(tmp_path, line + "\n")
    assert d["signature"]["id"] == "gloo_connect_loopback_peer"
    assert d["root_cause"]["line"] == line
    assert d["root_cause"]["fields"]["peer_addr"] == "127.0.1.1"
    assert "GLOO_SOCKET_IFNAME" in d["fix"] and "/etc/hosts" in d["fix"]
    assert "127.0.1.1" in d["fix"]
    assert "getent hosts" in d["verify"]


def traceback(host: str, rank: int, error: str) -> str:
    label = f"{host}: [rank{rank}]:"
    return "".join(
        f"{label}{text}\n"
        for text in [
            f"2026-12-03 10:00:01,000 INFO worker {rank} joining the gloo group",
            "Traceback (most recent call last):",
            '  File "/srv/app/train.py", line 40, in <module>',
            '    dist.init_process_group("gloo")',
            error,
        ]
    )


def test_loopback_peer_is_the_host_that_shows_the_address(tmp_path: Path) -> None:
    # node-22 and node-23 are refused at 127.0.1.1; later node-21's pair check shows that
    # address as its own: node-21's line is the root, the refusals are the witnesses.
    bad = (
        f"RuntimeError: [enforce fail at {PAIR}:375] state_ >= CONNECTED. 1 vs 2. Pair is not "
        "connected ([127.0.1.1]:60817 <--> [192.168.7.12]:40211)"
    )
    refused = f"RuntimeError: [{PAIR}:761] connect [127.0.1.1]:60817: Connection refused"
    text = (
        traceback("node-22", 1, refused)
        + traceback("node-23", 2, refused)
        + traceback("node-21", 0, bad)
    )
    [d] = diagnose(tmp_path, text)
    assert d["cause_signature"]["id"] == "gloo_connect_loopback_peer"
    assert d["signature"]["id"] == "gloo_pair_own_address"
    assert d["root_cause"]["host"] == "node-21"
    assert d["root_cause"]["line"].endswith(bad)
    assert d["first_warning"]["line"].endswith(refused)
    assert d["facts"]["ip"] == "127.0.1.1"
    assert "node-21" in d["fix"] and "GLOO_SOCKET_IFNAME" in d["fix"]
    reasons = d["suspects"][0]["reasons"]
    assert "named as the failing peer by 2 other ranks" in reasons
    assert any("own Gloo address is 127.0.1.1" in r for r in reasons)
    collateral = {c["signature"]: c for c in d["collateral"]}
    assert collateral["gloo_connect_refused"]["explained_by_root_cause"] is True


def test_loopback_peer_is_the_one_host_no_peer_could_reach(tmp_path: Path) -> None:
    # node-11 prints nothing with its own address, only its wait for a peer that never came;
    # node-12 and node-13 were refused at 127.0.1.1. The job's hosts compare: node-11 is left.
    refused = f"RuntimeError: [{PAIR}:761] connect [127.0.1.1]:60817: Connection refused"
    waited = f"RuntimeError: [{PAIR}:799] Connect timeout [192.168.7.12]:40211"
    text = (
        traceback("node-11", 0, waited)
        + traceback("node-12", 1, refused)
        + traceback("node-13", 2, refused)
    )
    [d] = diagnose(tmp_path, text)
    assert d["signature"]["id"] == "gloo_connect_loopback_peer"
    assert d["root_cause"]["host"] == "node-11"
    assert d["root_cause"]["line"].endswith(refused)
    assert any("loopback alias" in r for r in d["suspects"][0]["reasons"])
    collateral = {c["signature"]: c for c in d["collateral"]}
    assert collateral["gloo_connect_timeout"]["explained_by_root_cause"] is True


def test_every_host_on_the_loopback_alias_is_one_diagnosis_with_one_fix(tmp_path: Path) -> None:
    # The common case: every node keeps Debian's '127.0.1.1 <hostname>' line, all are refused.
    text = "".join(
        traceback(
            f"node-3{rank}",
            rank,
            f"RuntimeError: Gloo connectFullMesh failed with [{PAIR}:144] timed out connecting: "
            f"SO_ERROR: Connection refused, remote=[127.0.1.1]:{41000 + rank}",
        )
        for rank in range(4)
    )
    [d] = diagnose(tmp_path, text)
    assert d["signature"]["id"] == "gloo_connect_loopback_peer"
    assert "GLOO_SOCKET_IFNAME" in d["fix"]


def test_a_crash_outranks_a_refused_connect_to_a_loopback_peer(tmp_path: Path) -> None:
    # Ranks of one host reach each other at 127.0.1.1: a refusal there can mean the peer
    # process is gone, and its crash is the cause.
    crash = "node-41: [rank1]:RuntimeError: CUDA error: an illegal memory access was encountered"
    refused = (
        f"node-41: [rank0]:RuntimeError: [{PAIR}:761] connect [127.0.1.1]:50210: Connection refused"
    )
    [d] = diagnose(tmp_path, f"{crash}\n{refused}\n")
    assert d["root_cause"]["line"] == crash


def test_healthy_gloo_run_with_connect_retries_is_no_failure(tmp_path: Path) -> None:
    debug = "[/pytorch/third_party/gloo/gloo/transport/tcp/debug_logger.cc:9] ERROR"
    lines = []
    for rank in range(4):
        host, me, peer = f"node-5{rank}", f"10.9.0.{rank + 10}", f"10.9.0.{(rank + 1) % 4 + 10}"
        remote = f"remote=[{peer}]:4{rank}200"
        lines += [
            f"{host}: [rank{rank}]:2026-12-03 11:00:00,000 INFO worker {rank} joins the group",
            f"{host}: {debug} failed to connect, willRetry=1, retry=1, retryLimit=3, "
            f"rank={rank}, size=4, local=[{me}]:5{rank}100, {remote}, "
            f"error=SO_ERROR: Connection refused, {remote}",
            f"{host}: [../third_party/gloo/gloo/transport/tcp/context.cc:105] INFO Rank {rank} is "
            "connected to 3. Expected number of connected peers is: 3",
            f"{host}: [rank{rank}]:2026-12-03 11:00:09,000 INFO epoch 0 step 100 loss 1.734",
        ]
    assert diagnose(tmp_path, "\n".join(lines) + "\n") == []


def test_peer_reset_read_error_is_collateral_of_the_crash(tmp_path: Path) -> None:
    crash = "node-62: [rank2]:RuntimeError: CUDA error: an illegal memory access was encountered"
    reset = (
        f"node-61: [rank1]:RuntimeError: [{PAIR}:589] read: Connection reset by peer, "
        "remote=[10.9.0.62]:43112"
    )
    [d] = diagnose(tmp_path, f"{crash}\n{reset}\n")
    assert d["root_cause"]["line"] == crash
    collateral = {c["signature"]: c for c in d["collateral"]}
    assert collateral["gloo_tcp_io_error"]["ranks"] == "1"


def test_size_mismatch_enforce_is_a_cause_with_both_sizes(tmp_path: Path) -> None:
    line = (
        f"[rank2]:RuntimeError: [enforce fail at {PAIR}:446] op.preamble.length <= op.nbytes. "
        "8192 vs 4096"
    )
    [d] = diagnose(tmp_path, line + "\n")
    assert d["signature"]["id"] == "gloo_collective_size_mismatch"
    assert "8192" in d["cause"] and "4096" in d["cause"]
