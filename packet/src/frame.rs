//! IP/UDP framing around a RoCEv2 payload (built and parsed with etherparse).
//!
//! Build side: [`IpUdpHeader`], [`fill_icrc`], [`verify_icrc`],
//! [`ethernet_frame`]. Parse side: [`parse_frame`] finds the RoCEv2
//! datagram(s) in a captured frame of any supported link type and returns
//! [`RoceDatagram`]s (splitting UDP GSO super-packets with [`split_gso`]).
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
use crate::roce::RocePacket;
use core::net::IpAddr;
use etherparse::{
    Ethernet2HeaderSlice, IpNumber, Ipv4HeaderSlice, Ipv6HeaderSlice, SingleVlanHeaderSlice,
    UdpHeader, UdpHeaderSlice,
};

/// A capture's link-layer header type (tcpdump.org `LINKTYPE_*` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II, possibly with 802.1Q/802.1ad tags.
    Ethernet,
    /// Raw IPv4 or IPv6 (101; also read from 12 and 14, and 228 = IPv4,
    /// 229 = IPv6). Written back as 101.
    RawIp,
    /// `LINKTYPE_LINUX_SLL` (113): Linux "cooked" capture, 16-byte header.
    LinuxSll,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2, 20-byte header.
    LinuxSll2,
    /// `LINKTYPE_NULL` (0): BSD loopback, 4-byte address family in host order.
    Null,
    /// `LINKTYPE_LOOP` (108): OpenBSD loopback, address family big-endian.
    Loop,
    /// Any other link type (frames are returned but never parsed as RoCE).
    Other(u32),
}

impl LinkType {
    /// Map a `LINKTYPE_*` number to a [`LinkType`].
    pub fn from_u32(v: u32) -> Self {
        match v {
            1 => LinkType::Ethernet,
            101 | 12 | 14 | 228 | 229 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            0 => LinkType::Null,
            108 => LinkType::Loop,
            other => LinkType::Other(other),
        }
    }

    /// The `LINKTYPE_*` number written to a file (raw IP is 101).
    pub fn to_u32(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Null => 0,
            LinkType::Loop => 108,
            LinkType::Other(v) => v,
        }
    }
}

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
        // Written field by field (etherparse's builder was ~3 % of a small-
        // message profile); the tests compare it with etherparse's parse.
        let ip_len = match (ep.src, ep.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let total = u16::try_from(udp_len + 20)
                    .map_err(|_| Error::InvalidField("IPv4 total length"))?;
                let h = &mut buf[..20];
                h[0] = 0x45;
                h[1] = meta.tos;
                h[2..4].copy_from_slice(&total.to_be_bytes());
                h[4..6].copy_from_slice(&meta.ipv4_id.to_be_bytes());
                h[6] = if meta.dont_fragment { 0x40 } else { 0 };
                h[8] = meta.ttl;
                h[9] = 17; // UDP
                h[12..16].copy_from_slice(&s.octets());
                h[16..20].copy_from_slice(&d.octets());
                let mut sum: u32 = 0;
                for w in h.chunks_exact(2) {
                    sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
                }
                while sum > 0xFFFF {
                    sum = (sum & 0xFFFF) + (sum >> 16);
                }
                h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                20
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let h = &mut buf[..40];
                let fl = meta.flow_label & 0xF_FFFF;
                let w0 = (6u32 << 28) | (u32::from(meta.tos) << 20) | fl;
                h[0..4].copy_from_slice(&w0.to_be_bytes());
                h[4..6].copy_from_slice(&ulen16.to_be_bytes());
                h[6] = 17; // UDP
                h[7] = meta.ttl;
                h[8..24].copy_from_slice(&s.octets());
                h[24..40].copy_from_slice(&d.octets());
                40
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
    /// An ICRC computed in pieces over these headers, starting with
    /// `ib_start` (the BTH and what follows it).
    pub fn icrc_hasher(&self, ib_start: &[u8]) -> icrc::IcrcHasher {
        icrc::IcrcHasher::new(self.ip(), self.udp(), ib_start)
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

// ---------------------------------------------------------------------------
// Parse side: finding RoCEv2 datagrams in captured frames.
// ---------------------------------------------------------------------------

/// Where a datagram sits in a UDP GSO super-packet that was split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GsoInfo {
    /// 0-based index of this segment.
    pub segment: usize,
    /// Number of segments the super-packet was split into.
    pub segments: usize,
    /// Segment size (UDP payload bytes per segment; the last may be shorter).
    pub size: usize,
}

/// One RoCEv2 packet found in a captured frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoceDatagram {
    /// 4 or 6.
    pub ip_version: u8,
    /// The IP header the ICRC is computed over: as captured, or for a GSO
    /// segment the header segmentation produces (IPv4 total length,
    /// identification + segment index and header checksum rewritten; IPv6
    /// payload length rewritten).
    pub ip_header: Vec<u8>,
    /// The UDP header (for a GSO segment, with the segment's length).
    pub udp_header: [u8; 8],
    /// Addresses and ports.
    pub endpoints: UdpEndpoints,
    /// TTL/hop limit, TOS/traffic class, IPv4 identification (of this
    /// segment), DF (always true for IPv6) and flow label as received.
    pub meta: IpMeta,
    /// The UDP payload: BTH .. ICRC.
    pub udp_payload: Vec<u8>,
    /// Set when this datagram is a segment of a split GSO super-packet.
    pub gso: Option<GsoInfo>,
    /// Bytes after the IP datagram in the frame (Ethernet padding, FCS...).
    pub l2_trailer_len: usize,
    /// IPv4: whether the captured header checksum is right; IPv6: `None`.
    pub ipv4_checksum_ok: Option<bool>,
    /// The capture holds fewer bytes than the IP length says.
    pub truncated: bool,
}

