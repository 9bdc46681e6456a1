//! Two HCAs wired back to back by a tiny deterministic loop: every datagram
//! one side transmits is offered to a filter (deliver, drop, duplicate,
//! corrupt), the virtual clock jumps to the next timer when both sides are
//! idle, and every loop is bounded.
#![allow(dead_code)]

use roce_emulator::*;
use roce_packet::{Opcode, Psn, Qpn, RoceRepr};
use std::net::{IpAddr, Ipv4Addr};

/// Direction of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    AtoB,
    BtoA,
}

/// What the filter does with a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Deliver,
    Drop,
    Duplicate,
    /// Deliver these bytes instead.
    Replace(Vec<u8>),
    /// Deliver after the next packet of the same direction (reorder).
    Hold,
}

/// One packet seen on the wire.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub dir: Dir,
    pub opcode: Opcode,
    pub psn: Psn,
    pub ack_req: bool,
    pub repr: RoceRepr,
    pub action: Action,
}

/// One side's objects.
pub struct Side {
    pub hca: Hca,
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub mr: MrInfo,
    pub qpn: Qpn,
}

/// Connection options.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    pub mtu: PathMtu,
    pub a_psn: u32,
    pub b_psn: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub cqe: u32,
    pub mr_len: usize,
    pub qp_access: AccessFlags,
    pub qp_type: QpType,
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
        }
    }
}

/// The Q_Key UD test QPs use (ibv_ud_pingpong's).
pub const UD_QKEY: u32 = 0x1111_1111;

pub const ALL_ACCESS: AccessFlags = AccessFlags(
    AccessFlags::LOCAL_WRITE.0
        | AccessFlags::REMOTE_WRITE.0
        | AccessFlags::REMOTE_READ.0
        | AccessFlags::REMOTE_ATOMIC.0,
);

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
    pub trace: Vec<Seen>,
    pub opts: Opts,
}

