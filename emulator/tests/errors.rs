//! Error paths: remote access, invalid requests, local protection, CQ
//! overflow, malformed input, verb misuse.

use roce_emulator::*;
use roce_packet::{BthRepr, LKey, NakCode, Opcode, Psn, Qpn, RKey, RoceRepr, Syndrome};
use roce_sim::testkit::*;
use std::net::{IpAddr, Ipv4Addr};

fn nak_codes(p: &Pair) -> Vec<NakCode> {
    p.trace
        .iter()
        .filter_map(|s| match s.repr.aeth.map(|a| a.syndrome) {
            Some(Syndrome::Nak(c)) => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn bad_rkey_remote_access_error_then_flush() {
    let mut p = Pair::new();
    p.b.post_recv(50, 0, 64);
    p.b.post_recv(51, 64, 64);
    let bad = RKey::new(p.b.mr.rkey.value() ^ 0x5A5A_0000);
    let wr = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(p.a.addr(0), 16, p.a.mr.lkey)
        .remote(p.b.addr(0), bad);
    p.a.post(wr);
    p.a.send(2, 0, 8);
    p.run();
    assert_eq!(nak_codes(&p), vec![NakCode::RemoteAccessError]);
    let wa = p.a.poll();
    assert_eq!(wa.len(), 2);
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::RemAccessErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(p.a.hca.qp_state(p.a.qpn), Some(QpState::Err));
    // later WRs are flushed at once
    p.a.send(3, 0, 8);
    let wa = p.a.poll();
    assert_eq!((wa[0].wr_id, wa[0].status), (3, WcStatus::WrFlushErr));
    p.a.post_recv(4, 0, 8);
    assert_eq!(p.a.poll()[0].status, WcStatus::WrFlushErr);
    // the responder went to ERR too (rxe behaviour) and flushed its receives
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Err));
    let wb = p.b.poll();
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(50, WcStatus::WrFlushErr), (51, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.b.read_mem(0, 16), vec![0; 16]);
    // the pipelined SEND behind the WRITE reached a responder already in ERR
    assert_eq!(p.trace.iter().filter(|s| s.dir == Dir::AtoB).count(), 2);
    assert_eq!(p.b.counters().bad_state, 1);
}

#[test]
fn write_without_remote_write_access() {
    let mut p = Pair::new();
    let ro =
        p.b.hca.reg_mr(p.b.pd, 4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let wr = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(p.a.addr(0), 8, p.a.mr.lkey)
        .remote(ro.addr, ro.rkey);
    p.a.post(wr);
    p.run();
    assert_eq!(nak_codes(&p), vec![NakCode::RemoteAccessError]);
    assert_eq!(p.a.poll()[0].status, WcStatus::RemAccessErr);
    // a READ of it would be allowed, a write beyond it too is an access error
}

#[test]
fn read_beyond_region_is_remote_access_error() {
    let mut p = Pair::new();
    let end = p.b.mr.addr + p.b.mr.length;
    let wr = SendWr::new(1, WrOpcode::RdmaRead)
        .sge(p.a.addr(0), 16, p.a.mr.lkey)
        .remote(end - 8, p.b.mr.rkey);
    assert_eq!(p.run_wr(wr)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn remote_va_overflow_is_rejected() {
    let mut p = Pair::new();
    let wr = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(p.a.addr(0), 16, p.a.mr.lkey)
        .remote(u64::MAX - 7, p.b.mr.rkey);
    assert_eq!(p.run_wr(wr)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn message_longer_than_receive_buffer() {
    let mut p = Pair::new();
    p.b.post_recv(7, 0, 100);
    p.b.post_recv(8, 100, 100);
    p.a.send(1, 0, 200);
    p.run();
    assert_eq!(nak_codes(&p), vec![NakCode::InvalidRequest]);
    let wb = p.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].status), (7, WcStatus::LocLenErr));
    assert_eq!((wb[1].wr_id, wb[1].status), (8, WcStatus::WrFlushErr));
    assert_eq!(p.a.poll()[0].status, WcStatus::RemInvReqErr);
    assert_eq!(format!("{}", WcStatus::RemInvReqErr), "remote invalid request error");
}

#[test]
fn bad_local_key_is_local_protection_error() {
    let mut p = Pair::new();
    let wr = SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 8, LKey::new(0x4242));
    p.a.post(wr);
    p.a.send(2, 0, 8);
    p.run();
    let wa = p.a.poll();
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::LocProtErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert!(p.trace.is_empty());
    // a READ into a region without LOCAL_WRITE is also a protection error
    let mut p = Pair::new();
    let ro = p.a.hca.reg_mr(p.a.pd, 64, AccessFlags::REMOTE_READ).unwrap();
    let wr = SendWr::new(1, WrOpcode::RdmaRead)
        .sge(ro.addr, 8, ro.lkey)
        .remote(p.b.addr(0), p.b.mr.rkey);
    assert_eq!(p.run_wr(wr)[0].status, WcStatus::LocProtErr);
}

#[test]
fn rnr_on_write_with_imm_without_recv() {
    let mut p = Pair::with(Opts { rnr_retry: 1, ..Opts::default() });
    let wr = p.one_sided(1, WrOpcode::RdmaWriteWithImm, 0, 8, 0).with_imm(5);
    assert_eq!(p.run_wr(wr)[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(p.b.counters().send_rnr_err, 2);
}

#[test]
fn cq_overflow_raises_async_event_and_errors_qps() {
    let mut p = Pair::with(Opts { cqe: 2, ..Opts::default() });
    p.b.post_recvs(3, 8);
    for i in 0..3u64 {
        let wr = SendWr::new(i, WrOpcode::Send)
            .sge(p.a.addr(0), 8, p.a.mr.lkey)
            .with_flags(SendFlags::EMPTY);
        p.a.post(wr);
    }
    p.run();
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::CqErr(p.b.cq)));
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::QpFatal(p.b.qpn)));
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Err));
    assert_eq!(p.b.counters().cq_overflow, 1);
    let wb = p.b.hca.poll_cq(p.b.cq, 10).unwrap();
    assert_eq!(wb.len(), 2);
    assert_eq!(p.b.hca.poll_cq(p.b.cq, 10), Err(PollCqError::Overrun(p.b.cq)));
}

