//! Failures as protocol traces: a peer that never answers, a service
//! nobody listens on, stale connections, a full connection table, and
//! hostile or broken input.

use crate::common;

use common::*;
use roce_cm::*;
use roce_packet::mad::{
    attr, ip_service_id, port_space, CmMad, CmMsg, MadHeader, CM_CLASS, MAD_LEN,
};
use std::time::Duration;

#[test]
fn a_peer_that_never_answers_is_unreachable_after_max_cm_retries_plus_one_reqs() {
    for retries in [0u8, 3, 15] {
        let mut ca_cfg = CmConfig::new(gid_a(), GUID_A, 1);
        ca_cfg.max_cm_retries = retries;
        let mut w = Wire::with_configs(ca_cfg, CmConfig::new(gid_b(), GUID_B, 2));
        w.b.listen(service()).unwrap();
        let n = usize::from(retries) + 1;
        for k in 1..=n {
            w.drop_nth(Side::A, attr::REQ, k);
        }
        let ca = w.a.connect(w.now, w.request_to_b()).unwrap();
        w.pump();
        let t = w.a.config().request_timeout();
        for k in 1..=retries {
            assert_eq!(w.step_timer(), Some(t * u32::from(k)));
            assert_eq!(w.take_a(), [], "retry {k}");
        }
        assert_eq!(w.step_timer(), Some(t * (u32::from(retries) + 1)));
        assert_eq!(w.take_a(), [CmEvent::Unreachable { conn: ca }]);
        let reqs = w.sent(Side::A, attr::REQ);
        assert_eq!(reqs.len(), n, "max_cm_retries {retries}");
        assert!(reqs.iter().all(|r| r.bytes == reqs[0].bytes));
        let CmMsg::Req(q) = &reqs[0].mad.msg else { panic!() };
        assert_eq!(q.max_cm_retries, retries);
        // the REJ "timeout" the kernel sends when it gives up, with our GUID
        let rej = w.sent(Side::A, attr::REJ);
        assert_eq!(rej.len(), 1);
        let CmMsg::Rej { reason, ari, reject_info_length, .. } = &rej[0].mad.msg else { panic!() };
        assert_eq!((*reason, *reject_info_length), (4, 8));
        assert_eq!(&ari[..8], &GUID_A.to_be_bytes());
        // B never saw the REQ: the REJ names nothing it knows
        assert_eq!(w.b.counters().dropped_unknown_comm_id, 1);
        assert_eq!(w.take_b(), []);
        let k = w.a.counters();
        assert_eq!((k.retransmits, k.timeouts, k.req_sent), (u64::from(retries), 1, n as u64));
        assert_eq!(w.a.state(ca), None);
        assert_eq!((w.a.connection_count(), w.next_deadline()), (0, None));
        assert_eq!(w.step_timer(), None);
    }
}

#[test]
fn a_rep_never_acknowledged_makes_the_passive_side_unreachable() {
    let mut w = Wire::listening();
    let ca = w.a.connect(w.now, w.request_to_b()).unwrap();
    w.pump();
    let ev = w.take_b();
    let [CmEvent::ConnectRequest { conn: cb, .. }] = &ev[..] else { panic!("{ev:?}") };
    let cb = *cb;
    // A vanishes without a word (its CM is replaced by one that never
    // answers): every REP of B is lost
    for k in 1..=16 {
        w.drop_nth(Side::B, attr::REP, k);
    }
    w.a.destroy(w.now, ca).unwrap();
    w.a = Cm::new(CmConfig::new(gid_a(), GUID_A, 99));
    w.log.clear();
    w.b.accept(w.now, cb, AcceptParams::new(0x22, 2)).unwrap();
    w.pump();
    for _ in 0..15 {
        w.step_timer();
    }
    assert_eq!(w.take_b(), []);
    w.step_timer();
    assert_eq!(w.take_b(), [CmEvent::Unreachable { conn: cb }]);
    assert_eq!(w.sent(Side::B, attr::REP).len(), 16, "the REQ asked for 15 retries");
    let rej = w.sent(Side::B, attr::REJ);
    let CmMsg::Rej { reason, .. } = &rej[0].mad.msg else { panic!() };
    assert_eq!(*reason, 4);
    assert_eq!(w.b.connection_count(), 0);
}

