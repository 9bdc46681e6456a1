//! Shared by the idle-QP examples (`idle_qp_memory`, `idle_qps_round`).

use roce_emulator::qp_attr::{AccessFlags, AhAttr, PathMtu, QpAttr, QpCap, QpState, QpType};
use roce_emulator::{CqHandle, Hca, PdHandle, QpInitAttr};
use roce_packet::Qpn;

/// An RC QP moved RESET → INIT → RTR → RTS, connected to `dest_qpn` at
/// 10.0.0.2, a peer that never answers: nothing is ever sent.
#[allow(dead_code)] // (each example uses one of the two)
pub fn idle_rc_qp(hca: &mut Hca, pd: PdHandle, cq: CqHandle, cap: QpCap, dest_qpn: u32) -> Qpn {
    rc_qp_to(hca, pd, cq, cap, "10.0.0.2".parse().unwrap(), dest_qpn)
}

/// An RC QP moved RESET → INIT → RTR → RTS, connected to QP `dest_qpn` of
/// the device at `peer` (remote writes allowed).
pub fn rc_qp_to(
    hca: &mut Hca,
    pd: PdHandle,
    cq: CqHandle,
    cap: QpCap,
    peer: std::net::IpAddr,
    dest_qpn: u32,
) -> Qpn {
    let qpn = hca
        .create_qp(QpInitAttr {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            cap,
            sq_sig_all: false,
            srq: None,
        })
        .unwrap();
    let init = QpAttr::new()
        .state(QpState::Init)
        .pkey_index(0)
        .port(1)
        .access_flags(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    hca.modify_qp(qpn, &init).unwrap();
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .ah(AhAttr::new(peer))
        .mtu(PathMtu::Mtu1024)
        .dest_qpn(dest_qpn)
        .rq_psn(0)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12);
    hca.modify_qp(qpn, &rtr).unwrap();
    let rts = QpAttr::new()
        .state(QpState::Rts)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .sq_psn(0)
        .max_rd_atomic(1);
    hca.modify_qp(qpn, &rts).unwrap();
    qpn
}
