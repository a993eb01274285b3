//! One test per launcher shape met in real logs. Lines marked "corpus" are copied verbatim from
//! shared/corpus/real; the others put a prefix quoted in a bug report in front of a real message.
use super::*;

struct Peeled<'a> {
    msg: &'a str,
    host: Option<&'a str>,
    m: LineMeta,
}

fn peeled(line: &str) -> Peeled<'_> {
    let m = peel(line, 2025);
    Peeled {
        msg: m.message(line),
        host: m.host(line),
        m,
    }
}

#[test]
fn horovod_rank_glued_to_nccl_header() {
    // corpus
    let p = peeled("[15]worker-23:83:2526 [0] misc/socket.cc:503 NCCL WARN Net : Call to recv from 100.96.188.199<41468> failed : Connection timed out");
    assert_eq!(
        p.msg,
        "Net : Call to recv from 100.96.188.199<41468> failed : Connection timed out"
    );
    assert_eq!(p.host, Some("worker-23"));
    assert_eq!(
        (p.m.grank, p.m.cuda_dev, p.m.pid),
        (Some(15), Some(0), Some(83))
    );
    assert_eq!(p.m.level, Level::Warn);
}

#[test]
fn open_mpi_tag_with_and_without_timestamp() {
    // corpus
    let p = peeled("[1,4]<stdout>:gpu7:4105:4372 [0] include/socket.h:318 NCCL WARN Net : Socket creation failed : Address family not supported by protocol");
    assert_eq!(
        p.msg,
        "Net : Socket creation failed : Address family not supported by protocol"
    );
    assert_eq!(
        (p.host, p.m.grank, p.m.cuda_dev),
        (Some("gpu7"), Some(4), Some(0))
    );
    // corpus
    let p = peeled("2019-06-02T16:13:44.884Z: [1,12]<stdout>:container-e275-1553839402050-12124-01-000057:815:864 [0] transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local catastrophic error");
    assert_eq!(p.msg, "NET/IB : Got async event : local catastrophic error");
    assert_eq!(p.host, Some("container-e275-1553839402050-12124-01-000057"));
    assert_eq!((p.m.grank, p.m.level), (Some(12), Level::Warn));
    assert!(p.m.ts_ms.is_some());
    // corpus: an empty tagged line leaves an empty message
    assert_eq!(peeled("2019-06-02T16:13:44.884Z: [1,12]<stdout>:").msg, "");
}

#[test]
fn markdown_block_quote() {
    // heldout 17: a log pasted into an issue as a quote
    let p = peeled("> Failed, NCCL error /src/tensorrt_llm/cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp:295 'internal error - please report this issue to the NCCL developers'");
    assert!(p.msg.starts_with("Failed, NCCL error /src/"), "{}", p.msg);
    let p = peeled("> > node-1:11:12 [3] NCCL INFO Using network IB");
    assert_eq!((p.msg, p.host), ("Using network IB", Some("node-1")));
    assert_eq!(peeled(">>> import torch").msg, ">>> import torch");
}

#[test]
fn indented_headers() {
    // heldout 18: NCCL lines indented under a Markdown list item
    let p = peeled("    gpu46:78367:78492 [0] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid argument'");
    assert_eq!(
        (p.msg, p.host),
        ("Cuda failure 1 'invalid argument'", Some("gpu46"))
    );
    // a traceback frame keeps its indentation
    let frame = "  File \"train.py\", line 3, in <module>";
    assert_eq!(peeled(frame).msg, frame);
}

#[test]
fn indented_launcher_labels() {
    // heldout 50: a job's output quoted by a test harness or under a list item, indented
    // before kubectl's and Open MPI's labels
    let p = peeled("    [pod/job-launcher-0-0-x7k2q/node] ssh: Could not resolve hostname job-node-0-0.job: Name or service not known");
    assert!(p.msg.starts_with("ssh: Could not resolve"), "{}", p.msg);
    let p = peeled("        [1,10]<stderr>:libfabric:22:1725400706::efa:domain:efa_domain_hmem_info_init_cuda():169<warn> Failed to register CUDA buffer with the EFA device");
    assert!(p.msg.starts_with("Failed to register"), "{}", p.msg);
    assert_eq!(p.m.grank, Some(10));
    // code in a traceback that opens with a bracket is no label
    for code in [
        "    [x.cuda() for x in batch]",
        "    [rank for rank in ranks]",
    ] {
        assert_eq!(peeled(code).msg, code);
    }
}

