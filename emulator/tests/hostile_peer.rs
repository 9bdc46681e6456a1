//! A hostile (or buggy) peer: crafted requests with a valid ICRC, the right
//! QPN and the expected PSN, sent straight into B's responder. Each case
//! asserts the IBA outcome — the NAK code or a silent drop, the counter,
//! the QP state — and that no byte of B's memory moved: the whole region,
//! a region of another PD and a deregistered one are compared before and
//! after.

use roce_emulator::*;
use roce_packet::opcode::OpKind;
use roce_packet::{
    AtomicEthRepr, DethRepr, ExtHeader, NakCode, Opcode, Psn, QKey, Qpn, RKey, RethRepr, RoceRepr,
    Syndrome,
};
use roce_sim::testkit::*;

/// B under attack, with a snapshot of every byte it owns.
struct Target {
    p: Pair,
    /// A region of another PD on B (all rights).
    other: MrInfo,
    /// A region that was registered then deregistered (its old keys).
    gone: MrInfo,
    before: Vec<u8>,
    before_other: Vec<u8>,
    psn: u32,
}

fn target(o: Opts) -> Target {
    let mut p = Pair::with(o);
    let before = pattern(o.mr_len, 7);
    p.b.write_mem(0, &before);
    let pd2 = p.b.hca.alloc_pd().unwrap();
    let other = p.b.hca.reg_mr(pd2, 4096, ALL_ACCESS).unwrap();
    p.b.hca.mr_write(other.handle, 0, &[0xAB; 4096]).unwrap();
    let gone = p.b.hca.reg_mr(p.b.pd, 4096, ALL_ACCESS).unwrap();
    p.b.hca.dereg_mr(gone.handle).unwrap();
    let before_other = vec![0xAB; 4096];
    Target { p, other, gone, before, before_other, psn: o.a_psn }
}

impl Target {
    fn req(&self, opcode: Opcode) -> RoceRepr {
        request(opcode, self.p.b.qpn, self.psn)
    }

    /// Send `r` with `payload` to B; returns what B sent back.
    fn inject(&mut self, r: &RoceRepr, payload: &[u8]) -> Vec<RoceRepr> {
        self.p.to_b(a_to_b().sized(r, payload))
    }

