"""NVSHMEM's error chains (DeepEP, expert-parallel serving, symmetric memory): each level of a
failing call prints its own `<file>:<line>: non-zero status: N ...` line, so the first NVSHMEM
line of a process is the most specific one. Lines invented in our own words, in the shapes of
NVSHMEM's error macros."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def test_a_heap_allocation_failure_outranks_the_illegal_access_after_it(tmp_path: Path) -> None:
    heap = "/opt/nvshmem/src/host/mem/mem_heap.cpp:1498: non-zero status: 2 cuMemCreate failed "
    text = (
        f"{heap}\n"
        "\n"
        f"{heap}\n"
        "/opt/nvshmem/src/host/mem/mem_heap.cpp:1577: non-zero status: 7 "
        "allocate_physical_memory_to_heap failed\n"
        "[/opt/nvshmem/src/host/coll/barrier/barrier.cpp:25] cuda failed with an illegal memory "
        "access was encountered \n"
        "[/opt/nvshmem/src/host/coll/barrier/barrier.cpp:25] cuda failed with an illegal memory "
        "access was encountered \n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nvshmem_heap_alloc_failed"
    assert root_line(diagnoses) == heap
    assert "status 2" in diagnoses[0]["cause"]


def test_a_transport_that_failed_to_start_is_the_cause_of_the_init_failure(
    tmp_path: Path,
) -> None:
    first = (
        "/build/nvshmem_src/src/host/transport/transport.cpp:nvshmemi_transport_init:281: "
        "init failed for transport: IBGDA"
    )
    text = (
        f"{first}\n"
        "/build/nvshmem_src/src/host/transport/transport.cpp:nvshmemi_transport_init:293: "
        "Unable to initialize any transports. returning error.\n"
        "/build/nvshmem_src/src/host/init/init.cu:1002: non-zero status: 7 nvshmem detect topo "
        "failed \n"
        "/build/nvshmem_src/src/host/init/init.cu:nvshmemi_check_state_and_init:1090: nvshmem "
        "initialization failed, exiting \n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nvshmem_transport_init_failed"
    assert root_line(diagnoses) == first
    assert "IBGDA" in diagnoses[0]["cause"]


def test_the_newer_error_status_form_is_read_too(tmp_path: Path) -> None:
    line = (
        "/src/nvshmem/src/host/init/init.cu:1011: error status: 7 (NVSHMEMX_ERROR_INTERNAL) "
        "building transport map failed"
    )
    diagnoses = diagnose(tmp_path, f"{line}\n")
    assert signature(diagnoses) == "nvshmem_call_failed"
    assert root(diagnoses)["line"] == line


def test_a_broken_bootstrap_is_collateral_of_the_peer_that_failed(tmp_path: Path) -> None:
    cause = "/ws/nvshmem/src/modules/transport/ibrc/ibrc.cpp:1441: NULL value Unable to create ah."
    text = (
        "/ws/nvshmem/src/modules/bootstrap/uid/bootstrap_uid.cpp:94: non-zero status: -6 "
        "allgather failed\n"
        f"{cause}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nvshmem_transport_init_failed"
    assert root_line(diagnoses) == cause
