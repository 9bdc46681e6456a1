//! Real-wire transports for the sans-IO RoCEv2 core.
//!
//! * [`UdpTransport`]: RoCEv2 over a plain UDP socket (no privileges), with
//!   `sendmmsg`/`recvmmsg`, UDP GSO/GRO, correct ICRCs on send and a
//!   documented receive-side ICRC policy ([`rxcheck`]).
//! * [`RawTransport`]: whole Ethernet frames through an `AF_PACKET` socket
//!   (`CAP_NET_RAW`), every header ours, exact receive-side ICRC checks.
//! * [`Engine`]: the one real-time driver. It moves datagrams between
//!   [`roce_emulator::SansIo`] nodes (behind mutexes) and transports and
//!   fires their timers, from the thread that posts or waits when it can
//!   and from its own thread otherwise. [`NodeThread`] is a one-port engine
//!   with its thread.
//! * [`ceiling`]: raw UDP throughput between two local addresses (the
//!   "ceiling" a RoCE-over-UDP device can reach on this host).
//!
//! Design notes, the receive-side ICRC policy and measured numbers:
//! `transport/README.md`.

pub mod ceiling;
pub mod counters;
pub mod credits;
pub mod engine;
pub mod faults;
/// Send multicast from a socket bound to `local` on `local`'s interface,
/// looped back to the host's members (what a device's socket does; for
/// testers that send to groups).
pub use mcast::set_sender as set_multicast_sender;
pub(crate) mod mcast;
pub mod node_thread;
pub mod pcap;
pub mod raw;
pub mod rxcheck;
pub mod signals;
pub mod socket;
pub mod steer;
pub mod udp;

pub use counters::{CountersSnapshot, TransportCounters};
pub use engine::{Engine, EngineConfig, EngineHandle, RoundStats};
pub use node_thread::{NodeThread, NodeThreadConfig, NodeThreadHandle};
pub use raw::{RawConfig, RawCounters, RawError, RawSnapshot, RawTransport};
pub use socket::Link;
pub use udp::{RxIcrcPolicy, SendOutcome, TransportError, UdpConfig, UdpTransport, DEFAULT_PORT};
