//! QP attributes, the attribute mask, and `modify_qp` validation.
//!
//! Mask bit values are libibverbs' `enum ibv_qp_attr_mask`, so users and
//! traces see familiar numbers. The transition table (which attributes are
//! required and which are allowed for each state pair and QP type) lives in
//! [`validate_modify`] and is written once (IBA §11.2.5, the kernel's
//! `qp_state_table` in drivers/infiniband/core/verbs.c).

use core::fmt;
use std::net::IpAddr;

/// QP states (IBA §10.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    /// Send queue drain.
    Sqd,
    /// Send queue error (UC/UD only).
    Sqe,
    Err,
}

impl QpState {
    pub const ALL: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];
    /// libibverbs' name, e.g. `IBV_QPS_RTS`.
    pub const fn ibv_name(self) -> &'static str {
        match self {
            QpState::Reset => "IBV_QPS_RESET",
            QpState::Init => "IBV_QPS_INIT",
            QpState::Rtr => "IBV_QPS_RTR",
            QpState::Rts => "IBV_QPS_RTS",
            QpState::Sqd => "IBV_QPS_SQD",
            QpState::Sqe => "IBV_QPS_SQE",
            QpState::Err => "IBV_QPS_ERR",
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

/// QP transport types this emulator implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
    /// XRC initiator (`IBV_QPT_XRC_SEND`): RC's requester, each request
    /// naming the XRC SRQ at the target (XRCETH); no receive queue.
    XrcSend,
    /// XRC target (`IBV_QPT_XRC_RECV`): RC's responder in an XRC domain;
    /// each request's receive WQE, CQ and PD are those of the XRC SRQ it
    /// names.
    XrcRecv,
}

impl QpType {
    /// Every QP type, in the order the transition table's columns use.
    pub const ALL: [QpType; 3] = [QpType::Rc, QpType::Uc, QpType::Ud];

    /// Column of this type in [`Transition::masks`].
    const fn index(self) -> usize {
        match self {
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => 0,
            QpType::Uc => 1,
            QpType::Ud => 2,
        }
    }

    /// XRC initiator or target.
    pub const fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::XrcSend => "XRC_SEND",
            QpType::XrcRecv => "XRC_RECV",
        })
    }
}

/// Path MTU (IBA enum, `enum ibv_mtu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathMtu {
    Mtu256 = 1,
    Mtu512 = 2,
    Mtu1024 = 3,
    Mtu2048 = 4,
    Mtu4096 = 5,
}

impl PathMtu {
    pub const fn bytes(self) -> usize {
        256 << (self as usize - 1)
    }
    pub const fn from_bytes(n: usize) -> Option<PathMtu> {
        match n {
            256 => Some(PathMtu::Mtu256),
            512 => Some(PathMtu::Mtu512),
            1024 => Some(PathMtu::Mtu1024),
            2048 => Some(PathMtu::Mtu2048),
            4096 => Some(PathMtu::Mtu4096),
            _ => None,
        }
    }
}

macro_rules! flags {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident = $v:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub u32);
        impl $name {
            $($(#[$fm])* pub const $f: $name = $name($v);)*
            pub const EMPTY: $name = $name(0);
            const NAMES: &'static [(&'static str, u32)] = &[$((stringify!($f), $v)),*];
            pub const fn contains(self, o: $name) -> bool { self.0 & o.0 == o.0 }
            pub const fn intersects(self, o: $name) -> bool { self.0 & o.0 != 0 }
            pub const fn union(self, o: $name) -> $name { $name(self.0 | o.0) }
            pub const fn difference(self, o: $name) -> $name { $name(self.0 & !o.0) }
            pub const fn intersection(self, o: $name) -> $name { $name(self.0 & o.0) }
            pub const fn is_empty(self) -> bool { self.0 == 0 }
            /// Names of the set flags, e.g. `["STATE", "PKEY_INDEX"]`.
            pub fn names(self) -> Vec<&'static str> {
                Self::NAMES.iter().filter(|(_, v)| self.0 & v != 0).map(|(n, _)| *n).collect()
            }
        }
        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, o: $name) { self.0 |= o.0 }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}(", stringify!($name))?;
                f.write_str(&self.names().join(" | "))?;
                write!(f, ")")
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.names().join(", "))
            }
        }
    };
}

