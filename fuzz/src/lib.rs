//! Fuzz harnesses for roce-emu. Each takes arbitrary bytes, drives one
//! part of the project with them and checks invariants after every input
//! (a violated invariant panics, which the fuzzer reports as a crash):
//!
//! * [`packet`]: the wire parser, the frame parser and the pcap/pcapng
//!   reader on arbitrary bytes — no panic, and what parses re-emits.
//! * [`device`]: a live device (RC, UC and UD QPs in RTS, receives posted,
//!   requests outstanding, regions with and without remote rights, a region
//!   of another PD) fed structure-aware datagrams with a valid ICRC and
//!   plausible QPNs, PSNs, keys and addresses, its transmit queue and timers
//!   driven between inputs. Invariants: bytes outside what was granted never
//!   change (the guard region, the other PD's region), no completion names a
//!   work request that was never posted, counters only grow, and the
//!   transmit queue stays bounded.
//! * [`verbs`]: arbitrary sequences of verbs (create, modify, post, poll,
//!   destroy) on a device: errors are values, never panics.
//!
//! * [`dropin`]: the libibverbs drop-in's C entry points (modify_qp with
//!   arbitrary attributes and masks, post_send chains with arbitrary
//!   opcodes, flags, SGEs and keys, post_recv, poll, queries, AHs, windows,
//!   rereg) on two connected devices: no panic inside the library, guard
//!   pages around each region unchanged, no completion for an unposted WR,
//!   every object destroyed cleanly.
//!
//! * [`cm()`]: two connection managers (IBA chapter 12, `roce_cm`) whose MADs
//!   the input delivers, drops, duplicates, corrupts or replaces with its
//!   own bytes, while it makes them listen, connect, accept, reject,
//!   disconnect, destroy and lets time pass. Invariants: no panic, every
//!   event names a connection the engine made, counters only grow, the
//!   transmit queue and the connection table stay within their limits, and
//!   once the input is over and time runs on, every connection ends.
//!
//! `fuzz/afl` turns each into an AFL binary (`fuzz/run.sh`); the ordinary
//! test suite replays the committed corpus (`fuzz/tests/corpus.rs`).

use bytes::Bytes;
use ibverbs::fuzz::In;
use roce_emulator::*;
use roce_packet::{
    AtomicEthRepr, BthRepr, DethRepr, IpMeta, IpUdpHeader, LKey, Opcode, Psn, QKey, Qpn, RKey,
    RethRepr, RoceRepr, UdpEndpoints,
};
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

// ------------------------------------------------------------------ packet

/// The parsers on arbitrary bytes.
pub fn packet(data: &[u8]) {
    if let Ok((r, payload)) = RoceRepr::parse_bytes(data) {
        // what parsed re-emits and parses the same
        if let Ok(b) = r.to_vec(payload) {
            let (r2, p2) = RoceRepr::parse_bytes(&b).expect("re-emitted packet parses");
            assert_eq!(r2.bth, r.bth);
            assert_eq!(p2, payload);
        }
    }
    let _ = roce_packet::frame::parse_frame(roce_packet::frame::LinkType::Ethernet, data, 4791);
    let (frames, _) = roce_pcap::read_capture_partial(data);
    for f in frames {
        let _ = roce_packet::frame::parse_frame(f.linktype, &f.data, 4791);
    }
}

// ------------------------------------------------------------------ device

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const QKEY: u32 = 0x1111_1111;
const PEER_QPNS: [u32; 3] = [0x11, 0x12, 0x13];

struct Dev {
    hca: Hca,
    qps: Vec<(Qpn, QpType, u32)>,
    open: MrInfo,
    guard: MrInfo,
    other: MrInfo,
    keys: Vec<RKey>,
    posted: HashSet<u64>,
    cq: CqHandle,
}

