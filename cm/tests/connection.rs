//! Connections between two CMs as protocol traces: establishment,
//! rejection, lost and duplicated MADs, disconnection (lost, simultaneous)
//! and TimeWait. Every MAD on the wire is checked field by field where it
//! matters.

use crate::common;

use common::*;
use roce_cm::*;
use roce_packet::mad::{attr, CmMsg, IpCmHeader};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

fn ip_header() -> IpCmHeader {
    IpCmHeader {
        cma_version: 0,
        ip_version: 4,
        src_port: 0xc51f,
        src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    }
}

/// The request timeout of the default config: 2 × 2^16 + 2^20 units of 4.096 µs.
fn t_req() -> Duration {
    Duration::from_nanos(4096 * ((2 << 16) + (1 << 20)))
}

#[test]
fn connect_accept_rtu_disconnect_and_timewait_exit() {
    let mut w = Wire::new();
    assert_eq!(w.a.config().request_timeout(), t_req());
    let listen = w.b.listen(service()).unwrap();
    assert_eq!(w.b.listen(service()), Err(ListenError::AddressInUse(service())));

    let (ca, cb, a_comm, req_tid) = request_phase(&mut w, listen);
    let b_comm = reply_phase(&mut w, ca, cb, a_comm, req_tid);
    rtu_phase(&mut w, (ca, cb), (a_comm, b_comm), req_tid);
    disconnect_phase(&mut w, (ca, cb), (a_comm, b_comm));
    timewait_phase(&mut w, ca, cb);
}

/// B listening, the first `attr` MAD `side` sends lost, and A's request
/// made (as far as the wire goes): the wire and both ends' connections.
fn request_losing(side: Side, attr: u16) -> (Wire, ConnId, ConnId) {
    let mut w = Wire::listening();
    w.drop_nth(side, attr, 1);
    let (ca, cb, _) = w.request(w.request_to_b());
    (w, ca, cb)
}

/// The events of a disconnection A began, once the DREP is back: B's
/// connection `cb` got the DREQ, A's `ca` the DREP.
fn assert_disconnected_by_a(w: &mut Wire, ca: ConnId, cb: ConnId) {
    assert_disconnected(
        w,
        (ca, DisconnectCause::DrepReceived),
        (cb, DisconnectCause::DreqReceived),
    );
}

/// The one event each side's application gets: A's connection `a.0`
/// disconnected for `a.1`, B's `b.0` for `b.1`.
fn assert_disconnected(w: &mut Wire, a: (ConnId, DisconnectCause), b: (ConnId, DisconnectCause)) {
    assert_eq!(w.take_a(), [CmEvent::Disconnected { conn: a.0, cause: a.1 }]);
    assert_eq!(w.take_b(), [CmEvent::Disconnected { conn: b.0, cause: b.1 }]);
}

/// A's REQ (every field checked on the wire) and B's CONNECT_REQUEST
/// event for `listen`: A's and B's connections, A's comm ID, the REQ's TID.
fn request_phase(w: &mut Wire, listen: ListenId) -> (ConnId, ConnId, u32, u64) {
    let mut req = ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 0x12_3456);
    req.responder_resources = 4;
    req.initiator_depth = 2;
    req.retry_count = 6;
    req.rnr_retry_count = 5;
    req.srq = true;
    req.path_mtu = 5;
    req.private_data = ip_private_data(&ip_header(), b"hello from A");
    let ca = w.a.connect(w.now, req).unwrap();
    assert_eq!(w.a.state(ca), Some(ConnState::ReqSent));
    assert_eq!(w.a.poll_timeout(), Some(t_req()));
    w.pump();

    // REQ
    let a_comm = w.a.conn_info(ca).unwrap().local_comm_id;
    let reqs = w.sent(Side::A, attr::REQ);
    assert_eq!(reqs.len(), 1);
    let req_tid = reqs[0].mad.header.tid;
    let CmMsg::Req(q) = &reqs[0].mad.msg else { panic!() };
    assert_eq!((q.local_comm_id, q.service_id, q.local_ca_guid), (a_comm, service(), GUID_A));
    assert_eq!((q.local_qpn, q.starting_psn, q.transport_service_type), (0x11, 0x12_3456, 0));
    assert_eq!((q.responder_resources, q.initiator_depth), (4, 2));
    assert_eq!((q.retry_count, q.rnr_retry_count, q.srq, q.path_mtu), (6, 5, true, 5));
    assert_eq!((q.max_cm_retries, q.local_cm_response_timeout), (15, 20));
    assert_eq!((q.primary.local_gid, q.primary.remote_gid), (w.ga, w.gb));
    assert_eq!((q.primary.local_lid, q.primary.remote_lid), (0xffff, 0xffff));
    assert_eq!(&q.private_data[36..48], b"hello from A");
    assert!(q.private_data[48..].iter().all(|b| *b == 0));

    let ev = w.take_b();
    let [CmEvent::ConnectRequest { listen: l, conn: cb, req: got }] = &ev[..] else {
        panic!("{ev:?}")
    };
    let cb = *cb;
    assert_eq!(*l, listen);
    assert_eq!(got.remote, PeerAddr { gid: w.ga, qpn: 1 });
    assert_eq!(
        (got.service_id, got.remote_comm_id, got.remote_ca_guid),
        (service(), a_comm, GUID_A)
    );
    assert_eq!((got.remote_qpn, got.starting_psn, got.qp_type), (0x11, 0x12_3456, CmQpType::Rc));
    assert_eq!((got.responder_resources, got.initiator_depth, got.retry_count), (4, 2, 6));
    assert_eq!((got.rnr_retry_count, got.srq, got.path_mtu, got.pkey), (5, true, 5, 0xffff));
    assert_eq!(IpCmHeader::parse(&got.private_data).unwrap(), ip_header());
    assert_eq!(&got.private_data[36..48], b"hello from A");
    assert_eq!(got.private_data.len(), 92);
    assert_eq!(w.b.state(cb), Some(ConnState::ReqRcvd));
    assert_eq!(w.b.poll_timeout(), None, "the application decides at its pace");
    (ca, cb, a_comm, req_tid)
}

