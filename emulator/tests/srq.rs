//! Shared receive queues and CQ notification.

use roce_emulator::*;
use roce_packet::Qpn;
use roce_sim::testkit::*;

fn qp_on(s: &mut Side, srq: Option<SrqHandle>) -> Qpn {
    s.rc_qp(16, 0, true, srq)
}

fn up(h: &mut Hca, q: Qpn, peer: [u8; 4], dest: Qpn) {
    rc_up(h, q, peer, dest, (0, 0), 1)
}

#[test]
fn two_qps_share_one_srq_and_the_limit_fires() {
    let mut p = Pair::new();
    let srq = p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let qa = qp_on(&mut p.a, None);
        let qb = qp_on(&mut p.b, Some(srq));
        up(&mut p.a.hca, qa, [10, 0, 0, 2], qb);
        up(&mut p.b.hca, qb, [10, 0, 0, 1], qa);
        pairs.push((qa, qb));
    }
    for i in 0..4u64 {
        let wr = RecvWr::new(i, p.b.addr(1024 * i), 1024, p.b.mr.lkey);
        p.b.hca.post_srq_recv(srq, wr).unwrap();
    }
    assert_eq!(
        p.b.hca.post_recv(pairs[0].1, RecvWr::new(9, p.b.addr(0), 8, p.b.mr.lkey)),
        Err(PostRecvError::UsesSrq)
    );
    p.b.hca.modify_srq(srq, 3).unwrap();
    p.b.hca.req_notify_cq(p.b.cq, false).unwrap();
    for (k, (qa, _)) in pairs.iter().enumerate() {
        p.a.write_mem(0, &[k as u8 + 1; 8]);
        let wr = SendWr::new(k as u64, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey);
        p.a.hca.post_send(*qa, wr).unwrap();
        p.run();
    }
    let wb = p.b.poll();
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.qp_num)).collect::<Vec<_>>(),
        vec![(0, pairs[0].1.value()), (1, pairs[1].1.value())]
    );
    assert_eq!(p.b.read_mem(0, 8), vec![1; 8]);
    assert_eq!(p.b.read_mem(1024, 8), vec![2; 8]);
    // 4 → 3 → 2 left: below the limit 3 once, event once, limit disarmed
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::SrqLimitReached(srq)));
    assert_eq!(p.b.hca.poll_async_event(), None);
    assert_eq!(p.b.hca.query_srq(srq).unwrap().1, 2);
    assert_eq!(p.b.hca.query_srq(srq).unwrap().0.srq_limit, 0);
    // the armed CQ notified once (one-shot)
    assert_eq!(p.b.hca.poll_comp_event(), Some(p.b.cq));
    assert_eq!(p.b.hca.poll_comp_event(), None);
    assert!(matches!(p.b.hca.destroy_srq(srq), Err(DestroySrqError::InUse { users: 2, .. })));
    for (_, qb) in &pairs {
        p.b.hca.destroy_qp(*qb).unwrap();
    }
    p.b.hca.destroy_srq(srq).unwrap();
}

#[test]
fn empty_srq_means_rnr() {
    let mut p = Pair::new();
    let srq = p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
    let qa = qp_on(&mut p.a, None);
    let qb = qp_on(&mut p.b, Some(srq));
    up(&mut p.a.hca, qa, [10, 0, 0, 2], qb);
    up(&mut p.b.hca, qb, [10, 0, 0, 1], qa);
    let wr = SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey);
    p.a.hca.post_send(qa, wr).unwrap();
    p.run_with(Instant::from_micros(15), |_, _| Action::Deliver);
    assert_eq!(p.b.counters().send_rnr_err, 2);
    p.b.hca.post_srq_recv(srq, RecvWr::new(5, p.b.addr(0), 64, p.b.mr.lkey)).unwrap();
    p.run();
    assert_eq!(p.b.poll()[0].wr_id, 5);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(
        p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 4 }),
        Err(CreateSrqError::BadLimit { limit: 4, max_wr: 4 })
    );
}

// ---- XRC (roce_emulator::xrc) ----

