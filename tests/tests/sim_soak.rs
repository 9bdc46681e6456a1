//! The deterministic soak: 100,000 mixed operations between two emulated
//! HCAs through the simulated fabric with 10% loss, 5% duplication, 10%
//! reordering and 0.1% corruption. Every byte, every atomic result and
//! every completion is verified by the workload engine
//! (`roce_workloads::demo`, the same one `roce demo` runs); the
//! devices' counters must agree with what the fabric did.
//!
//! A failing run prints its seed; replay it with
//! `ROCE_SIM_SEED=<seed> cargo test -p roce-tests --test all sim_soak::`.

use crate::common;
use common::faults;

use roce_packet::frame::parse_frame;
use roce_pcap::read_capture;
use roce_sim::FaultConfig;
use roce_sim::{seed_from_env, SeedGuard};
use roce_workloads::demo::{self as workload, OpKind, Report, Workload, WorkloadConfig};

fn soak_faults() -> FaultConfig {
    faults(0.1, 0.05, 0.1, 0.001)
}

/// The checks every soak run must pass, beyond `Report::ok`.
fn check_counters(r: &Report) {
    let s = r.failure_summary();
    assert!(r.ok(), "{s}");
    assert_eq!(r.ops_completed, r.ops_requested, "{s}");
    // what the receivers saw: every corrupted frame (both copies of a
    // corrupted duplicate) fails the ICRC, and each one is counted once by
    // the receiving device's icrc_err — none reached a QP
    let (frames, bad) = r.icrc_audit.expect("audit on");
    assert_eq!(frames, r.fabric.delivered, "{s}");
    assert_eq!(bad, r.counter_sum("icrc_err"), "{s}");
    assert!(r.fabric.corrupted > 0 && bad >= r.fabric.corrupted, "{s}");
    assert!(bad <= r.fabric.corrupted + r.fabric.duplicated, "{s}");
    // nothing else was dropped by the receivers
    for c in ["malformed", "bad_tver", "unknown_qp", "bad_state", "bad_pkey", "bad_opcode"] {
        assert_eq!(r.counter_sum(c), 0, "{c}\n{s}");
    }
    // accepted = delivered - ICRC failures
    assert_eq!(r.counter_sum("rcvd_pkts"), r.fabric.delivered - bad, "{s}");
    assert_eq!(r.counter_sum("sent_pkts"), r.fabric.transmitted, "{s}");
    // duplicates and retransmissions reached the responders as duplicates,
    // gaps as out-of-sequence requests answered by NAKs, and the
    // requesters retransmitted
    assert!(r.counter_sum("duplicate_request") > 0, "{s}");
    assert!(r.counter_sum("out_of_seq_request") > 0, "{s}");
    assert!(r.counter_sum("rcvd_seq_err") > 0, "{s}");
    assert!(r.counter_sum("completer_retry_err") > 0, "{s}");
    assert!(r.counter_sum("retransmit_timeouts") > 0, "{s}");
    assert_eq!(r.counter_sum("retry_exceeded_err"), 0, "{s}");
    // every SEND consumed exactly one receive at the peer
    let sends = r.ops_by_kind.get(&OpKind::Send).copied().unwrap_or(0);
    assert_eq!(r.counter_sum("rdma_recvs"), sends, "{s}");
    assert_eq!(r.counter_sum("rdma_sends"), sends, "{s}");
}

fn soak(mix: Vec<OpKind>, default_seed: u64) {
    let seed = seed_from_env(default_seed);
    let _guard = SeedGuard::new(seed);
    let cfg = WorkloadConfig {
        ops: 100_000,
        mix,
        faults: soak_faults(),
        seed,
        audit_icrc: true,
        ..WorkloadConfig::default()
    };
    let r = workload::run(cfg).expect("setup");
    eprintln!(
        "soak seed {seed}: {} ops, {} events, virtual {:?}, wall {:?}",
        r.ops_completed, r.events, r.virtual_time, r.wall_time
    );
    check_counters(&r);
}

/// 100k SENDs and RDMA WRITEs (both directions, two QP pairs, sizes up to
/// 4 KiB at path MTU 1024) under every fault. About 11 s: a soak, run by
/// `scripts/soak.sh tests` (with the other long ones), not by every
/// `cargo test` (the 20-seed sweep below keeps 100 000 mixed operations
/// under the same faults in the ordinary suite).
#[test]
#[ignore = "long (about 11 s): scripts/soak.sh tests runs it"]
fn soak_100k_send_write_with_faults() {
    soak(vec![OpKind::Send, OpKind::Write], 0x50AC)
}