/// B accepts: its REP on the wire and A's CONNECT_RESPONSE event; B's comm ID.
fn reply_phase(w: &mut Wire, ca: ConnId, cb: ConnId, a_comm: u32, req_tid: u64) -> u32 {
    // REP
    let accept = AcceptParams {
        local_qpn: 0x22,
        starting_psn: 0xab_cdef,
        responder_resources: 2,
        initiator_depth: 4,
        rnr_retry_count: 6,
        srq: false,
        end_to_end_flow_control: true,
        private_data: b"hello from B".to_vec(),
    };
    w.b.accept(w.now, cb, accept).unwrap();
    assert_eq!(w.b.state(cb), Some(ConnState::RepSent));
    w.pump();
    let b_comm = w.b.conn_info(cb).unwrap().local_comm_id;
    assert_ne!(b_comm, a_comm);
    let reps = w.sent(Side::B, attr::REP);
    assert_eq!(reps.len(), 1);
    assert_eq!(reps[0].mad.header.tid, req_tid);
    let CmMsg::Rep(p) = &reps[0].mad.msg else { panic!() };
    assert_eq!((p.local_comm_id, p.remote_comm_id, p.local_ca_guid), (b_comm, a_comm, GUID_B));
    assert_eq!((p.local_qpn, p.starting_psn, p.rnr_retry_count), (0x22, 0xab_cdef, 6));
    assert_eq!((p.responder_resources, p.initiator_depth, p.target_ack_delay), (2, 4, 15));
    assert_eq!((p.srq, p.end_to_end_flow_control, p.failover_accepted), (false, true, 0));
    assert_eq!(&p.private_data[..12], b"hello from B");
    let ev = w.take_a();
    let [CmEvent::ConnectResponse { conn, rep }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!(*conn, ca);
    assert_eq!((rep.remote_comm_id, rep.remote_ca_guid, rep.remote_qpn), (b_comm, GUID_B, 0x22));
    assert_eq!((rep.starting_psn, rep.responder_resources, rep.initiator_depth), (0xab_cdef, 2, 4));
    assert_eq!((rep.rnr_retry_count, rep.srq, rep.end_to_end_flow_control), (6, false, true));
    assert_eq!(&rep.private_data[..12], b"hello from B");
    assert_eq!(rep.private_data.len(), 196);
    assert_eq!(w.a.state(ca), Some(ConnState::RepRcvd));
    assert_eq!(w.a.poll_timeout(), None, "the REQ timer stops on the REP");
    b_comm
}

/// A's RTU; both sides established.
fn rtu_phase(w: &mut Wire, (ca, cb): (ConnId, ConnId), (a_comm, b_comm): (u32, u32), req_tid: u64) {
    // RTU
    w.a.complete_connect(ca).unwrap();
    w.pump();
    let rtus = w.sent(Side::A, attr::RTU);
    assert_eq!(rtus[0].mad.header.tid, req_tid);
    assert_eq!(comm_ids(&rtus[0].mad), (a_comm, b_comm));
    assert_eq!(w.take_a(), [CmEvent::Established { conn: ca }]);
    assert_eq!(w.take_b(), [CmEvent::Established { conn: cb }]);
    assert_eq!(w.a.state(ca), Some(ConnState::Established));
    assert_eq!(w.b.state(cb), Some(ConnState::Established));
    assert_eq!(w.next_deadline(), None);
    let ia = w.a.conn_info(ca).unwrap();
    assert_eq!(
        (ia.active, ia.local_qpn, ia.remote_qpn, ia.remote_comm_id),
        (true, 0x11, 0x22, b_comm)
    );
    let ib = w.b.conn_info(cb).unwrap();
    assert_eq!(
        (ib.active, ib.local_qpn, ib.remote_qpn, ib.remote_comm_id),
        (false, 0x22, 0x11, a_comm)
    );
}

/// A disconnects: DREQ, DREP, both sides in TimeWait.
fn disconnect_phase(w: &mut Wire, (ca, cb): (ConnId, ConnId), (a_comm, b_comm): (u32, u32)) {
    // DREQ, DREP
    w.now += Duration::from_secs(10);
    assert_eq!(
        w.a.disconnect(w.now, ca, &[0u8; 221]),
        Err(DisconnectError::PrivateDataTooLong { len: 221, max: 220 })
    );
    w.a.disconnect(w.now, ca, b"bye").unwrap();
    assert_eq!(w.a.state(ca), Some(ConnState::DreqSent));
    w.pump();
    let dreqs = w.sent(Side::A, attr::DREQ);
    let CmMsg::Dreq { local_comm_id, remote_comm_id, remote_qpn, private_data } = &dreqs[0].mad.msg
    else {
        panic!()
    };
    assert_eq!((*local_comm_id, *remote_comm_id, *remote_qpn), (a_comm, b_comm, 0x22));
    assert_eq!(&private_data[..3], b"bye");
    let dreq_tid = dreqs[0].mad.header.tid;
    let dreps = w.sent(Side::B, attr::DREP);
    assert_eq!(dreps[0].mad.header.tid, dreq_tid, "the DREP answers with the DREQ's TID");
    assert_eq!(comm_ids(&dreps[0].mad), (b_comm, a_comm));
    assert_disconnected_by_a(w, ca, cb);
    assert_eq!(w.a.state(ca), Some(ConnState::TimeWait));
    assert_eq!(w.b.state(cb), Some(ConnState::TimeWait));
    assert_eq!(w.trace(), ["A>REQ", "B>REP", "A>RTU", "A>DREQ", "B>DREP"]);
}

/// TimeWait runs out on both sides; the counters of the whole exchange.
fn timewait_phase(w: &mut Wire, ca: ConnId, cb: ConnId) {
    // TimeWait: nothing until the duration has passed, then both exit
    let tw = w.a.config().timewait;
    assert_eq!(tw, Duration::from_nanos(4096 << 20));
    assert_eq!(w.a.poll_timeout(), Some(w.now + tw));
    assert_eq!(w.b.poll_timeout(), Some(w.now + tw));
    let t0 = w.now;
    w.a.handle_timeout(t0 + tw - Duration::from_nanos(1));
    w.b.handle_timeout(t0 + tw - Duration::from_nanos(1));
    assert!(w.take_a().is_empty() && w.take_b().is_empty());
    w.run_for(tw);
    assert_eq!(w.take_a(), [CmEvent::TimewaitExit { conn: ca }]);
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb }]);
    assert_eq!((w.a.state(ca), w.b.state(cb)), (None, None));
    assert_eq!((w.a.connection_count(), w.b.connection_count()), (0, 0));
    assert_eq!(w.next_deadline(), None);

    let (ka, kb) = (*w.a.counters(), *w.b.counters());
    assert_eq!((ka.mads_sent, ka.mads_received, ka.retransmits), (3, 2, 0));
    assert_eq!((ka.req_sent, ka.rtu_sent, ka.dreq_sent), (1, 1, 1));
    assert_eq!((kb.mads_sent, kb.mads_received, kb.retransmits), (2, 3, 0));
    assert_eq!((kb.rep_sent, kb.drep_sent), (1, 1));
    assert_eq!(ka.dropped_malformed + ka.dropped_unknown_comm_id + ka.dropped_duplicate, 0);
    assert_eq!(kb.dropped_malformed + kb.dropped_unknown_comm_id + kb.dropped_duplicate, 0);
}

