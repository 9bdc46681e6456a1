//! The agent: the device under test's side of a case. It does only what an
//! application would do through the verbs (create a PD, a region, a CQ and
//! one QP connected to the tester's made-up QP, post work requests, poll
//! completions, read the region, query the QP state); every packet on the
//! wire comes from the tester. [`LocalAgent`](crate::local::LocalAgent) is
//! the agent for a roce-emu device in the tester's own process; agents for
//! other devices speak the same requests as JSON lines (see
//! docs/conformance.md).

use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

/// Connected service of the QP a case asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// Reliable connection.
    Rc,
    /// Unreliable connection.
    Uc,
    /// Unreliable datagram (no peer: the tester addresses it with a DETH).
    Ud,
    /// An XRC target QP (IBA Annex A14) of an XRC domain with one XRC SRQ,
    /// whose number ([`QpInfo::srqn`]) the tester's requests name in their
    /// XRCETH; the receives are posted to that SRQ.
    Xrc,
}

/// The multicast group of the cases whose target is at `target`
/// ([`QpParams::mcast`]): 239.X.Y.Z from the address's last three bytes,
/// so that tests on different addresses never share a group.
pub fn case_group(target: IpAddr) -> IpAddr {
    match target {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::V4(std::net::Ipv4Addr::new(239, o[1], o[2], o[3]))
        }
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[0] = 0xff;
            o[1] = 0x0e;
            IpAddr::V6(std::net::Ipv6Addr::from(o))
        }
    }
}

/// `enum ibv_access_flags` bits as rdma-core numbers them.
pub mod access {
    /// IBV_ACCESS_LOCAL_WRITE.
    pub const LOCAL_WRITE: u32 = 1;
    /// IBV_ACCESS_REMOTE_WRITE.
    pub const REMOTE_WRITE: u32 = 2;
    /// IBV_ACCESS_REMOTE_READ.
    pub const REMOTE_READ: u32 = 4;
    /// IBV_ACCESS_REMOTE_ATOMIC.
    pub const REMOTE_ATOMIC: u32 = 8;
    /// IBV_ACCESS_MW_BIND (memory windows may be bound in the region).
    pub const MW_BIND: u32 = 1 << 4;
    /// IBV_ACCESS_FLUSH_GLOBAL (IBA 1.5 FLUSH to global visibility).
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    /// Every remote right and local write.
    pub const ALL: u32 = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
}

/// The QP and region parameters of a case: RC, UC or UD, the region's
/// size and rights, the QP's attributes and first PSNs. [`QpParams::DEFAULT`]:
/// RC, a 64 KiB region with every right, path MTU 1024, ACK timeout 14, 7
/// retries, RNR retry 7, RNR timer 12, read/atomic depths 16.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpParams {
    /// RC, UC or UD.
    pub service: Service,
    /// Region length (bytes).
    pub mr_len: u32,
    /// Region access (`access` bits).
    pub mr_access: u32,
    /// QP access (`qp_access_flags`).
    pub qp_access: u32,
    /// Path MTU in bytes (256..=4096).
    pub mtu: u32,
    /// Local ACK timeout code (4.096 µs × 2^timeout; 0 = never).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = forever).
    pub rnr_retry: u8,
    /// The RNR NAK timer code the QP advertises as responder.
    pub min_rnr_timer: u8,
    /// Outstanding READ/atomic requests the QP may initiate.
    pub max_rd_atomic: u8,
    /// READ/atomic requests the QP accepts at once as responder.
    pub max_dest_rd_atomic: u8,
    /// The first PSN the tester sends (the QP's `rq_psn`).
    pub rq_psn: u32,
    /// The first PSN the QP sends (`sq_psn`).
    pub sq_psn: u32,
    /// The Q_Key of a UD QP.
    pub qkey: u32,
    /// Receives go to a shared receive queue the QP is created on.
    pub srq: bool,
    /// The state the set-up leaves an RC QP in: RTS, or RTR (it may
    /// receive but not send).
    pub stop_at: QpStateName,
    /// Bytes of a type 2 memory window the agent binds on the QP at the
    /// region's start, with remote read and write (0: none; the region
    /// then needs `MW_BIND`).
    pub window: u32,
    /// The window's type: 2 (bound by a BIND_MW work request, to the QP)
    /// or 1 (bound by `ibv_bind_mw`, to the PD).
    pub window_type: u8,
    /// Optional operations the case needs the device to execute
    /// ([`ops`] bits); a device without one makes the case n/a.
    pub ops: u32,
    /// A UD QP attached to the case's multicast group ([`case_group`] of
    /// the target's address).
    pub mcast: bool,
}

