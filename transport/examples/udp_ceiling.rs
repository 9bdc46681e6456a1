//! Raw UDP throughput between 127.0.0.2 and 127.0.0.3: plain, mmsg, GSO+GRO.
//!
//! `cargo run --release -p roce-transport --example udp_ceiling -- [runs] [seconds] [payload]`
//! (defaults: 5 runs of 1 s, 4128-byte datagrams = a 4 KiB RoCE packet).

use roce_transport::ceiling::{measure, summarize, CeilingMode, CeilingSummary};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(5);
    let secs: f64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let payload: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4128);
    let src = "127.0.0.2:0".parse().expect("address");
    let dst = "127.0.0.3:0".parse().expect("address");
    println!("UDP ceiling 127.0.0.2 -> 127.0.0.3, payload {payload} B, {runs} runs x {secs} s");
    println!(
        "{:<8} {:>8} {:>8} {:>8} {:>7}  (GB/s received)",
        "mode", "min", "median", "max", "loss"
    );
    let mut sums: Vec<CeilingSummary> = Vec::new();
    for mode in CeilingMode::ALL {
        let mut rs = Vec::new();
        for _ in 0..runs {
            match measure(src, dst, mode, payload, Duration::from_secs_f64(secs)) {
                Ok(r) => rs.push(r),
                Err(e) => eprintln!("{}: {e}", mode.name()),
            }
        }
        if let Some(s) = summarize(&rs) {
            println!(
                "{:<8} {:>8.3} {:>8.3} {:>8.3} {:>6.1}%",
                mode.name(),
                s.min,
                s.median,
                s.max,
                s.loss * 100.0
            );
            sums.push(s);
        }
    }
    if let Some(base) = sums.first() {
        for s in &sums[1..] {
            println!(
                "median {} / {} = {:.2}x",
                s.mode.name(),
                base.mode.name(),
                s.median / base.median
            );
        }
    }
}
