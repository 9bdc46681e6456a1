//! RC, UC and UD QPs at once (`--qp-type` of `roce demo`) under loss,
//! duplication, reordering and corruption: RC operations all succeed with
//! the right data; UC/UD messages either arrive byte-exact or are counted
//! lost (received + lost == sent, each lost one identified); the devices'
//! drop counters agree. Also each transport alone, without faults: nothing
//! may be lost.
//!
//! Replay a seed with `ROCE_SIM_SEED=<seed> cargo test -p roce-tests --test all sim_mixed_soak::`.

use crate::common;
use common::faults;

use roce_sim::FaultConfig;
use roce_sim::{seed_from_env, SeedGuard};
use roce_workloads::demo::{self as workload, OpKind, PairType, QpTypes, WorkloadConfig};

fn cfg(qp_type: QpTypes, ops: u64, seed: u64) -> WorkloadConfig {
    WorkloadConfig {
        ops,
        max_size: 3000,
        seed,
        qps: 6,
        window: 8,
        qp_type,
        stall_events: 400_000,
        ..WorkloadConfig::default()
    }
}

#[test]
fn each_transport_alone_without_faults_loses_nothing() {
    for (t, mix) in [
        (QpTypes::Rc, OpKind::ALL.to_vec()),
        (QpTypes::Uc, vec![OpKind::Send, OpKind::Write]),
        (QpTypes::Ud, vec![OpKind::Send]),
        (QpTypes::Mixed, OpKind::ALL.to_vec()),
    ] {
        let r = workload::run(WorkloadConfig { mix, ..cfg(t, 3000, 7) }).expect("setup");
        let s = r.failure_summary();
        assert!(r.ok(), "{t:?}: {s}");
        assert_eq!(r.mismatches, 0, "{s}");
        assert_eq!(r.failed_completions(), 0, "{s}");
        assert_eq!(r.lost(), 0, "{t:?}: {s}");
        for d in r.delivery.values() {
            assert_eq!((d.received, d.duplicates), (d.sent, 0), "{s}");
            assert!(d.sent > 0, "{s}");
        }
        let want = match t {
            QpTypes::Rc => vec![],
            QpTypes::Uc => vec![PairType::Uc],
            QpTypes::Ud => vec![PairType::Ud],
            QpTypes::Mixed => vec![PairType::Uc, PairType::Ud],
        };
        assert_eq!(r.delivery.keys().copied().collect::<Vec<_>>(), want, "{s}");
        assert_eq!(r.counter_sum("uc_msg_dropped") + r.counter_sum("ud_dropped"), 0, "{s}");
    }
}

#[test]
fn mix_refuses_operations_the_transport_cannot_carry() {
    let e = QpTypes::Uc.check_mix(&[OpKind::Send, OpKind::Read]).unwrap_err();
    assert!(e.contains("UC QPs cannot carry READ") && e.contains("send and write only"), "{e}");
    let e = QpTypes::Ud.check_mix(&[OpKind::Write, OpKind::FetchAdd]).unwrap_err();
    assert!(e.contains("UD QPs cannot carry WRITE, FETCH_AND_ADD"), "{e}");
    assert!(QpTypes::Mixed.check_mix(&OpKind::ALL).is_ok());
    let r = workload::run(WorkloadConfig { mix: vec![OpKind::Read], ..cfg(QpTypes::Uc, 10, 1) });
    assert!(r.is_err());
    assert_eq!(QpTypes::parse("MIXED"), Ok(QpTypes::Mixed));
    assert!(QpTypes::parse("xrc").is_err());
}

