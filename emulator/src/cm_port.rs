//! The port's communication manager: CM MADs over QP1, the GSI (IBA
//! chapter 12 and 13.5; what the kernel's `ib_cm` does for rxe).
//!
//! Every device carries a [`roce_cm::Cm`] engine. A UD SEND to QPN 1 with
//! the GSI Q_Key (0x80010000) is handed to it as a MAD; the MADs it queues
//! leave as UD SEND_ONLY packets from QP1 (DETH source QP 1, the GSI
//! Q_Key, AckReq set as rxe's MAD layer sets it) with QP1's own PSN
//! sequence; its retransmission and TimeWait deadlines are part of the
//! device's [`crate::SansIo::poll_timeout`], so the simulated fabric and
//! the real-time drivers fire them like any other timer. The engine stays
//! sans-IO: the device passes it the `now` of its latest input.
//!
//! An application that creates its own GSI QP ([`crate::Hca::create_gsi_qp`])
//! takes QP1's traffic instead (raw MADs in its receive queue); the engine
//! then neither receives nor sends.

use crate::counters::Counters;
use crate::io::Datagram;
use crate::time::Instant;
use crate::tx::Tx;
use bytes::Bytes;
use core::time::Duration;
use roce_cm::{gid_from_ip, Cm, CmConfig, PeerAddr};
use roce_packet::ext::DethRepr;
use roce_packet::mad::{GSI_QKEY, MAD_LEN};
use roce_packet::{
    BthRepr, IpMeta, IpUdpHeader, Opcode, PKey, Psn, QKey, Qpn, RoceRepr, UdpEndpoints,
    ROCE_V2_PORT,
};
use std::net::{IpAddr, Ipv6Addr};

/// The CM of one port and QP1's send state.
pub(crate) struct CmPort {
    pub(crate) cm: Cm,
    /// QP1's next send PSN.
    psn: u32,
    /// The latest `now` the device was given (user calls into the engine
    /// happen between inputs and carry no time of their own).
    pub(crate) last_now: Instant,
}

/// The UDP source port of QP1's packets (the port any QP 1 gets from the
/// device's hash; rxe's MAD layer uses its own).
fn qp1_src_port() -> u16 {
    crate::qp::src_port_for(Qpn::new(1))
}

impl CmPort {
    pub(crate) fn new(addr: IpAddr, node_guid: u64, seed: u64, tag: Option<u8>) -> CmPort {
        // a seed of its own: comm IDs and PSNs differ between devices
        let mut cfg = CmConfig::new(gid_from_ip(addr), node_guid, seed ^ 0xC0FF_EE00_0000_0001);
        cfg.comm_id_tag = tag;
        CmPort { cm: Cm::new(cfg), psn: 0, last_now: Instant::ZERO }
    }
}

fn as_duration(t: Instant) -> Duration {
    Duration::from_nanos(t.as_nanos())
}

/// The IP address a GID names (IPv4-mapped GIDs are IPv4 addresses).
fn ip_of_gid(gid: &[u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(*gid);
    v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6))
}

impl CmPort {
    /// The device's latest time in the engine's units.
    pub(crate) fn now(&self) -> Duration {
        as_duration(self.last_now)
    }

    pub(crate) fn note_time(&mut self, now: Instant) {
        if now > self.last_now {
            self.last_now = now;
        }
    }

    /// A datagram for QPN 1 when the engine owns QP1, already checked to
    /// be a UD SEND_ONLY with a valid P_Key (`crate::recv`): a CM MAD with
    /// the GSI Q_Key goes to the engine; otherwise it is dropped (counted
    /// in `ud_dropped`).
    pub(crate) fn receive(
        &mut self,
        c: &mut Counters,
        now: Instant,
        repr: &RoceRepr,
        payload: &[u8],
        d: &Datagram,
    ) {
        c.rcvd_pkts += 1;
        c.rcvd_bytes += d.payload.len() as u64;
        let Some(deth) = repr.deth else {
            c.ud_dropped += 1;
            return;
        };
        if deth.qkey.value() != GSI_QKEY {
            c.ud_dropped += 1;
            tracing::debug!(qkey = %deth.qkey, reason = "Q_Key is not the GSI's", "drop");
            return;
        }
        let from = PeerAddr { gid: gid_from_ip(d.endpoints.src), qpn: deth.src_qp.value() };
        self.note_time(now);
        self.cm.handle_mad(as_duration(now), from, payload);
    }

    /// The next CM MAD as a datagram from QP1 (sent with `tx`'s address
    /// and source port), if the engine has one; the caller checked that
    /// the engine owns QP1.
    /// (Inlined: on an idle device this runs once per `poll_transmit` and
    /// finds nothing; building the datagram stays out of line.)
    #[inline]
    pub(crate) fn transmit(&mut self, tx: &Tx, now: Instant) -> Option<Datagram> {
        self.note_time(now);
        let t = self.cm.poll_transmit()?;
        self.datagram(tx, t)
    }

    /// QP1's datagram carrying the engine's MAD `t`.
    fn datagram(&mut self, tx: &Tx, t: roce_cm::Transmit) -> Option<Datagram> {
        let psn = self.psn;
        self.psn = (psn + 1) & 0xFF_FFFF;
        let repr = RoceRepr {
            bth: BthRepr {
                opcode: Opcode::UD_SEND_ONLY,
                pad_count: 0,
                pkey: PKey::DEFAULT,
                dest_qp: Qpn::new(t.to.qpn),
                ack_req: true,
                psn: Psn::new(psn),
                ..BthRepr::default()
            },
            deth: Some(DethRepr { qkey: QKey::new(GSI_QKEY), src_qp: Qpn::new(1), resv8: 0 }),
            payload_len: MAD_LEN,
            ..RoceRepr::default()
        };
        let mut buf = repr.to_vec(&t.mad).ok()?;
        let endpoints = UdpEndpoints {
            src: tx.addr,
            dst: ip_of_gid(&t.to.gid),
            src_port: tx.src_port.unwrap_or_else(qp1_src_port),
            dst_port: ROCE_V2_PORT,
        };
        let meta = IpMeta::default();
        IpUdpHeader::build(&endpoints, &meta, buf.len()).ok()?.fill_icrc(&mut buf);
        Some(Datagram { endpoints, meta, payload: Bytes::from(buf), body: None })
    }

    /// The engine's next deadline as a device time.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let d = self.cm.poll_timeout()?;
        Some(Instant::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)))
    }

    /// Fire the engine's timers that are due.
    pub(crate) fn timeout(&mut self, now: Instant) {
        self.note_time(now);
        if self.deadline().is_some_and(|d| d <= now) {
            self.cm.handle_timeout(as_duration(now));
        }
    }
}
