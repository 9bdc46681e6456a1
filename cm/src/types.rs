//! The CM's vocabulary: configuration, handles, addresses, the
//! parameters of the user calls, events, counters and errors.

use core::time::Duration;
use roce_packet::mad::{IpCmHeader, MAD_LEN};
use std::net::{IpAddr, Ipv4Addr};

/// A port GID (16 bytes; IPv4-mapped `::ffff:a.b.c.d` for IPv4 on RoCEv2).
pub type Gid = [u8; 16];

/// The GID RoCEv2 uses for an IP address (IPv4-mapped for IPv4).
pub fn gid_from_ip(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The GID of an IPv4 address (`::ffff:a.b.c.d`).
pub fn ipv4_gid(ip: Ipv4Addr) -> Gid {
    gid_from_ip(IpAddr::V4(ip))
}

/// librdmacm's private data for an IP port space: its 36-byte
/// [`IpCmHeader`] followed by the application's bytes.
pub fn ip_private_data(header: &IpCmHeader, app: &[u8]) -> Vec<u8> {
    let mut v = header.emit().to_vec();
    v.extend_from_slice(app);
    v
}

/// The IBA timeout encoding: 4.096 µs × 2^`exp` (IBA 12.6.5; `exp` ≤ 31).
pub fn iba_timeout(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << u32::from(exp.min(31)))
}

/// Where a MAD comes from or goes to: the remote port's GID and the QP
/// that sent it (always QP1, the GSI, for CM traffic; replies go back to
/// the sender's QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerAddr {
    pub gid: Gid,
    pub qpn: u32,
}

impl PeerAddr {
    /// The CM of the port with this GID (QP1).
    pub fn new(gid: Gid) -> PeerAddr {
        PeerAddr { gid, qpn: 1 }
    }
}

/// One connection (or SIDR exchange) of a [`crate::Cm`]. Handles are never
/// reused by the same `Cm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub(crate) u64);

impl ConnId {
    pub fn value(self) -> u64 {
        self.0
    }
}

/// A listening service ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenId(pub(crate) u32);

impl ListenId {
    pub fn value(self) -> u32 {
        self.0
    }
}

/// Configuration of one [`crate::Cm`] (one per port).
#[derive(Clone, Debug)]
pub struct CmConfig {
    /// This port's GID (the local GID of the primary path in REQs).
    pub local_gid: Gid,
    /// This CA's GUID (REQ/REP `local_ca_guid`, REJ ARI on timeouts).
    pub local_ca_guid: u64,
    /// How long the peer may take to answer our REQ and how long we take
    /// to answer its REP: the REQ's remote and local CM response timeouts,
    /// as an IBA exponent (4.096 µs × 2^n). librdmacm uses 20 (4.29 s).
    pub cm_response_timeout: u8,
    /// Retransmissions of a REQ, REP, DREQ or SIDR_REQ before giving up
    /// (4 bits on the wire; librdmacm uses 15).
    pub max_cm_retries: u8,
    /// Packet life time of the path as an IBA exponent; each
    /// retransmission timeout adds it twice (the round trip), as the
    /// kernel's CM does. The kernel uses 16 for RoCE paths (268 ms).
    pub packet_life_time: u8,
    /// How long a connection stays in TimeWait before `TimewaitExit`.
    pub timewait: Duration,
    /// The service timeout our MRAs announce (IBA exponent; the kernel's
    /// rdma_cm uses 24, 68.7 s).
    pub mra_service_timeout: u8,
    /// The `target_ack_delay` our REPs carry (rxe's CA ACK delay is 15).
    pub target_ack_delay: u8,
    /// At most this many connections and SIDR exchanges at once
    /// (TimeWait included); past it REQs get REJ "no resources".
    pub max_connections: usize,
    /// At most this many MADs wait in the transmit queue; more are
    /// dropped and counted (a caller that never drains cannot make the
    /// CM grow).
    pub max_queued_transmits: usize,
    /// Seed of the generator of comm IDs, TIDs and starting PSNs.
    pub seed: u64,
    /// When set, the top byte of every local communication ID (and SIDR
    /// request ID) this CM makes: on a device shared by several
    /// processes, the member's slot, by which the kernel steers the
    /// peer's later CM messages to this process.
    pub comm_id_tag: Option<u8>,
}