/// Optional operations a device may lack ([`QpParams::ops`]).
pub mod ops {
    /// IBA 1.5 FLUSH (the device reports `IB_UVERBS_DEVICE_FLUSH_GLOBAL`).
    pub const FLUSH: u32 = 1;
    /// IBA 1.5 ATOMIC WRITE (`IB_UVERBS_DEVICE_ATOMIC_WRITE`).
    pub const ATOMIC_WRITE: u32 = 2;
}

impl QpParams {
    /// The default parameters (see [`QpParams`]).
    pub const DEFAULT: QpParams = QpParams {
        service: Service::Rc,
        mr_len: 65536,
        mr_access: access::ALL,
        qp_access: access::ALL,
        mtu: 1024,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        rq_psn: 0x10_0000,
        sq_psn: 0x20_0000,
        qkey: 0x1111_1111,
        srq: false,
        stop_at: QpStateName::Rts,
        window: 0,
        window_type: 2,
        ops: 0,
        mcast: false,
    };
}

/// What the agent creates for one case: a region and one QP taken to RTS
/// towards the tester's QP (a UD QP has no peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpSetup {
    /// The QP and region.
    pub params: QpParams,
    /// The tester's address (the QP's destination GID).
    pub peer: IpAddr,
    /// The tester's QPN (the QP's `dest_qp_num`).
    pub peer_qpn: u32,
}

/// What the agent reports back from [`Agent::setup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInfo {
    /// The QP's number.
    pub qpn: u32,
    /// The region's address as the peer names it (the VA in a RETH).
    pub mr_addr: u64,
    /// The region's remote key.
    pub rkey: u32,
    /// The bound memory window's remote key (0 without one).
    pub mw_rkey: u32,
    /// An XRC target's SRQ number (0 otherwise).
    pub srqn: u32,
}

/// A work request the agent posts to its QP's send queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendReq {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `enum ibv_wr_opcode` as rdma-core numbers it.
    pub opcode: u32,
    /// Local bytes: region offset and length (the 8-byte result buffer for
    /// atomics).
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
    /// Remote address (WRITE, READ, atomics).
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Immediate data (host order) for the WITH_IMM opcodes.
    pub imm: u32,
    /// Compare value or addend (atomics).
    pub compare_add: u64,
    /// Swap value (compare and swap).
    pub swap: u64,
    /// IBV_SEND_FENCE (the request is signaled in any case).
    pub fence: bool,
}

/// `enum ibv_wr_opcode` values.
pub mod wr {
    /// IBV_WR_RDMA_WRITE.
    pub const RDMA_WRITE: u32 = 0;
    /// IBV_WR_RDMA_WRITE_WITH_IMM.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// IBV_WR_SEND.
    pub const SEND: u32 = 2;
    /// IBV_WR_SEND_WITH_IMM.
    pub const SEND_WITH_IMM: u32 = 3;
    /// IBV_WR_RDMA_READ.
    pub const RDMA_READ: u32 = 4;
    /// IBV_WR_ATOMIC_CMP_AND_SWP.
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// IBV_WR_ATOMIC_FETCH_AND_ADD.
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
}

/// One work completion, in rdma-core's numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode` (meaningful on success).
    pub opcode: u32,
    /// Bytes (receives: placed; sends: message length).
    pub byte_len: u32,
    /// Immediate data, when the completion carries it.
    pub imm: Option<u32>,
}

/// `enum ibv_wc_status` names, indexed by value.
pub const WC_STATUS: [&str; 23] = [
    "IBV_WC_SUCCESS",
    "IBV_WC_LOC_LEN_ERR",
    "IBV_WC_LOC_QP_OP_ERR",
    "IBV_WC_LOC_EEC_OP_ERR",
    "IBV_WC_LOC_PROT_ERR",
    "IBV_WC_WR_FLUSH_ERR",
    "IBV_WC_MW_BIND_ERR",
    "IBV_WC_BAD_RESP_ERR",
    "IBV_WC_LOC_ACCESS_ERR",
    "IBV_WC_REM_INV_REQ_ERR",
    "IBV_WC_REM_ACCESS_ERR",
    "IBV_WC_REM_OP_ERR",
    "IBV_WC_RETRY_EXC_ERR",
    "IBV_WC_RNR_RETRY_EXC_ERR",
    "IBV_WC_LOC_RDD_VIOL_ERR",
    "IBV_WC_REM_INV_RD_REQ_ERR",
    "IBV_WC_REM_ABORT_ERR",
    "IBV_WC_INV_EECN_ERR",
    "IBV_WC_INV_EEC_STATE_ERR",
    "IBV_WC_FATAL_ERR",
    "IBV_WC_RESP_TIMEOUT_ERR",
    "IBV_WC_GENERAL_ERR",
    "IBV_WC_TM_ERR",
];

