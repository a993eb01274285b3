//! Where a process crashed: the first frame of the stack a crash report is followed by that
//! names a library or a function of its own, past the frames of the signal handler, libc and
//! the C++ runtime. Stacks come in many shapes: glibc/Open MPI `[ 2] /lib/libnccl.so.2(+0x2b1)`,
//! UCX ` 1 0x00bde56 pncclReduceScatter()  ???:0` or ` 3  /lib/libnccl.so(+0x12) [0x7f..]`,
//! absl and glog `PC: @ 0x7f.. (unknown) ncclLocalOpAppend()`, torch's `frame #3: <unknown
//! function> + 0x2b7c (0x7f.. in /lib/libcuda.so.1)`, gdb's `#0  0x7f.. in ncclProxyProgress ()
//! from /lib/libnccl.so.2` or `#2  0x7f.. in fn (a=1) at src/proxy.cc:812`, and Python's faulthandler
//! `  File ".../site-packages/torch/distributed/distributed_c10d.py", line 3938 in barrier`
//! (most recent call first; its current thread preferred, and a frame inside an installed
//! package before the script's own).

/// Libraries whose frames belong to the crash machinery, not to the crash.
const MACHINERY: &[&str] = &[
    "libc.so",
    "libc-",
    "libpthread",
    "libucs",
    "ld-linux",
    "linux-vdso",
    "libgcc_s",
    "libstdc++",
    "libunwind",
    // glibc's sources, as gdb names them (`at ./nptl/pthread_kill.c:44`)
    "nptl/",
    "sysdeps/",
];

/// Functions of the crash machinery (signal handlers, abort, unwinding).
const MACHINERY_FUNCS: &[&str] = &[
    "__sigaction",
    "sigaction",
    "__restore_rt",
    "raise",
    "abort",
    "pthread_kill",
    "gsignal",
    "ucs_",
    "SignalHandler",
    "__cxa_",
    "__gnu_cxx",
    "std::terminate",
    "_Unwind",
    "clone",
    "start_thread",
];

fn machinery(s: &str) -> bool {
    MACHINERY.iter().any(|m| s.contains(m)) || MACHINERY_FUNCS.iter().any(|m| s.contains(m))
}

/// The shared object a frame names (`libnccl.so.2`), with its offset or symbol when given.
fn library_frame(line: &str) -> Option<String> {
    let at = line.find(".so")?;
    let start = line[..at].rfind(['/', ' ', '(', '[']).map_or(0, |i| i + 1);
    let end = at
        + 3
        + line[at + 3..]
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(line.len() - at - 3);
    let lib = line[start..end].trim_end_matches('.');
    if lib.len() <= 3 || machinery(lib) {
        return None;
    }
    // torch's form names the function before the library: `frame #1: fn + 0x1 (0x.. in lib)`.
    if let Some(rest) = line.trim_start().strip_prefix("frame #") {
        let func = rest.split_once(": ").map(|(_, f)| f).unwrap_or("");
        let func = func.split(" + 0x").next().unwrap_or("").trim();
        if machinery(func) {
            return None;
        }
        if !func.is_empty() && func != "<unknown function>" {
            return Some(format!("{func} in {lib}"));
        }
        return Some(lib.to_string());
    }
    let detail = line[end..]
        .strip_prefix('(')
        .and_then(|r| r.split_once(')'))
        .map(|(d, _)| d)
        .filter(|d| !d.is_empty());
    if detail.is_some_and(machinery) {
        return None;
    }
    Some(match detail {
        Some(d) => format!("{lib} ({d})"),
        None => lib.to_string(),
    })
}

/// A gdb frame, `#N  [0x.. in ]fn (args) [from lib | at file:line]`: `fn in lib`, `fn at
/// file:line` or `fn`; None for the crash machinery or a frame gdb could not name (`??`).
fn gdb_frame(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix('#')?;
    let (num, rest) = rest.split_once(char::is_whitespace)?;
    if num.parse::<u32>().is_err() {
        return None;
    }
    let rest = rest.trim_start();
    let rest = match rest.split_once(" in ") {
        Some((addr, call)) if addr.starts_with("0x") => call,
        _ => rest,
    };
    let (func, tail) = match rest.split_once(" (") {
        Some(parts) => parts,
        // gfortran's runtime: `#3  0x41A4F9 in mgpu_eri_greedy_distribute()`
        None => (rest.strip_suffix("()")?, ""),
    };
    let func = func.trim();
    if func.is_empty() || func == "??" || machinery(func) {
        return None;
    }
    let place = |key: &str| tail.rsplit_once(key).map(|(_, v)| v.trim().to_string());
    if let Some(lib) = place(" from ") {
        let lib = lib.rsplit('/').next().unwrap_or(&lib).to_string();
        return (!machinery(&lib)).then(|| format!("{func} in {lib}"));
    }
    match place(" at ") {
        Some(at) if machinery(&at) => None,
        Some(at) => Some(format!("{func} at {at}")),
        None => Some(func.to_string()),
    }
}