fn raw_to_b(p: &mut Pair, payload: Vec<u8>) {
    p.b.hca.handle_datagram(Instant::ZERO, a_to_b().raw(payload));
}

fn framed(repr: &RoceRepr, payload: &[u8]) -> Vec<u8> {
    a_to_b().bytes(repr, payload)
}

fn send_only(dest: Qpn, psn: u32) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            dest_qp: dest,
            psn: Psn::new(psn),
            ack_req: true,
            ..BthRepr::default()
        },
        payload_len: 4,
        ..RoceRepr::default()
    }
}

#[test]
fn malformed_and_foreign_datagrams_are_dropped_and_counted() {
    let mut p = Pair::new();
    p.b.post_recv(1, 0, 64);
    let qb = p.b.qpn;
    // truncated
    raw_to_b(&mut p, vec![0x04, 0, 0]);
    // garbage with a "valid" length but wrong ICRC
    raw_to_b(&mut p, vec![0u8; 40]);
    // unknown opcode with a correct ICRC
    let mut r = send_only(qb, 0x100);
    let mut b = framed(&r, b"abcd");
    b[0] = 0x1E;
    a_to_b().seal(&mut b);
    raw_to_b(&mut p, b);
    // unknown QP
    raw_to_b(&mut p, framed(&send_only(Qpn::new(999), 0x200), b"abcd"));
    // transport version 1
    r.bth.tver = 1;
    raw_to_b(&mut p, framed(&r, b"abcd"));
    r.bth.tver = 0;
    // wrong partition
    r.bth.pkey = roce_packet::PKey::new(0x1234);
    raw_to_b(&mut p, framed(&r, b"abcd"));
    r.bth.pkey = roce_packet::PKey::DEFAULT;
    // UD opcode to an RC QP
    let mut ud = r;
    ud.bth.opcode = Opcode::UD_SEND_ONLY;
    ud.deth = Some(roce_packet::DethRepr {
        qkey: roce_packet::QKey::new(1),
        src_qp: Qpn::new(5),
        resv8: 0,
    });
    raw_to_b(&mut p, framed(&ud, b"abcd"));
    // a bit flip in a valid frame
    let mut flipped = framed(&r, b"abcd");
    flipped[13] ^= 0x80;
    raw_to_b(&mut p, flipped);
    let c = p.b.counters();
    assert_eq!(c.malformed, 2, "{c}");
    assert_eq!(c.icrc_err, 2, "{c}");
    assert_eq!(c.unknown_qp, 1);
    assert_eq!(c.bad_tver, 1);
    assert_eq!(c.bad_pkey, 1);
    assert_eq!(c.bad_opcode, 1);
    assert_eq!(c.rcvd_pkts, 0);
    assert!(p.b.hca.poll_cq(p.b.cq, 10).unwrap().is_empty());
    assert_eq!(p.b.read_mem(0, 4), vec![0; 4]);
    // and the good one is executed
    raw_to_b(&mut p, framed(&r, b"abcd"));
    assert_eq!(p.b.read_mem(0, 4), b"abcd");
    assert_eq!(p.b.counters().rcvd_pkts, 1);
    assert_eq!(p.b.counters().get("icrc_err"), Some(2));
    assert!(format!("{}", p.b.counters()).contains("rcvd_pkts"));
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut p = Pair::new();
    let mut state: u64 = 12345;
    let mut next = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u32
    };
    let qb = p.b.qpn;
    for i in 0..3000 {
        let len = (next() % 80) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        // make a good share of them reach the QP: right QPN, valid ICRC
        if len >= 16 && i % 2 == 0 {
            b[5..8].copy_from_slice(&qb.value().to_be_bytes()[1..]);
            b[1] &= 0xF0 | 0x03 << 4; // tver 0
            b[2] = 0xFF;
            b[3] = 0xFF;
            a_to_b().seal(&mut b);
        }
        raw_to_b(&mut p, b);
        while p.b.hca.poll_transmit(Instant::ZERO).is_some() {}
    }
    let c = p.b.counters();
    assert!(c.malformed + c.icrc_err > 0);
    assert!(c.rcvd_pkts > 0, "{c}");
}

