//! Peeling of the shapes `log-formats.md` documents (invented example lines).
use super::*;

fn msg(line: &str) -> (&str, LineMeta) {
    let m = peel(line, 2026);
    (m.message(line), m)
}

#[test]
fn nccl_warn_all_versions() {
    let (t, m) = msg("node12:81234:81301 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<39275> failed : Software caused connection abort");
    assert!(t.starts_with("socketStartConnect: Connect"));
    assert_eq!(m.pid, Some(81234));
    assert_eq!(m.cuda_dev, Some(3));
    assert_eq!(m.level, Level::Warn);
    let line = "[2025-05-29 16:25:00] node12:81234:81301 [3] transport/net_ib.cc:2458 NCCL WARN NET/IB: Got completion";
    let (t, m) = msg(line);
    assert_eq!(t, "NET/IB: Got completion");
    assert_eq!(m.host(line), Some("node12"));
    assert!(m.ts_ms.is_some());
    let (t, _) = msg("[2026-06-11 11:44:19] node12:81234:81301 [3] misc/socket.cc:58 (socketProgress) NCCL WARN socketProgress: x");
    assert_eq!(t, "socketProgress: x");
    let (t, m) = msg("node12:81234:81234 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB");
    assert_eq!(t, "NET/IB : Using [0]mlx5_0:1/IB");
    assert_eq!(m.level, Level::Info);
}

#[test]
fn c10_and_rank_prefixes() {
    let (t, m) = msg("[rank3]:[E710 18:00:32.426182607 ProcessGroupNCCL.cpp:757] [Rank 3] Watchdog caught collective operation timeout");
    assert_eq!(t, "[Rank 3] Watchdog caught collective operation timeout");
    assert_eq!(m.grank, Some(3));
    assert_eq!(m.level, Level::Error);
    assert!(m.ts_ms.is_some());
    let (t, m) = msg("[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught");
    assert_eq!(t, "[Rank 1] Watchdog caught");
    assert_eq!(m.ts_ms, None);
    let (t, m) = msg("[default3]:[rank3]: Traceback (most recent call last):");
    assert_eq!(t, "Traceback (most recent call last):");
    assert_eq!((m.local_rank, m.grank), (Some(3), Some(3)));
    assert_eq!(m.producer, Producer::Excepthook);
    let (t, m) = msg("[default5]:node-07:40213:40213 [5] NCCL INFO Using network IB");
    assert_eq!(t, "Using network IB");
    assert_eq!(m.local_rank, Some(5));
}

#[test]
fn a_dated_stamp_is_not_replaced_by_a_year_less_inner_time() {
    // kubectl --timestamps (UTC, with its year) before c10's local, year-less header: every
    // line of the stream keeps the stamp's clock, with or without an inner time.
    let stamp = crate::timefmt::iso_datetime(b"2024-08-16T01:09:38.174648046Z").map(|x| x.0);
    assert!(stamp.is_some());
    let (t, m) = msg("2024-08-16T01:09:38.174648046Z [rank2]:[E816 09:09:38.174648046 ProcessGroupNCCL.cpp:1515] [Rank 2] x");
    assert_eq!((t, m.ts_ms, m.ts_dated), ("[Rank 2] x", stamp, true));
    let (_, m) = msg(
        "2024-08-16T01:09:38.174648046Z E0816 09:09:38.174000 7781 torch/distributed/run.py:900] y",
    );
    assert_eq!(m.ts_ms, stamp);
    // Without a dated stamp the inner time is the line's, and its old form without a time
    // leaves an outer year-less one (syslog) in place.
    let (_, m) = msg("[E816 09:09:38.174648046 ProcessGroupNCCL.cpp:1515] [Rank 2] x");
    assert!(m.ts_ms.is_some() && !m.ts_dated);
}

