//! RoCEv2 wire formats: the InfiniBand transport headers carried in UDP
//! (port 4791), the invariant CRC, and the Ethernet/IP/UDP framing around
//! them. Capture files (pcap/pcapng) are read and written by `roce-pcap`,
//! a crate above this one.
//!
//! No I/O, no `unsafe`, no async. Every header is a zero-copy view over a
//! byte buffer (`new_checked` verifies the length; after it accessors never
//! panic) plus a small `Copy` `Repr` with `parse` and `emit`, in the manner
//! of smoltcp's `wire` module. Unknown wire values are kept, not rejected.
//!
//! The single source of truth for opcodes is [`opcode::TABLE`].
//!
//! # Example: build an RDMA WRITE, frame it, check its ICRC, parse it back
//!
//! ```
//! use roce_packet::{frame::fill_icrc, *};
//! use std::net::{IpAddr, Ipv4Addr};
//!
//! let payload = b"hello, rdma";                  // 11 bytes -> 1 pad byte
//! let repr = RoceRepr {
//!     bth: BthRepr {
//!         opcode: Opcode::RC_RDMA_WRITE_ONLY,
//!         dest_qp: Qpn::new(0x11),
//!         psn: Psn::new(0xFF_FFFF),              // the last PSN before the wrap
//!         ack_req: true,
//!         pad_count: pad_for(payload.len()),
//!         ..BthRepr::default()
//!     },
//!     reth: Some(RethRepr { va: 0x1000, rkey: RKey::new(0x1234), dma_len: 11 }),
//!     payload_len: payload.len(),
//!     ..RoceRepr::default()
//! };
//! let mut udp_payload = repr.to_vec(payload).unwrap();  // BTH+RETH+data+pad+ICRC slot
//! assert_eq!(udp_payload.len(), 12 + 16 + 11 + 1 + 4);
//!
//! let ep = UdpEndpoints {
//!     src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
//!     dst: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
//!     src_port: 0xC011,
//!     dst_port: ROCE_V2_PORT,
//! };
//! fill_icrc(&ep, &IpMeta::default(), &mut udp_payload).unwrap();
//! assert!(frame::verify_icrc(&ep, &IpMeta::default(), &udp_payload));
//!
//! let pkt = RocePacket::new_checked(&udp_payload[..]).unwrap();
//! assert_eq!(pkt.opcode().name(), "RC_RDMA_WRITE_ONLY");
//! assert_eq!(pkt.payload(), payload);
//! assert_eq!(pkt.bth().psn().next(), Psn::new(0));   // 24-bit wrap
//! assert_eq!(RoceRepr::parse(&pkt), repr);
//! ```

pub mod bth;
pub mod error;
pub mod ext;
mod field;
pub mod frame;
pub mod icrc;
pub mod icrc_math;
pub mod mad;
pub mod opcode;
pub mod roce;
pub mod types;

pub use bth::{Bth, BthRepr};
pub use error::{Error, Result};
pub use ext::*;
pub use frame::{IpMeta, IpUdpHeader, UdpEndpoints};
pub use opcode::{ExtHeader, HeaderSet, OpInfo, OpKind, Opcode, Position, Transport};
pub use roce::{pad_for, RocePacket, RoceRepr};
pub use types::{LKey, Msn, PKey, Psn, QKey, Qpn, RKey};

/// The IANA-assigned RoCEv2 UDP destination port.
pub const ROCE_V2_PORT: u16 = 4791;
