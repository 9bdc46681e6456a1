//! Work requests and work completions (IBA §10.8, §11.4; libibverbs'
//! `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`).
//!
//! Status names and numbers are libibverbs' `enum ibv_wc_status`, and
//! [`WcStatus`]'s `Display` matches `ibv_wc_status_str`, so traces read like
//! the C tools' output.

use crate::qp_attr::{flags, AhAttr, QpType};
use core::fmt;
use roce_packet::{LKey, Opcode, Position, RKey};

/// One scatter/gather element: `length` bytes at virtual address `addr` of
/// the memory region whose local key is `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Virtual address inside the memory region.
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: LKey,
}

/// A scatter/gather list: up to 4 entries inline, more on the heap (a work
/// request with few SGEs allocates nothing).
pub type SgList = smallvec::SmallVec<[Sge; 4]>;

/// Send-queue operations (`enum ibv_wr_opcode`, the RC subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// IBV_WR_SEND.
    Send,
    /// IBV_WR_SEND_WITH_IMM.
    SendWithImm,
    /// IBV_WR_RDMA_WRITE.
    RdmaWrite,
    /// IBV_WR_RDMA_WRITE_WITH_IMM (consumes a receive WQE at the responder).
    RdmaWriteWithImm,
    /// IBV_WR_RDMA_READ.
    RdmaRead,
    /// IBV_WR_ATOMIC_CMP_AND_SWP.
    AtomicCmpAndSwp,
    /// IBV_WR_ATOMIC_FETCH_AND_ADD.
    AtomicFetchAndAdd,
    // ---- memory windows / invalidation / IBA 1.5 (see crate::mw) ----
    /// IBV_WR_SEND_WITH_INV: the responder invalidates `invalidate_rkey`
    /// (carried in the IETH) in its QP's PD.
    SendWithInv {
        /// The remote key the responder invalidates.
        invalidate_rkey: RKey,
    },
    /// IBV_WR_ATOMIC_WRITE (IBA 1.5): 8 bytes (exactly) from the SGE or
    /// inline data written atomically at `remote_addr`/`rkey`.
    AtomicWrite,
    /// IBV_WR_LOCAL_INV: invalidate a type 2 window's (or a region's) rkey,
    /// executed in order on the send queue; WC opcode LOCAL_INV.
    LocalInv {
        /// The rkey to invalidate (must be in the QP's PD).
        rkey: RKey,
    },
    /// IBV_WR_BIND_MW for a type 2 window, executed in order on the send
    /// queue; failures complete with MW_BIND_ERR.
    BindMw {
        /// The window.
        mw: crate::objects::MwHandle,
        /// Its new rkey: same index, the key byte chosen by the user.
        rkey: RKey,
        /// Region, range and rights.
        bind: crate::objects::MwBind,
    },
    /// IBV_WR_FLUSH (IBA 1.5): make `len` bytes at `remote_addr`/`rkey`
    /// globally visible and/or persistent. Completes on a zero-length
    /// RDMA READ RESPONSE ONLY, like a READ.
    Flush {
        /// Bytes from `remote_addr` (selectivity 0).
        len: u32,
        /// FETH placement type: bit 0 global visibility, bit 1 persistence.
        placement: u8,
        /// FETH selectivity level: 0 the range, 1 the whole region.
        level: u8,
    },
}

/// Which response completes a work request at the requester.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompletedBy {
    /// An ACK covering its last PSN (SEND, WRITE, ATOMIC_WRITE).
    Ack,
    /// Its RDMA READ RESPONSE packets (READ; FLUSH's zero-length ONLY).
    ReadResponse,
    /// An ATOMIC ACKNOWLEDGE with the original value.
    AtomicAck,
    /// Nothing on the wire: it runs on the send queue (LOCAL_INV, BIND_MW).
    Local,
}

/// Which QP types may post an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpTypes {
    /// Reliable Connected.
    pub rc: bool,
    /// Unreliable Connected.
    pub uc: bool,
    /// Unreliable Datagram.
    pub ud: bool,
}

