//! The two-node test harness: two HCAs wired back to back on the fabric,
//! for any crate's tests (`roce-sim` as a dev-dependency).
//!
//! A [`Pair`] owns two [`Hca`]s, `a` at 10.0.0.1 and `b` at 10.0.0.2 (or
//! the addresses given to [`Pair::with_addrs`]), each with a PD, a CQ, one
//! registered region with every access right and one QP (RC unless
//! [`Opts::qp_type`] says otherwise), connected to each other. For each run
//! both HCAs are lent to a [`Fabric`]`<&mut Hca>` for a lockstep run
//! ([`Fabric::run_lockstep`]): no latency, every RoCE datagram one side
//! transmits is offered to a filter that answers an [`Action`] (deliver,
//! drop, duplicate, replace, hold), the virtual clock jumps to the next
//! timer when both sides are idle, and every loop is bounded. The wire
//! trace of every run is kept in [`Pair::trace`]. This module only builds
//! the two sides; the wire, the trace and the runs are the fabric's.
//!
//! Crafted packets (valid ICRC) come from [`PacketBuilder`] ([`a_to_b`],
//! [`b_to_a`]); [`Pair::to_b`] and [`Pair::to_a`] hand one straight to a
//! side, without the wire, and return what it answers.
//!
//! ```
//! use roce_emulator::WcStatus;
//! use roce_sim::testkit::*;
//!
//! let mut p = Pair::new();
//! p.a.write_mem(0, b"ping");
//! p.b.post_recv(1, 0, 64);
//! p.a.send(7, 0, 4);
//! p.run();
//! assert_eq!(p.b.read_mem(0, 4), b"ping");
//! assert_eq!(p.b.poll()[0].status, WcStatus::Success);
//! assert_eq!(p.count(Dir::AtoB, roce_packet::Opcode::RC_SEND_ONLY), 1);
//! ```
//!
//! Lockstep runs draw nothing from a seed; tests that do (a seeded
//! [`Fabric`], their own generator) use [`crate::seed_from_env`] and
//! [`crate::SeedGuard`] so that a failure prints its replay line.

use crate::{Fabric, Pace, Traced};
use roce_emulator::*;
use roce_packet::{Opcode, Qpn, RoceRepr};
use std::net::{IpAddr, Ipv4Addr};

pub use crate::packet::{request, sized, PacketBuilder};
/// What the filter does with a packet (the fabric's lockstep verdict).
pub use crate::Verdict as Action;

/// A's address in a [`Pair::new`] (10.0.0.1).
pub const IP_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// B's address in a [`Pair::new`] (10.0.0.2).
pub const IP_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

/// Direction of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// From A to B.
    AtoB,
    /// From B to A.
    BtoA,
}

/// One packet seen on the wire: the fabric's trace entry and its
/// direction.
#[derive(Clone, Debug)]
pub struct Seen {
    /// Which way it went.
    pub dir: Dir,
    /// The fabric's trace entry (headers, time, fate).
    pub rec: Traced,
}

impl std::ops::Deref for Seen {
    type Target = Traced;
    fn deref(&self) -> &Traced {
        &self.rec
    }
}

/// One side's objects.
pub struct Side {
    /// The device.
    pub hca: Hca,
    /// Its protection domain.
    pub pd: PdHandle,
    /// The CQ of its QP (send and receive), [`Opts::cqe`] entries.
    pub cq: CqHandle,
    /// A region of [`Opts::mr_len`] bytes with every access right.
    pub mr: MrInfo,
    /// The QP connected to the other side.
    pub qpn: Qpn,
}