#[test]
fn mixed_transports_under_faults() {
    let seed = seed_from_env(0x5EED_0003);
    let _guard = SeedGuard::new(seed);
    let faults = faults(0.02, 0.02, 0.05, 0.002);
    let r = workload::run(WorkloadConfig {
        faults,
        qps: 6,
        window: 8,
        ..cfg(QpTypes::Mixed, 20_000, seed)
    })
    .expect("setup");
    let s = r.failure_summary();
    eprintln!("{s}");
    // RC: everything completed successfully with the right data; UC/UD:
    // never corrupt, every loss accounted for
    assert!(r.ok(), "{s}");
    assert_eq!((r.mismatches, r.order_errors, r.failed_completions()), (0, 0, 0), "{s}");
    assert_eq!(r.pairs.values().sum::<usize>(), 6);
    assert_eq!(r.pairs[&PairType::Rc], 2);
    // each stream gets an equal share: the RC pairs did a third of the work
    let unreliable: u64 = r.delivery.values().map(|d| d.sent).sum();
    assert!(r.ops_completed - unreliable >= 6000, "{s}");
    let rc_only: u64 = [OpKind::Read, OpKind::CmpSwap, OpKind::FetchAdd]
        .iter()
        .map(|k| r.ops_by_kind.get(k).copied().unwrap_or(0))
        .sum();
    assert!(rc_only > 1000, "{s}");
    for (t, d) in &r.delivery {
        assert!(d.sent > 1000, "{t}: {s}");
        assert_eq!(d.received + d.lost(), d.sent, "{t}: {s}");
        assert_eq!(d.missing, d.lost(), "{t}: {s}");
        // with 2% loss per packet something must vanish, not everything
        assert!(d.lost() > 0 && d.lost() < d.sent / 4, "{t}: {s}");
    }
    // duplicated packets are delivered twice on UD (no PSNs); each copy was
    // checked. (A UC duplicate comes from behind and is dropped.)
    assert!(r.delivery.values().map(|d| d.duplicates).sum::<u64>() > 0, "{s}");
    // the receivers dropped what the fabric broke: corrupted frames fail
    // the ICRC, and UC/UD receivers count the messages they discard
    assert!(r.counter_sum("icrc_err") > 0 || r.fabric.corrupted == 0, "{s}");
    assert!(r.fabric.dropped_loss > 0, "{s}");
}

#[test]
fn mixed_transports_under_heavy_faults_several_seeds() {
    let faults = faults(0.1, 0.05, 0.1, 0.01);
    for seed in [11, 12, 13] {
        let r = workload::run(WorkloadConfig {
            faults: faults.clone(),
            ..cfg(QpTypes::Mixed, 3000, seed)
        })
        .expect("setup");
        let s = r.failure_summary();
        assert!(r.ok(), "{s}");
        assert_eq!(r.mismatches, 0, "{s}");
        for d in r.delivery.values() {
            assert!(d.accounted() && d.lost() > 0, "{s}");
        }
        assert!(r.counter_sum("icrc_err") > 0, "{s}");
    }
}

/// The command a new user tried (issue 15): UC under reordering, with loss
/// and with duplication, seeds 1 to 3, 20 000 operations each. Before the
/// fix a late FIRST/ONLY resynchronised the UC responder and delivered an
/// old message after newer ones (an old WRITE over memory a newer one had
/// filled): mismatches. Now late packets are dropped by themselves.
#[test]
fn uc_under_reordering_never_delivers_wrong_bytes() {
    let mixes = [
        FaultConfig { reorder: 0.05, ..FaultConfig::default() },
        FaultConfig { drop: 0.05, reorder: 0.05, ..FaultConfig::default() },
        FaultConfig { duplicate: 0.05, reorder: 0.05, ..FaultConfig::default() },
        faults(0.05, 0.05, 0.1, 0.05),
    ];
    for seed in [1, 2, 3] {
        for faults in &mixes {
            let r = workload::run(WorkloadConfig {
                faults: faults.clone(),
                mix: vec![OpKind::Send, OpKind::Write],
                qps: 2,
                window: 16,
                max_size: 4096,
                ..cfg(QpTypes::Uc, 20_000, seed)
            })
            .expect("setup");
            let s = r.failure_summary();
            assert!(r.ok(), "seed {seed} {faults:?}: {s}");
            assert_eq!((r.mismatches, r.order_errors), (0, 0), "seed {seed} {faults:?}: {s}");
            let d = &r.delivery[&PairType::Uc];
            assert!(d.accounted() && d.lost() > 0 && d.received > d.sent / 2, "{s}");
            assert!(r.counter_sum("out_of_seq_request") > 0, "{s}");
        }
    }
}

/// 256 QP pairs of mixed transports need more completion entries than one
/// CQ holds (max_cqe 32767): the workload spreads the QPs over several CQs
/// (before, `roce demo --qp-type mixed --qps 256` was refused with
/// `create_cq: cqe 62896 outside 1..=32767`).
#[test]
fn more_qps_than_one_cq_can_hold() {
    let r = workload::run(WorkloadConfig {
        faults: FaultConfig { drop: 0.05, reorder: 0.05, ..FaultConfig::default() },
        qps: 256,
        window: 16,
        ..cfg(QpTypes::Mixed, 6000, 21)
    })
    .expect("setup with 256 QP pairs");
    let s = r.failure_summary();
    assert!(r.ok(), "{s}");
    assert_eq!(r.pairs.values().sum::<usize>(), 256, "{s}");
    assert_eq!(r.mismatches, 0, "{s}");
}