#[test]
fn a_req_for_a_service_nobody_listens_on_is_rejected_with_reason_8() {
    let mut w = Wire::new();
    w.b.listen(ip_service_id(port_space::TCP, 1)).unwrap();
    let ca = w.a.connect(w.now, w.request_to_b()).unwrap();
    w.pump();
    let a_comm = w.sent(Side::A, attr::REQ)[0].mad.clone();
    let CmMsg::Req(q) = &a_comm.msg else { panic!() };
    let rej = w.sent(Side::B, attr::REJ);
    assert_eq!(rej.len(), 1);
    assert_eq!(rej[0].mad.header.tid, a_comm.header.tid);
    let CmMsg::Rej { local_comm_id, remote_comm_id, msg_rejected, reason, .. } = &rej[0].mad.msg
    else {
        panic!()
    };
    assert_eq!(
        (*local_comm_id, *remote_comm_id, *msg_rejected, *reason),
        (0, q.local_comm_id, 0, 8)
    );
    let ev = w.take_a();
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { conn, reason: 8, .. }] if *conn == ca),
        "{ev:?}"
    );
    assert_eq!(w.take_b(), []);
    assert_eq!((w.b.counters().unknown_service, w.b.counters().rej_sent), (1, 1));
    assert_eq!((w.a.connection_count(), w.b.connection_count()), (0, 0));
    assert_eq!(w.next_deadline(), None);
    assert_eq!(w.trace(), ["A>REQ", "B>REJ"]);
}

#[test]
fn a_req_from_a_qp_that_is_already_connected_is_stale() {
    let mut w = Wire::listening();
    let (_ca, cb_old) = w.connected(service(), 0x11, 0x22);
    let b_old = w.b.conn_info(cb_old).unwrap();
    // A reboots: its CM forgets the connection, and its new QP has the old
    // QPN again
    w.a = Cm::new(CmConfig::new(gid_a(), GUID_A, 1234));
    w.log.clear();
    let ca =
        w.a.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 9)).unwrap();
    let a_comm = w.a.conn_info(ca).unwrap().local_comm_id;
    w.pump();
    // the new REQ is refused as stale, the old connection is torn down:
    // its DREQ reaches an A that does not know it, which still answers
    let rej = w.sent(Side::B, attr::REJ);
    let CmMsg::Rej { remote_comm_id, reason, msg_rejected, .. } = &rej[0].mad.msg else { panic!() };
    assert_eq!((*remote_comm_id, *reason, *msg_rejected), (a_comm, 10, 0));
    let dreq = w.sent(Side::B, attr::DREQ);
    let CmMsg::Dreq { local_comm_id, remote_comm_id, remote_qpn, .. } = &dreq[0].mad.msg else {
        panic!()
    };
    assert_eq!(
        (*local_comm_id, *remote_comm_id, *remote_qpn),
        (b_old.local_comm_id, b_old.remote_comm_id, 0x11)
    );
    assert_eq!(w.trace(), ["A>REQ", "B>REJ", "B>DREQ", "A>DREP"]);
    let ev = w.take_a();
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { conn, reason: 10, .. }] if *conn == ca),
        "{ev:?}"
    );
    assert_eq!(
        w.take_b(),
        [CmEvent::Disconnected { conn: cb_old, cause: DisconnectCause::DrepReceived }],
        "no ConnectRequest for the stale REQ"
    );
    assert_eq!(w.a.counters().dropped_unknown_comm_id, 1);
    assert_eq!(w.b.counters().stale_connections, 1);
    // while the old connection is in TimeWait, its QP stays stale (as in the
    // kernel's CM) ...
    let ca =
        w.a.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 9)).unwrap();
    w.pump();
    assert!(matches!(&w.take_a()[..], [CmEvent::Rejected { conn, reason: 10, .. }] if *conn == ca));
    assert_eq!(w.b.counters().stale_connections, 2);
    // ... and after TimeWait the QP may connect again
    w.run_for(w.b.config().timewait);
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb_old }]);
    let (_, cb_new, req) = w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 9));
    assert_ne!(cb_new, cb_old);
    assert_eq!(req.remote_qpn, 0x11);
}