/// Connection options ([`Opts::default`]: RC, MTU 1024, PSNs 0x100 from A
/// and 0x200 from B, timeout 14, retry and RNR retry 7, minimum RNR timer
/// 1, 16 READs/atomics in flight, 512 CQEs, a 1 MiB region, every access
/// right on the QPs).
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// Path MTU of both QPs.
    pub mtu: PathMtu,
    /// A's first send PSN (B's expected PSN).
    pub a_psn: u32,
    /// B's first send PSN (A's expected PSN).
    pub b_psn: u32,
    /// Local ACK timeout (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries (7: forever).
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// READs/atomics in flight, each way.
    pub max_rd_atomic: u8,
    /// Entries of each side's CQ.
    pub cqe: u32,
    /// Bytes of each side's region.
    pub mr_len: usize,
    /// Remote access rights of the QPs (UC QPs keep only the write rights).
    pub qp_access: AccessFlags,
    /// RC, UC or UD (UD QPs get [`UD_QKEY`]).
    pub qp_type: QpType,
    /// Side A's link profile (default: the simulator's).
    pub link_a: LinkProfile,
    /// Side B's link profile.
    pub link_b: LinkProfile,
    /// Both devices' congestion management (default: on, ECT(0)).
    pub congestion: roce_emulator::CongestionConfig,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            mtu: PathMtu::Mtu1024,
            a_psn: 0x100,
            b_psn: 0x200,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            cqe: 512,
            mr_len: 1 << 20,
            qp_access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            qp_type: QpType::Rc,
            link_a: LinkProfile::default(),
            link_b: LinkProfile::default(),
            congestion: roce_emulator::CongestionConfig::default(),
        }
    }
}

/// The Q_Key UD test QPs use (ibv_ud_pingpong's).
pub const UD_QKEY: u32 = 0x1111_1111;

/// Every access right (the regions' and the default QPs').
pub const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

/// Two connected sides and their wire's history.
pub struct Pair {
    /// Side A (10.0.0.1 by default), HCA seed 1.
    pub a: Side,
    /// Side B (10.0.0.2 by default), HCA seed 2.
    pub b: Side,
    /// The virtual clock: where the last run left it.
    pub now: Instant,
    /// Every RoCE packet of every run so far, in order.
    pub trace: Vec<Seen>,
    /// The options the pair was made with.
    pub opts: Opts,
}

fn side(name: &str, ip: IpAddr, seed: u64, o: &Opts, link: LinkProfile) -> Side {
    let mut hca =
        Hca::new(HcaConfig { link, congestion: o.congestion, ..HcaConfig::new(name, ip, seed) });
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(o.cqe).unwrap();
    let mr = hca.reg_mr(pd, o.mr_len, ALL_ACCESS).unwrap();
    let cap =
        QpCap { max_send_sge: 4, max_recv_sge: 4, max_inline_data: 256, ..qp_cap(1024, 1024) };
    let qpn = hca.create_qp(qp_init(pd, cq, o.qp_type, cap, false)).unwrap();
    Side { hca, pd, cq, mr, qpn }
}

fn connect(s: &mut Side, peer_ip: IpAddr, peer_qpn: Qpn, sq_psn: u32, rq_psn: u32, o: &Opts) {
    let qpn = s.qpn;
    let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1);
    if o.qp_type == QpType::Ud {
        ud_up(&mut s.hca, qpn, UD_QKEY, sq_psn).unwrap();
        let _ = (peer_ip, peer_qpn, rq_psn);
        return;
    }
    let access = if o.qp_type == QpType::Uc {
        o.qp_access.intersection(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
    } else {
        o.qp_access
    };
    s.hca.modify_qp(qpn, &init.access_flags(access)).unwrap();
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .ah(AhAttr::new(peer_ip))
        .mtu(o.mtu)
        .dest_qpn(peer_qpn.value())
        .rq_psn(rq_psn);
    let rts = QpAttr::new().state(QpState::Rts).sq_psn(sq_psn);
    if o.qp_type == QpType::Uc {
        s.hca.modify_qp(qpn, &rtr).unwrap();
        s.hca.modify_qp(qpn, &rts).unwrap();
        return;
    }
    s.hca
        .modify_qp(qpn, &rtr.max_dest_rd_atomic(o.max_rd_atomic).min_rnr_timer(o.min_rnr_timer))
        .unwrap();
    s.hca
        .modify_qp(
            qpn,
            &rts.timeout(o.timeout)
                .retry_cnt(o.retry_cnt)
                .rnr_retry(o.rnr_retry)
                .max_rd_atomic(o.max_rd_atomic),
        )
        .unwrap();
}

