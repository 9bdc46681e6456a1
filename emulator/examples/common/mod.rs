//! Shared by the idle-QP examples (`idle_qp_memory`, `idle_qps_round`).

use roce_emulator::qp_attr::{AccessFlags, QpCap, QpType};
use roce_emulator::{CqHandle, Hca, PdHandle};
use roce_packet::Qpn;
use roce_sim::testkit::{qp_init, rc_connect, RcPath};

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
    let qpn = hca.create_qp(qp_init(pd, cq, QpType::Rc, cap, false)).unwrap();
    let path = RcPath {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        min_rnr_timer: 12,
        ..RcPath::default()
    };
    rc_connect(hca, qpn, peer, dest_qpn, &path).unwrap();
    qpn
}
