//! SEND/RECV data path between two HCAs.

use roce_emulator::*;
use roce_packet::{Opcode, Psn};
use roce_sim::testkit::*;

fn send_of(len: usize) {
    let mut p = Pair::new();
    let data = pattern(len, 7);
    p.a.write_mem(0, &data);
    p.b.post_recv(99, 4096, 8192);
    p.a.send(1, 0, len as u32);
    p.run();
    assert_eq!(p.b.read_mem(4096, len), data, "len {len}");
    // untouched beyond the message
    assert_eq!(p.b.read_mem(4096 + len as u64, 16), vec![0; 16]);
    let wc = p.b.poll();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 99);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(wc[0].opcode, WcOpcode::Recv);
    assert_eq!(wc[0].byte_len, len as u32);
    assert_eq!(wc[0].qp_num, p.b.qpn.value());
    assert_eq!(wc[0].src_qp, p.a.qpn.value());
    assert_eq!(wc[0].imm, None);
    let wa = p.a.poll();
    assert_eq!(wa.len(), 1);
    assert_eq!((wa[0].wr_id, wa[0].status, wa[0].opcode), (1, WcStatus::Success, WcOpcode::Send));
    assert_eq!(wa[0].byte_len, len as u32);
    // packets: ceil(len/1024) requests, one ACK
    let n = len.div_ceil(1024).max(1);
    let reqs: Vec<_> = p.trace.iter().filter(|s| s.dir == Dir::AtoB).collect();
    assert_eq!(reqs.len(), n, "{}", p.dump());
    for (i, s) in reqs.iter().enumerate() {
        assert_eq!(s.psn, Psn::new(0x100 + i as u32));
        assert_eq!(s.ack_req, i + 1 == n);
        let want = match (i == 0, i + 1 == n) {
            (true, true) => Opcode::RC_SEND_ONLY,
            (true, false) => Opcode::RC_SEND_FIRST,
            (false, false) => Opcode::RC_SEND_MIDDLE,
            (false, true) => Opcode::RC_SEND_LAST,
        };
        assert_eq!(s.opcode, want);
    }
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_ACKNOWLEDGE), 1);
    let ack = p.trace.iter().find(|s| s.dir == Dir::BtoA).unwrap();
    assert_eq!(ack.psn, Psn::new(0x100 + n as u32 - 1));
    assert_eq!(ack.repr.aeth.unwrap().msn.value(), 1);
    let ca = p.a.counters();
    let cb = p.b.counters();
    assert_eq!(ca.sent_pkts, n as u64);
    assert_eq!(cb.rcvd_pkts, n as u64);
    assert_eq!(cb.sent_pkts, 1);
    assert_eq!(ca.rcvd_pkts, 1);
    assert_eq!(ca.rdma_sends, 1);
    assert_eq!(cb.rdma_recvs, 1);
    assert_eq!(cb.duplicate_request + cb.out_of_seq_request + ca.completer_retry_err, 0);
    assert_eq!(cb.ack_deferred, n as u64 - 1);
    assert_eq!(cb.acks_sent, 1);
    // no timer left armed once everything is acknowledged
    assert_eq!(p.a.hca.poll_timeout(), None);
}

#[test]
fn send_1_byte() {
    send_of(1);
}
#[test]
fn send_mtu_minus_1() {
    send_of(1023);
}
#[test]
fn send_mtu() {
    send_of(1024);
}
#[test]
fn send_3_mtu_plus_7() {
    send_of(3 * 1024 + 7);
}
#[test]
fn send_zero_bytes() {
    send_of(0);
}

#[test]
fn send_with_imm() {
    let mut p = Pair::new();
    p.a.write_mem(0, b"hello");
    p.b.post_recv(5, 0, 64);
    let wr =
        SendWr::new(1, WrOpcode::SendWithImm).sge(p.a.addr(0), 5, p.a.mr.lkey).with_imm(0xdeadbeef);
    p.a.post(wr);
    p.run();
    let wc = p.b.poll();
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(wc[0].imm, Some(0xdeadbeef));
    assert!(wc[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wc[0].byte_len, 5);
    assert_eq!(p.b.read_mem(0, 5), b"hello");
    assert_eq!(p.trace[0].opcode, Opcode::RC_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(p.trace[0].repr.immdt, Some(0xdeadbeef));
}

#[test]
fn multi_sge_gather_scatter() {
    let mut p = Pair::new();
    // gather: 3 SGEs of 700, 900, 1000 bytes from scattered places
    let parts = [(100u64, 700u32), (5000, 900), (20000, 1000)];
    let mut whole = Vec::new();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    for (i, (off, len)) in parts.iter().enumerate() {
        let d = pattern(*len as usize, i as u8 * 50);
        p.a.write_mem(*off, &d);
        whole.extend_from_slice(&d);
        wr = wr.sge(p.a.addr(*off), *len, p.a.mr.lkey);
    }
    // scatter: 2 SGEs of 1500 and 1500
    let lkey = p.b.mr.lkey;
    let rwr = RecvWr {
        wr_id: 7,
        sg_list: vec![
            Sge { addr: p.b.addr(64), length: 1500, lkey },
            Sge { addr: p.b.addr(10000), length: 1500, lkey },
        ]
        .into(),
    };
    p.b.hca.post_recv(p.b.qpn, rwr).unwrap();
    p.a.post(wr);
    p.run();
    let wc = p.b.poll();
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 2600));
    assert_eq!(p.b.read_mem(64, 1500), whole[..1500]);
    assert_eq!(p.b.read_mem(10000, 1100), whole[1500..]);
    assert_eq!(p.b.read_mem(10000 + 1100, 4), vec![0; 4]);
    assert_eq!(p.trace.iter().filter(|s| s.dir == Dir::AtoB).count(), 3);
}