const ALL_TYPES: QpTypes = QpTypes { rc: true, uc: true, ud: true };
const CONNECTED: QpTypes = QpTypes { rc: true, uc: true, ud: false };
const RC_ONLY: QpTypes = QpTypes { rc: true, uc: false, ud: false };

impl QpTypes {
    /// Whether a QP of type `t` may post the operation.
    pub const fn contains(self, t: QpType) -> bool {
        match t {
            QpType::Rc | QpType::XrcSend => self.rc,
            QpType::Uc => self.uc,
            QpType::Ud => self.ud,
            // a target only responds
            QpType::XrcRecv => false,
        }
    }
}

/// One row of the work-request opcode table ([`WrOpcode::info`]): what
/// `post_send`, the requester and the completer need to know about an
/// operation, written once (as `roce_packet`'s opcode table does for
/// packets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrInfo {
    /// QP types that may post it (IBA Table 147; rxe's `rxe_wr_opcode_info`).
    pub qp_types: QpTypes,
    /// RC packet opcodes by position in the message: FIRST, MIDDLE, LAST,
    /// ONLY (one opcode for the single-packet requests); UC and UD use the
    /// same low five bits. `None`: never on the wire.
    pub packets: Option<[Opcode; 4]>,
    /// READ, atomic or FLUSH: takes a responder resource and an initiator
    /// depth slot, and is answered with data rather than a plain ACK.
    pub read_or_atomic: bool,
    /// An atomic with an 8-byte operand and one PSN (CMP_AND_SWP, FETCH_AND_ADD).
    pub atomic: bool,
    /// Its answer is written into the local SGEs (READ's response data, an
    /// atomic's original value): they must be writable and cannot be
    /// inline. The READ RESPONSE that answers a FLUSH or an ATOMIC WRITE
    /// carries no data (IBA 1.5).
    pub answer_lands: bool,
    /// The completion opcode.
    pub wc: WcOpcode,
    /// What completes it.
    pub completed_by: CompletedBy,
}

const fn segmented(
    first: Opcode,
    middle: Opcode,
    last: Opcode,
    only: Opcode,
) -> Option<[Opcode; 4]> {
    Some([first, middle, last, only])
}

const fn single(op: Opcode) -> Option<[Opcode; 4]> {
    Some([op, op, op, op])
}

