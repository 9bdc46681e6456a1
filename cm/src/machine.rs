//! The state machine: one [`Cm`] per port, its connection table and the IBA 12.9
//! state machine.

use crate::types::*;
use core::time::Duration;
use roce_packet::mad::{
    attr, CmMad, CmMsg, CmPath, CmRep, CmReq, MadHeader, CM_CLASS_VERSION, MAD_LEN, METHOD_SEND,
};
use std::collections::{BTreeMap, HashMap, VecDeque};

/// Private data sizes of the CM messages (IBA table 99 and the following).
const REQ_PD: usize = 92;
const REP_PD: usize = 196;
const REJ_PD: usize = 148;
const DREQ_PD: usize = 220;
const SIDR_REQ_PD: usize = 216;
const SIDR_REP_PD: usize = 136;

/// REJ `msg_rejected` values.
const REJ_MSG_REQ: u8 = 0;
const REJ_MSG_REP: u8 = 1;
const REJ_MSG_OTHER: u8 = 2;
/// MRA `msg_mraed` values.
const MRA_MSG_REQ: u8 = 0;
const MRA_MSG_REP: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Active,
    Passive,
}

/// What the CM knows of one connection or SIDR exchange.
#[derive(Debug)]
struct Conn {
    state: ConnState,
    role: Role,
    peer: PeerAddr,
    /// Our comm ID (the request ID for an active SIDR; 0 for a passive one).
    local_comm_id: u32,
    /// The peer's comm ID, 0 until known (the request ID for a passive SIDR).
    remote_comm_id: u32,
    /// The TID of the REQ (or SIDR_REQ): REP, RTU, REJ and MRA reuse it.
    tid: u64,
    /// The TID of our DREQs: the REQ's on the active side (as the kernel,
    /// whose TIDs are one per connection end), one of our own on the
    /// passive side.
    dreq_tid: u64,
    service_id: u64,
    local_qpn: u32,
    remote_qpn: u32,
    /// Retransmission timeout of this connection's requests.
    timeout: Duration,
    max_retries: u8,
    retries: u8,
    deadline: Option<Duration>,
    /// The last MAD sent for this connection: retransmitted on timeouts
    /// and resent to answer duplicates.
    last: Option<Box<[u8; MAD_LEN]>>,
    /// The user destroyed it: no more events, and it is removed when its
    /// exchange ends.
    destroyed: bool,
    /// An XRC connection (initiator on the active side, target on the
    /// passive side): the target's QPN travels in the REP's local EE
    /// context field.
    xrc: bool,
}

impl Conn {
    /// A connection in `state` with `peer`, of the exchange with TID `tid`
    /// (and `dreq_tid` for its DREQs): no comm IDs, QPNs, timer or MAD
    /// yet, the fields a caller names set over these.
    fn new((state, role): (ConnState, Role), peer: PeerAddr, (tid, dreq_tid): (u64, u64)) -> Conn {
        Conn {
            state,
            role,
            peer,
            local_comm_id: 0,
            remote_comm_id: 0,
            tid,
            dreq_tid,
            service_id: 0,
            local_qpn: 0,
            remote_qpn: 0,
            timeout: Duration::ZERO,
            max_retries: 0,
            retries: 0,
            deadline: None,
            last: None,
            destroyed: false,
            xrc: false,
        }
    }
}

/// What a caller may read about a connection ([`Cm::conn_info`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    pub state: ConnState,
    /// True for the side that sent the REQ (or SIDR_REQ).
    pub active: bool,
    pub peer: PeerAddr,
    pub local_comm_id: u32,
    /// 0 until known.
    pub remote_comm_id: u32,
    pub service_id: u64,
    /// 0 until known (the passive side learns its own on `accept`).
    pub local_qpn: u32,
    /// 0 until known.
    pub remote_qpn: u32,
}

/// The communication manager of one port: a sans-IO state machine. Feed it
/// received MADs ([`Cm::handle_mad`]) and the clock ([`Cm::handle_timeout`]),
/// call the user operations, and drain [`Cm::poll_transmit`],
/// [`Cm::poll_event`]; sleep until [`Cm::poll_timeout`].
#[derive(Debug)]
pub struct Cm {
    cfg: CmConfig,
    rng: u64,
    next_conn: u64,
    next_listen: u32,
    /// service ID → listener.
    listeners: BTreeMap<u64, ListenId>,
    conns: BTreeMap<ConnId, Conn>,
    /// Our comm ID (or SIDR request ID) → connection.
    by_comm_id: HashMap<u32, ConnId>,
    /// Passive connections by (peer GID, peer comm ID): duplicate REQs.
    by_remote: HashMap<(Gid, u32), ConnId>,
    /// Passive SIDR exchanges by (peer GID, request ID).
    sidr_by_remote: HashMap<(Gid, u32), ConnId>,
    transmits: VecDeque<Transmit>,
    events: VecDeque<CmEvent>,
    counters: Counters,
}

fn pd_array<const N: usize>(src: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = src.len().min(N);
    a[..n].copy_from_slice(&src[..n]);
    a
}

fn pd_box<const N: usize>(src: &[u8]) -> Box<[u8; N]> {
    Box::new(pd_array(src))
}

fn check_pd(len: usize, max: usize) -> Result<(), (usize, usize)> {
    if len > max {
        Err((len, max))
    } else {
        Ok(())
    }
}

/// `Err((field, value))` when `value` exceeds `max`.
fn check_range(field: &'static str, value: u32, max: u32) -> Result<(), (&'static str, u32)> {
    if value > max {
        Err((field, value))
    } else {
        Ok(())
    }
}

fn emit(attr_id: u16, tid: u64, msg: CmMsg) -> [u8; MAD_LEN] {
    CmMad { header: MadHeader::cm(attr_id, tid), msg }.emit()
}

