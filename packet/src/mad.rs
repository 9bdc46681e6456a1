//! Management datagrams of the communication manager (IBA chapter 12) as
//! RoCE carries them: a 256-byte MAD in the payload of a UD SEND_ONLY to
//! QP1 (the GSI QP, Q_Key [`GSI_QKEY`]).
//!
//! [`CmMad::parse`] reads the common MAD header (24 bytes) and, for the CM
//! class, the attribute (232 bytes): REQ, MRA, REJ, REP, RTU, DREQ, DREP,
//! SIDR_REQ and SIDR_REP field by field; anything else (LAP, APR,
//! ClassPortInfo, unknown attributes) is kept as raw bytes. [`CmMad::emit`]
//! writes the exact bytes back (reserved bits zero). [`IpCmHeader`] reads
//! librdmacm's header at the start of a REQ's (or SIDR_REQ's) private data
//! — the IP addresses and port of an `rdma_connect` — and
//! [`ip_service_id`] builds the service ID of an IP port space.
//!
//! Nothing here panics on received bytes: a short buffer, another
//! management class or a wrong base version is an [`Error`].

use crate::error::{need, Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Bytes in a MAD.
pub const MAD_LEN: usize = 256;
/// Bytes of the common MAD header.
pub const MAD_HEADER_LEN: usize = 24;
/// Bytes of a CM attribute (the MAD after its header).
pub const CM_DATA_LEN: usize = MAD_LEN - MAD_HEADER_LEN;
/// Management class of the communication manager.
pub const CM_CLASS: u8 = 0x07;
/// The class version CM MADs carry (IBA 1.2 and later).
pub const CM_CLASS_VERSION: u8 = 2;
/// The Q_Key of QP1 (the GSI).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// MAD method `Send` (all CM messages use it).
pub const METHOD_SEND: u8 = 0x03;

/// The common header of every MAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM header: base version 1, class 0x07 version 2, method Send.
    pub fn cm(attr_id: u16, tid: u64) -> MadHeader {
        MadHeader {
            base_version: 1,
            mgmt_class: CM_CLASS,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }
}

/// CM attribute IDs.
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;
}

/// The name of a CM attribute ID (`"REQ"`, ...; `"?"` for unknown ones).
pub fn attr_name(id: u16) -> &'static str {
    match id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => "?",
    }
}

/// The IBA name of a REJ reason code (table 112).
pub fn rej_reason_name(r: u16) -> &'static str {
    match r {
        1 => "no QP available",
        2 => "no EEC available",
        3 => "no resources available",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid communication ID",
        7 => "invalid communication instance",
        8 => "invalid service ID",
        9 => "invalid transport service type",
        10 => "stale connection",
        11 => "RDC does not exist",
        12 => "primary remote GID rejected",
        13 => "primary remote LID rejected",
        14 => "invalid primary SL",
        15 => "invalid primary traffic class",
        16 => "invalid primary hop limit",
        17 => "invalid primary packet rate",
        18 => "alternate remote GID rejected",
        19 => "alternate remote LID rejected",
        20 => "invalid alternate SL",
        21 => "invalid alternate traffic class",
        22 => "invalid alternate hop limit",
        23 => "invalid alternate packet rate",
        24 => "port CM redirection",
        25 => "port redirection not supported",
        26 => "invalid path MTU",
        27 => "insufficient responder resources",
        28 => "consumer reject",
        29 => "invalid RNR NAK retry count",
        30 => "duplicate local communication ID",
        31 => "unsupported class version",
        32 => "invalid primary flow label",
        33 => "invalid alternate flow label",
        _ => "unknown reason",
    }
}

/// A path in a REQ (primary or alternate), 44 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

/// ConnectRequest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmReq {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 2 RD.
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub partition_key: u16,
    /// 4 bits (the `ibv_mtu` code: 3 = 1024).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub extended_transport_type: u8,
    pub primary: CmPath,
    pub alternate: CmPath,
    pub private_data: [u8; 92],
}

/// ConnectReply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmRep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits.
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; 196],
}