impl CmConfig {
    /// librdmacm's defaults (response timeout 20, 15 retries), TimeWait
    /// 4.096 µs × 2^20 (4.29 s).
    pub fn new(local_gid: Gid, local_ca_guid: u64, seed: u64) -> CmConfig {
        CmConfig {
            local_gid,
            local_ca_guid,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 16,
            timewait: iba_timeout(20),
            mra_service_timeout: 24,
            target_ack_delay: 15,
            max_connections: 4096,
            max_queued_transmits: 4096,
            seed,
            comm_id_tag: None,
        }
    }

    /// How long the active side waits for an answer to its REQ (or
    /// SIDR_REQ), DREQ: 2 × packet life time + 4.096 µs × 2^`cm_response_timeout`.
    pub fn request_timeout(&self) -> Duration {
        2 * iba_timeout(self.packet_life_time) + iba_timeout(self.cm_response_timeout)
    }
}

/// RC, UC or XRC: the transport service type of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmQpType {
    Rc,
    Uc,
    /// XRC (IBA 14.2 annex, "XRC"): the active side's QP is an XRC
    /// initiator, the passive side's an XRC target. On the wire: transport
    /// service type 3 with extended transport type 1 in the REQ; the REP
    /// carries the target QP's number in its local EE context field (with
    /// SRQ set), as the kernel's CM does.
    Xrc,
}

impl CmQpType {
    /// The REQ's transport service type and extended transport type.
    pub(crate) fn wire(self) -> (u8, u8) {
        match self {
            CmQpType::Rc => (0, 0),
            CmQpType::Uc => (1, 0),
            CmQpType::Xrc => (3, 1),
        }
    }
}

/// The path fields of a REQ's primary path that RoCE uses (the GIDs come
/// from the config and the request, the LIDs are 0xFFFF).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathParams {
    /// 20 bits.
    pub flow_label: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    /// 6 bits.
    pub packet_rate: u8,
    /// 5 bits: the QP's ACK timeout exponent for this path.
    pub local_ack_timeout: u8,
}

impl Default for PathParams {
    /// What the kernel's rdma_cm put in rping's REQ over rxe, but the flow
    /// label (the kernel hashes the UDP ports into it): hop limit 64,
    /// local ACK timeout 19.
    fn default() -> PathParams {
        PathParams {
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            packet_rate: 0,
            local_ack_timeout: 19,
        }
    }
}

/// The active side's parameters of [`crate::Cm::connect`]: what goes in the REQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    pub service_id: u64,
    pub remote: PeerAddr,
    /// 24 bits, the local QP (RC or UC).
    pub local_qpn: u32,
    /// 24 bits (see [`crate::Cm::random_psn`]): the PSN the *passive* side
    /// sends from, i.e. the active QP's receive PSN. That is how the
    /// kernel's CM fills it and rping through rxe shows it
    /// (`packet/tests/data/rping.pcap`: the passive side's first READ
    /// carries the REQ's PSN, the active side's first SEND the REP's).
    pub starting_psn: u32,
    pub qp_type: CmQpType,
    /// RDMA READ/atomic requests we accept at once (`max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READ/atomic requests we issue at once (`max_rd_atomic`).
    pub initiator_depth: u8,
    /// 3 bits.
    pub retry_count: u8,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The `ibv_mtu` code, 1 (256) ..= 5 (4096).
    pub path_mtu: u8,
    pub pkey: u16,
    pub end_to_end_flow_control: bool,
    pub path: PathParams,
    /// Up to 92 bytes, librdmacm's IP header included when the caller
    /// speaks rdma_cm (see [`ip_private_data`]).
    pub private_data: Vec<u8>,
}

