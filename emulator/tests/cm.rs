//! The port's communication manager on QP1: CM MADs between two devices,
//! driven by the test wire like any other traffic (its timers in the
//! devices' `poll_timeout`).

use roce_emulator::cm::{
    gid_from_ip, rej_reason, AcceptParams, CmEvent, ConnState, ConnectRequest, PeerAddr,
};
use roce_emulator::*;
use roce_packet::mad::{ip_service_id, port_space, GSI_QKEY};
use roce_packet::Opcode;
use roce_sim::testkit::*;
use std::net::{IpAddr, Ipv4Addr};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));

/// Deliver what is queued without letting the virtual clock move (the
/// applications answer at once).
fn deliver(p: &mut Pair) {
    let now = p.now;
    p.run_with(now, |_, _| Action::Deliver);
}

fn events(h: &mut Hca) -> Vec<CmEvent> {
    std::iter::from_fn(|| h.cm().poll_event()).collect()
}

/// Every packet of the trace is a CM MAD from QP1 to QP1.
fn all_mads(p: &Pair) {
    for s in &p.trace {
        assert_eq!(s.opcode, Opcode::UD_SEND_ONLY, "{}", p.dump());
        assert_eq!(s.repr.bth.dest_qp.value(), 1);
        assert!(s.ack_req);
        assert_eq!(s.repr.payload_len, 256);
        let deth = s.repr.deth.expect("DETH");
        assert_eq!((deth.qkey.value(), deth.src_qp.value()), (GSI_QKEY, 1));
    }
}