pub(crate) use flags;

flags!(
    /// `enum ibv_qp_attr_mask`.
    AttrMask {
        STATE = 1 << 0,
        CUR_STATE = 1 << 1,
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        ACCESS_FLAGS = 1 << 3,
        PKEY_INDEX = 1 << 4,
        PORT = 1 << 5,
        QKEY = 1 << 6,
        AV = 1 << 7,
        PATH_MTU = 1 << 8,
        TIMEOUT = 1 << 9,
        RETRY_CNT = 1 << 10,
        RNR_RETRY = 1 << 11,
        RQ_PSN = 1 << 12,
        MAX_QP_RD_ATOMIC = 1 << 13,
        ALT_PATH = 1 << 14,
        MIN_RNR_TIMER = 1 << 15,
        SQ_PSN = 1 << 16,
        MAX_DEST_RD_ATOMIC = 1 << 17,
        PATH_MIG_STATE = 1 << 18,
        CAP = 1 << 19,
        DEST_QPN = 1 << 20,
        RATE_LIMIT = 1 << 25,
    }
);

flags!(
    /// `enum ibv_access_flags`.
    AccessFlags {
        LOCAL_WRITE = 1 << 0,
        REMOTE_WRITE = 1 << 1,
        REMOTE_READ = 1 << 2,
        REMOTE_ATOMIC = 1 << 3,
        MW_BIND = 1 << 4,
        ZERO_BASED = 1 << 5,
        ON_DEMAND = 1 << 6,
        FLUSH_GLOBAL = 1 << 8,
        FLUSH_PERSISTENT = 1 << 9,
    }
);

/// Address vector (`struct ibv_ah_attr` with its GRH), RoCEv2 flavour:
/// the destination is an IP address (the GID as an address).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AhAttr {
    /// Destination GID as an IP address (IPv4-mapped GIDs become IPv4).
    pub dgid: IpAddr,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sl: u8,
    pub port_num: u8,
}

impl AhAttr {
    pub fn new(dgid: IpAddr) -> AhAttr {
        AhAttr {
            dgid,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            sl: 0,
            port_num: 1,
        }
    }
}

/// Queue capacities (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr` plus its mask: every setter also sets its mask bit,
/// so a caller cannot forget one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct QpAttr {
    pub mask: AttrMask,
    pub qp_state: Option<QpState>,
    pub cur_qp_state: Option<QpState>,
    pub en_sqd_async_notify: bool,
    pub qp_access_flags: AccessFlags,
    pub pkey_index: u16,
    pub port_num: u8,
    pub qkey: u32,
    pub ah_attr: Option<AhAttr>,
    pub path_mtu: Option<PathMtu>,
    /// Local ACK timeout code: 4.096 µs × 2^timeout; 0 = no timer.
    pub timeout: u8,
    pub retry_cnt: u8,
    /// 7 = retry forever.
    pub rnr_retry: u8,
    pub rq_psn: u32,
    pub max_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub sq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub cap: QpCap,
    pub dest_qp_num: u32,
}

macro_rules! setter {
    ($fn:ident, $field:ident, $ty:ty, $bit:ident) => {
        pub fn $fn(mut self, v: $ty) -> Self {
            self.$field = v;
            self.mask |= AttrMask::$bit;
            self
        }
    };
}

