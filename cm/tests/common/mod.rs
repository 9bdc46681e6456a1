//! A little wire between two `Cm`s: a virtual clock, a log of every MAD
//! sent (parsed), and filters that drop the Nth MAD of a kind.

#![allow(dead_code)]

use roce_cm::*;
use roce_packet::mad::{attr_name, CmMad, CmMsg};
use std::net::Ipv4Addr;
use std::time::Duration;

/// Which side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    A,
    B,
}

/// One MAD that went on the wire.
#[derive(Clone, Debug)]
pub struct Sent {
    pub from: Side,
    pub at: Duration,
    pub mad: CmMad,
    pub bytes: [u8; 256],
    pub dropped: bool,
}

impl Sent {
    pub fn attr(&self) -> u16 {
        self.mad.header.attr_id
    }
    pub fn name(&self) -> &'static str {
        attr_name(self.attr())
    }
}

pub struct Wire {
    pub a: Cm,
    pub b: Cm,
    pub ga: Gid,
    pub gb: Gid,
    pub now: Duration,
    pub log: Vec<Sent>,
    /// (sender, attribute, n): drop the n-th (1-based) MAD of this
    /// attribute from this sender.
    drops: Vec<(Side, u16, usize)>,
    pub ev_a: Vec<CmEvent>,
    pub ev_b: Vec<CmEvent>,
}

pub const GUID_A: u64 = 0x0202_0000_0000_000a;
pub const GUID_B: u64 = 0x0202_0000_0000_000b;

pub fn gid_a() -> Gid {
    ipv4_gid(Ipv4Addr::new(10, 0, 0, 1))
}
pub fn gid_b() -> Gid {
    ipv4_gid(Ipv4Addr::new(10, 0, 0, 2))
}

/// The service the connection tests listen on (rdma_cm TCP port 7174).
pub fn service() -> u64 {
    roce_packet::mad::ip_service_id(roce_packet::mad::port_space::TCP, 7174)
}

impl Wire {
    pub fn new() -> Wire {
        Wire::with_configs(CmConfig::new(gid_a(), GUID_A, 1), CmConfig::new(gid_b(), GUID_B, 2))
    }

    /// A new wire with B listening on [`service`].
    pub fn listening() -> Wire {
        let mut w = Wire::new();
        w.b.listen(service()).unwrap();
        w
    }

    /// A's request for [`service`] at B: local QPN 0x11, starting PSN 5.
    pub fn request_to_b(&self) -> ConnectRequest {
        ConnectRequest::new(service(), PeerAddr::new(self.gb), 0x11, 5)
    }

    pub fn with_configs(ca: CmConfig, cb: CmConfig) -> Wire {
        Wire {
            ga: ca.local_gid,
            gb: cb.local_gid,
            a: Cm::new(ca),
            b: Cm::new(cb),
            now: Duration::ZERO,
            log: Vec::new(),
            drops: Vec::new(),
            ev_a: Vec::new(),
            ev_b: Vec::new(),
        }
    }

    pub fn drop_nth(&mut self, from: Side, attr: u16, n: usize) {
        self.drops.push((from, attr, n));
    }

    pub fn cm(&mut self, s: Side) -> &mut Cm {
        match s {
            Side::A => &mut self.a,
            Side::B => &mut self.b,
        }
    }

    /// Deliver everything both sides have to send, until both are quiet;
    /// collect their events.
    pub fn pump(&mut self) {
        loop {
            let mut moved = false;
            for s in [Side::A, Side::B] {
                while let Some(t) = self.cm(s).poll_transmit() {
                    moved = true;
                    let mad = CmMad::parse(&t.mad).expect("the CM emits CM MADs");
                    let (me, peer) = match s {
                        Side::A => (self.ga, self.gb),
                        Side::B => (self.gb, self.ga),
                    };
                    assert_eq!(
                        t.to,
                        PeerAddr::new(peer),
                        "{} sent to the wrong port",
                        attr_name(mad.header.attr_id)
                    );
                    let attr = mad.header.attr_id;
                    let nth =
                        self.log.iter().filter(|x| x.from == s && x.attr() == attr).count() + 1;
                    let dropped = self.drops.contains(&(s, attr, nth));
                    self.log.push(Sent { from: s, at: self.now, mad, bytes: t.mad, dropped });
                    if !dropped {
                        let now = self.now;
                        let other = match s {
                            Side::A => Side::B,
                            Side::B => Side::A,
                        };
                        self.cm(other).handle_mad(now, PeerAddr::new(me), &t.mad);
                    }
                }
            }
            self.collect();
            if !moved {
                break;
            }
        }
    }

    pub fn collect(&mut self) {
        while let Some(e) = self.a.poll_event() {
            self.ev_a.push(e);
        }
        while let Some(e) = self.b.poll_event() {
            self.ev_b.push(e);
        }
    }