impl Default for Pair {
    fn default() -> Pair {
        Pair::new()
    }
}

impl Pair {
    /// A connected pair with the default options at 10.0.0.1 and 10.0.0.2.
    pub fn new() -> Pair {
        Pair::with(Opts::default())
    }

    /// A connected pair with these options at 10.0.0.1 and 10.0.0.2.
    pub fn with(o: Opts) -> Pair {
        Pair::with_addrs(o, IP_A, IP_B)
    }

    /// A pair at the given addresses (both IPv4 or both IPv6).
    pub fn with_addrs(o: Opts, ip_a: IpAddr, ip_b: IpAddr) -> Pair {
        let mut a = side("a", ip_a, 1, &o, o.link_a);
        let mut b = side("b", ip_b, 2, &o, o.link_b);
        let (qa, qb) = (a.qpn, b.qpn);
        connect(&mut a, ip_b, qb, o.a_psn, o.b_psn, &o);
        connect(&mut b, ip_a, qa, o.b_psn, o.a_psn, &o);
        Pair { a, b, now: Instant::ZERO, trace: Vec::new(), opts: o }
    }

    /// Reset both QPs and bring them back to RTS with the original PSNs.
    pub fn reconnect(&mut self) {
        let o = self.opts;
        let (ia, ib) = (self.a.hca.addr(), self.b.hca.addr());
        let (qa, qb) = (self.a.qpn, self.b.qpn);
        for s in [&mut self.a, &mut self.b] {
            let q = s.qpn;
            s.hca.modify_qp(q, &QpAttr::new().state(QpState::Reset)).unwrap();
        }
        connect(&mut self.a, ib, qb, o.a_psn, o.b_psn, &o);
        connect(&mut self.b, ia, qa, o.b_psn, o.a_psn, &o);
    }

    /// Deliver everything until both sides are idle and no timer is pending
    /// (or `max_time` is reached), passing every packet through `filter`.
    pub fn run_with(&mut self, max_time: Instant, filter: impl FnMut(usize, &Seen) -> Action) {
        self.lockstep(Pace::Burst, max_time, filter)
    }

    /// Like [`Pair::run_with`], but the wire holds packets in flight: every
    /// step each side first transmits all it wants (into its direction's
    /// FIFO, through `filter`), then only the oldest packet of each
    /// direction is delivered (the fabric's `Pace::OnePerLink`).
    pub fn run_paced(&mut self, max_time: Instant, mut filter: impl FnMut(&Seen) -> Action) {
        self.lockstep(Pace::OnePerLink, max_time, |_, s| filter(s))
    }

    /// Lend both HCAs to a fabric for one lockstep run; its trace is
    /// appended to `self.trace`.
    fn lockstep(
        &mut self,
        pace: Pace,
        max_time: Instant,
        mut filter: impl FnMut(usize, &Seen) -> Action,
    ) {
        let base = self.trace.len();
        let (ia, ib) = (self.a.hca.addr(), self.b.hca.addr());
        let mut fabric = Fabric::<&mut Hca>::of(0);
        fabric.advance_to(self.now);
        let a = fabric.add_io(ia, &mut self.a.hca);
        fabric.add_io(ib, &mut self.b.hca);
        let seen =
            |rec: Traced| Seen { dir: if rec.from == a { Dir::AtoB } else { Dir::BtoA }, rec };
        let settled = fabric
            .run_lockstep(pace, max_time, 200_000, |t| filter(base + t.index, &seen(t.clone())));
        self.now = fabric.now();
        let trace = fabric.take_trace();
        drop(fabric);
        self.trace.extend(trace.into_iter().map(seen));
        assert!(settled, "simulation did not settle within the step bound");
    }

    /// Deliver everything, no faults, up to 10 virtual seconds.
    pub fn run(&mut self) {
        self.run_with(Instant::from_millis(10_000), |_, _| Action::Deliver)
    }