#[test]
fn reject_with_private_data_reaches_the_active_side() {
    let mut w = Wire::listening();
    let (ca, cb, _) = w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 1));
    let (a_comm, b_comm) =
        (w.a.conn_info(ca).unwrap().local_comm_id, w.b.conn_info(cb).unwrap().local_comm_id);
    assert_eq!(
        w.b.reject(cb, &[7u8; 149]),
        Err(RejectError::PrivateDataTooLong { len: 149, max: 148 })
    );
    w.b.reject(cb, b"go away").unwrap();
    assert_eq!(w.b.state(cb), None);
    w.pump();
    let rej: Vec<Sent> = w.sent(Side::B, attr::REJ).into_iter().cloned().collect();
    assert_eq!(rej.len(), 1);
    assert_eq!(rej[0].mad.header.tid, w.sent(Side::A, attr::REQ)[0].mad.header.tid);
    let CmMsg::Rej { local_comm_id, remote_comm_id, msg_rejected, reason, private_data, .. } =
        &rej[0].mad.msg
    else {
        panic!()
    };
    assert_eq!((*local_comm_id, *remote_comm_id, *msg_rejected, *reason), (b_comm, a_comm, 0, 28));
    let ev = w.take_a();
    let [CmEvent::Rejected { conn, reason, private_data: pd }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!((*conn, *reason), (ca, 28));
    assert_eq!(pd.len(), 148);
    assert_eq!(&pd[..7], b"go away");
    assert_eq!(&pd[..], &private_data[..]);
    assert!(pd[7..].iter().all(|b| *b == 0));
    assert_eq!(w.a.state(ca), None);
    assert_eq!((w.a.connection_count(), w.b.connection_count()), (0, 0));
    assert_eq!(w.next_deadline(), None, "no REQ retransmission after the REJ");
    assert_eq!((w.b.counters().rej_sent, w.a.counters().rej_received), (1, 1));
    assert!(w.take_b().is_empty());
    assert_eq!(w.trace(), ["A>REQ", "B>REJ"]);
}

