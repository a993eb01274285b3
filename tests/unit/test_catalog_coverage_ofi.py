"""Coverage of the shipped catalog against aws-ofi-nccl's and libfabric's (EFA, CXI) own message
templates (../shared/reference/messages/aws-ofi-nccl.tsv, libfabric-efa-cxi.tsv).

Every plugin WARN of releases 1.14-1.21 is instantiated as NCCL's logger prints it (`<host>:<pid>:
<tid> [<dev>] <function>:<line> NCCL WARN NET/OFI <text>`), every libfabric warning as libfabric
writes it (`libfabric:<pid>:<time>::<prov>:...<warn> <text>`, in the prefix form of its last
release), and run through the real engine. Run with `pytest -s` to see the numbers.
"""

from __future__ import annotations

from collections import Counter

import pytest

import message_formats as mf
from rankwatch import Catalog

pytestmark = pytest.mark.skipif(
    not (mf.MESSAGES_DIR / "aws-ofi-nccl.tsv").exists(),
    reason=f"reference message tables not found in {mf.MESSAGES_DIR}",
)

OFI_MATCHED_MIN = 0.80
OFI_SPECIFIC_MIN = 0.50
SPECIFIC_MAX_FORMATS = 8
# Signatures outside the plugin's own files that may rightly claim one of its lines.
# torch's "no GPU" signature also takes "Invalid device index" (an exception text of torch);
# NVSHMEM prints a bare "ibv_create_qp failed" as libfabric's EFA provider does.
FOREIGN_OK: frozenset[str] = frozenset({"pt_no_gpu_for_nccl", "nvshmem_transport_init_failed"})


def hits(catalog: Catalog, instances: list[mf.Instance]) -> list[tuple[mf.Instance, list[str]]]:
    return [(i, [h["id"] for h in catalog.test(i.line)["hits"]]) for i in instances]


def figures(
    catalog: Catalog, outcomes: list[tuple[mf.Instance, list[str]]]
) -> tuple[int, int, int, int, list[tuple[str, list[str]]]]:
    per_signature = Counter(s for _, h in outcomes for s in set(h))
    subsystem = {s["id"]: s["subsystem"] for s in catalog.signatures()}
    matched = [(i, h) for i, h in outcomes if h]
    specific = [o for o in matched if any(per_signature[s] <= SPECIFIC_MAX_FORMATS for s in o[1])]
    misplaced = [
        (i.line, h)
        for i, h in matched
        if any(subsystem[s] != "ofi" and s not in FOREIGN_OK for s in h)
    ]
    return len(outcomes), len(matched), len(specific), len(per_signature), misplaced


def test_aws_ofi_nccl_warn_formats_since_1_14_are_covered(catalog: Catalog) -> None:
    outcomes = hits(catalog, [mf.ofi_line(t) for t in mf.ofi_warns_since_1_14()])
    total, matched, specific, signatures, misplaced = figures(catalog, outcomes)
    print(
        f"\naws-ofi-nccl WARN formats of releases 1.14-1.21: {total}; matched {matched} "
        f"({matched / total:.1%}); matched by signatures of <= {SPECIFIC_MAX_FORMATS} formats "
        f"{specific} ({specific / total:.1%}); signatures involved {signatures}; "
        f"subsystem mismatches {len(misplaced)}"
    )
    unmatched = [i.line for i, h in outcomes if not h]
    assert matched >= OFI_MATCHED_MIN * total, unmatched[:20]
    assert specific >= OFI_SPECIFIC_MIN * total
    assert misplaced == []