#[test]
fn a_full_connection_table_rejects_with_no_resources() {
    let mut cb_cfg = CmConfig::new(gid_b(), GUID_B, 2);
    cb_cfg.max_connections = 2;
    let mut ca_cfg = CmConfig::new(gid_a(), GUID_A, 1);
    ca_cfg.max_connections = 3;
    let mut w = Wire::with_configs(ca_cfg, cb_cfg);
    w.b.listen(service()).unwrap();
    for qpn in [0x11, 0x12] {
        w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), qpn, 1));
    }
    let ca =
        w.a.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x13, 1)).unwrap();
    w.pump();
    assert!(matches!(&w.take_a()[..], [CmEvent::Rejected { conn, reason: 3, .. }] if *conn == ca));
    assert_eq!(w.b.counters().dropped_conn_limit, 1);
    assert_eq!(w.b.connection_count(), 2);
    // the active side's own table: 2 pending + 1 = 3 is its cap
    w.a.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x14, 1)).unwrap();
    assert_eq!(
        w.a.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x15, 1)),
        Err(ConnectError::TooManyConnections)
    );
}

/// A MAD of `attr_id` with an all-zero attribute.
fn raw(attr_id: u16, tid: u64) -> [u8; MAD_LEN] {
    CmMad { header: MadHeader::cm(attr_id, tid), msg: CmMsg::Other(Box::new([0; 232])) }.emit()
}

#[test]
fn bad_input_is_counted_and_dropped_without_events() {
    let mut w = Wire::listening();
    let (ca, cb) = w.connected(service(), 0x11, 0x22);
    let info = w.b.conn_info(cb).unwrap();
    let k0 = *w.b.counters();
    let from = PeerAddr::new(w.ga);
    let rep = w.sent(Side::B, attr::REP)[0].bytes;
    let req = w.sent(Side::A, attr::REQ)[0].bytes;

    // truncated
    w.b.handle_mad(w.now, from, &req[..MAD_LEN - 1]);
    w.b.handle_mad(w.now, from, &[]);
    // another class, another base version, another class version, a method
    // other than Send: (header byte, value)
    for (byte, value) in [(1, 0x81), (0, 2), (2, 1), (3, 0x01)] {
        let mut m = req;
        m[byte] = value;
        w.b.handle_mad(w.now, from, &m);
    }
    let k = *w.b.counters();
    assert_eq!(k.dropped_malformed - k0.dropped_malformed, 6);

    // unknown attributes, ClassPortInfo; LAP and APR
    w.b.handle_mad(w.now, from, &raw(0x0099, 1));
    w.b.handle_mad(w.now, from, &raw(attr::CLASS_PORT_INFO, 1));
    w.b.handle_mad(w.now, from, &raw(attr::LAP, 1));
    w.b.handle_mad(w.now, from, &raw(attr::APR, 1));
    let k = *w.b.counters();
    assert_eq!((k.dropped_unknown_attr, k.dropped_unsupported), (2, 2));

    // REP, RTU, DREP, MRA, REJ for comm IDs B does not have
    let unknown = [attr::REP, attr::RTU, attr::DREP, attr::MRA, attr::REJ];
    for a in unknown {
        let mut m = raw(a, 7);
        m[24..28].copy_from_slice(&0x1234_5678u32.to_be_bytes()); // their comm ID
        m[28..32].copy_from_slice(&0x0bad_cafeu32.to_be_bytes()); // "ours"
        w.b.handle_mad(w.now, from, &m);
    }
    // the right comm IDs from the wrong port
    let mut rtu = raw(attr::RTU, 7);
    rtu[24..28].copy_from_slice(&info.remote_comm_id.to_be_bytes());
    rtu[28..32].copy_from_slice(&info.local_comm_id.to_be_bytes());
    w.b.handle_mad(w.now, PeerAddr::new([9; 16]), &rtu);
    // the right comm ID of ours with the wrong comm ID of theirs
    let mut rtu2 = rtu;
    rtu2[24..28].copy_from_slice(&0x5555_5555u32.to_be_bytes());
    w.b.handle_mad(w.now, from, &rtu2);
    // B's own REP reflected back at it names A's comm ID as the receiver's
    w.b.handle_mad(w.now, from, &rep);
    // right IDs, wrong state: an MRA for a REP B never waits on
    let mut mra = rtu;
    mra[16..18].copy_from_slice(&attr::MRA.to_be_bytes());
    mra[24 + 8] = 1 << 6; // MRA for a REP
    w.b.handle_mad(w.now, from, &mra);
    let k = *w.b.counters();
    assert_eq!(k.dropped_unknown_comm_id - k0.dropped_unknown_comm_id, 8);
    assert_eq!(k.dropped_invalid_state - k0.dropped_invalid_state, 1);
    assert_eq!(k.mads_received - k0.mads_received, 6 + 4 + 8 + 1);
    assert_eq!(k.mads_sent, k0.mads_sent, "none of this is answered");
    assert_eq!(w.b.poll_transmit(), None);
    assert_eq!(w.take_b(), []);
    assert_eq!(w.b.state(cb), Some(ConnState::Established));
    assert_eq!(w.a.state(ca), Some(ConnState::Established));
}