/// Move datagrams between A and B until neither sends; every one that
/// went A->B or B->A, parsed.
fn exchange(p: &mut Pair) -> Vec<(char, roce_packet::RoceRepr)> {
    let mut seen = Vec::new();
    for _ in 0..100 {
        let mut moved = false;
        while let Some(d) = p.a.hca.poll_transmit(p.now) {
            seen.push(('>', roce_packet::RoceRepr::parse_bytes(&d.payload).unwrap().0));
            p.b.hca.handle_datagram(p.now, d);
            moved = true;
        }
        while let Some(d) = p.b.hca.poll_transmit(p.now) {
            seen.push(('<', roce_packet::RoceRepr::parse_bytes(&d.payload).unwrap().0));
            p.a.hca.handle_datagram(p.now, d);
            moved = true;
        }
        if !moved {
            break;
        }
    }
    seen
}

struct Xrc {
    ini: Qpn,
    tgt: Qpn,
    srq1: SrqHandle,
    srq2: SrqHandle,
    cq1: CqHandle,
    cq2: CqHandle,
    xrcd: XrcdHandle,
}

/// A: an XRC initiator; B: an XRC domain with two XRC SRQs (each its own
/// CQ, B's PD) and a target QP; initiator and target connected.
fn xrc_pair(p: &mut Pair) -> Xrc {
    let a_init = qp_init(p.a.pd, p.a.cq, QpType::XrcSend, qp_cap(16, 0), true);
    let ini = p.a.hca.create_qp(a_init).unwrap();
    let xrcd = p.b.hca.alloc_xrcd().unwrap();
    let attr = SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 };
    let cq1 = p.b.hca.create_cq(16).unwrap();
    let cq2 = p.b.hca.create_cq(16).unwrap();
    let srq1 = p.b.hca.create_xrc_srq(p.b.pd, attr, xrcd, cq1).unwrap();
    let srq2 = p.b.hca.create_xrc_srq(p.b.pd, attr, xrcd, cq2).unwrap();
    let tgt = p.b.hca.create_xrc_tgt_qp(xrcd, p.b.pd, p.b.cq).unwrap();
    rc_up(&mut p.a.hca, ini, [10, 0, 0, 2], tgt, (0, 0), 1);
    rc_up(&mut p.b.hca, tgt, [10, 0, 0, 1], ini, (0, 0), 1);
    Xrc { ini, tgt, srq1, srq2, cq1, cq2, xrcd }
}

#[test]
fn xrc_sends_land_in_the_srq_the_xrceth_names_and_complete_on_its_cq() {
    let mut p = Pair::new();
    let x = xrc_pair(&mut p);
    let lkey = p.b.mr.lkey;
    for (srq, off) in [(x.srq1, 0u64), (x.srq2, 1024)] {
        let a = p.b.addr(off);
        p.b.hca.post_srq_recv(srq, RecvWr::new(7 + off, a, 512, lkey)).unwrap();
    }
    p.a.write_mem(0, &pattern(100, 3));
    p.a.write_mem(200, &pattern(60, 4));
    let to = |srq: SrqHandle, off: u64, len: u32, id: u64, p: &Pair| {
        SendWr::new(id, WrOpcode::Send).sge(p.a.addr(off), len, p.a.mr.lkey).xrc(srq.id())
    };
    let w1 = to(x.srq2, 0, 100, 1, &p);
    p.a.hca.post_send(x.ini, w1).unwrap();
    let w2 = to(x.srq1, 200, 60, 2, &p);
    p.a.hca.post_send(x.ini, w2).unwrap();
    let wire = exchange(&mut p);
    // the requests: XRC SEND ONLY (0xA4) with the XRCETH; the ACKs: 0xB1
    let reqs: Vec<_> = wire.iter().filter(|(d, _)| *d == '>').map(|(_, r)| r).collect();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].bth.opcode, roce_packet::Opcode(0xA4));
    assert_eq!(reqs[0].xrceth, Some(x.srq2.id()));
    assert_eq!(reqs[1].xrceth, Some(x.srq1.id()));
    assert_eq!(reqs[0].bth.dest_qp, x.tgt);
    assert!(wire.iter().any(|(d, r)| *d == '<' && r.bth.opcode == roce_packet::Opcode(0xB1)));
    let c2 = p.b.hca.poll_cq(x.cq2, 8).unwrap();
    let c1 = p.b.hca.poll_cq(x.cq1, 8).unwrap();
    assert_eq!((c2.len(), c1.len()), (1, 1));
    assert_eq!((c2[0].wr_id, c2[0].byte_len, c2[0].status), (7 + 1024, 100, WcStatus::Success));
    assert_eq!((c1[0].wr_id, c1[0].byte_len), (7, 60));
    assert_eq!(c2[0].qp_num, x.tgt.value(), "the receive completes for the target QP");
    assert_eq!(p.b.read_mem(1024, 100), pattern(100, 3));
    assert_eq!(p.b.read_mem(0, 60), pattern(60, 4));
    // nothing on B's own CQ; A's sends both complete
    assert!(p.b.poll().is_empty());
    let a = p.a.poll();
    assert_eq!(
        a.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    // the domain is busy while SRQs and the target use it
    assert!(matches!(p.b.hca.dealloc_xrcd(x.xrcd), Err(XrcError::InUse { users: 3, .. })));
}