impl Cm {
    pub fn new(cfg: CmConfig) -> Cm {
        // splitmix64 of the seed, so that neighbouring seeds diverge; never 0
        let mut z = cfg.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        Cm {
            cfg,
            rng: if z == 0 { 0x2545_F491_4F6C_DD1D } else { z },
            next_conn: 1,
            next_listen: 1,
            listeners: BTreeMap::new(),
            conns: BTreeMap::new(),
            by_comm_id: HashMap::new(),
            by_remote: HashMap::new(),
            sidr_by_remote: HashMap::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Connections and SIDR exchanges the CM holds (TimeWait and
    /// destroyed-but-closing ones included).
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// The state of a connection the user holds (None once it is gone or
    /// destroyed).
    pub fn state(&self, conn: ConnId) -> Option<ConnState> {
        self.user_conn(conn).map(|c| c.state)
    }

    pub fn conn_info(&self, conn: ConnId) -> Option<ConnInfo> {
        self.user_conn(conn).map(|c| ConnInfo {
            state: c.state,
            active: c.role == Role::Active,
            peer: c.peer,
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            service_id: c.service_id,
            local_qpn: c.local_qpn,
            remote_qpn: c.remote_qpn,
        })
    }

    /// A starting PSN from the CM's seeded generator (24 bits).
    pub fn random_psn(&mut self) -> u32 {
        (self.next_random() >> 40) as u32 & 0xFF_FFFF
    }

    // -- outputs -------------------------------------------------------

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// The earliest deadline (absolute, on the caller's clock); call
    /// [`Cm::handle_timeout`] when it has passed.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.conns.values().filter_map(|c| c.deadline).min()
    }

    // -- listeners -----------------------------------------------------

    /// Accept REQs and SIDR_REQs for `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<ListenId, ListenError> {
        if self.listeners.contains_key(&service_id) {
            return Err(ListenError::AddressInUse(service_id));
        }
        let id = ListenId(self.next_listen);
        self.next_listen = self.next_listen.wrapping_add(1);
        self.listeners.insert(service_id, id);
        Ok(id)
    }

    /// Stop listening (connections already requested stay).
    pub fn unlisten(&mut self, listen: ListenId) -> Result<(), UnlistenError> {
        let sid = self.listeners.iter().find(|(_, l)| **l == listen).map(|(s, _)| *s);
        match sid {
            Some(s) => {
                self.listeners.remove(&s);
                Ok(())
            }
            None => Err(UnlistenError::UnknownListen),
        }
    }

    // -- active side ---------------------------------------------------

    /// Send a REQ (state ReqSent). Retransmitted every
    /// [`CmConfig::request_timeout`] up to `max_cm_retries` times, then
    /// [`CmEvent::Unreachable`].
    pub fn connect(&mut self, now: Duration, req: ConnectRequest) -> Result<ConnId, ConnectError> {
        check_pd(req.private_data.len(), REQ_PD)
            .map_err(|(len, max)| ConnectError::PrivateDataTooLong { len, max })?;
        let p = &req.path;
        [
            check_range("local_qpn", req.local_qpn, 0xFF_FFFF),
            check_range("starting_psn", req.starting_psn, 0xFF_FFFF),
            check_range("retry_count", req.retry_count.into(), 7),
            check_range("rnr_retry_count", req.rnr_retry_count.into(), 7),
            check_range("path_mtu", req.path_mtu.into(), 5),
            check_range("flow_label", p.flow_label, 0xF_FFFF),
            check_range("sl", p.sl.into(), 15),
            check_range("packet_rate", p.packet_rate.into(), 63),
            check_range("local_ack_timeout", p.local_ack_timeout.into(), 31),
        ]
        .into_iter()
        .collect::<Result<(), _>>()
        .map_err(|(field, value)| ConnectError::FieldOutOfRange { field, value })?;
        if req.path_mtu == 0 {
            return Err(ConnectError::FieldOutOfRange { field: "path_mtu", value: 0 });
        }
        if self.conns.len() >= self.cfg.max_connections {
            return Err(ConnectError::TooManyConnections);
        }
        let local_comm_id = self.new_comm_id();
        let tid = self.next_random();
        let max_retries = self.cfg.max_cm_retries.min(15);
        let msg = CmReq {
            local_comm_id,
            service_id: req.service_id,
            local_ca_guid: self.cfg.local_ca_guid,
            local_qkey: 0,
            local_qpn: req.local_qpn,
            responder_resources: req.responder_resources,
            local_eecn: 0,
            initiator_depth: req.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: self.cfg.cm_response_timeout.min(31),
            transport_service_type: req.qp_type.wire().0,
            end_to_end_flow_control: req.end_to_end_flow_control,
            starting_psn: req.starting_psn,
            local_cm_response_timeout: self.cfg.cm_response_timeout.min(31),
            retry_count: req.retry_count,
            partition_key: req.pkey,
            path_mtu: req.path_mtu,
            rdc_exists: false,
            rnr_retry_count: req.rnr_retry_count,
            max_cm_retries: max_retries,
            srq: req.srq,
            extended_transport_type: req.qp_type.wire().1,
            primary: CmPath {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: self.cfg.local_gid,
                remote_gid: req.remote.gid,
                flow_label: p.flow_label,
                packet_rate: p.packet_rate,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: p.sl,
                subnet_local: false,
                local_ack_timeout: p.local_ack_timeout,
            },
            alternate: CmPath::default(),
            private_data: pd_array(&req.private_data),
        };
        let mad = emit(attr::REQ, tid, CmMsg::Req(Box::new(msg)));
        let c = Conn {
            local_comm_id,
            service_id: req.service_id,
            local_qpn: req.local_qpn,
            timeout: self.cfg.request_timeout(),
            max_retries,
            xrc: req.qp_type == CmQpType::Xrc,
            ..Conn::new((ConnState::ReqSent, Role::Active), req.remote, (tid, tid))
        };
        Ok(self.send_request(now, c, mad))
    }

    /// After [`CmEvent::ConnectResponse`] (and the QP moved to RTS): send the
    /// RTU; the connection is Established (event too).
    pub fn complete_connect(&mut self, conn: ConnId) -> Result<(), CompleteConnectError> {
        let c = self.user_conn(conn).ok_or(CompleteConnectError::UnknownConn)?;
        if c.state != ConnState::RepRcvd {
            return Err(CompleteConnectError::InvalidState(c.state));
        }
        let mad = emit(
            attr::RTU,
            c.tid,
            CmMsg::Rtu {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                private_data: Box::new([0u8; 224]),
            },
        );
        let peer = c.peer;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::Established;
            c.last = Some(Box::new(mad));
        }
        self.queue(peer, mad);
        self.event(conn, CmEvent::Established { conn });
        Ok(())
    }