impl QpAttr {
    pub fn new() -> QpAttr {
        QpAttr::default()
    }
    pub fn state(mut self, s: QpState) -> Self {
        self.qp_state = Some(s);
        self.mask |= AttrMask::STATE;
        self
    }
    pub fn cur_state(mut self, s: QpState) -> Self {
        self.cur_qp_state = Some(s);
        self.mask |= AttrMask::CUR_STATE;
        self
    }
    pub fn ah(mut self, ah: AhAttr) -> Self {
        self.ah_attr = Some(ah);
        self.mask |= AttrMask::AV;
        self
    }
    pub fn mtu(mut self, m: PathMtu) -> Self {
        self.path_mtu = Some(m);
        self.mask |= AttrMask::PATH_MTU;
        self
    }
    setter!(en_sqd_async_notify, en_sqd_async_notify, bool, EN_SQD_ASYNC_NOTIFY);
    setter!(access_flags, qp_access_flags, AccessFlags, ACCESS_FLAGS);
    setter!(pkey_index, pkey_index, u16, PKEY_INDEX);
    setter!(port, port_num, u8, PORT);
    setter!(qkey, qkey, u32, QKEY);
    setter!(timeout, timeout, u8, TIMEOUT);
    setter!(retry_cnt, retry_cnt, u8, RETRY_CNT);
    setter!(rnr_retry, rnr_retry, u8, RNR_RETRY);
    setter!(rq_psn, rq_psn, u32, RQ_PSN);
    setter!(max_rd_atomic, max_rd_atomic, u8, MAX_QP_RD_ATOMIC);
    setter!(min_rnr_timer, min_rnr_timer, u8, MIN_RNR_TIMER);
    setter!(sq_psn, sq_psn, u32, SQ_PSN);
    setter!(max_dest_rd_atomic, max_dest_rd_atomic, u8, MAX_DEST_RD_ATOMIC);
    setter!(cap, cap, QpCap, CAP);
    setter!(dest_qpn, dest_qp_num, u32, DEST_QPN);
}

/// Why [`validate_modify`] refused a `modify_qp` request: the transition,
/// the attribute mask or a value (the verb's error, [`crate::ModifyQpError`],
/// carries it as `Rejected`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QpAttrError {
    /// The state pair is not a legal transition for this QP type.
    #[error("invalid QP state transition {from} -> {to}")]
    InvalidTransition { from: QpState, to: QpState },
    /// Required attributes are missing from the mask, or attributes the
    /// transition does not accept are in it.
    #[error("invalid attribute mask for {from} -> {to}: {}", mask_problems(.missing, .invalid))]
    InvalidAttrMask { from: QpState, to: QpState, missing: AttrMask, invalid: AttrMask },
    /// An attribute whose mask bit is set has an out-of-range value.
    #[error("invalid value for {attr}: {reason}")]
    InvalidValue { attr: &'static str, reason: ValueProblem },
    /// `CUR_STATE` was given and is not the QP's actual state.
    #[error("cur_qp_state {given} does not match the QP's state {actual}")]
    CurStateMismatch { given: QpState, actual: QpState },
}

/// What is wrong with an attribute value ([`QpAttrError::InvalidValue`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValueProblem {
    /// Its mask bit (`mask`) is set but no `what` was given.
    NotGiven { mask: &'static str, what: &'static str },
    /// `value` is above `limit` (`max`).
    Exceeds { value: u32, limit: &'static str, max: u32 },
    /// `value` is not below `limit` (`bound`).
    NotBelow { value: u32, limit: &'static str, bound: u32 },
    /// Access-flag bits this crate does not know.
    UnknownBits(u32),
    /// An unspecified address (`::` or `0.0.0.0`).
    Unspecified(IpAddr),
    /// A port number outside `1..=max`.
    NotAPort { port: u8, max: u8 },
}

impl fmt::Display for ValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueProblem::NotGiven { mask, what } => {
                write!(f, "{mask} is in the mask but no {what} given")
            }
            ValueProblem::Exceeds { value, limit, max } => {
                write!(f, "{value} exceeds {limit} {max}")
            }
            ValueProblem::NotBelow { value, limit, bound } => {
                write!(f, "{value} is not below {limit} {bound}")
            }
            ValueProblem::UnknownBits(bits) => write!(f, "unknown bits {bits:#x}"),
            ValueProblem::Unspecified(addr) => write!(f, "{addr} is unspecified"),
            ValueProblem::NotAPort { port, max } => write!(f, "{port} is not a port (1..={max})"),
        }
    }
}

