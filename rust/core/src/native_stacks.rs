//! Native stack dumps printed into a log (gdb's `bt` and `thread apply all bt`, pstack): per
//! process, whether ProcessGroupNCCL's watchdog thread was inside a CUDA call when the stack
//! was taken. That thread polls the CUDA events of every collective; blocked in the CUDA
//! runtime or driver (an NCCL kernel that waits for a dead peer holds the device), it can
//! neither time the collective out nor abort it, so the job hangs with no failure line
//! (pytorch #101463: `cudaGetLastError` under `WorkNCCL::isCompleted` under
//! `workCleanupLoop`). `correlate` opens the finding `watchdog_stuck_in_cuda` on the CUDA frame.
//!
//! Also whether a thread waits inside NCCL's own host code: its innermost frames are a libc
//! wait or spin (`sched_yield`, a futex, `poll`) called from an NCCL function that is not one
//! of NCCL's service loops (the proxy and IB threads wait like that in every healthy process).
//! A thread of the application parked in NCCL (an enqueue spinning for a free proxy op, an
//! init waiting for its peers) is where a silent hang is (NVIDIA/nccl #2353:
//! `ncclLocalOpAppend` under `uploadProxyOps`, spinning in `sched_yield`); `correlate` opens
//! the finding `thread_waits_inside_nccl` on that frame.
//!
//! Frames come innermost first, `#0` opening each thread's stack; a thread header needs no
//! reading of its own.

use crate::memsize;

/// A frame line as printed, and where.
#[derive(Debug, Clone)]
pub struct Frame {
    pub seq: u64,
    pub line_no: u64,
    pub ts_ms: Option<i64>,
    pub text: Box<str>,
}

/// One process's reading of its latest dump.
#[derive(Debug, Default)]
pub struct NativeStack {
    /// The innermost CUDA call of the thread being read.
    cuda_call: Option<Frame>,
    /// That call, once a watchdog frame below it showed whose thread it is (the first such).
    pub stuck_watchdog: Option<Frame>,
    /// Whether every frame of the thread being read so far is a wait.
    waiting: bool,
    /// The NCCL frame the thread being read waits in, and whether the thread turned out to be
    /// one of NCCL's service threads.
    nccl_frame: Option<Frame>,
    nccl_service: bool,
    /// The first thread (of a finished reading) that waits inside NCCL: its NCCL frame.
    waits_in_nccl: Option<Frame>,
}

/// Functions of the CUDA runtime (`cudaEventQuery`) and driver (`cuEventQuery`) APIs.
pub fn is_cuda_call(func: &str) -> bool {
    let api = |prefix: &str| {
        func.strip_prefix(prefix)
            .and_then(|rest| rest.chars().next())
            .is_some_and(|c| c.is_ascii_uppercase())
    };
    api("cuda") || api("cu")
}

/// ProcessGroupNCCL's watchdog loop, as torch versions name it.
pub fn is_watchdog(func: &str) -> bool {
    func.contains("ProcessGroupNCCL")
        && [
            "workCleanupLoop",
            "ncclCommWatchdog",
            "watchdogHandler",
            "Watchdog::run",
        ]
        .iter()
        .any(|name| func.contains(name))
}

/// Where a thread waits or spins: libc's and the kernel's waits, however glibc names them.
pub fn is_wait(func: &str) -> bool {
    const WAITS: &[&str] = &[
        "sched_yield",
        "nanosleep",
        "clock_nanosleep",
        "usleep",
        "poll",
        "ppoll",
        "epoll_wait",
        "select",
        "futex_wait",
        "futex_abstimed_wait_common",
        "lll_lock_wait",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "pthread_mutex_lock",
        "syscall",
    ];
    let name = func.trim_start_matches('_');
    let name = name.split('@').next().unwrap_or(name);
    WAITS.contains(&name)
}

/// NCCL's functions: its API and its internals share the prefix.
fn is_nccl(func: &str) -> bool {
    func.starts_with("nccl")
}

/// The loops of NCCL's own threads (proxy progress and service, IB async events, RAS).
fn is_nccl_service(func: &str) -> bool {
    is_nccl(func)
        && ["Progress", "Service", "Thread", "Async"]
            .iter()
            .any(|w| func.contains(w))
}