#[test]
fn the_active_side_can_reject_a_rep() {
    let mut w = Wire::listening();
    let (ca, cb, _) = w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, 1));
    w.b.accept(w.now, cb, AcceptParams::new(0x22, 2)).unwrap();
    w.pump();
    assert!(matches!(&w.take_a()[..], [CmEvent::ConnectResponse { .. }]));
    // librdmacm rejects the REP when it cannot move its QP to RTR/RTS
    w.a.reject(ca, b"no qp").unwrap();
    w.pump();
    let rej = w.sent(Side::A, attr::REJ);
    let CmMsg::Rej { msg_rejected, reason, .. } = &rej[0].mad.msg else { panic!() };
    assert_eq!((*msg_rejected, *reason), (1, 28));
    let ev = w.take_b();
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { conn, reason: 28, private_data }] if *conn == cb && private_data.starts_with(b"no qp")),
        "{ev:?}"
    );
    assert_eq!(w.next_deadline(), None, "B's REP timer is gone with the connection");
}

#[test]
fn a_lost_req_is_retransmitted_after_the_response_timeout() {
    let mut w = Wire::listening();
    w.drop_nth(Side::A, attr::REQ, 1);
    let ca = w.a.connect(w.now, w.request_to_b()).unwrap();
    w.pump();
    assert!(w.take_b().is_empty());
    assert_eq!(w.step_timer(), Some(t_req()));
    let ev = w.take_b();
    let [CmEvent::ConnectRequest { conn: cb, .. }] = &ev[..] else { panic!("{ev:?}") };
    let cb = *cb;
    let reqs = w.sent(Side::A, attr::REQ);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].bytes, reqs[1].bytes, "a retransmission is the same MAD");
    assert_eq!((reqs[0].at, reqs[1].at), (Duration::ZERO, t_req()));
    assert_eq!(w.a.poll_timeout(), Some(2 * t_req()));
    w.accept_and_rtu(ca, cb);
    assert_eq!(w.b.state(cb), Some(ConnState::Established));
    assert_eq!(w.a.state(ca), Some(ConnState::Established));
    assert_eq!(w.trace(), ["A>REQx", "A>REQ", "B>REP", "A>RTU"]);
    assert_eq!(w.a.counters().retransmits, 1);
}

