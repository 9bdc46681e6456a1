//! One `tracing` event per decision, with consistent fields (`qpn`, `psn`,
//! `reason`, `code`, `from`, `to`, `kind`): a capturing subscriber records
//! every event and the tests look for the expected ones.

#[allow(dead_code)]
use crate::trace;
use roce_emulator::*;
use roce_packet::Opcode;
use roce_sim::testkit::*;
use trace::{capture, Ev};
use tracing::Level;

fn find<'a>(evs: &'a [Ev], message: &str) -> Vec<&'a Ev> {
    evs.iter().filter(|e| e.message == message).collect()
}

fn dump(evs: &[Ev]) -> String {
    evs.iter().map(|e| format!("{} {} {:?}\n", e.target, e.message, e.fields)).collect()
}

#[test]
fn bad_icrc_drop_has_reason() {
    let mut p = Pair::new();
    p.b.post_recv(1, 0, 64);
    p.a.send(1, 0, 16);
    let evs = capture(|| {
        let mut first = true;
        p.run_with(Instant::from_millis(1000), |_, s| {
            if first && s.dir == Dir::AtoB {
                first = false;
                let mut b = s.repr.to_vec(&[0u8; 16]).unwrap();
                b[20] ^= 0x01; // payload bit; the ICRC no longer matches
                Action::Replace(b)
            } else {
                Action::Deliver
            }
        });
    });
    let drops = find(&evs, "drop");
    let d = drops.iter().find(|e| e.f("reason") == Some("icrc_err")).unwrap_or_else(|| {
        panic!("no icrc drop:\n{}", dump(&evs));
    });
    assert_eq!(d.target, "roce_emulator::recv");
    assert_eq!(d.level, Level::DEBUG);
    assert_eq!(d.f("src"), Some("10.0.0.1"));
    assert_eq!((d.f("qpn"), d.f("psn")), (Some(p.b.qpn.to_string().as_str()), Some("0x000100")));
    assert_eq!(p.b.counters().icrc_err, 1);
    // the retransmit timer recovered the lost packet: set, fired, retried
    let set = find(&evs, "timer set");
    assert!(set.iter().all(|e| e.f("kind") == Some("retransmit")), "{}", dump(&evs));
    assert!(set.iter().any(|e| e.f("qpn") == Some(&p.a.qpn.to_string())), "{}", dump(&evs));
    let fired = find(&evs, "retransmit timer fired");
    assert_eq!(fired.len(), 1, "{}", dump(&evs));
    assert_eq!(fired[0].f("qpn"), Some(p.a.qpn.to_string().as_str()));
    assert_eq!(fired[0].f("kind"), Some("retransmit"));
    let retry = find(&evs, "retry");
    assert_eq!(retry.len(), 1, "{}", dump(&evs));
    assert_eq!(retry[0].f("psn"), Some("0x000100"));
    assert_eq!(retry[0].f("reason"), Some("timeout"));
    assert_eq!(p.a.counters().retransmit_timeouts, 1);
    assert_eq!(p.b.read_mem(0, 16), vec![0; 16]);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn psn_sequence_nak_sent_and_received() {
    let mut p = Pair::new();
    p.b.post_recv(1, 0, 8192);
    p.a.send(1, 0, 3 * 1024);
    let evs =
        capture(|| {
            p.run_with(Instant::from_millis(1000), |i, _| {
                if i == 0 {
                    Action::Drop
                } else {
                    Action::Deliver
                }
            })
        });
    let sent = find(&evs, "NAK sent");
    assert_eq!(sent.len(), 1, "{}", dump(&evs));
    let n = sent[0];
    assert_eq!(n.target, "roce_emulator::responder");
    assert_eq!(n.f("code"), Some("PSN_SEQUENCE_ERROR"));
    assert_eq!(n.f("psn"), Some("0x000100"), "the expected PSN is NAKed");
    assert_eq!(n.f("qpn"), Some(p.b.qpn.to_string().as_str()));
    let got = find(&evs, "NAK received");
    assert_eq!(got.len(), 1, "{}", dump(&evs));
    assert_eq!((got[0].f("code"), got[0].f("psn")), (Some("PSN_SEQUENCE_ERROR"), Some("0x000100")));
    assert_eq!(got[0].f("qpn"), Some(p.a.qpn.to_string().as_str()));
    // the packet after the NAKed gap is dropped with its reason
    let oos: Vec<_> = find(&evs, "drop")
        .into_iter()
        .filter(|e| e.f("reason") == Some("out of sequence after NAK"))
        .collect();
    assert_eq!(oos.len(), 1, "{}", dump(&evs));
    assert_eq!(oos[0].f("psn"), Some("0x000102"));
    let retry = find(&evs, "retry");
    assert_eq!(retry.len(), 1, "{}", dump(&evs));
    assert_eq!(retry[0].f("reason"), Some("PSN sequence error NAK"));
    assert_eq!((p.a.counters().rcvd_seq_err, p.b.counters().naks_sent), (1, 1));
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn rnr_nak_wait_exhaustion_and_state_change() {
    let mut p = Pair::with(Opts { rnr_retry: 1, min_rnr_timer: 1, ..Opts::default() });
    p.a.send(7, 0, 8); // no receive WQE on B
    let evs = capture(|| p.run());
    let rnr = find(&evs, "RNR NAK sent");
    assert_eq!(rnr.len(), 2, "first try and one retry:\n{}", dump(&evs));
    assert_eq!(rnr[0].f("code"), Some("RNR_NAK"));
    assert_eq!(rnr[0].f("psn"), Some("0x000100"));
    assert_eq!(rnr[0].f("timer_us"), Some("10"), "min_rnr_timer 1 = 0.01 ms");
    let wait = find(&evs, "RNR NAK: waiting");
    assert_eq!(wait.len(), 1, "{}", dump(&evs));
    assert_eq!((wait[0].f("psn"), wait[0].f("wait_us")), (Some("0x000100"), Some("10")));
    let fired = find(&evs, "RNR timer fired");
    assert_eq!(fired.len(), 1, "{}", dump(&evs));
    assert_eq!(fired[0].f("kind"), Some("rnr"));
    assert_eq!(find(&evs, "RNR retry count exceeded").len(), 1, "{}", dump(&evs));
    let st = find(&evs, "QP state change");
    assert_eq!(st.len(), 1, "exactly one event for the move to ERR:\n{}", dump(&evs));
    assert_eq!((st[0].f("from"), st[0].f("to")), (Some("RTS"), Some("ERR")));
    assert_eq!(st[0].f("qpn"), Some(p.a.qpn.to_string().as_str()));
    assert_eq!(st[0].level, Level::INFO);
    let w = p.a.poll();
    assert_eq!((w[0].wr_id, w[0].status), (7, WcStatus::RnrRetryExcErr));
    assert_eq!((p.a.counters().rcvd_rnr_err, p.b.counters().send_rnr_err), (2, 2));
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_ACKNOWLEDGE), 2);
}

#[test]
fn modify_qp_state_changes_are_traced_once() {
    let mut p = Pair::new();
    let q = p.a.qpn;
    let evs = capture(|| {
        p.a.hca.modify_qp(q, &QpAttr::new().state(QpState::Err)).unwrap();
        p.a.hca.modify_qp(q, &QpAttr::new().state(QpState::Reset)).unwrap();
    });
    let st: Vec<_> = find(&evs, "QP state change")
        .iter()
        .map(|e| (e.f("from").unwrap().to_string(), e.f("to").unwrap().to_string()))
        .collect();
    assert_eq!(
        st,
        vec![("RTS".into(), "ERR".into()), ("ERR".into(), "RESET".into())],
        "{}",
        dump(&evs)
    );
    assert_eq!(p.a.hca.qp_state(q), Some(QpState::Reset));
}