#[test]
fn horovod_stall_report_rank_is_not_a_task_label() {
    let line = "0: [DistributedSGD_Allreduce/cond/HorovodAllreduce_grads_0]";
    assert_eq!(peeled(line).msg, line);
    assert!(peeled("0: [rank3]: boom").msg.contains("boom"));
}

#[test]
fn horovodrun_rank_and_stream_tag() {
    // heldout 17: horovodrun (Gloo controller) tags a line with the rank alone
    let p = peeled("[1]<stderr>:  what():  [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [127.0.0.1]:3977: Connection reset by peer");
    assert!(
        p.msg.trim_start().starts_with("what():  [/pytorch"),
        "{}",
        p.msg
    );
    assert_eq!(p.m.grank, Some(1));
    assert_eq!(peeled("[0]<stderr>:Killed").msg, "Killed");
    // a bracketed number that is not a launcher tag stays
    assert_eq!(peeled("[0]<not a stream>: x").m.grank, None);
}

#[test]
fn tee_template_role_and_local_index() {
    let p = peeled("[trainer0|0]:[rank0]:[E410 01:50:33.889423318 ProcessGroupNCCL.cpp:1895] [PG ID 0 PG GUID 0(default_pg) Rank 0] Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure");
    assert!(p
        .msg
        .starts_with("[PG ID 0 PG GUID 0(default_pg) Rank 0] Process group"));
    assert_eq!((p.m.local_rank, p.m.grank), (Some(0), Some(0)));
    assert_eq!(p.m.level, Level::Error);
}

