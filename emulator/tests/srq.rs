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

// ---- XRC domains shared by the members of a shared device (roce_emulator::xrc_relay) ----

/// A side of its own: device `name` at `ip`, a shared device's member in
/// `slot` when given (its QPNs and XRC SRQ numbers carry the slot).
fn member(name: &str, ip: [u8; 4], seed: u64, slot: Option<u8>) -> Side {
    let mut cfg = HcaConfig::new(name, std::net::IpAddr::from(ip), seed);
    if let Some(s) = slot {
        let s = u32::from(s);
        cfg.qpns = (s << 16)..((s + 1) << 16);
        cfg.first_qpn = (s << 16) | 0x11;
        cfg.comm_id_tag = Some(slot.unwrap_or(0));
    }
    let mut hca = Hca::new(cfg);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(64).unwrap();
    let mr = hca.reg_mr(pd, 1 << 16, ALL_ACCESS).unwrap();
    Side { hca, pd, cq, mr, qpn: Qpn::new(0) }
}

/// Move datagrams until nobody sends: to 10.0.0.1 the initiator; to
/// 10.0.0.2 the member whose slot is the datagram's byte 5 (as the shared
/// device's steering does). Returns what went to each (`'i'`, `'o'`,
/// `'m'`) with its first byte.
fn shared_exchange(
    i: &mut Side,
    o: &mut Side,
    m: &mut Side,
    (so, sm): (u8, u8),
    now: roce_emulator::Instant,
) -> Vec<(char, bytes::Bytes)> {
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let mut out = Vec::new();
        for s in [&mut *i, &mut *o, &mut *m] {
            s.hca.handle_timeout(now);
            while let Some(d) = s.hca.poll_transmit(now) {
                out.push(d.flatten().unwrap());
            }
        }
        if out.is_empty() {
            return seen;
        }
        for d in out {
            let to = match (d.endpoints.dst == i.hca.addr(), d.payload[5]) {
                (true, _) => 'i',
                (false, s) if s == so => 'o',
                (false, s) if s == sm => 'm',
                (false, s) => panic!("no member in slot {s}"),
            };
            seen.push((to, d.payload.clone()));
            let s = match to {
                'i' => &mut *i,
                'o' => &mut *o,
                _ => &mut *m,
            };
            s.hca.handle_datagram(now, d);
        }
    }
    panic!("still sending after 1000 rounds");
}

/// An initiator (10.0.0.1) and two members of a shared device at
/// 10.0.0.2 (slots 3 and 5) with one XRC domain (opened by one file): the
/// owner has an XRC SRQ and the target QP, the member an XRC SRQ and an
/// SRQ of another file's domain; initiator and target connected.
struct Shared {
    i: Side,
    o: Side,
    m: Side,
    tgt: Qpn,
    ini: Qpn,
    srq_o: SrqHandle,
    srq_m: SrqHandle,
    srq_f: SrqHandle,
    cq_o: CqHandle,
    cq_m: CqHandle,
    cq_f: CqHandle,
}

const SLOTS: (u8, u8) = (3, 5);

impl Shared {
    fn new() -> Shared {
        let i = member("ini", [10, 0, 0, 1], 1, None);
        let mut o = member("owner", [10, 0, 0, 2], 2, Some(SLOTS.0));
        let mut m = member("member", [10, 0, 0, 2], 3, Some(SLOTS.1));
        let key = (0x801, 0x4242);
        let attr = SrqAttr { max_wr: 16, max_sge: 1, srq_limit: 0 };
        let xo = o.hca.alloc_xrcd().unwrap();
        o.hca.set_xrcd_key(xo, key).unwrap();
        let cq_o = o.hca.create_cq(16).unwrap();
        let srq_o = o.hca.create_xrc_srq(o.pd, attr, xo, cq_o).unwrap();
        let tgt = o.hca.create_xrc_tgt_qp(xo, o.pd, o.cq).unwrap();
        let xm = m.hca.alloc_xrcd().unwrap();
        m.hca.set_xrcd_key(xm, key).unwrap();
        let cq_m = m.hca.create_cq(16).unwrap();
        let srq_m = m.hca.create_xrc_srq(m.pd, attr, xm, cq_m).unwrap();
        let xf = m.hca.alloc_xrcd().unwrap();
        m.hca.set_xrcd_key(xf, (0x801, 0x4343)).unwrap();
        let cq_f = m.hca.create_cq(4).unwrap();
        let srq_f = m.hca.create_xrc_srq(m.pd, attr, xf, cq_f).unwrap();
        let mut s =
            Shared { i, o, m, tgt, ini: Qpn::new(0), srq_o, srq_m, srq_f, cq_o, cq_m, cq_f };
        let init = qp_init(s.i.pd, s.i.cq, QpType::XrcSend, qp_cap(32, 0), true);
        s.ini = s.i.hca.create_qp(init).unwrap();
        rc_up(&mut s.i.hca, s.ini, [10, 0, 0, 2], tgt, (0, 0), 4);
        rc_up(&mut s.o.hca, tgt, [10, 0, 0, 1], s.ini, (0, 0), 4);
        s
    }