/// "missing [A, B]", "not allowed [C]" or both, joined by "; ".
fn mask_problems(missing: &AttrMask, invalid: &AttrMask) -> String {
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!("missing [{missing}]"));
    }
    if !invalid.is_empty() {
        parts.push(format!("not allowed [{invalid}]"));
    }
    parts.join("; ")
}

/// Device limits that attribute values are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyLimits {
    /// Bound for `max_dest_rd_atomic` (responder RDMA read/atomic depth).
    pub max_qp_rd_atom: u8,
    /// Bound for `max_rd_atomic` (initiator RDMA read/atomic depth).
    pub max_qp_init_rd_atom: u8,
    /// Bound for `path_mtu`.
    pub active_mtu: PathMtu,
    /// `pkey_index` must be below this.
    pub pkey_table_len: u16,
    /// Ports are numbered `1..=phys_port_cnt`.
    pub phys_port_cnt: u8,
}

/// Required and optional attributes of one transition for one QP type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionMasks {
    /// Attributes that must be in the mask (besides `STATE`).
    pub required: AttrMask,
    /// Attributes that may be in the mask.
    pub optional: AttrMask,
}

/// One row of the transition table: `from -> to`, with the attribute
/// masks for each QP type (`None` = not a legal transition for that type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    /// State the QP is in.
    pub from: QpState,
    /// State requested (equal to `from` for a same-state modify).
    pub to: QpState,
    /// Indexed in [`QpType::ALL`] order: RC, UC, UD.
    pub masks: [Option<TransitionMasks>; 3],
}

impl Transition {
    /// The masks for `qp_type`, if the transition is legal for it. The XRC
    /// types follow RC's column, with the kernel's differences: the
    /// initiator's RTR needs only UC's attributes (it is not a responder:
    /// RC's responder ones are optional), the target's RTS only TIMEOUT
    /// and SQ_PSN (it is not a requester: RC's requester ones are optional).
    pub const fn for_type(&self, qp_type: QpType) -> Option<TransitionMasks> {
        let Some(m) = self.masks[qp_type.index()] else { return None };
        let rtr = matches!(self.from, QpState::Init) && matches!(self.to, QpState::Rtr);
        let rts = matches!(self.from, QpState::Rtr) && matches!(self.to, QpState::Rts);
        match qp_type {
            QpType::XrcSend if rtr => Some(TransitionMasks {
                required: UC_RTR_REQ,
                optional: AttrMask(m.optional.0 | (m.required.0 & !UC_RTR_REQ.0)),
            }),
            QpType::XrcRecv if rts => Some(TransitionMasks {
                required: XRC_TGT_RTS_REQ,
                optional: AttrMask(m.optional.0 | (m.required.0 & !XRC_TGT_RTS_REQ.0)),
            }),
            _ => Some(m),
        }
    }
}

/// Shorthand for table rows.
const fn tm(required: AttrMask, optional: AttrMask) -> Option<TransitionMasks> {
    Some(TransitionMasks { required, optional })
}

/// A legal transition that takes no attributes besides `STATE`.
const BARE: Option<TransitionMasks> = tm(AttrMask::EMPTY, AttrMask::EMPTY);

/// Every legal transition for the same three types with no attributes.
const fn bare(from: QpState, to: QpState) -> Transition {
    Transition { from, to, masks: [BARE; 3] }
}

/// A row with the masks of RC, UC and UD.
const fn tr(from: QpState, to: QpState, masks: [Option<TransitionMasks>; 3]) -> Transition {
    Transition { from, to, masks }
}

// Attribute groups, named once so the rows below stay readable.
const PKEY_PORT_ACCESS: AttrMask =
    AttrMask(AttrMask::PKEY_INDEX.0 | AttrMask::PORT.0 | AttrMask::ACCESS_FLAGS.0);
const PKEY_PORT_QKEY: AttrMask =
    AttrMask(AttrMask::PKEY_INDEX.0 | AttrMask::PORT.0 | AttrMask::QKEY.0);
