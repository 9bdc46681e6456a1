//! Ad-hoc workload runner for debugging: wl OPS DROP DUP REORDER CORRUPT SEED [mix] [mtu]
use roce_verbs_api::workload::{self, OpKind, WorkloadConfig};
use roce_verbs_api::{FaultConfig, PathMtu};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let f = |i: usize, d: f64| a.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let faults = FaultConfig {
        drop: f(2, 0.0),
        duplicate: f(3, 0.0),
        reorder: f(4, 0.0),
        corrupt: f(5, 0.0),
        ..FaultConfig::default()
    };
    let mix = a.get(7).map(|m| OpKind::parse_mix(m).unwrap()).unwrap_or(OpKind::ALL.to_vec());
    let mtu = PathMtu::from_bytes(f(8, 1024.0) as usize).unwrap();
    let mut cfg = WorkloadConfig {
        ops: f(1, 1000.0) as u64,
        seed: f(6, 1.0) as u64,
        faults,
        mix,
        audit_icrc: true,
        ..WorkloadConfig::default().mtu(mtu)
    };
    if let Some(d) = a.get(9).and_then(|s| s.parse().ok()) {
        cfg.connect.max_rd_atomic = d;
        cfg.connect.max_dest_rd_atomic = d;
    }
    if let Some(w) = a.get(10).and_then(|s| s.parse().ok()) {
        cfg.window = w;
    }
    let r = workload::run(cfg).unwrap();
    println!("ok={} completed {}/{} mism {} order {} compl {:?} stalled {:?} events {} vt {:?} wall {:?}", r.ok(), r.ops_completed, r.ops_requested, r.mismatches, r.order_errors, r.completions.values().collect::<Vec<_>>(), r.stalled, r.events, r.virtual_time, r.wall_time);
    for p in &r.problems {
        println!("  {p}");
    }
    println!("{:?}\naudit {:?}", r.fabric, r.icrc_audit);
    for (n, c) in &r.counters {
        println!("{n}: {:?}", c.iter().filter(|(_, v)| *v != 0).collect::<Vec<_>>());
    }
}