def test_libfabric_efa_cxi_warnings_are_classified(catalog: Catalog) -> None:
    """No threshold from the issue: the figures are reported, the failure-relevant warnings
    (device, registration, GPU memory, peers, Slingshot link and VNI) are matched, and every
    hit is an `ofi` signature."""
    outcomes = hits(catalog, [mf.libfabric_line(t) for t in mf.libfabric_rows()])
    for prov in ("efa", "cxi"):
        part = [o for o in outcomes if f":{prov}:" in o[0].line.split("<warn>")[0]]
        total, matched, specific, signatures, misplaced = figures(catalog, part)
        print(
            f"\nlibfabric {prov.upper()} provider warnings: {total}; matched {matched} "
            f"({matched / total:.1%}); by signatures of <= {SPECIFIC_MAX_FORMATS} formats "
            f"{specific} ({specific / total:.1%}); signatures involved {signatures}; "
            f"subsystem mismatches {len(misplaced)}"
        )
        assert misplaced == []
    key = {
        "ibv_open_device failed! errno: %d\\n": "efa_device_open_failed",
        "Unable to register MR of %zu bytes: %s, flags %ld, ibv pd: %p, total mr reg size %zu, "
        "mr reg count %zu\\n": "efa_mr_reg_failed",
        "Peer to peer support is currently required, but not available.": (
            "efa_hmem_p2p_unavailable"
        ),
        "The peer of address %s becomes unresponsive\\n": "efa_peer_unresponsive",
        "CXI retry handler not running for device: %s\\n": "cxi_link_down",
        "Invalid VNI: %u\\n": "cxi_vni_auth_failed",
        "Failed to open CXI Device, ret: %d\\n": "cxi_device_open_failed",
    }
    found = {i.template.format: h for i, h in outcomes if i.template.format in key}
    assert set(found) == set(key)
    for fmt, sig in key.items():
        assert sig in found[fmt], (fmt, found[fmt])


@pytest.mark.parametrize(
    ("line", "signature", "fields"),
    [
        (
            "ip-10-0-1-5:4012:4012 [0] NCCL INFO NET/OFI No eligible providers were found",
            "nccl_ofi_no_provider",
            {},
        ),
        (
            "ip-10-0-1-5:4012:4088 [3] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI "
            "fi_getinfo() call failed: No data available",
            "nccl_ofi_no_provider",
            {"error": "No data available"},
        ),
        (
            "ip-10-0-1-5:4012:4012 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is "
            "efa-direct (found 4 nics)",
            "ofi_selected_provider",
            {"ofi_provider": "efa", "ofi_fabric": "efa-direct", "ofi_nics": "4"},
        ),
        (
            "ip-10-0-1-5:4012:4012 [0] NCCL INFO NET/OFI Using Libfabric version 1.22",
            "ofi_libfabric_version",
            {"libfabric_version": "1.22"},
        ),
        (
            "ip-10-0-1-5:4012:4090 [2] int nccl_net_ofi_rdma_domain_t::reg_mr(nccl_ofi_mr_ckey_ref,"
            " int, nccl_net_ofi_rdma_mr_handle_t**):812 NCCL WARN NET/OFI Unable to register "
            "memory (type = 2) for device 0. RC: -12, Error: Cannot allocate memory",
            "ofi_mr_register_failed",
            {"rc": "-12", "error": "Cannot allocate memory", "device": "0"},
        ),
        (
            "libfabric:4012:1701234567::efa:mr:efa_mr_reg_impl():1050<warn> Unable to register MR "
            "of 2097152 bytes: Cannot allocate memory, flags 0, ibv pd: 0x55d0, total mr reg size "
            "1073741824, mr reg count 65536",
            "efa_mr_reg_failed",
            {"error": "Cannot allocate memory", "mr_count": "65536"},
        ),
        (
            "libfabric:77:cxi:core:cxip_gen_auth_key():92<warn> nid001234: Invalid VNI: 0",
            "cxi_vni_auth_failed",
            {"vni": "0"},
        ),
    ],
)
def test_ofi_lines_classify_with_their_facts(
    catalog: Catalog, line: str, signature: str, fields: dict[str, str]
) -> None:
    result = catalog.test(line)
    hit = next(h for h in result["hits"] if h["id"] == signature)
    for name, value in fields.items():
        assert hit["fields"].get(name) == value, (name, hit["fields"])


def test_cxi_node_name_is_the_host(catalog: Catalog) -> None:
    result = catalog.test(
        "libfabric:77:1701234567::cxi:core:cxip_rh():92<warn> nid001234: CXI retry handler not "
        "running for device: cxi0"
    )
    assert result["host"] == "nid001234"
    assert [h["id"] for h in result["hits"]] == ["cxi_link_down"]
