//! The workload engine on small runs: clean, and with every fault.

use roce_sim::FaultConfig;
use roce_verbs_api::{PathMtu, WcStatus};
use roce_workloads::demo::{self as workload, OpKind, WorkloadConfig};

#[test]
fn clean_run_verifies_everything() {
    let r =
        workload::run(WorkloadConfig { ops: 2000, seed: 11, ..WorkloadConfig::default() }).unwrap();
    assert!(r.ok(), "{}", r.failure_summary());
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

/// SEND and WRITE under every fault (READ/atomics under loss hit the core
/// problems in core_findings.rs).
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
        mix: vec![OpKind::Send, OpKind::Write],
        ..WorkloadConfig::default().mtu(PathMtu::Mtu512)
    })
    .unwrap();
    assert!(r.ok(), "{}", r.failure_summary());
    let (_, bad) = r.icrc_audit.unwrap();
    assert_eq!(bad, r.counter_sum("icrc_err"), "{}", r.failure_summary());
    assert!(r.fabric.corrupted > 0 && bad >= r.fabric.corrupted, "{}", r.failure_summary());
    assert!(r.counter_sum("duplicate_request") > 0);
    assert!(r.counter_sum("completer_retry_err") > 0);
}

/// Every kind, with duplicated packets: duplicate READs are answered again
/// from the responder's resources, duplicate atomics return the saved
/// original value (C9-128: executed once), duplicate SENDs consume no
/// second receive.
#[test]
fn duplicates_with_every_kind_are_executed_once() {
    let r = workload::run(WorkloadConfig {
        ops: 3000,
        seed: 13,
        faults: FaultConfig { duplicate: 0.1, ..FaultConfig::default() },
        ..WorkloadConfig::default()
    })
    .unwrap();
    assert!(r.ok(), "{}", r.failure_summary());
    assert!(r.counter_sum("duplicate_request") > 100, "{}", r.failure_summary());
    assert_eq!(r.counter_sum("rdma_recvs"), r.ops_by_kind[&OpKind::Send]);
    assert!(r.ops_by_kind[&OpKind::CmpSwap] > 100 && r.ops_by_kind[&OpKind::FetchAdd] > 100);
}

/// Large messages at every path MTU, no faults.
#[test]
fn every_mtu_and_large_messages() {
    for (i, mtu) in [PathMtu::Mtu256, PathMtu::Mtu2048, PathMtu::Mtu4096].into_iter().enumerate() {
        let r = workload::run(WorkloadConfig {
            ops: 400,
            seed: 20 + i as u64,
            max_size: 20_000,
            qps: 1,
            ..WorkloadConfig::default().mtu(mtu)
        })
        .unwrap();
        assert!(r.ok(), "{mtu:?}: {}", r.failure_summary());
        assert!(r.total_bytes() > 400 * 2000, "{mtu:?}: {}", r.total_bytes());
    }
}

// Core findings first seen as workload failures (moved here from
// verbs-api/tests/core_findings.rs with the engine).

/// 10% random loss only, one READ/atomic in flight per QP
/// (max_rd_atomic 1). Traced (seed 12, window 16, QP 0x12 of roce0 at
/// 134.28 ms virtual): the ATOMIC ACKNOWLEDGE for PSN 0xfffe20 is lost;
/// the responder's ACKs for 0xfffe21, 0xfffe22, 0xfffe25... that follow
/// each trigger an implied NAK (same cascade as above), every one a
/// go-back-N of the whole window and a retry; the resent window is
/// answered again and the cycle repeats until RETRY_EXC_ERR within
/// microseconds. Other streams of the run end with BAD_RESP_ERR on a READ.
/// Fixed by the same started-retry rule as above.
#[test]
fn loss_alone_never_gives_bad_response() {
    use roce_workloads::demo::{self as workload, WorkloadConfig};
    let mut cfg = WorkloadConfig { ops: 3000, seed: 12, ..WorkloadConfig::default() };
    cfg.faults = FaultConfig::lossy(0.1);
    cfg.connect.max_rd_atomic = 1;
    cfg.connect.max_dest_rd_atomic = 1;
    let r = workload::run(cfg).unwrap();
    assert!(r.ok(), "{:?}\n{:#?}", r.completions, r.problems);
}

