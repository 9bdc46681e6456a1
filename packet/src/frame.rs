//! IP/UDP framing around a RoCEv2 payload (built with etherparse).
//!
//! The ICRC covers the IP and UDP headers, so whoever computes it must know
//! the exact header that will go on the wire. [`IpUdpHeader::build`] makes
//! that header from [`UdpEndpoints`] and [`IpMeta`]; the sim fabric, the UDP
//! transport and the raw transport all use it, so they agree on every byte.
//!
//! Defaults match what Linux sends for rxe and for a UDP socket with
//! `IP_PMTUDISC_DO`: IPv4 with DF, identification 0, TTL 64, TOS 0, UDP
//! checksum 0; IPv6 with hop limit 64, flow label 0.

use crate::error::{Error, Result};
use crate::icrc;
use core::net::IpAddr;
use etherparse::{IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header, UdpHeader};

/// The four addressing values of a RoCEv2 datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpEndpoints {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// The IP header fields that are not addresses or lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpMeta {
    /// IPv4 TTL or IPv6 hop limit (masked out of the ICRC).
    pub ttl: u8,
    /// IPv4 TOS byte (DSCP<<2 | ECN) or IPv6 traffic class (masked out of the ICRC).
    pub tos: u8,
    /// IPv4 identification (covered by the ICRC!).
    pub ipv4_id: u16,
    /// IPv4 don't-fragment flag (covered by the ICRC).
    pub dont_fragment: bool,
    /// IPv6 flow label (masked out of the ICRC).
    pub flow_label: u32,
}

impl Default for IpMeta {
    fn default() -> Self {
        IpMeta { ttl: 64, tos: 0, ipv4_id: 0, dont_fragment: true, flow_label: 0 }
    }
}

/// An IP header followed by a UDP header, as bytes (at most 40 + 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpUdpHeader {
    buf: [u8; 48],
    ip_len: u8,
}

impl IpUdpHeader {
    /// Build the headers for a UDP payload of `udp_payload_len` bytes.
    /// Fails for mixed address families or a payload too large for IP.
    pub fn build(ep: &UdpEndpoints, meta: &IpMeta, udp_payload_len: usize) -> Result<IpUdpHeader> {
        let udp_len = udp_payload_len + UdpHeader::LEN;
        let ulen16 = u16::try_from(udp_len).map_err(|_| Error::InvalidField("UDP length"))?;
        let mut buf = [0u8; 48];
        let ip_len = match (ep.src, ep.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let mut h =
                    Ipv4Header::new(ulen16, meta.ttl, IpNumber::UDP, s.octets(), d.octets())
                        .map_err(|_| Error::InvalidField("IPv4 total length"))?;
                h.dscp = IpDscp::try_new(meta.tos >> 2).unwrap_or_default();
                h.ecn = IpEcn::try_new(meta.tos & 3).unwrap_or_default();
                h.identification = meta.ipv4_id;
                h.dont_fragment = meta.dont_fragment;
                h.header_checksum = h.calc_header_checksum();
                let b = h.to_bytes();
                buf[..b.len()].copy_from_slice(&b);
                b.len()
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let h = Ipv6Header {
                    traffic_class: meta.tos,
                    flow_label: Ipv6FlowLabel::try_new(meta.flow_label & 0xF_FFFF)
                        .unwrap_or_default(),
                    payload_length: ulen16,
                    next_header: IpNumber::UDP,
                    hop_limit: meta.ttl,
                    source: s.octets(),
                    destination: d.octets(),
                };
                let b = h.to_bytes();
                buf[..b.len()].copy_from_slice(&b);
                b.len()
            }
            _ => return Err(Error::InvalidField("source and destination address families differ")),
        };
        // UDP checksum 0 (as rxe sends; the ICRC protects the payload).
        buf[ip_len..ip_len + 2].copy_from_slice(&ep.src_port.to_be_bytes());
        buf[ip_len + 2..ip_len + 4].copy_from_slice(&ep.dst_port.to_be_bytes());
        buf[ip_len + 4..ip_len + 6].copy_from_slice(&ulen16.to_be_bytes());
        Ok(IpUdpHeader { buf, ip_len: ip_len as u8 })
    }
    pub fn ip(&self) -> &[u8] {
        &self.buf[..self.ip_len as usize]
    }
    pub fn udp(&self) -> &[u8] {
        &self.buf[self.ip_len as usize..self.ip_len as usize + 8]
    }
    /// IP header followed by UDP header.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.ip_len as usize + 8]
    }
    /// Store the ICRC in the last four bytes of `udp_payload`.
    pub fn fill_icrc(&self, udp_payload: &mut [u8]) {
        icrc::fill(self.ip(), self.udp(), udp_payload)
    }
    /// Check the ICRC in the last four bytes of `udp_payload`.
    pub fn verify_icrc(&self, udp_payload: &[u8]) -> bool {
        icrc::verify(self.ip(), self.udp(), udp_payload)
    }
}

/// Compute the ICRC of `udp_payload` as it will be sent from `ep` with `meta`
/// and store it in its last four bytes.
pub fn fill_icrc(ep: &UdpEndpoints, meta: &IpMeta, udp_payload: &mut [u8]) -> Result<()> {
    IpUdpHeader::build(ep, meta, udp_payload.len())?.fill_icrc(udp_payload);
    Ok(())
}

/// Verify the ICRC of `udp_payload` as if received from `ep` with `meta`.
pub fn verify_icrc(ep: &UdpEndpoints, meta: &IpMeta, udp_payload: &[u8]) -> bool {
    IpUdpHeader::build(ep, meta, udp_payload.len())
        .map(|h| h.verify_icrc(udp_payload))
        .unwrap_or(false)
}

/// A whole Ethernet II frame: MACs, IP, UDP, then `udp_payload` as given.
pub fn ethernet_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    ep: &UdpEndpoints,
    meta: &IpMeta,
    udp_payload: &[u8],
) -> Result<Vec<u8>> {
    let h = IpUdpHeader::build(ep, meta, udp_payload.len())?;
    let mut f = Vec::with_capacity(14 + h.as_bytes().len() + udp_payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    let et: u16 = if ep.src.is_ipv4() { 0x0800 } else { 0x86DD };
    f.extend_from_slice(&et.to_be_bytes());
    f.extend_from_slice(h.as_bytes());
    f.extend_from_slice(udp_payload);
    Ok(f)
}
