//! A process that printed a `cause` signature is a suspect, weighted by the signature. Its
//! line is the strongest cause it printed; between equal ones, the first occurrence; but the
//! text after PyTorch's `Last error:` comes before them all, as in `symptoms`, unless NCCL's
//! own line with that text is in view (WSL #12467: only the text; the generated `shm_full`
//! fleet: both, and the failed extend before them). A cause the process recovered from
//! (`cleared_by`) is none, and so is a fault only between hosts (loopback chosen) where the
//! lines name one host and another cause is in view (humannerf#87: NCCL on WSL using `lo`,
//! its topology detection failing).

use crate::catalog::{HostScope, Role};
use crate::correlate::board::Board;
use crate::correlate::rules::Scope;
use crate::correlate::view::{View, Who};
use std::collections::HashSet;

/// Whom a cause line is about: the peer it names when the catalog says the fault is there
/// (`blames = "peer"`: the peer refused, timed out or cannot be routed to), else its subject.
fn culprit(v: &View, h: &crate::job::Hit, blames_peer: bool) -> Who {
    if blames_peer {
        if let Some(&peer) = v.named(h).first() {
            return peer;
        }
    }
    v.subject(h)
}

/// The hits whose text follows `Last error:` and leads their process's causes: those whose
/// message the process did not also print in a line of its own (NCCL's WARN, which the text
/// repeats; its file may be read after this one). One pass over the scope, and none when no
/// hit follows `Last error:`.
fn leading_last_errors(v: &View, scope: &Scope) -> HashSet<usize> {
    let texts: Vec<usize> = scope
        .hits
        .iter()
        .copied()
        .filter(|&i| v.hit(i).last_error_text)
        .collect();
    if texts.is_empty() {
        return HashSet::new();
    }
    let message = |k: usize| super::error_chain::message(v, k);
    let printers: HashSet<Who> = texts.iter().map(|&i| v.printer(v.hit(i))).collect();
    let printed: HashSet<(Who, &str)> = scope
        .hits
        .iter()
        .copied()
        .filter(|&k| !v.hit(k).last_error_text && printers.contains(&v.printer(v.hit(k))))
        .map(|k| (v.printer(v.hit(k)), message(k)))
        .collect();
    texts
        .into_iter()
        .filter(|&i| !printed.contains(&(v.printer(v.hit(i)), message(i))))
        .collect()
}

/// Whether the incident holds a cause that is a fault wherever it is printed, on a line of
/// its own, while its lines name at most one host: a cause that is a fault only between hosts
/// (loopback or a link-local address chosen, a provider missing) is then no suspect. Nothing
/// in view shows a second host it could fail to reach, and the other cause is a failure in
/// its own right. (A line both read as, a Gloo peer refused at a loopback address, keeps the
/// narrower reading.) `causes`: the incident's cause hits its processes did not recover from.
fn between_hosts_unshown(v: &View, causes: &[usize]) -> bool {
    if v.job.hosts.len() >= 2 {
        return false;
    }
    let scoped = || causes.iter().map(|&i| (v.hit(i).seq, host_scope(v, i)));
    let between: HashSet<u64> = scoped()
        .filter(|(_, scope)| *scope != HostScope::Any)
        .map(|(seq, _)| seq)
        .collect();
    !between.is_empty()
        && scoped().any(|(seq, scope)| scope == HostScope::Any && !between.contains(&seq))
}

fn host_scope(v: &View, i: usize) -> HostScope {
    v.sig(v.hit(i)).map_or(HostScope::Any, |s| s.host_scope)
}