fn setup() -> Dev {
    let mut hca = Hca::new(HcaConfig::new("fuzz", B, 5));
    let pd = hca.alloc_pd().expect("pd");
    let cq = hca.create_cq(4096).expect("cq");
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let open = hca.reg_mr(pd, 65536, all).expect("mr");
    let guard = hca.reg_mr(pd, 4096, AccessFlags::LOCAL_WRITE).expect("guard");
    hca.mr_write(guard.handle, 0, &[0x5A; 4096]).expect("fill");
    let pd2 = hca.alloc_pd().expect("pd2");
    let other = hca.reg_mr(pd2, 4096, all).expect("other");
    hca.mr_write(other.handle, 0, &[0xA5; 4096]).expect("fill");
    let gone = hca.reg_mr(pd, 4096, all).expect("gone");
    hca.dereg_mr(gone.handle).expect("dereg");
    let mut qps = Vec::new();
    for (i, t) in [QpType::Rc, QpType::Uc, QpType::Ud].into_iter().enumerate() {
        let cap = QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        };
        let init = QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: t,
            cap,
            sq_sig_all: true,
            srq: None,
        };
        let q = hca.create_qp(init).expect("qp");
        let base = QpAttr::new().state(QpState::Init).pkey_index(0).port(1);
        let rq_psn = 0x100 * (i as u32 + 1);
        if t == QpType::Ud {
            hca.modify_qp(q, &base.qkey(QKEY)).expect("init");
            hca.modify_qp(q, &QpAttr::new().state(QpState::Rtr)).expect("rtr");
            hca.modify_qp(q, &QpAttr::new().state(QpState::Rts).sq_psn(7)).expect("rts");
        } else {
            let acc = if t == QpType::Uc {
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
            } else {
                all
            };
            hca.modify_qp(q, &base.access_flags(acc)).expect("init");
            let mut rtr = QpAttr::new()
                .state(QpState::Rtr)
                .ah(AhAttr::new(A))
                .mtu(PathMtu::Mtu1024)
                .dest_qpn(PEER_QPNS[i])
                .rq_psn(rq_psn);
            let mut rts = QpAttr::new().state(QpState::Rts).sq_psn(0x900);
            if t == QpType::Rc {
                rtr = rtr.max_dest_rd_atomic(4).min_rnr_timer(1);
                rts = rts.timeout(10).retry_cnt(3).rnr_retry(3).max_rd_atomic(4);
            }
            hca.modify_qp(q, &rtr).expect("rtr");
            hca.modify_qp(q, &rts).expect("rts");
        }
        qps.push((q, t, rq_psn));
    }
    let mut d = Dev {
        keys: vec![open.rkey, guard.rkey, other.rkey, gone.rkey],
        hca,
        qps,
        open,
        guard,
        other,
        posted: HashSet::new(),
        cq,
    };
    // receives on every QP, and outstanding requests from B so that
    // responses and ACKs have something to match
    let mut id = 1;
    for k in 0..d.qps.len() {
        let q = d.qps[k].0;
        for j in 0..8u64 {
            let wr = RecvWr::new(id, d.open.addr + j * 4096, 4096, d.open.lkey);
            if d.hca.post_recv(q, wr).is_ok() {
                d.posted.insert(id);
            }
            id += 1;
        }
    }
    let rc = d.qps[0].0;
    for (j, op) in
        [WrOpcode::Send, WrOpcode::RdmaRead, WrOpcode::AtomicFetchAndAdd].iter().enumerate()
    {
        let len = if op.is_atomic() { 8 } else { 2048 };
        let wr = SendWr::new(1000 + j as u64, *op)
            .sge(d.open.addr + 32768, len, d.open.lkey)
            .remote(0x7000_0000, RKey::new(0x1234));
        if d.hca.post_send(rc, wr).is_ok() {
            d.posted.insert(1000 + j as u64);
        }
    }
    d
}

const OPS: [Opcode; 22] = [
    Opcode::RC_SEND_FIRST,
    Opcode::RC_SEND_MIDDLE,
    Opcode::RC_SEND_LAST,
    Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
    Opcode::RC_SEND_ONLY,
    Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_WRITE_FIRST,
    Opcode::RC_RDMA_WRITE_MIDDLE,
    Opcode::RC_RDMA_WRITE_LAST,
    Opcode::RC_RDMA_WRITE_ONLY,
    Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    Opcode::RC_RDMA_READ_REQUEST,
    Opcode::RC_RDMA_READ_RESPONSE_FIRST,
    Opcode::RC_RDMA_READ_RESPONSE_LAST,
    Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    Opcode::RC_ACKNOWLEDGE,
    Opcode::RC_ATOMIC_ACKNOWLEDGE,
    Opcode::RC_COMPARE_SWAP,
    Opcode::RC_FETCH_ADD,
    Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
    Opcode::RC_FLUSH,
    Opcode::RC_ATOMIC_WRITE,
];

