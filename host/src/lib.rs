//! The host side of roce-emu devices: what makes a device belong to the
//! host rather than to the first process that opens it.
//!
//! A UDP or raw device is **shared** by every process of the user that opens it
//! (see `docs/devices.md`, "One device, many processes"):
//!
//! - each process is a **member** and holds a **slot** ([`registry`]): a file
//!   lock in the user's runtime directory, freed by the kernel when the
//!   process ends, however it ends;
//! - a member's QPNs carry its slot in their top byte (slot `s` creates QPNs
//!   `s << 16 | n`), so QPNs are unique device-wide;
//! - every member of a UDP device binds the device's IP:4791 with `SO_REUSEPORT`, and a
//!   classic BPF program on the group ([`steer`]) sends each datagram to the
//!   socket of the member whose slot its destination QPN carries, in the
//!   kernel, with no daemon and no extra hop;
//! - when the group changes the program is re-made from a probe round
//!   ([`steer::probe_round`]); a datagram that reaches the wrong member
//!   meanwhile is dropped and counted (`steer_foreign`), never given to a QP
//!   that is not its own, and wakes that member's [`steer::Steward`] to
//!   re-map;
//! - a raw device's members each attach a filter of their own to their
//!   AF_PACKET socket ([`steer::raw_filter`], `SO_ATTACH_FILTER`) taking the
//!   same datagrams the program would steer to them; it depends only on the
//!   member's slot and listeners, so a raw group needs no probe round, and
//!   exactly one member answers ARP/NDP ([`steer::Joining::answer_gate`]).
//!
//! The HCA core stays in each process; only the socket group, the slots and
//! the steering program are shared.

pub mod registry;
pub mod steer;
pub mod sysfs;

pub use registry::{JoinError, MAX_MEMBERS};
pub use steer::{Joining, ListenGuard, Steward};
