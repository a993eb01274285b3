"""Jobs that stall before their first collective and say so only in INFO lines: the
store-based barrier of init_process_group that never completes, and NCCL's connects that keep
being refused. Both are printed briefly by healthy jobs that start slowly, so they must not
make a failure of a job that went on. Lines invented in our own words."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root_line, signature

WAITING = (
    "Waiting in store based barrier to initialize process group for rank: 0, key: "
    "store_based_barrier_key:1 (world_size=8, worker_count=24, timeout=0:05:00)"
)


def test_a_barrier_that_never_completes_is_the_root_of_the_failure(tmp_path: Path) -> None:
    text = (
        "Added key: store_based_barrier_key:1 to store for rank: 0\n"
        f"{WAITING}\n"
        f"{WAITING}\n"
        "Traceback (most recent call last):\n"
        '  File "fit.py", line 88, in <module>\n'
        "    dist.init_process_group(backend='nccl')\n"
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 0, "
        "for key: store_based_barrier_key:1 (world_size=8, worker_count=24, timeout=0:05:00)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert signature(diagnoses) == "store_barrier_waiting"
    assert root_line(diagnoses) == WAITING
    assert "24 workers joined where world_size is 8" in diagnoses[0]["cause"]


def test_a_slow_start_that_passed_the_barrier_is_no_failure(tmp_path: Path) -> None:
    newer = WAITING.replace("worker_count=24", "num_workers_joined=6")
    text = (
        f"{newer}\n"
        "Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 8 nodes.\n"
        "epoch 0 step 10 loss 2.31\n"
    )
    assert diagnose(tmp_path, text) == []


REFUSED = (
    "trainer-12:5107:5166 [2] NCCL INFO socketPollConnect: connect to 10.8.4.31<40211> returned "
    "Connection refused, retrying ({n}/34) after sleep for {ms} msec"
)


def test_connects_refused_ten_times_blame_the_peer_that_is_gone(tmp_path: Path) -> None:
    lines = [REFUSED.format(n=n, ms=n * 100) for n in range(11, 15)]
    diagnoses = diagnose(tmp_path, "\n".join(lines) + "\n")
    assert signature(diagnoses) == "nccl_sock_connect_refused_persistent"
    assert root_line(diagnoses) == lines[0]
    assert "10.8.4.31:40211" in diagnoses[0]["cause"]


def test_a_few_refused_connects_before_init_completes_are_no_failure(tmp_path: Path) -> None:
    lines = [REFUSED.format(n=n, ms=n * 100) for n in range(1, 4)]
    lines.append(
        "trainer-12:5107:5107 [2] NCCL INFO comm 0x5581c0e0 rank 2 nranks 16 cudaDev 2 "
        "nvmlDev 2 busId 41000 commId 0x6c1e2f00d3a4b5c6 - Init COMPLETE"
    )
    assert diagnose(tmp_path, "\n".join(lines) + "\n") == []