#[test]
fn inline_send() {
    let mut p = Pair::new();
    p.b.post_recv(1, 0, 256);
    let wr = SendWr::new(3, WrOpcode::Send).inline(b"inline payload!");
    p.a.post(wr);
    p.run();
    assert_eq!(p.b.read_mem(0, 15), b"inline payload!");
    assert_eq!(p.b.poll()[0].byte_len, 15);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    // too large inline is refused at post time
    let big = vec![0u8; 300];
    let err = p.a.hca.post_send(p.a.qpn, SendWr::new(4, WrOpcode::Send).inline(&big));
    assert_eq!(err, Err(PostSendError::InlineTooLarge { len: 300, max: 256 }));
}

#[test]
fn unsignaled_sends_complete_silently_and_in_order() {
    let mut p = Pair::new();
    p.b.post_recvs(3, 64);
    for i in 0..3u64 {
        let flags = if i == 2 { SendFlags::SIGNALED } else { SendFlags::EMPTY };
        let wr =
            SendWr::new(i, WrOpcode::Send).sge(p.a.addr(i * 64), 8, p.a.mr.lkey).with_flags(flags);
        p.a.post(wr);
    }
    p.run();
    let wa = p.a.poll();
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].wr_id, 2);
    let wb = p.b.poll();
    assert_eq!(wb.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(p.b.counters().rdma_recvs, 3);
    assert_eq!(p.a.counters().rdma_sends, 3);
}

#[test]
fn psn_wrap() {
    let mut p = Pair::with(Opts { a_psn: 0xFF_FFFE, ..Opts::default() });
    let data = pattern(4 * 1024, 3);
    p.stage_send(&data, 1, 8192, 1);
    p.b.post_recv(2, 8192, 100);
    p.a.send(2, 0, 100);
    p.run();
    let psns: Vec<u32> =
        p.trace.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.psn.value()).collect();
    assert_eq!(psns, vec![0xFF_FFFE, 0xFF_FFFF, 0, 1, 2]);
    assert_eq!(p.b.read_mem(0, 4096), data);
    let wa = p.a.poll();
    assert_eq!(wa.len(), 2);
    assert!(wa.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(p.b.poll().len(), 2);
}

#[test]
fn emitted_frame_passes_icrc_and_parses() {
    let mut p = Pair::new();
    p.a.send(1, 0, 10);
    let d = p.a.hca.poll_transmit(Instant::ZERO).unwrap();
    let hdr = roce_packet::IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len()).unwrap();
    assert!(hdr.verify_icrc(&d.payload));
    let pkt = roce_packet::RocePacket::new_checked(&d.payload[..]).unwrap();
    assert_eq!(pkt.opcode(), Opcode::RC_SEND_ONLY);
    assert_eq!(pkt.bth().dest_qp(), p.b.qpn);
    assert_eq!(pkt.bth().psn(), Psn::new(0x100));
    assert!(pkt.bth().ack_req());
    assert_eq!(pkt.payload().len(), 10);
    assert_eq!(d.endpoints.dst_port, 4791);
    assert!((0xC000..=0xFFFF).contains(&d.endpoints.src_port));
    // ECN-capable (ECT(0), the device's default), nothing else set
    assert_eq!(d.meta, roce_packet::IpMeta { tos: 0b10, ..roce_packet::IpMeta::default() });
    // a bit flip anywhere breaks it
    let mut bad = d.payload.to_vec();
    bad[20] ^= 0x10;
    assert!(!hdr.verify_icrc(&bad));
}