/// One crafted datagram from the input: an opcode (RC, or the UC/UD
/// variant for those QPs), a QP, a PSN near the expected one, keys and
/// addresses mostly from the device's own, and a payload.
fn crafted(d: &Dev, i: &mut In) -> Vec<u8> {
    let sel = i.u8();
    if sel >= 0xF0 {
        return real(d, sel, i);
    }
    let qi = (sel % 4) as usize;
    let (dest, ty, base_psn) = match d.qps.get(qi) {
        Some(&(q, t, p)) => (q, t, p),
        None => (Qpn::new(u32::from(i.u16())), QpType::Rc, 0),
    };
    let mut op = OPS[usize::from(i.u8()) % OPS.len()];
    // the same operation in the QP's transport (UC 0x20.., UD 0x60..)
    match ty {
        QpType::Uc if op.0 <= 0x0B => op = Opcode(op.0 | 0x20),
        QpType::Ud if op.0 == 0x04 || op.0 == 0x05 => op = Opcode(op.0 | 0x60),
        _ => {}
    }
    if i.u8() < 16 {
        op = Opcode(i.u8()); // now and then any opcode at all
    }
    let psn = base_psn.wrapping_add(u32::from(i.u8() % 8)).wrapping_sub(2) & 0xFF_FFFF;
    let mut r = RoceRepr {
        bth: BthRepr {
            opcode: op,
            dest_qp: dest,
            psn: Psn::new(psn),
            ack_req: i.u8() & 1 == 1,
            solicited: i.u8() & 1 == 1,
            ..BthRepr::default()
        },
        ..RoceRepr::default()
    };
    let key =
        if i.u8() < 200 { d.keys[usize::from(i.u8()) % d.keys.len()] } else { RKey::new(i.u32()) };
    let region = [&d.open, &d.guard, &d.other][usize::from(i.u8()) % 3];
    let va = match i.u8() {
        0..=200 => region.addr.wrapping_add(u64::from(i.u16())),
        201..=230 => u64::MAX - u64::from(i.u16()),
        _ => i.u64(),
    };
    let dma_len = match i.u8() {
        0..=200 => u32::from(i.u16()) % 8192,
        _ => i.u32(),
    };
    let payload_len = match i.u8() {
        0..=220 => usize::from(i.u8()) % 72,
        _ => usize::from(i.u16()) % 1100,
    };
    if let Some(info) = op.info() {
        use roce_packet::ExtHeader::*;
        for h in info.headers.iter() {
            match h {
                Reth => r.reth = Some(RethRepr { va, rkey: key, dma_len }),
                AtomicEth => {
                    r.atomic_eth =
                        Some(AtomicEthRepr { va, rkey: key, swap_add: i.u64(), compare: i.u64() })
                }
                Deth => {
                    r.deth = Some(DethRepr {
                        qkey: QKey::new(if i.u8() < 220 { QKEY } else { i.u32() }),
                        src_qp: Qpn::new(PEER_QPNS[2]),
                        resv8: 0,
                    })
                }
                ImmDt => r.immdt = Some(i.u32()),
                Ieth => r.ieth = Some(key),
                Aeth => {
                    r.aeth = Some(roce_packet::AethRepr {
                        syndrome: roce_packet::Syndrome::from_u8(i.u8()),
                        msn: roce_packet::Msn::new(u32::from(i.u16())),
                    })
                }
                AtomicAckEth => {
                    r.atomic_ack_eth =
                        Some(roce_packet::AtomicAckEthRepr { orig_rem_data: i.u64() })
                }
                Feth => r.feth = Some(i.u32()),
                _ => {}
            }
        }
    }
    let payload = if op.info().is_some_and(|x| x.has_payload) {
        let mut p = vec![0u8; payload_len];
        let src = i.take(payload_len);
        p[..src.len()].copy_from_slice(src);
        p
    } else {
        Vec::new()
    };
    r.payload_len = payload.len();
    r.bth.pad_count = ((4 - payload.len() % 4) % 4) as u8;
    let Ok(mut b) = r.to_vec(&payload) else { return Vec::new() };
    let ep = UdpEndpoints { src: A, dst: B, src_port: 0xC000, dst_port: 4791 };
    if let Ok(h) = IpUdpHeader::build(&ep, &IpMeta::default(), b.len()) {
        if i.u8() != 0xFF {
            h.fill_icrc(&mut b); // now and then a bad ICRC
        }
    }
    b
}

