"""Writes the Flight Recorder fixtures in this folder with torch itself.

Run it in a throw-away environment that has torch (CPU is enough; any torch whose Gloo
backend records into the Flight Recorder, 2.8 or later), from this folder:

    python -m venv ~/frvenv && ~/frvenv/bin/pip install torch
    cd tests/data/flight_recorder && ~/frvenv/bin/python make_dumps.py

Each scenario starts WORLD processes on this machine (Gloo over loopback, a FileStore in a
temporary folder), runs a few training-like steps with one fault, and has every rank dump
its Flight Recorder buffer (pickle, as torch writes it on a watchdog timeout; one scenario
also as JSON) into `<scenario>/`, and its console output into `<scenario>/logs/rank-N.log`.
Collectives time out after TIMEOUT_S so that a hang ends.

The dumps are torch's bytes, with one change: absolute paths in stack frames (the
environment's site-packages, this folder) are replaced by neutral ones, so that nothing of
the machine that made them is checked in. The pickle is re-encoded for that (same structure,
same protocol); the JSON is rewritten as text.

CI never runs this script: the dumps it made are checked in.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TIMEOUT_S = 4
WORLD = {"size_mismatch": 4, "skipped": 4, "hang": 6, "p2p_unmatched": 4, "healthy": 4}
NEUTRAL_SITE = "/usr/local/lib/python3.11/site-packages/"
NEUTRAL_HERE = "/workspace/"


def train_step(dist: Any, torch: Any, rank: int, scenario: str, step: int) -> None:
    """One training step of the toy job: gradients and the loss are all-reduced."""
    grads = torch.ones(1024)
    if scenario == "size_mismatch" and rank == 2 and step == 2:
        grads = torch.ones(2048)  # a rank that took the wrong bucket size
    dist.all_reduce(grads)
    loss = torch.tensor([float(step)])
    if scenario == "skipped" and rank == 1 and step == 2:
        print(f"[rank{rank}]: step {step}: loss is nan, skipping the loss all-reduce", flush=True)
    else:
        dist.all_reduce(loss)


def worker(rank: int, world: int, scenario: str, store_path: str, out: Path) -> int:
    import torch
    import torch.distributed as dist
    from torch._C import _distributed_c10d as c10d

    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=TIMEOUT_S),
    )
    print(f"[rank{rank}]: process group ready, world size {world}", flush=True)
    failed = None
    try:
        if scenario == "p2p_unmatched":
            dist.barrier()
            buf = torch.arange(16, dtype=torch.float32)
            if rank == 0:
                dist.send(buf, dst=3)
            elif rank == 3:
                print(f"[rank{rank}]: waiting on the data loader, no recv posted", flush=True)
                time.sleep(TIMEOUT_S + 2)
            dist.barrier()
        else:
            for step in range(4):
                if scenario == "hang" and rank == 5 and step == 3:
                    print(f"[rank{rank}]: step {step}: saving a checkpoint", flush=True)
                    time.sleep(TIMEOUT_S + 3)  # stuck in I/O; dumps below while still stuck
                    break
                train_step(dist, torch, rank, scenario, step)
                print(f"[rank{rank}]: step {step} done", flush=True)
            else:
                dist.barrier()
    except Exception as e:  # a timeout or a peer's failure: what a watchdog would report
        failed = e
        print(f"[rank{rank}]: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    dump = c10d._dump_fr_trace(includeCollectives=True, includeStackTraces=True)
    (out / f"nccl_trace_rank_{rank}").write_bytes(neutral_pickle(dump))
    if scenario == "size_mismatch":  # the same moment in torch's JSON form, in a folder of its own
        text = c10d._dump_fr_trace_json(includeCollectives=True)
        json_out = HERE / "size_mismatch_json"
        json_out.mkdir(exist_ok=True)
        (json_out / f"fr_rank_{rank}.json").write_bytes(neutral_json(text))
    # No destroy_process_group after a failure: peers may be gone; the process just ends.
    if failed is None:
        dist.destroy_process_group()
    return 0


def _neutral(text: str, site: str) -> str:
    return text.replace(site, NEUTRAL_SITE).replace(str(HERE) + "/", NEUTRAL_HERE)


def _walk(obj: Any, site: str) -> Any:
    if isinstance(obj, str):
        return _neutral(obj, site)
    if isinstance(obj, list):
        return [_walk(x, site) for x in obj]
    if isinstance(obj, tuple):
        return tuple(_walk(x, site) for x in obj)
    if isinstance(obj, dict):
        return {_walk(k, site): _walk(v, site) for k, v in obj.items()}
    return obj


def _site() -> str:
    import torch

    return str(Path(torch.__file__).resolve().parent.parent) + "/"


def neutral_pickle(data: bytes) -> bytes:
    # Our own dump, just written by this process: trusted input.
    return pickle.dumps(_walk(pickle.loads(data), _site()), protocol=2)


def neutral_json(data: bytes | str) -> bytes:
    text = data.decode() if isinstance(data, bytes) else data
    return json.dumps(_walk(json.loads(text), _site()), indent=1).encode() + b"\n"


def nccl_p2p() -> None:
    """`p2p_unmatched_nccl/`: the p2p_unmatched dumps as ProcessGroupNCCL would have written
    them. SYNTHETIC, derived from the real Gloo dumps: torch's Gloo backend records no
    send/recv in the Flight Recorder (checked with torch 2.15: send, recv, isend, irecv and
    batch_isend_irecv leave no entry), and NCCL needs a GPU per rank. What NCCL adds is
    written the way its recorder does: profiling names `nccl:...`, rank 0's `send 0->3` as
    a p2p entry (its own p2p_seq_id, the collective_seq_id of the last collective), the
    states NCCL's watchdog keeps (completed, or started for what is still running)."""
    src, out = HERE / "p2p_unmatched", HERE / "p2p_unmatched_nccl"
    # (its logs/ are SYNTHETIC too: the watchdog lines NCCL ranks print at such a timeout)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    for f in sorted(src.glob("nccl_trace_rank_*")):
        rank = int(f.name.rsplit("_", 1)[1])
        dump = pickle.loads(f.read_bytes())  # our own file, written above
        entries = dump["entries"]
        for e in entries:
            e["profiling_name"] = e["profiling_name"].replace("gloo:", "nccl:")
            done = e is not entries[-1]
            e["state"] = "completed" if done else "started"
            start = e["time_created_ns"] + 40_000
            e["time_discovered_started_ns"] = start
            e["time_discovered_completed_ns"] = start + 900_000 if done else None
        if rank == 0:
            last = entries[-1]
            last["state"] = "completed"
            last["time_discovered_completed_ns"] = last["time_discovered_started_ns"] + 900_000
            send = dict(last)
            send.update(
                record_id=last["record_id"] + 1,
                op_id=last["op_id"] + 1,
                p2p_seq_id=1,
                is_p2p=True,
                profiling_name="nccl:send 0->3",
                input_sizes=[[16]],
                output_sizes=[[16]],
                input_dtypes=["Float"],
                output_dtypes=["Float"],
                state="started",
                retired=False,
                time_created_ns=last["time_created_ns"] + 2_000_000,
                time_discovered_started_ns=last["time_created_ns"] + 2_050_000,
                time_discovered_completed_ns=None,
            )
            send["frames"] = [
                {
                    "filename": NEUTRAL_SITE + "torch/distributed/distributed_c10d.py",
                    "line": 2718,
                    "name": "send",
                },
                {"filename": NEUTRAL_HERE + "make_dumps.py", "line": 77, "name": "worker"},
            ]
            entries.append(send)
        (out / f.name).write_bytes(pickle.dumps(dump, protocol=2))
        watchdog_log(out, rank, entries[-1])
    print(f"p2p_unmatched_nccl: derived from p2p_unmatched -> {out.relative_to(HERE)}/")


