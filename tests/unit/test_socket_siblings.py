"""Connect failures that look alike but need different fixes get different signatures.

Each sibling is written in the forms NCCL printed across versions, in the hub's literal form and
in the `Last error:` repeat PyTorch appends to its exception, and must land on its own signature
with its own cause, fix and verify text.
"""

from __future__ import annotations

import pytest

from rankwatch import Catalog

PREFIX = "node17:4012:4088 [3] misc/socket.cc:484 NCCL WARN "

# errno text -> signature that must classify a connect failure with it
SIBLINGS = {
    "Network is unreachable": "nccl_sock_connect_failed",
    "Connection refused": "nccl_sock_connect_refused",
    "No route to host": "nccl_sock_connect_no_route",
    "Connection timed out": "nccl_sock_connect_timeout",
    "Cannot assign requested address": "nccl_sock_connect_addr_unavailable",
}

FORMS = [
    PREFIX + "Net : Connect to 10.20.3.21<51844> failed : {err}",  # NCCL <= 2.12
    PREFIX + "socketStartConnect: Connect to 10.20.3.21<51844> failed : {err}",
    PREFIX + "ncclSocketConnect: connect to 10.20.3.21<51844> failed : {err}",
    PREFIX + "Connection failed : {err}",  # the failure hub's literal form
    "[rank3]: socketStartConnect: Connect to 10.20.3.21<51844> failed : {err}",  # Last error repeat
    "[rank3]: Last error: Connection failed : {err}",
]

OTHER_SIBLINGS = {
    PREFIX + "Net : Connect to fe80::e866:19ff:fe1e:a688%ip6tnl0<41925> failed : Network is "
    "unreachable": "nccl_sock_connect_link_local",
    PREFIX + "socketStartConnect: Connect to 2a02:6b8:fc1d:3606::600a<36541> failed : Network is "
    "unreachable": "nccl_sock_connect_ipv6",
    PREFIX + "NET/Socket : no interface found": "nccl_net_socket_no_iface",
    "node17:4012:4088 [3] transport/net_ib.cc:2458 NCCL WARN NET/IB : Got completion from peer "
    "10.1.4.22<52911> with status=12 opcode=0 len=0 vendor err 129 (Recv) hca mlx5_2": (
        "nccl_ib_wc_retry_exceeded"
    ),
}


def hit_ids(catalog: Catalog, line: str) -> set[str]:
    return {h["id"] for h in catalog.test(line)["hits"]}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("err", sorted(SIBLINGS))
def test_each_errno_lands_on_its_own_signature(catalog: Catalog, form: str, err: str) -> None:
    ids = hit_ids(catalog, form.format(err=err))
    connect_ids = {i for i in ids if i.startswith("nccl_sock_connect")}
    assert connect_ids == {SIBLINGS[err]}, (form, err, ids)


def test_address_kind_interface_and_transport_siblings(catalog: Catalog) -> None:
    for line, want in OTHER_SIBLINGS.items():
        assert want in hit_ids(catalog, line), line


def test_siblings_give_different_advice(catalog: Catalog) -> None:
    ids = [*SIBLINGS.values(), *OTHER_SIBLINGS.values()]
    for key in ("cause", "fix", "verify"):
        texts = [catalog.signature(i)[key] for i in ids]  # type: ignore[index]
        assert len(set(texts)) == len(ids), key