/// A CM message: the attribute of a CM MAD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmMsg {
    Req(Box<CmReq>),
    Rep(Box<CmRep>),
    /// ReadyToUse.
    Rtu {
        local_comm_id: u32,
        remote_comm_id: u32,
        private_data: Box<[u8; 224]>,
    },
    /// DisconnectRequest.
    Dreq {
        local_comm_id: u32,
        remote_comm_id: u32,
        /// 24 bits.
        remote_qpn: u32,
        private_data: Box<[u8; 220]>,
    },
    /// DisconnectReply.
    Drep {
        local_comm_id: u32,
        remote_comm_id: u32,
        private_data: Box<[u8; 224]>,
    },
    /// ConnectReject.
    Rej {
        local_comm_id: u32,
        remote_comm_id: u32,
        /// 2 bits: 0 REQ, 1 REP, 2 other.
        msg_rejected: u8,
        /// 7 bits.
        reject_info_length: u8,
        reason: u16,
        ari: Box<[u8; 72]>,
        private_data: Box<[u8; 148]>,
    },
    /// MessageReceiptAcknowledgement.
    Mra {
        local_comm_id: u32,
        remote_comm_id: u32,
        /// 2 bits: 0 REQ, 1 REP, 2 LAP.
        msg_mraed: u8,
        /// 5 bits.
        service_timeout: u8,
        private_data: Box<[u8; 222]>,
    },
    SidrReq {
        request_id: u32,
        partition_key: u16,
        service_id: u64,
        private_data: Box<[u8; 216]>,
    },
    SidrRep {
        request_id: u32,
        status: u8,
        additional_info_length: u8,
        /// 24 bits.
        qpn: u32,
        service_id: u64,
        qkey: u32,
        additional_info: Box<[u8; 72]>,
        private_data: Box<[u8; 136]>,
    },
    /// Any other attribute (LAP, APR, ClassPortInfo, unknown), raw.
    Other(Box<[u8; CM_DATA_LEN]>),
}

/// A CM MAD: header and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMad {
    pub header: MadHeader,
    pub msg: CmMsg,
}

// -- byte access (offsets within the 232-byte attribute) -----------------

struct R<'a>(&'a [u8]);
impl R<'_> {
    fn u8(&self, o: usize) -> u8 {
        self.0[o]
    }
    fn u16(&self, o: usize) -> u16 {
        u16::from_be_bytes([self.0[o], self.0[o + 1]])
    }
    fn u32(&self, o: usize) -> u32 {
        u32::from_be_bytes([self.0[o], self.0[o + 1], self.0[o + 2], self.0[o + 3]])
    }
    fn u64(&self, o: usize) -> u64 {
        (u64::from(self.u32(o)) << 32) | u64::from(self.u32(o + 4))
    }
    fn arr<const N: usize>(&self, o: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[o..o + N]);
        a
    }
    /// A 24-bit field in the high bytes of a word, and the low byte.
    fn u24_u8(&self, o: usize) -> (u32, u8) {
        let w = self.u32(o);
        (w >> 8, w as u8)
    }
}

struct W<'a>(&'a mut [u8]);
impl W<'_> {
    fn u8(&mut self, o: usize, v: u8) {
        self.0[o] = v;
    }
    fn u16(&mut self, o: usize, v: u16) {
        self.0[o..o + 2].copy_from_slice(&v.to_be_bytes());
    }
    fn u32(&mut self, o: usize, v: u32) {
        self.0[o..o + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, o: usize, v: u64) {
        self.0[o..o + 8].copy_from_slice(&v.to_be_bytes());
    }
    fn bytes(&mut self, o: usize, v: &[u8]) {
        self.0[o..o + v.len()].copy_from_slice(v);
    }
    fn u24_u8(&mut self, o: usize, hi: u32, lo: u8) {
        self.u32(o, ((hi & 0xFF_FFFF) << 8) | u32::from(lo));
    }
}