/// A symbol-only frame: UCX's ` 1 0x00000000000bde56 pncclReduceScatter()  ???:0`, absl's and
/// glog's `@ 0x7f.. (unknown) ncclLocalOpAppend()`.
fn symbol_frame(line: &str) -> Option<String> {
    let t = line.trim();
    let is_frame = t.starts_with("PC: @")
        || t.starts_with('@')
        || t.split_whitespace()
            .next()
            .is_some_and(|w| w.parse::<u32>().is_ok())
            && t.split_whitespace()
                .nth(1)
                .is_some_and(|w| w.starts_with("0x"));
    if !is_frame {
        return None;
    }
    let func = t
        .split_whitespace()
        .find(|w| w.ends_with("()") || w.contains("()") && !w.starts_with("0x"))?;
    (!machinery(func) && func != "()").then(|| func.to_string())
}

/// A faulthandler frame: (path inside the installed package or as printed, line, function).
fn python_frame(line: &str) -> Option<(String, bool)> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (path, tail) = rest.split_once('"')?;
    let lineno = tail
        .split("line ")
        .nth(1)
        .and_then(|x| x.split_whitespace().next())
        .map(|x| x.trim_end_matches(','))?;
    let func = tail.rsplit(" in ").next().unwrap_or("").trim();
    let (shown, packaged) = ["site-packages/", "dist-packages/"]
        .iter()
        .find_map(|m| path.split_once(m).map(|(_, p)| (p.to_string(), true)))
        .unwrap_or((path.to_string(), false));
    Some((format!("{shown}:{lineno} in {func}"), packaged))
}

/// The crash frame among the lines that follow a crash report (oldest first).
pub fn crash_frame(lines: &[String]) -> Option<String> {
    // faulthandler: the current thread's block when there is one, else the first block.
    let current = lines
        .iter()
        .position(|l| l.trim_start().starts_with("Current thread 0x"));
    let py_from = current.unwrap_or(0);
    let mut first_py: Option<String> = None;
    for l in &lines[py_from..] {
        if let Some((frame, packaged)) = python_frame(l) {
            if packaged {
                return Some(frame);
            }
            first_py.get_or_insert(frame);
        } else if first_py.is_some() && !l.trim().is_empty() && !l.contains("File \"") {
            break;
        }
    }
    if first_py.is_some() {
        return first_py;
    }
    native_frame_at(lines).map(|(_, frame)| frame)
}

/// The first native frame past the crash machinery among `lines`: its index and its name.
pub fn native_frame_at(lines: &[String]) -> Option<(usize, String)> {
    lines.iter().enumerate().find_map(|(i, l)| {
        let frame = if l.trim_start().starts_with('#') {
            gdb_frame(l)
        } else {
            library_frame(l).or_else(|| symbol_frame(l))
        };
        frame.map(|f| (i, f))
    })
}

/// Whether a crash report states a segmentation fault (or Windows' access violation): its
/// banner says only that memory was touched wrongly; where is in the stack below it.
pub fn states_segfault(text: &str) -> bool {
    const SAYS: &[&str] = &[
        "SIGSEGV",
        "Segmentation fault",
        "signal 11 ",
        "signal (11",
        "0xc0000005",
        "ccess violation",
    ];
    SAYS.iter().any(|w| text.contains(w))
}

#[cfg(test)]
mod tests {
    use super::crash_frame;

    fn frame(text: &str) -> Option<String> {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        crash_frame(&lines)
    }

    #[test]
    fn past_the_handler_to_the_library() {
        let open_mpi = "[h:1] Signal code: Address not mapped (1)\n\
            [h:1] [ 0] /lib64/libpthread.so.0(+0xf630)[0x7f1]\n\
            [h:1] [ 1] /opt/nccl/lib/libnccl.so.2(+0x4b2c1)[0x7f2]\n";
        assert_eq!(frame(open_mpi).as_deref(), Some("libnccl.so.2 (+0x4b2c1)"));
        let ucx = "==== backtrace (tid: 77) ====\n 0 0x0000000000042520 __sigaction()  ???:0\n \
            1 0x00000000000bde56 pncclAllGather()  ???:0\n";
        assert_eq!(frame(ucx).as_deref(), Some("pncclAllGather()"));
        let absl = "PC: @     0x7f11aa00  (unknown)  ncclProxyProgress()\n";
        assert_eq!(frame(absl).as_deref(), Some("ncclProxyProgress()"));
        let c10 = "frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x6b \
            (0x7f1 in /x/torch/lib/libc10.so)\n\
            frame #1: <unknown function> + 0x42520 (0x7f2 in /lib/x86_64-linux-gnu/libc.so.6)\n\
            frame #2: <unknown function> + 0x2b7c3f (0x7f3 in /usr/lib/libcuda.so.1)\n";
        assert_eq!(frame(c10).as_deref(), Some("libcuda.so.1"));
    }

