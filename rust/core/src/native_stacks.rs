//! Native stack dumps printed into a log (gdb's `bt` and `thread apply all bt`, pstack): per
//! process, whether ProcessGroupNCCL's watchdog thread was inside a CUDA call when the stack
//! was taken. That thread polls the CUDA events of every collective; blocked in the CUDA
//! runtime or driver (an NCCL kernel that waits for a dead peer holds the device), it can
//! neither time the collective out nor abort it, so the job hangs with no failure line
//! (pytorch #101463: `cudaGetLastError` under `WorkNCCL::isCompleted` under
//! `workCleanupLoop`). `correlate` opens the finding `watchdog_stuck_in_cuda` on the CUDA frame.
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

impl NativeStack {
    /// Reads frame `number` (`#N`) calling `func`.
    pub fn learn(&mut self, number: u32, func: &str, frame: impl FnOnce() -> Frame) {
        if number == 0 {
            self.cuda_call = None;
        }
        if self.cuda_call.is_none() && is_cuda_call(func) {
            self.cuda_call = Some(frame());
        } else if self.stuck_watchdog.is_none() && is_watchdog(func) {
            self.stuck_watchdog = self.cuda_call.clone();
        }
    }

    pub fn heap_bytes(&self) -> usize {
        [&self.cuda_call, &self.stuck_watchdog]
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
    fn cuda_api_names_are_told_from_other_functions() {
        assert!(is_cuda_call("cudaEventQuery"));
        assert!(is_cuda_call("cuStreamSynchronize"));
        assert!(!is_cuda_call("cudnnConvolutionForward"));
        assert!(!is_cuda_call("curl_easy_perform"));
        assert!(is_watchdog("c10d::ProcessGroupNCCL::Watchdog::runLoop"));
        assert!(!is_watchdog("c10d::ProcessGroupGloo::runLoop"));
    }
}