#[test]
fn post_errors() {
    let mut p = Pair::new();
    let q = p.a.qpn;
    assert_eq!(
        p.a.hca.post_send(Qpn::new(4242), SendWr::new(1, WrOpcode::Send)),
        Err(PostSendError::UnknownQp(Qpn::new(4242)))
    );
    let mut wr = SendWr::new(1, WrOpcode::Send);
    for _ in 0..5 {
        wr = wr.sge(p.a.addr(0), 1, p.a.mr.lkey);
    }
    assert_eq!(p.a.hca.post_send(q, wr), Err(PostSendError::TooManySge { n: 5, max: 4 }));
    let wr = SendWr::new(1, WrOpcode::AtomicFetchAndAdd).sge(p.a.addr(0), 4, p.a.mr.lkey);
    assert_eq!(p.a.hca.post_send(q, wr), Err(PostSendError::BadAtomicSge));
    let wr = SendWr::new(1, WrOpcode::RdmaRead).inline(b"x");
    assert_eq!(p.a.hca.post_send(q, wr), Err(PostSendError::InlineNotAllowed));
    let mut rwr = RecvWr::new(1, 0, 1, p.a.mr.lkey);
    rwr.sg_list = vec![rwr.sg_list[0]; 5].into();
    assert_eq!(p.a.hca.post_recv(q, rwr), Err(PostRecvError::TooManySge { n: 5, max: 4 }));
    // queue full
    for i in 0..1024 {
        p.a.hca.post_send(q, SendWr::new(i, WrOpcode::Send)).unwrap();
    }
    assert_eq!(
        p.a.hca.post_send(q, SendWr::new(0, WrOpcode::Send)),
        Err(PostSendError::QueueFull { max: 1024 })
    );
    // RESET state
    p.a.hca.modify_qp(q, &QpAttr::new().state(QpState::Reset)).unwrap();
    assert_eq!(
        p.a.hca.post_send(q, SendWr::new(0, WrOpcode::Send)),
        Err(PostSendError::InvalidState(QpState::Reset))
    );
    assert!(p.a.poll().is_empty(), "RESET drops work without completions");
}

