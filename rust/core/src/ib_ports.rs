//! Which InfiniBand device and port a port-state line of an `ibstat`, `ibstatus` or
//! `ibv_devinfo` capture belongs to. The tools print the device once, in a header above its
//! ports (`CA 'mlx5_2'`, `Infiniband device 'mlx5_2' port 1 status:`, `hca_id: mlx5_2`), and
//! the port in its own line (`Port 1:`, `port: 1`), so the state line alone names neither:
//! they are read back from the lines printed before it.

use crate::digits::is_whole_number;

/// How far above a state line its device's header may be (a device's block in `ibv_devinfo`
/// is about twenty lines).
pub const LOOK_BACK_LINES: usize = 32;

/// The device and port of the state line that follows `before` (messages, oldest first), as
/// the facts `ib_dev` and `ib_port`; the nearest header above the line wins.
pub fn device_and_port<'a>(
    before: impl DoubleEndedIterator<Item = &'a str>,
) -> Vec<(String, String)> {
    let mut port: Option<&str> = None;
    for msg in before.rev().take(LOOK_BACK_LINES) {
        let msg = msg.trim();
        if let Some((dev, header_port)) = device_header(msg) {
            let mut facts = vec![("ib_dev".to_string(), dev.to_string())];
            if let Some(p) = header_port.or(port) {
                facts.push(("ib_port".to_string(), p.to_string()));
            }
            return facts;
        }
        if port.is_none() {
            port = port_line(msg);
        }
    }
    Vec::new()
}

/// `CA 'mlx5_2'` (ibstat), `Infiniband device 'mlx5_2' port 1 status:` (ibstatus),
/// `hca_id: mlx5_2` (ibv_devinfo): the device, and the port where the header names it.
fn device_header(msg: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = msg.strip_prefix("CA '") {
        return Some((rest.strip_suffix('\'')?, None));
    }
    if let Some(rest) = msg.strip_prefix("Infiniband device '") {
        let (dev, rest) = rest.split_once("' port ")?;
        let port = rest.strip_suffix(" status:")?;
        return Some((dev, Some(port).filter(|p| is_whole_number(p))));
    }
    let dev = msg.strip_prefix("hca_id:")?.trim();
    (!dev.is_empty() && !dev.contains(char::is_whitespace)).then_some((dev, None))
}

/// `Port 1:` (ibstat) or `port: 1` (ibv_devinfo).
fn port_line(msg: &str) -> Option<&str> {
    let n = match msg.strip_prefix("Port ") {
        Some(rest) => rest.strip_suffix(':')?,
        None => msg.strip_prefix("port:")?.trim(),
    };
    is_whole_number(n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::device_and_port;
    use crate::correlate::testkit::{diagnose_files, root_line};

    fn facts(text: &str) -> Vec<(String, String)> {
        device_and_port(text.lines())
    }

    fn pair(dev: &str, port: &str) -> Vec<(String, String)> {
        vec![
            ("ib_dev".to_string(), dev.to_string()),
            ("ib_port".to_string(), port.to_string()),
        ]
    }

    #[test]
    fn ibstat_names_the_ca_above_its_port() {
        let text = "CA 'mlx5_1'\n\tCA type: MT4123\n\tPort 1:\n\t\tState: Active\n\
                    CA 'mlx5_2'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:";
        assert_eq!(facts(text), pair("mlx5_2", "1"));
    }

    #[test]
    fn ibstatus_names_both_in_its_header() {
        let text = "Infiniband device 'mlx5_3' port 1 status:\n\tdefault gid:\t fe80::1\n\tbase lid:\t 0x5";
        assert_eq!(facts(text), pair("mlx5_3", "1"));
    }

    #[test]
    fn ibv_devinfo_names_the_hca_and_the_port_line() {
        let text = "hca_id:\tmlx5_0\n\ttransport:\t\t\tInfiniBand (0)\n\t\tport:\t1";
        assert_eq!(facts(text), pair("mlx5_0", "1"));
    }

    const NODE1: &str = "\
node-1:2211:2211 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/IB ; OOB ib0:10.3.0.11<0>
node-1:2211:2290 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.3.0.12<51820> with error 12, opcode 1, len 0, vendor err 129 (Send) hca mlx5_2
";
    const NODE2: &str = "\
node-2:3310:3310 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_2:1/IB ; OOB ib0:10.3.0.12<0>
node-2:3310:3388 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.3.0.11<44102> with error 12, opcode 0, len 0, vendor err 129 (Recv) hca mlx5_2
";

    fn ibstat(dev: &str) -> String {
        format!("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\nCA '{dev}'\n\tPort 1:\n\t\tState: Down\n\t\tPhysical state: Polling\n")
    }

    /// The two hosts' failing logs, with node-2's `ibstat` showing `dev`'s port down.
    fn diagnose_with_port_down(dev: &str) -> Vec<crate::Diagnosis> {
        let capture = ibstat(dev);
        diagnose_files(&[
            ("job/node-1.log", NODE1),
            ("job/node-2.log", NODE2),
            ("job/node-2.ibstat.txt", &capture),
        ])
    }

    #[test]
    fn a_down_port_the_job_uses_is_the_root_on_the_host_its_file_names() {
        let d = diagnose_with_port_down("mlx5_2");
        assert_eq!(root_line(&d), "\t\tState: Down");
        let j = &d[0].json;
        assert_eq!(j["cause_signature"]["id"], "ib_port_not_active");
        assert_eq!(j["facts"]["ib_dev"], "mlx5_2");
        assert_eq!(j["root_cause"]["host"], "node-2");
    }

    #[test]
    fn a_down_port_no_process_uses_is_not_the_fault() {
        let d = diagnose_with_port_down("mlx5_4");
        assert_ne!(d[0].json["cause_signature"]["id"], "ib_port_not_active");
    }

    #[test]
    fn a_down_port_beside_a_job_that_worked_is_no_diagnosis() {
        let capture = ibstat("mlx5_2");
        let ok =
            "node-2:3310:3310 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.3.0.12<0>\n";
        let d = diagnose_files(&[("job/node-2.log", ok), ("job/node-2.ibstat.txt", &capture)]);
        assert!(d.is_empty());
    }

    #[test]
    fn no_header_in_view_names_nothing() {
        assert!(facts("\tPort 1:\n\t\tRate: 200").is_empty());
    }
}