impl RoceDatagram {
    /// Whether the ICRC in the last four bytes of the payload is right for
    /// the IP and UDP headers. Always false for a truncated capture.
    pub fn icrc_ok(&self) -> bool {
        !self.truncated && icrc::verify(&self.ip_header, &self.udp_header, &self.udp_payload)
    }

    /// Validate the payload as a RoCEv2 packet (structure only; see
    /// [`RoceDatagram::icrc_ok`] for the ICRC).
    pub fn packet(&self) -> Result<RocePacket<&[u8]>> {
        RocePacket::new_checked(&self.udp_payload[..])
    }
}

/// Internet checksum of an IPv4 header with its checksum field taken as 0.
fn ipv4_header_checksum(h: &[u8]) -> u16 {
    inet_checksum(&[&h[..10], &h[12..]])
}

/// Internet checksum (RFC 1071: the ones' complement of the ones'
/// complement sum of 16-bit words) over `parts`, as if concatenated. Over
/// bytes that include a correct checksum it is 0.
pub fn inet_checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u64 = 0;
    let mut odd: Option<u8> = None;
    for p in parts {
        for &b in p.iter() {
            match odd.take() {
                Some(hi) => sum += u64::from(u16::from_be_bytes([hi, b])),
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum += u64::from(u16::from_be_bytes([hi, 0]));
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

const ETH_IPV4: u16 = 0x0800;
const ETH_IPV6: u16 = 0x86DD;

fn be16(d: &[u8], off: usize) -> Option<u16> {
    let b = d.get(off..off + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Find the network layer: (ethertype, offset of the IP header).
fn l3_of(linktype: LinkType, data: &[u8]) -> Option<(u16, usize)> {
    match linktype {
        LinkType::Ethernet => {
            let eth = Ethernet2HeaderSlice::from_slice(data).ok()?;
            let mut et = eth.ether_type().0;
            let mut off = eth.slice().len();
            // 802.1Q, 802.1ad and the old QinQ tag; at most a few levels.
            let mut tags = 0;
            while matches!(et, 0x8100 | 0x88A8 | 0x9100) {
                tags += 1;
                if tags > 8 {
                    return None;
                }
                let v = SingleVlanHeaderSlice::from_slice(data.get(off..)?).ok()?;
                et = v.ether_type().0;
                off += v.slice().len();
            }
            Some((et, off))
        }
        LinkType::RawIp => {
            let v = data.first()? >> 4;
            match v {
                4 => Some((ETH_IPV4, 0)),
                6 => Some((ETH_IPV6, 0)),
                _ => None,
            }
        }
        LinkType::LinuxSll => Some((be16(data, 14)?, 16)),
        LinkType::LinuxSll2 => {
            if data.len() < 20 {
                return None;
            }
            Some((be16(data, 0)?, 20))
        }
        LinkType::Null | LinkType::Loop => {
            let b: [u8; 4] = data.get(..4)?.try_into().ok()?;
            let fam = if linktype == LinkType::Loop {
                u32::from_be_bytes(b)
            } else {
                // Host byte order of the capturing machine: try both.
                let le = u32::from_le_bytes(b);
                if le > 0xFFFF {
                    u32::from_be_bytes(b)
                } else {
                    le
                }
            };
            match fam {
                2 => Some((ETH_IPV4, 4)),
                10 | 24 | 28 | 30 => Some((ETH_IPV6, 4)),
                _ => None,
            }
        }
        LinkType::Other(_) => None,
    }
}

/// Find the RoCEv2 packet(s) in one captured frame.
///
/// `Ok(None)`: the frame is not an unfragmented IPv4/IPv6 UDP datagram to
/// `port` (ARP, TCP, other UDP, IPv4 fragments, IPv6 with extension headers,
/// unknown link types, or too short to show a UDP header).
/// `Ok(Some(v))`: one datagram, or one per segment of a UDP GSO
/// super-packet (see [`split_gso`]). The UDP payload is returned even when it
/// is not a valid RoCE packet; check [`RoceDatagram::packet`] and
/// [`RoceDatagram::icrc_ok`].
/// `Err`: UDP to `port` but the IP/UDP lengths are inconsistent.
/// Never panics.
pub fn parse_frame(
    linktype: LinkType,
    data: &[u8],
    port: u16,
) -> Result<Option<Vec<RoceDatagram>>> {
    let Some((et, off)) = l3_of(linktype, data) else { return Ok(None) };
    let Some(l3) = data.get(off..) else { return Ok(None) };
    let (ip_version, ip_header, udp_off, ip_end, endpoints_ip, meta, csum_ok);
    match (et, l3.first().map(|b| b >> 4)) {
        (ETH_IPV4, Some(4)) => {
            let Ok(h) = Ipv4HeaderSlice::from_slice(l3) else { return Ok(None) };
            if h.protocol() != IpNumber::UDP || h.is_fragmenting_payload() {
                return Ok(None);
            }
            let hl = h.slice().len();
            ip_version = 4;
            ip_header = h.slice();
            udp_off = off + hl;
            ip_end = off + usize::from(h.total_len());
            endpoints_ip = (IpAddr::V4(h.source_addr()), IpAddr::V4(h.destination_addr()));
            meta = IpMeta {
                ttl: h.ttl(),
                tos: l3[1],
                ipv4_id: h.identification(),
                dont_fragment: h.dont_fragment(),
                flow_label: 0,
            };
            csum_ok = Some(ipv4_header_checksum(h.slice()) == h.header_checksum());
        }
        (ETH_IPV6, Some(6)) => {
            let Ok(h) = Ipv6HeaderSlice::from_slice(l3) else { return Ok(None) };
            if h.next_header() != IpNumber::UDP {
                return Ok(None);
            }
            ip_version = 6;
            ip_header = h.slice();
            udp_off = off + h.slice().len();
            ip_end = udp_off + usize::from(h.payload_length());
            endpoints_ip = (IpAddr::V6(h.source_addr()), IpAddr::V6(h.destination_addr()));
            meta = IpMeta {
                ttl: h.hop_limit(),
                tos: h.traffic_class(),
                ipv4_id: 0,
                dont_fragment: true,
                flow_label: h.flow_label().value(),
            };
            csum_ok = None;
        }
        _ => return Ok(None),
    }
    let Some(Ok(udp)) = data.get(udp_off..).map(UdpHeaderSlice::from_slice) else {
        return Ok(None);
    };
    if udp.destination_port() != port {
        return Ok(None);
    }
    if ip_end < udp_off + UdpHeader::LEN {
        return Err(Error::InvalidField("IP length leaves no room for the UDP header"));
    }
    let ulen = usize::from(udp.length());
    if ulen < UdpHeader::LEN {
        return Err(Error::InvalidField("UDP length shorter than the UDP header"));
    }
    if udp_off + ulen != ip_end {
        return Err(Error::InvalidField("UDP length disagrees with the IP length"));
    }
    let truncated = ip_end > data.len();
    let payload = &data[udp_off + UdpHeader::LEN..ip_end.min(data.len())];
    let mut udp_header = [0u8; 8];
    udp_header.copy_from_slice(udp.slice());
    let base = RoceDatagram {
        ip_version,
        ip_header: ip_header.to_vec(),
        udp_header,
        endpoints: UdpEndpoints {
            src: endpoints_ip.0,
            dst: endpoints_ip.1,
            src_port: udp.source_port(),
            dst_port: udp.destination_port(),
        },
        meta,
        udp_payload: payload.to_vec(),
        gso: None,
        l2_trailer_len: data.len().saturating_sub(ip_end),
        ipv4_checksum_ok: csum_ok,
        truncated,
    };
    if payload.len() >= 64 && !icrc::verify(ip_header, &udp_header, payload) {
        if let Some(segs) = split_gso(&base) {
            return Ok(Some(segs));
        }
    }
    Ok(Some(vec![base]))
}

/// IP and UDP headers of segment `k` (carrying `seg_len` bytes of UDP
/// payload) of a GSO super-packet with headers `ip`/`udp`.
fn seg_headers(ip: &[u8], udp: &[u8; 8], seg_len: usize, k: usize) -> (Vec<u8>, [u8; 8]) {
    let mut ip = ip.to_vec();
    let ulen = (UdpHeader::LEN + seg_len) as u16;
    if ip.first().map(|b| b >> 4) == Some(4) && ip.len() >= 20 {
        let tot = (ip.len() + UdpHeader::LEN + seg_len) as u16;
        ip[2..4].copy_from_slice(&tot.to_be_bytes());
        let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(k as u16);
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        let c = ipv4_header_checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
    } else if ip.len() >= 6 {
        ip[4..6].copy_from_slice(&ulen.to_be_bytes());
    }
    let mut u = *udp;
    u[4..6].copy_from_slice(&ulen.to_be_bytes());
    (ip, u)
}

/// Largest segment [`split_gso`] tries: a 4096-byte IB MTU payload plus the
/// largest header set (BTH, RDETH, DETH, AtomicETH: 52 bytes) and the ICRC,
/// rounded up.
pub const GSO_MAX_SEGMENT: usize = 4096 + 64;

/// Split a UDP GSO super-packet (several RoCE packets back to back in one
/// captured UDP datagram, as seen when capturing before segmentation).
///
/// The segment size `s` is the smallest multiple of 4 from 16 such that the
/// bytes at `s` look like a BTH of the same P_Key and DestQP (TVer 0), and the
/// first `s` bytes carry a valid ICRC once the IP/UDP lengths are those of an
/// `s`-byte segment. Segment `k` gets IPv4 identification = captured + `k`.
/// Returns `None` if no such `s` exists (then the datagram is just a packet
/// with a bad ICRC).
///
/// Unlike the oracle, sizes above [`GSO_MAX_SEGMENT`] are not tried: no
/// RoCE packet is that long, and the cap bounds the work a hostile datagram
/// can cause (each candidate costs a CRC over `s` bytes).
pub fn split_gso(d: &RoceDatagram) -> Option<Vec<RoceDatagram>> {
    let ib = &d.udp_payload;
    let n = ib.len();
    if n < 16 {
        return None;
    }
    let s = (16..n.min(GSO_MAX_SEGMENT + 1)).step_by(4).find(|&s| {
        s + 8 <= n
            && ib[s + 1] & 0x0F == 0
            && ib[s + 2..s + 4] == ib[2..4]
            && ib[s + 5..s + 8] == ib[5..8]
            && {
                let (ip0, udp0) = seg_headers(&d.ip_header, &d.udp_header, s, 0);
                icrc::verify(&ip0, &udp0, &ib[..s])
            }
    })?;
    let segments = n.div_ceil(s);
    let out = ib
        .chunks(s)
        .enumerate()
        .map(|(k, seg)| {
            let (ip, udp) = seg_headers(&d.ip_header, &d.udp_header, seg.len(), k);
            let mut meta = d.meta;
            if d.ip_version == 4 {
                meta.ipv4_id = meta.ipv4_id.wrapping_add(k as u16);
            }
            RoceDatagram {
                ip_version: d.ip_version,
                ip_header: ip,
                udp_header: udp,
                endpoints: d.endpoints,
                meta,
                udp_payload: seg.to_vec(),
                gso: Some(GsoInfo { segment: k, segments, size: s }),
                l2_trailer_len: d.l2_trailer_len,
                ipv4_checksum_ok: d.ipv4_checksum_ok,
                truncated: d.truncated,
            }
        })
        .collect();
    Some(out)
}
