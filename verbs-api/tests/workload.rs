//! The workload engine on small runs: clean, and with every fault.

use roce_verbs_api::workload::{self, OpKind, Report, WorkloadConfig};
use roce_verbs_api::{FaultConfig, PathMtu, WcStatus};

fn show(r: &Report) -> String {
    format!(
        "seed {} ok={} completed {}/{} mismatches {} order {} completions {:?} stalled {:?}\nproblems: {:#?}\nfabric {:?}",
        r.seed,
        r.ok(),
        r.ops_completed,
        r.ops_requested,
        r.mismatches,
        r.order_errors,
        r.completions.values().collect::<Vec<_>>(),
        r.stalled,
        r.problems,
        r.fabric
    )
}

#[test]
fn clean_run_verifies_everything() {
    let r =
        workload::run(WorkloadConfig { ops: 2000, seed: 11, ..WorkloadConfig::default() }).unwrap();
    assert!(r.ok(), "{}", show(&r));
    assert_eq!(r.ops_completed, 2000);
    assert_eq!(r.ops_by_kind.values().sum::<u64>(), 2000);
    for k in OpKind::ALL {
        assert!(r.ops_by_kind.get(&k).copied().unwrap_or(0) > 200, "{k}: {:?}", r.ops_by_kind);
    }
    let sends = r.ops_by_kind[&OpKind::Send];
    // every op has a send completion, every SEND also a receive completion
    assert_eq!(r.completions[&WcStatus::Success.code()].1, 2000 + sends);
    assert_eq!(r.counter_sum("rdma_recvs"), sends);
    assert_eq!(r.counter_sum("icrc_err"), 0);
    assert_eq!(r.counter_sum("completer_retry_err"), 0);
    assert_eq!(r.fabric.dropped(), 0);
}

#[test]
fn faulty_run_verifies_everything() {
    let faults = FaultConfig {
        drop: 0.1,
        duplicate: 0.05,
        reorder: 0.1,
        corrupt: 0.01,
        ..FaultConfig::default()
    };
    let r = workload::run(WorkloadConfig {
        ops: 3000,
        seed: 12,
        faults,
        audit_icrc: true,
        ..WorkloadConfig::default().mtu(PathMtu::Mtu512)
    })
    .unwrap();
    assert!(r.ok(), "{}", show(&r));
    let (_, bad) = r.icrc_audit.unwrap();
    assert_eq!(bad, r.counter_sum("icrc_err"), "{}", show(&r));
    assert!(r.fabric.corrupted > 0 && bad >= r.fabric.corrupted, "{}", show(&r));
    assert!(r.counter_sum("duplicate_request") > 0);
    assert!(r.counter_sum("completer_retry_err") > 0);
}