/// 100k operations of every kind (SEND, WRITE, READ, CMP_AND_SWP,
/// FETCH_AND_ADD) under every fault (`scripts/soak.sh tests`).
#[test]
#[ignore = "long (about 11 s): scripts/soak.sh tests runs it"]
fn soak_100k_mixed_with_faults() {
    soak(OpKind::ALL.to_vec(), 0x50AD)
}

fn mixed_cfg(ops: u64, seed: u64) -> WorkloadConfig {
    WorkloadConfig {
        ops,
        mix: OpKind::ALL.to_vec(),
        faults: soak_faults(),
        seed,
        audit_icrc: true,
        ..WorkloadConfig::default()
    }
}

/// Twenty seeds of the mixed soak, 5k operations each (100 000 in all, a
/// few seconds), with the same checks as the 100k runs.
#[test]
fn soak_mixed_seed_sweep() {
    for seed in 1..=20u64 {
        let r = workload::run(mixed_cfg(5000, seed)).expect("setup");
        check_counters(&r);
    }
}

/// The mixed soak at full length for 24 seeds (about two minutes; run with
/// `-- --ignored`). With `retry_cnt` 7 meaning "retry forever" (rxe's
/// reading, see emulator/src/completer.rs) every seed must pass every check.
/// (When 7 counted seven retries, seeds 9 and 11 ended in RETRY_EXC_ERR: a
/// READ or atomic lost eight times in a row, about 0.19^8 per loss episode
/// at 10% loss each way.)
#[test]
#[ignore = "long: 24 x 100k operations"]
fn soak_100k_mixed_seed_sweep() {
    for seed in 0..24u64 {
        let r = workload::run(mixed_cfg(100_000, seed)).expect("setup");
        assert!(r.ok(), "seed {seed}: {}", r.failure_summary());
        check_counters(&r);
    }
}

/// The same seed gives the same run, counter for counter.
#[test]
fn soak_replays_from_its_seed() {
    let cfg = || WorkloadConfig {
        ops: 3000,
        mix: vec![OpKind::Send, OpKind::Write],
        faults: soak_faults(),
        seed: 77,
        ..WorkloadConfig::default()
    };
    let a = workload::run(cfg()).unwrap();
    let b = workload::run(cfg()).unwrap();
    assert!(a.ok(), "{}", a.failure_summary());
    assert_eq!(a.fabric, b.fabric);
    assert_eq!(a.counters, b.counters);
    assert_eq!(a.virtual_time, b.virtual_time);
    assert_eq!(a.events, b.events);
}

/// `--pcap` output (the fabric's ingress tap) parses with
/// `read_capture`; every frame is a RoCEv2 datagram whose ICRC is valid,
/// except the ones the fabric corrupted, which are exactly the ones the
/// receivers counted in icrc_err. Timestamps come from the virtual clock
/// and never decrease.
#[test]
fn pcap_of_a_faulty_run_parses_and_only_corrupted_frames_fail_the_icrc() {
    let seed = seed_from_env(0xCA9);
    let _guard = SeedGuard::new(seed);
    let w = Workload::new(WorkloadConfig {
        ops: 3000,
        mix: vec![OpKind::Send, OpKind::Write],
        faults: FaultConfig { corrupt: 0.01, ..soak_faults() },
        seed,
        audit_icrc: true,
        ..WorkloadConfig::default()
    })
    .unwrap();
    let net = w.net().clone();
    let tap = net.with_fabric(|f| f.record_pcap(Vec::<u8>::new())).unwrap();
    let r = w.run(|_| {});
    let bytes: Vec<u8> = net.with_fabric(|f| f.finish_pcap(tap)).unwrap();
    let s = r.failure_summary();
    assert!(r.ok(), "{s}");
    let frames = read_capture(&bytes).unwrap();
    assert_eq!(frames.len() as u64, r.fabric.delivered, "{s}");
    let mut bad = 0u64;
    let mut last_ts = std::time::Duration::ZERO;
    for (i, f) in frames.iter().enumerate() {
        let ds = parse_frame(f.linktype, &f.data, roce_packet::ROCE_V2_PORT)
            .unwrap_or_else(|e| panic!("frame {i}: {e}"))
            .unwrap_or_else(|| panic!("frame {i}: not RoCEv2"));
        assert_eq!(ds.len(), 1);
        if !ds[0].icrc_ok() {
            bad += 1;
        }
        assert!(f.timestamp >= last_ts, "frame {i}: time went backwards");
        last_ts = f.timestamp;
    }
    assert!(r.fabric.corrupted > 0, "{s}");
    assert_eq!(bad, r.counter_sum("icrc_err"), "{s}");
    assert_eq!(Some(bad), r.icrc_audit.map(|(_, b)| b), "{s}");
    assert!(bad >= r.fabric.corrupted && bad <= r.fabric.corrupted + r.fabric.duplicated, "{s}");
    assert!(last_ts <= r.virtual_time, "{s}");
}