#[test]
fn xrc_write_and_read_use_the_srqs_pd_and_a_foreign_srq_is_an_invalid_request() {
    let mut p = Pair::new();
    let x = xrc_pair(&mut p);
    p.a.write_mem(0, &pattern(300, 9));
    let rkey = p.b.mr.rkey;
    let w = SendWr::new(1, WrOpcode::RdmaWrite)
        .sge(p.a.addr(0), 300, p.a.mr.lkey)
        .remote(p.b.addr(2048), rkey)
        .xrc(x.srq1.id());
    p.a.hca.post_send(x.ini, w).unwrap();
    p.b.write_mem(4096, &pattern(40, 5));
    let r = SendWr::new(2, WrOpcode::RdmaRead)
        .sge(p.a.addr(1024), 40, p.a.mr.lkey)
        .remote(p.b.addr(4096), rkey)
        .xrc(x.srq1.id());
    p.a.hca.post_send(x.ini, r).unwrap();
    let wire = exchange(&mut p);
    assert!(wire.iter().any(|(d, r)| *d == '>' && r.bth.opcode == roce_packet::Opcode(0xAA)));
    assert!(wire.iter().any(|(d, r)| *d == '>' && r.bth.opcode == roce_packet::Opcode(0xAC)));
    assert!(wire.iter().any(|(d, r)| *d == '<' && r.bth.opcode == roce_packet::Opcode(0xB0)));
    assert_eq!(p.b.read_mem(2048, 300), pattern(300, 9));
    assert_eq!(p.a.read_mem(1024, 40), pattern(40, 5));
    assert!(p.a.poll().iter().all(|w| w.status == WcStatus::Success));
    // an SRQ of another domain: NAK invalid request, the initiator's WR fails
    let other = p.b.hca.alloc_xrcd().unwrap();
    let cq = p.b.hca.create_cq(4).unwrap();
    let attr = SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 };
    let foreign = p.b.hca.create_xrc_srq(p.b.pd, attr, other, cq).unwrap();
    let w = SendWr::new(3, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey).xrc(foreign.id());
    p.a.hca.post_send(x.ini, w).unwrap();
    exchange(&mut p);
    let a = p.a.poll();
    assert_eq!(a.last().map(|w| (w.wr_id, w.status)), Some((3, WcStatus::RemInvReqErr)));
    assert_eq!(p.b.hca.qp_state(x.tgt), Some(QpState::Err));
}

#[test]
fn xrc_requests_to_an_rc_qp_and_responses_to_a_target_are_dropped() {
    let mut p = Pair::new();
    let x = xrc_pair(&mut p);
    // an XRC request to B's RC QP: the transport check drops it
    let r = sized(&request(roce_packet::Opcode(0xA4), p.b.qpn, 0), 8);
    let mut r = r;
    r.xrceth = Some(x.srq1.id());
    let d = a_to_b().datagram(&r, &[1; 8]);
    p.to_b(d);
    // an XRC ACK to the target: dropped too (a target only takes requests)
    let mut ack = request(roce_packet::Opcode(0xB1), x.tgt, 0);
    ack.aeth = Some(roce_packet::AethRepr {
        syndrome: roce_packet::Syndrome::Ack { credit: 31 },
        msn: roce_packet::Msn::new(0),
    });
    p.to_b(a_to_b().datagram(&ack, &[]));
    assert_eq!(p.b.counters().bad_opcode, 2);
}
