"""What launchers and schedulers print about the processes they run (Slurm, Open MPI, Ray,
Horovod): the only trace of a process killed without last words, and otherwise collateral.
Lines invented in our own words, in the shapes these programs print."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line, signature

PEERS_FAIL = (
    "dgx-b03:4410:4470 [1] NCCL INFO [Service thread] Connection closed by localRank 1\n"
    "[rank1]:[E314 02:10:11.201311 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 1] Process group "
    "watchdog thread terminated with exception: NCCL error: remote process exited or there was "
    "a network error, NCCL version 2.21.5\n"
)


def test_a_task_the_cgroup_killed_is_the_root_of_its_peers_errors(tmp_path: Path) -> None:
    killed = "srun: error: dgx-b12: task 6: Out Of Memory"
    text = (
        PEERS_FAIL
        + f"{killed}\n"
        + "srun: error: dgx-b03: tasks 0-5,7: Terminated\n"
        + "srun: Force Terminated StepId=90211.0\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "slurm_oom_kill"
    assert root_line(diagnoses) == killed
    assert root(diagnoses)["rank"] == 6


def test_a_rank_mpirun_saw_killed_outranks_the_watchdog_timeouts(tmp_path: Path) -> None:
    killed = (
        "mpirun noticed that process rank 3 with PID 8812 on node trn-2 exited on signal 9 "
        "(Killed)."
    )
    text = PEERS_FAIL + "-" * 74 + "\n" + f"{killed}\n" + "-" * 74 + "\n"
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "mpirun_rank_killed"
    assert root_line(diagnoses) == killed
    assert "8812" in diagnoses[0]["fix"]


def test_an_actor_that_died_is_explained_by_the_memory_monitor(tmp_path: Path) -> None:
    oom = (
        "(raylet) [2025-03-14 02:10:00,101 E 2211 2211] (raylet) node_manager.cc:3069: 1 Workers "
        "(tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other "
        "reasons at node (ID: 77ab, IP: 10.3.0.21) over the last time period."
    )
    text = (
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
        f"{oom}\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "ray_oom_killed"
    assert root_line(diagnoses) == oom


def test_a_time_limit_alone_is_the_diagnosis(tmp_path: Path) -> None:
    limit = (
        "slurmstepd: error: *** STEP 90211.0 ON dgx-b12 CANCELLED AT 2025-03-14T02:11:09 DUE TO "
        "TIME LIMIT ***"
    )
    diagnoses = diagnose(tmp_path, f"epoch 3 step 1200 loss 1.92\n{limit}\n")
    assert signature(diagnoses) == "slurm_cancelled_limit"
    assert "TIME LIMIT" in diagnoses[0]["cause"]


def test_a_task_that_exited_with_an_error_points_at_its_own_error(tmp_path: Path) -> None:
    # srun --label puts the task number before each line of the task.
    own = "6: RuntimeError: Expected all tensors to be on the same device, but found cuda:0"
    text = f"{own}\nsrun: error: dgx-b12: task 6: Exited with exit code 1\n"
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == own