impl WrOpcode {
    /// This operation's row of the work-request opcode table.
    pub const fn info(self) -> WrInfo {
        use CompletedBy as By;
        use Opcode as O;
        match self {
            WrOpcode::Send => WrInfo {
                qp_types: ALL_TYPES,
                packets: segmented(
                    O::RC_SEND_FIRST,
                    O::RC_SEND_MIDDLE,
                    O::RC_SEND_LAST,
                    O::RC_SEND_ONLY,
                ),
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::Send,
                completed_by: By::Ack,
            },
            WrOpcode::SendWithImm => WrInfo {
                qp_types: ALL_TYPES,
                packets: segmented(
                    O::RC_SEND_FIRST,
                    O::RC_SEND_MIDDLE,
                    O::RC_SEND_LAST_WITH_IMMEDIATE,
                    O::RC_SEND_ONLY_WITH_IMMEDIATE,
                ),
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::Send,
                completed_by: By::Ack,
            },
            WrOpcode::RdmaWrite => WrInfo {
                qp_types: CONNECTED,
                packets: segmented(
                    O::RC_RDMA_WRITE_FIRST,
                    O::RC_RDMA_WRITE_MIDDLE,
                    O::RC_RDMA_WRITE_LAST,
                    O::RC_RDMA_WRITE_ONLY,
                ),
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::RdmaWrite,
                completed_by: By::Ack,
            },
            WrOpcode::RdmaWriteWithImm => WrInfo {
                qp_types: CONNECTED,
                packets: segmented(
                    O::RC_RDMA_WRITE_FIRST,
                    O::RC_RDMA_WRITE_MIDDLE,
                    O::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
                    O::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                ),
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::RdmaWrite,
                completed_by: By::Ack,
            },
            WrOpcode::RdmaRead => WrInfo {
                qp_types: RC_ONLY,
                packets: single(O::RC_RDMA_READ_REQUEST),
                read_or_atomic: true,
                atomic: false,
                answer_lands: true,
                wc: WcOpcode::RdmaRead,
                completed_by: By::ReadResponse,
            },
            WrOpcode::AtomicCmpAndSwp => WrInfo {
                qp_types: RC_ONLY,
                packets: single(O::RC_COMPARE_SWAP),
                read_or_atomic: true,
                atomic: true,
                answer_lands: true,
                wc: WcOpcode::CompSwap,
                completed_by: By::AtomicAck,
            },
            WrOpcode::AtomicFetchAndAdd => WrInfo {
                qp_types: RC_ONLY,
                packets: single(O::RC_FETCH_ADD),
                read_or_atomic: true,
                atomic: true,
                answer_lands: true,
                wc: WcOpcode::FetchAdd,
                completed_by: By::AtomicAck,
            },
            // ---- memory windows / IBA 1.5 (crate::mw) ----
            WrOpcode::SendWithInv { .. } => WrInfo {
                qp_types: RC_ONLY,
                packets: segmented(
                    O::RC_SEND_FIRST,
                    O::RC_SEND_MIDDLE,
                    O::RC_SEND_LAST_WITH_INVALIDATE,
                    O::RC_SEND_ONLY_WITH_INVALIDATE,
                ),
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::Send,
                completed_by: By::Ack,
            },
            // IBA 1.5: like FLUSH, an ATOMIC WRITE takes a responder
            // resource and is answered by a zero-length READ RESPONSE ONLY
            // (as rxe's acknowledge() sends it)
            WrOpcode::AtomicWrite => WrInfo {
                qp_types: RC_ONLY,
                packets: single(O::RC_ATOMIC_WRITE),
                read_or_atomic: true,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::AtomicWrite,
                completed_by: By::ReadResponse,
            },
            WrOpcode::Flush { .. } => WrInfo {
                qp_types: RC_ONLY,
                packets: single(O::RC_FLUSH),
                read_or_atomic: true,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::Flush,
                completed_by: By::ReadResponse,
            },
            WrOpcode::LocalInv { .. } => WrInfo {
                qp_types: CONNECTED,
                packets: None,
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::LocalInv,
                completed_by: By::Local,
            },
            WrOpcode::BindMw { .. } => WrInfo {
                qp_types: CONNECTED,
                packets: None,
                read_or_atomic: false,
                atomic: false,
                answer_lands: false,
                wc: WcOpcode::BindMw,
                completed_by: By::Local,
            },
        }
    }

    /// READ or an atomic: needs a responder resource and an init depth slot.
    pub const fn is_read_or_atomic(self) -> bool {
        self.info().read_or_atomic
    }
    /// Its answer writes into the local buffer ([`WrInfo::answer_lands`]).
    pub const fn lands_locally(self) -> bool {
        self.info().answer_lands
    }
    /// A local operation (LOCAL_INV, BIND_MW): no packet (crate::mw).
    pub const fn is_local(self) -> bool {
        self.info().packets.is_none()
    }
    /// An atomic operation (8 bytes, one PSN).
    pub const fn is_atomic(self) -> bool {
        self.info().atomic
    }
    /// The completion opcode reported for this work request.
    pub const fn wc_opcode(self) -> WcOpcode {
        self.info().wc
    }
    /// Consumes a receive WQE at the responder (SENDs, WRITE with
    /// immediate): what its last packet's opcode says in the packet table.
    pub fn needs_recv_wqe(self) -> bool {
        self.packet_opcode(Position::Only).and_then(|o| o.info()).is_some_and(|i| i.uses_recv_wqe())
    }
    /// The RC packet opcode at `pos` of the message (None for a local
    /// operation, which never reaches the wire).
    pub const fn packet_opcode(self, pos: Position) -> Option<Opcode> {
        let Some(ops) = self.info().packets else { return None };
        Some(match pos {
            Position::First => ops[0],
            Position::Middle => ops[1],
            Position::Last => ops[2],
            Position::Only => ops[3],
        })
    }
}

