//! RoCEv2 wire formats: the InfiniBand transport headers carried in UDP
//! (port 4791), the invariant CRC, and the Ethernet/IP/UDP framing and
//! capture files around them.
//!
//! No I/O, no `unsafe`, no async. Every header is a zero-copy view over a
//! byte buffer (`new_checked` verifies the length; after it accessors never
//! panic) plus a small `Copy` `Repr` with `parse` and `emit`, in the manner
//! of smoltcp's `wire` module. Unknown wire values are kept, not rejected.
//!
//! The single source of truth for opcodes is [`opcode::TABLE`].

pub mod bth;
pub mod error;
pub mod ext;
mod field;
pub mod frame;
pub mod icrc;
pub mod opcode;
pub mod pcap;
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