#[test]
fn a_lost_rep_is_answered_by_the_duplicate_req_without_a_second_request_event() {
    let (mut w, ca, cb) = request_losing(Side::B, attr::REP);
    w.now = Duration::from_secs(1); // the application takes a second to accept
    w.b.accept(w.now, cb, AcceptParams::new(0x22, 2)).unwrap();
    w.pump();
    assert!(w.take_a().is_empty());
    // A's REQ timer runs out first; B answers the duplicate REQ with its REP
    assert_eq!(w.step_timer(), Some(t_req()));
    assert!(w.take_b().is_empty(), "no second ConnectRequest");
    assert!(matches!(&w.take_a()[..], [CmEvent::ConnectResponse { conn, .. }] if *conn == ca));
    let reps = w.sent(Side::B, attr::REP);
    assert_eq!(reps.len(), 2);
    assert_eq!(reps[0].bytes, reps[1].bytes);
    assert_eq!(w.b.counters().duplicates_answered, 1);
    assert_eq!(w.b.counters().retransmits, 0);
    assert_eq!(w.b.connection_count(), 1);
    w.a.complete_connect(ca).unwrap();
    w.pump();
    assert_eq!(w.take_b(), [CmEvent::Established { conn: cb }]);
    assert_eq!(w.trace(), ["A>REQ", "B>REPx", "A>REQ", "B>REP", "A>RTU"]);
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn a_lost_rtu_is_resent_when_the_rep_is_retransmitted() {
    let (mut w, ca, cb) = request_losing(Side::A, attr::RTU);
    w.accept_and_rtu(ca, cb);
    assert_eq!(w.take_a().len(), 2, "ConnectResponse, Established");
    assert_eq!(w.take_b(), [], "no RTU arrived");
    assert_eq!(w.b.state(cb), Some(ConnState::RepSent));
    // B's REP timer: the REQ's local CM response timeout (20) + 2 × life time
    assert_eq!(w.b.poll_timeout(), Some(t_req()));
    assert_eq!(w.a.poll_timeout(), None);
    w.step_timer();
    assert_eq!(w.take_b(), [CmEvent::Established { conn: cb }]);
    assert_eq!(w.take_a(), [], "the duplicate REP makes no event");
    let rtus = w.sent(Side::A, attr::RTU);
    assert_eq!(rtus.len(), 2);
    assert_eq!(rtus[0].bytes, rtus[1].bytes);
    assert_eq!((w.b.counters().retransmits, w.a.counters().duplicates_answered), (1, 1));
    assert_eq!(w.trace(), ["A>REQ", "B>REP", "A>RTUx", "B>REP", "A>RTU"]);
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn traffic_before_the_rtu_establishes_the_passive_side() {
    let (mut w, ca, cb) = request_losing(Side::A, attr::RTU);
    assert_eq!(w.b.establish(cb), Err(EstablishError::InvalidState(ConnState::ReqRcvd)));
    w.accept_and_rtu(ca, cb);
    w.take_a();
    // the first RC packet arrived on B's QP: the RTU must have been lost
    w.b.establish(cb).unwrap();
    assert_eq!(w.take_b(), [CmEvent::Established { conn: cb }]);
    assert_eq!(w.b.poll_timeout(), None, "no REP retransmission any more");
    w.b.establish(cb).unwrap();
    assert_eq!(w.take_b(), [], "establish is idempotent");
    // a late RTU (say, the first one was only delayed) is a duplicate
    let rtu = w.sent(Side::A, attr::RTU)[0].bytes;
    w.b.handle_mad(w.now, PeerAddr::new(w.ga), &rtu);
    assert_eq!(w.take_b(), []);
    assert_eq!(w.b.counters().dropped_duplicate, 1);
}

#[test]
fn a_slow_application_gets_an_mra_sent_for_it() {
    let mut w = Wire::listening();
    let (ca, cb, _) = w.request(w.request_to_b());
    // B's application does not answer; A retransmits; B asks for time
    w.step_timer();
    assert_eq!(w.take_b(), [], "no second ConnectRequest");
    let mras = w.sent(Side::B, attr::MRA);
    assert_eq!(mras.len(), 1);
    let CmMsg::Mra { local_comm_id, remote_comm_id, msg_mraed, service_timeout, .. } =
        &mras[0].mad.msg
    else {
        panic!()
    };
    let (a_comm, b_comm) =
        (w.a.conn_info(ca).unwrap().local_comm_id, w.b.conn_info(cb).unwrap().local_comm_id);
    assert_eq!(
        (*local_comm_id, *remote_comm_id, *msg_mraed, *service_timeout),
        (b_comm, a_comm, 0, 24)
    );
    assert_eq!(w.b.state(cb), Some(ConnState::MraReqSent));
    assert_eq!(w.a.state(ca), Some(ConnState::MraReqRcvd));
    let life = Duration::from_nanos(4096 << 16);
    assert_eq!(w.a.poll_timeout(), Some(w.now + 2 * life + Duration::from_nanos(4096 << 24)));
    // another duplicate REQ gets the MRA again
    let req = w.sent(Side::A, attr::REQ)[0].bytes;
    w.b.handle_mad(w.now, PeerAddr::new(w.ga), &req);
    w.pump();
    assert_eq!(w.sent(Side::B, attr::MRA).len(), 2);
    assert_eq!(w.b.counters().duplicates_answered, 2);
    // the application accepts at last
    w.now += Duration::from_secs(30);
    w.b.accept(w.now, cb, AcceptParams::new(0x22, 2)).unwrap();
    w.pump();
    assert!(matches!(&w.take_a()[..], [CmEvent::ConnectResponse { .. }]));
    w.a.complete_connect(ca).unwrap();
    w.pump();
    assert_eq!(w.take_b(), [CmEvent::Established { conn: cb }]);
    assert_eq!(w.a.counters().mra_received, 2);
    assert_eq!(w.trace(), ["A>REQ", "A>REQ", "B>MRA", "B>MRA", "B>REP", "A>RTU"]);
}

#[test]
fn a_lost_dreq_is_retransmitted_and_both_sides_disconnect() {
    let mut w = Wire::listening();
    let (ca, cb) = w.connected(service(), 0x11, 0x22);
    w.drop_nth(Side::A, attr::DREQ, 1);
    let t0 = Duration::from_secs(100);
    w.now = t0;
    w.a.disconnect(w.now, ca, &[]).unwrap();
    w.pump();
    assert_eq!((w.take_a(), w.take_b()), (vec![], vec![]));
    assert_eq!(w.step_timer(), Some(t0 + t_req()));
    assert_disconnected_by_a(&mut w, ca, cb);
    let dreqs = w.sent(Side::A, attr::DREQ);
    assert_eq!(dreqs.len(), 2);
    assert_eq!(dreqs[0].bytes, dreqs[1].bytes);
    assert_eq!(w.trace()[3..], ["A>DREQx", "A>DREQ", "B>DREP"]);
    w.run_for(Duration::from_secs(10));
    assert_eq!(w.take_a(), [CmEvent::TimewaitExit { conn: ca }]);
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb }]);
}

