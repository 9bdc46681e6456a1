//! Real-wire transports for the sans-IO RoCEv2 core.
//!
//! * [`UdpTransport`]: RoCEv2 over a plain UDP socket (no privileges), with
//!   `sendmmsg`/`recvmmsg`, UDP GSO/GRO, correct ICRCs on send and a
//!   documented receive-side ICRC policy ([`rxcheck`]).
//! * [`RawTransport`]: whole Ethernet frames through an `AF_PACKET` socket
//!   (`CAP_NET_RAW`), every header ours, exact receive-side ICRC checks.
//! * [`Driver`]: a dedicated thread that moves datagrams between a
//!   [`roce_emulator::SansIo`] node (behind a mutex) and a transport, and
//!   fires its timers.
//! * [`ceiling`]: raw UDP throughput between two local addresses (the
//!   "ceiling" a RoCE-over-UDP device can reach on this host).
//!
//! Design notes, the receive-side ICRC policy and measured numbers:
//! `transport/README.md`.

pub mod ceiling;
pub mod coalesce;
pub mod counters;
pub mod crcmath;
pub mod driver;
pub mod engine;
pub mod faults;
pub mod pcap;
pub mod raw;
pub mod rxcheck;
pub mod udp;

pub use counters::{CountersSnapshot, TransportCounters};
pub use driver::{Driver, DriverConfig, DriverHandle, Transport};
pub use engine::{Engine, EngineConfig, EngineHandle, RoundStats};
pub use raw::{RawConfig, RawCounters, RawError, RawSnapshot, RawTransport};
pub use udp::{RxIcrcPolicy, SendOutcome, TransportError, UdpConfig, UdpTransport, DEFAULT_PORT};