fn path_parse(r: &R, o: usize) -> CmPath {
    let w = r.u32(o + 36);
    CmPath {
        local_lid: r.u16(o),
        remote_lid: r.u16(o + 2),
        local_gid: r.arr(o + 4),
        remote_gid: r.arr(o + 20),
        flow_label: w >> 12,
        packet_rate: (w & 0x3F) as u8,
        traffic_class: r.u8(o + 40),
        hop_limit: r.u8(o + 41),
        sl: r.u8(o + 42) >> 4,
        subnet_local: r.u8(o + 42) & 0x08 != 0,
        local_ack_timeout: r.u8(o + 43) >> 3,
    }
}

fn path_emit(w: &mut W, o: usize, p: &CmPath) {
    w.u16(o, p.local_lid);
    w.u16(o + 2, p.remote_lid);
    w.bytes(o + 4, &p.local_gid);
    w.bytes(o + 20, &p.remote_gid);
    w.u32(o + 36, ((p.flow_label & 0xF_FFFF) << 12) | u32::from(p.packet_rate & 0x3F));
    w.u8(o + 40, p.traffic_class);
    w.u8(o + 41, p.hop_limit);
    w.u8(o + 42, ((p.sl & 0xF) << 4) | if p.subnet_local { 0x08 } else { 0 });
    w.u8(o + 43, (p.local_ack_timeout & 0x1F) << 3);
}

/// The fields of a REQ (IBA §12.6.5, Table 99) from its MAD data.
fn req_parse(r: &R) -> CmReq {
    let (local_qpn, responder_resources) = r.u24_u8(32);
    let (local_eecn, initiator_depth) = r.u24_u8(36);
    let (remote_eecn, b40) = r.u24_u8(40);
    let (starting_psn, b44) = r.u24_u8(44);
    let (b50, b51) = (r.u8(50), r.u8(51));
    CmReq {
        local_comm_id: r.u32(0),
        service_id: r.u64(8),
        local_ca_guid: r.u64(16),
        local_qkey: r.u32(28),
        local_qpn,
        responder_resources,
        local_eecn,
        initiator_depth,
        remote_eecn,
        remote_cm_response_timeout: b40 >> 3,
        transport_service_type: (b40 >> 1) & 3,
        end_to_end_flow_control: b40 & 1 != 0,
        starting_psn,
        local_cm_response_timeout: b44 >> 3,
        retry_count: b44 & 7,
        partition_key: r.u16(48),
        path_mtu: b50 >> 4,
        rdc_exists: b50 & 0x08 != 0,
        rnr_retry_count: b50 & 7,
        max_cm_retries: b51 >> 4,
        srq: b51 & 0x08 != 0,
        extended_transport_type: b51 & 7,
        primary: path_parse(r, 52),
        alternate: path_parse(r, 96),
        private_data: r.arr(140),
    }
}

/// The fields of a REP (IBA §12.6.8, Table 103) from its MAD data.
fn rep_parse(r: &R) -> CmRep {
    let b26 = r.u8(26);
    let b27 = r.u8(27);
    CmRep {
        local_comm_id: r.u32(0),
        remote_comm_id: r.u32(4),
        local_qkey: r.u32(8),
        local_qpn: r.u32(12) >> 8,
        local_eecn: r.u32(16) >> 8,
        starting_psn: r.u32(20) >> 8,
        responder_resources: r.u8(24),
        initiator_depth: r.u8(25),
        target_ack_delay: b26 >> 3,
        failover_accepted: (b26 >> 1) & 3,
        end_to_end_flow_control: b26 & 1 != 0,
        rnr_retry_count: b27 >> 5,
        srq: b27 & 0x10 != 0,
        local_ca_guid: r.u64(28),
        private_data: r.arr(36),
    }
}