    fn naks(out: &[RoceRepr]) -> Vec<NakCode> {
        out.iter()
            .filter_map(|r| match r.aeth.map(|a| a.syndrome) {
                Some(Syndrome::Nak(c)) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// No byte of B's memory changed: its region, the other PD's region.
    fn untouched(&self) {
        let len = self.before.len();
        assert!(self.p.b.read_mem(0, len) == self.before, "B's region changed");
        let mut o = vec![0u8; 4096];
        self.p.b.hca.mr_read(self.other.handle, 0, &mut o).unwrap();
        assert!(o == self.before_other, "the other PD's region changed");
    }

    fn state(&self) -> QpState {
        self.p.b.hca.qp_state(self.p.b.qpn).unwrap()
    }

    fn write_only(&self, va: u64, rkey: RKey, dma_len: u32) -> RoceRepr {
        let mut r = self.req(Opcode::RC_RDMA_WRITE_ONLY);
        r.reth = Some(RethRepr { va, rkey, dma_len });
        r
    }

    /// One RDMA WRITE ONLY of `data`; asserts the NAK and that nothing
    /// moved.
    fn write_refused(&mut self, va: u64, rkey: RKey, dma_len: u32, data: &[u8], want: NakCode) {
        let r = self.write_only(va, rkey, dma_len);
        let out = self.inject(&r, data);
        assert_eq!(Self::naks(&out), vec![want], "{out:?}");
        self.untouched();
        assert_eq!(self.state(), QpState::Err, "class B/C/D errors move the responder to ERR");
    }
}

fn is_read_response(r: &RoceRepr) -> bool {
    r.bth.opcode.info().is_some_and(|i| i.kind == OpKind::ReadResponse)
}

#[test]
fn write_with_a_wrong_rkey() {
    let mut t = target(Opts::default());
    let bad = RKey::new(t.p.b.mr.rkey.value() ^ 0x0101_0000);
    let va = t.p.b.addr(0);
    t.write_refused(va, bad, 64, &[1; 64], NakCode::RemoteAccessError);
}

#[test]
fn write_past_the_end_of_the_region() {
    let mut t = target(Opts::default());
    let (rkey, end) = (t.p.b.mr.rkey, t.p.b.addr(t.p.b.mr.length));
    t.write_refused(end - 32, rkey, 64, &[2; 64], NakCode::RemoteAccessError);
}

#[test]
fn write_whose_va_plus_length_wraps_around_2_pow_64() {
    let mut t = target(Opts::default());
    let rkey = t.p.b.mr.rkey;
    t.write_refused(u64::MAX - 15, rkey, 64, &[3; 64], NakCode::RemoteAccessError);
}

#[test]
fn write_announcing_2_gib_into_a_4_kib_region() {
    let mut t = target(Opts { mr_len: 4096, ..Opts::default() });
    let (rkey, va) = (t.p.b.mr.rkey, t.p.b.addr(0));
    // a FIRST packet announcing 2 GiB: refused before any byte is placed
    let mut r = t.req(Opcode::RC_RDMA_WRITE_FIRST);
    r.reth = Some(RethRepr { va, rkey, dma_len: 1 << 31 });
    let out = t.inject(&r, &[4; 1024]);
    assert_eq!(Target::naks(&out), vec![NakCode::RemoteAccessError], "{out:?}");
    t.untouched();
}

#[test]
fn write_into_a_region_of_another_pd() {
    let mut t = target(Opts::default());
    let (rkey, va) = (t.other.rkey, t.other.addr);
    t.write_refused(va, rkey, 64, &[5; 64], NakCode::RemoteAccessError);
}

#[test]
fn write_into_a_deregistered_region() {
    let mut t = target(Opts::default());
    let (rkey, va) = (t.gone.rkey, t.gone.addr);
    t.write_refused(va, rkey, 64, &[6; 64], NakCode::RemoteAccessError);
}

#[test]
fn write_through_an_invalidated_memory_window() {
    let mut t = target(Opts::default());
    let p = &mut t.p;
    // a type 2 window over B's region with MW_BIND, bound then invalidated
    let mr = p.b.hca.reg_mr(p.b.pd, 4096, ALL_ACCESS | AccessFlags::MW_BIND).unwrap();
    let (mw, rk) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let new = RKey::new((rk.value() & !0xFF) | ((rk.value() + 1) & 0xFF));
    let bind =
        MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: AccessFlags::REMOTE_WRITE };
    let wr = SendWr::new(9, WrOpcode::BindMw { mw, rkey: new, bind });
    p.b.hca.post_send(p.b.qpn, wr).unwrap();
    let wr = SendWr::new(10, WrOpcode::LocalInv { rkey: new });
    p.b.hca.post_send(p.b.qpn, wr).unwrap();
    while p.b.hca.poll_transmit(Instant::ZERO).is_some() {}
    let wcs = p.b.poll();
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let before_mr = p.b.hca.mr_info(mr.handle).map(|_| {
        let mut v = vec![0u8; 4096];
        p.b.hca.mr_read(mr.handle, 0, &mut v).unwrap();
        v
    });
    t.write_refused(mr.addr, new, 64, &[7; 64], NakCode::RemoteAccessError);
    let mut v = vec![0u8; 4096];
    t.p.b.hca.mr_read(mr.handle, 0, &mut v).unwrap();
    assert_eq!(Some(v), before_mr, "the window's region changed");
}

#[test]
fn read_with_a_wrong_rkey_gets_a_nak_and_no_data() {
    let mut t = target(Opts::default());
    let mut r = t.req(Opcode::RC_RDMA_READ_REQUEST);
    r.reth = Some(RethRepr { va: t.p.b.addr(0), rkey: RKey::new(0xdead_be00), dma_len: 4096 });
    let out = t.inject(&r, &[]);
    assert_eq!(Target::naks(&out), vec![NakCode::RemoteAccessError]);
    assert!(out.iter().all(|r| !is_read_response(r)), "{out:?}");
    t.untouched();
}

#[test]
fn unaligned_atomic_is_an_invalid_request() {
    let mut t = target(Opts::default());
    let mut r = t.req(Opcode::RC_FETCH_ADD);
    let (va, rkey) = (t.p.b.addr(3), t.p.b.mr.rkey);
    r.atomic_eth = Some(AtomicEthRepr { va, rkey, swap_add: 1, compare: 0 });
    let out = t.inject(&r, &[]);
    assert_eq!(Target::naks(&out), vec![NakCode::InvalidRequest]);
    t.untouched();
}

#[test]
fn atomic_on_a_region_without_remote_atomic() {
    let mut t = target(Opts::default());
    let ro = t.p.b.hca.reg_mr(t.p.b.pd, 4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ);
    let ro = ro.unwrap();
    let mut r = t.req(Opcode::RC_COMPARE_SWAP);
    r.atomic_eth = Some(AtomicEthRepr { va: ro.addr, rkey: ro.rkey, swap_add: 9, compare: 0 });
    let out = t.inject(&r, &[]);
    assert_eq!(Target::naks(&out), vec![NakCode::RemoteAccessError]);
    let mut v = vec![1u8; 8];
    t.p.b.hca.mr_read(ro.handle, 0, &mut v).unwrap();
    assert_eq!(v, vec![0; 8], "the word was not swapped");
    t.untouched();
}

#[test]
fn atomic_on_a_qp_without_remote_atomic_access() {
    let o = Opts {
        qp_access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..Opts::default()
    };
    let mut t = target(o);
    let mut r = t.req(Opcode::RC_FETCH_ADD);
    r.atomic_eth =
        Some(AtomicEthRepr { va: t.p.b.addr(0), rkey: t.p.b.mr.rkey, swap_add: 1, compare: 0 });
    let out = t.inject(&r, &[]);
    assert_eq!(Target::naks(&out), vec![NakCode::InvalidRequest]);
    t.untouched();
}

#[test]
fn send_longer_than_the_posted_receive() {
    let mut t = target(Opts::default());
    t.p.b.post_recv(77, 0, 100);
    let out = t.inject(&t.req(Opcode::RC_SEND_ONLY), &[8; 200]);
    assert_eq!(Target::naks(&out), vec![NakCode::InvalidRequest]);
    let wcs = t.p.b.poll();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (77, WcStatus::LocLenErr));
    t.untouched();
}

#[test]
fn psn_far_ahead_gets_one_sequence_nak_and_nothing_moves() {
    let mut t = target(Opts::default());
    t.p.b.post_recv(1, 0, 4096);
    let base = t.psn;
    t.psn = (base + 0x40_0000) & 0xFF_FFFF;
    let r = t.write_only(t.p.b.addr(0), t.p.b.mr.rkey, 16);
    let out = t.inject(&r, &[9; 16]);
    assert_eq!(Target::naks(&out), vec![NakCode::PsnSequenceError]);
    // a second one: no second NAK for the same gap
    let out = t.inject(&r, &[9; 16]);
    assert!(Target::naks(&out).is_empty(), "{out:?}");
    assert_eq!(t.p.b.counters().out_of_seq_request, 2);
    t.untouched();
    assert_eq!(t.state(), QpState::Rts, "a sequence error is not fatal");
}

#[test]
fn psn_behind_is_a_duplicate_acked_again_never_executed_twice() {
    let mut t = target(Opts::default());
    t.p.b.post_recv(1, 0, 4096);
    t.p.b.post_recv(2, 4096, 4096);
    let out = t.inject(&t.req(Opcode::RC_SEND_ONLY), &[10; 32]);
    assert!(out.iter().any(|r| matches!(r.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }))));
    let placed = t.p.b.read_mem(0, 32);
    assert_eq!(placed, vec![10; 32]);
    // the same PSN again, other bytes: acknowledged, not delivered again
    let out = t.inject(&t.req(Opcode::RC_SEND_ONLY), &[11; 32]);
    assert!(out.iter().any(|r| matches!(r.aeth.map(|a| a.syndrome), Some(Syndrome::Ack { .. }))));
    assert_eq!(t.p.b.counters().duplicate_request, 1);
    assert_eq!(t.p.b.poll().len(), 1, "one receive completed");
    assert_eq!(t.p.b.read_mem(4096, 32), t.before[4096..4096 + 32].to_vec());
}