#[test]
fn connect_accept_rtu_then_disconnect_over_qp1() {
    let mut p = Pair::new();
    let sid = ip_service_id(port_space::TCP, 7174);
    let listen = p.a.hca.cm().listen(sid).unwrap();
    let now = p.b.hca.cm_now();
    let req = ConnectRequest::new(sid, PeerAddr::new(gid_from_ip(A)), p.b.qpn.value(), 0x31e278);
    let conn_b = p.b.hca.cm().connect(now, req).unwrap();
    deliver(&mut p);
    let ev = events(&mut p.a.hca);
    let [CmEvent::ConnectRequest { listen: l, conn: conn_a, req }] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(*l, listen);
    assert_eq!(
        (req.remote_qpn, req.starting_psn, req.service_id),
        (p.b.qpn.value(), 0x31e278, sid)
    );
    let conn_a = *conn_a;
    let now = p.a.hca.cm_now();
    p.a.hca.cm().accept(now, conn_a, AcceptParams::new(p.a.qpn.value(), 0xb3de0c)).unwrap();
    deliver(&mut p);
    let ev = events(&mut p.b.hca);
    let [CmEvent::ConnectResponse { conn, rep }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!(*conn, conn_b);
    assert_eq!((rep.remote_qpn, rep.starting_psn), (p.a.qpn.value(), 0xb3de0c));
    p.b.hca.cm().complete_connect(conn_b).unwrap();
    deliver(&mut p);
    assert_eq!(events(&mut p.b.hca), [CmEvent::Established { conn: conn_b }]);
    assert_eq!(events(&mut p.a.hca), [CmEvent::Established { conn: conn_a }]);
    assert_eq!(p.a.hca.cm_ref().state(conn_a), Some(ConnState::Established));
    // REQ, REP, RTU; QP1's PSNs count from 0 on each side
    assert_eq!(p.trace.len(), 3, "{}", p.dump());
    all_mads(&p);
    assert_eq!(p.trace.iter().map(|s| s.psn.value()).collect::<Vec<_>>(), [0, 0, 1]);
    let (ca, cb) = (p.a.hca.cm_ref().counters(), p.b.hca.cm_ref().counters());
    assert_eq!((cb.req_sent, ca.rep_sent, cb.rtu_sent), (1, 1, 1));
    assert_eq!((ca.mads_received, cb.mads_received), (2, 1));
    // the device counts them as packets
    assert_eq!(p.a.counters().rcvd_pkts, 2);
    assert_eq!(p.b.counters().sent_pkts, 2);

    // disconnect from A: DREQ, DREP, then TimeWait ends on the virtual clock
    let now = p.a.hca.cm_now();
    p.a.hca.cm().disconnect(now, conn_a, &[]).unwrap();
    p.run_with(Instant::from_millis(60_000), |_, _| Action::Deliver);
    all_mads(&p);
    assert_eq!(p.trace.len(), 5);
    let ea = events(&mut p.a.hca);
    let eb = events(&mut p.b.hca);
    assert!(
        matches!(ea[..], [CmEvent::Disconnected { .. }, CmEvent::TimewaitExit { .. }]),
        "{ea:?}"
    );
    assert!(
        matches!(eb[..], [CmEvent::Disconnected { .. }, CmEvent::TimewaitExit { .. }]),
        "{eb:?}"
    );
    assert_eq!(p.a.hca.cm_ref().state(conn_a), None);
}

#[test]
fn a_req_to_a_service_nobody_listens_on_is_rejected_with_reason_8() {
    let mut p = Pair::new();
    let sid = ip_service_id(port_space::TCP, 9999);
    let now = p.b.hca.cm_now();
    let req = ConnectRequest::new(sid, PeerAddr::new(gid_from_ip(A)), p.b.qpn.value(), 1);
    let conn = p.b.hca.cm().connect(now, req).unwrap();
    deliver(&mut p);
    assert_eq!(p.trace.len(), 2);
    all_mads(&p);
    let ev = events(&mut p.b.hca);
    let [CmEvent::Rejected { conn: c, reason, .. }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!((*c, *reason), (conn, rej_reason::INVALID_SERVICE_ID));
    assert!(events(&mut p.a.hca).is_empty());
    assert_eq!(p.a.hca.cm_ref().counters().unknown_service, 1);
}

#[test]
fn a_lost_req_is_sent_again_when_the_devices_timer_fires() {
    let mut p = Pair::new();
    let sid = ip_service_id(port_space::TCP, 7174);
    p.a.hca.cm().listen(sid).unwrap();
    let now = p.b.hca.cm_now();
    let req = ConnectRequest::new(sid, PeerAddr::new(gid_from_ip(A)), p.b.qpn.value(), 7);
    p.b.hca.cm().connect(now, req).unwrap();
    // the timer is part of the device's
    assert!(p.b.hca.poll_timeout().is_some());
    let end = p.b.hca.poll_timeout().unwrap();
    p.run_with(end, |i, _| if i == 0 { Action::Drop } else { Action::Deliver });
    let ev = events(&mut p.a.hca);
    assert!(matches!(ev[..], [CmEvent::ConnectRequest { .. }]), "{ev:?}");
    assert_eq!(p.trace.len(), 2, "{}", p.dump());
    assert_eq!(p.trace[1].psn.value(), 1, "the retransmission is a new UD packet");
    let waited = p.trace[1].at.as_nanos() - p.trace[0].at.as_nanos();
    let want = p.b.hca.cm_ref().config().request_timeout().as_nanos() as u64;
    assert_eq!(waited, want);
    assert_eq!(p.b.hca.cm_ref().counters().retransmits, 1);
}

#[test]
fn garbage_to_qp1_is_counted_by_the_cm_and_a_wrong_qkey_by_the_device() {
    let mut p = Pair::with(Opts { qp_type: QpType::Ud, ..Opts::default() });
    // A's application owns its QP1 (raw MADs); B's CM owns B's
    let ga =
        p.a.hca
            .create_gsi_qp(QpInitAttr {
                pd: p.a.pd,
                send_cq: p.a.cq,
                recv_cq: p.a.cq,
                qp_type: QpType::Ud,
                cap: QpCap {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
                srq: None,
            })
            .unwrap();
    let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1).qkey(GSI_QKEY);
    p.a.hca.modify_qp(ga, &init).unwrap();
    p.a.hca.modify_qp(ga, &QpAttr::new().state(QpState::Rtr)).unwrap();
    p.a.hca.modify_qp(ga, &QpAttr::new().state(QpState::Rts).sq_psn(0)).unwrap();
    let b = AhAttr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    // 256 bytes of pattern with the GSI Q_Key: not a MAD of the CM class
    p.a.write_mem(0, &pattern(256, 1));
    let wr =
        SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 256, p.a.mr.lkey).ud(b, 1, 0x8000_0000);
    p.a.hca.post_send(ga, wr).unwrap();
    // a real CM header with an attribute the CM does not know
    let mut mad = [0u8; 256];
    mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    mad[16..18].copy_from_slice(&0x0077u16.to_be_bytes());
    p.a.write_mem(512, &mad);
    let wr =
        SendWr::new(2, WrOpcode::Send).sge(p.a.addr(512), 256, p.a.mr.lkey).ud(b, 1, 0x8000_0000);
    p.a.hca.post_send(ga, wr).unwrap();
    // and one from an ordinary UD QP, with ibv_ud_pingpong's Q_Key
    let wr = SendWr::new(3, WrOpcode::Send).sge(p.a.addr(0), 256, p.a.mr.lkey).ud(b, 1, UD_QKEY);
    p.a.post(wr);
    p.run();
    assert_eq!(p.trace.len(), 3);
    let c = *p.b.hca.cm_ref().counters();
    assert_eq!(c.mads_received, 2);
    assert_eq!((c.dropped_malformed, c.dropped_unknown_attr), (1, 1), "{c:?}");
    assert_eq!(c.mads_sent, 0);
    assert_eq!(p.b.counters().ud_dropped, 1);
    assert!(events(&mut p.b.hca).is_empty());
    assert_eq!(p.b.counters().unknown_qp, 0);
}
