//! Hand-built RoCEv2 datagrams for tests and fault hooks: one builder
//! instead of each test serializing headers and filling the ICRC itself.
//!
//! ```
//! use roce_sim::packet::{request, PacketBuilder};
//! use roce_packet::{Opcode, Qpn};
//! let to_b = PacketBuilder::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
//! let r = request(Opcode::RC_SEND_ONLY, Qpn::new(0x11), 0x100);
//! let d = to_b.sized(&r, b"ping");
//! assert!(to_b.icrc_ok(&d.payload));
//! ```

use bytes::Bytes;
use core::net::IpAddr;
use roce_emulator::io::Datagram;
use roce_packet::{
    pad_for, BthRepr, IpMeta, IpUdpHeader, Opcode, Psn, Qpn, RoceRepr, UdpEndpoints,
};

/// The UDP source port a builder uses unless told otherwise.
pub const DEFAULT_SRC_PORT: u16 = 0xC000;

/// Builds datagrams from `endpoints` with a valid ICRC (computed over the
/// IP/UDP headers these endpoints and `meta` give, as the receiver checks
/// it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketBuilder {
    /// Addresses and ports of every datagram built.
    pub endpoints: UdpEndpoints,
    /// IP header fields (DSCP, ECN, TTL, flow label).
    pub meta: IpMeta,
}

impl PacketBuilder {
    /// From `src` to `dst`, UDP source port [`DEFAULT_SRC_PORT`], to the
    /// RoCEv2 port, default IP fields.
    pub fn new(src: IpAddr, dst: IpAddr) -> PacketBuilder {
        PacketBuilder::endpoints(UdpEndpoints {
            src,
            dst,
            src_port: DEFAULT_SRC_PORT,
            dst_port: roce_packet::ROCE_V2_PORT,
        })
    }

    /// With these endpoints and default IP fields.
    pub fn endpoints(endpoints: UdpEndpoints) -> PacketBuilder {
        PacketBuilder { endpoints, meta: IpMeta::default() }
    }

    /// With the endpoints and IP fields of `d` (to re-seal or check a
    /// datagram someone else built).
    pub fn of(d: &Datagram) -> PacketBuilder {
        PacketBuilder { endpoints: d.endpoints, meta: d.meta }
    }

    /// With another UDP source port.
    pub fn src_port(mut self, port: u16) -> PacketBuilder {
        self.endpoints.src_port = port;
        self
    }

    /// The same builder in the other direction (addresses swapped, ports
    /// kept).
    pub fn reversed(mut self) -> PacketBuilder {
        core::mem::swap(&mut self.endpoints.src, &mut self.endpoints.dst);
        self
    }

    /// `r` serialized with `payload`, ICRC filled in. `r` is taken as it
    /// is (its `payload_len` and pad count are not adjusted; see
    /// [`PacketBuilder::sized_bytes`]). Panics if `r` cannot be
    /// serialized.
    pub fn bytes(&self, r: &RoceRepr, payload: &[u8]) -> Vec<u8> {
        let mut b = r.to_vec(payload).expect("serializable RoCE headers");
        self.seal(&mut b);
        b
    }

    /// Like [`PacketBuilder::bytes`], with `payload_len` set to the
    /// payload's length and the BTH pad count to match.
    pub fn sized_bytes(&self, r: &RoceRepr, payload: &[u8]) -> Vec<u8> {
        self.bytes(&sized(r, payload.len()), payload)
    }

    /// (Re)compute the ICRC of serialized bytes, e.g. after editing them.
    pub fn seal(&self, udp_payload: &mut [u8]) {
        IpUdpHeader::build(&self.endpoints, &self.meta, udp_payload.len())
            .expect("IP/UDP header")
            .fill_icrc(udp_payload);
    }

    /// Whether the ICRC of `udp_payload` is right for these endpoints.
    pub fn icrc_ok(&self, udp_payload: &[u8]) -> bool {
        IpUdpHeader::build(&self.endpoints, &self.meta, udp_payload.len())
            .is_ok_and(|h| h.verify_icrc(udp_payload))
    }

    /// A datagram carrying these bytes as they are.
    pub fn raw(&self, udp_payload: impl Into<Bytes>) -> Datagram {
        Datagram {
            endpoints: self.endpoints,
            meta: self.meta,
            payload: udp_payload.into(),
            body: None,
        }
    }

    /// A datagram of [`PacketBuilder::bytes`].
    pub fn datagram(&self, r: &RoceRepr, payload: &[u8]) -> Datagram {
        self.raw(self.bytes(r, payload))
    }

    /// A datagram of [`PacketBuilder::sized_bytes`].
    pub fn sized(&self, r: &RoceRepr, payload: &[u8]) -> Datagram {
        self.raw(self.sized_bytes(r, payload))
    }
}

/// Headers with just a BTH: `opcode` to `dest_qp` at `psn`, AckReq set.
pub fn request(opcode: Opcode, dest_qp: Qpn, psn: u32) -> RoceRepr {
    RoceRepr {
        bth: BthRepr { opcode, dest_qp, psn: Psn::new(psn), ack_req: true, ..BthRepr::default() },
        ..RoceRepr::default()
    }
}

/// `r` with `payload_len = len` and the BTH pad count for `len` bytes.
pub fn sized(r: &RoceRepr, len: usize) -> RoceRepr {
    let mut r = *r;
    r.payload_len = len;
    r.bth.pad_count = pad_for(len);
    r
}