impl ConnectRequest {
    /// rping's values: RC, responder resources and initiator depth 1,
    /// retry 7, RNR retry 7, path MTU 1024 (code 3), P_Key 0xFFFF, no
    /// end-to-end flow control, no private data.
    pub fn new(service_id: u64, remote: PeerAddr, local_qpn: u32, starting_psn: u32) -> Self {
        ConnectRequest {
            service_id,
            remote,
            local_qpn,
            starting_psn,
            qp_type: CmQpType::Rc,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: false,
            path_mtu: 3,
            pkey: 0xFFFF,
            end_to_end_flow_control: false,
            path: PathParams::default(),
            private_data: Vec::new(),
        }
    }
}

/// The passive side's parameters of [`crate::Cm::accept`]: what goes in the REP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptParams {
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits: the PSN the active side sends from, i.e. the passive QP's
    /// receive PSN (see [`ConnectRequest::starting_psn`]).
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub end_to_end_flow_control: bool,
    /// Up to 196 bytes.
    pub private_data: Vec<u8>,
}

impl AcceptParams {
    /// rping's values: responder resources and initiator depth 1, RNR retry
    /// 7, no SRQ, no flow control, no private data.
    pub fn new(local_qpn: u32, starting_psn: u32) -> AcceptParams {
        AcceptParams {
            local_qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            srq: false,
            end_to_end_flow_control: false,
            private_data: Vec::new(),
        }
    }
}

/// The parameters of [`crate::Cm::sidr_resolve`]: what goes in the SIDR_REQ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrRequest {
    pub service_id: u64,
    pub remote: PeerAddr,
    pub pkey: u16,
    /// Up to 216 bytes (librdmacm's IP header first for rdma_cm).
    pub private_data: Vec<u8>,
}

/// SIDR_REP status values (IBA table 116).
pub mod sidr_status {
    /// The QPN and Q_Key are valid.
    pub const VALID: u8 = 0;
    /// Service ID not supported (nobody listens on it).
    pub const SERVICE_ID_NOT_SUPPORTED: u8 = 1;
    /// Rejected by the service provider.
    pub const REJECTED: u8 = 2;
    /// No QP available.
    pub const NO_QP: u8 = 3;
}

/// REJ reasons the CM sends (IBA table 112).
pub mod rej_reason {
    pub const NO_RESOURCES: u16 = 3;
    pub const TIMEOUT: u16 = 4;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    pub const STALE_CONNECTION: u16 = 10;
    pub const CONSUMER_REJECT: u16 = 28;
}

/// The parameters of [`crate::Cm::sidr_reply`]: what goes in the SIDR_REP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// See [`sidr_status`].
    pub status: u8,
    /// 24 bits, the UD QP.
    pub qpn: u32,
    pub qkey: u32,
    /// Up to 136 bytes.
    pub private_data: Vec<u8>,
}

/// The REQ as the passive side received it ([`CmEvent::ConnectRequest`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReqInfo {
    pub remote: PeerAddr,
    pub service_id: u64,
    pub remote_comm_id: u32,
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    /// The PSN the passive side sends from (the active QP's receive PSN;
    /// see [`ConnectRequest::starting_psn`]).
    pub starting_psn: u32,
    pub qp_type: CmQpType,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub path_mtu: u8,
    pub pkey: u16,
    pub end_to_end_flow_control: bool,
    pub path: PathParams,
    /// The whole 92-byte field (librdmacm's IP header included; librdmacm
    /// itself hands the application only the bytes after it).
    pub private_data: Vec<u8>,
}

/// The REP as the active side received it ([`CmEvent::ConnectResponse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepInfo {
    pub remote_comm_id: u32,
    pub remote_ca_guid: u64,
    pub remote_qpn: u32,
    /// The PSN the active side sends from (the passive QP's receive PSN).
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The whole 196-byte field.
    pub private_data: Vec<u8>,
}