/// A real packet from the input (the seeds `seeds-device.py` makes carry
/// the UDP payloads of the captures in `../shared/captures`: kernel rxe's
/// own traffic), aimed at a live QP (mostly one of the packet's transport):
/// its destination QPN rewritten, its PSN moved next to the QP's now and
/// then, its ICRC recomputed unless bit 3 of `sel` says to keep it.
fn real(d: &Dev, sel: u8, i: &mut In) -> Vec<u8> {
    let n = usize::from(i.u16()) % 4200;
    let mut b = i.take(n).to_vec();
    if b.len() < 16 {
        return b; // shorter than a BTH and an ICRC: the parser's business
    }
    // mostly the QP of the packet's own transport (its opcode's top bits)
    let want = match b[0] >> 5 {
        0 => Some(QpType::Rc),
        1 => Some(QpType::Uc),
        3 => Some(QpType::Ud),
        _ => None,
    };
    let same = d.qps.iter().find(|q| Some(q.1) == want).filter(|_| sel & 2 == 0);
    let (dest, _, base_psn) = *same.unwrap_or(&d.qps[usize::from(sel) % d.qps.len()]);
    b[5..8].copy_from_slice(&dest.value().to_be_bytes()[1..]);
    if sel & 4 != 0 {
        let psn = base_psn.wrapping_add(u32::from(sel & 3)) & 0xFF_FFFF;
        b[9..12].copy_from_slice(&psn.to_be_bytes()[1..]);
    }
    if sel & 8 == 0 {
        let ep = UdpEndpoints { src: A, dst: B, src_port: 0xC000, dst_port: 4791 };
        if let Ok(h) = IpUdpHeader::build(&ep, &IpMeta::default(), b.len()) {
            h.fill_icrc(&mut b);
        }
    }
    b
}

/// A live device fed crafted datagrams (see the crate documentation).
pub fn device(data: &[u8]) {
    device_run(data);
}

/// [`device`], returning the device's counters afterwards (for tests that
/// check the harness reaches the protocol).
pub fn device_run(data: &[u8]) -> Counters {
    let mut d = setup();
    let mut i = In(data);
    let mut now = Instant::ZERO;
    let mut last = d.hca.counters();
    let mut steps = 0;
    while !i.is_empty() && steps < 256 {
        steps += 1;
        let bytes = crafted(&d, &mut i);
        if bytes.is_empty() {
            continue;
        }
        let ep = UdpEndpoints { src: A, dst: B, src_port: 0xC000, dst_port: 4791 };
        d.hca.handle_datagram(
            now,
            Datagram {
                endpoints: ep,
                meta: IpMeta::default(),
                payload: Bytes::from(bytes),
                body: None,
            },
        );
        let mut out = 0;
        while d.hca.poll_transmit(now).is_some() {
            out += 1;
            assert!(out < 10_000, "one datagram made the device send {out} packets");
        }
        if i.u8() < 32 {
            now += core::time::Duration::from_millis(u64::from(i.u8()) * 10);
            d.hca.handle_timeout(now);
            while d.hca.poll_transmit(now).is_some() {}
        }
        check(&mut d, &mut last);
    }
    d.hca.counters()
}

fn check(d: &mut Dev, last: &mut Counters) {
    let mut g = vec![0u8; 4096];
    d.hca.mr_read(d.guard.handle, 0, &mut g).expect("guard readable");
    assert!(g.iter().all(|&b| b == 0x5A), "the region without remote rights changed");
    d.hca.mr_read(d.other.handle, 0, &mut g).expect("other readable");
    assert!(g.iter().all(|&b| b == 0xA5), "another PD's region changed");
    if let Ok(wcs) = d.hca.poll_cq(d.cq, 256) {
        for wc in wcs {
            assert!(d.posted.contains(&wc.wr_id), "completion for a WR never posted: {wc:?}");
        }
    }
    let c = d.hca.counters();
    for ((n, now), (_, before)) in c.iter().zip(last.iter()) {
        assert!(now >= before, "counter {n} went down: {before} -> {now}");
    }
    *last = c;
}

// ------------------------------------------------------------------ verbs

