//! The HCA model: a sans-IO RoCEv2 device (see ../shared/DESIGN.md).
//!
//! No sockets, threads or clocks inside: inputs carry `now`, outputs are
//! pulled (`poll_transmit`, `poll_timeout`, completions).
//!
//! Roles, as in rxe and IBA chapter 9: [`requester`] (WQE → packets),
//! [`responder`] (the request check chain), [`completer`] (responses →
//! completions, retry and RNR timers), [`recv`] (receive demux). Objects
//! and verbs live in [`hca`], [`objects`], [`qp`], [`wr`].

pub mod completer;
pub mod counters;
pub mod error;
pub mod hca;
pub mod io;
pub mod objects;
pub mod qp;
pub mod qp_attr;
pub mod recv;
pub mod requester;
pub mod responder;
pub mod sim;
pub mod time;
pub mod wr;

pub use counters::Counters;
pub use error::*;
pub use hca::{Hca, HcaConfig, MrInfo};
pub use io::{Datagram, SansIo};
pub use objects::{AsyncEvent, CqHandle, DeviceAttr, MrHandle, PdHandle, PortAttr, PortState};
pub use qp::QpInitAttr;
pub use qp_attr::{AccessFlags, AhAttr, PathMtu, QpAttr, QpCap, QpState, QpType};
pub use recv::DropReason;
pub use time::Instant;
pub use wr::{
    RecvWr, SendFlags, SendWr, Sge, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
