//! The workload of `roce perf` (the front, argument parsing and printing, is
//! `cli/src/perf/`):
//!
//! * [`loops`]: the one bandwidth loop, the one latency loop, the one
//!   completion poll, used by both kinds of run below;
//! * in one process: [`Setup`] opens two UDP devices and connects QP
//!   pairs, [`run_bw`] and [`run_lat`] make one run, [`bw_series`] and
//!   [`lat_series`] the `--repeat` series with their references
//!   ([`reference`]: the raw-UDP ceiling and ping-pong);
//! * across processes: [`remote`], one side of a perftest run (perftest's
//!   out-of-band exchange, [`crate::perftest`]) facing `ib_write_bw` & co.
//!   or another `roce perf`.
//!
//! Every data check uses the one byte pattern, [`crate::pattern`].

mod bw;
mod lat;
mod local;
pub mod loops;
pub mod reference;
pub mod remote;
mod series;

pub use bw::{run_bw, BwResult};
pub use lat::{run_lat, LatResult};
pub use local::Setup;
pub use reference::{udp_rtt, Ceiling};
pub use series::{
    bw_series, lat_series, median, min_med_max, reported_spin, BwSeries, DevCounters, LatSeries,
    SeriesFailed, SeriesOptions,
};
use std::net::IpAddr;
use std::time::Duration;

/// Which test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TestKind {
    /// RDMA WRITE bandwidth (ib_write_bw).
    Write,
    /// RDMA READ bandwidth (ib_read_bw).
    Read,
    /// SEND/RECV bandwidth (ib_send_bw).
    Send,
    /// FETCH_AND_ADD rate (ib_atomic_bw; 8-byte messages).
    Atomic,
    /// Round-trip latency (ib_send_lat / ib_write_lat / ib_read_lat).
    Lat,
}

/// Which operation a latency test uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum LatKind {
    /// SEND/RECV ping-pong (ib_send_lat).
    Send,
    /// RDMA WRITE ping-pong, each side polling its memory (ib_write_lat).
    Write,
    /// RDMA READ, one outstanding (ib_read_lat).
    Read,
}

/// Who moves the frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PollMode {
    /// One engine per device: the test thread sends on post_send and, to
    /// wait, polls for `--spin-us` and then blocks in a completion channel
    /// (sleeping on the socket, woken by the datagram); each device's
    /// engine thread serves it while nobody waits on it.
    Event,
    /// One engine without a thread for both devices: the test thread sends
    /// on post_send and busy-polls both sockets while it waits.
    Busy,
}

impl PollMode {
    /// The name used in output.
    pub fn name(self) -> &'static str {
        match self {
            PollMode::Event => "event",
            PollMode::Busy => "busy",
        }
    }
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct PerfConfig {
    /// The test.
    pub test: TestKind,
    /// For lat.
    pub lat_op: LatKind,
    /// Message size.
    pub size: u32,
    /// Iterations per QP (ignored with `duration`).
    pub iters: u64,
    /// Time-bounded run.
    pub duration: Option<Duration>,
    /// QP pairs.
    pub qps: u32,
    /// Outstanding WRs per QP.
    pub tx_depth: u32,
    /// Path MTU bytes.
    pub mtu: u32,
    /// Device A address.
    pub addr_a: IpAddr,
    /// Device B address.
    pub addr_b: IpAddr,
    /// Driver threads or busy polling.
    pub poll: PollMode,
    /// Event mode: driver spin before sleeping, microseconds.
    pub spin_us: u64,
}