/// Arbitrary verb sequences on one device: every error is a value.
pub fn verbs(data: &[u8]) {
    let mut v = VerbsState {
        hca: Hca::new(HcaConfig::new("fuzzv", B, 9)),
        pds: Vec::new(),
        cqs: Vec::new(),
        mrs: Vec::new(),
        qps: Vec::new(),
    };
    let mut i = In(data);
    let mut steps = 0;
    while !i.is_empty() && steps < 512 {
        steps += 1;
        v.step(&mut i);
    }
}

/// The objects the verbs harness made on its device.
struct VerbsState {
    hca: Hca,
    pds: Vec<PdHandle>,
    cqs: Vec<CqHandle>,
    mrs: Vec<MrInfo>,
    qps: Vec<Qpn>,
}

/// `Some(x % v)`, or `None` when there is nothing to pick from.
fn pick(v: usize, x: u8) -> Option<usize> {
    if v == 0 {
        None
    } else {
        Some(usize::from(x) % v)
    }
}

impl VerbsState {
    /// One verb call chosen and filled in by the input.
    fn step(&mut self, i: &mut In) {
        let hca = &mut self.hca;
        let (pds, cqs, mrs, qps) = (&mut self.pds, &mut self.cqs, &mut self.mrs, &mut self.qps);
        match i.u8() % 14 {
            0 => {
                if let Ok(p) = hca.alloc_pd() {
                    pds.push(p)
                }
            }
            1 => {
                if let Ok(c) = hca.create_cq(u32::from(i.u16()) % 40000) {
                    cqs.push(c)
                }
            }
            2 => {
                if let Some(k) = pick(pds.len(), i.u8()) {
                    if let Ok(m) =
                        hca.reg_mr(pds[k], usize::from(i.u16()), AccessFlags(u32::from(i.u16())))
                    {
                        mrs.push(m)
                    }
                }
            }
            3 => {
                if let (Some(p), Some(c)) = (pick(pds.len(), i.u8()), pick(cqs.len(), i.u8())) {
                    self.create_qp(p, c, i);
                }
            }
            4 | 5 => {
                if let Some(k) = pick(qps.len(), i.u8()) {
                    self.modify_qp(k, i);
                }
            }
            6 | 7 => {
                if let Some(k) = pick(qps.len(), i.u8()) {
                    self.post_send(k, i);
                }
            }
            8 => {
                if let Some(k) = pick(qps.len(), i.u8()) {
                    let wr = RecvWr::new(
                        u64::from(i.u32()),
                        i.u64(),
                        u32::from(i.u16()),
                        LKey::new(i.u32()),
                    );
                    let _ = hca.post_recv(qps[k], wr);
                }
            }
            9 => {
                if let Some(k) = pick(cqs.len(), i.u8()) {
                    let _ = hca.poll_cq(cqs[k], usize::from(i.u8()));
                }
            }
            10 => {
                if let Some(k) = pick(qps.len(), i.u8()) {
                    let q = qps.swap_remove(k);
                    let _ = hca.destroy_qp(q);
                }
            }
            11 => {
                if let Some(k) = pick(mrs.len(), i.u8()) {
                    let m = mrs.swap_remove(k);
                    let _ = hca.dereg_mr(m.handle);
                }
            }
            12 => {
                if let Some(k) = pick(cqs.len(), i.u8()) {
                    let _ = hca.destroy_cq(cqs[k]).map(|_| cqs.swap_remove(k));
                }
            }
            _ => {
                let now = Instant::from_millis(u64::from(i.u16()));
                while hca.poll_transmit(now).is_some() {}
                hca.handle_timeout(now);
            }
        }
    }

    /// A QP of a chosen type and capabilities on PD `p` and CQ `c`.
    fn create_qp(&mut self, p: usize, c: usize, i: &mut In) {
        let t = [QpType::Rc, QpType::Uc, QpType::Ud][usize::from(i.u8()) % 3];
        let cap = QpCap {
            max_send_wr: u32::from(i.u16()),
            max_recv_wr: u32::from(i.u16()),
            max_send_sge: u32::from(i.u8()),
            max_recv_sge: u32::from(i.u8()),
            max_inline_data: u32::from(i.u16()),
        };
        let init = QpInitAttr {
            pd: self.pds[p],
            send_cq: self.cqs[c],
            recv_cq: self.cqs[c],
            qp_type: t,
            cap,
            sq_sig_all: i.u8() & 1 == 1,
            srq: None,
        };
        if let Ok(q) = self.hca.create_qp(init) {
            self.qps.push(q)
        }
    }