/// A REQ's fields into its MAD data (IBA §12.6.5, Table 99).
fn req_emit(w: &mut W, q: &CmReq) {
    w.u32(0, q.local_comm_id);
    w.u64(8, q.service_id);
    w.u64(16, q.local_ca_guid);
    w.u32(28, q.local_qkey);
    w.u24_u8(32, q.local_qpn, q.responder_resources);
    w.u24_u8(36, q.local_eecn, q.initiator_depth);
    w.u24_u8(
        40,
        q.remote_eecn,
        ((q.remote_cm_response_timeout & 0x1F) << 3)
            | ((q.transport_service_type & 3) << 1)
            | u8::from(q.end_to_end_flow_control),
    );
    w.u24_u8(44, q.starting_psn, ((q.local_cm_response_timeout & 0x1F) << 3) | (q.retry_count & 7));
    w.u16(48, q.partition_key);
    w.u8(
        50,
        ((q.path_mtu & 0xF) << 4) | if q.rdc_exists { 0x08 } else { 0 } | (q.rnr_retry_count & 7),
    );
    w.u8(
        51,
        ((q.max_cm_retries & 0xF) << 4)
            | if q.srq { 0x08 } else { 0 }
            | (q.extended_transport_type & 7),
    );
    path_emit(w, 52, &q.primary);
    path_emit(w, 96, &q.alternate);
    w.bytes(140, &q.private_data);
}

/// A REP's fields into its MAD data (IBA §12.6.8, Table 103).
fn rep_emit(w: &mut W, p: &CmRep) {
    w.u32(0, p.local_comm_id);
    w.u32(4, p.remote_comm_id);
    w.u32(8, p.local_qkey);
    w.u24_u8(12, p.local_qpn, 0);
    w.u24_u8(16, p.local_eecn, 0);
    w.u24_u8(20, p.starting_psn, 0);
    w.u8(24, p.responder_resources);
    w.u8(25, p.initiator_depth);
    w.u8(
        26,
        ((p.target_ack_delay & 0x1F) << 3)
            | ((p.failover_accepted & 3) << 1)
            | u8::from(p.end_to_end_flow_control),
    );
    w.u8(27, ((p.rnr_retry_count & 7) << 5) | if p.srq { 0x10 } else { 0 });
    w.u64(28, p.local_ca_guid);
    w.bytes(36, &p.private_data);
}

impl CmMad {
    /// Parse a CM MAD (at least 256 bytes; a UD payload may carry more).
    pub fn parse(buf: &[u8]) -> Result<CmMad> {
        need("MAD", MAD_LEN, buf.len())?;
        let h = R(&buf[..MAD_HEADER_LEN]);
        let header = MadHeader {
            base_version: h.u8(0),
            mgmt_class: h.u8(1),
            class_version: h.u8(2),
            method: h.u8(3),
            status: h.u16(4),
            class_specific: h.u16(6),
            tid: h.u64(8),
            attr_id: h.u16(16),
            attr_mod: h.u32(20),
        };
        if header.base_version != 1 {
            return Err(Error::InvalidField("MAD base version is not 1"));
        }
        if header.mgmt_class != CM_CLASS {
            return Err(Error::InvalidField("not a CM MAD (management class is not 0x07)"));
        }
        let r = R(&buf[MAD_HEADER_LEN..MAD_LEN]);
        let msg = match header.attr_id {
            attr::REQ => CmMsg::Req(Box::new(req_parse(&r))),
            attr::REP => CmMsg::Rep(Box::new(rep_parse(&r))),
            attr::RTU => CmMsg::Rtu {
                local_comm_id: r.u32(0),
                remote_comm_id: r.u32(4),
                private_data: Box::new(r.arr(8)),
            },
            attr::DREQ => CmMsg::Dreq {
                local_comm_id: r.u32(0),
                remote_comm_id: r.u32(4),
                remote_qpn: r.u32(8) >> 8,
                private_data: Box::new(r.arr(12)),
            },
            attr::DREP => CmMsg::Drep {
                local_comm_id: r.u32(0),
                remote_comm_id: r.u32(4),
                private_data: Box::new(r.arr(8)),
            },
            attr::REJ => CmMsg::Rej {
                local_comm_id: r.u32(0),
                remote_comm_id: r.u32(4),
                msg_rejected: r.u8(8) >> 6,
                reject_info_length: r.u8(9) >> 1,
                reason: r.u16(10),
                ari: Box::new(r.arr(12)),
                private_data: Box::new(r.arr(84)),
            },
            attr::MRA => CmMsg::Mra {
                local_comm_id: r.u32(0),
                remote_comm_id: r.u32(4),
                msg_mraed: r.u8(8) >> 6,
                service_timeout: r.u8(9) >> 3,
                private_data: Box::new(r.arr(10)),
            },
            attr::SIDR_REQ => CmMsg::SidrReq {
                request_id: r.u32(0),
                partition_key: r.u16(4),
                service_id: r.u64(8),
                private_data: Box::new(r.arr(16)),
            },
            attr::SIDR_REP => CmMsg::SidrRep {
                request_id: r.u32(0),
                status: r.u8(4),
                additional_info_length: r.u8(5),
                qpn: r.u32(8) >> 8,
                service_id: r.u64(12),
                qkey: r.u32(20),
                additional_info: Box::new(r.arr(24)),
                private_data: Box::new(r.arr(96)),
            },
            _ => CmMsg::Other(Box::new(r.arr(0))),
        };
        Ok(CmMad { header, msg })
    }