const PKEY_QKEY: AttrMask = AttrMask(AttrMask::PKEY_INDEX.0 | AttrMask::QKEY.0);
/// UC INIT->RTR; RC adds the responder's RDMA-read depth and RNR timer.
/// AV is required for connected QPs (on RoCE it carries the peer's GID).
const UC_RTR_REQ: AttrMask =
    AttrMask(AttrMask::AV.0 | AttrMask::PATH_MTU.0 | AttrMask::DEST_QPN.0 | AttrMask::RQ_PSN.0);
const RC_RTR_REQ: AttrMask =
    AttrMask(UC_RTR_REQ.0 | AttrMask::MAX_DEST_RD_ATOMIC.0 | AttrMask::MIN_RNR_TIMER.0);
const CONN_RTR_OPT: AttrMask =
    AttrMask(AttrMask::ALT_PATH.0 | AttrMask::ACCESS_FLAGS.0 | AttrMask::PKEY_INDEX.0);
const RC_RTS_REQ: AttrMask = AttrMask(
    AttrMask::TIMEOUT.0
        | AttrMask::RETRY_CNT.0
        | AttrMask::RNR_RETRY.0
        | AttrMask::SQ_PSN.0
        | AttrMask::MAX_QP_RD_ATOMIC.0,
);
/// An XRC target's RTR->RTS (the kernel's `qp_state_table`).
const XRC_TGT_RTS_REQ: AttrMask = AttrMask(AttrMask::TIMEOUT.0 | AttrMask::SQ_PSN.0);
/// What a connected QP may change while (re)entering or staying in RTS.
const UC_RTS_OPT: AttrMask =
    AttrMask(AttrMask::ALT_PATH.0 | AttrMask::ACCESS_FLAGS.0 | AttrMask::PATH_MIG_STATE.0);
const RC_RTS_OPT: AttrMask = AttrMask(UC_RTS_OPT.0 | AttrMask::MIN_RNR_TIMER.0);
const UC_SQD_OPT: AttrMask = AttrMask(
    AttrMask::AV.0
        | AttrMask::ALT_PATH.0
        | AttrMask::ACCESS_FLAGS.0
        | AttrMask::PKEY_INDEX.0
        | AttrMask::PATH_MIG_STATE.0,
);
const RC_SQD_OPT: AttrMask = AttrMask(
    UC_SQD_OPT.0
        | AttrMask::PORT.0
        | AttrMask::TIMEOUT.0
        | AttrMask::RETRY_CNT.0
        | AttrMask::RNR_RETRY.0
        | AttrMask::MAX_QP_RD_ATOMIC.0
        | AttrMask::MAX_DEST_RD_ATOMIC.0
        | AttrMask::MIN_RNR_TIMER.0,
);
const E: AttrMask = AttrMask::EMPTY;

use QpState as S;