#[test]
fn object_verbs() {
    let mut h = Hca::new(HcaConfig::new("x", IpAddr::V4(Ipv4Addr::new(192, 168, 1, 7)), 9));
    // rxe's table: 0 link-local from the MAC 02:00:c0:a8:01:07, 1 RoCEv2
    assert_eq!(h.query_gid(0), Some("fe80::c0ff:fea8:107".parse().unwrap()));
    assert_eq!(h.query_gid(1), Some("::ffff:192.168.1.7".parse().unwrap()));
    assert_eq!(h.query_gid(2), None);
    let d = h.query_device();
    assert_eq!(
        (d.max_qp_rd_atom, d.max_sge, d.max_inline_data, d.max_cqe, d.max_qp_wr),
        (128, 32, 512, 32767, 16384)
    );
    assert_eq!(h.query_port().active_mtu, PathMtu::Mtu1024);
    let pd = h.alloc_pd().unwrap();
    assert_eq!(
        h.reg_mr(pd, 10, AccessFlags::REMOTE_WRITE),
        Err(RegMrError::RemoteWriteWithoutLocalWrite)
    );
    assert_eq!(
        h.reg_mr(pd, 10, AccessFlags::REMOTE_ATOMIC),
        Err(RegMrError::RemoteWriteWithoutLocalWrite)
    );
    let m1 = h.reg_mr(pd, 5000, ALL_ACCESS).unwrap();
    let m2 = h.reg_mr(pd, 10, AccessFlags::LOCAL_WRITE).unwrap();
    assert_ne!(m1.lkey.value(), m1.rkey.value());
    assert_ne!(m1.lkey, m2.lkey);
    assert_eq!(m1.addr % 4096, 0);
    assert_eq!(m2.addr % 4096, 0);
    assert!(m2.addr >= m1.addr + 5000);
    // application access is bounds-checked without overflow
    assert!(h.mr_write(m1.handle, 4999, &[1]).is_ok());
    assert!(matches!(h.mr_write(m1.handle, 4999, &[1, 2]), Err(MrAccessError::OutOfBounds { .. })));
    assert!(matches!(
        h.mr_read(m1.handle, u64::MAX, &mut [0; 2]),
        Err(MrAccessError::OutOfBounds { .. })
    ));
    assert_eq!(h.dealloc_pd(pd), Err(DeallocPdError::InUse { pd, users: 2 }));
    let cq = h.create_cq(4).unwrap();
    assert_eq!(h.create_cq(0), Err(CreateCqError::InvalidDepth { cqe: 0, max: 32767 }));
    let init = qp_init(pd, cq, QpType::Rc, qp_cap(4, 4), true);
    let q1 = h.create_qp(init).unwrap();
    let q2 = h.create_qp(init).unwrap();
    assert_eq!((q1.value(), q2.value()), (17, 18));
    let q3 = h.create_qp(QpInitAttr { qp_type: QpType::Ud, ..init }).unwrap();
    assert_eq!(q3.value(), 19);
    h.destroy_qp(q3).unwrap();
    assert_eq!(
        h.create_qp(QpInitAttr { cap: QpCap { max_inline_data: 513, ..init.cap }, ..init }),
        Err(CreateQpError::CapTooLarge { what: "max_inline_data", requested: 513, max: 512 })
    );
    assert_eq!(h.destroy_cq(cq), Err(DestroyCqError::InUse { cq, users: 4 }));
    let (attr, got_init) = h.query_qp(q1).unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Reset));
    assert_eq!(got_init, init);
    h.destroy_qp(q1).unwrap();
    h.destroy_qp(q2).unwrap();
    assert_eq!(h.destroy_qp(q2), Err(QpLookupError::UnknownQp(q2)));
    h.destroy_cq(cq).unwrap();
    h.dereg_mr(m1.handle).unwrap();
    h.dereg_mr(m2.handle).unwrap();
    assert_eq!(h.dereg_mr(m2.handle), Err(DeregMrError::UnknownMr(m2.handle)));
    h.dealloc_pd(pd).unwrap();
    // same seed, same keys
    let mut h2 = Hca::new(HcaConfig::new("x", IpAddr::V4(Ipv4Addr::new(192, 168, 1, 7)), 9));
    let pd2 = h2.alloc_pd().unwrap();
    let n1 = h2.reg_mr(pd2, 5000, ALL_ACCESS).unwrap();
    assert_eq!((n1.lkey, n1.rkey), (m1.lkey, m1.rkey));
}