#[test]
fn random_bytes_never_panic_and_make_no_events() {
    let mut w = Wire::listening();
    let (_ca, cb) = w.connected(service(), 0x11, 0x22);
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let from = PeerAddr::new(w.ga);
    let n = 20_000;
    for i in 0..n {
        let len = (next() % 300) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 2 == 0 && b.len() >= MAD_LEN {
            // well-formed CM headers with a random CM attribute
            b[..4].copy_from_slice(&[1, CM_CLASS, 2, 3]);
            b[16] = 0;
            b[17] = 0x10 + (next() % 11) as u8;
        }
        w.now += Duration::from_micros(next() % 1000);
        w.b.handle_mad(w.now, from, &b);
        w.b.handle_timeout(w.now);
        while let Some(t) = w.b.poll_transmit() {
            // whatever it answers is a well-formed CM MAD back to the sender
            assert_eq!(t.to, from);
            let m = CmMad::parse(&t.mad).expect("a CM MAD");
            assert!(
                matches!(m.msg, CmMsg::Rej { .. } | CmMsg::Drep { .. } | CmMsg::SidrRep { .. }),
                "{m:?}"
            );
        }
    }
    assert_eq!(w.take_b(), [], "random REQs name no listened service");
    let k = w.b.counters();
    assert_eq!(k.mads_received, 2 + n, "the setup's REQ and RTU, then the random ones");
    // most random buffers are short or not CM; of the CM-shaped ones every
    // kind of message got through to the state machine
    assert!(k.dropped_malformed > 10_000, "{k:?}");
    assert!(k.unknown_service > 100 && k.dropped_unknown_comm_id > 500, "{k:?}");
    assert!(k.rej_received > 100 && k.mra_received > 100 && k.dropped_unsupported > 100, "{k:?}");
    assert_eq!(k.rej_sent + k.drep_sent + k.sidr_rep_sent + 1, k.mads_sent, "the setup's REP");
    assert_eq!(w.b.state(cb), Some(ConnState::Established));
    assert_eq!(w.b.connection_count(), 1);
}

#[test]
fn a_caller_that_never_drains_cannot_grow_the_transmit_queue() {
    let mut cfg = CmConfig::new(gid_b(), GUID_B, 2);
    cfg.max_queued_transmits = 3;
    let mut b = Cm::new(cfg);
    let mut dreq = raw(attr::DREQ, 1);
    for i in 0..10u32 {
        // DREQs for unknown comm IDs: each one asks for a DREP
        dreq[28..32].copy_from_slice(&(i + 1).to_be_bytes());
        b.handle_mad(Duration::ZERO, PeerAddr::new(gid_a()), &dreq);
    }
    let k = b.counters();
    assert_eq!((k.mads_sent, k.drep_sent, k.dropped_tx_queue_full), (3, 3, 7));
    let mut n = 0;
    while b.poll_transmit().is_some() {
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn a_req_from_qpn_0_is_not_mistaken_for_a_stale_connection() {
    let mut w = Wire::new();
    w.a.listen(service()).unwrap();
    w.b.listen(service()).unwrap();
    // B has a REQ of its own pending towards A (remote QPN not known yet)
    w.b.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.ga), 0x30, 1)).unwrap();
    w.drop_nth(Side::B, attr::REQ, 1);
    w.pump();
    let (_, _, req) = w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), 0, 1));
    assert_eq!(req.remote_qpn, 0);
    assert_eq!(w.b.counters().stale_connections, 0);
}

#[test]
fn a_clock_near_its_end_saturates_instead_of_overflowing() {
    let mut w = Wire::listening();
    w.now = Duration::MAX - Duration::from_secs(1);
    let (_, cb, _) = w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 1));
    w.b.accept(w.now, cb, AcceptParams::new(0x22, 2)).unwrap();
    assert_eq!(w.b.poll_timeout(), Some(Duration::MAX));
    assert_eq!(w.a.poll_timeout(), Some(Duration::MAX));
}