/// The QP state transition table (IBA §11.2.5; same facts as the Linux
/// kernel's `qp_state_table`), for RC, UC and UD. A state pair that is not
/// listed, or whose entry for a QP type is `None`, is illegal.
///
/// Deliberate facts worth knowing:
/// - RESET may only go to RESET or INIT (not ERR), as in the kernel.
/// - There is no RTR->RTR and no SQE->SQE (so no state-less modify there).
/// - SQE only exists for UC/UD; SQE->RTS is not listed for RC.
/// - `CUR_STATE` is not listed: [`validate_modify`] accepts it with any
///   transition as a consistency check.
pub static TRANSITIONS: [Transition; 22] = [
    bare(S::Reset, S::Reset),
    tr(
        S::Reset,
        S::Init,
        [tm(PKEY_PORT_ACCESS, E), tm(PKEY_PORT_ACCESS, E), tm(PKEY_PORT_QKEY, E)],
    ),
    tr(S::Init, S::Init, [tm(E, PKEY_PORT_ACCESS), tm(E, PKEY_PORT_ACCESS), tm(E, PKEY_PORT_QKEY)]),
    tr(
        S::Init,
        S::Rtr,
        [tm(RC_RTR_REQ, CONN_RTR_OPT), tm(UC_RTR_REQ, CONN_RTR_OPT), tm(E, PKEY_QKEY)],
    ),
    bare(S::Init, S::Reset),
    bare(S::Init, S::Err),
    tr(
        S::Rtr,
        S::Rts,
        [
            tm(RC_RTS_REQ, RC_RTS_OPT),
            tm(AttrMask::SQ_PSN, UC_RTS_OPT),
            tm(AttrMask::SQ_PSN, AttrMask::QKEY),
        ],
    ),
    bare(S::Rtr, S::Reset),
    bare(S::Rtr, S::Err),
    tr(S::Rts, S::Rts, [tm(E, RC_RTS_OPT), tm(E, UC_RTS_OPT), tm(E, AttrMask::QKEY)]),
    tr(S::Rts, S::Sqd, [tm(E, AttrMask::EN_SQD_ASYNC_NOTIFY); 3]),
    bare(S::Rts, S::Reset),
    bare(S::Rts, S::Err),
    tr(S::Sqd, S::Rts, [tm(E, RC_RTS_OPT), tm(E, UC_RTS_OPT), tm(E, AttrMask::QKEY)]),
    tr(S::Sqd, S::Sqd, [tm(E, RC_SQD_OPT), tm(E, UC_SQD_OPT), tm(E, PKEY_QKEY)]),
    bare(S::Sqd, S::Reset),
    bare(S::Sqd, S::Err),
    tr(S::Sqe, S::Rts, [None, tm(E, AttrMask::ACCESS_FLAGS), tm(E, AttrMask::QKEY)]),
    bare(S::Sqe, S::Reset),
    bare(S::Sqe, S::Err),
    bare(S::Err, S::Reset),
    bare(S::Err, S::Err),
];

/// What a QP does in each state besides being modified (IBA §10.3.1, as
/// this emulator implements it): which work requests the verbs accept and
/// which packets the QP's roles take or send. The one place these facts
/// are written; `post_send`, `post_recv`, the receive demultiplexer and
/// the requester read them from [`QpState::allows`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateAllows {
    /// `post_send` accepts work requests (SQD queues them without starting
    /// them; ERR completes them at once with WR_FLUSH_ERR).
    pub post_send: bool,
    /// `post_recv` accepts work requests (ERR flushes them at once).
    pub post_recv: bool,
    /// The responder takes request packets.
    pub requests: bool,
    /// The send queue runs: the requester sends (in SQD only WQEs already
    /// started) and the completer takes response packets.
    pub send_queue: bool,
}

impl QpState {
    /// This state's row of the [`StateAllows`] table.
    pub const fn allows(self) -> StateAllows {
        const Y: bool = true;
        const N: bool = false;
        let (post_send, post_recv, requests, send_queue) = match self {
            //                post_send post_recv requests send_queue
            QpState::Reset => (N, N, N, N),
            QpState::Init => (N, Y, N, N),
            QpState::Rtr => (N, Y, Y, N),
            QpState::Rts => (Y, Y, Y, Y),
            // receives may be posted in every state but RESET (IBA C10-97.2.1;
            // rxe: any state from INIT on)
            QpState::Sqd => (Y, Y, Y, Y),
            QpState::Sqe => (N, Y, N, N),
            QpState::Err => (Y, Y, N, N),
        };
        StateAllows { post_send, post_recv, requests, send_queue }
    }
}

/// Required and optional attributes for `from -> to` on a `qp_type` QP, or
/// `None` if the transition is illegal. `STATE` and `CUR_STATE` are never
/// included (they are implied by the request itself).
pub fn required_and_optional(
    qp_type: QpType,
    from: QpState,
    to: QpState,
) -> Option<(AttrMask, AttrMask)> {
    TRANSITIONS
        .iter()
        .find(|t| t.from == from && t.to == to)
        .and_then(|t| t.for_type(qp_type))
        .map(|m| (m.required, m.optional))
}

