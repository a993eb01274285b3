"""Classes and shapes found in the third held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, third set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature


def test_old_ofi_plugin_finds_no_provider_behind_a_pdsh_label(tmp_path: Path) -> None:
    warn = (
        "172.20.4.17: WARN: Function: find_ofi_provider Line: 610: "
        "NET/OFI Couldn't find any optimal provider"
    )
    text = (
        "172.20.4.17: INFO: Function: ofi_init Line: 990: NET/OFI Setting RDMAV_FORK_SAFE to 1.\n"
        f"{warn}\n"
        "172.20.4.17: WARN: Function: main Line: 71: NET/OFI OFI NCCL failure: 2\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ofi_no_provider"
    assert root_line(diagnoses) == warn


def test_old_ofi_plugin_no_provider_spelled_out(tmp_path: Path) -> None:
    warn = "get_ofi_provider:298 NCCL WARN NET/OFI Could not find any optimal provider"
    diagnoses = diagnose(tmp_path, f"{warn}\n")
    assert signature(diagnoses) == "nccl_ofi_no_provider"
    assert root_line(diagnoses) == warn


def test_warn_the_poster_put_in_quotes(tmp_path: Path) -> None:
    warn = "\u201dnet/ibwrap.cc:311 NCCL WARN Call to ibv_create_cq failed\u201c"
    text = (
        f"{warn}\n"
        "box3:710:710 [0] NCCL INFO Bootstrap : Using [0]ib1:10.40.0.3<0>\n"
        "box3:710:710 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB ; OOB ib1:10.40.0.3<0>\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_ibv_call_failed"
    assert root_line(diagnoses) == warn


def test_nccl_2_3_socket_warn_without_its_header(tmp_path: Path) -> None:
    warn = (
        "include/socket.h:290 WARN Socket creation failed : "
        "Address family not supported by protocol"
    )
    diagnoses = diagnose(tmp_path, f"{warn}\n")
    assert diagnoses, "no diagnosis"
    assert root_line(diagnoses) == warn
