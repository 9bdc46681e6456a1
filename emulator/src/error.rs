//! Typed errors of the verbs, one enum per verb (API misuse only: packet
//! drops, NAKs and failed completions are values, never `Err`).

use crate::objects::{CqHandle, MrHandle, PdHandle, SrqHandle};
use crate::qp_attr::{QpAttrError, QpState, QpType};
use roce_packet::Qpn;

/// `alloc_pd` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocPdError {
    /// Too many protection domains.
    #[error("too many protection domains (max {max})")]
    TooMany { max: u32 },
}

/// `dealloc_pd` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeallocPdError {
    /// Unknown protection domain.
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// The protection domain is still used by MRs or QPs.
    #[error("protection domain {pd:?} still used by {users} MR(s)/QP(s)")]
    InUse { pd: PdHandle, users: u32 },
}

/// `reg_mr` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegMrError {
    /// Unknown protection domain.
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
    #[error("REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE")]
    RemoteWriteWithoutLocalWrite,
    /// Access flags not supported.
    #[error("access flags {0:#x} not supported")]
    UnsupportedAccess(u32),
    /// Length exceeds max_mr_size.
    #[error("length {len} exceeds max_mr_size {max}")]
    TooLarge { len: u64, max: u64 },
    /// Too many memory regions.
    #[error("too many memory regions (max {max})")]
    TooMany { max: u32 },
    /// The I/O virtual address range wraps around 2^64.
    #[error("iova {iova:#x} + length {len} overflows 64 bits")]
    IovaOverflow { iova: u64, len: u64 },
    /// `rereg_mr` of an unknown region.
    #[error("unknown memory region {0:?}")]
    UnknownMr(MrHandle),
}

/// `dereg_mr` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeregMrError {
    /// Unknown memory region.
    #[error("unknown memory region {0:?}")]
    UnknownMr(MrHandle),
}

/// `mr_read`/`mr_write` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MrAccessError {
    /// Unknown memory region.
    #[error("unknown memory region {0:?}")]
    UnknownMr(MrHandle),
    /// The range lies outside the region.
    #[error("range offset {offset} length {len} outside the region of {size} bytes")]
    OutOfBounds { offset: u64, len: u64, size: u64 },
}

/// `create_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateCqError {
    /// The depth is outside 1..=max_cqe.
    #[error("cqe {cqe} outside 1..={max}")]
    InvalidDepth { cqe: u32, max: u32 },
}

/// `destroy_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DestroyCqError {
    /// Unknown completion queue.
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// The completion queue is still used by QPs.
    #[error("completion queue {cq:?} still used by {users} QP(s)")]
    InUse { cq: CqHandle, users: u32 },
}

/// `poll_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PollCqError {
    /// Unknown completion queue.
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// Completion queue overflowed and is in error.
    #[error("completion queue {0:?} overflowed and is in error")]
    Overrun(CqHandle),
}

/// `create_qp` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateQpError {
    /// Unknown protection domain.
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// Unknown completion queue.
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// Unknown shared receive queue.
    #[error("unknown shared receive queue {0:?}")]
    UnknownSrq(SrqHandle),
    /// Exceeds the device limit.
    #[error("{what} = {requested} exceeds the device limit {max}")]
    CapTooLarge { what: &'static str, requested: u32, max: u32 },
    /// Too many QPs.
    #[error("too many QPs")]
    TooMany,
    /// The GSI QP (QP1) already exists on this device.
    #[error("the GSI QP (QP1) already exists")]
    GsiExists,
    /// The GSI QP is a UD QP.
    #[error("the GSI QP (QP1) must be a UD QP")]
    GsiNotUd,
    /// An XRC target QP's domain does not exist.
    #[error("unknown XRC domain {0:?}")]
    UnknownXrcd(crate::objects::XrcdHandle),
}

/// `modify_qp` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModifyQpError {
    /// Unknown QP.
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// The transition table or a value check refused the request.
    #[error(transparent)]
    Rejected(#[from] QpAttrError),
}

/// `query_qp`/`destroy_qp` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QpLookupError {
    /// Unknown QP.
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
}