    /// Modify QP `k` to a chosen state with chosen attributes and mask.
    fn modify_qp(&mut self, k: usize, i: &mut In) {
        let st = QpState::ALL[usize::from(i.u8()) % QpState::ALL.len()];
        let mut a = QpAttr::new().state(st);
        a.mask = qp_attr::AttrMask(i.u32() | 1);
        a.qkey = i.u32();
        a.timeout = i.u8();
        a.retry_cnt = i.u8();
        a.rnr_retry = i.u8();
        a.max_rd_atomic = i.u8();
        a.max_dest_rd_atomic = i.u8();
        a.min_rnr_timer = i.u8();
        a.dest_qp_num = i.u32();
        a.rq_psn = i.u32();
        a.sq_psn = i.u32();
        a.path_mtu = Some(PathMtu::Mtu1024);
        a.ah_attr = Some(AhAttr::new(A));
        a.qp_access_flags = AccessFlags(u32::from(i.u16()));
        let _ = self.hca.modify_qp(self.qps[k], &a);
    }

    /// Post a chosen work request on QP `k` (maybe on a registered MR).
    fn post_send(&mut self, k: usize, i: &mut In) {
        let m = pick(self.mrs.len(), i.u8()).map(|x| self.mrs[x]);
        let (addr, lkey) =
            m.map_or((i.u64(), LKey::new(i.u32())), |m| (m.addr + u64::from(i.u16()), m.lkey));
        let ops = [
            WrOpcode::Send,
            WrOpcode::RdmaWrite,
            WrOpcode::RdmaRead,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::SendWithImm,
        ];
        let wr = SendWr::new(u64::from(i.u32()), ops[usize::from(i.u8()) % ops.len()])
            .sge(addr, u32::from(i.u16()), lkey)
            .remote(i.u64(), RKey::new(i.u32()))
            .ud(AhAttr::new(A), i.u32(), i.u32());
        let _ = self.hca.post_send(self.qps[k], wr);
    }
}

// ------------------------------------------------------------------ dropin

/// The libibverbs drop-in's C entry points with arbitrary attribute structs
/// and work requests (pointers valid, contents arbitrary); the harness and
/// its invariants are in `roce_libibverbs` (`ibverbs::fuzz`), the crate
/// allowed to call C entry points.
pub fn dropin(data: &[u8]) {
    ibverbs::fuzz::dropin(data)
}

/// [`dropin`], reporting the completions the input reached.
pub fn dropin_run(data: &[u8]) -> ibverbs::fuzz::Reached {
    ibverbs::fuzz::dropin_run(data)
}

/// Random sequences of verbs calls with stale, NULL and huge arguments
/// through the drop-in's C entry points (issue 26); the harness is
/// `ibverbs::fuzz::misuse`.
pub fn misuse(data: &[u8]) {
    ibverbs::fuzz::misuse::misuse(data)
}

/// [`misuse`], reporting what the input reached.
pub fn misuse_run(data: &[u8]) -> ibverbs::fuzz::misuse::Reached {
    ibverbs::fuzz::misuse::misuse_run(data)
}

/// The harness of a target by name (`packet`, `device`, `verbs`, `dropin`,
/// `cm`, `misuse`).
pub fn by_name(name: &str) -> Option<fn(&[u8])> {
    match name {
        "misuse" => Some(misuse),
        "packet" => Some(packet),
        "device" => Some(device),
        "verbs" => Some(verbs),
        "dropin" => Some(dropin),
        "cm" => Some(cm),
        _ => None,
    }
}

// ------------------------------------------------------------------ cm

/// Two CM engines driven by the input (see the crate documentation).
pub fn cm(data: &[u8]) {
    cm_run(data);
}

/// [`cm()`], returning both engines' counters.
pub fn cm_run(data: &[u8]) -> [roce_emulator::cm::Counters; 2] {
    let mut pair = CmPair::new();
    let mut last = [pair.cms[0].counters().mads_received, pair.cms[1].counters().mads_received];
    let mut i = In(data);
    let mut steps = 0;
    while !i.is_empty() && steps < 400 {
        steps += 1;
        pair.step(&mut i);
        pair.drain();
        for (k, cm) in pair.cms.iter().enumerate() {
            let r = cm.counters().mads_received;
            assert!(r >= last[k], "a counter went back");
            last[k] = r;
        }
    }
    pair.finish()
}

