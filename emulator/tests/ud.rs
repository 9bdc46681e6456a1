//! Unreliable Datagram QPs: one packet per message, DETH, GRH in the buffer.

use roce_emulator::*;
use roce_packet::{Opcode, Psn, Qpn, RoceRepr};
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

/// A program that posts UD sends and destroys the QP at once (rdma-core's
/// mckey sender posts 20 unsignaled and leaves): the datagrams still leave,
/// as a NIC has them on the wire before the destroy; none is lost.
#[test]
fn ud_sends_posted_before_a_destroy_still_leave() {
    let mut p = ud();
    let data = pattern(64, 9);
    p.a.write_mem(0, &data);
    for i in 0..5 {
        p.b.post_recv(10 + i, i * 256, 256);
    }
    for i in 0..5 {
        let wr = SendWr::new(i, WrOpcode::Send).sge(p.a.addr(0), 64, p.a.mr.lkey).ud(
            to_b(&p),
            p.b.qpn.value(),
            UD_QKEY,
        );
        p.a.post(wr);
    }
    let qpn = p.a.qpn;
    p.a.hca.destroy_qp(qpn).expect("destroy");
    p.run();
    assert_eq!(p.trace.len(), 5, "the five datagrams, nothing else");
    let wb = p.b.poll();
    assert_eq!(wb.len(), 5);
    for (i, w) in wb.iter().enumerate() {
        assert_eq!((w.status, w.byte_len, w.src_qp), (WcStatus::Success, 40 + 64, qpn.value()));
        assert_eq!(p.b.read_mem(i as u64 * 256 + 40, 64), data);
    }
    assert_eq!(p.a.hca.counters().sent_pkts, 5);
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

// ---- multicast (roce_emulator::mcast) ----

const GROUP: IpAddr = IpAddr::V4(Ipv4Addr::new(239, 1, 2, 3));

/// A's datagrams after posting `wr` (none lost, none delivered yet).
fn a_sends(p: &mut Pair, wr: SendWr) -> Vec<Datagram> {
    p.a.post(wr);
    std::iter::from_fn(|| p.a.hca.poll_transmit(p.now)).collect()
}

/// A second UD QP on B with Q_Key `qkey`, in RTS, a receive posted at
/// region offset `off`.
fn b_ud_qp(p: &mut Pair, qkey: u32, off: u64) -> Qpn {
    let init = qp_init(p.b.pd, p.b.cq, QpType::Ud, qp_cap(8, 8), false);
    let q = p.b.hca.create_qp(init).unwrap();
    ud_up(&mut p.b.hca, q, qkey, 0).unwrap();
    let wr = RecvWr::new(100 + u64::from(q.value()), p.b.addr(off), 256, p.b.mr.lkey);
    p.b.hca.post_recv(q, wr).unwrap();
    q
}

#[test]
fn multicast_datagram_reaches_every_attached_qp_once() {
    let mut p = ud();
    let q1 = b_ud_qp(&mut p, UD_QKEY, 0);
    let q2 = b_ud_qp(&mut p, UD_QKEY, 1024);
    let q3 = b_ud_qp(&mut p, 0x3333, 2048); // another Q_Key: drops it
    let q4 = b_ud_qp(&mut p, UD_QKEY, 3072); // not attached
                                             // the first QP of a group is news for the driver, the next are not
    assert_eq!(p.b.hca.attach_mcast(q1, GROUP), Ok(true));
    assert_eq!(p.b.hca.attach_mcast(q2, GROUP), Ok(false));
    assert_eq!(p.b.hca.attach_mcast(q2, GROUP), Ok(false), "twice: a no-op");
    assert_eq!(p.b.hca.attach_mcast(q3, "::ffff:239.1.2.3".parse().unwrap()), Ok(false));
    assert_eq!(p.b.hca.mcast_groups(q2), vec![GROUP]);
    let data = pattern(64, 9);
    p.a.write_mem(0, &data);
    let wr = SendWr::new(1, WrOpcode::SendWithImm)
        .sge(p.a.addr(0), 64, p.a.mr.lkey)
        .with_imm(0x77)
        .ud(AhAttr::new(GROUP), MCAST_QPN, UD_QKEY);
    let sent = a_sends(&mut p, wr);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].endpoints.dst, GROUP);
    let (r, _) = RoceRepr::parse_bytes(&sent[0].payload).unwrap();
    assert_eq!(r.bth.dest_qp.value(), 0xFF_FFFF);
    assert_eq!(p.a.counters().mcast_sent, 1);
    p.to_b(sent[0].clone());
    let mut wc = p.b.poll();
    wc.sort_by_key(|w| w.qp_num);
    assert_eq!(wc.iter().map(|w| Qpn::new(w.qp_num)).collect::<Vec<_>>(), vec![q1, q2]);
    for (w, off) in wc.iter().zip([0u64, 1024]) {
        assert_eq!((w.status, w.byte_len, w.imm), (WcStatus::Success, 40 + 64, Some(0x77)));
        assert_eq!(w.src_qp, p.a.qpn.value());
        // the GRH area's IPv4 destination is the group
        assert_eq!(p.b.read_mem(off + 20 + 16, 4), [239, 1, 2, 3]);
        assert_eq!(p.b.read_mem(off + 40, 64), data);
    }
    let c = p.b.counters();
    assert_eq!((c.mcast_rcvd, c.mcast_dropped, c.ud_dropped), (1, 0, 1), "Q_Key of q3");
    assert_eq!(c.rdma_recvs, 2);
    let _ = q4;
    // detached: the last QP leaving the group is news for the driver
    assert_eq!(p.b.hca.detach_mcast(q1, GROUP), Ok(false));
    assert_eq!(p.b.hca.detach_mcast(q2, GROUP), Ok(false));
    assert_eq!(p.b.hca.detach_mcast(q3, GROUP), Ok(true));
    assert_eq!(p.b.hca.detach_mcast(q3, GROUP), Err(McastError::NotAttached(q3, GROUP)));
    p.to_b(sent[0].clone());
    assert!(p.b.poll().is_empty());
    assert_eq!(p.b.counters().mcast_dropped, 1);
}

