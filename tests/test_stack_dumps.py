"""Stack dumps printed into the logs of a stuck job (py-spy, faulthandler) through `rankwatch
analyze`: the rank whose main thread is outside any collective, and the frame of the program's
own code it waits in (the fifteenth held-out set's fairseq#4816 shape: one py-spy dump and
nothing else). Every line is invented."""

from __future__ import annotations

from pathlib import Path

from one_log import diagnose, root, root_line


def test_a_lone_py_spy_dump_names_the_programs_frame(tmp_path: Path) -> None:
    frame = "    next_batch (mytrainer/data/loader.py:212)"
    text = (
        'Thread 0x7F3A11C02740 (idle): "MainThread"\n'
        "    wait (threading.py:320)\n"
        "    get (queue.py:171)\n"
        f"{frame}\n"
        "    fit (mytrainer/loop.py:88)\n"
    )
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == frame
    assert diagnoses[0]["cause_signature"]["id"] == "stuck_outside_collective"


def test_faulthandler_dumps_name_the_rank_outside_the_collective(tmp_path: Path) -> None:
    def dump(rank: int, frames: list[str]) -> str:
        lines = [f"[rank{rank}]:Thread 0x00007f2b9c5fe740 (most recent call first):"]
        lines += [f"[rank{rank}]:  {f}" for f in frames]
        return "\n".join(lines) + "\n"

    waiting = [
        'File "/usr/local/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", '
        "line 2288 in broadcast",
        'File "/work/app/sync.py", line 19 in share_weights',
    ]
    saving = 'File "/work/app/checkpoint.py", line 64 in write_shard'
    text = dump(1, waiting) + dump(2, waiting)
    text += dump(0, ['File "/usr/lib/python3.11/threading.py", line 331 in wait', saving])
    diagnoses = diagnose(tmp_path, text)
    assert root_line(diagnoses) == f"[rank0]:  {saving}"
    assert root(diagnoses)["rank"] == 0
