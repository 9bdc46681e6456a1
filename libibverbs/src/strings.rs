//! The string and rate helpers (`ibv_wc_status_str`, `ibv_event_type_str`,
//! `ibv_node_type_str`, `ibv_port_state_str`, `ibv_rate_to_mult` ...).

use crate::abi;
use crate::util::cstr;
use roce_verbs_api::WcStatus;

/// NUL-terminated copies of the emulator's status names (`ibv_wc_status_str`).
fn status_cstr(code: u32) -> &'static [u8] {
    static TABLE: std::sync::OnceLock<Vec<Vec<u8>>> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        (0u8..=21)
            .map(|c| {
                let s = status_of(c).map_or("unknown", WcStatus::as_str);
                let mut v = s.as_bytes().to_vec();
                v.push(0);
                v
            })
            .collect()
    });
    t.get(code as usize).map_or(b"unknown\0", |v| v.as_slice())
}

fn status_of(c: u8) -> Option<WcStatus> {
    use WcStatus::*;
    [
        Success,
        LocLenErr,
        LocQpOpErr,
        LocEecOpErr,
        LocProtErr,
        WrFlushErr,
        MwBindErr,
        BadRespErr,
        LocAccessErr,
        RemInvReqErr,
        RemAccessErr,
        RemOpErr,
        RetryExcErr,
        RnrRetryExcErr,
        LocRddViolErr,
        RemInvRdReqErr,
        RemAbortErr,
        InvEecnErr,
        InvEecStateErr,
        FatalErr,
        RespTimeoutErr,
        GeneralErr,
    ]
    .get(c as usize)
    .copied()
}

pub(crate) unsafe extern "C" fn wc_status_str(s: abi::ibv_wc_status) -> *const libc::c_char {
    status_cstr(s).as_ptr().cast()
}

pub(crate) unsafe extern "C" fn event_type_str(e: abi::ibv_event_type) -> *const libc::c_char {
    cstr(match e {
        abi::IBV_EVENT_CQ_ERR => b"CQ error\0",
        abi::IBV_EVENT_QP_FATAL => b"local work queue catastrophic error\0",
        abi::IBV_EVENT_QP_REQ_ERR => b"invalid request local work queue error\0",
        abi::IBV_EVENT_QP_ACCESS_ERR => b"local access violation work queue error\0",
        abi::IBV_EVENT_COMM_EST => b"communication established\0",
        abi::IBV_EVENT_SQ_DRAINED => b"send queue drained\0",
        abi::IBV_EVENT_PATH_MIG => b"path migrated\0",
        abi::IBV_EVENT_PATH_MIG_ERR => b"path migration request error\0",
        abi::IBV_EVENT_DEVICE_FATAL => b"local catastrophic error\0",
        abi::IBV_EVENT_PORT_ACTIVE => b"port active\0",
        abi::IBV_EVENT_PORT_ERR => b"port error\0",
        abi::IBV_EVENT_LID_CHANGE => b"LID change\0",
        abi::IBV_EVENT_PKEY_CHANGE => b"P_Key change\0",
        abi::IBV_EVENT_SM_CHANGE => b"SM change\0",
        abi::IBV_EVENT_SRQ_ERR => b"SRQ catastrophic error\0",
        abi::IBV_EVENT_SRQ_LIMIT_REACHED => b"SRQ limit reached\0",
        abi::IBV_EVENT_QP_LAST_WQE_REACHED => b"last WQE reached\0",
        abi::IBV_EVENT_CLIENT_REREGISTER => b"client reregistration\0",
        abi::IBV_EVENT_GID_CHANGE => b"GID table change\0",
        abi::IBV_EVENT_WQ_FATAL => b"WQ fatal\0",
        _ => b"unknown\0",
    })
}

