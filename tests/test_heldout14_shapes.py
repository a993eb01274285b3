"""Classes and shapes found in the fourteenth held-out set of real logs (bench/RESULTS.md,
"Held-out real cases, fourteenth set"). Every line here is invented in our own words: other
hosts, numbers and text, the same message shapes."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature


def test_a_device_assert_outranks_a_libcuda_warning_that_nccl_survived(tmp_path: Path) -> None:
    # NCCL warns that it found no libcuda, then goes on to bootstrap and set up its transports
    # in the same processes; the run dies later on a device-side assert in a kernel.
    failed = "RuntimeError: CUDA error: device-side assert triggered"
    text = (
        "gpunode7:7301:7301 [0] NCCL INFO Bootstrap : Using ens3:10.4.0.17<0>\n"
        "gpunode7:7301:7301 [0] misc/cudawrap.cc:90 NCCL WARN Failed to find CUDA library in "
        "/opt/none (NCCL_CUDA_PATH=/opt/none)\n"
        "NCCL version 2.15.5+cuda11.8\n"
        "gpunode7:7302:7302 [1] misc/cudawrap.cc:90 NCCL WARN Failed to find CUDA library in "
        "/opt/none (NCCL_CUDA_PATH=/opt/none)\n"
        "gpunode7:7302:7302 [1] NCCL INFO Bootstrap : Using ens3:10.4.0.17<0>\n"
        "gpunode7:7301:7344 [0] NCCL INFO NET/Socket : Using [0]ens3:10.4.0.17<0>\n"
        "gpunode7:7301:7344 [0] NCCL INFO Using network Socket\n"
        "gpunode7:7302:7345 [1] NCCL INFO Channel 00 : 1[2000] -> 0[1000] via SHM/direct/direct\n"
        f"{failed}\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "pt_cuda_error"
    assert root_line(diagnoses) == failed


def test_a_libcuda_warning_alone_is_still_the_root(tmp_path: Path) -> None:
    # With nothing more specific in view, the missing driver library stays the diagnosis.
    warn = (
        "box-3:611:611 [0] misc/cudawrap.cc:179 NCCL WARN Failed to find CUDA library libcuda.so "
        "(NCCL_CUDA_PATH='') : libcuda.so: cannot open shared object file: No such file or "
        "directory"
    )
    text = (
        "box-3:611:611 [0] NCCL INFO Bootstrap : Using eth0:172.30.1.9<0>\n"
        f"{warn}\n"
        "NCCL version 2.19.3+cuda12.2\n"
        "box-3:611:640 [0] NCCL INFO P2P is disabled between connected GPUs 0 and 1.\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "nccl_cuda_driver_load_failed"
    assert root_line(diagnoses) == warn


def test_a_vendor_nccl_bracketed_warn_outranks_the_driver_traceback(tmp_path: Path) -> None:
    # A vendor NCCL build (`[host][pid:tid][dev][file:line] NCCL WARN`) behind Ray actor labels
    # reports the failing call; the Ray driver's traceback follows.
    warn = (
        "(PolicyActor pid=4410) [pai-dlc-3e9a-worker-0][4410:4502][1][init.cc:1790] NCCL WARN "
        "init.cc:1790 -> 5"
    )
    text = (
        f"{warn}\n"
        "(PolicyActor pid=4410) [pai-dlc-3e9a-worker-0][4410:4502][1][group.cc:70] NCCL INFO "
        "/vendor/src/group.cc:70 -> 5 [Async thread]\n"
        "(PolicyActor pid=4410) \n"
        "(PolicyActor pid=4410) [pai-dlc-3e9a-worker-0][4410:4410][1][group.cc:560] NCCL WARN "
        "group.cc:560 -> 3\n"
        "Traceback (most recent call last):\n"
        '  File "/srv/job/train_rl.py", line 212, in <module>\n'
        "    ray.get(handles)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == warn
    assert root(diagnoses)["host"] == "pai-dlc-3e9a-worker-0"
