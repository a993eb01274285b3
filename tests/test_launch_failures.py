"""Failures before or beside the collectives: the launcher cannot reach a node (ssh), MPI cannot
initialise, NCCL finds its net plugin but cannot load it, nvidia-smi cannot reach a GPU. Each
is the root cause over what follows from it (mpirun's lost daemon, a later failing run in the
same paste, 'network … not found'), and NCCL lines indented in a pasted Markdown list are
read like any other. Lines invented in the shapes of real reports (nccl-tests #92, #299,
NCCL #1562, a GKE gIB plugin report, returnn #1486)."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature

LOST_DAEMON = """\
--------------------------------------------------------------------------
PRTE has lost communication with a remote daemon.

  HNP daemon   : [prterun-head-0-12@0,0] on node head-0
  Remote daemon: [prterun-head-0-12@0,1] on node 10.0.0.12

This is usually due to either a failure of the TCP network
--------------------------------------------------------------------------
"""


def test_ssh_refused_outranks_the_lost_daemon_it_causes(tmp_path: Path) -> None:
    ssh = "ssh: connect to host 10.0.0.12 port 22: Connection refused"
    text = f"$ mpirun -np 16 -N 8 -H head-0,10.0.0.12 ./all_reduce_perf -b 8 -e 1G\n{ssh}\n"
    diagnoses = diagnose(tmp_path, text + LOST_DAEMON)
    assert root_line(diagnoses) == ssh
    assert signature(diagnoses) == "ssh_connect_failed"


def test_mpi_init_failure_is_the_first_failure_of_the_paste(tmp_path: Path) -> None:
    init = (
        "Abort(1091471) on node 0 (rank 0 in comm 0): Fatal error in PMPI_Init: "
        "Other MPI error, error stack:"
    )
    text = (
        f"{init}\n"
        "MPIR_Init_thread(159).......: \n"
        "MPIR_pmi_kvs_get(227).......: PMI_KVS_Get returned -1\n"
        "\n"
        "second try, one node:\n"
        "gpu-b: Test CUDA failure common.cu:963 'invalid device ordinal'\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == init
    assert signature(diagnoses) == "mpi_init_failed"


def test_a_plugin_that_cannot_load_explains_network_not_found(tmp_path: Path) -> None:
    load = (
        "pod-a:71:71 [3] NCCL INFO NET/Plugin: Plugin load returned 2 : /lib/x86_64-linux-gnu/"
        "libc.so.6: version `GLIBC_2.34' not found (required by /opt/net/libnccl-net.so) : "
        "when loading libnccl-net.so"
    )
    text = (
        "pod-a:70:70 [2] net.cc:579 NCCL WARN Error: network fabricX not found.\n"
        "pod-a:70:70 [2] NCCL INFO init.cc:123 -> 2\n"
        "pod-a:71:71 [3] NCCL INFO cudaDriverVersion 12040\n"
        f"{load}\n"
        "pod-a:71:71 [3] NCCL INFO NET/Plugin: Using internal network plugin.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == load
    assert signature(diagnoses) == "nccl_net_plugin_load_error"
    assert "/opt/net/libnccl-net.so" in diagnoses[0]["cause"]


def test_an_absent_plugin_is_not_a_failure(tmp_path: Path) -> None:
    text = (
        "node1:11:11 [0] NCCL INFO NET/Plugin : Plugin load returned 2 : libnccl-net.so: cannot "
        "open shared object file: No such file or directory.\n"
        "node1:11:11 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "node1:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
    )
    assert diagnose(tmp_path, text) == []


def test_a_plugin_load_error_alone_is_no_failure(tmp_path: Path) -> None:
    text = (
        "node1:11:11 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : /usr/lib/libnccl-net.so: "
        "undefined symbol: fi_getinfo : when loading libnccl-net.so\n"
        "node1:11:11 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
    )
    assert diagnose(tmp_path, text) == []


def test_nvidia_smi_that_cannot_reach_a_gpu_names_it(tmp_path: Path) -> None:
    lost = "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error"
    text = (
        "user@node-7 ~ % nvidia-smi\n"
        f"{lost}\n"
        "[  +0.000316] pcieport 0000:40:01.0: AER: Corrected error received: 0000:40:01.0\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == lost
    assert diagnoses[0]["facts"]["bdf"] == "0000:41:00"


def test_an_nccl_line_indented_in_a_markdown_list_is_read(tmp_path: Path) -> None:
    warn = (
        "    gpu7:8123:8200 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'"
    )
    text = (
        "1. With nccl-tests:\n"
        "    ```\n"
        f"{warn}\n"
        "    ```\n"
        "2. With our trainer:\n"
        "   Fatal Python error: Segmentation fault\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == warn
    assert root(diagnoses)["host"] == "gpu7"