impl NativeStack {
    /// Reads frame `number` (`#N`) calling `func`.
    pub fn learn(&mut self, number: u32, func: &str, frame: impl FnOnce() -> Frame) {
        if number == 0 {
            self.finish_thread();
            self.cuda_call = None;
            self.waiting = true;
        }
        let cuda = self.cuda_call.is_none() && is_cuda_call(func);
        let nccl = self.waiting && number > 0 && is_nccl(func) && !is_nccl_service(func);
        self.nccl_service |= is_nccl_service(func);
        self.waiting &= is_wait(func);
        if !(cuda || nccl) {
            if self.stuck_watchdog.is_none() && is_watchdog(func) {
                self.stuck_watchdog = self.cuda_call.clone();
            }
            return;
        }
        let f = frame();
        if nccl {
            self.nccl_frame = Some(f.clone());
        }
        if cuda {
            self.cuda_call = Some(f);
        }
    }

    /// Ends the reading of a thread: its NCCL frame counts if it was no service thread.
    fn finish_thread(&mut self) {
        let frame = self.nccl_frame.take();
        if !std::mem::take(&mut self.nccl_service) && self.waits_in_nccl.is_none() {
            self.waits_in_nccl = frame;
        }
    }

    /// The NCCL frame of the first thread that waits inside NCCL's own code, the thread being
    /// read included.
    pub fn waits_in_nccl(&self) -> Option<&Frame> {
        let pending = self.nccl_frame.as_ref().filter(|_| !self.nccl_service);
        self.waits_in_nccl.as_ref().or(pending)
    }

    pub fn heap_bytes(&self) -> usize {
        [
            &self.cuda_call,
            &self.stuck_watchdog,
            &self.nccl_frame,
            &self.waits_in_nccl,
        ]
        .iter()
        .filter_map(|f| f.as_ref())
        .map(|f| memsize::block(f.text.len()))
        .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(frames: &[(u32, &str)]) -> NativeStack {
        let mut s = NativeStack::default();
        for (i, (n, func)) in frames.iter().enumerate() {
            s.learn(*n, func, || Frame {
                seq: i as u64,
                line_no: i as u64,
                ts_ms: None,
                text: format!("#{n} {func} ()").into(),
            });
        }
        s
    }

    #[test]
    fn a_watchdog_thread_inside_a_cuda_call_is_stuck_at_that_call() {
        let s = read(&[
            (0, "??"),
            (1, "cudaGetLastError"),
            (2, "c10d::ProcessGroupNCCL::WorkNCCL::isCompleted"),
            (3, "c10d::ProcessGroupNCCL::workCleanupLoop"),
            (4, "start_thread"),
        ]);
        assert_eq!(s.stuck_watchdog.unwrap().seq, 1);
    }

    #[test]
    fn a_watchdog_thread_outside_cuda_and_a_cuda_call_on_another_thread_are_not() {
        let s = read(&[
            (0, "pthread_cond_timedwait"),
            (1, "c10d::ProcessGroupNCCL::ncclCommWatchdog"),
            (0, "cudaStreamSynchronize"),
            (1, "at::native::copy_"),
            (2, "start_thread"),
        ]);
        assert!(s.stuck_watchdog.is_none());
    }

    #[test]
    fn a_thread_spinning_inside_nccls_enqueue_waits_in_nccl() {
        let s = read(&[
            (0, "__sched_yield"),
            (1, "ncclLocalOpAppend"),
            (2, "SaveProxy"),
            (3, "ncclProxySaveOp"),
        ]);
        assert_eq!(s.waits_in_nccl().unwrap().seq, 1);
    }

    #[test]
    fn nccls_own_service_threads_and_busy_threads_do_not() {
        let s = read(&[
            (0, "sched_yield"),
            (1, "ncclProxyProgress"),
            (2, "start_thread"),
            (0, "poll"),
            (1, "ncclProxyServiceUDS"),
            (0, "ncclStrToCpuset"),
            (1, "ncclCommInitRank"),
            (0, "pthread_cond_wait@@GLIBC_2.3.2"),
            (1, "ncclIbAsyncThreadMain"),
        ]);
        assert!(s.waits_in_nccl().is_none());
        let s = read(&[
            (0, "sched_yield"),
            (1, "ncclGroupEnd"),
            (2, "ncclProxyProgress"),
        ]);
        assert!(s.waits_in_nccl().is_none());
    }

    #[test]
    fn cuda_api_names_are_told_from_other_functions() {
        assert!(is_cuda_call("cudaEventQuery"));
        assert!(is_cuda_call("cuStreamSynchronize"));
        assert!(!is_cuda_call("cudnnConvolutionForward"));
        assert!(!is_cuda_call("curl_easy_perform"));
        assert!(is_watchdog("c10d::ProcessGroupNCCL::Watchdog::runLoop"));
        assert!(!is_watchdog("c10d::ProcessGroupGloo::runLoop"));
    }
}