#[test]
fn ipv6_and_ipv4_mapped_gids() {
    let a: std::net::IpAddr = "fd00::1".parse().unwrap();
    let b: std::net::IpAddr = "fd00::2".parse().unwrap();
    let mut p = Pair::with_addrs(Opts::default(), a, b);
    let data = pattern(2000, 11);
    p.stage_send(&data, 1, 4096, 1);
    p.run();
    assert_eq!(p.b.read_mem(0, 2000), data);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.a.hca.query_gid(1), Some("fd00::1".parse().unwrap()));
    // devices and AVs named by IPv4-mapped GIDs speak IPv4
    let a: std::net::IpAddr = "::ffff:10.0.0.1".parse().unwrap();
    let b: std::net::IpAddr = "::ffff:10.0.0.2".parse().unwrap();
    let mut p = Pair::with_addrs(Opts::default(), a, b);
    assert_eq!(p.a.hca.addr(), "10.0.0.1".parse::<std::net::IpAddr>().unwrap());
    p.b.post_recv(1, 0, 64);
    p.a.send(1, 0, 4);
    let d = p.a.hca.poll_transmit(Instant::ZERO).unwrap();
    assert_eq!(d.endpoints.dst, "10.0.0.2".parse::<std::net::IpAddr>().unwrap());
    assert!(d.endpoints.src.is_ipv4());
    p.b.hca.handle_datagram(Instant::ZERO, d);
    p.run();
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

/// Move every datagram between the two sides by hand until both are quiet,
/// returning (sent by A, BTH opcode, IP TOS) of each.
fn pump_tos(p: &mut Pair) -> Vec<(bool, u8, u8)> {
    let now = p.now;
    let mut seen = Vec::new();
    loop {
        let mut moved = false;
        while let Some(d) = p.a.hca.poll_transmit(now) {
            seen.push((true, d.payload[0], d.meta.tos));
            p.b.hca.handle_datagram(now, d);
            moved = true;
        }
        while let Some(d) = p.b.hca.poll_transmit(now) {
            seen.push((false, d.payload[0], d.meta.tos));
            p.a.hca.handle_datagram(now, d);
            moved = true;
        }
        if !moved {
            return seen;
        }
    }
}

/// Reconnect `s`'s QP with an address vector of traffic class `tc`
/// (`ibv_modify_qp` to RTR with `ah_attr.grh.traffic_class`).
fn reconnect_with_tc(
    s: &mut Side,
    peer: std::net::IpAddr,
    peer_qpn: u32,
    psns: (u32, u32),
    tc: u8,
) {
    let q = s.qpn;
    s.hca.modify_qp(q, &QpAttr::new().state(QpState::Reset)).unwrap();
    let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(ALL_ACCESS);
    s.hca.modify_qp(q, &init).unwrap();
    let mut ah = AhAttr::new(peer);
    ah.traffic_class = tc;
    let rtr = QpAttr::new()
        .state(QpState::Rtr)
        .ah(ah)
        .mtu(PathMtu::Mtu1024)
        .dest_qpn(peer_qpn)
        .rq_psn(psns.1)
        .max_dest_rd_atomic(16)
        .min_rnr_timer(1);
    s.hca.modify_qp(q, &rtr).unwrap();
    let rts = QpAttr::new()
        .state(QpState::Rts)
        .sq_psn(psns.0)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .max_rd_atomic(16);
    s.hca.modify_qp(q, &rts).unwrap();
}

#[test]
fn the_address_vectors_traffic_class_is_every_packets_ip_tos() {
    let mut p = Pair::new();
    let (ia, ib) = (p.a.hca.addr(), p.b.hca.addr());
    let (qa, qb) = (p.a.qpn.value(), p.b.qpn.value());
    // A's AV: DSCP 24 (0x60); B's: DSCP 11, ECN ECT(0) (0x2e)
    reconnect_with_tc(&mut p.a, ib, qb, (0x100, 0x200), 0x60);
    reconnect_with_tc(&mut p.b, ia, qa, (0x200, 0x100), 0x2e);
    // a 3-packet SEND (B answers with an ACK), then a 2-packet READ (B answers with responses)
    p.a.write_mem(0, &pattern(3000, 1));
    p.b.post_recv(1, 0, 4096);
    p.a.send(2, 0, 3000);
    let wr = p.one_sided(3, WrOpcode::RdmaRead, 8192, 2000, 0);
    p.a.post(wr);
    let seen = pump_tos(&mut p);
    let from_a: Vec<_> = seen.iter().filter(|s| s.0).collect();
    let from_b: Vec<_> = seen.iter().filter(|s| !s.0).collect();
    // SEND_FIRST, MIDDLE, LAST, READ_REQUEST
    assert_eq!(from_a.iter().map(|s| s.1).collect::<Vec<_>>(), [0x00, 0x01, 0x02, 0x0C]);
    // (the DSCP is the AV's, the ECN field the device's: ECT(0))
    assert!(from_a.iter().all(|s| s.2 == 0x62), "{seen:x?}");
    // at least one ACK (0x11) and the READ RESPONSE FIRST, LAST (0x0D, 0x0F)
    assert!(from_b.iter().any(|s| s.1 == 0x11), "{seen:x?}");
    assert!(from_b.iter().any(|s| s.1 == 0x0D) && from_b.iter().any(|s| s.1 == 0x0F));
    assert!(from_b.iter().all(|s| s.2 == 0x2e), "{seen:x?}");
    assert_eq!(p.a.read_mem(8192, 2000), pattern(3000, 1)[..2000]);
    let wc = p.a.poll();
    assert_eq!(wc.len(), 2);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
}