#[test]
fn a_lost_drep_is_answered_again_even_after_the_peer_forgot_the_connection() {
    let mut w = Wire::listening();
    let (ca, cb) = w.connected(service(), 0x11, 0x22);
    w.drop_nth(Side::B, attr::DREP, 1);
    w.a.disconnect(w.now, ca, &[]).unwrap();
    w.pump();
    assert_eq!(
        w.take_b(),
        [CmEvent::Disconnected { conn: cb, cause: DisconnectCause::DreqReceived }]
    );
    // B's TimeWait (4.29 s) ends before A's DREQ timer (4.83 s): the
    // retransmitted DREQ names a connection B no longer has, and still
    // gets its DREP (IBA 12.9.8.4)
    assert!(w.b.config().timewait < t_req());
    w.step_timer();
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb }]);
    w.step_timer();
    assert_eq!(
        w.take_a(),
        [CmEvent::Disconnected { conn: ca, cause: DisconnectCause::DrepReceived }]
    );
    assert_eq!(w.b.counters().dropped_unknown_comm_id, 1);
    assert_eq!(w.b.counters().drep_sent, 2);
    let dreps = w.sent(Side::B, attr::DREP);
    assert_eq!(dreps[0].bytes, dreps[1].bytes, "the same DREP either way");
    assert_eq!(w.trace()[3..], ["A>DREQ", "B>DREPx", "A>DREQ", "B>DREP"]);
}

#[test]
fn a_dreq_never_answered_times_out_into_timewait() {
    let mut w = Wire::listening();
    let (ca, _cb) = w.connected(service(), 0x11, 0x22);
    for n in 1..=16 {
        w.drop_nth(Side::A, attr::DREQ, n);
    }
    w.a.disconnect(w.now, ca, &[]).unwrap();
    w.pump();
    for _ in 0..15 {
        w.step_timer();
        assert_eq!(w.take_a(), []);
    }
    w.step_timer();
    assert_eq!(
        w.take_a(),
        [CmEvent::Disconnected { conn: ca, cause: DisconnectCause::DreqTimeout }]
    );
    assert_eq!(w.sent(Side::A, attr::DREQ).len(), 16);
    assert_eq!(w.a.state(ca), Some(ConnState::TimeWait));
    assert_eq!((w.a.counters().retransmits, w.a.counters().timeouts), (15, 1));
    w.run_for(Duration::from_secs(5));
    assert_eq!(w.take_a(), [CmEvent::TimewaitExit { conn: ca }]);
}

#[test]
fn simultaneous_disconnect_ends_in_timewait_on_both_sides() {
    let mut w = Wire::listening();
    let (ca, cb) = w.connected(service(), 0x11, 0x22);
    w.a.disconnect(w.now, ca, b"a").unwrap();
    w.b.disconnect(w.now, cb, b"b").unwrap();
    w.pump();
    // each side answered the other's DREQ; the DREP to its own came in TimeWait
    assert_disconnected(
        &mut w,
        (ca, DisconnectCause::DreqReceived),
        (cb, DisconnectCause::DreqReceived),
    );
    for s in [Side::A, Side::B] {
        assert_eq!(w.sent(s, attr::DREQ).len(), 1);
        assert_eq!(w.sent(s, attr::DREP).len(), 1);
    }
    let a_dreq = w.sent(Side::A, attr::DREQ)[0].mad.clone();
    let b_drep = &w.sent(Side::B, attr::DREP)[0].mad;
    assert_eq!(b_drep.header.tid, a_dreq.header.tid);
    assert_eq!(comm_ids(b_drep), (comm_ids(&a_dreq).1, comm_ids(&a_dreq).0));
    assert_eq!(
        (w.a.state(ca), w.b.state(cb)),
        (Some(ConnState::TimeWait), Some(ConnState::TimeWait))
    );
    assert_eq!((w.a.counters().dropped_duplicate, w.b.counters().dropped_duplicate), (1, 1));
    assert_eq!(w.a.counters().retransmits + w.b.counters().retransmits, 0);
    w.run_for(Duration::from_secs(5));
    assert_eq!(w.take_a(), [CmEvent::TimewaitExit { conn: ca }]);
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb }]);
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn a_late_dreq_in_timewait_gets_a_drep_and_the_connection_is_gone_after_exit() {
    let mut w = Wire::listening();
    let (ca, cb) = w.connected(service(), 0x11, 0x22);
    w.a.disconnect(w.now, ca, &[]).unwrap();
    w.pump();
    w.take_a();
    w.take_b();
    let dreq = w.sent(Side::A, attr::DREQ)[0].bytes;
    // a duplicate of A's DREQ reaches B in TimeWait
    w.now += Duration::from_secs(1);
    w.b.handle_mad(w.now, PeerAddr::new(w.ga), &dreq);
    w.pump();
    let dreps = w.sent(Side::B, attr::DREP);
    assert_eq!(dreps.len(), 2);
    assert_eq!(dreps[0].bytes, dreps[1].bytes);
    assert_eq!(w.b.counters().duplicates_answered, 1);
    assert_eq!(w.a.counters().dropped_duplicate, 1, "A is in TimeWait too");
    assert_eq!((w.take_a(), w.take_b()), (vec![], vec![]));
    assert_eq!(w.b.state(cb), Some(ConnState::TimeWait));
    // the TimeWait deadline did not move
    let tw = w.b.config().timewait;
    assert_eq!(w.b.poll_timeout(), Some(w.now - Duration::from_secs(1) + tw));
    w.run_for(tw);
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb }]);
    assert_eq!(w.b.state(cb), None);
    assert_eq!(w.b.connection_count(), 0);
    assert_eq!(w.b.disconnect(w.now, cb, &[]), Err(DisconnectError::UnknownConn));
    // after the exit the DREQ names nothing, and is still answered
    w.b.handle_mad(w.now, PeerAddr::new(w.ga), &dreq);
    w.pump();
    assert_eq!(w.sent(Side::B, attr::DREP).len(), 3);
    assert_eq!(w.b.counters().dropped_unknown_comm_id, 1);
    assert_eq!(w.take_b(), []);
}

