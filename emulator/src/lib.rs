//! The HCA model: a sans-IO RoCEv2 device (see ../shared/DESIGN.md).
//!
//! No sockets, threads or clocks inside: inputs carry `now`, outputs are
//! pulled (`poll_transmit`, `poll_timeout`, completions). [`Hca`] implements
//! [`SansIo`]; the verbs are methods named like libibverbs' (`alloc_pd`,
//! `reg_mr`, `create_cq`, `create_qp`, `modify_qp`, `query_qp`, `post_send`,
//! `post_recv`, `poll_cq`, `destroy_*`).
//!
//! Roles, as in rxe and IBA chapter 9: [`requester`] (WQE → packets),
//! [`responder`] (the request check chain), [`completer`] (responses →
//! completions, retry and RNR timers), [`recv`] (receive demux). Objects
//! and verbs live in [`hca`], [`objects`], [`qp`], [`wr`].
//!
//! ```
//! use roce_emulator::*;
//! use std::net::{IpAddr, Ipv4Addr};
//! let mut hca = Hca::new(HcaConfig::new("roce0", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7));
//! let pd = hca.alloc_pd().unwrap();
//! let mr = hca.reg_mr(pd, 4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
//! let cq = hca.create_cq(16).unwrap();
//! let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1,
//!                   max_inline_data: 64 };
//! let qpn = hca.create_qp(QpInitAttr { pd, send_cq: cq, recv_cq: cq, qp_type: QpType::Rc,
//!                                      cap, sq_sig_all: false, srq: None }).unwrap();
//! assert_eq!(qpn.value(), 17);
//! assert_eq!(hca.qp_state(qpn), Some(QpState::Reset));
//! # let _ = mr;
//! ```
//!
//! QP types: RC (the full reliable transport), UC (no acknowledgements;
//! gaps drop messages) and UD (single-packet SENDs with a DETH, a 40-byte
//! GRH area in receive buffers). QP1, the GSI where CM MADs arrive, is a UD
//! QP made with `Hca::create_gsi_qp`; QP0 (the SMI) has no role on RoCE.
//!
//! Decisions worth knowing (each is documented where it is implemented):
//! - `retry_cnt` 7 means "retry forever", as in rxe (IBA reserves that for
//!   `rnr_retry` 7); 0..=6 are counted exactly.
//!   `rnr_retry` 7 means forever (both).
//! - The responder re-ACKs every duplicate SEND/WRITE packet with the
//!   newest PSN, as rxe does, except when a READ/atomic executed after the
//!   duplicate: then with the duplicate's own PSN (rxe's newest PSN can make
//!   a requester that is re-issuing a READ treat the ACK as an implied NAK
//!   and loop).
//! - Class B/C/D responder errors (invalid request, remote access, remote
//!   operational) move the responder QP to ERR too, like rxe.
//! - Atomics operate on 64-bit values stored little-endian in MR memory.
//! - The GID table is rxe's: index 0 the link-local GID from the port's MAC,
//!   index 1 the address's RoCEv2 GID (`objects::gid_table`).
//! - Posting to a QP in ERR succeeds and completes at once with WR_FLUSH_ERR.
//! - Local keys are checked when a WQE starts executing (LOC_PROT_ERR), in
//!   order: a bad WQE behind outstanding ones waits for them first.
//! - READ responses are produced one packet per `poll_transmit`, so a large
//!   READ costs no memory up front; ACKs, NAKs and READ responses of a QP
//!   leave in order, before its new requests; QPs are served round-robin.

pub mod bufpool;
mod cm_port;
pub mod completer;
pub mod congestion;
pub mod counters;
mod dcqcn;
mod dev;
pub mod error;
pub mod hca;
pub mod io;
pub mod mcast;
mod mem;
pub mod mutant;
pub mod mw;
pub mod objects;
pub mod qp;
pub mod qp_attr;
mod qp_table;
mod queues;
pub mod recv;
pub mod requester;
pub mod responder;
mod schedule;
mod sq_ring;
pub mod time;
mod tx;
pub mod wr;
pub mod xrc;
mod xrc_member;
pub mod xrc_relay;

pub use congestion::{CongestionConfig, Ecn, QpCc};
pub use counters::Counters;
pub use error::*;
pub use hca::{Hca, HcaConfig, MrInfo};
pub use io::{Datagram, LinkProfile, RegionBody, RxIcrc, SansIo};
pub use mcast::{McastError, MCAST_QPN};
pub use mutant::Mutant;
pub use mw::{MwBind, MwBindWr, MwError, MwHandle, MwType};
pub use objects::{
    AsyncEvent, CqHandle, DeviceAttr, MrHandle, PdHandle, PortAttr, PortState, RegionMem,
    ResizeCqError, SrqAttr, SrqHandle, XrcdHandle,
};
pub use qp::QpInitAttr;
pub use qp_attr::{AccessFlags, AhAttr, PathMtu, QpAttr, QpCap, QpState, QpType};
pub use queues::{CqRing, RingPost, RqRing, SqRelease};
pub use recv::DropReason;
pub use responder::ACK_EVERY_PSNS;
/// The communication manager engine each device carries ([`Hca::cm`]).
pub use roce_cm as cm;
pub use sq_ring::{RingSend, SqRing};
pub use time::Instant;
pub use wr::{
    RecvWr, SendFlags, SendWr, SgList, Sge, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
pub use xrc::XrcError;
