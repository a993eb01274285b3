//! Times the Flight Recorder reader and analysis on one dump file, read N times as N ranks:
//! `cargo run --release --example fr_profile -- DUMP [N]`.
use std::time::Instant;

use rankwatch_core::flight_recorder as fr;
use rankwatch_core::flight_recorder_analysis as fra;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("a dump file");
    let n: usize = args.next().map_or(256, |s| s.parse().expect("a count"));
    let data = std::fs::read(path).expect("readable");
    let t = Instant::now();
    let mut nodes = 0;
    for _ in 0..n {
        nodes += fr::parse(&data).expect("a clean pickle").nodes.len();
    }
    let parse = t.elapsed().as_secs_f64() / n as f64;
    let doc = fr::parse(&data).expect("a clean pickle");
    let t = Instant::now();
    let mut kept = Vec::with_capacity(n);
    for _ in 0..n {
        kept.push(fr::check(&doc, None, Some(data.len() + 100_000)).expect("clean entries"));
    }
    let check = t.elapsed().as_secs_f64() / n as f64;
    let inputs: Vec<fra::Input<'_>> = kept
        .iter()
        .enumerate()
        .map(|(r, dump)| fra::Input {
            rank: r as i64,
            dump,
        })
        .collect();
    let t = Instant::now();
    let a = fra::analyze(&inputs, &std::collections::HashMap::new());
    let analyze = t.elapsed().as_secs_f64();
    println!(
        "{} bytes, {} nodes: parse {:.2} ms, check {:.2} ms a dump; analyze {n} dumps {:.1} ms ({} findings); {} bytes held a dump",
        data.len(),
        nodes / n,
        parse * 1e3,
        check * 1e3,
        analyze * 1e3,
        a.findings.len(),
        kept[0].heap_bytes()
    );
}