#[test]
fn launchers_and_envelopes() {
    let line = " 5: [default5]:[rank13]:[E314 09:22:05.407719231 ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID 0(default_pg) Rank 13]  failure detected";
    let (t, m) = msg(line);
    assert!(t.starts_with("[PG ID 0"));
    assert_eq!((m.local_rank, m.grank), (Some(5), Some(13)));
    let line = "node-07: [default5]:[rank13]: Traceback (most recent call last):";
    let (_, m) = msg(line);
    assert_eq!(m.host(line), Some("node-07"));
    let (t, m) = msg("[1,13]<stdout>:node-07:40213:40213 [5] NCCL INFO Using network IB");
    assert_eq!(t, "Using network IB");
    assert_eq!(m.grank, Some(13));
    let (t, m) =
        msg("\x1b[36m(RayTrainWorker pid=40213, ip=10.20.3.7)\x1b[0m [rank13]: RuntimeError: x");
    assert_eq!(t, "RuntimeError: x");
    assert_eq!(m.pid, Some(40213));
    // The CRI envelope alone is peeled: the engine joins partial lines, then peels them.
    let (t, m) = msg(
        "2026-03-14T09:22:05.412233870Z stdout P node-07:40213:40213 [5] NCCL INFO Channel 00/02 :",
    );
    assert_eq!(t, "node-07:40213:40213 [5] NCCL INFO Channel 00/02 :");
    assert!(m.cri_partial);
}

#[test]
fn python_side_and_kernel() {
    let (t, m) = msg("E0314 09:32:05.771000 40190 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) local_rank: 5 (pid: 40213)");
    assert!(t.starts_with("failed (exitcode: -9)"));
    assert_eq!(m.pid, Some(40190));
    assert_eq!(m.level, Level::Error);
    let (t, m) = msg("ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1)");
    assert_eq!(t, "failed (exitcode: 1)");
    assert_eq!(m.level, Level::Error);
    let line = "Nov 30 12:00:01 node-007 kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, GPU has fallen off the bus.";
    let (t, m) = msg(line);
    assert!(t.starts_with("NVRM: Xid"));
    assert_eq!(m.host(line), Some("node-007"));
    assert_eq!(m.producer, Producer::Kernel);
    let (t, _) = msg("[183422.511734] NVRM: Xid (PCI:0000:9a:00): 79");
    assert!(t.starts_with("NVRM"));
    let (t, m) = msg("[Fri Jan 29 23:42:34 2021] NVRM: Xid (PCI:0000:db:00): 31, pid=13641");
    assert!(t.starts_with("NVRM: Xid"));
    assert_eq!(m.ts_ms, Some(1_611_963_754_000));
    let line = "2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] \
                [09c561ee-a44c-4795-967c-7183a83b3160] OSError: [Errno 28] No space left on device";
    let (t, m) = msg(line);
    assert_eq!(t, "OSError: [Errno 28] No space left on device");
    assert_eq!(m.pid, Some(28936));
    let (t, _) = msg("[177/train (pid 28936)] x");
    assert_eq!(t, "[177/train (pid 28936)] x");
    let (t, m) = msg("[  +0.000844] nvidia 0000:03:00.0: AER: can't recover");
    assert!(t.starts_with("nvidia 0000:03:00.0"));
    assert_eq!(m.producer, Producer::Kernel);
    let (t, m) = msg("2026-11-30 12:00:05,123 INFO step=12 loss=2.3");
    assert_eq!(t, "step=12 loss=2.3");
    assert_eq!(m.level, Level::Info);
}

#[test]
fn message_text_is_not_peeled() {
    for line in [
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "Error: failed to extend /dev/shm/nccl-1 to 9637892 bytes",
        "[Rank 3] Watchdog caught collective operation timeout",
        "  exitcode  : -9 (pid: 40213)",
        "NCCL version 2.21.5+cuda12.4",
    ] {
        let (t, _) = msg(line);
        assert_eq!(t, line);
    }
}

