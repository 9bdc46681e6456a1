//! The datagram (`SOCK_DGRAM`) protocol's headers. A datagram rsocket
//! owns a UDP socket and one UD QP per local address; rsocket.c's
//! "Datagram" functions (`ds_*`, `udp_svc_*`) use two headers:
//!
//! * [`DsHeader`] before every datagram sent on a UD QP: the *sender's*
//!   address and port, so the receiver can answer `rrecvfrom` (version 4:
//!   8 bytes, version 6: 24). A receive buffer holds the 40-byte GRH, then
//!   at most [`SNDLOWAT`] bytes: header and payload;
//! * [`DsUdpHeader`] before datagrams sent on the UDP socket, used until
//!   the peer's QPN is known: op [`UdpOp::Data`] carries the first
//!   datagram to a new destination (the receiving service thread forwards
//!   its payload to its own QP and answers with [`UdpOp::Ctrl`]), and both
//!   carry the sender's QPN so the receiver can make an address handle.
//!
//! Byte order: all network order — the port, address and IPv6 flow label
//! are copied from the `sockaddr` as they are there, the tag and QPN are
//! `htobe32`. These datagrams are not validated beyond their headers by
//! rdma-core: a receive that fails [`DsHeader::parse_recv`] is dropped
//! and its buffer reposted (`ds_poll_cqs`), a UDP message that fails
//! [`DsUdpHeader::parse`] is ignored (`udp_svc_process_rs`). No errno.

use crate::consts::SNDLOWAT;

/// Length of the GRH a UD receive starts with.
pub const GRH_LEN: usize = 40;
pub const DS_IPV4_HDR_LEN: usize = 8;
pub const DS_IPV6_HDR_LEN: usize = 24;
pub const DS_UDP_TAG: u32 = 0x5555_5555;
pub const DS_UDP_IPV4_HDR_LEN: usize = 16;
pub const DS_UDP_IPV6_HDR_LEN: usize = 28;

/// Why a datagram header was refused (the datagram is dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DsError {
    /// Shorter than its header says.
    Short { len: usize },
    /// A version other than 4 and 6, or a length that does not match it.
    BadHeader { version: u8, length: u8 },
    /// The UDP header's tag is not [`DS_UDP_TAG`].
    BadTag { tag: u32 },
    /// The UDP header's version is not the family the datagram came from.
    FamilyMismatch { version: u8 },
}

/// An address as the datagram headers carry it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DsAddr {
    V4([u8; 4]),
    /// The flow label as `sin6_flowinfo` holds it (network order).
    V6 {
        flowinfo: u32,
        addr: [u8; 16],
    },
}

/// `struct ds_header`: version (4/6), length (8/24), port (big-endian),
/// then the IPv4 address, or the IPv6 flow information and address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsHeader {
    pub port: u16,
    pub addr: DsAddr,
}

impl DsHeader {
    pub fn len(&self) -> usize {
        match self.addr {
            DsAddr::V4(_) => DS_IPV4_HDR_LEN,
            DsAddr::V6 { .. } => DS_IPV6_HDR_LEN,
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The most payload one datagram carries after this header: a receive
    /// buffer holds [`SNDLOWAT`] bytes after the GRH (`ds_post_recv`).
    pub fn max_payload(&self) -> usize {
        SNDLOWAT as usize - self.len()
    }

    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.len()];
        b[1] = self.len() as u8;
        b[2..4].copy_from_slice(&self.port.to_be_bytes());
        match self.addr {
            DsAddr::V4(a) => {
                b[0] = 4;
                b[4..8].copy_from_slice(&a);
            }
            DsAddr::V6 { flowinfo, addr } => {
                b[0] = 6;
                b[4..8].copy_from_slice(&flowinfo.to_be_bytes());
                b[8..24].copy_from_slice(&addr);
            }
        }
        b
    }

    /// The header at the start of `b` (a datagram's payload, after the
    /// GRH) and the length of the user data after it.
    pub fn parse(b: &[u8]) -> Result<(DsHeader, usize), DsError> {
        let short = DsError::Short { len: b.len() };
        let (&version, &length) = (b.first().ok_or(short)?, b.get(1).ok_or(short)?);
        let want = match version {
            4 => DS_IPV4_HDR_LEN,
            6 => DS_IPV6_HDR_LEN,
            _ => 0,
        };
        if want == 0 || usize::from(length) != want {
            return Err(DsError::BadHeader { version, length });
        }
        let h = b.get(..want).ok_or(short)?;
        let port = u16::from_be_bytes([h[2], h[3]]);
        let addr = if version == 4 {
            DsAddr::V4([h[4], h[5], h[6], h[7]])
        } else {
            let mut addr = [0u8; 16];
            addr.copy_from_slice(&h[8..24]);
            DsAddr::V6 { flowinfo: u32::from_be_bytes([h[4], h[5], h[6], h[7]]), addr }
        };
        Ok((DsHeader { port, addr }, b.len() - want))
    }

