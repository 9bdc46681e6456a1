//! A safe, libibverbs-shaped verbs API over the emulated RoCEv2 HCA.
//!
//! The shape follows rust-ibverbs (after its PR #52) and `sideway`:
//!
//! * [`Device`] → [`Context`] (opened device) → [`Pd`], [`Cq`] → [`Mr`],
//!   [`Qp`]. Every handle holds an `Arc` to its parent, so an application
//!   can keep device, PD, CQ, MRs and QPs together in one struct and drop
//!   them in any order: an object is destroyed after the last handle that
//!   needs it. `Drop` logs failures; explicit `destroy()` methods return
//!   them.
//! * A memory region owns its buffer inside the device ([`Mr::read`],
//!   [`Mr::write`]): the remote side writes while the owner reads, and
//!   both go through the device lock — no raw pointers, no `unsafe`.
//! * Each verb returns the emulator's error named after it
//!   ([`RegMrError`], [`ModifyQpError`], [`PostSendError`]...); packet
//!   drops, NAKs and failed completions are values ([`WcStatus`],
//!   [`Counters`]), never `Err`.
//! * [`QpAttr`]'s setters set their mask bits; [`Qp::to_init`],
//!   [`Qp::to_rtr`], [`Qp::to_rts`] and [`Qp::connect`] use rdma-core's
//!   defaults ([`ConnectOptions`]).
//! * What moves the frames is a [`Driver`]: the simulated fabric's is
//!   `roce_sim::SimNet` (crate `roce-sim`); real devices over UDP or raw sockets, configured
//!   and opened by the `roce-host` crate (`roce_host::DeviceConfig`), have
//!   their driver there. This crate is the verbs only: no sockets, no
//!   transport. The verbs work from synchronous code
//!   ([`Cq::poll_blocking`]) and async code ([`Cq::poll_async`],
//!   runtime-agnostic).
//! * The deterministic traffic engine behind `roce demo` and the soaks
//!   (mixed SEND/WRITE/READ/atomics, every byte and every completion
//!   verified) is built on this API in its own crate, `roce-workloads`.
//!
#![doc = include_str!("../../docs/verbs.md")]

pub mod channel;
pub mod cq;
pub mod device;
pub mod driver;
pub mod error;
mod event_queue;
pub mod gid;
mod objects;
pub mod pd;
pub mod qp;
pub mod qp_types;
pub mod rdma_cm;
pub mod srq;
pub mod xrc;

pub use channel::{AsyncChannelEvent, AsyncEventChannel, AsyncEventFuture, CompChannel, CqEvent};
pub use cq::{Cq, PollCq};
pub use device::{Context, Device};
pub use driver::{Budget, Driver, TransportStats};
pub use error::{DestroyError, McastAttachError};
pub use pd::{AllocXrcdError, Mr, Mw, Pd, Xrcd};
pub use qp::{ConnectOptions, Qp, QpBuilder, QpEndpoint};
pub use qp_types::{
    create_ah, init_ah_from_wc, ud_send, AhFromWcError, Grh, DEFAULT_QKEY, GRH_LEN,
};
pub use srq::Srq;

pub use roce_emulator::qp_attr::{QpAttrError, ValueProblem};
pub use roce_emulator::{
    AccessFlags, AhAttr, AllocPdError, AsyncEvent, Counters, CreateCqError, CreateQpError,
    CreateSrqError, DeallocPdError, DeregMrError, DestroyCqError, DestroySrqError, DeviceAttr, Hca,
    HcaConfig, Instant, McastError, ModifyQpError, ModifySrqError, MrAccessError, MrInfo, MwBind,
    MwBindWr, MwError, MwHandle, MwType, NotifyCqError, PathMtu, PollCqError, PortAttr, PortState,
    PostRecvError, PostSendError, PostSrqRecvError, QpAttr, QpCap, QpInitAttr, QpLookupError,
    QpState, QpType, RecvWr, RegMrError, RegionMem, ResizeCqError, SendFlags, SendWr, SgList, Sge,
    SqRelease, SrqAttr, SrqHandle, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
    XrcError, XrcdHandle, MCAST_QPN,
};
pub use roce_packet::{LKey, Qpn, RKey};

/// Environment variable naming a directory where every device records a
/// pcap: each simulated network's fabric (`roce_sim::SimNet`), each real
/// device in `roce-host`.
pub const ENV_PCAP: &str = "ROCE_EMU_PCAP";