/// Why a connection left the connected states ([`CmEvent::Disconnected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DisconnectCause {
    /// The peer sent a DREQ (answered with a DREP).
    DreqReceived,
    /// The peer answered our DREQ.
    DrepReceived,
    /// Our DREQ was never answered (`max_cm_retries` retransmissions).
    DreqTimeout,
}

/// What the CM tells the application; pull them with
/// [`crate::Cm::poll_event`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a listened service (passive side, state ReqRcvd): answer
    /// with `accept` or `reject`.
    ConnectRequest { listen: ListenId, conn: ConnId, req: Box<ReqInfo> },
    /// Our REQ was answered by a REP (active side, state RepRcvd): move the
    /// QP to RTR and RTS with these values, then `complete_connect`
    /// (RTU), or `reject`.
    ConnectResponse { conn: ConnId, rep: Box<RepInfo> },
    /// The connection is up: passive side on RTU (or `establish`), active
    /// side on `complete_connect`.
    Established { conn: ConnId },
    /// The peer sent a REJ (the connection is gone); `reason` per IBA
    /// table 112, `private_data` the whole 148-byte field.
    Rejected { conn: ConnId, reason: u16, private_data: Vec<u8> },
    /// Our REQ, REP or SIDR_REQ was never answered after `max_cm_retries`
    /// retransmissions (a REJ "timeout" was sent for a REQ or REP); the
    /// connection is gone.
    Unreachable { conn: ConnId },
    /// The connection left Established (or RepSent) and is in TimeWait.
    Disconnected { conn: ConnId, cause: DisconnectCause },
    /// TimeWait is over; the connection is gone.
    TimewaitExit { conn: ConnId },
    /// A SIDR_REQ for a listened service: answer with `sidr_reply`.
    SidrRequest {
        listen: ListenId,
        conn: ConnId,
        remote: PeerAddr,
        service_id: u64,
        pkey: u16,
        /// The whole 216-byte field.
        private_data: Vec<u8>,
    },
    /// The answer to our SIDR_REQ (the exchange is over).
    SidrReply {
        conn: ConnId,
        status: u8,
        qpn: u32,
        qkey: u32,
        /// The whole 136-byte field.
        private_data: Vec<u8>,
    },
}

/// A MAD to send: a UD SEND to `to` (QP1, Q_Key 0x80010000).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    pub to: PeerAddr,
    pub mad: [u8; MAD_LEN],
}

/// What the CM did, for tests and `roce stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// MADs queued for transmission (retransmissions included).
    pub mads_sent: u64,
    /// MADs given to `handle_mad`.
    pub mads_received: u64,
    /// Timer-driven retransmissions of REQ, REP, DREQ, SIDR_REQ.
    pub retransmits: u64,
    /// Answers resent because a duplicate arrived (REP or MRA for a
    /// duplicate REQ, RTU for a duplicate REP, DREP for a DREQ in TimeWait).
    pub duplicates_answered: u64,
    /// Duplicates that needed no answer (RTU after Established, REP
    /// while the application decides, DREP in TimeWait, ...).
    pub dropped_duplicate: u64,
    /// Too short, another class or base version, a method other than Send,
    /// a class version other than 2.
    pub dropped_malformed: u64,
    /// A REP, RTU, DREQ, DREP, REJ or MRA naming no connection of ours
    /// (or one whose peer comm ID does not match).
    pub dropped_unknown_comm_id: u64,
    /// Attributes the CM does not handle (ClassPortInfo, unknown IDs).
    pub dropped_unknown_attr: u64,
    /// LAP and APR (alternate paths are not supported).
    pub dropped_unsupported: u64,
    /// A known message in a state where it means nothing.
    pub dropped_invalid_state: u64,
    /// REQs or SIDR_REQs refused because `max_connections` is reached.
    pub dropped_conn_limit: u64,
    /// MADs not queued because `max_queued_transmits` was reached.
    pub dropped_tx_queue_full: u64,
    pub req_sent: u64,
    pub rep_sent: u64,
    pub rtu_sent: u64,
    pub dreq_sent: u64,
    pub drep_sent: u64,
    pub mra_sent: u64,
    pub rej_sent: u64,
    pub rej_received: u64,
    pub mra_received: u64,
    pub sidr_req_sent: u64,
    pub sidr_rep_sent: u64,
    /// REQs to a service nobody listens on (answered with REJ 8 or
    /// SIDR_REP status 1).
    pub unknown_service: u64,
    /// REQs refused as stale connections (REJ 10).
    pub stale_connections: u64,
    /// Exchanges given up after `max_cm_retries` retransmissions.
    pub timeouts: u64,
}