/// The transition table as a Markdown table (one row per state pair,
/// required/optional columns per QP type; "—" = none, "n/a" = illegal for
/// that type). Used by the docs and by `roce` help text.
pub fn describe_table() -> String {
    fn cell(m: Option<TransitionMasks>, required: bool) -> String {
        match m {
            None => "n/a".to_string(),
            Some(m) => {
                let mask = if required { m.required } else { m.optional };
                if mask.is_empty() {
                    "—".to_string()
                } else {
                    mask.to_string()
                }
            }
        }
    }
    let mut out = String::from(
        "| From | To | RC required | RC optional | UC required | UC optional \
         | UD required | UD optional |\n|---|---|---|---|---|---|---|---|\n",
    );
    for t in TRANSITIONS.iter() {
        out.push_str(&format!("| {} | {} |", t.from, t.to));
        for ty in QpType::ALL {
            let m = t.for_type(ty);
            out.push_str(&format!(" {} | {} |", cell(m, true), cell(m, false)));
        }
        out.push('\n');
    }
    out
}

/// Check a `modify_qp` request against the transition table and the
/// device limits. Returns the state the QP will be in afterwards.
///
/// Rules (IBA §11.2.5.2, kernel `qp_state_table`): a transition must be
/// listed for the QP type; every required attribute must be in the mask;
/// no attribute outside required ∪ optional ∪ {`STATE`, `CUR_STATE`} may
/// be; any state except RESET may go to ERR, and any state to RESET, with
/// no other attributes; a request without `STATE` is a same-state modify
/// whose allowed attributes are the optional ones of that state's
/// self-transition. `CUR_STATE`, when given, must equal `cur`. Values are
/// checked only for attributes whose mask bit is set.
pub fn validate_modify(
    qp_type: QpType,
    cur: QpState,
    attr: &QpAttr,
    limits: &ModifyLimits,
) -> Result<QpState, QpAttrError> {
    let mask = attr.mask;
    let to = if mask.contains(AttrMask::STATE) {
        attr.qp_state.ok_or_else(|| invalid("qp_state", not_given("STATE", "state")))?
    } else {
        cur
    };
    if mask.contains(AttrMask::CUR_STATE) {
        let given = attr
            .cur_qp_state
            .ok_or_else(|| invalid("cur_qp_state", not_given("CUR_STATE", "state")))?;
        if given != cur {
            return Err(QpAttrError::CurStateMismatch { given, actual: cur });
        }
    }
    let (required, optional) = required_and_optional(qp_type, cur, to)
        .ok_or(QpAttrError::InvalidTransition { from: cur, to })?;
    let missing = required.difference(mask);
    let allowed = required | optional | AttrMask::STATE | AttrMask::CUR_STATE;
    let not_allowed = mask.difference(allowed);
    if !missing.is_empty() || !not_allowed.is_empty() {
        return Err(QpAttrError::InvalidAttrMask { from: cur, to, missing, invalid: not_allowed });
    }
    check_values(attr, limits)?;
    Ok(to)
}

fn invalid(attr: &'static str, reason: ValueProblem) -> QpAttrError {
    QpAttrError::InvalidValue { attr, reason }
}

fn not_given(mask: &'static str, what: &'static str) -> ValueProblem {
    ValueProblem::NotGiven { mask, what }
}

/// Largest PSN / QPN (24 bits).
const MAX_24: u32 = 0x00FF_FFFF;
/// Every access flag this crate names; other bits are rejected.
const KNOWN_ACCESS: u32 = {
    let mut all = 0;
    let mut i = 0;
    while i < AccessFlags::NAMES.len() {
        all |= AccessFlags::NAMES[i].1;
        i += 1;
    }
    all
};

