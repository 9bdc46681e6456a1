//! Typed errors of the verbs, one enum per verb (API misuse only: packet
//! drops, NAKs and failed completions are values, never `Err`).

use crate::objects::{CqHandle, MrHandle, PdHandle};
use crate::qp_attr::{ModifyQpError, QpState, QpType};
use roce_packet::Qpn;

/// `alloc_pd` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocPdError {
    /// Too many protection domains (max …).
    #[error("too many protection domains (max {max})")]
    TooMany { max: u32 },
}

/// `dealloc_pd` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeallocPdError {
    /// Unknown protection domain ….
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// Protection domain … still used by … MR(s)/QP(s).
    #[error("protection domain {pd:?} still used by {users} MR(s)/QP(s)")]
    InUse { pd: PdHandle, users: u32 },
}

/// `reg_mr` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegMrError {
    /// Unknown protection domain ….
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE.
    #[error("REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE")]
    RemoteWriteWithoutLocalWrite,
    /// Access flags … not supported.
    #[error("access flags {0:#x} not supported")]
    UnsupportedAccess(u32),
    /// Length … exceeds max_mr_size ….
    #[error("length {len} exceeds max_mr_size {max}")]
    TooLarge { len: u64, max: u64 },
    /// Too many memory regions (max …).
    #[error("too many memory regions (max {max})")]
    TooMany { max: u32 },
}

/// `dereg_mr` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeregMrError {
    /// Unknown memory region ….
    #[error("unknown memory region {0:?}")]
    UnknownMr(MrHandle),
}

/// `mr_read`/`mr_write` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MrAccessError {
    /// Unknown memory region ….
    #[error("unknown memory region {0:?}")]
    UnknownMr(MrHandle),
    /// Range offset … length … outside the region of … bytes.
    #[error("range offset {offset} length {len} outside the region of {size} bytes")]
    OutOfBounds { offset: u64, len: u64, size: u64 },
}

/// `create_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateCqError {
    /// Cqe … outside 1..=….
    #[error("cqe {cqe} outside 1..={max}")]
    InvalidDepth { cqe: u32, max: u32 },
}

/// `destroy_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DestroyCqError {
    /// Unknown completion queue ….
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// Completion queue … still used by … QP(s).
    #[error("completion queue {cq:?} still used by {users} QP(s)")]
    InUse { cq: CqHandle, users: u32 },
}

/// `poll_cq` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PollCqError {
    /// Unknown completion queue ….
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// Completion queue … overflowed and is in error.
    #[error("completion queue {0:?} overflowed and is in error")]
    Overrun(CqHandle),
}

/// `create_qp` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CreateQpError {
    /// Unknown protection domain ….
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// Unknown completion queue ….
    #[error("unknown completion queue {0:?}")]
    UnknownCq(CqHandle),
    /// QP type … is not implemented (only RC).
    #[error("QP type {0:?} is not implemented (only RC)")]
    UnsupportedType(QpType),
    /// … = … exceeds the device limit ….
    #[error("{what} = {requested} exceeds the device limit {max}")]
    CapTooLarge { what: &'static str, requested: u32, max: u32 },
    /// Too many QPs.
    #[error("too many QPs")]
    TooMany,
}

/// `modify_qp` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QpModifyError {
    /// Unknown QP ….
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// The transition table or a value check refused the request.
    #[error(transparent)]
    Rejected(#[from] ModifyQpError),
}

/// `query_qp`/`destroy_qp` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QpLookupError {
    /// Unknown QP ….
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
}

/// `post_send` failed (nothing was queued).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostSendError {
    /// Unknown QP ….
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// QP is in state …; post_send needs RTS (or ERR, which flushes).
    #[error("QP is in state {0}; post_send needs RTS (or ERR, which flushes)")]
    InvalidState(QpState),
    /// Send queue full (… WRs).
    #[error("send queue full ({max} WRs)")]
    QueueFull { max: u32 },
    /// … SGEs exceed max_send_sge ….
    #[error("{n} SGEs exceed max_send_sge {max}")]
    TooManySge { n: usize, max: u32 },
    /// Inline data of … bytes exceeds max_inline_data ….
    #[error("inline data of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLarge { len: usize, max: u32 },
    /// Inline is not allowed for RDMA READ or atomics.
    #[error("inline is not allowed for RDMA READ or atomics")]
    InlineNotAllowed,
    /// Message of … bytes exceeds max_msg_sz ….
    #[error("message of {len} bytes exceeds max_msg_sz {max}")]
    MessageTooLarge { len: u64, max: u32 },
    /// Atomic operations need exactly one 8-byte SGE.
    #[error("atomic operations need exactly one 8-byte SGE")]
    BadAtomicSge,
    /// RDMA READ/atomic needs max_rd_atomic > 0 on the QP.
    #[error("RDMA READ/atomic needs max_rd_atomic > 0 on the QP")]
    NoRdAtomic,
}

/// `post_recv` failed (nothing was queued).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PostRecvError {
    /// Unknown QP ….
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// QP is in state …; post_recv needs INIT, RTR, RTS (or ERR, which flushes).
    #[error("QP is in state {0}; post_recv needs INIT, RTR, RTS (or ERR, which flushes)")]
    InvalidState(QpState),
    /// Receive queue full (… WRs).
    #[error("receive queue full ({max} WRs)")]
    QueueFull { max: u32 },
    /// … SGEs exceed max_recv_sge ….
    #[error("{n} SGEs exceed max_recv_sge {max}")]
    TooManySge { n: usize, max: u32 },
}