#[test]
fn query_qp_reports_connection_attributes() {
    let p = Pair::new();
    let (a, _) = p.a.hca.query_qp(p.a.qpn).unwrap();
    assert_eq!(a.qp_state, Some(QpState::Rts));
    assert_eq!(a.sq_psn, 0x100);
    assert_eq!(a.rq_psn, 0x200);
    assert_eq!(a.dest_qp_num, p.b.qpn.value());
    assert_eq!(a.path_mtu, Some(PathMtu::Mtu1024));
    assert_eq!((a.timeout, a.retry_cnt, a.rnr_retry), (14, 7, 7));
}

/// A device given a QPN space (a member of a shared device: its slot's
/// range) hands out QPNs only inside it, from `first_qpn`, wrapping, and
/// says TooMany when every one is taken.
#[test]
fn create_qp_stays_in_the_devices_qpn_space() {
    let mut cfg = HcaConfig::new("slot3", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 1);
    cfg.qpns = 0x03_0000..0x03_0004;
    cfg.first_qpn = 0x03_0002;
    let mut h = Hca::new(cfg);
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(16).unwrap();
    let init = qp_init(pd, cq, QpType::Rc, qp_cap(1, 1), true);
    let got: Vec<u32> = (0..4).map(|_| h.create_qp(init).unwrap().value()).collect();
    assert_eq!(got, vec![0x03_0002, 0x03_0003, 0x03_0000, 0x03_0001], "from first_qpn, wrapping");
    assert_eq!(h.create_qp(init), Err(CreateQpError::TooMany), "the space is full");
    h.destroy_qp(Qpn::new(0x03_0003)).unwrap();
    assert_eq!(h.create_qp(init).unwrap().value(), 0x03_0003, "a freed QPN is found again");
    // an empty space, and slot 0's range, which never hands out QPN 0 or 1
    let mut empty = HcaConfig::new("e", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 1);
    empty.qpns = 5..5;
    let mut h = Hca::new(empty);
    let (pd, cq) = (h.alloc_pd().unwrap(), h.create_cq(4).unwrap());
    let e = QpInitAttr { pd, send_cq: cq, recv_cq: cq, ..init };
    assert_eq!(h.create_qp(e), Err(CreateQpError::TooMany));
    let mut s0 = HcaConfig::new("s0", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 1);
    s0.qpns = 0..0x1_0000;
    s0.first_qpn = 0;
    let mut h = Hca::new(s0);
    let (pd, cq) = (h.alloc_pd().unwrap(), h.create_cq(4).unwrap());
    let e = QpInitAttr { pd, send_cq: cq, recv_cq: cq, ..init };
    assert_eq!(h.create_qp(e).unwrap().value(), 2, "QPs 0 and 1 are the SMI's and GSI's");
}