    /// The 256 bytes of this MAD (reserved fields and bits zero).
    pub fn emit(&self) -> [u8; MAD_LEN] {
        let mut out = [0u8; MAD_LEN];
        {
            let h = &self.header;
            let mut w = W(&mut out[..MAD_HEADER_LEN]);
            w.u8(0, h.base_version);
            w.u8(1, h.mgmt_class);
            w.u8(2, h.class_version);
            w.u8(3, h.method);
            w.u16(4, h.status);
            w.u16(6, h.class_specific);
            w.u64(8, h.tid);
            w.u16(16, h.attr_id);
            w.u32(20, h.attr_mod);
        }
        let mut w = W(&mut out[MAD_HEADER_LEN..]);
        match &self.msg {
            CmMsg::Req(q) => req_emit(&mut w, q),
            CmMsg::Rep(p) => rep_emit(&mut w, p),
            CmMsg::Rtu { local_comm_id, remote_comm_id, private_data }
            | CmMsg::Drep { local_comm_id, remote_comm_id, private_data } => {
                w.u32(0, *local_comm_id);
                w.u32(4, *remote_comm_id);
                w.bytes(8, &private_data[..]);
            }
            CmMsg::Dreq { local_comm_id, remote_comm_id, remote_qpn, private_data } => {
                w.u32(0, *local_comm_id);
                w.u32(4, *remote_comm_id);
                w.u24_u8(8, *remote_qpn, 0);
                w.bytes(12, &private_data[..]);
            }
            CmMsg::Rej {
                local_comm_id,
                remote_comm_id,
                msg_rejected,
                reject_info_length,
                reason,
                ari,
                private_data,
            } => {
                w.u32(0, *local_comm_id);
                w.u32(4, *remote_comm_id);
                w.u8(8, (msg_rejected & 3) << 6);
                w.u8(9, (reject_info_length & 0x7F) << 1);
                w.u16(10, *reason);
                w.bytes(12, &ari[..]);
                w.bytes(84, &private_data[..]);
            }
            CmMsg::Mra {
                local_comm_id,
                remote_comm_id,
                msg_mraed,
                service_timeout,
                private_data,
            } => {
                w.u32(0, *local_comm_id);
                w.u32(4, *remote_comm_id);
                w.u8(8, (msg_mraed & 3) << 6);
                w.u8(9, (service_timeout & 0x1F) << 3);
                w.bytes(10, &private_data[..]);
            }
            CmMsg::SidrReq { request_id, partition_key, service_id, private_data } => {
                w.u32(0, *request_id);
                w.u16(4, *partition_key);
                w.u64(8, *service_id);
                w.bytes(16, &private_data[..]);
            }
            CmMsg::SidrRep {
                request_id,
                status,
                additional_info_length,
                qpn,
                service_id,
                qkey,
                additional_info,
                private_data,
            } => {
                w.u32(0, *request_id);
                w.u8(4, *status);
                w.u8(5, *additional_info_length);
                w.u24_u8(8, *qpn, 0);
                w.u64(12, *service_id);
                w.u32(20, *qkey);
                w.bytes(24, &additional_info[..]);
                w.bytes(96, &private_data[..]);
            }
            CmMsg::Other(raw) => w.bytes(0, &raw[..]),
        }
        out
    }