#[test]
fn launcher_labels_before_python_errors() {
    // srun -l and pdsh label every line of a process, its tracebacks included.
    for (line, message, host) in [
        (
            " 3: Traceback (most recent call last):",
            "Traceback (most recent call last):",
            None,
        ),
        (
            "0: RuntimeError: CUDA error: x",
            "RuntimeError: CUDA error: x",
            None,
        ),
        ("P1 13: RuntimeError: x", "RuntimeError: x", None),
        (
            "node-07: RuntimeError: CUDA error: x",
            "RuntimeError: CUDA error: x",
            Some("node-07"),
        ),
        (
            "node-07:   File \"train.py\", line 3, in <module>",
            "  File \"train.py\", line 3, in <module>",
            Some("node-07"),
        ),
        (
            "gpu-12: torch.distributed.DistBackendError: NCCL error",
            "torch.distributed.DistBackendError: NCCL error",
            Some("gpu-12"),
        ),
        // Rows of torch elastic's failure summary box.
        (
            "node-07:   exitcode  : -11 (pid: 4410)",
            "  exitcode  : -11 (pid: 4410)",
            Some("node-07"),
        ),
        (
            "node-07:   error_file: <N/A>",
            "  error_file: <N/A>",
            Some("node-07"),
        ),
    ] {
        let (t, m) = msg(line);
        assert_eq!(t, message, "{line:?}");
        assert_eq!(m.host(line), host, "{line:?}");
    }
}

#[test]
fn names_before_ordinary_text_stay_message_text() {
    for line in [
        "eth0: link up",
        "mlx5_0: port 1 state changed",
        "rank0: loss 1.25",
        "node-07:   time to first batch : 3 s",
        "Epoch 3: loss 1.25",
        "1234567: a number too long for a task id",
    ] {
        let (t, m) = msg(line);
        assert_eq!(t, line);
        assert_eq!(m.host, None);
    }
}

#[test]
fn message_printed_behind_a_progress_bar() {
    let line = "Epoch 1:  6%|██        | 3021/50000 [2:01:13<31:22:05,  2.41s/it, loss=1.9][E ProcessGroupNCCL.cpp:458] [Rank 2] Watchdog caught collective operation timeout";
    let (t, m) = msg(line);
    assert_eq!(t, "[Rank 2] Watchdog caught collective operation timeout");
    assert_eq!(m.level, Level::Error);
    let (t, _) = msg("Epoch 1:  6%|██        | 3021/50000 [2:01:13<31:22:05,  2.41s/it]");
    assert!(t.starts_with("Epoch 1:"));
}

#[test]
fn a_line_quoted_whole_by_its_poster() {
    // Chinese input methods often put the closing mark first.
    let (t, m) = msg("\u{201d}net/ibwrap.cc:91 NCCL WARN Call to ibv_alloc_pd failed\u{201c}");
    assert_eq!(t, "Call to ibv_alloc_pd failed");
    assert_eq!((m.level, m.producer), (Level::Warn, Producer::Nccl));
    let line =
        "`gpu-a7:5012:5090 [2] misc/socket.cc:64 NCCL WARN Net : Connect to 10.2.0.9<4410> failed`";
    let (t, m) = msg(line);
    assert_eq!(t, "Net : Connect to 10.2.0.9<4410> failed");
    assert_eq!(m.host(line), Some("gpu-a7"));
    // Quoted prose stays as it was.
    let (t, _) = msg("\"please help with this error\"");
    assert_eq!(t, "\"please help with this error\"");
    let (t, _) = msg("'");
    assert_eq!(t, "'");
    // Every opening mark, each with a closing one.
    for (open, close) in [
        ("\"", "\""),
        ("'", "'"),
        ("`", "`"),
        ("\u{201c}", "\u{201d}"),
        ("\u{201d}", "\u{201c}"),
        ("\u{2018}", "\u{2019}"),
        ("\u{2019}", "\u{2018}"),
    ] {
        let line = format!("{open}gpu-a7:5012:5090 [2] NCCL INFO Using network IB{close}");
        assert_eq!(msg(&line).0, "Using network IB", "{line}");
    }
}

