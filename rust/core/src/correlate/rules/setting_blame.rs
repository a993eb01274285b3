//! Some failures are the fault of a setting the process reported earlier: a search graph
//! injected with `NCCL_GRAPH_FILE` names devices this job does not have (`XML Import Channel :
//! dev 1 not found`), a network device outside PCI (USB) leaves its NIC node without a bus id
//! (`Attribute busid of node nic not found`). A cause lists such settings in `blames_setting`;
//! when the incident's cause has one and a process reported it, the line that reported it
//! becomes the root line (+90) and the failure stays the first warning. The printer's own
//! setting is preferred, else the first process that showed it.

use crate::catalog::Role;
use crate::correlate::board::{Board, LineRef};
use crate::correlate::rules::Scope;
use crate::correlate::view::View;
use crate::job::CONTEXT_FIELDS;
use crate::report::OddContext;

/// (cause hit, setting field) for each cause hit of the incident that blames a setting.
fn blamed_settings(v: &View, scope: &Scope) -> Vec<(usize, &'static str)> {
    let mut out = Vec::new();
    for &i in scope.hits {
        let Some(sig) = v.sig(v.hit(i)) else { continue };
        if sig.role != Role::Cause {
            continue;
        }
        for f in &sig.blames_setting {
            if let Some(&ff) = CONTEXT_FIELDS.iter().find(|x| *x == f) {
                out.push((i, ff));
            }
        }
    }
    out
}

/// The process whose report of `field` stands for the setting: the printer's own, else the
/// first process that showed it.
fn reporter(v: &View, field: &'static str, printer_src: u32) -> Option<u32> {
    if v.job.context.contains_key(&(field, printer_src)) {
        return Some(printer_src);
    }
    v.job
        .context
        .iter()
        .filter(|((f, _), _)| *f == field)
        .min_by_key(|(_, obs)| (obs.seq, obs.source))
        .map(|((_, src), _)| *src)
}

pub fn apply(v: &View, scope: &Scope, board: &mut Board) {
    for (i, field) in blamed_settings(v, scope) {
        let h = v.hit(i);
        let Some(src) = reporter(v, field, h.source) else {
            continue;
        };
        let value = v.job.context[&(field, src)].value.clone();
        let host = v.host_of(src);
        scope.notes.borrow_mut().push(OddContext::new(
            field,
            host.map(|x| v.host_name(x)),
            &value,
            "this setting is what the failure points at",
        ));
        let who = v.process(src);
        let c = board.cand(who, host);
        if c.config.is_none() {
            c.config = Some((LineRef::Context(src, field), h.sig));
            c.ts = v.corrected(src, v.job.context[&(field, src)].ts_ms);
        }
        let sig_id = v.sig(h).map_or("", |s| s.id.as_str());
        let why = format!("{field} = {value} is in effect and {sig_id} is a failure it causes");
        board.add(who, host, "setting_blame", 90, why);
        return;
    }
}

#[cfg(test)]
mod tests {
    use crate::correlate::testkit::{diagnose, root_line};

    const GRAPH_SET: &str =
        "vm-a7:9120:9160 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to /etc/nccl/g8.xml";
    const IMPORT: &str =
        "vm-a7:9120:9160 [0] graph/search.cc:702 NCCL WARN XML Import Channel : dev 3 not found.";

    #[test]
    fn an_injected_graph_is_the_root_of_its_import_failure() {
        let d = diagnose(&format!(
            "vm-a7:9120:9120 [0] NCCL INFO Bootstrap : Using eth0:10.2.0.7<0>\n{GRAPH_SET}\n\
             {IMPORT}\nvm-a7:9120:9160 [0] NCCL INFO graph/search.cc:731 -> 2\n"
        ));
        assert_eq!(root_line(&d), GRAPH_SET);
        assert!(d[0].json.to_string().contains("setting_blame"));
    }

    #[test]
    fn without_the_setting_the_import_failure_stays_the_root() {
        let d = diagnose(&format!(
            "{IMPORT}\nvm-a7:9120:9160 [0] NCCL INFO graph/search.cc:731 -> 2\n"
        ));
        assert_eq!(root_line(&d), IMPORT);
    }

    #[test]
    fn a_setting_alone_is_no_diagnosis() {
        let d = diagnose(&format!(
            "{GRAPH_SET}\nvm-a7:9120:9160 [0] NCCL INFO comm 0x55d0 rank 0 nranks 1 cudaDev 0 \
             busId 100000 - Init COMPLETE\n"
        ));
        assert!(d.is_empty());
    }

    #[test]
    fn a_nic_outside_pci_is_the_root_of_its_missing_bus_id() {
        let usb = "ws-12:330:371 [0] NCCL INFO Topology detection: network path \
            /sys/devices/pci0000:00/0000:00:14.0/usb2/2-3/2-3:1.0 is not a PCI device (usb). \
            Attaching to first CPU";
        let warn =
            "ws-12:330:371 [0] graph/xml.h:88 NCCL WARN Attribute busid of node nic not found";
        let d = diagnose(&format!(
            "{usb}\n{warn}\nws-12:330:371 [0] NCCL INFO graph/xml.cc:640 -> 3\n"
        ));
        assert_eq!(root_line(&d), usb);
    }
}