    /// The earliest deadline of either side.
    pub fn next_deadline(&self) -> Option<Duration> {
        match (self.a.poll_timeout(), self.b.poll_timeout()) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, y) => x.or(y),
        }
    }

    /// Jump to the next deadline, run both sides' timers, deliver.
    pub fn step_timer(&mut self) -> Option<Duration> {
        let d = self.next_deadline()?;
        assert!(d >= self.now, "a deadline in the past: {d:?} < {:?}", self.now);
        self.now = d;
        self.a.handle_timeout(d);
        self.b.handle_timeout(d);
        self.pump();
        Some(d)
    }

    /// Advance the clock by `dt`, running every timer on the way.
    pub fn run_for(&mut self, dt: Duration) {
        let end = self.now + dt;
        while let Some(d) = self.next_deadline() {
            if d > end {
                break;
            }
            self.step_timer();
        }
        self.now = end;
    }

    pub fn take_a(&mut self) -> Vec<CmEvent> {
        self.collect();
        std::mem::take(&mut self.ev_a)
    }

    pub fn take_b(&mut self) -> Vec<CmEvent> {
        self.collect();
        std::mem::take(&mut self.ev_b)
    }

    /// Names of the MADs on the wire so far, "A>REQ" style, "x" after a
    /// dropped one.
    pub fn trace(&self) -> Vec<String> {
        self.log
            .iter()
            .map(|s| {
                format!(
                    "{}>{}{}",
                    if s.from == Side::A { "A" } else { "B" },
                    s.name(),
                    if s.dropped { "x" } else { "" }
                )
            })
            .collect()
    }

    /// The MADs of one attribute from one side.
    pub fn sent(&self, from: Side, attr: u16) -> Vec<&Sent> {
        self.log.iter().filter(|s| s.from == from && s.attr() == attr).collect()
    }

    /// Listen on `service` at B, connect from A with `req`, deliver the
    /// REQ; returns A's and B's handles (B's from its ConnectRequest).
    pub fn request(&mut self, req: ConnectRequest) -> (ConnId, ConnId, Box<ReqInfo>) {
        let ca = self.a.connect(self.now, req).expect("connect");
        self.pump();
        let ev = self.take_b();
        let [CmEvent::ConnectRequest { conn, req, .. }] = &ev[..] else {
            panic!("B's events: {ev:?}")
        };
        (ca, *conn, req.clone())
    }

    /// B accepts `cb` (QPN 0x22, PSN 2), A answers the REP with its RTU
    /// (`ca`), each delivered; the events stay to be taken.
    pub fn accept_and_rtu(&mut self, ca: ConnId, cb: ConnId) {
        self.b.accept(self.now, cb, AcceptParams::new(0x22, 2)).expect("accept");
        self.pump();
        self.a.complete_connect(ca).expect("rtu");
        self.pump();
    }

    /// A whole connection from A to B (listener on `service` must exist):
    /// REQ, REP, RTU, events drained.
    pub fn connected(&mut self, service: u64, qpn_a: u32, qpn_b: u32) -> (ConnId, ConnId) {
        let psn = self.a.random_psn();
        let (ca, cb, _) =
            self.request(ConnectRequest::new(service, PeerAddr::new(self.gb), qpn_a, psn));
        let psn_b = self.b.random_psn();
        self.b.accept(self.now, cb, AcceptParams::new(qpn_b, psn_b)).expect("accept");
        self.pump();
        let ev = self.take_a();
        assert!(matches!(&ev[..], [CmEvent::ConnectResponse { .. }]), "{ev:?}");
        self.a.complete_connect(ca).expect("rtu");
        self.pump();
        assert_eq!(self.take_a(), [CmEvent::Established { conn: ca }]);
        assert_eq!(self.take_b(), [CmEvent::Established { conn: cb }]);
        (ca, cb)
    }
}

/// The comm IDs of a parsed message (local, remote) where it has them.
pub fn comm_ids(m: &CmMad) -> (u32, u32) {
    match &m.msg {
        CmMsg::Req(q) => (q.local_comm_id, 0),
        CmMsg::Rep(p) => (p.local_comm_id, p.remote_comm_id),
        CmMsg::Rtu { local_comm_id, remote_comm_id, .. }
        | CmMsg::Drep { local_comm_id, remote_comm_id, .. }
        | CmMsg::Dreq { local_comm_id, remote_comm_id, .. }
        | CmMsg::Rej { local_comm_id, remote_comm_id, .. }
        | CmMsg::Mra { local_comm_id, remote_comm_id, .. } => (*local_comm_id, *remote_comm_id),
        _ => (0, 0),
    }
}