#[test]
fn nccl_2_3_warn_without_its_header() {
    let (t, m) = msg("include/socket.h:502 WARN Net : No interface found in the same subnet");
    assert_eq!(t, "Net : No interface found in the same subnet");
    assert_eq!(
        (m.level, m.producer, m.host),
        (Level::Warn, Producer::Nccl, None)
    );
}

#[test]
fn a_message_ending_in_a_colon_behind_a_timestamp_column() {
    let (t, m) = msg("2026-05-02T11:40:09.123456789Z Last error:");
    assert_eq!(t, "Last error:");
    assert_eq!(m.host, None);
    // A syslog header still is one when a message follows it.
    let (t, m) = msg("2026-05-02T11:40:09.123456Z gpu-b3 kernel: NVRM: Xid 79");
    assert_eq!(t, "NVRM: Xid 79");
    assert_eq!(m.producer, Producer::Kernel);
}

#[test]
fn padding_to_the_terminal_width_is_no_part_of_the_message() {
    let line = "gw-2: gw-2:4410:4490 [1] misc/ibvwrap.cc:301 NCCL WARN Call to ibv_create_qp failed   \t  ";
    let (t, m) = msg(line);
    assert_eq!(t, "Call to ibv_create_qp failed");
    assert_eq!(m.host(line), Some("gw-2"));
    // A prefix with nothing behind it stays an empty message.
    let (t, _) = msg("[default5]:   ");
    assert_eq!(t, "");
    let (t, _) = msg("(TrainWorker pid=812) ");
    assert_eq!(t, "");
    let (t, _) = msg("     ");
    assert_eq!(t, "");
}

#[test]
fn a_label_before_pytorchs_last_error_names_the_host() {
    let line = "trn-07: Last error:";
    let (t, m) = msg(line);
    assert_eq!(t, "Last error:");
    assert_eq!(m.host(line), Some("trn-07"));
    // Without a digit a name stays message text, as before other text.
    assert_eq!(msg("Reason: Last error:").0, "Reason: Last error:");
}

#[test]
fn a_marker_without_its_header_is_the_header() {
    let line = "NCCL WARN Cuda failure 'invalid device function'";
    let (t, m) = msg(line);
    assert_eq!(t, "Cuda failure 'invalid device function'");
    assert_eq!((m.level, m.producer), (Level::Warn, Producer::Nccl));
    assert_eq!((m.host(line), m.pid), (None, None));
    let (t, m) = msg("[default2]:NCCL INFO Using network Socket");
    assert_eq!(t, "Using network Socket");
    assert_eq!((m.level, m.local_rank), (Level::Info, Some(2)));
    // Only the marker opens it: the version banner and prose stay messages.
    let (t, m) = msg("NCCL version 2.21.5+cuda12.4");
    assert_eq!(t, "NCCL version 2.21.5+cuda12.4");
    assert_ne!(m.producer, Producer::Nccl);
    let (t, _) = msg("NCCL WARNING: something else");
    assert_eq!(t, "NCCL WARNING: something else");
}

#[test]
fn a_child_stream_label_is_peeled_without_naming_a_host() {
    let line = "stderr: [E ProcessGroupNCCL.cpp:640] [Rank 3] Watchdog caught collective operation timeout";
    let (t, m) = msg(line);
    assert_eq!(t, "[Rank 3] Watchdog caught collective operation timeout");
    assert_eq!((m.host(line), m.level), (None, Level::Error));
    // A pdsh host label behind the stream label is still a host.
    let line =
        "stdout: node-b12: [2026-01-05 10:00:01,250] [INFO] [comm.py:600:init_distributed] x";
    let (t, m) = msg(line);
    assert_eq!(t, "x");
    assert_eq!(m.host(line), Some("node-b12"));
    // Only at the start of the line: further in it is message text.
    let (t, _) = msg("worker said stderr: nothing");
    assert_eq!(t, "worker said stderr: nothing");
}