def watchdog_log(out: Path, rank: int, stuck: dict[str, Any]) -> None:
    """The lines ProcessGroupNCCL's watchdog prints when the work `stuck` times out (the
    shape of torch 2.4 on), TIMEOUT_S after it was created, in `logs/rank-N.log`."""
    p2p = stuck["is_p2p"]
    seq = stuck["p2p_seq_id"] if p2p else stuck["collective_seq_id"]
    op = stuck["profiling_name"].split(":")[1].split(" ")[0].upper().replace("_", "")
    numel = sum(_prod(s) for s in stuck["input_sizes"]) or 1
    at = datetime.datetime.fromtimestamp(
        stuck["time_created_ns"] / 1e9 + TIMEOUT_S + 0.004, datetime.UTC
    )
    stamp = at.strftime("%m%d %H:%M:%S.%f") + "000"
    pg = f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}]"
    last = stuck["collective_seq_id"] if p2p else seq
    lines = [
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:632] {pg} Watchdog caught collective "
        f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, "
        f"NumelOut={numel}, Timeout(ms)={TIMEOUT_S * 1000}) ran for {TIMEOUT_S * 1000 + 4} "
        "milliseconds before timing out.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:2168] {pg} failure detected by watchdog "
        f"at work sequence id: {seq} PG status: last enqueued work: {last}, last completed "
        f"work: {last - 1}",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:670] Stack trace of the failed "
        "collective not found, potentially because FlightRecorder is disabled. You can "
        "enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:684] [Rank {rank}] Some NCCL operations "
        "have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
        "subsequent GPU operations might run on corrupted/incomplete data.",
        f"[rank{rank}]:[E{stamp} ProcessGroupNCCL.cpp:698] [Rank {rank}] To avoid data "
        "inconsistency, we are taking the entire process down.",
    ]
    (out / "logs").mkdir(exist_ok=True)
    (out / "logs" / f"rank-{rank}.log").write_text("\n".join(lines) + "\n")


def _prod(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def run_scenario(scenario: str) -> None:
    world = WORLD[scenario]
    out = HERE / scenario
    shutil.rmtree(out, ignore_errors=True)
    if scenario == "size_mismatch":
        shutil.rmtree(HERE / "size_mismatch_json", ignore_errors=True)
    (out / "logs").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = []
        for rank in range(world):
            log = open(out / "logs" / f"rank-{rank}.log", "wb")  # noqa: SIM115
            env = {
                **os.environ,
                "TORCH_FR_BUFFER_SIZE": "200",
                "GLOO_SOCKET_IFNAME": "lo",
                "PYTHONUNBUFFERED": "1",
            }
            cmd = [sys.executable, "make_dumps.py", "--worker", scenario, str(rank), store]
            procs.append((subprocess.Popen(cmd, cwd=HERE, env=env, stdout=log, stderr=log), log))
        for p, log in procs:
            p.wait(timeout=120)
            log.close()
    for f in sorted((out / "logs").iterdir()):
        # the console lines keep the run's facts, not this machine's paths
        f.write_text(_neutral(f.read_text(errors="replace"), _site()))
    print(f"{scenario}: {world} ranks -> {out.relative_to(HERE)}/")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", default=list(WORLD))
    ap.add_argument("--worker", nargs=3, metavar=("SCENARIO", "RANK", "STORE"))
    args = ap.parse_args()
    if args.worker:
        scenario, rank, store = args.worker
        return worker(int(rank), WORLD[scenario], scenario, store, HERE / scenario)
    for s in args.scenarios:
        run_scenario(s)
        if s == "p2p_unmatched":
            nccl_p2p()
    return 0


if __name__ == "__main__":
    sys.exit(main())