/// Whether cause hit `a` came before cause hit `b` and the catalog says `a`'s signature
/// explains `b`'s: then the process's failure starts at `a`, whatever the weights (DeepEP's
/// timeout, then the CUDA error its kernel's trap leaves; NVSHMEM's heap failure, then the
/// CUDA error of the call that needed the heap).
fn explains_earlier(v: &View, a: usize, b: usize) -> bool {
    let (ha, hb) = (v.hit(a), v.hit(b));
    let explains = v
        .sig(ha)
        .zip(hb.sig)
        .is_some_and(|(s, b_sig)| s.explains_idx.contains(&b_sig));
    explains && v.order_key(a) < v.order_key(b)
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    let leading = leading_last_errors(v, scope);
    let causes: Vec<usize> = scope
        .hits
        .iter()
        .copied()
        .filter(|&i| {
            let h = v.hit(i);
            v.sig(h).is_some_and(|s| s.role == Role::Cause)
                && !crate::correlate::recovered(v.job, v.cat, h)
        })
        .collect();
    let skip_between_hosts = between_hosts_unshown(v, &causes);
    for i in causes {
        let h = v.hit(i);
        let Some(sig) = v.sig(h) else { continue };
        if skip_between_hosts && sig.host_scope != HostScope::Any {
            continue;
        }
        let who = culprit(v, h, sig.blames_peer);
        let host = v.who_host(who);
        let c = board.cand(who, host);
        // The process's line: the text after `Last error:` first (NCCL's own account of the
        // failure the error block's category line only names) unless NCCL's line with that
        // text is in view, then the strongest cause, the first of equals. Its weight: the
        // strongest cause it printed.
        let better = match c.cause {
            None => true,
            Some(b) if explains_earlier(v, i, b) => true,
            Some(b) if explains_earlier(v, b, i) => false,
            Some(b) => {
                let held = v.hit(b);
                let bw = v.sig(held).map_or(0, |s| s.weight);
                let (ours, theirs) = (
                    (leading.contains(&i), sig.weight),
                    (leading.contains(&b), bw),
                );
                ours > theirs || (ours == theirs && v.order_key(i) < v.order_key(b))
            }
        };
        if better {
            c.cause = Some(i);
            c.ts = v.time_or_bound(i);
        }
        c.cause_weight = c.cause_weight.max(sig.weight);
    }
    let with_cause: Vec<_> = board
        .cands
        .values()
        .filter_map(|c| c.cause.map(|i| (c.who, c.host, i, c.cause_weight)))
        .collect();
    for (who, host, i, weight) in with_cause {
        let id = v.sig(v.hit(i)).map_or("", |s| s.id.as_str());
        board.add(
            who,
            host,
            "cause_signature",
            weight as i32,
            format!("printed a cause: {id}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    #[test]
    fn an_earlier_cause_that_explains_a_stronger_one_leads_its_process() {
        let timeout =
            "DeepEP dispatch forwarder timeout (RDMA meta), channel: 2, RDMA: 0, nvl: 7, \
            src RDMA lane: 1, dst NVL: 1, meta: 0, 0, 0, 0";
        let trap = "RuntimeError: CUDA error: unspecified launch failure";
        assert_eq!(
            root_line(&diagnose(&format!("{timeout}\n{trap}\n"))),
            timeout
        );
        // The other way round nothing is explained: the CUDA error came first.
        assert_eq!(root_line(&diagnose(&format!("{trap}\n{timeout}\n"))), trap);
    }

    const LOOPBACK: &str = "desk:1582:1582 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>";
    const TOPOLOGY: &str = "desk:1582:1705 [0] graph/xml.cc:332 NCCL WARN Could not find real \
        path of /sys/class/pci_bus/0000:01/../../0000:01:00.0";

    #[test]
    fn a_fault_between_hosts_is_no_suspect_where_one_host_is_in_view() {
        let init = "desk:1582:1582 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>\n\
            desk:1582:1582 [0] NCCL INFO Using network Socket\n";
        let trace = "desk:1582:1705 [0] NCCL INFO graph/xml.cc:469 -> 2";
        let d = diagnose(&format!("{LOOPBACK}\n{init}\n{TOPOLOGY}\n{trace}\n"));
        assert_eq!(root_line(&d), TOPOLOGY);
    }
}