#[test]
fn duplicate_read_for_a_request_that_never_happened_is_dropped() {
    let mut t = target(Opts::default());
    t.psn = (t.psn + 0xFF_FFFF) & 0xFF_FFFF; // one behind the expected PSN
    let mut r = t.req(Opcode::RC_RDMA_READ_REQUEST);
    r.reth = Some(RethRepr { va: t.p.b.addr(0), rkey: t.p.b.mr.rkey, dma_len: 64 });
    let out = t.inject(&r, &[]);
    assert!(out.iter().all(|r| !is_read_response(r)), "no data leaks: {out:?}");
    assert_eq!(t.p.b.counters().duplicate_request, 1);
    t.untouched();
    assert_eq!(t.state(), QpState::Rts);
}

#[test]
fn middle_without_first_and_first_after_first() {
    let mut t = target(Opts::default());
    t.p.b.post_recv(1, 0, 8192);
    let out = t.inject(&t.req(Opcode::RC_SEND_MIDDLE), &[12; 1024]);
    assert_eq!(Target::naks(&out), vec![NakCode::InvalidRequest]);
    t.untouched();
    assert_eq!(t.state(), QpState::Err);

    let mut t = target(Opts::default());
    t.p.b.post_recv(1, 0, 8192);
    assert!(Target::naks(&t.inject(&t.req(Opcode::RC_SEND_FIRST), &[13; 1024])).is_empty());
    t.psn += 1;
    let out = t.inject(&t.req(Opcode::RC_SEND_FIRST), &[14; 1024]);
    assert_eq!(Target::naks(&out), vec![NakCode::InvalidRequest]);
    let wcs = t.p.b.poll();
    assert_eq!(wcs[0].status, WcStatus::RemInvReqErr, "{wcs:?}");
}

