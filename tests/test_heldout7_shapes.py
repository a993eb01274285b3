"""Classes and shapes found in the seventh held-out set of real logs (bench/RESULTS.md, "Held-out
real cases, seventh set"). Every line here is invented in our own words: other hosts, numbers
and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def test_rccl_ipc_export_failure_is_the_cause(tmp_path: Path) -> None:
    # RCCL hipifies NCCL's sources, so the IPC export failure names hipIpcGetMemHandle. Before
    # it come RCCL's advisories about kernel options, printed on every start.
    failure = (
        "mi-box-3:7101:7140 [2] /opt/rocm/src/rccl/hipify/src/transport/p2p.cc:231 NCCL WARN "
        "hipIpcGetMemHandle failed : invalid argument"
    )
    text = (
        "mi-box-3:7101:7101 [0] /opt/rocm/src/rccl/hipify/src/init.cc:140 NCCL WARN Missing "
        '"iommu=pt" from kernel command line which can lead to system instablity or hang!\n'
        "RCCL version 2.20.5+hip6.1\n"
        f"{failure}\n"
        "mi-box-3:7101:7140 [2] NCCL INFO /opt/rocm/src/rccl/hipify/src/transport/p2p.cc:702 -> 1\n"
        "mi-box-3:7101:7140 [2] NCCL INFO /opt/rocm/src/rccl/hipify/src/init.cc:1120 -> 1\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_cuda_ipc_failed"
    assert root_line(diagnoses) == failure


def test_message_truncated_without_a_peer_name_is_the_cause(tmp_path: Path) -> None:
    # NCCL before 2.10 printed the size mismatch without the peer's address; a harmless
    # error-return trace from topology detection comes first.
    truncated = (
        "trainer-b:5120:5188 [1] transport/net_socket.cc:211 NCCL WARN NET/Socket : message "
        "truncated : receiving 262144 bytes instead of 65536"
    )
    init = (
        "trainer-b:5120:5170 [1] NCCL INFO Could not find real path of /sys/class/net/ens5/device\n"
        "trainer-b:5120:5170 [1] NCCL INFO include/net.h:24 -> 2\n"
        "trainer-b:5120:5170 [1] NCCL INFO CUDA Dev 1[1], Socket NIC distance :  SYS\n"
        "trainer-b:5120:5170 [1] NCCL INFO Channel 00 :    0   1\n"
        "trainer-b:5120:5170 [1] NCCL INFO Channel 01 :    0   1\n"
    )
    diagnoses = diagnose(tmp_path, f"{init}{truncated}\n")
    assert signature(diagnoses) == "nccl_net_socket_truncated"
    assert root_line(diagnoses) == truncated


def test_message_truncated_posted_in_bold_above_the_log(tmp_path: Path) -> None:
    truncated = (
        "**trainer-c:6230:6291 [0] external/nccl/src/transport/net_socket.cc:211 NCCL WARN "
        "NET/Socket : message truncated : receiving 98304 bytes instead of 16384**"
    )
    text = (
        f"**NCCL version 2.4.8+cuda10.1**\n{truncated}\n\n"
        "Epoch 1/5\n"
        "trainer-c:6230:6280 [0] NCCL INFO include/net.h:24 -> 2\n"
        "trainer-c:6230:6280 [0] NCCL INFO Channel 00 :    0   1\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_net_socket_truncated"
    assert root_line(diagnoses) == truncated


def test_message_truncated_wrapped_by_the_poster_is_the_cause(tmp_path: Path) -> None:
    first = (
        "transport/net_socket.cc:430 NCCL WARN NET/Socket : peer 10.4.0.17<40211> message "
        "truncated :"
    )
    text = f"{first}\nreceiving 524288 bytes instead of 131072\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_net_socket_truncated"
    assert root_line(diagnoses) == first


def test_connection_closed_without_a_peer_name_is_seen(tmp_path: Path) -> None:
    # NCCL 2.2/2.3 ended the message at 'remote peer'.
    closed = (
        "gpu-node2:8811:8840 [1] include/socket.h:390 NCCL WARN Net : Connection closed by "
        "remote peer"
    )
    failed = "NCCL failure common.cu:930 'unhandled system error'"
    text = f"Connecting to socket 10.9.8.7<50123>\n\n{closed}\n{failed}\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_sock_closed_by_peer"
    assert root_line(diagnoses) == closed


def test_connection_closed_by_a_named_peer_still_names_it(tmp_path: Path) -> None:
    closed = (
        "gpu-node5:3301:3390 [0] misc/socket.cc:52 NCCL WARN socketProgress: Connection closed by "
        "remote peer gpu-node9<40123>"
    )
    diagnoses = diagnose(tmp_path, f"{closed}\n")
    assert signature(diagnoses) == "nccl_sock_closed_by_peer"
    assert root(diagnoses)["line"] == closed


def test_connect_refused_in_the_nccl_2_4_form_beats_the_ibverbs_warnings(tmp_path: Path) -> None:
    # NCCL 2.4 printed 'Connect to <addr> failed : ...' without a 'Net : ' tag; before it, each
    # process warned that libibverbs is missing (IB disabled, not a failure).
    refused = (
        "worker-b2:931:1004 [1] include/socket.h:382 NCCL WARN Connect to 10.77.0.1<51312> "
        "failed : Connection refused"
    )
    text = (
        "worker-b2:930:930 [0] misc/ibvwrap.cu:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
        "NCCL version 2.4.2+cuda10.0\n\n"
        "worker-b2:931:931 [1] misc/ibvwrap.cu:63 NCCL WARN Failed to open libibverbs.so[.1]\n\n"
        f"{refused}\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 88, in <module>\n'
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_sock_connect_refused"
    assert root_line(diagnoses) == refused
