"""NCCL RAS reports (`ncclras` text output) read beside a job's logs: invented reports in the
shapes NCCL 2.24-2.30 print (src/ras/client_support.cc), with other hosts and numbers than the
reports users posted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import analyze_dir
from rankwatch import Catalog
from rankwatch.engine import EngineConfig
from rankwatch.local import discover

HOSTS = ["trn-a07", "trn-a08"]
RANKS = 8  # four per host


def pid(rank: int) -> int:
    return 51200 + rank


def host(rank: int) -> str:
    return HOSTS[rank // 4]


def rank_log(rank: int, tail: str = "") -> str:
    """A rank's log up to a hang: NCCL init (which maps host and pid to the rank), then the
    training loop's progress, then silence (or `tail`)."""
    h, p, dev = host(rank), pid(rank), rank % 4
    lines = [
        f"{h}:{p}:{p} [{dev}] NCCL INFO Bootstrap : Using eth0:10.40.{rank // 4}.5<0>",
        f"{h}:{p}:{p} [{dev}] NCCL INFO NCCL version 2.26.5+cuda12.8",
        f"{h}:{p}:{p + 60} [{dev}] NCCL INFO comm 0x55d0c1a0 rank {rank} nranks {RANKS} "
        f"cudaDev {dev} nvmlDev {dev} busId {dev + 1}b000 commId 0x6d2f00aa4c11b8e3 "
        "- Init COMPLETE",
        f"[rank{rank}]: step 400 loss 2.31",
    ]
    return "\n".join(lines) + "\n" + tail


HEADER = """\
NCCL version 2.26.5 compiled with CUDA 12.8
CUDA runtime version 12080, driver version 12080

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          4            1          8        8

Communicators... (0.00s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
"""


def report(status: str, errors: str, body: str) -> str:
    row = f"    0         1         2         4         8         8  {status:>8}  {errors:>6}\n"
    return HEADER + row + "\nErrors\n======\n\n" + body


def gpu_tail(rank: int) -> str:
    return f"GPU {rank % 4} managed by process {pid(rank)} on node {host(rank)}"


def job(tmp_path: Path, ras: str, name: str = "ras-report.txt") -> Path:
    d = tmp_path / "job"
    d.mkdir(parents=True)
    for r in range(RANKS):
        (d / f"rank-{r}.log").write_text(rank_log(r))
    (d / name).write_text(ras)
    return d


def analyze(d: Path, catalog: Catalog) -> list[dict[str, Any]]:
    diagnoses, _ = analyze_dir(d, catalog)
    return diagnoses


def test_a_report_file_in_the_job_folder_is_read_like_a_log(tmp_path: Path) -> None:
    d = job(tmp_path, report("RUNNING", "OK", "Warnings\n========\n"), name="ras_0412.txt")
    files, _ = discover([d])
    assert "ras_0412.txt" in {f.path.name for f in files}


def test_a_healthy_report_makes_no_diagnosis(tmp_path: Path, catalog: Catalog) -> None:
    d = job(tmp_path, report("RUNNING", "OK", "Warnings\n========\n"))
    assert analyze(d, catalog) == []


def test_a_hang_only_the_report_shows_names_the_rank_behind(
    tmp_path: Path, catalog: Catalog
) -> None:
    body = (
        "Warnings\n========\n\n#0-0 (3be0917c55a2d64f) MISMATCH\n"
        "  Communicator ranks have different ReduceScatter operation counts\n"
        "  7 ranks have launched up to operation 9316\n"
        f"  Rank 6 has launched up to operation 9315 -- {gpu_tail(6)}\n"
    )
    [d] = analyze(job(tmp_path, report("RUNNING", "MISMATCH", body)), catalog)
    root = d["root_cause"]
    assert "Rank 6 has launched up to operation 9315" in root["line"]
    assert root["rank"] == 6 and root["host"] == "trn-a08"
    assert d["cause_signature"]["id"] == "ras_rank_behind"
    assert "py-spy dump --pid 51206 on trn-a08" in d["fix"]
    assert "9316" in d["cause"] and "ReduceScatter" in d["cause"]