fn check_values(attr: &QpAttr, limits: &ModifyLimits) -> Result<(), QpAttrError> {
    let has = |bit: AttrMask| attr.mask.contains(bit);
    let at_most = |name: &'static str, v: u32, max: u32, what: &'static str| {
        if v > max {
            Err(invalid(name, ValueProblem::Exceeds { value: v, limit: what, max }))
        } else {
            Ok(())
        }
    };
    if has(AttrMask::ACCESS_FLAGS) && attr.qp_access_flags.0 & !KNOWN_ACCESS != 0 {
        return Err(invalid(
            "qp_access_flags",
            ValueProblem::UnknownBits(attr.qp_access_flags.0 & !KNOWN_ACCESS),
        ));
    }
    if has(AttrMask::PKEY_INDEX) && attr.pkey_index >= limits.pkey_table_len {
        return Err(invalid(
            "pkey_index",
            ValueProblem::NotBelow {
                value: attr.pkey_index.into(),
                limit: "the P_Key table length",
                bound: limits.pkey_table_len.into(),
            },
        ));
    }
    if has(AttrMask::PORT) {
        check_port("port_num", attr.port_num, limits)?;
    }
    if has(AttrMask::AV) {
        let ah = attr.ah_attr.ok_or_else(|| invalid("ah_attr", not_given("AV", "AV")))?;
        if ah.dgid.is_unspecified() {
            return Err(invalid("ah_attr.dgid", ValueProblem::Unspecified(ah.dgid)));
        }
        at_most("ah_attr.flow_label", ah.flow_label, 0xF_FFFF, "the 20-bit maximum")?;
        at_most("ah_attr.sl", ah.sl.into(), 15, "the maximum")?;
        check_port("ah_attr.port_num", ah.port_num, limits)?;
    }
    if has(AttrMask::PATH_MTU) {
        let mtu = attr.path_mtu.ok_or_else(|| invalid("path_mtu", not_given("PATH_MTU", "MTU")))?;
        if mtu > limits.active_mtu {
            return Err(invalid(
                "path_mtu",
                ValueProblem::Exceeds {
                    value: mtu.bytes() as u32,
                    limit: "the port's active MTU",
                    max: limits.active_mtu.bytes() as u32,
                },
            ));
        }
    }
    if has(AttrMask::TIMEOUT) {
        at_most("timeout", attr.timeout.into(), 31, "the maximum")?;
    }
    if has(AttrMask::RETRY_CNT) {
        at_most("retry_cnt", attr.retry_cnt.into(), 7, "the maximum")?;
    }
    if has(AttrMask::RNR_RETRY) {
        at_most("rnr_retry", attr.rnr_retry.into(), 7, "the maximum")?;
    }
    if has(AttrMask::MIN_RNR_TIMER) {
        at_most("min_rnr_timer", attr.min_rnr_timer.into(), 31, "the maximum")?;
    }
    if has(AttrMask::RQ_PSN) {
        at_most("rq_psn", attr.rq_psn, MAX_24, "the 24-bit maximum")?;
    }
    if has(AttrMask::SQ_PSN) {
        at_most("sq_psn", attr.sq_psn, MAX_24, "the 24-bit maximum")?;
    }
    if has(AttrMask::DEST_QPN) {
        at_most("dest_qp_num", attr.dest_qp_num, MAX_24, "the 24-bit maximum")?;
    }
    if has(AttrMask::MAX_QP_RD_ATOMIC) {
        at_most(
            "max_rd_atomic",
            attr.max_rd_atomic.into(),
            limits.max_qp_init_rd_atom.into(),
            "the device's max_qp_init_rd_atom",
        )?;
    }
    if has(AttrMask::MAX_DEST_RD_ATOMIC) {
        at_most(
            "max_dest_rd_atomic",
            attr.max_dest_rd_atomic.into(),
            limits.max_qp_rd_atom.into(),
            "the device's max_qp_rd_atom",
        )?;
    }
    Ok(())
}

fn check_port(name: &'static str, port: u8, limits: &ModifyLimits) -> Result<(), QpAttrError> {
    if port == 0 || port > limits.phys_port_cnt {
        Err(invalid(name, ValueProblem::NotAPort { port, max: limits.phys_port_cnt }))
    } else {
        Ok(())
    }
}
