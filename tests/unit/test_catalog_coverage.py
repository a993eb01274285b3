"""Coverage of the shipped catalog against NCCL's and PyTorch's own message templates.

Every template of ../shared/reference/messages/ is instantiated inside the line shape its
program prints and run through the real engine (Catalog.test peels prefixes and classifies
exactly as the engine does). Run with `pytest -s` to see the numbers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import pytest

import message_formats as mf
from rankwatch import Catalog

pytestmark = pytest.mark.skipif(
    not (mf.MESSAGES_DIR / "nccl.tsv").exists(),
    reason=f"reference message tables not found in {mf.MESSAGES_DIR}",
)

# Which catalog subsystems fit a message from a given NCCL source file (path after src/).
# The first matching prefix wins; files that host several layers list all of them.
SUBSYSTEMS_BY_FILE: list[tuple[str, frozenset[str]]] = [
    (prefix, frozenset(subs.split()))
    for prefix, subs in [
        ("bootstrap.cc", "bootstrap socket"),
        ("misc/socket.cc", "socket"),
        ("include/socket.h", "socket bootstrap"),
        ("transport/net_socket.cc", "socket"),
        ("os/linux_socket_pair.cc", "socket"),
        ("os/windows_socket_pair.cc", "socket"),
        ("os/linux.cc", "socket init cuda"),
        ("os/windows_ipcsocket.cc", "p2p"),
        ("os/windows.cc", "socket shm init cuda"),
        ("transport/net_ib", "ib"),
        ("transport/gdaki", "ib"),
        ("transport/net.cc", "proxy ib init p2p"),
        ("transport/coll_net.cc", "init ib"),
        ("transport/p2p.cc", "p2p init"),
        ("transport/nvls.cc", "p2p init"),
        ("transport/shm.cc", "shm"),
        ("transport.cc", "init"),
        ("misc/ibvwrap.cc", "ib"),
        ("misc/ibvsymbols.cc", "ib"),
        ("misc/mlx5dvwrap.cc", "ib"),
        ("include/ibvwrap.h", "ib"),
        ("gin/", "ib init"),
        ("rma/", "ib init proxy"),
        ("plugin/rma", "ib init"),
        ("plugin/gin", "ib init"),
        ("plugin/", "init"),
        ("misc/ipcsocket.cc", "p2p"),
        ("misc/shmutils.cc", "shm"),
        ("proxy.cc", "proxy"),
        ("ras/", "ras"),
        ("misc/cudawrap.cc", "cuda"),
        ("include/cudawrap.h", "cuda"),
        ("misc/nvmlwrap.cc", "cuda"),
        ("misc/gdrwrap.cc", "memory"),
        ("include/gdrwrap.h", "memory"),
        ("misc/strongstream.cc", "cuda"),
        ("include/alloc.h", "memory cuda"),
        ("allocator.cc", "memory"),
        ("mem_manager.cc", "memory"),
        ("misc/utils.cc", "memory init"),
        ("include/checks.h", "cuda socket memory init"),
        ("dev_runtime.cc", "init memory ib"),
        ("devcomm/", "init"),
        ("enqueue.cc", "init cuda"),
        ("ce_coll.cc", "init cuda"),
        ("mnnvl.cc", "p2p init"),
        ("graph/", "init p2p"),
        ("init.cc", "init p2p cuda ib"),
        ("", "init"),
    ]
]

# Which catalog subsystems fit a PyTorch message, by the source file's name.
TORCH_SUBSYSTEMS: list[tuple[str, frozenset[str]]] = [
    (part, frozenset(subs.split()))
    for part, subs in [
        ("TCPStore", "store"),
        ("socket.cpp", "store"),
        ("Store.hpp", "store python"),
        ("Utils.hpp", "store python watchdog"),
        ("elastic/", "elastic store"),
        ("rendezvous.py", "store elastic"),
        ("launcher/", "elastic"),
        ("run.py", "elastic"),
        ("", "watchdog python memory cuda init store"),
    ]
]
# Exception types that report a programming mistake in the caller's Python code rather than a
# failure of the distributed job; they are matched by the generic exception signatures only.
TORCH_API_MISUSE = (
    "ValueError",
    "TypeError",
    "NotImplementedError",
    "AssertionError",
    "ImportError",
    "LookupError",
    "NotADirectoryError",
)
TORCH_MATCHED_MIN = 0.95
TORCH_SPECIFIC_MIN = 0.90

NCCL_MATCHED_MIN = 0.95
NCCL_SPECIFIC_MIN = 0.60
SPECIFIC_MAX_FORMATS = 8


def torch_failure_rows() -> list[mf.Template]:
    """ERROR-level logs and exceptions of torch.tsv, less the Python API-misuse exceptions."""
    return [
        t
        for t in mf.read_tsv("torch.tsv")
        if t.level.startswith("ERROR")
        or (t.level.startswith("EXCEPTION:") and not t.level.endswith(TORCH_API_MISUSE))
    ]


def torch_subsystems(file: str) -> frozenset[str]:
    return next(subs for part, subs in TORCH_SUBSYSTEMS if part in file)


def allowed_subsystems(files: tuple[str, ...]) -> set[str]:
    allowed: set[str] = set()
    for f in files:
        path = f.removeprefix("src/")
        allowed |= next(subs for prefix, subs in SUBSYSTEMS_BY_FILE if path.startswith(prefix))
    return allowed


@dataclass
class Outcome:
    instance: mf.Instance
    hits: list[str]


def classify(catalog: Catalog, instances: list[mf.Instance]) -> list[Outcome]:
    return [Outcome(i, [h["id"] for h in catalog.test(i.line)["hits"]]) for i in instances]


def test_nccl_warn_formats_since_2_18_are_covered(catalog: Catalog) -> None:
    outcomes = classify(catalog, [mf.nccl_line(t) for t in mf.nccl_warns_since_2_18()])
    formats_per_signature = Counter(s for o in outcomes for s in set(o.hits))
    subsystem = {s["id"]: s["subsystem"] for s in catalog.signatures()}

    total = len(outcomes)
    matched = [o for o in outcomes if o.hits]
    specific = [
        o for o in matched if any(formats_per_signature[s] <= SPECIFIC_MAX_FORMATS for s in o.hits)
    ]
    misplaced = [
        (o.instance.line, o.hits)
        for o in matched
        if not {subsystem[s] for s in o.hits} & allowed_subsystems(o.instance.template.files)
    ]
    print(
        f"\nNCCL WARN formats since v2.18.1-1: {total}; matched {len(matched)} "
        f"({len(matched) / total:.1%}); matched by signatures of <= {SPECIFIC_MAX_FORMATS} "
        f"formats {len(specific)} ({len(specific) / total:.1%}); signatures involved "
        f"{len(formats_per_signature)}; subsystem mismatches {len(misplaced)}"
    )
    unmatched = [o.instance.line for o in outcomes if not o.hits]
    assert len(matched) >= NCCL_MATCHED_MIN * total, unmatched[:20]
    assert len(specific) >= NCCL_SPECIFIC_MIN * total
    assert misplaced == []


def test_catalog_does_not_claim_foreign_messages(catalog: Catalog) -> None:
    """A near miss of a real message (its words shuffled) is not matched by the same signature."""
    line = mf.nccl_line(
        mf.Template("WARN", ("src/misc/socket.cc",), "v2.30.7-1", "failed : Connect to %s")
    ).line
    assert not any(h["id"].startswith("nccl_sock_connect") for h in catalog.test(line)["hits"])


def test_torch_failure_messages_are_covered(catalog: Catalog) -> None:
    outcomes = classify(catalog, [mf.torch_line(t) for t in torch_failure_rows()])
    generic = {
        "pt_runtime_error",
        "py_exception",
        "pt_dist_backend_error",
        "pt_dist_store_error",
        "pt_dist_network_error",
    }
    formats_per_signature = Counter(s for o in outcomes for s in set(o.hits))
    subsystem = {s["id"]: s["subsystem"] for s in catalog.signatures()}

    total = len(outcomes)
    matched = [o for o in outcomes if o.hits]
    named = [o for o in matched if set(o.hits) - generic]
    specific = [
        o
        for o in named
        if any(formats_per_signature[s] <= SPECIFIC_MAX_FORMATS for s in set(o.hits) - generic)
    ]
    misplaced = [  # the generic wrappers name an exception type, not a layer: not checked
        (o.instance.line, o.hits)
        for o in named
        if not {subsystem[s] for s in set(o.hits) - generic}
        & torch_subsystems(o.instance.template.files[0])
    ]
    print(
        f"\nPyTorch failure messages (ERROR logs and exceptions, API misuse excluded): {total}; "
        f"matched {len(matched)} ({len(matched) / total:.1%}); by a signature of their own "
        f"(not only a generic exception wrapper) {len(named)} ({len(named) / total:.1%}); by "
        f"signatures of <= {SPECIFIC_MAX_FORMATS} templates {len(specific)} "
        f"({len(specific) / total:.1%}); subsystem mismatches {len(misplaced)}"
    )
    assert len(matched) >= TORCH_MATCHED_MIN * total
    assert len(named) >= TORCH_SPECIFIC_MIN * total
    assert misplaced == []