def test_the_ranks_ahead_are_not_blamed_when_only_they_are_listed(
    tmp_path: Path, catalog: Catalog
) -> None:
    # As in NVIDIA/nccl#1911: NCCL lists the two ranks ahead, not the many behind.
    body = (
        "Warnings\n========\n\n#0-0 (3be0917c55a2d64f) MISMATCH\n"
        "  Communicator ranks have different AllGather operation counts\n"
        "  6 ranks have launched up to operation 77\n"
        "  2 ranks have launched up to operation 78\n"
        f"  Rank 2 -- {gpu_tail(2)}\n"
        f"  Rank 3 -- {gpu_tail(3)}\n"
    )
    [d] = analyze(job(tmp_path, report("RUNNING", "MISMATCH", body)), catalog)
    assert "6 ranks have launched up to operation 77" in d["root_cause"]["line"]
    assert d["root_cause"]["rank"] not in (2, 3)
    assert d["facts"]["lagging_ranks"] == "0-1,4-7"
    assert d["facts"]["ahead_ranks"] == "2-3"


def test_a_dead_process_is_the_root_on_its_rank(tmp_path: Path, catalog: Catalog) -> None:
    body = (
        "INCOMPLETE\n  Missing communicator data from 1 job process\n"
        f"  Process {pid(5)} on node {host(5)} managing GPU 1\n\n"
        "DEAD\n  1 job process is considered dead (unreachable via the RAS network)\n"
        f"  Process {pid(5)} on node {host(5)} managing GPU 1\n\n"
        "#0-0 (3be0917c55a2d64f) INCOMPLETE\n  Missing communicator data from 1 rank\n"
        f"  Rank 5 -- {gpu_tail(5)}\n\nWarnings\n========\n"
    )
    [d] = analyze(job(tmp_path, report("RUNNING", "INCOMPLETE", body)), catalog)
    assert d["cause_signature"]["id"] == "ras_process_dead"
    assert d["root_cause"]["rank"] == 5 and d["root_cause"]["host"] == "trn-a08"
    assert f"Process {pid(5)} on node trn-a08" in d["root_cause"]["line"]
    assert "trn-a08" in d["fix"]


def test_several_dead_processes_on_another_host_are_all_suspects(
    tmp_path: Path, catalog: Catalog
) -> None:
    body = (
        "DEAD\n  2 job processes are considered dead (unreachable via the RAS network)\n"
        f"  Process {pid(0)} on node {host(0)} managing GPU 0\n"
        f"  Process {pid(1)} on node {host(1)} managing GPU 1\n\n"
    )
    [d] = analyze(job(tmp_path, report("RUNNING", "INCOMPLETE", body)), catalog)
    assert d["root_cause"]["rank"] == 0
    suspects = {s["rank"] for s in d["suspects"]}
    assert {0, 1} <= suspects


def test_the_rank_with_its_own_error_beats_the_remote_errors(
    tmp_path: Path, catalog: Catalog
) -> None:
    body = (
        "#0-0 (3be0917c55a2d64f) ERROR\n  Asynchronous errors on 8 ranks\n"
        "  7 ranks reported Remote process error\n"
        f"  Rank 3 reported Unhandled CUDA error -- {gpu_tail(3)}\n\n"
    )
    [d] = analyze(job(tmp_path, report("RUNNING", "ERROR", body)), catalog)
    assert d["cause_signature"]["id"] == "ras_rank_error"
    assert d["root_cause"]["rank"] == 3
    assert "Unhandled CUDA error" in d["cause"]


def test_the_older_report_shape_names_missing_ranks(tmp_path: Path, catalog: Catalog) -> None:
    # 2.24/2.25: one counter for all collectives, missing ranks as a list.
    body = (
        "#0-0 (3be0917c55a2d64f) INCOMPLETE\n  Missing communicator data from 1 rank\n"
        "  The missing rank: 7\n\n"
    )
    [d] = analyze(job(tmp_path, report("RUNNING", "INCOMPLETE", body)), catalog)
    assert d["cause_signature"]["id"] == "ras_rank_missing"
    assert d["root_cause"]["rank"] == 7


def test_a_report_pasted_into_a_log_is_read_too(tmp_path: Path, catalog: Catalog) -> None:
    body = (
        "Warnings\n========\n\n#0-0 (3be0917c55a2d64f) MISMATCH\n"
        "  Communicator ranks have different status\n"
        "  7 ranks have status RUNNING\n"
        f"  Rank 1 has status INIT -- {gpu_tail(1)}\n"
    )
    pasted = "".join(
        f"Mar  2 09:14:0{i % 10} trn-a07 ras-watch[771]: {line}\n"
        for i, line in enumerate(report("RUNNING", "MISMATCH", body).splitlines())
    )
    [d] = analyze(job(tmp_path, pasted, name="monitor.log"), catalog)
    assert d["cause_signature"]["id"] == "ras_rank_status"
    assert d["root_cause"]["rank"] == 1
    assert "still initializing" in d["cause"]