#[test]
fn multicast_attach_checks_are_rxes() {
    let mut p = ud();
    let q = p.b.qpn;
    let e = p.b.hca.attach_mcast(q, IpAddr::V4(Ipv4Addr::new(10, 1, 1, 1)));
    assert!(matches!(e, Err(McastError::NotMulticast(_))));
    assert_eq!(e.unwrap_err().errno(), libc_einval());
    let ff: IpAddr = "ff0e::1234".parse().unwrap();
    assert_eq!(p.b.hca.attach_mcast(q, ff), Ok(true));
    assert_eq!(
        p.b.hca.attach_mcast(Qpn::new(0x999), ff),
        Err(McastError::UnknownQp(Qpn::new(0x999)))
    );
    let rc = p.b.rc_qp(4, 0, false, None);
    assert_eq!(p.b.hca.attach_mcast(rc, ff), Err(McastError::NotUd(rc)));
    // at most 56 QPs in one group (rxe's max_mcast_qp_attach)
    let g = IpAddr::V4(Ipv4Addr::new(239, 9, 9, 9));
    for _ in 0..56 {
        let init = qp_init(p.b.pd, p.b.cq, QpType::Ud, qp_cap(1, 1), false);
        let u = p.b.hca.create_qp(init).unwrap();
        p.b.hca.attach_mcast(u, g).unwrap();
    }
    let init = qp_init(p.b.pd, p.b.cq, QpType::Ud, qp_cap(1, 1), false);
    let u = p.b.hca.create_qp(init).unwrap();
    let e = p.b.hca.attach_mcast(u, g).unwrap_err();
    assert_eq!((e.clone(), e.errno()), (McastError::TooMany("QPs in the group"), 12));
    assert_eq!(p.b.hca.query_device().max_mcast_qp_attach, 56);
    // a destroyed QP leaves its groups
    p.b.hca.destroy_qp(q).unwrap();
    assert!(p.b.hca.mcast_table().iter().all(|(g, _)| *g != ff));
}

#[test]
fn multicast_qpn_on_a_non_ud_opcode_is_dropped_as_bad_opcode() {
    let mut p = ud();
    p.b.hca.attach_mcast(p.b.qpn, GROUP).unwrap();
    p.b.post_recv(1, 0, 256);
    // an RC SEND to the multicast QPN and the group's address
    let r = sized(&request(Opcode::RC_SEND_ONLY, Qpn::new(MCAST_QPN), 0), 8);
    let d = roce_sim::packet::PacketBuilder::new(IP_A, GROUP).datagram(&r, &[1; 8]);
    p.to_b(d);
    assert!(p.b.poll().is_empty());
    let c = p.b.counters();
    assert_eq!((c.bad_opcode, c.mcast_rcvd), (1, 0));
}

fn libc_einval() -> i32 {
    22
}

#[test]
fn ud_datagrams_carry_their_ahs_traffic_class_as_ip_tos() {
    let mut p = ud();
    p.b.post_recv(1, 0, 256);
    p.b.post_recv(2, 256, 256);
    for (id, tc) in [(1, 0xb8u8), (2, 0)] {
        let mut ah = to_b(&p);
        ah.traffic_class = tc;
        let wr = SendWr::new(id, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey).ud(
            ah,
            p.b.qpn.value(),
            UD_QKEY,
        );
        p.a.post(wr);
    }
    let now = p.now;
    let first = p.a.hca.poll_transmit(now).expect("first datagram");
    let second = p.a.hca.poll_transmit(now).expect("second datagram");
    // (the DSCP is the AV's, the ECN field the device's: ECT(0))
    assert_eq!((first.meta.tos, second.meta.tos), (0xba, 0x02));
    // the ICRC masks the byte: B takes both, and the first one's GRH area
    // (an IPv4 header in bytes 20..40) shows the TOS it was sent with
    p.b.hca.handle_datagram(now, first);
    p.b.hca.handle_datagram(now, second);
    let wc = p.b.poll();
    assert_eq!(wc.len(), 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(p.b.read_mem(21, 1), [0xba]);
    assert_eq!(p.b.read_mem(256 + 21, 1), [0x02]);
}