#[test]
fn uc_connections_carry_their_transport_type() {
    let mut w = Wire::listening();
    let mut req = w.request_to_b();
    req.qp_type = CmQpType::Uc;
    let (_, _, got) = w.request(req);
    assert_eq!(got.qp_type, CmQpType::Uc);
    let CmMsg::Req(q) = &w.sent(Side::A, attr::REQ)[0].mad.msg else { panic!() };
    assert_eq!(q.transport_service_type, 1);
}

/// XRC over the CM (rdma-core's `rdma_xserver -c x`): the REQ says
/// transport 3 with extended type 1, the passive side sees an XRC request,
/// and the REP carries the target QP in the EE context field with SRQ set
/// (local QPN 0), which the active side reports as the peer's QPN.
#[test]
fn xrc_connections_carry_the_target_qpn_in_the_ee_context() {
    let mut w = Wire::listening();
    let mut req = w.request_to_b();
    req.qp_type = CmQpType::Xrc;
    let (ca, cb, got) = w.request(req);
    assert_eq!(got.qp_type, CmQpType::Xrc);
    let CmMsg::Req(q) = &w.sent(Side::A, attr::REQ)[0].mad.msg else { panic!() };
    assert_eq!((q.transport_service_type, q.extended_transport_type), (3, 1));
    w.b.accept(w.now, cb, AcceptParams::new(0x02_0304, 7)).expect("accept");
    w.pump();
    let CmMsg::Rep(p) = &w.sent(Side::B, attr::REP)[0].mad.msg else { panic!() };
    assert_eq!((p.local_qpn, p.local_eecn, p.srq), (0, 0x02_0304, true));
    let ev = w.take_a();
    let [CmEvent::ConnectResponse { conn, rep }] = &ev[..] else { panic!("{ev:?}") };
    assert_eq!((*conn, rep.remote_qpn, rep.srq), (ca, 0x02_0304, true));
    // an extended type other than XRC's is refused as an invalid transport
    let mut w = Wire::listening();
    let mut req = w.request_to_b();
    req.qp_type = CmQpType::Xrc;
    w.drop_nth(Side::A, attr::REQ, 1);
    w.a.connect(w.now, req).expect("connect");
    w.pump();
    let mut mad = w.sent(Side::A, attr::REQ)[0].bytes;
    mad[24 + 51] = (mad[24 + 51] & !7) | 2;
    let ga = w.ga;
    w.b.handle_mad(w.now, PeerAddr::new(ga), &mad);
    w.pump();
    assert_eq!(w.take_b(), []);
    let CmMsg::Rej { reason, .. } = &w.sent(Side::B, attr::REJ)[0].mad.msg else { panic!() };
    assert_eq!(*reason, 9, "REJ invalid transport type");
}

