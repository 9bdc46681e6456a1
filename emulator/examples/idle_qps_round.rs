//! Cost of one driver round on a device with N idle RC QPs.
//!
//! Creates N RC QPs on one device and moves each to RTS (connected to a
//! peer QPN that never answers, so nothing is sent), then times the round a
//! driver makes when nothing happens: `poll_timeout()`, `handle_timeout(now)`
//! (called every round, due or not) and `poll_transmit(now)` returning
//! nothing. Prints the average nanoseconds per round of each repeat as
//! min / median / max over the repeats.
//!
//! Run: `cargo run --release -p roce-emulator --example idle_qps_round -- 10000`
//! (arguments: number of QPs, default 10000; rounds per repeat, default 2000;
//! repeats, default 9).

mod common;

use roce_emulator::qp_attr::QpCap;
use roce_emulator::{Hca, HcaConfig, Instant, SansIo};
use std::time::Instant as WallClock;

fn device(n: u32) -> Hca {
    let mut hca = Hca::new(HcaConfig::new("roce0", "10.0.0.1".parse().unwrap(), 1));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(1024).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for i in 0..n {
        common::idle_rc_qp(&mut hca, pd, cq, cap, 0x100 + i);
    }
    hca
}

fn main() {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let n = args.first().copied().unwrap_or(10_000) as u32;
    let rounds = args.get(1).copied().unwrap_or(2_000);
    let repeats = args.get(2).copied().unwrap_or(9) as usize;
    let mut hca = device(n);
    let mut now = Instant::from_millis(1);
    let mut per_round: Vec<f64> = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        #[allow(clippy::disallowed_methods)] // a benchmark driver reads the wall clock
        let start = WallClock::now();
        for _ in 0..rounds {
            now += core::time::Duration::from_micros(1);
            let deadline = std::hint::black_box(hca.poll_timeout());
            assert!(deadline.is_none(), "an idle device has no timer");
            hca.handle_timeout(now);
            assert!(hca.poll_transmit(now).is_none(), "an idle device sends nothing");
        }
        per_round.push(start.elapsed().as_nanos() as f64 / rounds as f64);
    }
    per_round.sort_by(|a, b| a.total_cmp(b));
    println!(
        "{n} idle RC QPs: ns per round (poll_timeout + handle_timeout + poll_transmit), \
         {rounds} rounds x {repeats} repeats"
    );
    println!(
        "min {:.0}  median {:.0}  max {:.0}",
        per_round[0],
        per_round[repeats / 2],
        per_round[repeats - 1]
    );
}
