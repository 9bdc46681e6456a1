//! Bytes of memory per idle RC QP.
//!
//! Creates N RC QPs on one device, moves each to RTS (connected to a peer
//! QPN that never answers, so nothing is sent), and measures the growth of
//! the process's resident set (/proc/self/statm) per QP. Each size is
//! measured in a fresh device; the figure includes the QP context, its
//! send/receive queue storage as allocated at creation, and the device's
//! table entry.
//!
//! Run: `cargo run --release -p roce-emulator --example idle_qp_memory`
//! (Linux only: reads /proc/self/statm.)

mod common;

use roce_emulator::qp_attr::QpCap;
use roce_emulator::{Hca, HcaConfig};

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("needs Linux /proc/self/statm");
    let pages: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4096
}

fn measure(n: u32, depth: u32) -> f64 {
    let mut hca = Hca::new(HcaConfig::new("roce0", "10.0.0.1".parse().unwrap(), 1));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(1024).unwrap();
    let cap = QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let before = rss_bytes();
    let mut qps = Vec::with_capacity(n as usize);
    for i in 0..n {
        let qpn = common::idle_rc_qp(&mut hca, pd, cq, cap, 0x100 + i);
        qps.push(qpn);
    }
    let after = rss_bytes();
    assert_eq!(qps.len(), n as usize);
    std::hint::black_box(&hca);
    (after.saturating_sub(before)) as f64 / f64::from(n)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 4 && args[1] == "--one" {
        // child: one measurement in a fresh process (no allocator reuse)
        let n: u32 = args[2].parse().unwrap();
        let depth: u32 = args[3].parse().unwrap();
        println!("{}", measure(n, depth));
        return;
    }
    let exe = std::env::current_exe().unwrap();
    println!("bytes of resident memory per idle RC QP (RTS, no traffic), 5 fresh processes each");
    println!("{:>8} {:>6} {:>10} {:>10} {:>10}", "QPs", "depth", "min", "median", "max");
    for (n, depth) in [(10_000u32, 16u32), (50_000, 16), (50_000, 256)] {
        let mut v: Vec<f64> = (0..5)
            .map(|_| {
                let out = std::process::Command::new(&exe)
                    .args(["--one", &n.to_string(), &depth.to_string()])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
            })
            .collect();
        v.sort_by(|a, b| a.total_cmp(b));
        println!("{n:>8} {depth:>6} {:>10.0} {:>10.0} {:>10.0}", v[0], v[2], v[4]);
    }
}