flags!(
    /// `enum ibv_send_flags`.
    SendFlags {
        FENCE = 1 << 0,
        SIGNALED = 1 << 1,
        SOLICITED = 1 << 2,
        INLINE = 1 << 3,
    }
);

flags!(
    /// `enum ibv_wc_flags` (the ones an RC QP reports).
    WcFlags {
        GRH = 1 << 0,
        WITH_IMM = 1 << 1,
        /// IBV_WC_WITH_INV: the sender invalidated an rkey; it is in `imm`
        /// (libibverbs' `invalidated_rkey` shares that union).
        WITH_INV = 1 << 3,
    }
);

/// A send work request (`struct ibv_send_wr`, RC fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Local buffers (gathered for SEND/WRITE, scattered into for READ;
    /// one 8-byte SGE receiving the original value for atomics).
    pub sg_list: SgList,
    /// SIGNALED, FENCE, SOLICITED, INLINE.
    pub flags: SendFlags,
    /// Immediate data (SEND/WRITE with immediate), host order.
    pub imm: u32,
    /// Remote virtual address (WRITE, READ, atomics).
    pub remote_addr: u64,
    /// Remote key (WRITE, READ, atomics).
    pub rkey: RKey,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Data for an INLINE request (used instead of `sg_list` when
    /// `flags` has INLINE; at most `max_inline_data` bytes).
    pub inline_data: Vec<u8>,
    /// Destination of a UD send (`wr.ud` in libibverbs); ignored otherwise.
    pub ud: Option<UdDest>,
    /// An XRC initiator's request: the XRC SRQ number at the target
    /// (`wr.qp_type.xrc.remote_srqn`), sent in every packet's XRCETH.
    pub xrc_remote_srqn: u32,
}

/// Where a UD send goes: address handle, remote QPN and Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// The destination (its `dgid` is the peer's address).
    pub ah: AhAttr,
    /// Destination QP number.
    pub remote_qpn: u32,
    /// Q_Key; one with the high bit set means "use the QP's own Q_Key"
    /// (IBA §10.2.4, C10-15).
    pub remote_qkey: u32,
}