    /// Send a SIDR_REQ (state SidrReqSent), retransmitted like a REQ; the
    /// answer is [`CmEvent::SidrReply`], silence [`CmEvent::Unreachable`].
    pub fn sidr_resolve(
        &mut self,
        now: Duration,
        req: SidrRequest,
    ) -> Result<ConnId, SidrResolveError> {
        check_pd(req.private_data.len(), SIDR_REQ_PD)
            .map_err(|(len, max)| SidrResolveError::PrivateDataTooLong { len, max })?;
        if self.conns.len() >= self.cfg.max_connections {
            return Err(SidrResolveError::TooManyConnections);
        }
        let request_id = self.new_comm_id();
        let tid = self.next_random();
        let mad = emit(
            attr::SIDR_REQ,
            tid,
            CmMsg::SidrReq {
                request_id,
                partition_key: req.pkey,
                service_id: req.service_id,
                private_data: pd_box(&req.private_data),
            },
        );
        let c = Conn {
            local_comm_id: request_id,
            service_id: req.service_id,
            timeout: self.cfg.request_timeout(),
            max_retries: self.cfg.max_cm_retries.min(15),
            ..Conn::new((ConnState::SidrReqSent, Role::Active), req.remote, (tid, tid))
        };
        Ok(self.send_request(now, c, mad))
    }

    // -- passive side --------------------------------------------------

    /// Answer a [`CmEvent::ConnectRequest`] with a REP (state RepSent),
    /// retransmitted until the RTU (or [`Cm::establish`]).
    pub fn accept(
        &mut self,
        now: Duration,
        conn: ConnId,
        params: AcceptParams,
    ) -> Result<(), AcceptError> {
        let c = self.user_conn(conn).ok_or(AcceptError::UnknownConn)?;
        if !matches!(c.state, ConnState::ReqRcvd | ConnState::MraReqSent) {
            return Err(AcceptError::InvalidState(c.state));
        }
        check_pd(params.private_data.len(), REP_PD)
            .map_err(|(len, max)| AcceptError::PrivateDataTooLong { len, max })?;
        [
            check_range("local_qpn", params.local_qpn, 0xFF_FFFF),
            check_range("starting_psn", params.starting_psn, 0xFF_FFFF),
            check_range("rnr_retry_count", params.rnr_retry_count.into(), 7),
        ]
        .into_iter()
        .collect::<Result<(), _>>()
        .map_err(|(field, value)| AcceptError::FieldOutOfRange { field, value })?;
        // an XRC target's number goes in the EE context field, with SRQ
        // set (the kernel's cm_format_rep)
        let (local_qpn, local_eecn) =
            if c.xrc { (0, params.local_qpn) } else { (params.local_qpn, 0) };
        let rep = CmRep {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            local_qkey: 0,
            local_qpn,
            local_eecn,
            starting_psn: params.starting_psn,
            responder_resources: params.responder_resources,
            initiator_depth: params.initiator_depth,
            target_ack_delay: self.cfg.target_ack_delay.min(31),
            failover_accepted: 0,
            end_to_end_flow_control: params.end_to_end_flow_control,
            rnr_retry_count: params.rnr_retry_count,
            srq: params.srq || c.xrc,
            local_ca_guid: self.cfg.local_ca_guid,
            private_data: pd_array(&params.private_data),
        };
        let mad = emit(attr::REP, c.tid, CmMsg::Rep(Box::new(rep)));
        let peer = c.peer;
        if let Some(c) = self.conns.get_mut(&conn) {
            c.state = ConnState::RepSent;
            c.local_qpn = params.local_qpn;
            c.retries = 0;
            c.deadline = Some(now.saturating_add(c.timeout));
            c.last = Some(Box::new(mad));
        }
        self.queue(peer, mad);
        Ok(())
    }

    /// Send a REJ "consumer reject" (28) with `private_data` (≤ 148 bytes):
    /// the passive side refusing a REQ, or the active side refusing a REP.
    /// The connection is gone.
    pub fn reject(&mut self, conn: ConnId, private_data: &[u8]) -> Result<(), RejectError> {
        let c = self.user_conn(conn).ok_or(RejectError::UnknownConn)?;
        let msg_rejected = match c.state {
            ConnState::ReqRcvd | ConnState::MraReqSent => REJ_MSG_REQ,
            ConnState::RepRcvd => REJ_MSG_REP,
            s => return Err(RejectError::InvalidState(s)),
        };
        check_pd(private_data.len(), REJ_PD)
            .map_err(|(len, max)| RejectError::PrivateDataTooLong { len, max })?;
        self.send_rej_for(conn, msg_rejected, rej_reason::CONSUMER_REJECT, private_data);
        self.remove(conn);
        Ok(())
    }