    /// What went to whom (`'i'`, `'o'`, `'m'`), with its first byte.
    fn exchange(&mut self, now: roce_emulator::Instant) -> Vec<(char, u8)> {
        self.exchange_whole(now).into_iter().map(|(t, b)| (t, b[0])).collect()
    }

    fn exchange_whole(&mut self, now: roce_emulator::Instant) -> Vec<(char, bytes::Bytes)> {
        shared_exchange(&mut self.i, &mut self.o, &mut self.m, SLOTS, now)
    }

    /// A receive of `len` bytes at `off` of the member's region on its SRQ.
    fn member_recv(&mut self, id: u64, off: u64, len: u32) {
        let a = self.m.addr(off);
        self.m.hca.post_srq_recv(self.srq_m, RecvWr::new(id, a, len, self.m.mr.lkey)).unwrap();
    }
}

#[test]
fn a_target_qp_reaches_the_xrc_srq_of_another_member_of_its_domain() {
    let mut s = Shared::new();
    let (srq_o, srq_m, tgt) = (s.srq_o, s.srq_m, s.tgt);
    assert_eq!((srq_o.id() >> 16, srq_m.id() >> 16), (3, 5), "SRQ numbers carry the slot");
    assert_eq!(tgt.value() >> 16, 3);
    for k in 0..3u64 {
        s.member_recv(100 + k, k * 4096, 4096);
    }
    let a = s.o.addr(0);
    s.o.hca.post_srq_recv(srq_o, RecvWr::new(200, a, 4096, s.o.mr.lkey)).unwrap();
    s.i.write_mem(0, &pattern(3000, 1));
    s.i.write_mem(4096, &pattern(300, 2));
    s.m.write_mem(32768, &pattern(2500, 3));
    s.m.write_mem(40960, &7u64.to_le_bytes());
    let (i, m) = (&s.i, &s.m);
    let (lk, rk) = (i.mr.lkey, m.mr.rkey);
    let wrs = [
        SendWr::new(1, WrOpcode::Send).sge(i.addr(0), 100, lk).xrc(srq_m.id()),
        SendWr::new(2, WrOpcode::Send).sge(i.addr(0), 3000, lk).xrc(srq_m.id()),
        SendWr::new(3, WrOpcode::Send).sge(i.addr(4096), 300, lk).xrc(srq_o.id()),
        SendWr::new(4, WrOpcode::RdmaWrite)
            .sge(i.addr(4096), 300, lk)
            .remote(m.addr(20480), rk)
            .xrc(srq_m.id()),
        SendWr::new(5, WrOpcode::RdmaRead)
            .sge(i.addr(8192), 2500, lk)
            .remote(m.addr(32768), rk)
            .xrc(srq_m.id()),
        SendWr { compare_add: 5, ..SendWr::new(6, WrOpcode::AtomicFetchAndAdd) }
            .sge(i.addr(16384), 8, lk)
            .remote(m.addr(40960), rk)
            .xrc(srq_m.id()),
        SendWr::new(7, WrOpcode::SendWithImm)
            .sge(i.addr(4096), 10, lk)
            .with_imm(0xABCD)
            .xrc(srq_m.id()),
    ];
    for w in wrs {
        s.i.hca.post_send(s.ini, w).unwrap();
    }
    let whole = s.exchange_whole(roce_emulator::Instant::ZERO);
    // the AETHs the initiator got count the messages (MSN, bytes 13..16):
    // the last, the atomic's or the WRITE with immediate's, says 7
    let msns: Vec<u32> = whole
        .iter()
        .filter(|(t, b)| *t == 'i' && [0xAD, 0xAF, 0xB0, 0xB1, 0xB2].contains(&b[0]))
        .map(|(_, b)| u32::from_be_bytes([0, b[13], b[14], b[15]]))
        .collect();
    assert!(msns.windows(2).all(|w| w[0] <= w[1]), "MSNs never go back: {msns:?}");
    assert_eq!(msns.last(), Some(&7), "{msns:?}");
    let seen: Vec<(char, u8)> = whole.iter().map(|(t, b)| (*t, b[0])).collect();
    // the member got EXECs, the owner verdicts; the READ responses (XRC
    // READ RESPONSE FIRST 0xAD) came to the initiator from the member
    assert!(seen.iter().any(|&(t, b)| t == 'm' && b == 0xFC));
    assert!(seen.iter().any(|&(t, b)| t == 'o' && b == 0xFC));
    assert!(seen.iter().any(|&(t, b)| t == 'i' && b == 0xAD), "READ RESPONSE FIRST: {seen:x?}");
    let done: Vec<_> = s.i.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(done, (1..=7).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>());
    let got = poll_all(&mut s.m.hca, s.cq_m);
    let got: Vec<_> = got.iter().map(|w| (w.wr_id, w.byte_len, w.qp_num, w.imm)).collect();
    let t = tgt.value();
    assert_eq!(got, vec![(100, 100, t, None), (101, 3000, t, None), (102, 10, t, Some(0xABCD))]);
    assert_eq!(s.m.read_mem(0, 100), pattern(100, 1));
    assert_eq!(s.m.read_mem(4096, 3000), pattern(3000, 1));
    assert_eq!(s.m.read_mem(20480, 300), pattern(300, 2), "WRITE with the member's rkey");
    assert_eq!(s.i.read_mem(8192, 2500), pattern(2500, 3), "READ of the member's memory");
    assert_eq!(s.i.read_mem(16384, 8), 7u64.to_le_bytes(), "FETCH_ADD returns the original");
    assert_eq!(s.m.read_mem(40960, 8), 12u64.to_le_bytes());
    let own = poll_all(&mut s.o.hca, s.cq_o);
    assert_eq!(own.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), vec![(200, 300)]);
    assert_eq!(s.o.read_mem(0, 300), pattern(300, 2));
    let (co, cm) = (s.o.counters(), s.m.counters());
    // 6 messages for the member's SRQ, the 3000-byte SEND in 3 packets
    assert_eq!((co.xrc_relayed_out, cm.xrc_relayed_in), (8, 8));
    assert!(co.xrc_relay_held > 0, "requests waited behind a verdict");
    assert_eq!((co.xrc_relay_dropped, cm.xrc_relay_dropped, co.xrc_relay_timeouts), (0, 0, 0));
}