impl SendWr {
    /// A request with everything but the id and opcode zeroed/empty.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            sg_list: SgList::new(),
            flags: SendFlags::SIGNALED,
            imm: 0,
            remote_addr: 0,
            rkey: RKey::new(0),
            compare_add: 0,
            swap: 0,
            inline_data: Vec::new(),
            ud: None,
            xrc_remote_srqn: 0,
        }
    }
    /// An XRC initiator's request to the XRC SRQ `srqn` at the target.
    pub fn xrc(mut self, srqn: u32) -> SendWr {
        self.xrc_remote_srqn = srqn;
        self
    }
    /// Address a UD send.
    pub fn ud(mut self, ah: AhAttr, remote_qpn: u32, remote_qkey: u32) -> SendWr {
        self.ud = Some(UdDest { ah, remote_qpn, remote_qkey });
        self
    }
    /// Add one SGE.
    pub fn sge(mut self, addr: u64, length: u32, lkey: LKey) -> SendWr {
        self.sg_list.push(Sge { addr, length, lkey });
        self
    }
    /// Set the remote address and key.
    pub fn remote(mut self, remote_addr: u64, rkey: RKey) -> SendWr {
        self.remote_addr = remote_addr;
        self.rkey = rkey;
        self
    }
    /// Replace the flags.
    pub fn with_flags(mut self, flags: SendFlags) -> SendWr {
        self.flags = flags;
        self
    }
    /// Set immediate data.
    pub fn with_imm(mut self, imm: u32) -> SendWr {
        self.imm = imm;
        self
    }
    /// Make this an inline request carrying `data`.
    pub fn inline(mut self, data: &[u8]) -> SendWr {
        self.inline_data = data.to_vec();
        self.flags |= SendFlags::INLINE;
        self
    }
    /// Total bytes of the local buffers (or inline data).
    pub fn length(&self) -> u64 {
        if self.flags.contains(SendFlags::INLINE) {
            self.inline_data.len() as u64
        } else {
            self.sg_list.iter().map(|s| u64::from(s.length)).sum()
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Buffers the message is scattered into, in order.
    pub sg_list: SgList,
}

impl RecvWr {
    /// A receive request with one SGE.
    pub fn new(wr_id: u64, addr: u64, length: u32, lkey: LKey) -> RecvWr {
        RecvWr { wr_id, sg_list: smallvec::smallvec![Sge { addr, length, lkey }] }
    }
    /// Total capacity in bytes.
    pub fn length(&self) -> u64 {
        self.sg_list.iter().map(|s| u64::from(s.length)).sum()
    }
}

/// `enum ibv_wc_status`: same names, same numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS.
    Success = 0,
    /// IBV_WC_LOC_LEN_ERR.
    LocLenErr = 1,
    /// IBV_WC_LOC_QP_OP_ERR.
    LocQpOpErr = 2,
    /// IBV_WC_LOC_EEC_OP_ERR.
    LocEecOpErr = 3,
    /// IBV_WC_LOC_PROT_ERR.
    LocProtErr = 4,
    /// IBV_WC_WR_FLUSH_ERR.
    WrFlushErr = 5,
    /// IBV_WC_MW_BIND_ERR.
    MwBindErr = 6,
    /// IBV_WC_BAD_RESP_ERR.
    BadRespErr = 7,
    /// IBV_WC_LOC_ACCESS_ERR.
    LocAccessErr = 8,
    /// IBV_WC_REM_INV_REQ_ERR.
    RemInvReqErr = 9,
    /// IBV_WC_REM_ACCESS_ERR.
    RemAccessErr = 10,
    /// IBV_WC_REM_OP_ERR.
    RemOpErr = 11,
    /// IBV_WC_RETRY_EXC_ERR.
    RetryExcErr = 12,
    /// IBV_WC_RNR_RETRY_EXC_ERR.
    RnrRetryExcErr = 13,
    /// IBV_WC_LOC_RDD_VIOL_ERR.
    LocRddViolErr = 14,
    /// IBV_WC_REM_INV_RD_REQ_ERR.
    RemInvRdReqErr = 15,
    /// IBV_WC_REM_ABORT_ERR.
    RemAbortErr = 16,
    /// IBV_WC_INV_EECN_ERR.
    InvEecnErr = 17,
    /// IBV_WC_INV_EEC_STATE_ERR.
    InvEecStateErr = 18,
    /// IBV_WC_FATAL_ERR.
    FatalErr = 19,
    /// IBV_WC_RESP_TIMEOUT_ERR.
    RespTimeoutErr = 20,
    /// IBV_WC_GENERAL_ERR.
    GeneralErr = 21,
}

impl WcStatus {
    /// The libibverbs number.
    pub const fn code(self) -> u8 {
        self as u8
    }
    /// `ibv_wc_status_str` text.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `enum ibv_wc_opcode` (same numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum WcOpcode {
    /// IBV_WC_SEND.
    Send = 0,
    /// IBV_WC_RDMA_WRITE.
    RdmaWrite = 1,
    /// IBV_WC_RDMA_READ.
    RdmaRead = 2,
    /// IBV_WC_COMP_SWAP.
    CompSwap = 3,
    /// IBV_WC_FETCH_ADD.
    FetchAdd = 4,
    /// IBV_WC_BIND_MW (a BIND_MW work request).
    BindMw = 5,
    /// IBV_WC_LOCAL_INV.
    LocalInv = 6,
    /// IBV_WC_FLUSH.
    Flush = 8,
    /// IBV_WC_ATOMIC_WRITE.
    AtomicWrite = 9,
    /// IBV_WC_RECV.
    Recv = 128,
    /// IBV_WC_RECV_RDMA_WITH_IMM.
    RecvRdmaWithImm = 129,
}