# --- The JSON form (`ncclras -f json`, NCCL 2.28.7+), in the layout rasDumpCommsToJSON prints ---

COLLECTIVES = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")


def ip(rank: int) -> str:
    """The address RAS prints for a rank's process (the one its NCCL init line names)."""
    return f"10.40.{rank // 4}.5"


def json_rank(rank: int, allreduce: int, init_state: int = 0, async_error: int = 0) -> str:
    counts = ",\n".join(
        f'            "{c}": {allreduce if c == "AllReduce" else 0}' for c in COLLECTIVES
    )
    return (
        "        {\n"
        f'          "rank": {rank},\n'
        f'          "host": "{ip(rank)}",\n'
        f'          "pid": {pid(rank)},\n'
        f'          "cuda_dev": {rank % 4},\n'
        f'          "nvml_dev": {rank % 4},\n'
        '          "status": {\n'
        f'            "init_state": {init_state},\n'
        f'            "async_error": {async_error},\n'
        '            "finalize_called": false,\n'
        '            "destroy_flag": false,\n'
        '            "abort_flag": false\n'
        "          },\n"
        '          "collective_counts": {\n'
        f"{counts}\n"
        "          }\n"
        "        }"
    )


def json_missing(rank: int, dead: bool, comma: bool = True) -> str:
    """A missing rank; `comma=False` is 2.28.7/2.28.9's layout (no comma after nvml_dev)."""
    return (
        "        {\n"
        f'          "rank": {rank},\n'
        f'          "host": "{ip(rank)}",\n'
        f'          "pid": {pid(rank)},\n'
        f'          "cuda_dev": {rank % 4},\n'
        f'          "nvml_dev": {rank % 4}{"," if comma else ""}\n'
        '          "status": {\n'
        '            "unresponsive": true,\n'
        f'            "considered_dead": {"true" if dead else "false"}\n'
        "          }\n"
        "        }"
    )


def ras_json(
    ranks: list[str], missing: list[str] | None = None, version: str = "2.29.2", size: int = RANKS
) -> str:
    missing = missing or []
    return (
        "{\n"
        f'  "nccl_version": "{version}",\n'
        '  "cuda_runtime_version": 12080,\n'
        '  "cuda_driver_version": 12080,\n'
        '  "timestamp": "2026-03-02 09:14:07",\n'
        '  "communicators_count": 1,\n'
        '  "communicators": [\n'
        "    {\n"
        '      "hash": "0x3be0917c55a2d64f",\n'
        '      "secondary_hash": "0x91c2e07d11aa4b30:0x5e7f0c21d9b84a16",\n'
        f'      "size": {size},\n'
        f'      "ranks_count": {len(ranks)},\n'
        f'      "missing_ranks_count": {len(missing)},\n'
        '      "ranks": [\n' + ",\n".join(ranks) + "\n      ],\n"
        '      "missing_ranks": [\n' + ",\n".join(missing) + "\n      ]\n"
        "    }\n"
        "  ],\n"
        '  "ras": {\n'
        '    "collection_time_sec": 0.006,\n'
        '    "timeouts_count": 0\n'
        "  }\n"
        "}\n"
    )


def hang(behind: int) -> str:
    return ras_json([json_rank(r, 9315 if r == behind else 9316) for r in range(RANKS)])


def test_a_json_report_is_found_by_its_content(tmp_path: Path) -> None:
    d = job(tmp_path, hang(6), name="ras-query.json")
    (d / "config.json").write_text('{"nccl_version": "2.29.2", "lr": 0.1}\n')
    files, _ = discover([d])
    names = {f.path.name for f in files}
    assert "ras-query.json" in names and "config.json" not in names


def test_a_healthy_json_report_makes_no_diagnosis(tmp_path: Path, catalog: Catalog) -> None:
    assert analyze(job(tmp_path, hang(99), name="ras.json"), catalog) == []


def test_a_hang_only_the_json_report_shows_names_the_rank_behind(
    tmp_path: Path, catalog: Catalog
) -> None:
    [d] = analyze(job(tmp_path, hang(6), name="ras.json"), catalog)
    root = d["root_cause"]
    assert root["rank"] == 6 and root["host"] == "trn-a08"
    assert root["line"].strip() == '"rank": 6,'
    assert d["cause_signature"]["id"] == "ras_rank_behind"
    assert "py-spy dump --pid 51206 on trn-a08" in d["fix"]
    assert "9316" in d["cause"] and "AllReduce" in d["cause"]