/// `post_send` failed (nothing was queued).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostSendError {
    /// Unknown QP.
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// The QP is not in RTS (or ERR, which flushes).
    #[error("QP is in state {0}; post_send needs RTS (or ERR, which flushes)")]
    InvalidState(QpState),
    /// The send queue is full.
    #[error("send queue full ({max} WRs)")]
    QueueFull { max: u32 },
    /// Too many SGEs: more than max_send_sge.
    #[error("{n} SGEs exceed max_send_sge {max}")]
    TooManySge { n: usize, max: u32 },
    /// Inline data exceeds max_inline_data.
    #[error("inline data of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLarge { len: usize, max: u32 },
    /// Inline is not allowed for RDMA READ or atomics.
    #[error("inline is not allowed for RDMA READ or atomics")]
    InlineNotAllowed,
    /// The message exceeds max_msg_sz.
    #[error("message of {len} bytes exceeds max_msg_sz {max}")]
    MessageTooLarge { len: u64, max: u32 },
    /// Atomic operations need exactly one 8-byte SGE.
    #[error("atomic operations need exactly one 8-byte SGE")]
    BadAtomicSge,
    /// A UD send needs its destination (`SendWr::ud`).
    #[error("a UD send needs an address handle, remote QPN and Q_Key")]
    MissingUdDest,
    /// UD messages fit one packet.
    #[error("UD message of {len} bytes exceeds the path MTU {mtu}")]
    UdMessageTooLarge { len: u64, mtu: u64 },
    /// The operation is not available on this QP type.
    #[error("{opcode:?} is not supported on a {qp_type:?} QP")]
    UnsupportedOpcode { opcode: crate::wr::WrOpcode, qp_type: QpType },
    /// RDMA READ/atomic needs max_rd_atomic > 0 on the QP.
    #[error("RDMA READ/atomic needs max_rd_atomic > 0 on the QP")]
    NoRdAtomic,
}

/// `post_recv` failed (nothing was queued).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostRecvError {
    /// Unknown QP.
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// The QP is not in INIT, RTR or RTS (or ERR, which flushes).
    #[error("QP is in state {0}; post_recv needs INIT, RTR, RTS (or ERR, which flushes)")]
    InvalidState(QpState),
    /// The receive queue is full.
    #[error("receive queue full ({max} WRs)")]
    QueueFull { max: u32 },
    /// Too many SGEs: more than max_recv_sge.
    #[error("{n} SGEs exceed max_recv_sge {max}")]
    TooManySge { n: usize, max: u32 },
    /// The QP takes its receives from an SRQ (use `post_srq_recv`).
    #[error("the QP uses a shared receive queue; post to the SRQ")]
    UsesSrq,
}

/// `create_srq`/`modify_srq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateSrqError {
    /// Unknown protection domain.
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// A capacity beyond the device limit.
    #[error("{what} = {requested} exceeds the device limit {max}")]
    CapTooLarge { what: &'static str, requested: u32, max: u32 },
    /// The limit must be below max_wr.
    #[error("srq_limit {limit} not below max_wr {max_wr}")]
    BadLimit { limit: u32, max_wr: u32 },
    /// An XRC SRQ's domain does not exist.
    #[error("unknown XRC domain {0:?}")]
    UnknownXrcd(crate::objects::XrcdHandle),
    /// An XRC SRQ's CQ does not exist.
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
}

/// `modify_srq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModifySrqError {
    /// Unknown SRQ.
    #[error("unknown shared receive queue {0:?}")]
    UnknownSrq(SrqHandle),
    /// The limit must be below max_wr.
    #[error("srq_limit {limit} not below max_wr {max_wr}")]
    BadLimit { limit: u32, max_wr: u32 },
    /// A resize to 0, over the device's limit, or below the WRs queued.
    #[error("max_wr {max_wr}: must hold the {queued} WRs queued and be 1..={max}")]
    BadSize { max_wr: u32, queued: usize, max: u32 },
}

/// `destroy_srq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DestroySrqError {
    /// Unknown SRQ.
    #[error("unknown shared receive queue {0:?}")]
    UnknownSrq(SrqHandle),
    /// QPs still use it.
    #[error("shared receive queue {srq:?} still used by {users} QP(s)")]
    InUse { srq: SrqHandle, users: u32 },
}

/// `post_srq_recv` failed (nothing was queued).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostSrqRecvError {
    /// Unknown SRQ.
    #[error("unknown shared receive queue {0:?}")]
    UnknownSrq(SrqHandle),
    /// The SRQ is full.
    #[error("shared receive queue full ({max} WRs)")]
    QueueFull { max: u32 },
    /// Too many SGEs.
    #[error("{n} SGEs exceed max_sge {max}")]
    TooManySge { n: usize, max: u32 },
}

/// `req_notify_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotifyCqError {
    /// Unknown CQ.
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
}
