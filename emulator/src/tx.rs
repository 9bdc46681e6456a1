//! The datagram builder the roles send with, and the device's transmit
//! settings (source address and port, ACK coalescing and delay).

use crate::io::{Datagram, LinkProfile, RegionBody};
use crate::qp::Qp;
use crate::qp_attr::AhAttr;
use bytes::Bytes;
use core::time::Duration;
use roce_packet::{IpMeta, IpUdpHeader, RoceRepr, UdpEndpoints, ROCE_V2_PORT};
use roce_region::RegionMem;
use std::net::IpAddr;
use std::sync::Arc;

/// Payloads from this many bytes up leave as a [`RegionBody`] when the
/// transport takes them ([`Tx::region_bodies`]); smaller ones are copied
/// (an iovec and a shared handle cost more than the copy).
pub(crate) const BODY_MIN: usize = 1024;

/// Transmit settings (the link profile's, fixed at construction) and the
/// state of the current transmit burst.
pub(crate) struct Tx {
    /// The device's address (source of every datagram).
    pub addr: IpAddr,
    /// [`LinkProfile::src_port`].
    pub src_port: Option<u16>,
    /// [`LinkProfile::ack_coalescing`] (also on with an ACK delay).
    pub coalesce_acks: bool,
    /// [`LinkProfile::ack_delay`] (never zero).
    pub ack_delay: Option<Duration>,
    /// Held ACKs leave at the next transmits, whatever their age (the
    /// driver went idle: `SansIo::on_idle`); cleared when nothing is left
    /// to send.
    pub acks_forced: bool,
    /// `poll_transmit` returned a packet since it last returned none (a due
    /// held ACK rides along with such a burst).
    pub burst: bool,
    /// [`LinkProfile::region_bodies`].
    pub region_bodies: bool,
    /// The ECN field of every packet but CNPs
    /// ([`crate::CongestionConfig::ecn`]).
    pub ecn: crate::Ecn,
}

impl Tx {
    pub fn new(addr: IpAddr, link: &LinkProfile, ecn: crate::Ecn) -> Tx {
        let ack_delay = link.ack_delay.filter(|d| !d.is_zero());
        Tx {
            addr,
            src_port: link.src_port,
            coalesce_acks: link.ack_coalescing || ack_delay.is_some(),
            ack_delay,
            acks_forced: false,
            burst: false,
            region_bodies: link.region_bodies,
            ecn,
        }
    }

    /// Build the datagram for a packet of `qp` to its address vector
    /// (ICRC filled).
    pub fn datagram(&self, qp: &Qp, repr: &RoceRepr, payload: &[u8]) -> Option<Datagram> {
        self.datagram_to(qp, &qp.p.ah?, repr, payload)
    }

    /// Build a datagram of `qp` to the address vector `av` (the QP's own
    /// for RC/UC, the work request's AH for UD; ICRC filled).
    pub fn datagram_to(
        &self,
        qp: &Qp,
        av: &AhAttr,
        repr: &RoceRepr,
        payload: &[u8],
    ) -> Option<Datagram> {
        self.finish_to(qp, av, repr.to_vec_in(payload, crate::bufpool::take).ok()?)
    }

    /// Complete a packet of `qp` to `av` built in place (headers and
    /// payload from [`RoceRepr::start_vec`] / [`RoceRepr::finish_vec`]):
    /// fill the ICRC and wrap it as a datagram.
    pub fn finish_to(&self, qp: &Qp, av: &AhAttr, mut buf: Vec<u8>) -> Option<Datagram> {
        let endpoints = self.endpoints(qp, av.dgid);
        let meta = self.meta(qp, av);
        IpUdpHeader::build(&endpoints, &meta, buf.len()).ok()?.fill_icrc(&mut buf);
        Some(Datagram { endpoints, meta, payload: Bytes::from(buf), body: None })
    }

    /// The IP header fields of a packet to `av`: its traffic class is the
    /// IPv4 TOS byte / IPv6 traffic class, as a NIC sends the GRH's (the
    /// kernel's rdma_cm puts `RDMA_OPTION_ID_TOS` there), with the
    /// device's ECN codepoint in its low two bits. The ICRC masks the
    /// byte, so it costs nothing to carry.
    fn meta(&self, qp: &Qp, av: &AhAttr) -> IpMeta {
        let tos = match crate::mutant::is(qp.mutant, crate::Mutant::SendsCe) {
            true => av.traffic_class | crate::congestion::CE,
            false => self.ecn.mark(av.traffic_class),
        };
        IpMeta { tos, ..IpMeta::default() }
    }

    /// A CNP ([`crate::congestion`]) of `qp` to `dest_qp` at `to`, from
    /// DSCP `dscp`, not ECN-capable.
    pub fn cnp(
        &self,
        qp: &Qp,
        to: IpAddr,
        dest_qp: roce_packet::Qpn,
        dscp: u8,
    ) -> Option<Datagram> {
        let repr = RoceRepr {
            bth: roce_packet::BthRepr {
                opcode: roce_packet::Opcode::CNP,
                pkey: roce_packet::PKey::DEFAULT,
                becn: !crate::mutant::is(qp.mutant, crate::Mutant::CnpWithoutBecn),
                dest_qp,
                ..Default::default()
            },
            cnp: Some([0; 16]),
            ..Default::default()
        };
        let mut buf = repr.to_vec_in(&[], crate::bufpool::take).ok()?;
        let endpoints = self.endpoints(qp, to);
        let meta = IpMeta { tos: dscp << 2, ..IpMeta::default() };
        IpUdpHeader::build(&endpoints, &meta, buf.len()).ok()?.fill_icrc(&mut buf);
        Some(Datagram { endpoints, meta, payload: Bytes::from(buf), body: None })
    }

    fn endpoints(&self, qp: &Qp, dgid: IpAddr) -> UdpEndpoints {
        let dst = match dgid {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        let src_port = self.src_port.unwrap_or(qp.src_port);
        UdpEndpoints { src: self.addr, dst, src_port, dst_port: ROCE_V2_PORT }
    }

    /// A packet of `qp` to `av` whose `repr.payload_len` payload bytes are
    /// `len` bytes at `off` of `mem`, sent from there ([`RegionBody`]): the
    /// headers, pad and ICRC are built here, the ICRC over the region's
    /// bytes read a chunk at a time. `None` if the region is gone.
    pub fn finish_body(
        &self,
        qp: &Qp,
        av: &AhAttr,
        repr: &RoceRepr,
        mem: Arc<RegionMem>,
        off: usize,
    ) -> Option<Datagram> {
        let len = repr.payload_len;
        let mut h = [0u8; 64];
        let n = repr.emit_headers(&mut h).ok()?;
        let pad = usize::from(repr.bth.pad_count);
        let mut buf = Vec::with_capacity(n + pad + 4);
        buf.extend_from_slice(&h[..n]);
        buf.resize(n + pad + 4, 0);
        let endpoints = self.endpoints(qp, av.dgid);
        let meta = self.meta(qp, av);
        let hdr = IpUdpHeader::build(&endpoints, &meta, n + len + pad + 4).ok()?;
        let mut icrc = hdr.icrc_hasher(&buf[..n]);
        mem.read_chunks(off, len, |c| icrc.update(c))?;
        icrc.update(&buf[n..n + pad]);
        buf[n + pad..].copy_from_slice(&icrc.finish());
        let body = RegionBody { mem, off, len, at: n };
        Some(Datagram { endpoints, meta, payload: Bytes::from(buf), body: Some(body) })
    }
}