/// A work completion (`struct ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed (meaningful for successful completions).
    pub opcode: WcOpcode,
    /// Bytes transferred (receive: bytes placed; send side: message length).
    pub byte_len: u32,
    /// Immediate data, host order, when `wc_flags` has WITH_IMM.
    pub imm: Option<u32>,
    /// The local QP.
    pub qp_num: u32,
    /// Source QP (the connected peer's QPN for RC receives).
    pub src_qp: u32,
    /// WITH_IMM when `imm` is set.
    pub wc_flags: WcFlags,
}

impl WorkCompletion {
    /// A placeholder to fill arrays with before polling into them (a
    /// successful send of nothing from QP 0).
    pub const EMPTY: WorkCompletion = WorkCompletion {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm: None,
        qp_num: 0,
        src_qp: 0,
        wc_flags: WcFlags(0),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_packet::{OpKind, Transport};

    const ALL: [WrOpcode; 12] = [
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::SendWithInv { invalidate_rkey: RKey::new(0) },
        WrOpcode::AtomicWrite,
        WrOpcode::LocalInv { rkey: RKey::new(0) },
        WrOpcode::BindMw {
            mw: crate::objects::MwHandle(0),
            rkey: RKey::new(0),
            bind: crate::objects::MwBind {
                mr: crate::objects::MrHandle(0),
                addr: 0,
                length: 0,
                access: crate::qp_attr::AccessFlags::EMPTY,
            },
        },
        WrOpcode::Flush { len: 0, placement: 1, level: 0 },
    ];

    /// The work-request table agrees with the packet opcode table.
    #[test]
    fn work_request_table_agrees_with_the_packet_table() {
        for op in ALL {
            let info = op.info();
            let Some(ops) = info.packets else {
                assert_eq!(info.completed_by, CompletedBy::Local, "{op:?}");
                continue;
            };
            let kinds: Vec<_> = ops.iter().map(|o| o.info().unwrap()).collect();
            for k in &kinds {
                assert_eq!(k.transport, Transport::Rc, "{op:?}");
                assert!(k.is_request(), "{op:?}");
            }
            let single = ops.iter().all(|&o| o == ops[0]);
            if !single {
                let pos: Vec<_> = kinds.iter().map(|k| k.position).collect();
                assert_eq!(
                    pos,
                    [Position::First, Position::Middle, Position::Last, Position::Only],
                    "{op:?}"
                );
            }
            let kind = kinds[3].kind;
            let by = match kind {
                OpKind::ReadRequest | OpKind::Flush | OpKind::AtomicWrite => {
                    CompletedBy::ReadResponse
                }
                OpKind::CompareSwap | OpKind::FetchAdd => CompletedBy::AtomicAck,
                _ => CompletedBy::Ack,
            };
            assert_eq!(info.completed_by, by, "{op:?}");
            assert_eq!(info.read_or_atomic, by != CompletedBy::Ack, "{op:?}");
            assert_eq!(info.atomic, by == CompletedBy::AtomicAck, "{op:?}");
            // only a READ's data and an atomic's original value come back
            // into local memory (FLUSH and ATOMIC WRITE: an empty response)
            let lands =
                matches!(kind, OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd);
            assert_eq!(info.answer_lands, lands, "{op:?}");
            // UC and UD post only what their transports have opcodes for
            // (UD: single-packet messages)
            let uc = ops.iter().all(|o| Opcode(o.0 | 0x20).info().is_some());
            assert!(!info.qp_types.uc || uc, "{op:?} on UC");
            let ud = Opcode(ops[3].0 | 0x60).info().is_some();
            assert_eq!(info.qp_types.ud, ud, "{op:?} on UD");
        }
        assert!(WrOpcode::Send.needs_recv_wqe());
        assert!(WrOpcode::RdmaWriteWithImm.needs_recv_wqe());
        assert!(!WrOpcode::RdmaWrite.needs_recv_wqe());
        assert!(!WrOpcode::RdmaRead.needs_recv_wqe());
    }
}