/// The CM harness's two engines, the MADs between them and the
/// connections each has handed out (from calls or events).
struct CmPair {
    cms: [roce_emulator::cm::Cm; 2],
    peers: [roce_emulator::cm::PeerAddr; 2],
    known: [HashSet<roce_emulator::cm::ConnId>; 2],
    now: std::time::Duration,
    /// (destination, MAD)
    wire: Vec<(usize, [u8; 256])>,
}

/// The service IDs the CM harness listens on and connects to.
const CM_SERVICES: [u64; 3] = [0x0000_0000_0106_1c06u64, 0x0000_0000_0111_1c06, 0x42];

impl CmPair {
    fn new() -> CmPair {
        use roce_emulator::cm::{gid_from_ip, Cm, CmConfig, PeerAddr};
        let ips = [IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))];
        let mk = |i: usize| {
            let mut c = CmConfig::new(gid_from_ip(ips[i]), 0x1000 + i as u64, 7 + i as u64);
            c.max_connections = 16;
            c.max_queued_transmits = 64;
            c.max_cm_retries = 3;
            Cm::new(c)
        };
        CmPair {
            cms: [mk(0), mk(1)],
            peers: [PeerAddr::new(gid_from_ip(ips[0])), PeerAddr::new(gid_from_ip(ips[1]))],
            known: [HashSet::new(), HashSet::new()],
            now: std::time::Duration::ZERO,
            wire: Vec::new(),
        }
    }

    /// Move every engine's transmits to the wire and check its events.
    fn drain(&mut self) {
        use roce_emulator::cm::CmEvent;
        for (k, cm) in self.cms.iter_mut().enumerate() {
            let mut n = 0;
            while let Some(t) = cm.poll_transmit() {
                n += 1;
                assert!(n <= 64, "transmit queue beyond its limit");
                // answers go where the MAD came from (the other engine)
                let dst = if t.to.gid == self.peers[0].gid { 0 } else { k ^ 1 };
                if self.wire.len() < 256 {
                    self.wire.push((dst, t.mad));
                }
            }
            while let Some(e) = cm.poll_event() {
                let c = match &e {
                    CmEvent::ConnectRequest { conn, .. } | CmEvent::SidrRequest { conn, .. } => {
                        self.known[k].insert(*conn);
                        *conn
                    }
                    CmEvent::ConnectResponse { conn, .. }
                    | CmEvent::Established { conn }
                    | CmEvent::Rejected { conn, .. }
                    | CmEvent::Unreachable { conn }
                    | CmEvent::Disconnected { conn, .. }
                    | CmEvent::TimewaitExit { conn }
                    | CmEvent::SidrReply { conn, .. } => *conn,
                };
                assert!(self.known[k].contains(&c), "event for a connection never made: {e:?}");
            }
            assert!(cm.connection_count() <= 16);
        }
    }

    /// One step of the input: a call of engine `op & 1`, the wire, or time.
    fn step(&mut self, i: &mut In) {
        use roce_emulator::cm::{ConnectRequest, SidrRequest};
        let op = i.u8();
        let k = usize::from(op & 1);
        match op >> 1 {
            0 => {
                let _ = self.cms[k].listen(CM_SERVICES[usize::from(i.u8()) % 3]);
            }
            1 => {
                let mut r = ConnectRequest::new(
                    CM_SERVICES[usize::from(i.u8()) % 3],
                    self.peers[k ^ 1],
                    u32::from(i.u16()),
                    i.u32() & 0xFF_FFFF,
                );
                let n = usize::from(i.u8() % 100);
                r.private_data = i.take(n).to_vec();
                if let Ok(c) = self.cms[k].connect(self.now, r) {
                    self.known[k].insert(c);
                }
            }
            2 => {
                let r = SidrRequest {
                    service_id: CM_SERVICES[usize::from(i.u8()) % 3],
                    remote: self.peers[k ^ 1],
                    pkey: 0xFFFF,
                    private_data: Vec::new(),
                };
                if let Ok(c) = self.cms[k].sidr_resolve(self.now, r) {
                    self.known[k].insert(c);
                }
            }
            3..=9 => self.answer(op, k, i),
            10..=13 => self.wire_step(op, i),
            // the input's own bytes as a MAD
            14 => {
                let n = usize::from(i.u8());
                let b = i.take(n).to_vec();
                self.cms[k].handle_mad(self.now, self.peers[k ^ 1], &b);
            }
            // time passes
            _ => {
                self.now += std::time::Duration::from_millis(u64::from(i.u16()) * 8);
                self.cms[0].handle_timeout(self.now);
                self.cms[1].handle_timeout(self.now);
            }
        }
    }

    /// The application of engine `k` answers one of its connections.
    fn answer(&mut self, op: u8, k: usize, i: &mut In) {
        use roce_emulator::cm::{AcceptParams, ConnId, SidrReplyParams};
        let b = i.u8();
        let mut v: Vec<ConnId> = self.known[k].iter().copied().collect();
        v.sort();
        let Some(c) = (!v.is_empty()).then(|| v[usize::from(b) % v.len()]) else { return };
        let now = self.now;
        let cm = &mut self.cms[k];
        let _ = match op >> 1 {
            3 => cm
                .accept(now, c, AcceptParams::new(u32::from(i.u16()), i.u32() & 0xFF_FFFF))
                .is_ok(),
            4 => cm.reject(c, i.take(8)).is_ok(),
            5 => cm.complete_connect(c).is_ok(),
            6 => cm.disconnect(now, c, &[]).is_ok(),
            7 => cm.establish(c).is_ok(),
            8 => cm
                .sidr_reply(
                    c,
                    SidrReplyParams {
                        status: i.u8() % 4,
                        qpn: u32::from(i.u16()),
                        qkey: i.u32(),
                        private_data: Vec::new(),
                    },
                )
                .is_ok(),
            _ => cm.destroy(now, c).is_ok(),
        };
    }

    /// The wire: deliver, drop, duplicate, or corrupt the next MAD.
    fn wire_step(&mut self, op: u8, i: &mut In) {
        if self.wire.is_empty() {
            return;
        }
        let n = usize::from(i.u8()) % self.wire.len();
        let (dst, mut mad) = self.wire.remove(n);
        let from = self.peers[dst ^ 1];
        let now = self.now;
        match op >> 1 {
            10 => self.cms[dst].handle_mad(now, from, &mad),
            11 => {}
            12 => {
                self.cms[dst].handle_mad(now, from, &mad);
                self.cms[dst].handle_mad(now, from, &mad);
            }
            _ => {
                let at = usize::from(i.u8());
                mad[at] ^= i.u8() | 1;
                let len = 256 - usize::from(i.u8() & 0x7F);
                self.cms[dst].handle_mad(now, from, &mad[..len]);
            }
        }
    }

    /// Deliver what is in flight and fire the next timer, up to 2000 times
    /// or until no timer is left; with `stop_when_wire_busy`, a round that
    /// leaves MADs on the wire starts over before any timer fires.
    fn settle(&mut self, stop_when_wire_busy: bool) {
        for _ in 0..2000 {
            while let Some((dst, mad)) = self.wire.pop() {
                self.cms[dst].handle_mad(self.now, self.peers[dst ^ 1], &mad);
            }
            self.drain();
            if stop_when_wire_busy && !self.wire.is_empty() {
                continue;
            }
            let next = [self.cms[0].poll_timeout(), self.cms[1].poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let Some(t) = next else { break };
            self.now = self.now.max(t);
            self.cms[0].handle_timeout(self.now);
            self.cms[1].handle_timeout(self.now);
            if stop_when_wire_busy {
                self.drain();
            }
        }
    }

    /// The input is over: deliver what is in flight, then let time run
    /// out; every connection ends (retries are bounded, TimeWait expires).
    fn finish(mut self) -> [roce_emulator::cm::Counters; 2] {
        use roce_emulator::cm::ConnId;
        self.settle(true);
        for (k, cm) in self.cms.iter_mut().enumerate() {
            // connections that wait for their application (a request it never
            // answered, a REP it never confirmed) hold no timer; the rest end
            let open: Vec<ConnId> =
                self.known[k].iter().copied().filter(|c| cm.state(*c).is_some()).collect();
            for c in open {
                let _ = cm.destroy(self.now, c);
            }
        }
        self.settle(false);
        for cm in &self.cms {
            assert!(cm.poll_timeout().is_none(), "a timer still runs with nothing left to do");
        }
        [*self.cms[0].counters(), *self.cms[1].counters()]
    }
}
