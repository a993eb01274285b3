"""Crashes as causes (issue 22, item 4): fatal-signal handlers, glibc heap aborts, launchers
reporting a rank a signal killed, faulthandler stacks, uncaught C++ exceptions. A crash on one
rank comes before the other ranks' timeouts and is the root; an abort that only ends a process
after its own timeout is not. Every line is invented in our own words, in the shapes of real
reports (NCCL #291, #1050, #1996, #2213, nccl-tests #218, pytorch #135486, chainer #7586)."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature

PEER_TIMEOUT = (
    "[rank1]:[E0602 03:14:15.926535897 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=88121, OpType=REDUCE_SCATTER, "
    "NumelIn=1048576, NumelOut=131072, Timeout(ms)=600000) ran for 600031 milliseconds before "
    "timing out.\n"
)


def test_an_absl_sigsegv_report_outranks_the_peers_timeout(tmp_path: Path) -> None:
    crash = "*** SIGSEGV received at time=1718000000 on cpu 41 ***"
    text = (
        "Connected all trees, use ring PXN 1 GDR 1\n"
        f"{crash}\n"
        "PC: @     0x7f2a10c4be80  (unknown)  ncclProxyProgress()\n"
        "    @     0x7f2a3f842520       1152  (unknown)\n"
        f"{PEER_TIMEOUT}"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == crash
    assert signature(diagnoses) == "native_failure_signal"
    assert diagnoses[0]["facts"]["crash_frame"] == "ncclProxyProgress()"
    assert "ncclProxyProgress()" in diagnoses[0]["cause"]


def test_a_glibc_heap_abort_is_the_cause_not_the_abort_it_ends_in(tmp_path: Path) -> None:
    heap = "free(): invalid next size (fast)"
    text = f"{PEER_TIMEOUT}{heap}\nAborted (core dumped)\n"
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == heap
    assert signature(diagnoses) == "glibc_heap_corruption"


def test_the_old_glibc_wrapper_of_a_double_free(tmp_path: Path) -> None:
    line = (
        "*** Error in `/opt/conda/bin/python': double free or corruption (!prev): "
        "0x000055d1c2a3b4c0 ***"
    )
    diagnoses = diagnose(tmp_path, f"{line}\n======= Backtrace: =========\n")
    assert root_line(diagnoses) == line
    assert diagnoses[0]["root_cause"]["fields"]["heap_error"] == "double free or corruption (!prev)"


def test_mpirun_names_the_rank_a_segfault_killed(tmp_path: Path) -> None:
    line = (
        "mpirun noticed that process rank 5 with PID 20311 on node cn-17 exited on signal 11 "
        "(Segmentation fault)."
    )
    text = (
        "Primary job  terminated normally, but 1 process returned\n"
        "--------------------------------------------------------------------------\n"
        f"{line}\n"
        "--------------------------------------------------------------------------\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == line
    assert diagnoses[0]["root_cause"]["rank"] == 5


def test_srun_reports_a_task_that_crashed(tmp_path: Path) -> None:
    line = "srun: error: gn-042: task 6: Bus error (core dumped)"
    text = f"{PEER_TIMEOUT}{line}\nsrun: error: gn-042: tasks 0-5,7: Killed\n"
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == line


def test_faulthandler_names_the_library_frame_it_crashed_in(tmp_path: Path) -> None:
    fatal = "3: Fatal Python error: Segmentation fault"
    text = (
        "3: ws-9:771:771 [0] NCCL INFO comm 0x55 rank 3 nranks 4 cudaDev 3 busId 4000 - "
        "Init COMPLETE\n"
        f"{fatal}\n"
        "3: \n"
        "3: Current thread 0x00007f0011223340 (most recent call first):\n"
        '3:   File "/env/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 2288 in all_gather_into_tensor\n"
        '3:   File "/work/train.py", line 91 in step\n'
        "3: \n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == fatal
    assert (
        diagnoses[0]["facts"]["crash_frame"]
        == "torch/distributed/distributed_c10d.py:2288 in all_gather_into_tensor"
    )


def test_a_ucx_handler_report_names_the_nccl_frame(tmp_path: Path) -> None:
    caught = (
        "[gpu-7:40112:0:40177] Caught signal 11 (Segmentation fault: address not mapped to "
        "object at address 0x30)"
    )
    text = (
        f"{caught}\n==== backtrace (tid:  40177) ====\n"
        " 0  /usr/lib/libucs.so.0(ucs_handle_error+0x2dc) [0x7f1c]\n"
        " 1  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f2c]\n"
        " 2  /opt/nccl/lib/libnccl.so.2(+0x9c4e1) [0x7f3c]\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == caught
    assert diagnoses[0]["facts"]["crash_frame"] == "libnccl.so.2 (+0x9c4e1)"


def test_an_uncaught_exception_of_another_type_is_a_cause(tmp_path: Path) -> None:
    line = "terminate called after throwing an instance of 'std::invalid_argument'"
    text = f"{PEER_TIMEOUT}{line}\n  what():  stoi\n"
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == line
    assert signature(diagnoses) == "pt_terminate_other"


def test_a_sigabrt_handler_report_is_not_the_cause_of_a_timeout(tmp_path: Path) -> None:
    # The watchdog aborts its own process after the timeout; Open MPI's handler reports it.
    text = (
        f"{PEER_TIMEOUT}"
        "[cn-3:55120] *** Process received signal ***\n"
        "[cn-3:55120] Signal: Aborted (6)\n"
        "[cn-3:55120] Signal code:  (-6)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert "Watchdog caught collective operation timeout" in root_line(diagnoses)


def test_a_rank_the_shell_reports_killed_is_the_cause_of_its_peers_closed_sockets(
    tmp_path: Path,
) -> None:
    """horovodrun tags: rank 0 dies by SIGKILL (the shell prints a bare `Killed`), rank 1 is
    terminated, the others' Gloo pairs see the connection reset (heldout 17)."""
    text = (
        "[0]<stderr>:epoch 3 step 120 loss 0.41\n"
        "[0]<stderr>:Killed\n"
        "[1]<stderr>:Terminated\n"
        "[2]<stderr>:terminate called after throwing an instance of 'gloo::IoException'\n"
        "[2]<stderr>:  what():  [/src/gloo/transport/tcp/pair.cc:589] Read error "
        "[10.0.0.7]:40111: Connection reset by peer\n"
        "[2]<stderr>:Aborted (core dumped)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == "[0]<stderr>:Killed"
    assert signature(diagnoses) == "shell_killed"
    assert diagnoses[0]["root_cause"]["rank"] == 0


def test_killed_as_a_word_in_a_sentence_is_no_crash(tmp_path: Path) -> None:
    text = "Killed 3 stale dataloader workers before resuming\nstep 10 loss 0.3\n"
    assert diagnose(tmp_path, text) == []


def test_gdb_attached_to_a_rank_names_the_signal_and_the_first_frame_past_libc(
    tmp_path: Path,
) -> None:
    """A user attached gdb to the hung rank and pasted its session: the signal gdb caught and
    its backtrace come before the other ranks' timeouts."""
    caught = 'Thread 12 "pt_main_thread" received signal SIGSEGV, Segmentation fault.'
    text = (
        "[New Thread 0x7ffe1bfff640 (LWP 31337)]\n"
        f"{caught}\n"
        "[Switching to Thread 0x7ffe1bfff640 (LWP 31337)]\n"
        "(gdb) bt\n"
        "#0  0x00007ffff7c969fc in __pthread_kill_implementation () from "
        "/lib/x86_64-linux-gnu/libc.so.6\n"
        "#1  0x00007fff2a10c4be in ncclProxyProgress (proxyState_=0x5555) at proxy.cc:912\n"
        f"{PEER_TIMEOUT}"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == caught
    assert signature(diagnoses) == "native_failure_signal"
    assert diagnoses[0]["facts"]["crash_frame"] == "ncclProxyProgress at proxy.cc:912"