#[test]
fn destroy_sends_what_is_owed_and_makes_no_more_events() {
    let mut w = Wire::listening();
    // destroying an established connection sends a DREQ; it closes
    // through TimeWait silently
    let (ca, cb) = w.connected(service(), 0x11, 0x22);
    w.a.destroy(w.now, ca).unwrap();
    assert_eq!(w.a.state(ca), None);
    assert_eq!(w.a.destroy(w.now, ca), Err(DestroyError::UnknownConn));
    w.pump();
    assert_eq!(
        w.take_b(),
        [CmEvent::Disconnected { conn: cb, cause: DisconnectCause::DreqReceived }]
    );
    assert_eq!(w.take_a(), []);
    assert_eq!(w.a.connection_count(), 1, "in TimeWait");
    w.run_for(Duration::from_secs(5));
    assert_eq!(w.take_a(), []);
    assert_eq!(w.take_b(), [CmEvent::TimewaitExit { conn: cb }]);
    assert_eq!(w.a.connection_count(), 0);

    // destroying a pending REQ sends a REJ "timeout" with our GUID
    let ca =
        w.a.connect(w.now, ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x12, 5)).unwrap();
    w.pump();
    let ev = w.take_b();
    let [CmEvent::ConnectRequest { conn: cb, .. }] = &ev[..] else { panic!("{ev:?}") };
    w.a.destroy(w.now, ca).unwrap();
    w.pump();
    let rej = w.sent(Side::A, attr::REJ);
    let CmMsg::Rej { reason, reject_info_length, ari, remote_comm_id, .. } = &rej[0].mad.msg else {
        panic!()
    };
    assert_eq!((*reason, *reject_info_length, *remote_comm_id), (4, 8, 0));
    assert_eq!(&ari[..8], &GUID_A.to_be_bytes());
    // B finds its connection by A's comm ID and reports the rejection
    assert!(matches!(&w.take_b()[..], [CmEvent::Rejected { conn, reason: 4, .. }] if conn == cb));
    assert_eq!((w.a.connection_count(), w.b.connection_count()), (0, 0));
}

#[test]
fn calls_in_the_wrong_state_or_with_bad_values_are_typed_errors() {
    let mut w = Wire::listening();
    let gb = PeerAddr::new(w.gb);
    let mut r = ConnectRequest::new(service(), gb, 0x100_0000, 0);
    assert_eq!(
        w.a.connect(w.now, r.clone()),
        Err(ConnectError::FieldOutOfRange { field: "local_qpn", value: 0x100_0000 })
    );
    r.local_qpn = 0x11;
    r.path_mtu = 0;
    assert_eq!(
        w.a.connect(w.now, r.clone()),
        Err(ConnectError::FieldOutOfRange { field: "path_mtu", value: 0 })
    );
    r.path_mtu = 3;
    r.private_data = vec![0; 93];
    assert_eq!(w.a.connect(w.now, r), Err(ConnectError::PrivateDataTooLong { len: 93, max: 92 }));
    assert_eq!(w.a.connection_count(), 0);
    assert_eq!(w.a.counters().mads_sent, 0);

    let (ca, cb, _) = w.request(ConnectRequest::new(service(), gb, 0x11, 5));
    assert_eq!(
        w.a.complete_connect(ca),
        Err(CompleteConnectError::InvalidState(ConnState::ReqSent))
    );
    assert_eq!(
        w.a.accept(w.now, ca, AcceptParams::new(1, 1)),
        Err(AcceptError::InvalidState(ConnState::ReqSent))
    );
    assert_eq!(w.a.reject(ca, &[]), Err(RejectError::InvalidState(ConnState::ReqSent)));
    assert_eq!(
        w.b.disconnect(w.now, cb, &[]),
        Err(DisconnectError::InvalidState(ConnState::ReqRcvd))
    );
    let mut p = AcceptParams::new(0x22, 0x100_0000);
    assert_eq!(
        w.b.accept(w.now, cb, p.clone()),
        Err(AcceptError::FieldOutOfRange { field: "starting_psn", value: 0x100_0000 })
    );
    p.starting_psn = 1;
    p.private_data = vec![0; 197];
    assert_eq!(
        w.b.accept(w.now, cb, p),
        Err(AcceptError::PrivateDataTooLong { len: 197, max: 196 })
    );
    assert_eq!(w.b.state(cb), Some(ConnState::ReqRcvd));
    assert_eq!(
        w.b.sidr_reply(cb, SidrReplyParams { status: 0, qpn: 1, qkey: 1, private_data: vec![] }),
        Err(SidrReplyError::InvalidState(ConnState::ReqRcvd))
    );
    let listen = w.b.listen(service() + 1).unwrap();
    w.b.unlisten(listen).unwrap();
    assert_eq!(w.b.unlisten(listen), Err(UnlistenError::UnknownListen));
}

#[test]
fn the_same_seeds_give_the_same_bytes() {
    let run = || {
        let mut w = Wire::listening();
        w.drop_nth(Side::B, attr::REP, 1);
        let (ca, _cb) = {
            let psn = w.a.random_psn();
            let (ca, cb, _) =
                w.request(ConnectRequest::new(service(), PeerAddr::new(w.gb), 0x11, psn));
            let psn_b = w.b.random_psn();
            w.b.accept(w.now, cb, AcceptParams::new(0x22, psn_b)).unwrap();
            w.pump();
            w.step_timer();
            (ca, cb)
        };
        w.a.complete_connect(ca).unwrap();
        w.pump();
        w.a.disconnect(w.now, ca, &[]).unwrap();
        w.pump();
        w.log.iter().map(|s| s.bytes.to_vec()).collect::<Vec<_>>()
    };
    let (x, y) = (run(), run());
    // REQ, REP (lost), both timers at once: REQ again, REP again and REP
    // for the duplicate REQ; RTU, DREQ, DREP
    assert_eq!(x.len(), 8);
    assert_eq!(x, y);
}
