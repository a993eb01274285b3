//! Where a process's main thread was, from the last stack dump its log shows (py-spy,
//! faulthandler): in a collective call, or elsewhere, and then the innermost frame of the
//! program's own code (not the standard library's or torch's), which says what it was busy
//! with (a data iterator, a checkpoint write, a lock).

use crate::job::{Stack, StackFrame};

pub const STACK_FRAME_SIGNATURE: &str = "py_stack_dump_frame";

/// Collective calls of torch.distributed (and wrappers that keep their names), and the calls
/// of its set-up that wait for every peer the same way (a rendezvous, a store-based barrier,
/// a new group; symmetric memory's `rendezvous` exchanges handles with every rank).
const COLLECTIVE_CALLS: &[&str] = &[
    "rendezvous",
    "_store_based_barrier",
    "init_process_group",
    "new_group",
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_into_tensor",
    "_all_gather_base",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "_reduce_scatter_base",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "send",
    "recv",
    "batch_isend_irecv",
    "wait",
];

/// Standard-library modules a stuck thread sits in while the program's code waits on them.
const STDLIB_FILES: &[&str] = &[
    "threading.py",
    "queue.py",
    "selectors.py",
    "socket.py",
    "subprocess.py",
    "contextlib.py",
    "functools.py",
    "ssl.py",
    "runpy.py",
    "tempfile.py",
    "shutil.py",
    "os.py",
    "pickle.py",
    "copy.py",
    "weakref.py",
];
const STDLIB_DIRS: &[&str] = &[
    "multiprocessing/",
    "concurrent/",
    "asyncio/",
    "importlib/",
    "logging/",
    "json/",
    "http/",
    "urllib/",
    "collections/",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// In a collective call: the index of that frame.
    Collective(usize),
    /// Elsewhere: the index of the innermost frame of the program's own code.
    Elsewhere(usize),
}

fn is_collective(f: &StackFrame) -> bool {
    let in_dist = f.file.contains("distributed") || f.file.contains("c10d");
    in_dist && COLLECTIVE_CALLS.contains(&f.func.as_str())
}

/// Frames of the standard library or of torch itself: the program's code called them.
fn is_library(f: &StackFrame) -> bool {
    let file = f.file.replace('\\', "/");
    let base = file.rsplit('/').next().unwrap_or(&file);
    let stdlib_path = file.contains("/lib/python3") && !file.contains("-packages/");
    file.starts_with('<')
        || stdlib_path
        || (!file.contains('/') && STDLIB_FILES.contains(&base))
        || STDLIB_DIRS.iter().any(|d| file.starts_with(d))
        || file.starts_with("torch/")
        || file.contains("/torch/")
}

pub fn place(stack: &Stack) -> Option<Place> {
    if stack.frames.is_empty() {
        return None;
    }
    if let Some(i) = stack.frames.iter().position(is_collective) {
        return Some(Place::Collective(i));
    }
    let own = stack.frames.iter().position(|f| !is_library(f));
    Some(Place::Elsewhere(own.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(frames: &[(&str, &str)]) -> Stack {
        Stack {
            frames: frames
                .iter()
                .enumerate()
                .map(|(i, (func, file))| StackFrame {
                    func: func.to_string(),
                    file: file.to_string(),
                    seq: i as u64,
                    line_no: i as u64,
                    text: format!("    {func} ({file}:1)"),
                })
                .collect(),
            ..Stack::default()
        }
    }

    #[test]
    fn a_data_iterator_under_queue_get_is_the_programs_frame() {
        let s = stack(&[
            ("wait", "threading.py"),
            ("get", "queue.py"),
            ("__next__", "fairseq/data/iterators.py"),
            ("train", "fairseq_cli/train.py"),
        ]);
        assert_eq!(place(&s), Some(Place::Elsewhere(2)));
    }

    #[test]
    fn a_rendezvous_of_torch_distributed_waits_like_a_collective() {
        let s = stack(&[
            (
                "rendezvous",
                "torch/distributed/_symmetric_memory/__init__.py",
            ),
            ("_alloc_buffer", "mylib/comm/symm.py"),
            ("warmup", "runner/base_runner.py"),
        ]);
        assert_eq!(place(&s), Some(Place::Collective(0)));
        let own = stack(&[("rendezvous", "myapp/meeting.py"), ("main", "myapp/run.py")]);
        assert_eq!(place(&own), Some(Place::Elsewhere(0)));
    }

    #[test]
    fn a_thread_in_all_reduce_is_in_a_collective() {
        let s = stack(&[
            ("all_reduce", "torch/distributed/distributed_c10d.py"),
            ("wrapper", "torch/distributed/c10d_logger.py"),
            ("step", "/home/u/train.py"),
        ]);
        assert_eq!(place(&s), Some(Place::Collective(0)));
        let full = stack(&[
            ("wait", "/usr/lib/python3.10/threading.py"),
            (
                "_next_data",
                "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py",
            ),
            ("run", "/home/u/train.py"),
        ]);
        assert_eq!(place(&full), Some(Place::Elsewhere(2)));
    }
}