    #[test]
    fn faulthandler_prefers_the_current_thread_and_an_installed_package() {
        let text = "Thread 0x00007f01 (most recent call first):\n  \
            File \"/usr/lib/python3.10/threading.py\", line 324 in wait\n\n\
            Current thread 0x00007f02 (most recent call first):\n  \
            File \"/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py\", \
            line 2501 in all_reduce\n  \
            File \"/srv/train.py\", line 40 in step\n";
        // Another thread's block comes first; the crashing thread's innermost frame counts.
        assert_eq!(
            frame(text).as_deref(),
            Some("torch/distributed/distributed_c10d.py:2501 in all_reduce")
        );
    }

    #[test]
    fn gdb_backtrace_past_libc_to_the_named_function() {
        let text = "#0  __pthread_kill_implementation (no_tid=0, signo=6, threadid=1) at \
            ./nptl/pthread_kill.c:44\n\
            #1  0x00007ffff7c42476 in raise () from /lib/x86_64-linux-gnu/libc.so.6\n\
            #2  0x00007fff2a10c4be in ncclProxyProgress (proxyState_=0x55) at proxy.cc:912\n";
        assert_eq!(
            frame(text).as_deref(),
            Some("ncclProxyProgress at proxy.cc:912")
        );
        let from = "#0  0x00007f2a10c4be80 in ncclProxyProgress () from \
            /usr/lib/x86_64-linux-gnu/libnccl.so.2\n";
        assert_eq!(
            frame(from).as_deref(),
            Some("ncclProxyProgress in libnccl.so.2")
        );
        assert_eq!(frame("#0  0x0000000000000000 in ?? ()\n"), None);
    }

    #[test]
    fn gfortran_frames_named_or_bare() {
        let text = "#0  0x2B56D1DDB697\n#1  0x2B56D1DDBCDE\n\
            #3  0x41A4F9 in mgpu_eri_greedy_distribute()\n";
        assert_eq!(frame(text).as_deref(), Some("mgpu_eri_greedy_distribute"));
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        assert_eq!(super::native_frame_at(&lines).map(|(i, _)| i), Some(2));
    }

    #[test]
    fn segfault_banners_and_others() {
        use super::states_segfault;
        assert!(states_segfault(
            "Program received signal SIGSEGV: Segmentation fault - invalid memory reference."
        ));
        assert!(states_segfault("[h:1:0:1] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)"));
        assert!(states_segfault(
            "CNTK: Caught Win32 exception 0xc0000005: Access violation."
        ));
        assert!(!states_segfault(
            "[h:1:0:1] Caught signal 7 (Bus error: nonexistent physical address)"
        ));
    }

    #[test]
    fn a_segfaults_root_line_is_its_first_frame_a_bus_errors_its_banner() {
        use crate::correlate::testkit::{diagnose, root_line};
        let stack = "[n1:7:0:7] [ 0] /lib64/libpthread.so.0(+0xf630)[0x7f1]\n\
            [n1:7:0:7] [ 1] /opt/hpc/lib/libsolver.so(+0x2558)[0x7f2]\n";
        let segv = "[n1:7:0:7] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x8)";
        let d = diagnose(&format!("{segv}\n{stack}"));
        assert_eq!(
            root_line(&d),
            "[n1:7:0:7] [ 1] /opt/hpc/lib/libsolver.so(+0x2558)[0x7f2]"
        );
        assert_eq!(d[0].json["root_cause"]["record"][0], segv);
        let bus = "[n1:7:0:7] Caught signal 7 (Bus error: nonexistent physical address)";
        let d = diagnose(&format!("{bus}\n{stack}"));
        assert_eq!(root_line(&d), bus);
    }

    #[test]
    fn an_unknown_exception_text_under_a_terminate_banner_is_the_root_line() {
        use crate::correlate::testkit::{diagnose, root_line};
        let banner = "terminate called after throwing an instance of 'std::runtime_error'";
        let what = "  what():  In initFromLoop at /src/transport/uv/listener.cc:126 \
            \"rv < 0: invalid argument\"";
        let d = diagnose(&format!("{banner}\n{what}\nAborted (core dumped)\n"));
        assert_eq!(root_line(&d), what);
        assert_eq!(d[0].json["root_cause"]["record"][0], banner);
        assert_eq!(d[0].json["cause_signature"]["id"], "pt_terminate_called");
    }

    #[test]
    fn no_stack_no_frame() {
        assert_eq!(
            frame("[rank1]: Watchdog caught collective operation timeout\n"),
            None
        );
    }
}