fn side(name: &str, ip: IpAddr, seed: u64, o: &Opts) -> Side {
    let mut hca = Hca::new(HcaConfig::new(name, ip, seed));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(o.cqe).unwrap();
    let mr = hca.reg_mr(pd, o.mr_len, ALL_ACCESS).unwrap();
    let qpn = hca
        .create_qp(QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: o.qp_type,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    Side { hca, pd, cq, mr, qpn }
}

fn connect(s: &mut Side, peer_ip: IpAddr, peer_qpn: Qpn, sq_psn: u32, rq_psn: u32, o: &Opts) {
    let qpn = s.qpn;
    let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1);
    if o.qp_type == QpType::Ud {
        s.hca.modify_qp(qpn, &init.qkey(UD_QKEY)).unwrap();
        s.hca.modify_qp(qpn, &QpAttr::new().state(QpState::Rtr)).unwrap();
        s.hca.modify_qp(qpn, &QpAttr::new().state(QpState::Rts).sq_psn(sq_psn)).unwrap();
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

impl Pair {
    pub fn new() -> Pair {
        Pair::with(Opts::default())
    }

    pub fn with(o: Opts) -> Pair {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        Pair::with_addrs(o, a, b)
    }

    /// A pair at the given addresses (both IPv4 or both IPv6).
    pub fn with_addrs(o: Opts, ip_a: IpAddr, ip_b: IpAddr) -> Pair {
        let mut a = side("a", ip_a, 1, &o);
        let mut b = side("b", ip_b, 2, &o);
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
    pub fn run_with(&mut self, max_time: Instant, mut filter: impl FnMut(usize, &Seen) -> Action) {
        for _ in 0..200_000 {
            let mut moved = false;
            for dir in [Dir::AtoB, Dir::BtoA] {
                let (src, dst) = match dir {
                    Dir::AtoB => (&mut self.a.hca, &mut self.b.hca),
                    Dir::BtoA => (&mut self.b.hca, &mut self.a.hca),
                };
                let mut held: Option<roce_emulator::Datagram> = None;
                while let Some(d) = src.poll_transmit(self.now) {
                    moved = true;
                    let (repr, _) =
                        RoceRepr::parse_bytes(&d.payload).expect("we emit valid packets");
                    let mut seen = Seen {
                        at: self.now,
                        dir,
                        opcode: repr.bth.opcode,
                        psn: repr.bth.psn,
                        ack_req: repr.bth.ack_req,
                        repr,
                        action: Action::Deliver,
                    };
                    let act = filter(self.trace.len(), &seen);
                    seen.action = act.clone();
                    self.trace.push(seen);
                    let release = held.take();
                    match act {
                        Action::Hold => held = Some(d),
                        Action::Deliver => dst.handle_datagram(self.now, d),
                        Action::Drop => {}
                        Action::Duplicate => {
                            dst.handle_datagram(self.now, d.clone());
                            dst.handle_datagram(self.now, d);
                        }
                        Action::Replace(bytes) => {
                            let mut d2 = d.clone();
                            d2.payload = bytes.into();
                            dst.handle_datagram(self.now, d2)
                        }
                    }
                    if let Some(h) = release {
                        dst.handle_datagram(self.now, h);
                    }
                }
                if let Some(h) = held.take() {
                    dst.handle_datagram(self.now, h);
                }
            }
            if moved {
                continue;
            }
            let next =
                [self.a.hca.poll_timeout(), self.b.hca.poll_timeout()].into_iter().flatten().min();
            match next {
                Some(t) if t <= max_time => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    self.a.hca.handle_timeout(now);
                    self.b.hca.handle_timeout(now);
                }
                _ => return,
            }
        }
        panic!("simulation did not settle within the step bound");
    }

    /// Deliver everything, no faults, up to 10 virtual seconds.
    pub fn run(&mut self) {
        self.run_with(Instant::from_millis(10_000), |_, _| Action::Deliver)
    }

    pub fn count(&self, dir: Dir, op: Opcode) -> usize {
        self.trace.iter().filter(|s| s.dir == dir && s.opcode == op).count()
    }

    /// Opcode names of the trace, for failure messages.
    pub fn dump(&self) -> String {
        self.trace
            .iter()
            .map(|s| {
                format!(
                    "{:>10}ns {:?} {} psn={} ack_req={} aeth={:?} {:?}\n",
                    s.at.as_nanos(),
                    s.dir,
                    s.opcode,
                    s.psn,
                    s.ack_req,
                    s.repr.aeth.map(|a| a.syndrome),
                    s.action
                )
            })
            .collect()
    }
}

/// A deterministic test pattern.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

pub fn poll_all(h: &mut Hca, cq: CqHandle) -> Vec<WorkCompletion> {
    h.poll_cq(cq, 10_000).unwrap()
}

/// Side helpers.
impl Side {
    pub fn write_mem(&mut self, off: u64, data: &[u8]) {
        self.hca.mr_write(self.mr.handle, off, data).unwrap()
    }
    pub fn read_mem(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.hca.mr_read(self.mr.handle, off, &mut v).unwrap();
        v
    }
    pub fn addr(&self, off: u64) -> u64 {
        self.mr.addr + off
    }
    pub fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) {
        let lkey = self.mr.lkey;
        let a = self.addr(off);
        self.hca.post_recv(self.qpn, RecvWr::new(wr_id, a, len, lkey)).unwrap()
    }
    pub fn send(&mut self, wr_id: u64, off: u64, len: u32) {
        let wr = SendWr::new(wr_id, WrOpcode::Send).sge(self.addr(off), len, self.mr.lkey);
        self.hca.post_send(self.qpn, wr).unwrap()
    }
    pub fn poll(&mut self) -> Vec<WorkCompletion> {
        poll_all(&mut self.hca, self.cq)
    }
    pub fn counters(&self) -> Counters {
        self.hca.counters()
    }
}
