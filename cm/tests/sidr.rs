//! SIDR (IBA 12.11): resolving a UD service (rdma_cm's RDMA_PS_UDP) to a
//! QPN and Q_Key.

use crate::common;

use common::*;
use roce_cm::*;
use roce_packet::mad::{attr, ip_service_id, port_space, CmMsg, IpCmHeader};
use std::net::{IpAddr, Ipv4Addr};

fn udp_service() -> u64 {
    ip_service_id(port_space::UDP, 7174)
}

fn request(w: &Wire, service_id: u64, app: &[u8]) -> SidrRequest {
    let ip = IpCmHeader {
        cma_version: 0,
        ip_version: 4,
        src_port: 0xc520,
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    };
    SidrRequest {
        service_id,
        remote: PeerAddr::new(w.gb),
        pkey: 0xffff,
        private_data: ip_private_data(&ip, app),
    }
}

#[test]
fn sidr_req_and_rep_round_trip_for_a_ud_service() {
    let mut w = Wire::new();
    let listen = w.b.listen(udp_service()).unwrap();
    let ca = w.a.sidr_resolve(w.now, request(&w, udp_service(), b"ud please")).unwrap();
    assert_eq!(w.a.state(ca), Some(ConnState::SidrReqSent));
    let request_id = w.a.conn_info(ca).unwrap().local_comm_id;
    w.pump();
    let reqs: Vec<Sent> = w.sent(Side::A, attr::SIDR_REQ).into_iter().cloned().collect();
    assert_eq!(reqs.len(), 1);
    let tid = reqs[0].mad.header.tid;
    let CmMsg::SidrReq { request_id: rid, partition_key, service_id, private_data } =
        &reqs[0].mad.msg
    else {
        panic!()
    };
    assert_eq!((*rid, *partition_key, *service_id), (request_id, 0xffff, udp_service()));
    assert_eq!(&private_data[36..45], b"ud please");

    let ev = w.take_b();
    let [CmEvent::SidrRequest { listen: l, conn: cb, remote, service_id, pkey, private_data }] =
        &ev[..]
    else {
        panic!("{ev:?}")
    };
    let cb = *cb;
    assert_eq!(
        (*l, *remote, *service_id, *pkey),
        (listen, PeerAddr::new(w.ga), udp_service(), 0xffff)
    );
    assert_eq!(private_data.len(), 216);
    assert_eq!(IpCmHeader::parse(private_data).unwrap().src_port, 0xc520);
    assert_eq!(w.b.state(cb), Some(ConnState::SidrReqRcvd));

    // a duplicate SIDR_REQ while the application decides is dropped
    let dup = reqs[0].bytes;
    w.b.handle_mad(w.now, PeerAddr::new(w.ga), &dup);
    assert_eq!(w.take_b(), []);
    assert_eq!(w.b.counters().dropped_duplicate, 1);

    assert_eq!(
        w.b.sidr_reply(
            cb,
            SidrReplyParams { status: 0, qpn: 0x33, qkey: 1, private_data: vec![0; 137] }
        ),
        Err(SidrReplyError::PrivateDataTooLong { len: 137, max: 136 })
    );
    w.b.sidr_reply(
        cb,
        SidrReplyParams {
            status: sidr_status::VALID,
            qpn: 0x33,
            qkey: 0x1111_2222,
            private_data: b"here".to_vec(),
        },
    )
    .unwrap();
    assert_eq!(w.b.state(cb), None);
    w.pump();
    let reps = w.sent(Side::B, attr::SIDR_REP);
    assert_eq!(reps.len(), 1);
    assert_eq!(reps[0].mad.header.tid, tid);
    let CmMsg::SidrRep { request_id: rid, status, qpn, service_id, qkey, private_data, .. } =
        &reps[0].mad.msg
    else {
        panic!()
    };
    assert_eq!(
        (*rid, *status, *qpn, *service_id, *qkey),
        (request_id, 0, 0x33, udp_service(), 0x1111_2222)
    );
    assert_eq!(&private_data[..4], b"here");
    let ev = w.take_a();
    let [CmEvent::SidrReply { conn, status, qpn, qkey, private_data }] = &ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!((*conn, *status, *qpn, *qkey), (ca, 0, 0x33, 0x1111_2222));
    assert_eq!(&private_data[..4], b"here");
    assert_eq!(private_data.len(), 136);
    assert_eq!((w.a.connection_count(), w.b.connection_count()), (0, 0));
    assert_eq!(w.next_deadline(), None);
    assert_eq!((w.a.counters().sidr_req_sent, w.b.counters().sidr_rep_sent), (1, 1));
}