    /// The private data of the message, if it has any.
    pub fn private_data(&self) -> Option<&[u8]> {
        Some(match &self.msg {
            CmMsg::Req(q) => &q.private_data[..],
            CmMsg::Rep(p) => &p.private_data[..],
            CmMsg::Rtu { private_data, .. } | CmMsg::Drep { private_data, .. } => &private_data[..],
            CmMsg::Dreq { private_data, .. } => &private_data[..],
            CmMsg::Rej { private_data, .. } => &private_data[..],
            CmMsg::Mra { private_data, .. } => &private_data[..],
            CmMsg::SidrReq { private_data, .. } => &private_data[..],
            CmMsg::SidrRep { private_data, .. } => &private_data[..],
            CmMsg::Other(_) => return None,
        })
    }
}

/// rdma_cm port spaces (the protocol byte of an IP service ID).
pub mod port_space {
    /// `RDMA_PS_TCP`: RC connections.
    pub const TCP: u8 = 0x06;
    /// `RDMA_PS_UDP`: UD (SIDR).
    pub const UDP: u8 = 0x11;
    /// `RDMA_PS_IPOIB`.
    pub const IPOIB: u8 = 0x02;
    /// `RDMA_PS_IB`.
    pub const IB: u8 = 0x3F;
}

/// The service ID rdma_cm uses for port `port` of an IP port space:
/// `0x0000_0000_01PP_pppp` (PP the port space, pppp the port).
pub fn ip_service_id(port_space: u8, port: u16) -> u64 {
    0x0000_0000_0100_0000 | (u64::from(port_space) << 16) | u64::from(port)
}

/// The port space and port of an IP service ID (None for other IDs).
pub fn parse_ip_service_id(id: u64) -> Option<(u8, u16)> {
    (id >> 24 == 1).then_some(((id >> 16) as u8, id as u16))
}

/// librdmacm's header at the start of a REQ's (or SIDR_REQ's) private
/// data: 36 bytes (version, IP version, source port, source and
/// destination addresses); the application's private data follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCmHeader {
    /// CMA version (0x00).
    pub cma_version: u8,
    /// 4 or 6.
    pub ip_version: u8,
    /// The active side's port.
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// Bytes of [`IpCmHeader`].
pub const IP_CM_HEADER_LEN: usize = 36;

impl IpCmHeader {
    /// Parse the header from the start of private data.
    pub fn parse(pd: &[u8]) -> Result<IpCmHeader> {
        need("rdma_cm IP header", IP_CM_HEADER_LEN, pd.len())?;
        let ip_version = pd[1] >> 4;
        let addr = |b: &[u8]| -> Result<IpAddr> {
            let a: [u8; 16] = b[..16].try_into().map_err(|_| Error::InvalidField("address"))?;
            Ok(match ip_version {
                4 => IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15])),
                6 => IpAddr::V6(Ipv6Addr::from(a)),
                _ => {
                    return Err(Error::InvalidField("rdma_cm IP header: IP version is not 4 or 6"))
                }
            })
        };
        Ok(IpCmHeader {
            cma_version: pd[0],
            ip_version,
            src_port: u16::from_be_bytes([pd[2], pd[3]]),
            src: addr(&pd[4..20])?,
            dst: addr(&pd[20..36])?,
        })
    }

    /// The 36 bytes of the header.
    pub fn emit(&self) -> [u8; IP_CM_HEADER_LEN] {
        let mut b = [0u8; IP_CM_HEADER_LEN];
        b[0] = self.cma_version;
        b[1] = self.ip_version << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        let put = |dst: &mut [u8], a: IpAddr| match a {
            IpAddr::V4(v4) => dst[12..16].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => dst.copy_from_slice(&v6.octets()),
        };
        put(&mut b[4..20], self.src);
        put(&mut b[20..36], self.dst);
        b
    }
}