def test_the_text_and_the_json_report_of_one_hang_name_the_same_rank(
    tmp_path: Path, catalog: Catalog
) -> None:
    body = (
        "Warnings\n========\n\n#0-0 (3be0917c55a2d64f) MISMATCH\n"
        "  Communicator ranks have different AllReduce operation counts\n"
        "  7 ranks have launched up to operation 9316\n"
        f"  Rank 6 has launched up to operation 9315 -- GPU 2 managed by process {pid(6)} "
        f"on node {ip(6)}\n"
    )
    [t] = analyze(job(tmp_path / "t", report("RUNNING", "MISMATCH", body)), catalog)
    [j] = analyze(job(tmp_path / "j", hang(6), name="ras.json"), catalog)
    for k in ("rank", "host"):
        assert t["root_cause"][k] == j["root_cause"][k]
    assert t["cause_signature"]["id"] == j["cause_signature"]["id"] == "ras_rank_behind"
    assert t["facts"]["lagging_ranks"] == j["facts"]["lagging_ranks"] == "6"


def test_a_dead_process_in_the_2_28_json_is_the_root(tmp_path: Path, catalog: Catalog) -> None:
    # 2.28.7/2.28.9 print no comma after a missing rank's nvml_dev: repaired, not refused.
    ranks = [json_rank(r, 410) for r in range(RANKS) if r != 5]
    text = ras_json(ranks, [json_missing(5, dead=True, comma=False)], version="2.28.9")
    [d] = analyze(job(tmp_path, text, name="ras.json"), catalog)
    assert d["cause_signature"]["id"] == "ras_process_dead"
    assert d["root_cause"]["rank"] == 5 and d["root_cause"]["host"] == "trn-a08"


def test_a_rank_with_its_own_error_in_the_json_is_the_root(
    tmp_path: Path, catalog: Catalog
) -> None:
    ranks = [json_rank(r, 77, async_error=1 if r == 3 else 6) for r in range(RANKS)]
    [d] = analyze(job(tmp_path, ras_json(ranks), name="ras.json"), catalog)
    assert d["cause_signature"]["id"] == "ras_rank_error"
    assert d["root_cause"]["rank"] == 3
    assert "Unhandled CUDA error" in d["cause"]