    /// The packets of the trace with opcode `op` (either way), in order.
    pub fn packets(&self, op: Opcode) -> impl Iterator<Item = &Seen> {
        self.trace.iter().filter(move |s| s.opcode == op)
    }

    /// Stage a SEND of `data` from A to B: write it at offset 0 of A's
    /// region, post receive `recv_id` of `recv_len` bytes at B's offset 0,
    /// post SEND `send_id` of the bytes on A (nothing moves until a run).
    pub fn stage_send(&mut self, data: &[u8], recv_id: u64, recv_len: u32, send_id: u64) {
        self.a.write_mem(0, data);
        self.b.post_recv(recv_id, 0, recv_len);
        self.a.send(send_id, 0, data.len() as u32);
    }

    /// Post `wr` on A, deliver everything ([`Pair::run`]) and return A's
    /// completions.
    pub fn run_wr(&mut self, wr: SendWr) -> Vec<WorkCompletion> {
        self.a.post(wr);
        self.run();
        self.a.poll()
    }

    /// How many packets of the trace went `dir` with opcode `op`.
    pub fn count(&self, dir: Dir, op: Opcode) -> usize {
        self.packets(op).filter(|s| s.dir == dir).count()
    }

    /// Opcode names of the trace, for failure messages.
    pub fn dump(&self) -> String {
        self.trace.iter().map(|s| s.line(s.dir)).collect()
    }

    /// Hand `d` straight to B at `self.now` (no wire, filter or trace: a
    /// crafted packet from a peer playing A) and return the headers of
    /// everything B transmits in answer at that time.
    pub fn to_b(&mut self, d: Datagram) -> Vec<RoceRepr> {
        self.b.hca.handle_datagram(self.now, d);
        self.b.transmits(self.now)
    }

    /// [`Pair::to_b`] the other way: `d` straight to A (e.g. a crafted
    /// response into A's completer), and what A transmits in answer.
    pub fn to_a(&mut self, d: Datagram) -> Vec<RoceRepr> {
        self.a.hca.handle_datagram(self.now, d);
        self.a.transmits(self.now)
    }

    /// A one-sided request (`op`: RDMA WRITE or READ, an atomic) from A
    /// over the two regions: `len` bytes at offset `local` of A's region,
    /// at offset `remote` of B's. Post it with [`Side::post`].
    pub fn one_sided(&self, wr_id: u64, op: WrOpcode, local: u64, len: u32, remote: u64) -> SendWr {
        SendWr::new(wr_id, op)
            .sge(self.a.addr(local), len, self.a.mr.lkey)
            .remote(self.b.addr(remote), self.b.mr.rkey)
    }

    /// The UDP endpoints of the packets of A's QP (the source port the
    /// device derives from the QPN, rxe's hash), for a crafted packet that
    /// B must take as A's.
    pub fn a_qp_endpoints(&self) -> roce_packet::UdpEndpoints {
        let mut h = self.a.qpn.value().wrapping_mul(0x9E37_79B1);
        h ^= h >> 15;
        roce_packet::UdpEndpoints {
            src: self.a.hca.addr(),
            dst: self.b.hca.addr(),
            src_port: 0xC000 | (h & 0x3FFF) as u16,
            dst_port: roce_packet::ROCE_V2_PORT,
        }
    }
}

/// A filter that answers `action` for the first packet `pred` picks and
/// delivers everything else (a single loss, duplicate or hold).
pub fn once(action: Action, mut pred: impl FnMut(&Seen) -> bool) -> impl FnMut(&Seen) -> Action {
    let mut done = false;
    move |s| {
        if !done && pred(s) {
            done = true;
            action.clone()
        } else {
            Action::Deliver
        }
    }
}

/// [`Pair::run_paced`] as a function.
pub fn run_paced(p: &mut Pair, max_time: Instant, filter: impl FnMut(&Seen) -> Action) {
    p.run_paced(max_time, filter)
}