/// The name of a `ibv_wc_status` value.
pub fn wc_status_name(s: u32) -> &'static str {
    WC_STATUS.get(s as usize).copied().unwrap_or("IBV_WC_(unknown)")
}

/// `enum ibv_wc_status` values the catalogue checks.
pub mod wc {
    /// IBV_WC_SUCCESS.
    pub const SUCCESS: u32 = 0;
    /// IBV_WC_LOC_LEN_ERR.
    pub const LOC_LEN_ERR: u32 = 1;
    /// IBV_WC_WR_FLUSH_ERR.
    pub const WR_FLUSH_ERR: u32 = 5;
    /// IBV_WC_BAD_RESP_ERR.
    pub const BAD_RESP_ERR: u32 = 7;
    /// IBV_WC_REM_INV_REQ_ERR.
    pub const REM_INV_REQ_ERR: u32 = 9;
    /// IBV_WC_REM_ACCESS_ERR.
    pub const REM_ACCESS_ERR: u32 = 10;
    /// IBV_WC_REM_OP_ERR.
    pub const REM_OP_ERR: u32 = 11;
    /// IBV_WC_RETRY_EXC_ERR.
    pub const RETRY_EXC_ERR: u32 = 12;
    /// IBV_WC_RNR_RETRY_EXC_ERR.
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
}

/// QP states as `enum ibv_qp_state` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpStateName {
    /// IBV_QPS_RESET.
    Reset,
    /// IBV_QPS_INIT.
    Init,
    /// IBV_QPS_RTR.
    Rtr,
    /// IBV_QPS_RTS.
    Rts,
    /// IBV_QPS_SQD.
    Sqd,
    /// IBV_QPS_SQE.
    Sqe,
    /// IBV_QPS_ERR.
    Err,
}

impl QpStateName {
    /// Every state.
    pub const ALL: [QpStateName; 7] = [
        QpStateName::Reset,
        QpStateName::Init,
        QpStateName::Rtr,
        QpStateName::Rts,
        QpStateName::Sqd,
        QpStateName::Sqe,
        QpStateName::Err,
    ];
}

/// An agent could not do what a case asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentError {
    /// The device refused a verb (the verb and its error).
    Verb(String),
    /// The device cannot do this at all (the case is not applicable).
    Unsupported(String),
    /// The agent is unreachable or answered nonsense.
    Link(String),
}

impl fmt::Display for AgentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentError::Verb(s) => write!(f, "verb failed: {s}"),
            AgentError::Unsupported(s) => write!(f, "not supported by the target: {s}"),
            AgentError::Link(s) => write!(f, "agent: {s}"),
        }
    }
}

impl std::error::Error for AgentError {}

/// The target side of the conformance run.
pub trait Agent {
    /// A one-line description of the target (device, driver, version).
    fn describe(&self) -> String;
    /// The target's address (its RoCEv2 GID as an IP address).
    fn addr(&self) -> IpAddr;
    /// Create what `s` asks for, replacing anything a previous case left.
    fn setup(&mut self, s: &QpSetup) -> Result<QpInfo, AgentError>;
    /// Post a receive of `len` bytes at region offset `offset`.
    fn post_recv(&mut self, wr_id: u64, offset: u64, len: u32) -> Result<(), AgentError>;
    /// Post a send work request.
    fn post_send(&mut self, wr: &SendReq) -> Result<(), AgentError>;
    /// Completions of the QP's CQ: up to `want`, waiting at most `wait`
    /// for the first of them (and then only for those already there).
    fn poll(&mut self, want: usize, wait: Duration) -> Result<Vec<Completion>, AgentError>;
    /// The QP's state (`ibv_query_qp`).
    fn qp_state(&mut self) -> Result<QpStateName, AgentError>;
    /// Move the QP to `state` (`ibv_modify_qp` with `IBV_QP_STATE` only:
    /// RTS → SQD and SQD → RTS).
    fn modify_qp(&mut self, state: QpStateName) -> Result<(), AgentError> {
        Err(AgentError::Unsupported(format!("modify_qp to {state:?}")))
    }
    /// `len` bytes of the region from `offset`.
    fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, AgentError>;
    /// Write `data` into the region at `offset` (through the CPU, not the
    /// wire).
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), AgentError>;
    /// Destroy what [`Agent::setup`] created.
    fn teardown(&mut self) -> Result<(), AgentError>;
}
