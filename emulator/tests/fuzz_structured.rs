//! Structured random input: well-framed packets (valid ICRC, right QPN)
//! with random opcodes, PSNs near the expected one, random keys, addresses
//! and lengths, into both the responder and the completer. Nothing may
//! panic, and the devices must keep working afterwards.

use roce_emulator::*;
use roce_packet::{
    opcode::TABLE, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, ExtHeader, Msn, Opcode, Psn,
    RKey, RethRepr, RoceRepr, Syndrome, Transport,
};
use roce_sim::testkit::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 17
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Crafted packets from A to B (or B to A), UDP source port 0xC001.
fn from(a: bool) -> PacketBuilder {
    let b = if a { a_to_b() } else { b_to_a() };
    b.src_port(0xC001)
}

/// Receives on B (`recvs` of them, of 1024, 2024 or 3024 bytes) and work
/// outstanding on A (`sends` SENDs of 3000 bytes and as many READs of 2048)
/// so responses have something to match.
fn outstanding_work(p: &mut Pair, recvs: u64, sends: u64) {
    for i in 0..recvs {
        p.b.post_recv(i, 1024 * i, 1024 + (i as u32 % 3) * 1000);
    }
    for i in 0..sends {
        p.a.send(i, 0, 3000);
        let wr = p.one_sided(100 + i, WrOpcode::RdmaRead, 65536, 2048, 0);
        p.a.post(wr);
    }
}

/// A random well-framed RC packet of opcode `op`: to B when `op` is a
/// request (half the time at the PSN B expects), else to A; random length,
/// key (half the time B's), address and extension headers. Returns it, its
/// payload and whether it goes to B.
fn random_rc_packet(rng: &mut Rng, op: Opcode, p: &Pair) -> (RoceRepr, Vec<u8>, bool) {
    let info = op.info().unwrap();
    let to_b = info.is_request();
    let (dst_qp, base) = if to_b { (p.b.qpn, 0x100) } else { (p.a.qpn, 0x100) };
    // half the time exactly the PSN the responder expects
    let epsn = p.b.hca.query_qp(p.b.qpn).unwrap().0.rq_psn;
    let psn = if to_b && rng.below(2) == 0 {
        Psn::new(epsn)
    } else {
        Psn::new(base).add(rng.below(40) as u32).sub(8)
    };
    let len = if info.has_payload {
        [0usize, 1, 3, 4, 1023, 1024, 1025, 2048][rng.below(8) as usize]
    } else {
        0
    };
    let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    let rkey = if rng.below(2) == 0 { p.b.mr.rkey } else { RKey::new(rng.next() as u32) };
    let va = match rng.below(4) {
        0 => u64::MAX - rng.below(64),
        1 => rng.next(),
        _ => p.b.addr(rng.below(1 << 20)) & !7,
    };
    let mut r = RoceRepr {
        bth: BthRepr {
            opcode: op,
            dest_qp: dst_qp,
            psn,
            ack_req: rng.below(2) == 0,
            pad_count: roce_packet::pad_for(len),
            ..BthRepr::default()
        },
        payload_len: len,
        ..RoceRepr::default()
    };
    let h = info.headers;
    if h.contains(ExtHeader::Reth) {
        r.reth = Some(RethRepr { va, rkey, dma_len: rng.below(5000) as u32 });
    }
    if h.contains(ExtHeader::AtomicEth) {
        r.atomic_eth = Some(AtomicEthRepr { va, rkey, swap_add: rng.next(), compare: rng.next() });
    }
    if h.contains(ExtHeader::Aeth) {
        r.aeth = Some(AethRepr {
            syndrome: Syndrome::from_u8(rng.below(256) as u8),
            msn: Msn::new(rng.next() as u32),
        });
    }
    if h.contains(ExtHeader::AtomicAckEth) {
        r.atomic_ack_eth = Some(AtomicAckEthRepr { orig_rem_data: rng.next() });
    }
    if h.contains(ExtHeader::ImmDt) {
        r.immdt = Some(rng.next() as u32);
    }
    if h.contains(ExtHeader::Ieth) {
        r.ieth = Some(RKey::new(rng.next() as u32));
    }
    if h.contains(ExtHeader::Feth) {
        r.feth = Some(rng.next() as u32);
    }
    (r, payload, to_b)
}

/// Both devices' completions taken, their packets sent (10,000 at most
/// each) and, one time in 16, their timers fired at `now`.
fn pump(p: &mut Pair, rng: &mut Rng, now: Instant) {
    let _ = p.a.hca.poll_cq(p.a.cq, 1000);
    let _ = p.b.hca.poll_cq(p.b.cq, 1000);
    for h in [&mut p.a.hca, &mut p.b.hca] {
        let mut n = 0;
        while h.poll_transmit(now).is_some() && n < 10_000 {
            n += 1;
        }
        if rng.below(16) == 0 {
            h.handle_timeout(now);
        }
    }
}

