//! Unreliable Datagram QPs: one packet per message, DETH, GRH in the buffer.

use roce_emulator::*;
use roce_packet::{Opcode, Psn};
use roce_sim::testkit::*;
use std::net::{IpAddr, Ipv4Addr};

fn ud() -> Pair {
    Pair::with(Opts { qp_type: QpType::Ud, ..Opts::default() })
}

fn to_b(p: &Pair) -> AhAttr {
    let _ = p;
    AhAttr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)))
}

/// Post on A an 8-byte UD SEND (from region offset 0) to B's QP with
/// Q_Key `qkey`.
fn send_8_to_b(p: &mut Pair, wr_id: u64, qkey: u32) {
    let wr = SendWr::new(wr_id, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey).ud(
        to_b(p),
        p.b.qpn.value(),
        qkey,
    );
    p.a.post(wr);
}

#[test]
fn ud_send_lands_after_a_grh() {
    let mut p = ud();
    let data = pattern(1000, 3);
    p.a.write_mem(0, &data);
    p.b.post_recv(4, 0, 2048);
    let wr = SendWr::new(1, WrOpcode::SendWithImm)
        .sge(p.a.addr(0), 1000, p.a.mr.lkey)
        .with_imm(0xAB)
        .ud(to_b(&p), p.b.qpn.value(), UD_QKEY);
    p.a.post(wr);
    p.run();
    assert_eq!(p.trace.len(), 1, "no acknowledgement");
    let s = &p.trace[0];
    assert_eq!(s.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(s.psn, Psn::new(0x100));
    assert!(!s.ack_req);
    let deth = s.repr.deth.unwrap();
    assert_eq!((deth.qkey.value(), deth.src_qp), (UD_QKEY, p.a.qpn));
    let wb = p.b.poll();
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].byte_len, 1040);
    assert_eq!(wb[0].src_qp, p.a.qpn.value());
    assert_eq!(wb[0].imm, Some(0xAB));
    assert!(wb[0].wc_flags.contains(WcFlags::GRH));
    // GRH area: 20 zero bytes, then the IPv4 header (version 4, src 10.0.0.1)
    let grh = p.b.read_mem(0, 40);
    assert_eq!(grh[..20], [0; 20]);
    assert_eq!(grh[20] >> 4, 4);
    assert_eq!(grh[32..36], [10, 0, 0, 1]);
    assert_eq!(p.b.read_mem(40, 1000), data);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn ud_qkey_mismatch_and_missing_receive_drop() {
    let mut p = ud();
    send_8_to_b(&mut p, 1, 0x2222);
    p.b.post_recv(1, 0, 64);
    p.run();
    assert_eq!(p.b.counters().ud_dropped, 1);
    assert!(p.b.poll().is_empty());
    // a privileged Q_Key in the WR means "use the QP's own" (C10-15)
    send_8_to_b(&mut p, 2, 0x8000_0000);
    p.run();
    assert_eq!(p.b.poll()[0].byte_len, 48);
    // no receive posted: dropped silently
    send_8_to_b(&mut p, 3, UD_QKEY);
    p.run();
    assert_eq!(p.b.counters().ud_dropped, 2);
    assert_eq!(p.a.poll().len(), 3);
}

#[test]
fn ud_receive_too_small_is_local_length_error() {
    let mut p = ud();
    p.b.post_recv(1, 0, 40 + 7);
    send_8_to_b(&mut p, 1, UD_QKEY);
    p.run();
    assert_eq!(p.b.poll()[0].status, WcStatus::LocLenErr);
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Rts));
}

#[test]
fn ud_post_checks() {
    let mut p = ud();
    let q = p.a.qpn;
    let wr = SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey);
    assert_eq!(p.a.hca.post_send(q, wr), Err(PostSendError::MissingUdDest));
    let wr =
        SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 1025, p.a.mr.lkey).ud(to_b(&p), 5, UD_QKEY);
    assert_eq!(
        p.a.hca.post_send(q, wr),
        Err(PostSendError::UdMessageTooLarge { len: 1025, mtu: 1024 })
    );
    let wr = SendWr::new(1, WrOpcode::RdmaWrite).ud(to_b(&p), 5, UD_QKEY);
    assert!(matches!(p.a.hca.post_send(q, wr), Err(PostSendError::UnsupportedOpcode { .. })));
}
