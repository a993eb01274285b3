"""Classes and shapes found in the eighth held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, eighth set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature


def test_duplicate_gpu_root_is_the_first_report_not_the_other_rank(tmp_path: Path) -> None:
    # Every rank on the node reports the shared device and names another rank that uses it.
    # That rank is a victim of the same launch setting, not a failing peer: the first report
    # stays the root, whichever rank the reports name.
    first = (
        "[1,3]<stdout>:gpu-node-7:4410:4470 [0] init.cc:512 NCCL WARN Duplicate GPU detected : "
        "rank 3 and rank 0 both on CUDA device 5e000"
    )
    text = (
        "[1,1]<stdout>:gpu-node-7:4408:4466 [0] NCCL INFO init.cc:880 -> 5\n"
        "[1,3]<stdout>:\n"
        f"{first}\n"
        "[1,3]<stdout>:gpu-node-7:4410:4470 [0] NCCL INFO init.cc:880 -> 5\n"
        "[1,2]<stdout>:gpu-node-7:4409:4468 [0] init.cc:512 NCCL WARN Duplicate GPU detected : "
        "rank 2 and rank 0 both on CUDA device 5e000\n"
        "[1,0]<stdout>:gpu-node-7:4407:4465 [0] init.cc:512 NCCL WARN Duplicate GPU detected : "
        "rank 0 and rank 1 both on CUDA device 5e000\n"
        "[1,0]<stdout>:gpu-node-7:4407:4465 [0] NCCL INFO init.cc:880 -> 5\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_duplicate_gpu"
    assert root_line(diagnoses) == first


def test_an_injected_search_graph_is_the_root_of_its_import_failure(tmp_path: Path) -> None:
    # A VM image sets NCCL_GRAPH_FILE for its largest size; on a smaller VM the graph names a
    # device the job does not have. The setting is the fault, the WARN is what it causes.
    setting = (
        "gpu-vm-2:5501:5540 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /opt/vm/graph4.xml"
    )
    text = (
        "gpu-vm-2:5501:5501 [0] NCCL INFO Bootstrap : Using eth0:10.3.1.8<0>\n"
        "gpu-vm-2:5501:5540 [0] NCCL INFO NCCL_TOPO_FILE set by environment to /opt/vm/topo4.xml\n"
        f"{setting}\n"
        "\n"
        "gpu-vm-2:5501:5540 [0] graph/search.cc:710 NCCL WARN XML Import Channel : dev 2 not "
        "found.\n"
        "gpu-vm-2:5501:5540 [0] NCCL INFO graph/search.cc:740 -> 2\n"
        "gpu-vm-2:5501:5540 [0] NCCL INFO graph/search.cc:747 -> 2\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == setting
    assert "XML Import Channel" in str(diagnoses[0]["first_warning"]["line"])
    assert "NCCL_GRAPH_FILE" in str(diagnoses[0]["fix"])


def test_an_injected_search_graph_alone_is_no_failure(tmp_path: Path) -> None:
    text = (
        "gpu-vm-2:5501:5540 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to "
        "/opt/vm/graph4.xml\n"
        "gpu-vm-2:5501:5540 [0] NCCL INFO comm 0x4a10 rank 0 nranks 4 cudaDev 0 busId 200000 - "
        "Init COMPLETE\n"
    )
    assert diagnose(tmp_path, text) == []


def test_a_nic_outside_pci_is_the_root_of_its_missing_bus_id(tmp_path: Path) -> None:
    # A USB network adapter has no PCI path; NCCL attaches it to the first CPU and older
    # releases then fail on the NIC node's missing bus id.
    usb = (
        "dev-box:9031:9077 [1] NCCL INFO Topology detection: network path "
        "/sys/devices/pci0000:40/0000:40:07.1/0000:44:00.3/usb3/3-2/3-2:1.0 is not a PCI device "
        "(usb). Attaching to first CPU"
    )
    text = (
        f"{usb}\n"
        "dev-box:9031:9077 [1] graph/xml.h:85 NCCL WARN Attribute busid of node nic not found\n"
        "dev-box:9031:9077 [1] NCCL INFO graph/topo.cc:620 -> 3\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == usb


def test_other_missing_attributes_keep_the_warning_as_the_root(tmp_path: Path) -> None:
    # A NIC outside PCI does not explain a CPU node without an architecture.
    warn = "dev-box:9031:9077 [1] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found"
    text = (
        "dev-box:9031:9077 [1] NCCL INFO Topology detection: network path "
        "/sys/devices/virtual/net/tap0 is not a PCI device (virtual). Attaching to first CPU\n"
        f"{warn}\n"
        "dev-box:9031:9077 [1] NCCL INFO graph/topo.cc:493 -> 3\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == warn


def test_cuda_system_not_ready_in_nccl_tests_is_the_cause(tmp_path: Path) -> None:
    # Without the Fabric Manager on an NVSwitch machine CUDA fails with error 802 before NCCL
    # prints anything; nccl-tests reports it in its own words.
    failure = "hgx-b-04: Test CUDA failure common.cu:1002 'system not yet initialized'"
    text = (
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 67108864 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        "#\n"
        "# Using devices\n"
        f"{failure}\n"
        " .. hgx-b-04 pid 7781: Test failure common.cu:905\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "cuda_system_not_ready"
    assert root_line(diagnoses) == failure