#[test]
fn pdsh_address_label() {
    let line = "10.10.23.10: ip-172-32-36-209:8716:9558 [2] NCCL INFO Ring 00 : 26[2] -> 30[6] via P2P/IPC";
    let p = peeled(line);
    assert_eq!(p.msg, "Ring 00 : 26[2] -> 30[6] via P2P/IPC");
    assert_eq!((p.host, p.m.cuda_dev), (Some("ip-172-32-36-209"), Some(2)));
    let p = peeled("10.10.23.10: RuntimeError: CUDA error: uncorrectable ECC error encountered");
    assert_eq!(
        p.msg,
        "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    );
    assert_eq!(p.host, Some("10.10.23.10"));
}

#[test]
fn ray_worker_prefix_names_pid_and_node() {
    // corpus
    let line = "[2025-05-10 00:18:21] (WorkerDict pid=1230, ip=train-1316148307689748608-9zzm714v3bpc-worker-0) [rank15]:[E510 00:18:19.328151517 ProcessGroupNCCL.cpp:2168] [PG ID 4 PG GUID 20(mesh_tp) Rank 1]  failure detected by watchdog at work sequence id: 3 PG status: last enqueued work: 3, last completed work: 2";
    let p = peeled(line);
    assert!(p
        .msg
        .starts_with("[PG ID 4 PG GUID 20(mesh_tp) Rank 1]  failure detected"));
    assert_eq!(
        p.host,
        Some("train-1316148307689748608-9zzm714v3bpc-worker-0")
    );
    assert_eq!((p.m.pid, p.m.grank), (Some(1230), Some(15)));
    assert_eq!(p.m.level, Level::Error);
}

#[test]
fn ray_repeat_notice_is_cut_from_the_message() {
    // corpus
    let p = peeled("(WorkerDict pid=3943529) [rank0]:[E816 01:09:38.266910599 ProcessGroupNCCL.cpp:627] [Rank 0] To avoid data inconsistency, we are taking the entire process down. [repeated 3x across cluster]");
    assert_eq!(
        p.msg,
        "[Rank 0] To avoid data inconsistency, we are taking the entire process down."
    );
    assert_eq!(
        (p.m.repeated, p.m.grank, p.m.pid),
        (Some(3), Some(0), Some(3943529))
    );
}

#[test]
fn cloudwatch_rows() {
    // corpus: message glued to the time, repeated in a second column
    let line = "  | 2025-05-16T16:39:51.208-07:00ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0> | ip-10-36-29-253:79:79 [0] NCCL INFO Bootstrap : Using eth0:10.36.29.253<0>";
    let p = peeled(line);
    assert_eq!(p.msg, "Bootstrap : Using eth0:10.36.29.253<0>");
    assert_eq!(p.host, Some("ip-10-36-29-253"));
    assert!(p.m.ts_ms.is_some());
    // corpus: separated by ` | `
    let p = peeled("  | 2025-05-16T16:39:51.208-07:00 | NCCL version 2.21.5+cuda12.8");
    assert_eq!(p.msg, "NCCL version 2.21.5+cuda12.8");
    // corpus: libfabric's own level
    let p = peeled("  | 2025-05-16T16:39:51.208-07:00libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list | libfabric:85:1747438790::core:core:fi_getinfo_():1392<warn> fi_getinfo: provider efa output empty list");
    assert_eq!(p.msg, "fi_getinfo: provider efa output empty list");
    assert_eq!((p.m.level, p.m.pid), (Level::Warn, Some(85)));
}

#[test]
fn labels_before_console_rows_libfabric_and_digitless_hosts() {
    // A console row behind an srun task label and behind a kubectl time.
    let row = "  | 2026-02-03T04:05:06.789Z | libfabric:4411:1770000000::efa:cq:efa_cq_open():77<warn> Unable to create CQ: Cannot allocate memory";
    for line in [
        format!(" 7: {row}"),
        format!("2026-02-03T04:05:07.000000001Z {row}"),
    ] {
        let p = peeled(&line);
        assert_eq!(
            p.msg, "Unable to create CQ: Cannot allocate memory",
            "{line}"
        );
        assert_eq!((p.m.level, p.m.pid), (Level::Warn, Some(4411)));
    }
    // A pdsh host label before a console row and before a bare libfabric line.
    let labelled = format!("gpu-a12: {row}");
    assert_eq!(
        peeled(&labelled).msg,
        "Unable to create CQ: Cannot allocate memory"
    );
    let p = peeled("gpu-a12: libfabric:4411:1770000000::efa:cq:efa_cq_open():77<warn> CQ gone");
    assert_eq!((p.msg, p.host), ("CQ gone", Some("gpu-a12")));
    // A host name without digits is a label when a whole NCCL header follows it.
    let p = peeled("trainhost: trainhost:812:840 [1] NCCL INFO Using network Socket");
    assert_eq!((p.msg, p.host), ("Using network Socket", Some("trainhost")));
    // ... and only then: ordinary text stays message text.
    assert_eq!(peeled("Note: restart later").msg, "Note: restart later");
}

#[test]
fn grep_file_column() {
    let line = "LOG1.3.txt:[rank1]:[E1002 18:16:40.662329700 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation timeout";
    let p = peeled(line);
    assert_eq!(
        p.msg,
        "[Rank 1] Watchdog caught collective operation timeout"
    );
    assert_eq!((p.m.grank, p.m.level), (Some(1), Level::Error));
    let p = peeled("LOG1.3.txt:hpc-25-14:18622:18622 [1] NCCL INFO Using network IB");
    assert_eq!((p.msg, p.host), ("Using network IB", Some("hpc-25-14")));
}

#[test]
fn poster_line_numbers() {
    // corpus
    let line = "[80851] E0321 02:07:26.090000 140204748584768 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -6) local_rank: 0 (pid: 48096) of binary: /opt/conda/envs/Llama_factory/bin/python";
    let p = peeled(line);
    assert!(p
        .msg
        .starts_with("failed (exitcode: -6) local_rank: 0 (pid: 48096)"));
    assert_eq!((p.m.level, p.m.grank, p.m.pid), (Level::Error, None, None));
    assert!(p.m.ts_ms.is_some());
    // corpus
    let p = peeled(
        "[80853]   File \"/opt/conda/envs/Llama_factory/bin/torchrun\", line 8, in <module>",
    );
    assert_eq!(
        p.msg,
        "  File \"/opt/conda/envs/Llama_factory/bin/torchrun\", line 8, in <module>"
    );
}

#[test]
fn reporter_timestamp_before_c10_header() {
    let line = "2025-02-18 12:54 [rank13]:[E218 12:54:12.556497000 ProcessGroupNCCL.cpp:629] [Rank 13] Watchdog caught collective operation timeout";
    let p = peeled(line);
    assert_eq!(
        p.msg,
        "[Rank 13] Watchdog caught collective operation timeout"
    );
    assert_eq!((p.m.grank, p.m.level), (Some(13), Level::Error));
}

#[test]
fn ansi_residue_without_esc() {
    let p = peeled("[0m [rank2]:[E424 01:11:21.160832730 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught collective operation timeout");
    assert_eq!(
        p.msg,
        "[Rank 2] Watchdog caught collective operation timeout"
    );
    assert_eq!(p.m.grank, Some(2));
    let p = peeled("[36m(RayWorkerVllm pid=7046)[0m Fatal Python error: Aborted");
    assert_eq!(
        (p.msg, p.m.pid),
        ("Fatal Python error: Aborted", Some(7046))
    );
}

#[test]
fn nccl_without_host_prefix() {
    // corpus
    let p = peeled(
        "ibvwrap.c:174 NCCL WARN Call to ibv_modify_qp failed with error No such device errno 19",
    );
    assert_eq!(
        p.msg,
        "Call to ibv_modify_qp failed with error No such device errno 19"
    );
    assert_eq!((p.m.level, p.host), (Level::Warn, None));
    let p = peeled(
        "include/shm.h:28 NCCL WARN Error: failed to extend /dev/shm/nccl-5a3e9e to 9637892 bytes",
    );
    assert!(p.msg.starts_with("Error: failed to extend /dev/shm"));
    assert_eq!(p.m.producer, Producer::Nccl);
}

#[test]
fn srun_label_then_global_rank() {
    // corpus
    let p = peeled("1: [rank1]:[E702 12:22:50.103110475 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=52, OpType=ALLREDUCE, NumelIn=11, NumelOut=11, Timeout(ms)=240000) ran for 240000 milliseconds before timing out.");
    assert!(p.msg.starts_with("[Rank 1] Watchdog caught"));
    assert_eq!(p.m.grank, Some(1));
}

#[test]
fn sub_group_ranks_are_not_global() {
    // corpus: the c10 prefix names no global rank and the PG is a sub-group
    let p = peeled("[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=3");
    assert_eq!(p.m.grank, None);
    // corpus: the default group's rank is global
    let p = peeled("[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered");
    assert_eq!(p.m.grank, Some(0));
    // corpus: the `[rankN]:` prefix wins over a sub-group rank
    let p = peeled("[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=3");
    assert_eq!(p.m.grank, Some(0));
    let p = peeled("[trainer3]:[E ProcessGroupNCCL.cpp:1316] [PG ID 4 PG GUID 20(mesh_tp) Rank 1]  failure detected by watchdog");
    assert_eq!((p.m.grank, p.m.local_rank), (None, Some(3)));
}

#[test]
fn cuda_device_is_never_a_rank() {
    // corpus
    let p = peeled("server2:23920:24013 [7] NCCL INFO comm 0x7f5780001ca0 rank 15 nranks 32 cudaDev 7 nvmlDev 7 - Init COMPLETE");
    assert_eq!(
        (p.m.cuda_dev, p.m.grank, p.m.local_rank),
        (Some(7), None, None)
    );
}

#[test]
fn logger_bracketed_level() {
    // corpus
    let p = peeled(
        "[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266",
    );
    assert_eq!(
        (p.msg, p.m.level),
        ("Killing subprocess 13266", Level::Info)
    );
    assert!(p.m.ts_ms.is_some());
    // corpus
    let p = peeled("(RayWorkerVllm pid=7046) [2024-04-16 00:03:25,080 E 7046 7269] logging.cc:361:     @     0x7f514b634520  (unknown)  (unknown)");
    assert_eq!(p.msg, "    @     0x7f514b634520  (unknown)  (unknown)");
    assert_eq!((p.m.level, p.m.pid), (Level::Error, Some(7046)));
}

#[test]
fn application_tag_and_python_logging_format() {
    // corpus
    let p = peeled(
        "[cosmos] 2026-05-14 05:28:06,261 - cosmos - ERROR - Process 1 failed with return code 1",
    );
    assert_eq!(
        (p.msg, p.m.level),
        ("Process 1 failed with return code 1", Level::Error)
    );
    assert!(p.m.ts_ms.is_some());
    // corpus: the c10d tag after a c10 header stays message text
    let p = peeled("[E socket.cpp:793] [c10d] The client socket has timed out after 60s while trying to connect to (IP1, 2222).");
    assert!(p.msg.starts_with("[c10d] The client socket"));
    let p = peeled("[c10d] a tag without a date");
    assert_eq!(p.msg, "[c10d] a tag without a date");
}

#[test]
fn pdsh_label_before_headerless_and_quoted_nccl_lines() {
    let p = peeled("gpu-b12: include/shm.h:31 NCCL WARN Call to posix_fallocate failed");
    assert_eq!(p.msg, "Call to posix_fallocate failed");
    assert_eq!(p.host, Some("gpu-b12"));
    let p = peeled("gpu-b12: misc/utils.cu:58 WARN Call to cudaMalloc failed");
    assert_eq!(p.msg, "Call to cudaMalloc failed");
    assert_eq!((p.host, p.m.level), (Some("gpu-b12"), Level::Warn));
    let p = peeled("gpu-b12: \"misc/ibvwrap.cc:130 NCCL WARN Call to ibv_open_device failed\"");
    assert_eq!(p.msg, "Call to ibv_open_device failed");
    assert_eq!(p.host, Some("gpu-b12"));
}

#[test]
fn vendor_nccl_bracketed_header_behind_a_ray_label() {
    // A vendor NCCL build (ACCL) prints `[host][pid:tid][dev][file:line] NCCL LEVEL `.
    let p = peeled("(TrainerActor pid=2211) [pai-job-7f3c-worker-1][2211:2290][3][transport.cc:412] NCCL WARN transport.cc:412 -> 2");
    assert_eq!(p.msg, "transport.cc:412 -> 2");
    assert_eq!(p.host, Some("pai-job-7f3c-worker-1"));
    assert_eq!(
        (p.m.pid, p.m.tid, p.m.cuda_dev),
        (Some(2211), Some(2290), Some(3))
    );
    assert_eq!(p.m.level, Level::Warn);
    assert_eq!(p.m.producer, Producer::Nccl);
    let p = peeled(
        "[node-b.local][77:78][0][bootstrap.cc:96] NCCL INFO Bootstrap : Using eth1:10.2.0.5<0>",
    );
    assert_eq!(p.msg, "Bootstrap : Using eth1:10.2.0.5<0>");
    assert_eq!((p.host, p.m.level), (Some("node-b.local"), Level::Info));
}

#[test]
fn bracketed_tags_that_are_not_a_vendor_nccl_header() {
    // Each misses one part: no `[file:line]`, a line number that is not a number, no marker.
    for line in [
        "[node-b][77:78][0] NCCL WARN something broke",
        "[node-b][77:78][0][init.cc:x] NCCL WARN something broke",
        "[node-b][77:78][0][init.cc:12] something broke",
    ] {
        assert_ne!(peeled(line).m.producer, Producer::Nccl, "{line}");
    }
}

#[test]
fn pdsh_label_before_a_c10_exception_trace() {
    let p = peeled("gpu-b12: Exception raised from ncclCommWatchdog at /src/c10d/ProcessGroupNCCL.cpp:1418 (most recent call first):");
    assert_eq!(
        p.msg,
        "Exception raised from ncclCommWatchdog at /src/c10d/ProcessGroupNCCL.cpp:1418 (most recent call first):"
    );
    assert_eq!(p.host, Some("gpu-b12"));
    let p = peeled("gpu-b12: frame #3: <unknown function> + 0x94ac3 (0x7f10 in /lib/libc.so.6)");
    assert_eq!(
        p.msg,
        "frame #3: <unknown function> + 0x94ac3 (0x7f10 in /lib/libc.so.6)"
    );
    // Prose that happens to open the same way stays prose.
    let p = peeled("Note: frame #one was dropped");
    assert_eq!(p.host, None);
}

#[test]
fn torchx_role_and_replica_before_the_process_prefixes() {
    // NeMo-Run (TorchX): the role's replica, then UCX's own header
    let line = "pynemo/0 [1746051351.812265] [gcp5-sdc-3:1950659:0]            sock.c:334  UCX  \
        ERROR   connect(fd=168, dest_addr=169.254.4.6:52595) failed: Connection refused";
    let p = peeled(line);
    assert!(p.msg.starts_with("connect(fd=168"), "{}", p.msg);
    assert_eq!(p.host, Some("gcp5-sdc-3"));
    // TorchRec's DLRM under TorchX: the replica, then torchrun's local rank
    let p = peeled("dlrm_main/0 [1]:Traceback (most recent call last):");
    assert_eq!(p.msg, "Traceback (most recent call last):");
    // a fraction or a path in prose is not a label
    for prose in [
        "ratio 3/4 done",
        "see docs/2 for more",
        "train/loss 0.5",
        "1/2 done",
    ] {
        assert_eq!(peeled(prose).msg, prose);
    }
}

#[test]
fn runner_label_before_a_bracketed_stream_name() {
    // a benchmark runner's process name and the stream it captured (milabench)
    let p = peeled("opt-1_3b.0 [stderr] Failed to find reverse path from remNode 0/5f000 nlinks 4 to node 0/cb000");
    assert!(
        p.msg.starts_with("Failed to find reverse path"),
        "{}",
        p.msg
    );
    assert_eq!(p.m.host, None);
    let p = peeled("worker.3 [stdout] h1:10:20 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>");
    assert!(p.msg.starts_with("Bootstrap : Using"), "{}", p.msg);
    assert_eq!(
        peeled("[stderr] Traceback (most recent call last):").msg,
        "Traceback (most recent call last):"
    );
    assert_eq!(peeled("opt-1_3b.0 [stderr]").msg, "");
    // a word before other bracketed text is message text
    let p = peeled("retrying [stderr-capture] x");
    assert!(p.msg.starts_with("retrying"), "{}", p.msg);
}

#[test]
fn an_ascend_error_code_is_not_a_host_label() {
    let p = peeled("EI0006: [PID: 41233] 2025-04-08-18:07:20.444.436 Getting socket times out.");
    assert!(p.msg.starts_with("EI0006: [PID: 41233]"), "{}", p.msg);
    assert_eq!(p.host, None);
}

#[test]
fn tensorflow_cpp_log_header_gives_level_and_no_host() {
    let p = peeled("[1,1]<stderr>:2020-02-11 07:12:40.512003: E tensorflow/stream_executor/cuda/cuda_driver.cc:828] failed to allocate 1.20G (1288490188 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory");
    assert!(p.msg.starts_with("failed to allocate 1.20G"), "{}", p.msg);
    assert_eq!(p.host, None);
    assert_eq!((p.m.level, p.m.grank), (Level::Error, Some(1)));
    let p = peeled("2020-02-11 07:12:40.512003: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1597] Unable to enable peer access between device ordinals 0 and 9");
    assert_eq!(p.m.level, Level::Warn);
    assert!(
        p.msg.starts_with("Unable to enable peer access"),
        "{}",
        p.msg
    );
}

#[test]
fn nccl_tests_failure_lines_name_their_host() {
    let line = "gpu-node: Test NCCL failure common.cu:961 'internal error - please report this issue to the NCCL developers / '";
    let p = peeled(line);
    assert_eq!(p.host, Some("gpu-node"));
    assert!(p.msg.starts_with("Test NCCL failure"), "{}", p.msg);
}

#[test]
fn the_sharp_librarys_header_gives_host_pid_and_level() {
    let p = peeled("[C25L18:0:24972 - comm.c:374] ERROR Failed to lock SAT tree(ID:0x40 ret:0x4)");
    assert_eq!(p.host, Some("C25L18"));
    assert_eq!((p.m.pid, p.m.level), (Some(24972), Level::Error));
    assert!(p.msg.starts_with("Failed to lock SAT tree"), "{}", p.msg);
    let p = peeled("[C25L18:0:24972 - context.c:702] INFO job (ID: 12) resource request quota");
    assert_eq!(p.m.level, Level::Info);
    assert!(p.msg.starts_with("job (ID: 12)"), "{}", p.msg);
    let p = peeled("[snail01:0:3745196 unique id 9370583446459220315][2024-09-24 16:15:29] ERROR Job error in sharp_get_job_data_len.");
    assert_eq!((p.host, p.m.level), (Some("snail01"), Level::Error));
    assert!(p.msg.starts_with("Job error in"), "{}", p.msg);
    let p = peeled("[snail01:0:3745196 - context.c:709][2024-09-24 16:15:29] ERROR sharp_get_job_data_len failed");
    assert!(
        p.msg.starts_with("sharp_get_job_data_len failed"),
        "{}",
        p.msg
    );
}

#[test]
fn a_c10_header_that_lost_its_bracket() {
    // An excerpt that starts one byte into its first line.
    let p = peeled("E ProcessGroupNCCL.cpp:587] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLTOALL_BASE, Timeout(ms)=300000) ran for 306666 milliseconds before timing out.");
    assert!(p.msg.starts_with("[Rank 1] Watchdog caught"), "{}", p.msg);
    assert_eq!((p.m.level, p.m.grank), (Level::Error, Some(1)));
    // A sentence that opens with a capital letter is no header.
    let p = peeled("E is the error code printed by main.cpp:12] below");
    assert!(p.msg.starts_with("E is the"));
}

#[test]
fn a_rank_label_that_lost_its_bracket() {
    // An excerpt that starts one byte into its first line.
    let p = peeled(
        "rank1]:[E ProcessGroupNCCL.cpp:537] Some NCCL operations have failed or timed out.",
    );
    assert_eq!(p.msg, "Some NCCL operations have failed or timed out.");
    assert_eq!((p.m.level, p.m.grank), (Level::Error, Some(1)));
    let p = peeled("rank12]: Traceback (most recent call last):");
    assert_eq!(
        (p.msg, p.m.grank),
        ("Traceback (most recent call last):", Some(12))
    );
    // Only at the start of a line, and only the `rank` label.
    assert!(peeled("ranks 1]: are late").msg.starts_with("ranks 1]"));
    assert!(peeled("default3]: Traceback").msg.starts_with("default3]"));
    assert_eq!(peeled("x rank1]: y").m.grank, None);
}

#[test]
fn omniverse_kit_header_after_its_time() {
    // Isaac Lab on several GPUs (a Kit app's log): the level is title case, the extension named.
    let p = peeled("2024-06-15 06:54:19 [20,730ms] [Error] [omni.physx.tensors.plugin] CUDA error: an illegal memory access was encountered: ../plugins/gpu/GpuRigidBodyView.cpp: 835");
    assert!(p.msg.starts_with("CUDA error: an illegal memory access"));
    assert_eq!(p.m.level, Level::Error);
    assert!(p.m.ts_ms.is_some());
    let p = peeled("2025-06-23 14:16:06 [80,419ms] [Warning] [gpu.foundation.plugin] Skipping NVIDIA GPU due CUDA being in bad state: NVIDIA H100 80GB HBM3");
    assert!(p.msg.starts_with("Skipping NVIDIA GPU"));
    assert_eq!(p.m.level, Level::Warn);
    // Not a Kit header: a level Kit does not print, a duration that is not milliseconds.
    let mut m = LineMeta::default();
    assert_eq!(
        producer::omniverse_kit(b"[1,234ms] [Notice] x", &mut m),
        None
    );
    assert_eq!(producer::omniverse_kit(b"[1,234s] [Error] x", &mut m), None);
}

#[test]
fn cray_mpich_abort_header() {
    // Frontier, with srun's task label in front
    let p = peeled("3725: MPICH ERROR [Rank 3725] [job id 1373423.0] [Thu Jul  6 13:56:00 2023] [frontier02817] - Abort(472526735) (rank 3725 in comm 0): Fatal error in PMPI_Wait: Other MPI error, error stack:");
    assert_eq!(
        p.msg,
        "Fatal error in PMPI_Wait: Other MPI error, error stack:"
    );
    assert_eq!(p.host, Some("frontier02817"));
    assert_eq!(p.m.grank, Some(3725));
    assert_eq!(p.m.level, Level::Error);
    assert!(p.m.ts_ms.is_some());
    // A poster's markdown turned the abort code into a link: the message still follows `): `.
    let p = peeled("MPICH ERROR [Rank 1] [job id 45070892.1] [Mon Nov 10 17:03:48 2025] [nid008237] - Abort([4864002](tel:4864002)) (rank 1 in comm 0): Fatal error in PMPI_Waitall: Invalid count, error stack:");
    assert_eq!(
        p.msg,
        "Fatal error in PMPI_Waitall: Invalid count, error stack:"
    );
    assert_eq!(p.host, Some("nid008237"));
}