#[test]
fn random_well_framed_packets_never_panic() {
    let rc_ops: Vec<Opcode> = (0u8..=0x1F)
        .map(Opcode)
        .filter(|o| TABLE[o.0 as usize].is_some_and(|i| i.transport == Transport::Rc))
        .collect();
    for seed in 0..8u64 {
        let mut rng = Rng(seed * 7919 + 1);
        let mut p = Pair::new();
        outstanding_work(&mut p, 64, 8);
        while p.a.hca.poll_transmit(Instant::ZERO).is_some() {}
        let mut resets = 0;
        for _ in 0..3000 {
            let op = rc_ops[rng.below(rc_ops.len() as u64) as usize];
            let (r, payload, to_b) = random_rc_packet(&mut rng, op, &p);
            let now = Instant::from_micros(rng.below(1_000_000));
            let dev = if to_b { &mut p.b.hca } else { &mut p.a.hca };
            dev.handle_datagram(now, from(to_b).datagram(&r, &payload));
            if p.a.hca.qp_state(p.a.qpn) == Some(QpState::Err)
                || p.b.hca.qp_state(p.b.qpn) == Some(QpState::Err)
            {
                resets += 1;
                p.reconnect();
                outstanding_work(&mut p, 8, 4);
            }
            pump(&mut p, &mut rng, now);
        }
        assert!(resets > 10, "{resets}");
        // both sides still answer verbs and account for every packet
        let (ca, cb) = (p.a.counters(), p.b.counters());
        assert_eq!(ca.cq_overflow + cb.cq_overflow, 0);
        assert!(cb.rdma_recvs > 0 && cb.naks_sent > 0 && cb.duplicate_request > 0, "{cb}");
        assert!(ca.rcvd_pkts + ca.bad_state + ca.bad_opcode > 0, "{ca}");
        assert!(cb.rcvd_pkts + cb.bad_state + cb.bad_opcode > 0, "{cb}");
        let _ = p.a.hca.poll_cq(p.a.cq, 1000);
        let _ = p.b.hca.poll_cq(p.b.cq, 1000);
        assert!(p.a.hca.query_qp(p.a.qpn).is_ok());
    }
}

#[test]
fn random_packets_to_uc_and_ud_qps_never_panic() {
    let ops: Vec<Opcode> = (0u8..=0x7F)
        .map(Opcode)
        .filter(|o| TABLE[o.0 as usize].is_some_and(|i| i.is_request()))
        .collect();
    for qp_type in [QpType::Uc, QpType::Ud] {
        let mut rng = Rng(0xfeed);
        let mut p = Pair::with(Opts { qp_type, ..Opts::default() });
        for _ in 0..3000 {
            if p.b.hca.query_qp(p.b.qpn).unwrap().0.qp_state != Some(QpState::Rts) {
                p.reconnect();
            }
            if rng.below(4) == 0 {
                let i = rng.below(64);
                let _ = p.b.hca.post_recv(
                    p.b.qpn,
                    RecvWr::new(i, p.b.addr(2048 * i), 64 + rng.below(3000) as u32, p.b.mr.lkey),
                );
            }
            let op = ops[rng.below(ops.len() as u64) as usize];
            let info = op.info().unwrap();
            let len = if info.has_payload {
                [0usize, 1, 4, 1000, 1024, 1100][rng.below(6) as usize]
            } else {
                0
            };
            let payload: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let epsn = p.b.hca.query_qp(p.b.qpn).unwrap().0.rq_psn;
            let mut r = RoceRepr {
                bth: BthRepr {
                    opcode: op,
                    dest_qp: p.b.qpn,
                    psn: Psn::new(epsn).add(rng.below(4) as u32),
                    pad_count: roce_packet::pad_for(len),
                    ..BthRepr::default()
                },
                payload_len: len,
                ..RoceRepr::default()
            };
            let h = info.headers;
            let rkey = if rng.below(2) == 0 { p.b.mr.rkey } else { RKey::new(rng.next() as u32) };
            let va = p.b.addr(rng.below(1 << 20));
            if h.contains(ExtHeader::Reth) {
                r.reth = Some(RethRepr { va, rkey, dma_len: rng.below(3000) as u32 });
            }
            if h.contains(ExtHeader::AtomicEth) {
                r.atomic_eth = Some(AtomicEthRepr { va, rkey, swap_add: 1, compare: 2 });
            }
            if h.contains(ExtHeader::Deth) {
                let qkey = if rng.below(2) == 0 { UD_QKEY } else { rng.next() as u32 };
                r.deth = Some(roce_packet::DethRepr {
                    qkey: roce_packet::QKey::new(qkey),
                    src_qp: roce_packet::Qpn::new(rng.next() as u32),
                    resv8: 0,
                });
            }
            if h.contains(ExtHeader::Rdeth) {
                r.rdeth = Some(rng.next() as u32);
            }
            if h.contains(ExtHeader::ImmDt) {
                r.immdt = Some(7);
            }
            if h.contains(ExtHeader::Ieth) {
                r.ieth = Some(RKey::new(1));
            }
            if h.contains(ExtHeader::Feth) {
                r.feth = Some(0);
            }
            p.to_b(from(true).datagram(&r, &payload));
            let _ = p.b.hca.poll_cq(p.b.cq, 1000);
        }
        let c = p.b.counters();
        assert!(c.rcvd_pkts > 100 && c.rdma_recvs > 10 && c.bad_opcode > 100, "{qp_type:?} {c}");
        assert_eq!(c.sent_pkts, 0, "UC and UD never answer");
    }
}
