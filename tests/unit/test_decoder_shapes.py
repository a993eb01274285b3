"""The line decoder on every launcher shape met in real logs, through `Catalog.test` (the same
peeling the engine does). Lines marked `corpus` are copied verbatim from the real-log corpus;
the others put a prefix quoted in a bug report in front of a real message."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from rankwatch import Catalog


@dataclass(frozen=True)
class Shape:
    name: str
    line: str
    message: str
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    level: str = "unknown"
    cuda_dev: int | None = None


SHAPES = [
    Shape(  # corpus
        "horovod rank tag glued to the NCCL header",
        "[15]worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from "
        "100.96.188.199<41468> failed : Connection timed out",
        "Net : Call to recv from 100.96.188.199<41468> failed : Connection timed out",
        host="worker-23",
        rank=15,
        level="warn",
        cuda_dev=0,
    ),
    Shape(  # corpus
        "open mpi tag",
        "[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket creation "
        "failed : Address family not supported by protocol",
        "Net : Socket creation failed : Address family not supported by protocol",
        host="gpu7",
        rank=4,
        level="warn",
        cuda_dev=0,
    ),
    Shape(  # corpus
        "open mpi tag after a timestamp",
        "2019-06-02T16:13:44.884Z: [1,12]<stdout>:container-e275-1553839402050-12124-01-000057"
        ":815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local "
        "catastrophic error",
        "NET/IB : Got async event : local catastrophic error",
        host="container-e275-1553839402050-12124-01-000057",
        rank=12,
        level="warn",
        cuda_dev=0,
    ),
    Shape(
        "torchrun template with role, local index and bar",
        "[trainer0|0]:[rank0]:[E410 01:50:33.889423318 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG "
        "GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: "
        "CUDA error: unspecified launch failure",
        "[PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with "
        "exception: CUDA error: unspecified launch failure",
        rank=0,
        local_rank=0,
        level="error",
    ),
    Shape(
        "pdsh address label before an NCCL line",
        "10.10.23.10: ip-172-32-36-209:8716:9558 [2] NCCL INFO Ring 00 : 26[2] -> 30[6] via "
        "P2P/IPC",
        "Ring 00 : 26[2] -> 30[6] via P2P/IPC",
        host="ip-172-32-36-209",
        level="info",
        cuda_dev=2,
    ),
    Shape(
        "pdsh address label before plain text",
        "10.10.23.10: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
        host="10.10.23.10",
    ),
    Shape(  # corpus
        "ray worker prefix after a driver timestamp, sub-group PG rank",
        "[2025-05-10 00:18:21] (WorkerDict pid=1230, ip=train-1316148307689748608-9zzm714v3bpc-"
        "worker-0) [rank15]:[E510 00:18:19.328151517 ProcessGroupNCCL.cpp:2168] [PG ID 4 PG GUID "
        "20(mesh_tp) Rank 1]  failure detected by watchdog at work sequence id: 3 PG status: last "
        "enqueued work: 3, last completed work: 2",
        "[PG ID 4 PG GUID 20(mesh_tp) Rank 1]  failure detected by watchdog at work sequence id: "
        "3 PG status: last enqueued work: 3, last completed work: 2",
        host="train-1316148307689748608-9zzm714v3bpc-worker-0",
        rank=15,
        level="error",
    ),
    Shape(  # corpus
        "ray de-duplication notice",
        "(WorkerDict pid=3943529) [rank0]:[E816 01:09:38.266910599 ProcessGroupNCCL.cpp:627] "
        "[Rank 0] To avoid data inconsistency, we are taking the entire process down. [repeated "
        "3x across cluster]",
        "[Rank 0] To avoid data inconsistency, we are taking the entire process down.",
        rank=0,
        level="error",
    ),
    Shape(  # corpus
        "cloudwatch row, message glued to the time and repeated",
        "  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using "
        "eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using "
        "eth0:10.36.29.253<0>",
        "Bootstrap : Using eth0:10.36.29.253<0>",
        host="ip-10-36-29-253",
        level="info",
        cuda_dev=0,
    ),
    Shape(  # corpus
        "cloudwatch row with a libfabric warning",
        "  | 2025-05-16T16:39:51.208-07:00libfabric:85:1747438790::core:core:fi_getinfo_():1392"
        "<warn> fi_getinfo: provider efa output empty list | libfabric:85:1747438790::core:core:"
        "fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list",
        "fi_getinfo: provider efa output empty list",
        level="warn",
    ),
    Shape(
        "grep file column",
        "LOG1.3.txt:[rank1]:[E1002 18:16:40.662329700 ProcessGroupNCCL.cpp:632] [Rank 1] "
        "Watchdog caught collective operation timeout",
        "[Rank 1] Watchdog caught collective operation timeout",
        rank=1,
        level="error",
    ),
    Shape(  # corpus
        "poster line number before torch logging",
        "[80851] E0321 02:07:26.090000 140204748584768 torch/distributed/elastic/multiprocessing/"
        "api.py:833] failed (exitcode: -6) local_rank: 0 (pid: 48096) of binary: "
        "/opt/conda/envs/Llama_factory/bin/python",
        "failed (exitcode: -6) local_rank: 0 (pid: 48096) of binary: "
        "/opt/conda/envs/Llama_factory/bin/python",
        level="error",
    ),
    Shape(  # corpus
        "poster line number before a traceback line",
        "[80852] Traceback (most recent call last):",
        "Traceback (most recent call last):",
    ),
    Shape(
        "reporter timestamp without seconds before a c10 header",
        "2025-02-18 12:54 [rank13]:[E218 12:54:12.556497000 ProcessGroupNCCL.cpp:629] [Rank 13] "
        "Watchdog caught collective operation timeout",
        "[Rank 13] Watchdog caught collective operation timeout",
        rank=13,
        level="error",
    ),
    Shape(
        "ansi reset residue without its ESC byte",
        "[0m [rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught "
        "collective operation timeout",
        "[Rank 2] Watchdog caught collective operation timeout",
        rank=2,
        level="error",
    ),
    Shape(  # corpus
        "nccl warning without host prefix",
        "ibvwrap.c:174 NCCL WARN Call to ibv_modify_qp failed with error No such device errno 19",
        "Call to ibv_modify_qp failed with error No such device errno 19",
        level="warn",
    ),
    Shape(
        "nccl warning without host prefix, include path",
        "include/shm.h:28 NCCL WARN Error: failed to extend /dev/shm/nccl-5a3e9e to 9637892 bytes",
        "Error: failed to extend /dev/shm/nccl-5a3e9e to 9637892 bytes",
        level="warn",
    ),
    Shape(  # corpus
        "srun label then the c10 global rank",
        "1: [rank1]:[E702 12:22:50.103110475 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=52, OpType=ALLREDUCE, NumelIn=11, "
        "NumelOut=11, Timeout(ms)=240000) ran for 240000 milliseconds before timing out.",
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52, "
        "OpType=ALLREDUCE, NumelIn=11, NumelOut=11, Timeout(ms)=240000) ran for 240000 "
        "milliseconds before timing out.",
        rank=1,
        level="error",
    ),
    Shape(  # corpus
        "sub-group PG rank without a global prefix is not a rank",
        "[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out! Process will "
        "be terminated after dumping debug info. workMetaList_.size()=3",
        "[PG 5 Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping "
        "debug info. workMetaList_.size()=3",
        level="error",
    ),
    Shape(  # corpus
        "default-group rank in old c10 text",
        "[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: "
        "CUDA error: an illegal memory access was encountered",
        "[Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an illegal memory "
        "access was encountered",
        rank=0,
        level="error",
    ),
    Shape(  # corpus
        "cuda device in the NCCL header is not a rank",
        "server2:23920:24013 [7] NCCL INFO comm 0x7f5780001ca0 rank 15 nranks 32 cudaDev 7 "
        "nvmlDev 7 - Init COMPLETE",
        "comm 0x7f5780001ca0 rank 15 nranks 32 cudaDev 7 nvmlDev 7 - Init COMPLETE",
        host="server2",
        level="info",
        cuda_dev=7,
    ),
    Shape(  # corpus
        "c10 warning level",
        "[W socket.cpp:401] [c10d] The server socket has failed to bind to [::]:29400 (errno: 98 "
        "- Address already in use).",
        "[c10d] The server socket has failed to bind to [::]:29400 (errno: 98 - Address already "
        "in use).",
        level="warn",
    ),
    Shape(  # corpus, cut after its first sentence
        "c10 fatal level with a sub-group PG prefix",
        "[rank0]:[F ProcessGroupNCCL.cpp:1169] [PG 5 Rank 0] [PG 5 Rank 0] ProcessGroupNCCL's "
        "watchdog got stuck for 600 seconds without making progress in monitoring enqueued "
        "collectives.",
        "[PG 5 Rank 0] [PG 5 Rank 0] ProcessGroupNCCL's watchdog got stuck for 600 seconds "
        "without making progress in monitoring enqueued collectives.",
        rank=0,
        level="fatal",
    ),
    Shape(  # corpus
        "logger with a bracketed level",
        "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266",
        "Killing subprocess 13266",
        level="info",
    ),
    Shape(  # corpus
        "application tag before python logging's name and level columns",
        "[cosmos] 2026-05-14 05:28:06,261 - cosmos - ERROR - Process 1 failed with return code 1",
        "Process 1 failed with return code 1",
        level="error",
    ),
    Shape(
        "horovodrun rank tag with its stream",
        "[3]<stderr>:terminate called after throwing an instance of 'gloo::IoException'",
        "terminate called after throwing an instance of 'gloo::IoException'",
        rank=3,
    ),
    Shape(
        "markdown block quote around a pasted NCCL line",
        "> node-4:2211:2290 [1] NCCL INFO Using network Socket",
        "Using network Socket",
        host="node-4",
        level="info",
        cuda_dev=1,
    ),
    Shape(
        "python prompt is not a quote",
        ">>> dist.barrier()",
        ">>> dist.barrier()",
    ),
    Shape(  # corpus
        "ray C++ log header",
        "(RayWorkerVllm pid=7046) [2024-04-16 00:03:25,080 E 7046 7269] logging.cc:361:     @     "
        "0x7f514b634520  (unknown)  (unknown)",
        "    @     0x7f514b634520  (unknown)  (unknown)",
        level="error",
    ),
]


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_shape_is_peeled(catalog: Catalog, shape: Shape) -> None:
    got = catalog.test(shape.line)
    assert got["message"] == shape.message
    assert got["host"] == shape.host
    assert got["rank"] == shape.rank
    assert got["local_rank"] == shape.local_rank
    assert got["level"] == shape.level
    assert got["cuda_dev"] == shape.cuda_dev


def hit_ids(result: dict[str, Any]) -> list[str]:
    return sorted(h["id"] for h in result["hits"])


def test_ray_repeated_line_matches_like_the_original(catalog: Catalog) -> None:
    # corpus: the same message, once with Ray's de-duplication notice
    base = (
        "(WorkerDict pid=3944197) [rank2]:[E816 01:09:38.174648046 ProcessGroupNCCL.cpp:1515] "
        "[PG 0 (default_pg) Rank 2] Process group watchdog thread terminated with exception: "
        "[Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
        "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 "
        "milliseconds before timing out."
    )
    repeated = catalog.test(base + " [repeated 2x across cluster]")
    original = catalog.test(base)
    assert repeated["repeated"] == 2
    assert original["repeated"] is None
    assert repeated["message"] == original["message"]
    assert hit_ids(repeated) == hit_ids(original)
    assert hit_ids(original)


def test_launcher_prefix_does_not_change_classification(catalog: Catalog) -> None:
    # corpus: an NCCL warning bare and behind the launcher shapes it was found with
    bare = (
        "container-e275-1553839402050-12124-01-000057:815:864 [0] transport/net_ib.cu:80 NCCL "
        "WARN NET/IB : Got async event : local catastrophic error"
    )
    expected = hit_ids(catalog.test(bare))
    assert expected
    prefixes = ("[1,12]<stdout>:", "2019-06-02T16:13:44.884Z: [1,12]<stdout>:", "[12]", "[0m ")
    for prefix in prefixes:
        assert hit_ids(catalog.test(prefix + bare)) == expected, prefix


def test_cri_envelope_keeps_the_inner_identity(catalog: Catalog) -> None:
    got = catalog.test(
        "2026-03-14T09:22:05.412233870Z stdout F node-07:40213:40213 [5] NCCL INFO Using network IB"
    )
    assert (got["message"], got["host"], got["cuda_dev"]) == ("Using network IB", "node-07", 5)


@pytest.mark.parametrize(
    "line",
    [
        # a net plugin that spells its transport after NCCL's (heldout 17), pasted into prose
        "the test failed with NET/IBP:Got completion from peer 10.1.2.3<41000> with status=12 "
        "opcode=0 len=0 vendor err 129 (Send)",
        "gpu1:71:93 [0] NCCL WARN NET/IBext : Got completion from peer 10.1.2.3<41000> with "
        "status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.1.2.4",
    ],
)
def test_ib_completion_errors_in_other_spellings_keep_their_status(
    catalog: Catalog, line: str
) -> None:
    assert "nccl_ib_wc_retry_exceeded" in hit_ids(catalog.test(line))