/// The states of a connection (IBA 12.9.6, figure 149, and SIDR 12.11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: the peer sent an MRA for our REQ (longer wait).
    MraReqRcvd,
    /// Passive: REQ received, the application decides.
    ReqRcvd,
    /// Passive: the application still decides and we told the peer to
    /// wait (an MRA, sent on a duplicate REQ).
    MraReqSent,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Passive: the peer sent an MRA for our REP.
    MraRepRcvd,
    /// Active: REP received, the application moves its QP.
    RepRcvd,
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// After a disconnection, until `timewait` passes.
    TimeWait,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrReqSent,
    /// SIDR_REQ received, the application decides.
    SidrReqRcvd,
}

/// Errors of [`crate::Cm::listen`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    /// Another listener has this service ID (EADDRINUSE).
    #[error("service ID {0:#018x} already has a listener")]
    AddressInUse(u64),
}

/// Errors of [`crate::Cm::unlisten`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UnlistenError {
    #[error("no such listener")]
    UnknownListen,
}

/// Errors of [`crate::Cm::connect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
    #[error("{field} = {value} does not fit its field")]
    FieldOutOfRange { field: &'static str, value: u32 },
    #[error("the connection table is full")]
    TooManyConnections,
}

/// Errors of [`crate::Cm::accept`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AcceptError {
    #[error("no such connection")]
    UnknownConn,
    #[error("cannot accept in state {0:?}")]
    InvalidState(ConnState),
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
    #[error("{field} = {value} does not fit its field")]
    FieldOutOfRange { field: &'static str, value: u32 },
}

/// Errors of [`crate::Cm::complete_connect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CompleteConnectError {
    #[error("no such connection")]
    UnknownConn,
    #[error("cannot send an RTU in state {0:?}")]
    InvalidState(ConnState),
}

/// Errors of [`crate::Cm::reject`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RejectError {
    #[error("no such connection")]
    UnknownConn,
    #[error("cannot reject in state {0:?}")]
    InvalidState(ConnState),
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
}

/// Errors of [`crate::Cm::establish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EstablishError {
    #[error("no such connection")]
    UnknownConn,
    #[error("cannot establish in state {0:?}")]
    InvalidState(ConnState),
}

/// Errors of [`crate::Cm::disconnect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisconnectError {
    #[error("no such connection")]
    UnknownConn,
    #[error("cannot disconnect in state {0:?}")]
    InvalidState(ConnState),
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
}

/// Errors of [`crate::Cm::sidr_resolve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SidrResolveError {
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
    #[error("the connection table is full")]
    TooManyConnections,
}

/// Errors of [`crate::Cm::sidr_reply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SidrReplyError {
    #[error("no such connection")]
    UnknownConn,
    #[error("cannot send a SIDR_REP in state {0:?}")]
    InvalidState(ConnState),
    #[error("private data of {len} bytes, at most {max}")]
    PrivateDataTooLong { len: usize, max: usize },
    #[error("{field} = {value} does not fit its field")]
    FieldOutOfRange { field: &'static str, value: u32 },
}

/// Errors of [`crate::Cm::destroy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DestroyError {
    #[error("no such connection")]
    UnknownConn,
}
