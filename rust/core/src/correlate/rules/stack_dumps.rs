//! Stack dumps printed into the logs (py-spy, faulthandler): when some ranks' main threads sit
//! in a collective call and another's is elsewhere, the one elsewhere is what they wait for
//! (+35: more than a rank that kept logging (+30), since its own stack shows it away from the
//! collective; less than a mismatch (+50)). Where no dumped rank is in a collective (only the
//! stuck rank was dumped, as posters often do), each is a weak suspect (+15). Either way the
//! root line is the innermost frame of the program's own code (a data iterator's `__next__`
//! under `queue.get`), with the finding `stuck_outside_collective`. Cases: a 32-rank fairseq
//! job whose rank 0 waits in its data iterator (one py-spy dump, nothing else in view);
//! ranks dumped by faulthandler on a watchdog timeout, all in `all_reduce` but one.
//! Where every dumped process waits in a collective and nothing failed, the job is opened on
//! that frame as `stack_waits_in_collective` (correlate::open_from_tables) and no rank is
//! named: a serving engine's py-spy dump stuck in symmetric memory's `rendezvous` (set 53).

use crate::correlate::board::{Board, LineRef};
use crate::correlate::collectives::who_list;
use crate::correlate::rules::Scope;
use crate::correlate::stacks::{place, Place};
use crate::correlate::view::{View, Who};

const FINDING: &str = "stuck_outside_collective";

pub fn apply(v: &View, _scope: &Scope, board: &mut Board) {
    let Some(finding) = v.cat.index_of(FINDING) else {
        return;
    };
    let mut in_coll: Vec<(Who, String)> = Vec::new();
    let mut elsewhere: Vec<(Who, u32, usize)> = Vec::new();
    for (si, s) in v.job.sources.iter().enumerate() {
        let si = si as u32;
        let (Some(stack), who) = (&s.stack, v.process(si)) else {
            continue;
        };
        match place(stack) {
            Some(Place::Collective(i)) => in_coll.push((who, stack.frames[i].func.clone())),
            Some(Place::Elsewhere(i)) => elsewhere.push((who, si, i)),
            None => {}
        }
    }
    if elsewhere.is_empty() {
        return;
    }
    let waiting: Vec<Who> = in_coll.iter().map(|(w, _)| *w).collect();
    let weight = if in_coll.is_empty() { 15 } else { 35 };
    for (who, src, i) in elsewhere {
        let frame = &v.job.sources[src as usize]
            .stack
            .as_ref()
            .map(|k| &k.frames[i]);
        let Some(frame) = frame else { continue };
        let mut facts = vec![
            ("frame_func".to_string(), frame.func.clone()),
            ("frame_file".to_string(), frame.file.clone()),
        ];
        let why = if let Some((_, call)) = in_coll.first() {
            let note = format!(", while rank(s) {} wait in {call}", who_list(&waiting));
            facts.push(("waiting_note".to_string(), note));
            format!(
                "its stack is in {} ({}) while rank(s) {} wait in {call}",
                frame.func,
                frame.file,
                who_list(&waiting)
            )
        } else {
            format!("its stack dump shows it in {} ({})", frame.func, frame.file)
        };
        let host = v.who_host(who);
        board.state_finding(who, host, LineRef::Frame(src, i), finding, facts);
        board.add(who, host, "stack_dumps", weight, why);
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const ITERATOR: &str = "    __next__ (fairseq/data/iterators.py:648)";

    fn data_wait() -> String {
        format!(
            "Thread 0x7FA6E7C01740 (idle): \"MainThread\"\n    wait (threading.py:302)\n    \
             get (queue.py:170)\n{ITERATOR}\n    train (fairseq_cli/train.py:274)\n"
        )
    }

    #[test]
    fn a_lone_dump_of_a_process_waiting_on_its_data_is_a_diagnosis() {
        let d = diagnose(&data_wait());
        assert_eq!(root_line(&d), ITERATOR);
        assert_eq!(
            d[0].json["cause_signature"]["id"],
            "stuck_outside_collective"
        );
    }

    #[test]
    fn the_rank_whose_stack_is_elsewhere_is_the_root() {
        let in_all_reduce = |r: u32| {
            format!(
                "[rank{r}]:Thread 0x7F00 (most recent call first):\n\
                 [rank{r}]:  File \"/opt/venv/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py\", line 2050 in all_reduce\n\
                 [rank{r}]:  File \"/home/u/train.py\", line 88 in step\n"
            )
        };
        let mut log = in_all_reduce(1) + &in_all_reduce(2);
        log.push_str(
            "[rank0]:Thread 0x7F01 (most recent call first):\n\
             [rank0]:  File \"/usr/lib/python3.10/threading.py\", line 320 in wait\n\
             [rank0]:  File \"/home/u/ckpt.py\", line 41 in save_shard\n\
             [rank0]:  File \"/home/u/train.py\", line 91 in step\n",
        );
        let d = diagnose(&log);
        assert!(
            root_line(&d).contains("ckpt.py\", line 41 in save_shard"),
            "{}",
            root_line(&d)
        );
        assert_eq!(d[0].json["root_cause"]["rank"], 0);
        assert!(d[0].json["cause"]
            .as_str()
            .unwrap()
            .contains("wait in all_reduce"));
    }

    #[test]
    fn stacks_all_in_a_collective_are_where_the_job_hangs() {
        // No dumped rank is elsewhere: none is named, the wait itself is the finding.
        let frame = "    all_reduce (torch/distributed/distributed_c10d.py:2050)";
        let log =
            format!("Thread 0x7F00 (idle): \"MainThread\"\n{frame}\n    step (train.py:88)\n");
        let d = diagnose(&log);
        assert_eq!(d.len(), 1);
        assert_eq!(root_line(&d), frame);
        assert_eq!(d[0].json["signature"]["id"], "stack_waits_in_collective");
        // A header with the thread's OS id (newer py-spy) or none starts the stack as well.
        for header in [
            "Thread 20417 (active+gil): \"MainThread\"",
            "Thread (idle): \"MainThread\"",
        ] {
            let d = diagnose(&format!("{header}\n{frame}\n"));
            assert_eq!(root_line(&d), frame, "{header}");
        }
    }
}
