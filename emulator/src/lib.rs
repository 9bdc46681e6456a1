//! The HCA model: a sans-IO RoCEv2 device (see ../shared/DESIGN.md).
//!
//! No sockets, threads or clocks inside: inputs carry `now`, outputs are
//! pulled (`poll_transmit`, `poll_timeout`, completions).

pub mod io;
pub mod qp_attr;
pub mod sim;
pub mod time;

pub use io::{Datagram, SansIo};
pub use time::Instant;
