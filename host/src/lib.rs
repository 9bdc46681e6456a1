//! roce-emu devices on a real host: everything between the verbs
//! (`roce-verbs-api`) and the wire (`roce-transport`).
//!
//! - **configuration** ([`config`]): which devices the host has
//!   ([`DeviceConfig`]: `ROCE_EMU_DEVICES`, the configuration file, the
//!   API) and what moves their frames ([`TransportKind`]);
//! - **opening** ([`open`]): a device's core and its UDP or raw transport
//!   put together for each other, with injected faults
//!   (`ROCE_EMU_FAULTS`), on one engine or several devices on one
//!   ([`DeviceConfig::open`], [`DeviceConfig::open_group`]);
//! - **the driver** ([`driver`]): [`EngineDriver`], the verbs
//!   [`roce_verbs_api::Driver`] of real devices, over a
//!   [`roce_transport::Engine`];
//! - **stats publishing** ([`publish`]): each open device's counters, for
//!   `roce stats` in another process;
//! - **membership and steering** ([`registry`], [`steer`]): a device shared
//!   by every process of the user, below.
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
//!   meanwhile is counted (`steer_foreign`), never given to a QP that is
//!   not its own but forwarded to its member, and wakes that member's [`steer::Steward`] to
//!   re-map;
//! - a raw device's members each attach a filter of their own to their
//!   AF_PACKET socket ([`steer::raw_filter`], `SO_ATTACH_FILTER`) taking the
//!   same datagrams the program would steer to them; it depends only on the
//!   member's slot and listeners, so a raw group needs no probe round, and
//!   exactly one member answers ARP/NDP ([`steer::Joining::answer_gate`]).
//!
//! The HCA core stays in each process; only the socket group, the slots and
//! the steering program are shared.

pub mod config;
pub mod driver;
pub mod open;
pub mod publish;
pub mod registry;
pub mod steer;
pub mod sysfs;

pub use config::{
    sharing_enabled, ConfigError, DeviceConfig, TransportKind, DEFAULT_DEVICES, ENV_CONFIG,
    ENV_DEVICES, ENV_PCAP, ENV_SHARED, MAX_CQE,
};
pub use driver::{transport_counters, EngineDriver, UdpDriver};
pub use open::{congestion_from_env, GroupOptions, OpenError, ENV_CC};
pub use registry::{JoinError, MAX_MEMBERS};
/// Flush every `ROCE_EMU_PCAP` recording of this process (whole records):
/// for a process exiting with devices open (the drop-in calls it at exit).
pub use roce_transport::pcap::flush_all as flush_recordings;
/// Signals and the threads of devices (see [`roce_transport::signals`]).
pub use roce_transport::signals;
pub use roce_transport::EngineConfig;
pub use steer::{Joining, ListenGuard, Steward};