/// Datagrams from A to B at the default addresses (10.0.0.1 -> 10.0.0.2),
/// UDP source port 0xC000, ICRC filled in.
pub fn a_to_b() -> PacketBuilder {
    PacketBuilder::new(IP_A, IP_B)
}

/// Datagrams from B to A at the default addresses (10.0.0.2 -> 10.0.0.1),
/// UDP source port 0xC000, ICRC filled in.
pub fn b_to_a() -> PacketBuilder {
    a_to_b().reversed()
}

/// QP capabilities: `send` and `recv` work requests, one SGE each way, no
/// inline data.
pub fn qp_cap(send: u32, recv: u32) -> QpCap {
    QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// A QP of `qp_type` with `cap` on `pd`, `cq` for both of its queues, no
/// SRQ.
pub fn qp_init(
    pd: PdHandle,
    cq: CqHandle,
    qp_type: QpType,
    cap: QpCap,
    sq_sig_all: bool,
) -> QpInitAttr {
    QpInitAttr { pd, send_cq: cq, recv_cq: cq, qp_type, cap, sq_sig_all, srq: None }
}

/// QPs created with `init` until one has the number `qpn` (a capture's),
/// which is returned.
pub fn create_qp_numbered(h: &mut Hca, init: QpInitAttr, qpn: u32) -> Qpn {
    let mut q = h.create_qp(init).unwrap();
    while q.value() < qpn {
        q = h.create_qp(init).unwrap();
    }
    assert_eq!(q.value(), qpn, "QPN {qpn:#x} skipped");
    q
}

/// The attributes an RC QP goes from RESET to RTS with (see [`rc_connect`]);
/// the default is [`rc_up`]'s: every access right, MTU 1024, PSNs 0, one
/// READ or atomic in flight each way, minimum RNR timer 1, timeout 14,
/// retry and RNR retry 7.
#[derive(Clone, Copy, Debug)]
pub struct RcPath {
    /// INIT's access flags.
    pub access: AccessFlags,
    pub mtu: PathMtu,
    pub sq_psn: u32,
    pub rq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub max_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
}

impl Default for RcPath {
    fn default() -> RcPath {
        RcPath {
            access: ALL_ACCESS,
            mtu: PathMtu::Mtu1024,
            sq_psn: 0,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// Bring the RC QP `q` on `h` from RESET through INIT and RTR to RTS
/// towards QP `dest` at `peer`, along `p`.
pub fn rc_connect(
    h: &mut Hca,
    q: Qpn,
    peer: impl Into<IpAddr>,
    dest: u32,
    p: &RcPath,
) -> Result<(), ModifyQpError> {
    h.modify_qp(
        q,
        &QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(p.access),
    )?;
    h.modify_qp(
        q,
        &QpAttr::new()
            .state(QpState::Rtr)
            .ah(AhAttr::new(peer.into()))
            .mtu(p.mtu)
            .dest_qpn(dest)
            .rq_psn(p.rq_psn)
            .max_dest_rd_atomic(p.max_dest_rd_atomic)
            .min_rnr_timer(p.min_rnr_timer),
    )?;
    h.modify_qp(
        q,
        &QpAttr::new()
            .state(QpState::Rts)
            .sq_psn(p.sq_psn)
            .timeout(p.timeout)
            .retry_cnt(p.retry_cnt)
            .rnr_retry(p.rnr_retry)
            .max_rd_atomic(p.max_rd_atomic),
    )
}

/// Bring the RC QP `q` on `h` from RESET to RTS towards QP `dest` at
/// `peer`: every access right, MTU 1024, minimum RNR timer 1, timeout 14,
/// retry and RNR retry 7, `rd_atomic` READs/atomics in flight each way.
pub fn rc_up(
    h: &mut Hca,
    q: Qpn,
    peer: impl Into<IpAddr>,
    dest: Qpn,
    (sq_psn, rq_psn): (u32, u32),
    rd_atomic: u8,
) {
    let p = RcPath {
        sq_psn,
        rq_psn,
        max_dest_rd_atomic: rd_atomic,
        max_rd_atomic: rd_atomic,
        ..RcPath::default()
    };
    rc_connect(h, q, peer, dest.value(), &p).unwrap();
}

/// Bring the UD QP `q` on `h` from RESET through INIT (port 1, `qkey`) and
/// RTR to RTS, sending from `sq_psn`.
pub fn ud_up(h: &mut Hca, q: Qpn, qkey: u32, sq_psn: u32) -> Result<(), ModifyQpError> {
    h.modify_qp(q, &QpAttr::new().state(QpState::Init).pkey_index(0).port(1).qkey(qkey))?;
    h.modify_qp(q, &QpAttr::new().state(QpState::Rtr))?;
    h.modify_qp(q, &QpAttr::new().state(QpState::Rts).sq_psn(sq_psn))
}

/// A deterministic test pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Every completion on `cq` (up to 10 000).
pub fn poll_all(h: &mut Hca, cq: CqHandle) -> Vec<WorkCompletion> {
    h.poll_cq(cq, 10_000).unwrap()
}

/// Side helpers.
impl Side {
    /// Another RC QP on this side's PD and CQ: `wrs` send and receive WRs,
    /// one SGE each, `inline` bytes of inline data.
    pub fn rc_qp(
        &mut self,
        wrs: u32,
        inline: u32,
        sq_sig_all: bool,
        srq: Option<SrqHandle>,
    ) -> Qpn {
        let cap = QpCap { max_inline_data: inline, ..qp_cap(wrs, wrs) };
        let init = QpInitAttr { srq, ..qp_init(self.pd, self.cq, QpType::Rc, cap, sq_sig_all) };
        self.hca.create_qp(init).unwrap()
    }
    /// Write `data` into the region at offset `off`.
    pub fn write_mem(&mut self, off: u64, data: &[u8]) {
        self.hca.mr_write(self.mr.handle, off, data).unwrap()
    }
    /// `len` bytes of the region from offset `off`.
    pub fn read_mem(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.hca.mr_read(self.mr.handle, off, &mut v).unwrap();
        v
    }
    /// The virtual address of offset `off` in the region.
    pub fn addr(&self, off: u64) -> u64 {
        self.mr.addr + off
    }
    /// Post a receive of `len` bytes at region offset `off`.
    pub fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) {
        let lkey = self.mr.lkey;
        let a = self.addr(off);
        self.hca.post_recv(self.qpn, RecvWr::new(wr_id, a, len, lkey)).unwrap()
    }
    /// Post `n` receives of `len` bytes each, side by side from region
    /// offset 0 (receive `i` has wr_id `i` and offset `i * len`).
    pub fn post_recvs(&mut self, n: u64, len: u32) {
        for i in 0..n {
            self.post_recv(i, i * u64::from(len), len);
        }
    }
    /// Post a SEND (unsignaled unless the QP signals all) of `len` bytes
    /// from region offset `off`.
    pub fn send(&mut self, wr_id: u64, off: u64, len: u32) {
        let wr = SendWr::new(wr_id, WrOpcode::Send).sge(self.addr(off), len, self.mr.lkey);
        self.hca.post_send(self.qpn, wr).unwrap()
    }
    /// Post `wr` on the side's QP.
    pub fn post(&mut self, wr: SendWr) {
        self.hca.post_send(self.qpn, wr).unwrap()
    }
    /// Every completion on the side's CQ.
    pub fn poll(&mut self) -> Vec<WorkCompletion> {
        poll_all(&mut self.hca, self.cq)
    }
    /// The device's counters.
    pub fn counters(&self) -> Counters {
        self.hca.counters()
    }
    /// Take everything the device transmits at `now` (lost, as far as
    /// the other side is concerned) and return the headers.
    pub fn transmits(&mut self, now: Instant) -> Vec<RoceRepr> {
        std::iter::from_fn(|| self.hca.poll_transmit(now))
            .map(|d| RoceRepr::parse_bytes(&d.payload).expect("a RoCE datagram").0)
            .collect()
    }
}