    /// The passive side saw traffic on the QP before the RTU (IBA 12.9.6:
    /// the first packet establishes the connection): RepSent → Established
    /// (event too). A no-op when already Established.
    pub fn establish(&mut self, conn: ConnId) -> Result<(), EstablishError> {
        let c = self.user_conn(conn).ok_or(EstablishError::UnknownConn)?;
        match c.state {
            ConnState::Established => Ok(()),
            ConnState::RepSent | ConnState::MraRepRcvd => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.state = ConnState::Established;
                    c.deadline = None;
                }
                self.event(conn, CmEvent::Established { conn });
                Ok(())
            }
            s => Err(EstablishError::InvalidState(s)),
        }
    }

    /// Answer a [`CmEvent::SidrRequest`] with a SIDR_REP; the exchange is over.
    pub fn sidr_reply(
        &mut self,
        conn: ConnId,
        params: SidrReplyParams,
    ) -> Result<(), SidrReplyError> {
        let c = self.user_conn(conn).ok_or(SidrReplyError::UnknownConn)?;
        if c.state != ConnState::SidrReqRcvd {
            return Err(SidrReplyError::InvalidState(c.state));
        }
        check_pd(params.private_data.len(), SIDR_REP_PD)
            .map_err(|(len, max)| SidrReplyError::PrivateDataTooLong { len, max })?;
        check_range("qpn", params.qpn, 0xFF_FFFF)
            .map_err(|(field, value)| SidrReplyError::FieldOutOfRange { field, value })?;
        let (peer, tid, request_id, service_id) = (c.peer, c.tid, c.remote_comm_id, c.service_id);
        self.send_sidr_rep(
            peer,
            tid,
            request_id,
            service_id,
            params.status,
            params.qpn,
            params.qkey,
            &params.private_data,
        );
        self.remove(conn);
        Ok(())
    }

    // -- both sides ----------------------------------------------------

    /// Send a DREQ (≤ 220 bytes of private data; state DreqSent),
    /// retransmitted until the DREP; either way the connection ends in
    /// TimeWait with [`CmEvent::Disconnected`].
    pub fn disconnect(
        &mut self,
        now: Duration,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), DisconnectError> {
        let c = self.user_conn(conn).ok_or(DisconnectError::UnknownConn)?;
        if c.state != ConnState::Established {
            return Err(DisconnectError::InvalidState(c.state));
        }
        check_pd(private_data.len(), DREQ_PD)
            .map_err(|(len, max)| DisconnectError::PrivateDataTooLong { len, max })?;
        self.start_dreq(now, conn, private_data);
        Ok(())
    }

    /// Forget a connection. What is owed to the peer is still sent: a REJ
    /// (timeout before a REP, consumer reject after a REQ or REP), a DREQ
    /// from Established (the connection then closes through TimeWait
    /// without events), a SIDR_REP "rejected" for a pending SIDR_REQ.
    pub fn destroy(&mut self, now: Duration, conn: ConnId) -> Result<(), DestroyError> {
        let c = self.user_conn(conn).ok_or(DestroyError::UnknownConn)?;
        let state = c.state;
        match state {
            ConnState::ReqSent | ConnState::MraReqRcvd => {
                self.send_rej_timeout(conn);
                self.remove(conn);
            }
            ConnState::ReqRcvd | ConnState::MraReqSent => {
                self.send_rej_for(conn, REJ_MSG_REQ, rej_reason::CONSUMER_REJECT, &[]);
                self.remove(conn);
            }
            ConnState::RepRcvd => {
                self.send_rej_for(conn, REJ_MSG_REP, rej_reason::CONSUMER_REJECT, &[]);
                self.remove(conn);
            }
            ConnState::RepSent | ConnState::MraRepRcvd => {
                self.send_rej_for(conn, REJ_MSG_OTHER, rej_reason::CONSUMER_REJECT, &[]);
                self.remove(conn);
            }
            ConnState::Established => {
                self.start_dreq(now, conn, &[]);
                self.mark_destroyed(conn);
            }
            ConnState::DreqSent | ConnState::TimeWait => self.mark_destroyed(conn),
            ConnState::SidrReqSent => self.remove(conn),
            ConnState::SidrReqRcvd => {
                let (peer, tid, request_id, service_id) =
                    (c.peer, c.tid, c.remote_comm_id, c.service_id);
                self.send_sidr_rep(
                    peer,
                    tid,
                    request_id,
                    service_id,
                    sidr_status::REJECTED,
                    0,
                    0,
                    &[],
                );
                self.remove(conn);
            }
        }
        Ok(())
    }

    // -- inputs --------------------------------------------------------

    /// A MAD received on QP1 from `from` (the UD payload: 256 bytes or
    /// more). Anything malformed, unknown or out of place is counted and
    /// dropped; nothing here panics.
    pub fn handle_mad(&mut self, now: Duration, from: PeerAddr, bytes: &[u8]) {
        self.counters.mads_received += 1;
        let Ok(mad) = CmMad::parse(bytes) else {
            self.counters.dropped_malformed += 1;
            return;
        };
        let h = mad.header;
        if h.class_version != CM_CLASS_VERSION || h.method != METHOD_SEND {
            self.counters.dropped_malformed += 1;
            return;
        }
        match mad.msg {
            CmMsg::Req(q) => self.on_req(now, from, h.tid, &q),
            CmMsg::Rep(p) => self.on_rep(from, &p),
            CmMsg::Rtu { local_comm_id, remote_comm_id, .. } => {
                self.on_rtu(from, local_comm_id, remote_comm_id)
            }
            CmMsg::Dreq { local_comm_id, remote_comm_id, remote_qpn, .. } => {
                self.on_dreq(now, from, h.tid, local_comm_id, remote_comm_id, remote_qpn)
            }
            CmMsg::Drep { local_comm_id, remote_comm_id, .. } => {
                self.on_drep(now, from, local_comm_id, remote_comm_id)
            }
            CmMsg::Rej { local_comm_id, remote_comm_id, reason, private_data, .. } => {
                self.on_rej(now, from, local_comm_id, remote_comm_id, reason, &private_data[..])
            }
            CmMsg::Mra { local_comm_id, remote_comm_id, msg_mraed, service_timeout, .. } => {
                self.on_mra(now, from, local_comm_id, remote_comm_id, msg_mraed, service_timeout)
            }
            CmMsg::SidrReq { request_id, partition_key, service_id, private_data } => self
                .on_sidr_req(from, h.tid, request_id, partition_key, service_id, &private_data[..]),
            CmMsg::SidrRep { request_id, status, qpn, qkey, private_data, .. } => {
                self.on_sidr_rep(from, request_id, status, qpn, qkey, &private_data[..])
            }
            CmMsg::Other(_) => {
                if matches!(h.attr_id, attr::LAP | attr::APR) {
                    self.counters.dropped_unsupported += 1;
                } else {
                    self.counters.dropped_unknown_attr += 1;
                }
            }
        }
    }

    /// Run the timers that expired at `now`: retransmissions, give-ups,
    /// TimeWait exits. Calls before any deadline do nothing.
    pub fn handle_timeout(&mut self, now: Duration) {
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else { continue };
            match c.state {
                ConnState::ReqSent
                | ConnState::MraReqRcvd
                | ConnState::RepSent
                | ConnState::MraRepRcvd
                | ConnState::DreqSent
                | ConnState::SidrReqSent => {
                    if c.retries < c.max_retries {
                        c.retries += 1;
                        c.deadline = Some(now.saturating_add(c.timeout));
                        let (peer, last) = (c.peer, c.last.as_deref().copied());
                        self.counters.retransmits += 1;
                        if let Some(mad) = last {
                            self.queue(peer, mad);
                        }
                    } else {
                        self.counters.timeouts += 1;
                        self.give_up(now, id);
                    }
                }
                ConnState::TimeWait => {
                    self.event(id, CmEvent::TimewaitExit { conn: id });
                    self.remove(id);
                }
                _ => c.deadline = None,
            }
        }
    }

    // -- received messages ---------------------------------------------

    fn on_req(&mut self, now: Duration, from: PeerAddr, tid: u64, q: &CmReq) {
        if let Some(&id) = self.by_remote.get(&(from.gid, q.local_comm_id)) {
            self.on_dup_req(id, from, tid, q.local_comm_id);
            return;
        }
        let reject = |this: &mut Cm, reason: u16| {
            this.send_rej_raw(from, tid, 0, q.local_comm_id, REJ_MSG_REQ, reason, &[], &[]);
        };
        let Some(&listen) = self.listeners.get(&q.service_id) else {
            self.counters.unknown_service += 1;
            reject(self, rej_reason::INVALID_SERVICE_ID);
            return;
        };
        let qp_type = match (q.transport_service_type, q.extended_transport_type) {
            (0, _) => CmQpType::Rc,
            (1, _) => CmQpType::Uc,
            (3, 1) => CmQpType::Xrc,
            _ => {
                reject(self, rej_reason::INVALID_TRANSPORT_TYPE);
                return;
            }
        };
        // IBA 12.9.8.3: the same remote QP already has a connection here
        // (its peer lost it): refuse the new one, tear the old one down.
        let stale = self
            .conns
            .iter()
            .find(|(_, c)| {
                c.remote_qpn != 0
                    && c.remote_qpn == q.local_qpn
                    && c.peer.gid == from.gid
                    && !matches!(c.state, ConnState::SidrReqSent | ConnState::SidrReqRcvd)
            })
            .map(|(id, c)| (*id, c.state));
        if let Some((old, state)) = stale {
            self.counters.stale_connections += 1;
            reject(self, rej_reason::STALE_CONNECTION);
            if state == ConnState::Established {
                self.start_dreq(now, old, &[]);
            }
            return;
        }
        if self.conns.len() >= self.cfg.max_connections {
            self.counters.dropped_conn_limit += 1;
            reject(self, rej_reason::NO_RESOURCES);
            return;
        }
        let local_comm_id = self.new_comm_id();
        let dreq_tid = self.next_random();
        let timeout =
            2 * iba_timeout(self.cfg.packet_life_time) + iba_timeout(q.local_cm_response_timeout);
        let id = self.insert(Conn {
            local_comm_id,
            remote_comm_id: q.local_comm_id,
            service_id: q.service_id,
            remote_qpn: q.local_qpn,
            timeout,
            max_retries: q.max_cm_retries,
            xrc: qp_type == CmQpType::Xrc,
            ..Conn::new((ConnState::ReqRcvd, Role::Passive), from, (tid, dreq_tid))
        });
        self.by_remote.insert((from.gid, q.local_comm_id), id);
        let p = &q.primary;
        let req = ReqInfo {
            remote: from,
            service_id: q.service_id,
            remote_comm_id: q.local_comm_id,
            remote_ca_guid: q.local_ca_guid,
            remote_qpn: q.local_qpn,
            starting_psn: q.starting_psn,
            qp_type,
            responder_resources: q.responder_resources,
            initiator_depth: q.initiator_depth,
            retry_count: q.retry_count,
            rnr_retry_count: q.rnr_retry_count,
            srq: q.srq,
            path_mtu: q.path_mtu,
            pkey: q.partition_key,
            end_to_end_flow_control: q.end_to_end_flow_control,
            path: PathParams {
                flow_label: p.flow_label,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: p.sl,
                packet_rate: p.packet_rate,
                local_ack_timeout: p.local_ack_timeout,
            },
            private_data: q.private_data.to_vec(),
        };
        self.event(id, CmEvent::ConnectRequest { listen, conn: id, req: Box::new(req) });
    }

    /// A REQ we already have a connection for (the active side retried).
    fn on_dup_req(&mut self, id: ConnId, from: PeerAddr, tid: u64, remote_comm_id: u32) {
        let Some(c) = self.conns.get(&id) else { return };
        match c.state {
            ConnState::ReqRcvd => {
                // the application is slow: ask the peer to wait (as the
                // kernel's rdma_cm does with its delayed MRA)
                let mad = emit(
                    attr::MRA,
                    c.tid,
                    CmMsg::Mra {
                        local_comm_id: c.local_comm_id,
                        remote_comm_id: c.remote_comm_id,
                        msg_mraed: MRA_MSG_REQ,
                        service_timeout: self.cfg.mra_service_timeout.min(31),
                        private_data: Box::new([0u8; 222]),
                    },
                );
                if let Some(c) = self.conns.get_mut(&id) {
                    c.state = ConnState::MraReqSent;
                    c.last = Some(Box::new(mad));
                }
                self.counters.duplicates_answered += 1;
                self.queue(from, mad);
            }
            ConnState::MraReqSent | ConnState::RepSent | ConnState::MraRepRcvd => {
                // resend the MRA or the REP
                if let Some(mad) = c.last.as_deref().copied() {
                    self.counters.duplicates_answered += 1;
                    self.queue(from, mad);
                }
            }
            ConnState::TimeWait => {
                self.counters.duplicates_answered += 1;
                self.counters.stale_connections += 1;
                self.send_rej_raw(
                    from,
                    tid,
                    0,
                    remote_comm_id,
                    REJ_MSG_REQ,
                    rej_reason::STALE_CONNECTION,
                    &[],
                    &[],
                );
            }
            _ => self.counters.dropped_duplicate += 1,
        }
    }

    fn on_rep(&mut self, from: PeerAddr, p: &CmRep) {
        let Some(id) = self.lookup(from, p.remote_comm_id, p.local_comm_id) else {
            self.counters.dropped_unknown_comm_id += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else { return };
        match (c.state, c.role) {
            (ConnState::ReqSent | ConnState::MraReqRcvd, Role::Active) => {
                c.state = ConnState::RepRcvd;
                c.remote_comm_id = p.local_comm_id;
                // an XRC target answers with its number in the EE context
                c.remote_qpn = if c.xrc { p.local_eecn } else { p.local_qpn };
                c.deadline = None;
                c.last = None;
                let rep = RepInfo {
                    remote_comm_id: p.local_comm_id,
                    remote_ca_guid: p.local_ca_guid,
                    remote_qpn: c.remote_qpn,
                    starting_psn: p.starting_psn,
                    responder_resources: p.responder_resources,
                    initiator_depth: p.initiator_depth,
                    target_ack_delay: p.target_ack_delay,
                    failover_accepted: p.failover_accepted,
                    end_to_end_flow_control: p.end_to_end_flow_control,
                    rnr_retry_count: p.rnr_retry_count,
                    srq: p.srq,
                    private_data: p.private_data.to_vec(),
                };
                self.event(id, CmEvent::ConnectResponse { conn: id, rep: Box::new(rep) });
            }
            (ConnState::Established, Role::Active) => {
                // our RTU was lost: send it again
                if let Some(mad) = c.last.as_deref().copied() {
                    let peer = c.peer;
                    self.counters.duplicates_answered += 1;
                    self.queue(peer, mad);
                }
            }
            (ConnState::RepRcvd | ConnState::DreqSent | ConnState::TimeWait, Role::Active) => {
                self.counters.dropped_duplicate += 1
            }
            _ => self.counters.dropped_invalid_state += 1,
        }
    }

    fn on_rtu(&mut self, from: PeerAddr, local_comm_id: u32, remote_comm_id: u32) {
        let Some(id) = self.lookup(from, remote_comm_id, local_comm_id) else {
            self.counters.dropped_unknown_comm_id += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else { return };
        match (c.state, c.role) {
            (ConnState::RepSent | ConnState::MraRepRcvd, Role::Passive) => {
                c.state = ConnState::Established;
                c.deadline = None;
                self.event(id, CmEvent::Established { conn: id });
            }
            (ConnState::Established | ConnState::DreqSent | ConnState::TimeWait, Role::Passive) => {
                self.counters.dropped_duplicate += 1
            }
            _ => self.counters.dropped_invalid_state += 1,
        }
    }

    fn on_dreq(
        &mut self,
        now: Duration,
        from: PeerAddr,
        tid: u64,
        local_comm_id: u32,
        remote_comm_id: u32,
        remote_qpn: u32,
    ) {
        let found = self
            .lookup(from, remote_comm_id, local_comm_id)
            .filter(|id| self.conns.get(id).is_some_and(|c| c.local_qpn == remote_qpn));
        let Some(id) = found else {
            // IBA 12.9.8.4 (and the kernel's CM): a DREQ for a connection we
            // do not know still gets its DREP
            self.counters.dropped_unknown_comm_id += 1;
            self.send_drep(from, tid, remote_comm_id, local_comm_id);
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else { return };
        match c.state {
            ConnState::Established
            | ConnState::RepSent
            | ConnState::MraRepRcvd
            | ConnState::DreqSent => {
                let (lc, rc) = (c.local_comm_id, c.remote_comm_id);
                self.send_drep(from, tid, lc, rc);
                self.disconnected(now, id, DisconnectCause::DreqReceived);
            }
            ConnState::TimeWait => {
                let (lc, rc) = (c.local_comm_id, c.remote_comm_id);
                self.counters.duplicates_answered += 1;
                self.send_drep(from, tid, lc, rc);
            }
            _ => self.counters.dropped_invalid_state += 1,
        }
    }

    fn on_drep(&mut self, now: Duration, from: PeerAddr, local_comm_id: u32, remote_comm_id: u32) {
        let Some(id) = self.lookup(from, remote_comm_id, local_comm_id) else {
            self.counters.dropped_unknown_comm_id += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else { return };
        match c.state {
            ConnState::DreqSent => {
                self.disconnected(now, id, DisconnectCause::DrepReceived);
            }
            ConnState::TimeWait => self.counters.dropped_duplicate += 1,
            _ => self.counters.dropped_invalid_state += 1,
        }
    }

    fn on_rej(
        &mut self,
        now: Duration,
        from: PeerAddr,
        local_comm_id: u32,
        remote_comm_id: u32,
        reason: u16,
        private_data: &[u8],
    ) {
        self.counters.rej_received += 1;
        // A REJ sent before the rejecter knew our comm ID (its REQ timed
        // out before our REP reached it) names only its own: find it by
        // the peer's comm ID, as the kernel finds timeout REJs.
        let found = if remote_comm_id == 0 {
            self.by_remote.get(&(from.gid, local_comm_id)).copied()
        } else {
            self.lookup(from, remote_comm_id, local_comm_id)
        };
        let Some(id) = found else {
            self.counters.dropped_unknown_comm_id += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else { return };
        let event = CmEvent::Rejected { conn: id, reason, private_data: private_data.to_vec() };
        match c.state {
            ConnState::ReqSent
            | ConnState::MraReqRcvd
            | ConnState::ReqRcvd
            | ConnState::MraReqSent
            | ConnState::RepSent
            | ConnState::MraRepRcvd
            | ConnState::RepRcvd => {
                self.event(id, event);
                self.remove(id);
            }
            ConnState::Established if reason == rej_reason::STALE_CONNECTION => {
                self.time_wait(now, id, event);
            }
            _ => self.counters.dropped_invalid_state += 1,
        }
    }

    fn on_mra(
        &mut self,
        now: Duration,
        from: PeerAddr,
        local_comm_id: u32,
        remote_comm_id: u32,
        msg_mraed: u8,
        service_timeout: u8,
    ) {
        self.counters.mra_received += 1;
        let Some(id) = self.lookup(from, remote_comm_id, local_comm_id) else {
            self.counters.dropped_unknown_comm_id += 1;
            return;
        };
        let wait = 2 * iba_timeout(self.cfg.packet_life_time) + iba_timeout(service_timeout);
        let Some(c) = self.conns.get_mut(&id) else { return };
        let next = match (c.state, msg_mraed) {
            (ConnState::ReqSent | ConnState::MraReqRcvd, MRA_MSG_REQ) => ConnState::MraReqRcvd,
            (ConnState::RepSent | ConnState::MraRepRcvd, MRA_MSG_REP) => ConnState::MraRepRcvd,
            _ => {
                self.counters.dropped_invalid_state += 1;
                return;
            }
        };
        c.state = next;
        c.deadline = Some(now.saturating_add(wait));
    }

    fn on_sidr_req(
        &mut self,
        from: PeerAddr,
        tid: u64,
        request_id: u32,
        pkey: u16,
        service_id: u64,
        private_data: &[u8],
    ) {
        if self.sidr_by_remote.contains_key(&(from.gid, request_id)) {
            self.counters.dropped_duplicate += 1;
            return;
        }
        let Some(&listen) = self.listeners.get(&service_id) else {
            self.counters.unknown_service += 1;
            self.send_sidr_rep(
                from,
                tid,
                request_id,
                service_id,
                sidr_status::SERVICE_ID_NOT_SUPPORTED,
                0,
                0,
                &[],
            );
            return;
        };
        if self.conns.len() >= self.cfg.max_connections {
            // the peer retries; by then a slot may be free
            self.counters.dropped_conn_limit += 1;
            return;
        }
        let id = self.insert(Conn {
            remote_comm_id: request_id,
            service_id,
            ..Conn::new((ConnState::SidrReqRcvd, Role::Passive), from, (tid, tid))
        });
        self.sidr_by_remote.insert((from.gid, request_id), id);
        self.event(
            id,
            CmEvent::SidrRequest {
                listen,
                conn: id,
                remote: from,
                service_id,
                pkey,
                private_data: private_data.to_vec(),
            },
        );
    }

    fn on_sidr_rep(
        &mut self,
        from: PeerAddr,
        request_id: u32,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) {
        let found = self
            .lookup(from, request_id, 0)
            .filter(|id| self.conns.get(id).is_some_and(|c| c.state == ConnState::SidrReqSent));
        let Some(id) = found else {
            self.counters.dropped_unknown_comm_id += 1;
            return;
        };
        self.event(
            id,
            CmEvent::SidrReply { conn: id, status, qpn, qkey, private_data: private_data.to_vec() },
        );
        self.remove(id);
    }

    // -- helpers -------------------------------------------------------

    /// The connection a message names: our comm ID `local` (the message's
    /// remote comm ID field), from the right peer, and — once we know it —
    /// the peer's comm ID `remote` must match too (0 in the message: not
    /// checked).
    fn lookup(&self, from: PeerAddr, local: u32, remote: u32) -> Option<ConnId> {
        let id = *self.by_comm_id.get(&local)?;
        let c = self.conns.get(&id)?;
        let remote_ok = c.remote_comm_id == 0 || remote == 0 || c.remote_comm_id == remote;
        (c.peer.gid == from.gid && remote_ok).then_some(id)
    }

    fn user_conn(&self, conn: ConnId) -> Option<&Conn> {
        self.conns.get(&conn).filter(|c| !c.destroyed)
    }

    fn mark_destroyed(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.destroyed = true;
        }
    }

    /// Enter TimeWait (the connection lingers for `timewait`, then goes)
    /// and report `ev`.
    fn time_wait(&mut self, now: Duration, id: ConnId, ev: CmEvent) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = ConnState::TimeWait;
            c.deadline = Some(now.saturating_add(self.cfg.timewait));
        }
        self.event(id, ev);
    }

    /// [`Self::time_wait`] with [`CmEvent::Disconnected`] for `cause`.
    fn disconnected(&mut self, now: Duration, id: ConnId, cause: DisconnectCause) {
        self.time_wait(now, id, CmEvent::Disconnected { conn: id, cause });
    }

    /// Insert an active side's connection `c` whose first MAD is `mad`:
    /// sent now, retransmitted after `c.timeout` until answered.
    fn send_request(&mut self, now: Duration, c: Conn, mad: [u8; MAD_LEN]) -> ConnId {
        let peer = c.peer;
        let deadline = Some(now.saturating_add(c.timeout));
        let id = self.insert(Conn { deadline, last: Some(Box::new(mad)), ..c });
        self.queue(peer, mad);
        id
    }

    fn event(&mut self, conn: ConnId, ev: CmEvent) {
        if self.conns.get(&conn).is_some_and(|c| !c.destroyed) {
            self.events.push_back(ev);
        }
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A comm ID (or SIDR request ID) no live connection uses, never 0.
    fn new_comm_id(&mut self) -> u32 {
        loop {
            let mut id = (self.next_random() >> 32) as u32;
            if let Some(tag) = self.cfg.comm_id_tag {
                id = (id & 0x00FF_FFFF) | u32::from(tag) << 24;
            }
            if id != 0 && !self.by_comm_id.contains_key(&id) {
                return id;
            }
        }
    }

    fn insert(&mut self, conn: Conn) -> ConnId {
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        if conn.local_comm_id != 0 {
            self.by_comm_id.insert(conn.local_comm_id, id);
        }
        self.conns.insert(id, conn);
        id
    }

    fn remove(&mut self, id: ConnId) {
        if let Some(c) = self.conns.remove(&id) {
            if self.by_comm_id.get(&c.local_comm_id) == Some(&id) {
                self.by_comm_id.remove(&c.local_comm_id);
            }
            let key = (c.peer.gid, c.remote_comm_id);
            if self.by_remote.get(&key) == Some(&id) {
                self.by_remote.remove(&key);
            }
            if self.sidr_by_remote.get(&key) == Some(&id) {
                self.sidr_by_remote.remove(&key);
            }
        }
    }

    /// Queue a MAD for transmission and count it.
    fn queue(&mut self, to: PeerAddr, mad: [u8; MAD_LEN]) {
        if self.transmits.len() >= self.cfg.max_queued_transmits {
            self.counters.dropped_tx_queue_full += 1;
            return;
        }
        let k = &mut self.counters;
        k.mads_sent += 1;
        match u16::from_be_bytes([mad[16], mad[17]]) {
            attr::REQ => k.req_sent += 1,
            attr::REP => k.rep_sent += 1,
            attr::RTU => k.rtu_sent += 1,
            attr::DREQ => k.dreq_sent += 1,
            attr::DREP => k.drep_sent += 1,
            attr::REJ => k.rej_sent += 1,
            attr::MRA => k.mra_sent += 1,
            attr::SIDR_REQ => k.sidr_req_sent += 1,
            attr::SIDR_REP => k.sidr_rep_sent += 1,
            _ => {}
        }
        self.transmits.push_back(Transmit { to, mad });
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej_raw(
        &mut self,
        to: PeerAddr,
        tid: u64,
        local_comm_id: u32,
        remote_comm_id: u32,
        msg_rejected: u8,
        reason: u16,
        ari: &[u8],
        private_data: &[u8],
    ) {
        let mad = emit(
            attr::REJ,
            tid,
            CmMsg::Rej {
                local_comm_id,
                remote_comm_id,
                msg_rejected,
                reject_info_length: ari.len().min(72) as u8,
                reason,
                ari: pd_box(ari),
                private_data: pd_box(private_data),
            },
        );
        self.queue(to, mad);
    }

    /// A REJ about connection `conn`.
    fn send_rej_for(&mut self, conn: ConnId, msg_rejected: u8, reason: u16, private_data: &[u8]) {
        let Some(c) = self.conns.get(&conn) else { return };
        let (peer, tid, lc, rc) = (c.peer, c.tid, c.local_comm_id, c.remote_comm_id);
        self.send_rej_raw(peer, tid, lc, rc, msg_rejected, reason, &[], private_data);
    }

    /// A REJ "timeout" with our CA GUID as the additional information,
    /// as the kernel's CM sends when it gives up on a REQ or REP.
    fn send_rej_timeout(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(&conn) else { return };
        let (peer, tid, lc, rc) = (c.peer, c.tid, c.local_comm_id, c.remote_comm_id);
        let guid = self.cfg.local_ca_guid.to_be_bytes();
        self.send_rej_raw(peer, tid, lc, rc, REJ_MSG_OTHER, rej_reason::TIMEOUT, &guid, &[]);
    }

    fn send_drep(&mut self, to: PeerAddr, tid: u64, local_comm_id: u32, remote_comm_id: u32) {
        let mad = emit(
            attr::DREP,
            tid,
            CmMsg::Drep { local_comm_id, remote_comm_id, private_data: Box::new([0u8; 224]) },
        );
        self.queue(to, mad);
    }

    #[allow(clippy::too_many_arguments)]
    fn send_sidr_rep(
        &mut self,
        to: PeerAddr,
        tid: u64,
        request_id: u32,
        service_id: u64,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) {
        let mad = emit(
            attr::SIDR_REP,
            tid,
            CmMsg::SidrRep {
                request_id,
                status,
                additional_info_length: 0,
                qpn,
                service_id,
                qkey,
                additional_info: Box::new([0u8; 72]),
                private_data: pd_box(private_data),
            },
        );
        self.queue(to, mad);
    }

    /// Send a DREQ for `conn` and wait for the DREP (state DreqSent).
    fn start_dreq(&mut self, now: Duration, conn: ConnId, private_data: &[u8]) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        let mad = emit(
            attr::DREQ,
            c.dreq_tid,
            CmMsg::Dreq {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                remote_qpn: c.remote_qpn,
                private_data: pd_box(private_data),
            },
        );
        c.state = ConnState::DreqSent;
        c.retries = 0;
        c.deadline = Some(now.saturating_add(c.timeout));
        c.last = Some(Box::new(mad));
        let peer = c.peer;
        self.queue(peer, mad);
    }

    /// `max_cm_retries` retransmissions went unanswered.
    fn give_up(&mut self, now: Duration, id: ConnId) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        match c.state {
            ConnState::DreqSent => {
                self.disconnected(now, id, DisconnectCause::DreqTimeout);
            }
            ConnState::SidrReqSent => {
                self.event(id, CmEvent::Unreachable { conn: id });
                self.remove(id);
            }
            _ => {
                self.send_rej_timeout(id);
                self.event(id, CmEvent::Unreachable { conn: id });
                self.remove(id);
            }
        }
    }
}