def test_hostile_json_reports_are_skipped_without_a_crash(tmp_path: Path, catalog: Catalog) -> None:
    good = hang(6)
    big = ras_json([json_rank(r, 5) for r in range(RANKS)] * 40)
    hostile = {
        "cut": good[: len(good) // 2],
        "types": good.replace('"AllReduce": 9315', '"AllReduce": "9315"', 1),
        "negative": good.replace('"rank": 6,', '"rank": -6,', 1),
        "overflow": good.replace('"AllReduce": 9315', '"AllReduce": 1' + "0" * 30, 1),
        "nested": good.replace('"ranks": [', '"ranks": ' + "[" * 5000, 1),
        "nul": good.replace('"host": "10.40.1.5"', '"host": "10.40\x00.1.5"', 1),
        "big": big,
    }
    for name, text in hostile.items():
        d = job(tmp_path / name, text, name="ras.json")
        assert analyze(d, catalog) == [], name
    # Not UTF-8 at all.
    d = job(tmp_path / "bytes", "", name="ras.json")
    (d / "ras.json").write_bytes(
        b'{\n  "nccl_version": "2.29.2",\n  "communicators_count": 1,\n\xff\xfe\n'
    )
    assert analyze(d, catalog) == []


def big_report(tmp_path: Path) -> Path:
    """A 1,024-rank job's JSON report (over 20,000 lines, where a process's ring keeps 256):
    rank 333's process is dead, rank 901's unresponsive; no logs beside it."""
    n = 1024
    ranks = [json_rank(r, 410) for r in range(n) if r not in (333, 901)]
    gone = [json_missing(333, dead=True), json_missing(901, dead=False)]
    d = tmp_path / "job"
    d.mkdir(parents=True)
    (d / "ras.json").write_text(ras_json(ranks, gone, size=n))
    return d


def test_a_json_report_of_1024_ranks_is_read_whole(tmp_path: Path, catalog: Catalog) -> None:
    d = big_report(tmp_path)
    assert (d / "ras.json").read_text().count("\n") > 20 * 1024
    [diag] = analyze(d, catalog)
    assert diag["cause_signature"]["id"] == "ras_process_dead"
    assert diag["root_cause"]["rank"] == 333
    assert str(pid(333)) in diag["cause"]
    suspects = {s["rank"]: " ".join(s["reasons"]) for s in diag["suspects"] if s["rank"]}
    assert list(suspects) == [333, 901]
    assert "dead" in suspects[333] and "no data from rank 901" in suspects[901]


def test_a_report_over_the_cap_is_counted_and_noted_not_read(
    tmp_path: Path, catalog: Catalog
) -> None:
    d = big_report(tmp_path)
    crash = (
        f"\n{host(2)}:{pid(2)}:{pid(2) + 9} [2] enqueue.cc:1404 NCCL WARN Cuda failure "
        "'an illegal memory access was encountered'\n"
    )
    (d / "rank-2.log").write_text(rank_log(2, crash))
    diagnoses, stats = analyze_dir(d, catalog, EngineConfig(ras_report_bytes=256 << 10))
    [diag] = diagnoses
    assert stats["ras_reports_over_cap"] == 1
    assert diag["cause_signature"]["id"] != "ras_process_dead"
    notes = [o for o in diag.get("odd_context") or [] if o["field"] == "ncclras report"]
    assert notes and "ras_report_bytes" in notes[0]["problem"], diag.get("odd_context")


# --- ncclras -m (monitor mode, NCCL 2.29.2+): `rasClientsNotifyEvent` in client_support.cc


def monitor_text(rank: int) -> str:
    """What `ncclras -m -e all` printed while rank's process died (its peers first lost
    contact, then RAS declared it dead); another process's loss recovered."""
    gpu = rank % 4
    return (
        f"[2026-03-02 09:13:41] PEER_UNRESPONSIVE: Process {pid(1)} on node {ip(1)} managing "
        "GPU 1 peer not responding for 5s (keepalive warning)\n"
        f"[2026-03-02 09:13:42] PEER_RECOVERED: Process {pid(1)} on node {ip(1)} managing "
        "GPU 1 peer responding again\n"
        f"[2026-03-02 09:13:50] PEER_KEEPALIVE_TIMEOUT: Process {pid(rank)} on node {ip(rank)} "
        f"managing GPU {gpu} keepalive timeout after 20s, terminating connection\n"
        f"[2026-03-02 09:14:31] PEER_TIMEOUT_DEAD: {ip(rank)}<41203> peer failed to respond "
        "for 60s, declaring dead\n"
        f"[2026-03-02 09:14:31] PEER_DEAD: Process {pid(rank)} on node {ip(rank)} managing "
        f"GPU {gpu} \n"
    )


def monitor_json(rank: int) -> str:
    return (
        "{\n"
        '  "timestamp": "2026-03-02 09:14:31",\n'
        '  "group": "LIFECYCLE",\n'
        '  "event": "PEER_DEAD",\n'
        '  "peer": {\n'
        f'    "host": "{ip(rank)}",\n'
        f'    "pid": {pid(rank)},\n'
        f'    "cuda_devs": [{rank % 4}],\n'
        f'    "nvml_devs": [{rank % 4}]\n'
        "  },\n"
        '  "details": ""\n'
        "}\n"
    )


def test_a_peer_the_monitor_declares_dead_is_the_root(tmp_path: Path, catalog: Catalog) -> None:
    d = job(tmp_path, monitor_text(5), name="ras-monitor.log")
    [diag] = analyze(d, catalog)
    assert diag["cause_signature"]["id"] == "ras_process_dead"
    assert diag["root_cause"]["rank"] == 5 and diag["root_cause"]["host"] == "trn-a08"
    assert diag["facts"]["pid"] == str(pid(5))
    # the loss that recovered blames nobody
    assert all(s["rank"] != 1 for s in diag["suspects"])


def test_the_monitor_s_json_events_name_the_same_rank(tmp_path: Path, catalog: Catalog) -> None:
    d = job(tmp_path, monitor_json(5), name="ras-monitor.json")
    files, _ = discover([d])
    assert "ras-monitor.json" in {f.path.name for f in files}
    [diag] = analyze(d, catalog)
    assert diag["cause_signature"]["id"] == "ras_process_dead"
    assert diag["root_cause"]["rank"] == 5