#[test]
fn a_host_label_before_a_bare_marker_or_a_ray_label_is_peeled() {
    let line = "gpu-node3: NCCL WARN Cuda failure 'invalid device function'";
    let (t, m) = msg(line);
    assert_eq!(t, "Cuda failure 'invalid device function'");
    assert_eq!((m.host(line), m.level), (Some("gpu-node3"), Level::Warn));
    let line =
        "gpu-node3: (Learner pid=7731, ip=10.40.2.17) mlx5: gpu-b07: got completion with error:";
    let (t, m) = msg(line);
    assert_eq!(t, "mlx5: gpu-b07: got completion with error:");
    assert_eq!((m.host(line), m.pid), (Some("gpu-node3"), Some(7731)));
}

#[test]
fn open_mpi_timestamp_output_glued_to_its_rank_tag() {
    // `mpirun --timestamp-output --tag-output`: ctime() without its newline, then the tag.
    let line = "Tue Mar  3 07:05:09 2026[1,6]<stdout>:gpu-c2:77120:77188 [6] transport.cc:154 NCCL WARN Cuda failure 'invalid argument'";
    let (t, m) = msg(line);
    assert_eq!(t, "Cuda failure 'invalid argument'");
    assert_eq!(m.host(line), Some("gpu-c2"));
    assert_eq!(
        (m.grank, m.pid, m.level),
        (Some(6), Some(77120), Level::Warn)
    );
    assert!(m.ts_ms.is_some());
    // The same time before a space, and a day name that is not a time, stay apart.
    let (t, _) = msg("Tue Mar  3 07:05:09 2026 gpu-c2:77120:77188 [6] NCCL INFO Using network IB");
    assert_eq!(t, "Using network IB");
    assert_eq!(
        msg("Tue is the day the job failed").0,
        "Tue is the day the job failed"
    );
}

#[test]
fn a_container_column_before_a_whole_nccl_header_is_peeled() {
    // A log viewer's container column: one word and a space, no colon.
    let line =
        "trainer job-7-worker-2:5120:5188 [3] graph/rings.cc:38 NCCL WARN Error : ring 1 does not loop back to start (4 != 1)";
    let (t, m) = msg(line);
    assert_eq!(t, "Error : ring 1 does not loop back to start (4 != 1)");
    assert_eq!(m.host(line), Some("job-7-worker-2"));
    assert_eq!(
        (m.pid, m.cuda_dev, m.level),
        (Some(5120), Some(3), Level::Warn)
    );
    // A word before anything short of a whole NCCL header stays message text.
    for text in [
        "trainer job-7-worker-2:5120:5188 [3] started",
        "retrying job-7-worker-2:5120 in 5 s",
        "worker 12:30:01 INFO resumed",
    ] {
        assert_eq!(msg(text).0, text);
    }
}

#[test]
fn a_line_framed_by_a_terminal_ui() {
    // k9s draws its log pane's left border; some viewers close the frame on the right too.
    let line = "\u{2502} pod-7:73:95 [0] transport/net_ib.cc:881 NCCL WARN NET/IB : Got completion from peer 10.1.0.4<4711> with error 12";
    let (t, m) = msg(line);
    assert!(t.starts_with("NET/IB : Got completion from peer"));
    assert_eq!(m.host(line), Some("pod-7"));
    let line =
        "\u{2502} pod-7:73:95 [0] misc/socket.cc:64 NCCL WARN Net : Connect failed   \u{2502}";
    let (t, _) = msg(line);
    assert_eq!(t, "Net : Connect failed");
    // A bar with no space after it is text, not a frame.
    let (t, _) = msg("\u{2502}abc");
    assert_eq!(t, "\u{2502}abc");
}

#[test]
fn ipythons_traceback_header_names_its_exception() {
    use super::is_ipython_traceback_header as header;
    assert!(header(
        "ProcessRaisedException                    Traceback (most recent call last)"
    ));
    assert!(header(
        "torch.multiprocessing.spawn.ProcessExitedException  Traceback (most recent call last)  "
    ));
    // Python's own header, prose before the words, one space only: not IPython's.
    assert!(!header("Traceback (most recent call last):"));
    assert!(!header("see the Traceback (most recent call last)"));
    assert!(!header("ValueError Traceback (most recent call last)"));
}
