//! Fix and verify texts rendered with the diagnosis's own facts. Catalog texts may hold
//! placeholders `{name}` or `{name|fallback}`; `name` is looked up in the facts of the
//! diagnosis (root-cause host, rank, device, the root line's fields, the interface the rest
//! of the job uses, ...). A placeholder without a value shows its fallback, else `<name>`.

use std::collections::BTreeMap;

pub type Facts = BTreeMap<String, String>;

pub fn render(template: &str, facts: &Facts) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let inner = &after[..close];
        let (name, fallback) = match inner.split_once('|') {
            Some((n, f)) => (n, Some(f)),
            None => (inner, None),
        };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
            out.push('{');
            rest = after;
            continue;
        }
        match (facts.get(name), fallback) {
            (Some(v), _) if !v.is_empty() => out.push_str(v),
            (_, Some(f)) => out.push_str(f),
            _ => {
                out.push('<');
                out.push_str(name);
                out.push('>');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_take_facts_or_fallbacks() {
        let mut f = Facts::new();
        f.insert("host".into(), "node7".into());
        f.insert("good_iface".into(), "eth0".into());
        assert_eq!(
            render("On {host} run export NCCL_SOCKET_IFNAME={good_iface}", &f),
            "On node7 run export NCCL_SOCKET_IFNAME=eth0"
        );
        assert_eq!(
            render("{iface|the interface} on {rank}", &f),
            "the interface on <rank>"
        );
        assert_eq!(render("json {\"a\": 1} stays", &f), "json {\"a\": 1} stays");
        assert_eq!(render("no placeholders", &f), "no placeholders");
    }
}