    /// A UD receive completion of `byte_len` bytes (GRH included) whose
    /// buffer (GRH excluded) is `buf`: the header and the user data's
    /// range in `buf`. rdma-core's `ds_valid_recv` checks only the IPv4
    /// minimum; an IPv6 header in a shorter datagram would make its
    /// `ds_recvfrom` read before the buffer: we refuse it.
    pub fn parse_recv(
        buf: &[u8],
        byte_len: u32,
    ) -> Result<(DsHeader, core::ops::Range<usize>), DsError> {
        let len = (byte_len as usize).checked_sub(GRH_LEN).ok_or(DsError::Short { len: 0 })?;
        let data = buf.get(..len).ok_or(DsError::Short { len: buf.len() })?;
        let (h, user) = DsHeader::parse(data)?;
        Ok((h, h.len()..h.len() + user))
    }
}

/// The UDP header's op (`RS_OP_DATA`, `RS_OP_CTRL`; other values are sent
/// by no one, and rdma-core's receiver acts on neither: only the QPN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpOp {
    Data,
    Ctrl,
    Other(u8),
}

impl UdpOp {
    fn bits(self) -> u8 {
        match self {
            UdpOp::Data => 0,
            UdpOp::Ctrl => 7,
            UdpOp::Other(v) => v,
        }
    }

    fn from_bits(v: u8) -> UdpOp {
        match v {
            0 => UdpOp::Data,
            7 => UdpOp::Ctrl,
            v => UdpOp::Other(v),
        }
    }
}

/// `struct ds_udp_header`: tag (`0x55555555`, big-endian), version (4/6),
/// op, length (16/28), reserved, the sender's QPN (big-endian, 24 bits; the
/// top byte is 0), then the sender QP's IP address (4 or 16 bytes; the
/// docs say "target", the code writes the source).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsUdpHeader {
    pub op: UdpOp,
    pub qpn: u32,
    /// 4 or 16 bytes.
    pub addr: DsUdpAddr,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DsUdpAddr {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl DsUdpHeader {
    pub fn len(&self) -> usize {
        match self.addr {
            DsUdpAddr::V4(_) => DS_UDP_IPV4_HDR_LEN,
            DsUdpAddr::V6(_) => DS_UDP_IPV6_HDR_LEN,
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn emit(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.len()];
        b[0..4].copy_from_slice(&DS_UDP_TAG.to_be_bytes());
        b[5] = self.op.bits();
        b[6] = self.len() as u8;
        b[8..12].copy_from_slice(&(self.qpn & 0xFF_FFFF).to_be_bytes());
        match self.addr {
            DsUdpAddr::V4(a) => {
                b[4] = 4;
                b[12..16].copy_from_slice(&a);
            }
            DsUdpAddr::V6(a) => {
                b[4] = 6;
                b[12..28].copy_from_slice(&a);
            }
        }
        b
    }

    /// The header of a UDP datagram that came from an IPv6 (`from_v6`) or
    /// IPv4 address, and the payload's length. The checks are
    /// `udp_svc_valid_udp_hdr`'s: tag, version matching the source's
    /// family, length matching the version.
    pub fn parse(b: &[u8], from_v6: bool) -> Result<(DsUdpHeader, usize), DsError> {
        let short = DsError::Short { len: b.len() };
        let h = b.get(..DS_UDP_IPV4_HDR_LEN).ok_or(short)?;
        let tag = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        if tag != DS_UDP_TAG {
            return Err(DsError::BadTag { tag });
        }
        let (version, length) = (h[4], h[6]);
        let want = match version {
            4 => DS_UDP_IPV4_HDR_LEN,
            6 => DS_UDP_IPV6_HDR_LEN,
            _ => return Err(DsError::BadHeader { version, length }),
        };
        if usize::from(length) != want {
            return Err(DsError::BadHeader { version, length });
        }
        if (version == 6) != from_v6 {
            return Err(DsError::FamilyMismatch { version });
        }
        let h = b.get(..want).ok_or(short)?;
        let qpn = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) & 0xFF_FFFF;
        let addr = if version == 4 {
            DsUdpAddr::V4([h[12], h[13], h[14], h[15]])
        } else {
            let mut a = [0u8; 16];
            a.copy_from_slice(&h[12..28]);
            DsUdpAddr::V6(a)
        };
        Ok((DsUdpHeader { op: UdpOp::from_bits(h[5]), qpn, addr }, b.len() - want))
    }
}