#[test]
fn read_on_uc_and_write_on_ud_are_dropped() {
    // UC: a READ REQUEST opcode (RC only) addressed to a UC QP
    let mut t = target(Opts { qp_type: QpType::Uc, ..Opts::default() });
    let mut r = t.req(Opcode::RC_RDMA_READ_REQUEST);
    r.reth = Some(RethRepr { va: t.p.b.addr(0), rkey: t.p.b.mr.rkey, dma_len: 64 });
    let out = t.inject(&r, &[]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(t.p.b.counters().bad_opcode, 1);
    t.untouched();
    // UD: a WRITE (there is no UD WRITE opcode: the RC one) to a UD QP
    let mut t = target(Opts { qp_type: QpType::Ud, ..Opts::default() });
    let mut r = t.write_only(t.p.b.addr(0), t.p.b.mr.rkey, 16);
    r.deth =
        Some(DethRepr { qkey: QKey::new(UD_QKEY), src_qp: Qpn::new(t.p.a.qpn.value()), resv8: 0 });
    let out = t.inject(&r, &[15; 16]);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(t.p.b.counters().bad_opcode, 1);
    t.untouched();
}

#[test]
fn a_flood_of_valid_icrc_garbage_changes_nothing() {
    let mut t = target(Opts::default());
    t.p.b.post_recv(1, 0, 4096);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let ops = [
        Opcode::RC_RDMA_WRITE_ONLY,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_COMPARE_SWAP,
        Opcode::RC_FETCH_ADD,
        Opcode::RC_SEND_LAST,
    ];
    for i in 0..20_000u32 {
        let op = ops[(next() % ops.len() as u64) as usize];
        let mut r = t.req(op);
        r.bth.psn = Psn::new((t.psn + (next() % 64) as u32) & 0xFF_FFFF);
        // keys that are never B's own: nothing may be written
        let rkey = RKey::new((next() as u32) | 1);
        let rkey = if rkey == t.p.b.mr.rkey { RKey::new(rkey.value() ^ 2) } else { rkey };
        let va = next();
        if op.info().is_some_and(|i| i.headers.contains(ExtHeader::Reth)) {
            r.reth = Some(RethRepr { va, rkey, dma_len: (next() % 8192) as u32 });
        }
        if op == Opcode::RC_COMPARE_SWAP || op == Opcode::RC_FETCH_ADD {
            r.atomic_eth = Some(AtomicEthRepr { va, rkey, swap_add: next(), compare: next() });
        }
        let len = match op.info() {
            Some(i) if !i.has_payload => 0,
            _ if op == Opcode::RC_RDMA_WRITE_MIDDLE => 1024,
            _ => (next() % 300) as usize,
        };
        let payload = vec![(i & 0xFF) as u8; len];
        t.inject(&r, &payload);
        if i % 1000 == 999 {
            // keep the QP usable: back to RTS with the same expected PSN
            t.p.reconnect();
            t.p.b.post_recv(1, 0, 4096);
        }
    }
    t.untouched();
    let c = t.p.b.counters();
    // every datagram counted exactly once: taken in, or dropped at a QP in
    // ERR (each bad request moves it there until the next reconnect)
    assert_eq!(c.rcvd_pkts + c.bad_state, 20_000, "{c}");
    assert!(c.naks_sent >= 20 && c.out_of_seq_request > 0, "{c}");
}