#[test]
fn a_sidr_req_for_an_unknown_service_gets_status_1() {
    let mut w = Wire::new();
    w.b.listen(ip_service_id(port_space::TCP, 7174)).unwrap(); // TCP, not UDP
    let ca = w.a.sidr_resolve(w.now, request(&w, udp_service(), b"")).unwrap();
    w.pump();
    let reps = w.sent(Side::B, attr::SIDR_REP);
    assert_eq!(reps.len(), 1);
    let CmMsg::SidrRep { status, qpn, qkey, service_id, .. } = &reps[0].mad.msg else { panic!() };
    assert_eq!((*status, *qpn, *qkey, *service_id), (1, 0, 0, udp_service()));
    let ev = w.take_a();
    assert!(
        matches!(&ev[..], [CmEvent::SidrReply { conn, status: 1, .. }] if *conn == ca),
        "{ev:?}"
    );
    assert_eq!(w.take_b(), []);
    assert_eq!(w.b.counters().unknown_service, 1);
    assert_eq!(w.b.connection_count(), 0);
}

#[test]
fn a_lost_sidr_req_is_retried_and_silence_is_unreachable() {
    let mut w = Wire::new();
    w.b.listen(udp_service()).unwrap();
    w.drop_nth(Side::A, attr::SIDR_REQ, 1);
    let ca = w.a.sidr_resolve(w.now, request(&w, udp_service(), b"")).unwrap();
    w.pump();
    assert_eq!(w.step_timer(), Some(w.a.config().request_timeout()));
    let ev = w.take_b();
    let [CmEvent::SidrRequest { conn: cb, .. }] = &ev[..] else { panic!("{ev:?}") };
    w.b.sidr_reply(*cb, SidrReplyParams { status: 0, qpn: 0x33, qkey: 7, private_data: vec![] })
        .unwrap();
    w.pump();
    assert!(matches!(&w.take_a()[..], [CmEvent::SidrReply { conn, qpn: 0x33, .. }] if *conn == ca));
    assert_eq!(w.trace(), ["A>SIDR_REQx", "A>SIDR_REQ", "B>SIDR_REP"]);

    // nobody answers at all: 1 + 15 SIDR_REQs, then Unreachable
    for n in 1..=16 {
        w.drop_nth(Side::A, attr::SIDR_REQ, 2 + n);
    }
    let ca = w.a.sidr_resolve(w.now, request(&w, udp_service(), b"")).unwrap();
    w.pump();
    while w.step_timer().is_some() {}
    assert_eq!(w.take_a(), [CmEvent::Unreachable { conn: ca }]);
    assert_eq!(w.sent(Side::A, attr::SIDR_REQ).len(), 2 + 16);
    assert_eq!(w.a.connection_count(), 0);
}

#[test]
fn destroying_a_pending_sidr_request_answers_rejected() {
    let mut w = Wire::new();
    w.b.listen(udp_service()).unwrap();
    let ca = w.a.sidr_resolve(w.now, request(&w, udp_service(), b"")).unwrap();
    w.pump();
    let ev = w.take_b();
    let [CmEvent::SidrRequest { conn: cb, .. }] = &ev[..] else { panic!("{ev:?}") };
    w.b.destroy(w.now, *cb).unwrap();
    w.pump();
    assert!(matches!(&w.take_a()[..], [CmEvent::SidrReply { conn, status: 2, .. }] if *conn == ca));
}