#[test]
fn a_relayed_request_gets_rnr_and_invalid_request_naks_and_forged_relays_are_dropped() {
    let mut s = Shared::new();
    let t0 = roce_emulator::Instant::ZERO;
    let lk = s.i.mr.lkey;
    // a SEND with no receive WQE on the member's SRQ: RNR NAK (XRC ACK
    // opcode 0xB1) from the owner; once a receive is posted, the retry lands
    let w = SendWr::new(8, WrOpcode::Send).sge(s.i.addr(0), 8, lk).xrc(s.srq_m.id());
    s.i.hca.post_send(s.ini, w).unwrap();
    let seen = s.exchange(t0);
    assert!(seen.iter().any(|&(t, b)| t == 'i' && b == 0xB1), "the RNR NAK");
    assert_eq!((s.o.counters().send_rnr_err, s.i.counters().rcvd_rnr_err), (1, 1));
    assert!(s.i.poll().is_empty());
    s.member_recv(103, 49152, 64);
    let t1 = t0 + core::time::Duration::from_millis(50);
    s.exchange(t1);
    let done: Vec<_> = s.i.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(done, vec![(8, WcStatus::Success)]);
    let got = poll_all(&mut s.m.hca, s.cq_m);
    assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![103]);
    // an SRQ of the member's other domain: NAK invalid request, the
    // initiator's WR fails, the target goes to ERR, nothing lands
    let w = SendWr::new(9, WrOpcode::Send).sge(s.i.addr(0), 8, lk).xrc(s.srq_f.id());
    s.i.hca.post_send(s.ini, w).unwrap();
    s.exchange(t1);
    let done = s.i.poll();
    assert_eq!(done.last().map(|w| (w.wr_id, w.status)), Some((9, WcStatus::RemInvReqErr)));
    assert_eq!(s.o.hca.qp_state(s.tgt), Some(QpState::Err));
    assert!(poll_all(&mut s.m.hca, s.cq_f).is_empty());
    // a relay message from another address is not one: dropped as malformed
    let m = &mut s.m;
    let before = m.counters();
    let mut fake = roce_emulator::Datagram::new(
        roce_packet::UdpEndpoints {
            src: std::net::IpAddr::from([10, 0, 0, 1]),
            dst: std::net::IpAddr::from([10, 0, 0, 2]),
            src_port: 4791,
            dst_port: 4791,
        },
        Default::default(),
        bytes::Bytes::from(vec![
            0xFC, 1, b'X', b'R', 3, 5, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]),
    );
    m.hca.handle_datagram(t1, fake.clone());
    let after = m.counters();
    assert_eq!(after.xrc_relayed_in, before.xrc_relayed_in);
    assert_eq!(after.malformed + after.icrc_err, before.malformed + before.icrc_err + 1);
    // from the device's own address but truncated: counted, no effect
    fake.endpoints.src = fake.endpoints.dst;
    m.hca.handle_datagram(t1, fake);
    assert_eq!(m.counters().xrc_relay_dropped, before.xrc_relay_dropped + 1);
}

