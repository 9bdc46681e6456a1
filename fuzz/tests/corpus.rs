//! Every committed corpus and crash input of every fuzz target, replayed
//! through the same harness the fuzzer runs (invariants included). A crash
//! the fuzzer finds is fixed and its input added under `fuzz/corpus/<target>/`.

use std::path::Path;

#[test]
fn the_committed_corpus_of_every_target_passes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut total = 0;
    for target in ["packet", "device", "verbs", "dropin", "cm", "misuse"] {
        let run = roce_fuzz::by_name(target).expect("target");
        let dir = root.join(target);
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.expect("entry").path();
            let data = std::fs::read(&p).expect("read input");
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "{target}: {} fails", p.display());
            n += 1;
        }
        assert!(n >= 4, "{target}: only {n} inputs");
        total += n;
    }
    assert!(total >= 16);
}

/// The device seeds reach the protocol: datagrams are taken in, some are
/// answered (ACK/NAK), some dropped for each of several reasons.
#[test]
fn the_device_harness_reaches_the_responder_and_the_completer() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/device");
    let mut sum = roce_emulator::Counters::default();
    for e in std::fs::read_dir(dir).expect("corpus/device") {
        let c = roce_fuzz::device_run(&std::fs::read(e.expect("entry").path()).expect("read"));
        for (n, v) in c.iter() {
            let cur = sum.get(n).unwrap_or(0);
            set(&mut sum, n, cur + v);
        }
    }
    assert!(sum.rcvd_pkts >= 20, "{sum}");
    assert!(sum.sent_pkts > 0, "{sum}");
    assert!(sum.icrc_err + sum.bad_opcode + sum.out_of_seq_request + sum.unknown_qp > 0, "{sum}");
}

fn set(c: &mut roce_emulator::Counters, name: &str, v: u64) {
    match name {
        "rcvd_pkts" => c.rcvd_pkts = v,
        "sent_pkts" => c.sent_pkts = v,
        "icrc_err" => c.icrc_err = v,
        "bad_opcode" => c.bad_opcode = v,
        "out_of_seq_request" => c.out_of_seq_request = v,
        "unknown_qp" => c.unknown_qp = v,
        _ => {}
    }
}

/// The drop-in seeds reach the data path: work requests complete, and
/// successfully (SEND, WRITE, READ, atomics, UD through an AH).
#[test]
fn the_dropin_harness_reaches_completions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/dropin");
    let (mut done, mut ok) = (0, 0);
    for e in std::fs::read_dir(dir).expect("corpus/dropin") {
        let p = e.expect("entry").path();
        let r = roce_fuzz::dropin_run(&std::fs::read(&p).expect("read"));
        eprintln!("{}: {r:?}", p.display());
        done += r.completions;
        ok += r.successes;
    }
    assert!(ok >= 10, "{ok} successful completions of {done}");
    assert!(done > ok, "no failed completion among {done} (the bad-rkey seed should fail)");
}

/// The seeds made of kernel rxe's captures (`seeds-device.py`) reach the
/// protocol: packets accepted and ACKed, receives completed (UD), and the
/// UC/UD drop paths taken.
#[test]
fn the_real_traffic_seeds_reach_the_device() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/device");
    let (mut rcvd, mut acks, mut recvs, mut n) = (0, 0, 0, 0);
    for e in std::fs::read_dir(dir).expect("corpus/device") {
        let p = e.expect("entry").path();
        if !p.file_name().is_some_and(|f| f.to_string_lossy().starts_with("rxe-")) {
            continue;
        }
        let c = roce_fuzz::device_run(&std::fs::read(&p).expect("read"));
        rcvd += c.rcvd_pkts;
        acks += c.acks_sent;
        recvs += c.rdma_recvs;
        n += 1;
    }
    assert!(n >= 10, "{n} rxe seeds (fuzz/seeds-device.py makes them)");
    assert!(rcvd >= 200 && acks >= 50 && recvs >= 5, "rcvd {rcvd} acks {acks} recvs {recvs}");
}

/// The CM seeds reach every part of the exchange: REQ/REP/RTU, REJ,
/// DREQ/DREP, SIDR, retransmissions, malformed input.
#[test]
fn the_cm_harness_reaches_the_whole_exchange() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/cm");
    let mut c = roce_emulator::cm::Counters::default();
    for e in std::fs::read_dir(dir).expect("corpus/cm") {
        for x in roce_fuzz::cm_run(&std::fs::read(e.expect("entry").path()).expect("read")) {
            c.rtu_sent += x.rtu_sent;
            c.rej_sent += x.rej_sent;
            c.drep_sent += x.drep_sent;
            c.sidr_rep_sent += x.sidr_rep_sent;
            c.retransmits += x.retransmits;
            c.dropped_malformed += x.dropped_malformed + x.dropped_unknown_attr;
            c.unknown_service += x.unknown_service;
        }
    }
    assert!(c.rtu_sent >= 2, "{c:?}");
    assert!(c.rej_sent >= 2, "{c:?}");
    assert!(c.drep_sent >= 2, "{c:?}");
    assert!(c.sidr_rep_sent >= 1, "{c:?}");
    assert!(c.retransmits >= 1, "{c:?}");
    assert!(c.dropped_malformed >= 1, "{c:?}");
    assert!(c.unknown_service >= 1, "{c:?}");
}