pub(crate) unsafe extern "C" fn node_type_str(t: abi::ibv_node_type) -> *const libc::c_char {
    cstr(match t {
        abi::IBV_NODE_CA => b"InfiniBand channel adapter\0",
        abi::IBV_NODE_SWITCH => b"InfiniBand switch\0",
        abi::IBV_NODE_ROUTER => b"InfiniBand router\0",
        abi::IBV_NODE_RNIC => b"iWARP NIC\0",
        abi::IBV_NODE_USNIC => b"usNIC\0",
        abi::IBV_NODE_USNIC_UDP => b"usNIC UDP\0",
        abi::IBV_NODE_UNSPECIFIED => b"unspecified\0",
        _ => b"unknown\0",
    })
}

pub(crate) unsafe extern "C" fn port_state_str(s: abi::ibv_port_state) -> *const libc::c_char {
    cstr(match s {
        abi::IBV_PORT_NOP => b"PORT_NOP\0",
        abi::IBV_PORT_DOWN => b"PORT_DOWN\0",
        abi::IBV_PORT_INIT => b"PORT_INIT\0",
        abi::IBV_PORT_ARMED => b"PORT_ARMED\0",
        abi::IBV_PORT_ACTIVE => b"PORT_ACTIVE\0",
        abi::IBV_PORT_ACTIVE_DEFER => b"PORT_ACTIVE_DEFER\0",
        _ => b"invalid state\0",
    })
}

/// `enum ibv_rate` ↔ multiples of 2.5 Gb/s and Mb/s (IBA table of static rates).
const RATES: &[(abi::ibv_rate, i32, i32)] = &[
    (abi::IBV_RATE_2_5_GBPS, 1, 2500),
    (abi::IBV_RATE_5_GBPS, 2, 5000),
    (abi::IBV_RATE_10_GBPS, 4, 10000),
    (abi::IBV_RATE_20_GBPS, 8, 20000),
    (abi::IBV_RATE_30_GBPS, 12, 30000),
    (abi::IBV_RATE_40_GBPS, 16, 40000),
    (abi::IBV_RATE_60_GBPS, 24, 60000),
    (abi::IBV_RATE_80_GBPS, 32, 80000),
    (abi::IBV_RATE_120_GBPS, 48, 120000),
    (abi::IBV_RATE_14_GBPS, 5, 14062),
    (abi::IBV_RATE_56_GBPS, 22, 56250),
    (abi::IBV_RATE_112_GBPS, 45, 112500),
    (abi::IBV_RATE_168_GBPS, 67, 168750),
    (abi::IBV_RATE_25_GBPS, 10, 25781),
    (abi::IBV_RATE_100_GBPS, 40, 103125),
    (abi::IBV_RATE_200_GBPS, 80, 206250),
    (abi::IBV_RATE_300_GBPS, 120, 309375),
    (abi::IBV_RATE_28_GBPS, 11, 28125),
    (abi::IBV_RATE_50_GBPS, 20, 53125),
    (abi::IBV_RATE_400_GBPS, 160, 425000),
    (abi::IBV_RATE_600_GBPS, 240, 637500),
];

pub(crate) unsafe extern "C" fn rate_to_mult(r: abi::ibv_rate) -> libc::c_int {
    RATES.iter().find(|x| x.0 == r).map_or(0, |x| x.1)
}

pub(crate) unsafe extern "C" fn mult_to_rate(m: libc::c_int) -> abi::ibv_rate {
    RATES.iter().find(|x| x.1 == m).map_or(abi::IBV_RATE_MAX, |x| x.0)
}

pub(crate) unsafe extern "C" fn rate_to_mbps(r: abi::ibv_rate) -> libc::c_int {
    RATES.iter().find(|x| x.0 == r).map_or(0, |x| x.2)
}

pub(crate) unsafe extern "C" fn mbps_to_rate(m: libc::c_int) -> abi::ibv_rate {
    RATES.iter().find(|x| x.2 == m).map_or(abi::IBV_RATE_MAX, |x| x.0)
}
