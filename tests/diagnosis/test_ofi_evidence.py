"""aws-ofi-nccl and libfabric as evidence: the provider's own reason on the host that shows it
is the root cause, joined to the NCCL process by host and pid whether libfabric wrote to the
same stream or to a file of its own in the job's folder; the other hosts are the comparison and
their refused connections and timeouts collateral. A healthy EFA run (OFI INFO lines, benign
WARNs of the plugin and of libfabric) gets no diagnosis. The lines are invented from the
message tables (../shared/reference/messages/), in the shapes the programs print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import analyze_dir
from rankwatch import Catalog

HOSTS = 4
RANKS_PER_HOST = 2
DEVICE_DENIED = "ibv_open_device failed! errno: 13"

# What a healthy EFA run prints besides the INFO lines: harmless plugin and libfabric warnings.
HEALTHY_PLUGIN_WARNS = [
    "nccl_net_ofi_create_plugin:211 NCCL WARN NET/OFI Failed to find shared library info.  "
    "Not configuring NCCL_TUNER_PLUGIN.",
    "int platform_init(const char**):99 NCCL WARN NET/OFI AWS platform priority: -1 (topo not set)",
    "int nccl_ofi_param_t::get():40 NCCL WARN NET/OFI WARNING: Use of "
    "OFI_NCCL_RDMA_MAX_POSTED_BOUNCE_BUFFERS is deprecated.",
]
HEALTHY_LIBFABRIC_WARNS = [
    "efa:ep_ctrl:efa_rdm_ep_setopt():1404<warn> FI_OPT_SHARED_MEMORY_PERMITTED set to false",
    "efa:av:efa_av_open():590<warn> FI_AV_MAP is deprecated in Libfabric 2.x. Please use "
    "FI_AV_TABLE. EFA provider will now switch to using FI_AV_TABLE.",
    "efa:ep_ctrl:efa_rdm_ep_open():612<warn> libfabric 2.1.0amzn3.0 efa endpoint created! "
    "address: fi_addr_efa://[fe80::4b0:a3ff:fe12:3456]:1:12345",
]
HEALTHY_TEARDOWN = [
    "nccl_net_ofi_fini:120 NCCL WARN NET/OFI 2 domains still active after cleanup",
    "nccl_ofi_mr_cache_finalize:64 NCCL WARN NET/OFI MR cache destroyed while 3 memory segments "
    "still held by the application. Forcing release of remaining entries.",
]


def write_job(
    root: Path,
    bad_host: int | None = None,
    libfabric: str = "none",
    fails: bool = True,
    healthy_warns: bool = False,
    bad_provider: str = "",
) -> None:
    """Per-host NCCL logs of an 8-rank job on EFA. `bad_host` finds no provider (its EFA
    device cannot be opened) and falls back to sockets; `libfabric` says where libfabric's own
    warning goes: "same" (the rank's stderr), "file" (`node-N.libfabric.log`), or "none". With
    `bad_provider`, that host's plugin selects that provider instead (FI_PROVIDER set there)."""
    root.mkdir(parents=True)
    for h in range(1, HOSTS + 1):
        host = f"node-{h}"
        out: list[str] = []
        for d in range(RANKS_PER_HOST):
            rank = (h - 1) * RANKS_PER_HOST + d
            pid = h * 1000 + d
            p = f"{host}:{pid}:{pid} [{d}]"
            out += [
                f"{p} NCCL INFO Bootstrap : Using eth0:10.0.0.{h}<0>",
                f"{p} NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)",
                f"{p} NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.2",
                f"{p} NCCL INFO NET/OFI Using Libfabric version 1.22",
            ]
            if healthy_warns:
                out += [f"{host}:{pid}:{pid} [{d}] {w}" for w in HEALTHY_PLUGIN_WARNS]
                out += [f"libfabric:{pid}:1764756000::{w}" for w in HEALTHY_LIBFABRIC_WARNS]
            if h == bad_host and bad_provider:
                out += [
                    f"{p} NCCL INFO NET/OFI Selected provider is {bad_provider}, fabric is "
                    "172.31.0.0/16 (found 1 nics)",
                    f"{p} NCCL INFO Using network Libfabric",
                ]
            elif h == bad_host:
                if libfabric == "same":
                    out.append(
                        f"libfabric:{pid}:1764756000::efa:core:efa_device_open():120<warn> "
                        + DEVICE_DENIED
                    )
                out += [
                    f"{p} NCCL INFO NET/OFI No eligible providers were found",
                    f"{p} NCCL INFO NET/Socket : Using [0]eth0:10.0.0.{h}<0>",
                    f"{p} NCCL INFO Using network Socket",
                ]
            else:
                out += [
                    f"{p} NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct "
                    "(found 4 nics)",
                    f"{p} NCCL INFO NET/OFI Using transport protocol RDMA",
                    f"{p} NCCL INFO Using network Libfabric",
                ]
            out.append(
                f"{p} NCCL INFO comm 0x55{rank} rank {rank} nranks 8 cudaDev {d} nvmlDev {d} "
                f"busId {d}0 commId 0xabc - Init COMPLETE"
            )
            if fails:
                if bad_host and h != bad_host:
                    out.append(
                        f"{p} misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                        f"10.0.0.{bad_host}<4567{d}> failed : Connection refused"
                    )
                out.append(
                    f"[rank{rank}]:[E1203 10:10:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 "
                    f"PG GUID 0(default_pg) Rank {rank}] Watchdog caught collective operation "
                    "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                    "Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
                )
            elif healthy_warns:
                out += [f"{host}:{pid}:{pid} [{d}] {w}" for w in HEALTHY_TEARDOWN]
        (root / f"{host}.log").write_text("\n".join(out) + "\n")
    if bad_host and libfabric == "file":
        pids = [bad_host * 1000 + d for d in range(RANKS_PER_HOST)]
        (root / f"node-{bad_host}.libfabric.log").write_text(
            "".join(
                f"libfabric:{pid}:1764756000::efa:core:efa_device_open():120<warn> "
                f"{DEVICE_DENIED}\n"
                for pid in pids
            )
        )


def diagnose(root: Path, catalog: Catalog) -> list[dict[str, Any]]:
    diagnoses, _ = analyze_dir(root, catalog)
    return diagnoses


@pytest.mark.parametrize("where", ["same", "file"])
def test_libfabric_reason_is_the_root_on_the_host_without_a_provider(
    tmp_path: Path, catalog: Catalog, where: str
) -> None:
    write_job(tmp_path / "job", bad_host=3, libfabric=where)
    (d,) = diagnose(tmp_path / "job", catalog)
    root = d["root_cause"]
    assert d["signature"]["id"] == "efa_device_open_failed"
    assert root["line"].endswith(DEVICE_DENIED)
    # Joined to the NCCL process by host and pid: node-3's first rank.
    assert (root["host"], root["pid"], root["rank"]) == ("node-3", 3000, 4)
    suspect = d["suspects"][0]
    rules = {e["rule"] for e in suspect["evidence"]}
    # The other hosts are the comparison: node-3 alone fell back to sockets.
    assert {"cause_signature", "identity_outlier", "peer_naming"} <= rules
    assert any("Socket" in e["why"] and "Libfabric" in e["why"] for e in suspect["evidence"])
    # The peers' refused connections and every timeout are collateral.
    assert "/dev/infiniband" in d["fix"]
    assert 4 not in expand(d["collateral_ranks"])
    assert {0, 1, 2, 3, 6, 7} <= expand(d["collateral_ranks"])


def test_no_eligible_provider_alone_is_the_cause_on_its_host(
    tmp_path: Path, catalog: Catalog
) -> None:
    write_job(tmp_path / "job", bad_host=2, libfabric="none")
    (d,) = diagnose(tmp_path / "job", catalog)
    assert d["signature"]["id"] == "nccl_ofi_no_provider"
    assert d["root_cause"]["host"] == "node-2"
    assert d["root_cause"]["line"].endswith("NET/OFI No eligible providers were found")


def test_libfabric_file_of_a_host_that_is_not_in_the_job_stays_unjoined(
    tmp_path: Path, catalog: Catalog
) -> None:
    """The file's name must name a host of the job as a whole word: node-3 is not node-30."""
    write_job(tmp_path / "job", bad_host=3, libfabric="file")
    (tmp_path / "job" / "node-3.libfabric.log").rename(tmp_path / "job" / "node-30.libfabric.log")
    (d,) = diagnose(tmp_path / "job", catalog)
    # libfabric's lines stay on a source of no host; node-3's own line is the root.
    assert (d["signature"]["id"], d["root_cause"]["host"]) == ("nccl_ofi_no_provider", "node-3")


def test_a_host_on_another_provider_is_the_odd_one_out(tmp_path: Path, catalog: Catalog) -> None:
    """FI_PROVIDER=tcp on one host: the plugin loads, NCCL uses Libfabric everywhere, and only
    the provider the plugin selected tells that host apart."""
    write_job(tmp_path / "job", bad_host=2, bad_provider="tcp")
    (d,) = diagnose(tmp_path / "job", catalog)
    assert d["root_cause"]["host"] == "node-2"
    assert "Selected provider is tcp" in d["root_cause"]["line"]
    why = [e["why"] for e in d["suspects"][0]["evidence"]]
    assert any("libfabric provider (tcp)" in w and "efa" in w for w in why), why


def test_cxi_warning_in_the_ranks_stream_joins_its_process(
    tmp_path: Path, catalog: Catalog
) -> None:
    """Slingshot: the CXI provider names its node; its VNI error is the root on that rank."""
    job = tmp_path / "job"
    job.mkdir()
    for n in (1, 2):
        host, pid = f"nid00000{n}", 500 + n
        p = f"{host}:{pid}:{pid} [0]"
        lines = [
            f"{p} NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.2",
            f"{p} NCCL INFO comm 0x5{n} rank {n - 1} nranks 2 cudaDev 0 nvmlDev 0 busId 10 "
            "commId 0x2 - Init COMPLETE",
        ]
        if n == 2:
            lines.insert(
                1,
                f"libfabric:{pid}:1764756000::cxi:core:cxip_gen_auth_key():92<warn> {host}: "
                "Invalid VNI: 0",
            )
            lines.insert(2, f"{p} NCCL INFO NET/OFI No eligible providers were found")
        lines.append(
            f"[rank{n - 1}]:[E1203 10:10:00.000000000 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID "
            f"0(default_pg) Rank {n - 1}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
            "for 600010 milliseconds before timing out."
        )
        (job / f"{host}.log").write_text("\n".join(lines) + "\n")
    (d,) = diagnose(job, catalog)
    root = d["root_cause"]
    assert d["signature"]["id"] == "cxi_vni_auth_failed"
    assert (root["host"], root["pid"], root["rank"]) == ("nid000002", 502, 1)
    assert "VNI 0" in d["cause"]


def test_healthy_efa_run_gets_no_diagnosis(tmp_path: Path, catalog: Catalog) -> None:
    write_job(tmp_path / "job", fails=False, healthy_warns=True)
    assert diagnose(tmp_path / "job", catalog) == []


def test_healthy_single_host_without_efa_gets_no_diagnosis(
    tmp_path: Path, catalog: Catalog
) -> None:
    """The plugin installed on a host without EFA: no provider, NCCL uses its own transports
    within the host, and the job works."""
    job = tmp_path / "job"
    job.mkdir()
    lines = []
    for d in range(2):
        p = f"gpu-1:{100 + d}:{100 + d} [{d}]"
        lines += [
            f"{p} NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.14.2",
            f"{p} NCCL INFO NET/OFI No eligible providers were found",
            f"{p} NCCL INFO Using network Socket",
            f"{p} NCCL INFO comm 0x5{d} rank {d} nranks 2 cudaDev {d} nvmlDev {d} busId {d}0 "
            "commId 0x1 - Init COMPLETE",
        ]
    (job / "gpu-1.log").write_text("\n".join(lines) + "\n")
    assert diagnose(job, catalog) == []


def expand(ranges: Any) -> set[int]:
    """Collateral ranks as the diagnosis lists them ("0-3,6")."""
    out: set[int] = set()
    text = ranges if isinstance(ranges, str) else ",".join(str(r) for r in ranges)
    for part in filter(None, text.split(",")):
        a, _, b = part.partition("-")
        out |= set(range(int(a), int(b or a) + 1))
    return out