/// SEND/WRITE only, 10% loss + 10% reordering, window 8: a QP fails with
/// RETRY_EXC_ERR (seed 2, about 87k operations in). Traces of a similar
/// run (seed 20652, window 32, all faults) show every NAK for the PSN the
/// requester is already resending from — a duplicated NAK, or one the
/// responder sends again for the same gap — charging one more retry and
/// rewinding again; rxe guards this (a retry already started is not
/// restarted except by a timeout). A few unlucky timeouts then exhaust
/// `retry_cnt` (then 7 counted as seven retries; it now means "forever" as
/// in rxe, so this test uses 6 to keep retries counted). Loss alone or reordering alone pass. Fixed: a PSN sequence
/// error NAK for the PSN a retry already rewound to starts no other
/// retry, and a NAK for a later PSN counts as progress (retry counters
/// reset).
#[test]
fn loss_and_reorder_do_not_exhaust_retries() {
    use roce_workloads::demo::{self as workload, OpKind, WorkloadConfig};
    let cfg = WorkloadConfig {
        ops: 100_000,
        seed: 2,
        window: 8,
        mix: vec![OpKind::Send, OpKind::Write],
        faults: FaultConfig { drop: 0.1, reorder: 0.1, ..FaultConfig::default() },
        ..WorkloadConfig::default()
    };
    let mut cfg = cfg;
    cfg.connect.retry_cnt = 6; // counted retries: a cascade would exhaust them
    let r = workload::run(cfg).unwrap();
    assert!(r.ok(), "{:?}\n{:#?}", r.completions, r.problems);
}

/// A long UD run: the per-stream bookkeeping of arrived and lost messages
/// is pruned past a horizon of 65 536 messages (so a 10^7-operation soak
/// keeps flat memory), and the accounting still adds up: every message
/// arrived intact or is counted lost, duplicates still checked.
#[test]
fn long_unreliable_runs_prune_their_bookkeeping_and_still_account() {
    let r = workload::run(WorkloadConfig {
        ops: 300_000,
        seed: 5,
        qps: 1,
        window: 16,
        max_size: 64,
        mix: vec![OpKind::Send],
        qp_type: roce_workloads::demo::QpTypes::Ud,
        faults: FaultConfig {
            drop: 0.05,
            duplicate: 0.05,
            reorder: 0.05,
            ..FaultConfig::default()
        },
        ..WorkloadConfig::default()
    })
    .unwrap();
    assert!(r.ok(), "{:?}\n{:#?}", r.delivery, r.problems);
    let d = r.delivery[&roce_workloads::demo::PairType::Ud];
    assert_eq!(d.sent, 300_000);
    assert!(d.lost() > 1000 && d.duplicates > 1000, "{d:?}");
    assert_eq!(d.missing, d.lost(), "{d:?}");
}

/// The chapter 14 lessons: each passes for several seeds, replays exactly,
/// and leaves the counters it teaches (the multicast one on four devices).
#[test]
fn multicast_and_xrc_lessons_pass_replay_and_count() {
    use roce_workloads::demo::Lesson;
    let run = |name: &str, seed: u64| {
        let mut l = Lesson::new(name, seed, FaultConfig::default()).expect(name);
        l.run().expect("set up");
        let ok = l.finish();
        (ok, l.transcript().to_string(), l.counters())
    };
    for seed in 1..=4 {
        for name in ["multicast", "xrc"] {
            let (ok, text, _) = run(name, seed);
            assert!(ok, "{name} seed {seed}:\n{text}");
            assert_eq!(run(name, seed).1, text, "{name} seed {seed} replays");
        }
    }
    let (_, text, c) = run("multicast", 1);
    let get = |c: &[(String, roce_emulator::Counters)], dev: &str, k: &str| {
        c.iter().find(|(n, _)| n == dev).and_then(|(_, c)| c.get(k)).unwrap_or(u64::MAX)
    };
    assert_eq!(c.len(), 4, "{text}");
    assert_eq!(get(&c, "roce0", "mcast_sent"), 2);
    let rcvd: Vec<u64> =
        ["roce1", "roce2", "roce3"].iter().map(|d| get(&c, d, "mcast_rcvd")).collect();
    assert_eq!(rcvd, [2, 1, 2]);
    assert!(text.contains("to QP 0xffffff"), "{text}");
    assert!(text.contains("5 copies to multicast group members"), "{text}");
    let (_, text, c) = run("xrc", 1);
    assert_eq!((get(&c, "roce1", "naks_sent"), get(&c, "roce1", "rdma_recvs")), (1, 3), "{text}");
    assert!(text.contains("REM_INV_REQ_ERR"), "{text}");
}
