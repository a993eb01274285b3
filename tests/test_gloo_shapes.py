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