#[test]
fn a_member_that_never_answers_is_given_up_and_the_retransmission_goes_through() {
    let mut s = Shared::new();
    let t0 = roce_emulator::Instant::ZERO;
    s.member_recv(100, 0, 64);
    s.member_recv(101, 64, 64);
    s.i.write_mem(0, &pattern(16, 7));
    for id in [1, 2] {
        let w = SendWr::new(id, WrOpcode::Send).sge(s.i.addr(0), 16, s.i.mr.lkey).xrc(s.srq_m.id());
        s.i.hca.post_send(s.ini, w).unwrap();
    }
    // the owner's EXEC is lost (the member never answers): the first SEND
    // waits, the second is held behind it
    let mut execs = 0;
    for _ in 0..10 {
        let mut out = Vec::new();
        for side in [&mut s.i, &mut s.o] {
            while let Some(d) = side.hca.poll_transmit(t0) {
                out.push(d.flatten().unwrap());
            }
        }
        for d in out {
            match (d.endpoints.dst == s.i.hca.addr(), d.payload[0]) {
                (true, _) => s.i.hca.handle_datagram(t0, d),
                (false, 0xFC) => execs += 1,
                (false, _) => s.o.hca.handle_datagram(t0, d),
            }
        }
    }
    assert_eq!(execs, 1);
    assert_eq!(s.o.counters().xrc_relay_held, 1);
    // past the owner's patience and the initiator's timeout: the
    // retransmission is relayed again, the held request dropped (the
    // initiator resends it too), and both land once
    let t1 = t0 + core::time::Duration::from_millis(300);
    s.exchange(t1);
    let c = s.o.counters();
    assert_eq!((c.xrc_relay_timeouts, c.xrc_relay_dropped), (1, 1));
    let done: Vec<_> = s.i.poll().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(done, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let got = poll_all(&mut s.m.hca, s.cq_m);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(),
        vec![(100, 16), (101, 16)]
    );
    assert_eq!(s.m.read_mem(64, 16), pattern(16, 7));
}
