//! RDMA WRITE, READ and atomics between two HCAs.

use roce_emulator::*;
use roce_packet::{Opcode, Psn};
use roce_sim::testkit::*;

#[test]
fn rdma_write_multi_mtu() {
    let mut p = Pair::new();
    let data = pattern(2 * 1024 + 500, 9);
    p.a.write_mem(0, &data);
    let wr = p.one_sided(1, WrOpcode::RdmaWrite, 0, data.len() as u32, 8192);
    p.a.post(wr);
    p.run();
    assert_eq!(p.b.read_mem(8192, data.len()), data);
    let ops: Vec<Opcode> =
        p.trace.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.opcode).collect();
    assert_eq!(
        ops,
        vec![Opcode::RC_RDMA_WRITE_FIRST, Opcode::RC_RDMA_WRITE_MIDDLE, Opcode::RC_RDMA_WRITE_LAST]
    );
    let reth = p.trace[0].repr.reth.unwrap();
    assert_eq!(
        (reth.va, reth.rkey, reth.dma_len),
        (p.b.addr(8192), p.b.mr.rkey, data.len() as u32)
    );
    let wa = p.a.poll();
    assert_eq!(
        (wa[0].status, wa[0].opcode, wa[0].byte_len),
        (WcStatus::Success, WcOpcode::RdmaWrite, 2548)
    );
    // WRITE consumes no receive WQE and makes no receive completion
    assert!(p.b.poll().is_empty());
    assert_eq!(p.b.counters().rdma_recvs, 0);
}

#[test]
fn rdma_write_with_imm_consumes_recv() {
    let mut p = Pair::new();
    p.a.write_mem(0, b"0123456789");
    p.b.post_recv(77, 0, 0);
    let wr = p.one_sided(1, WrOpcode::RdmaWriteWithImm, 0, 10, 100).with_imm(0x1234);
    p.a.post(wr);
    p.run();
    assert_eq!(p.b.read_mem(100, 10), b"0123456789");
    let wc = p.b.poll();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 77);
    assert_eq!(wc[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wc[0].imm, Some(0x1234));
    assert_eq!(wc[0].byte_len, 10);
    assert_eq!(p.trace[0].opcode, Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE);
}

#[test]
fn rdma_read_multi_mtu() {
    let mut p = Pair::new();
    let data = pattern(3 * 1024 + 11, 4);
    p.b.write_mem(50_000, &data);
    let wr = p.one_sided(9, WrOpcode::RdmaRead, 1000, data.len() as u32, 50_000);
    p.a.post(wr);
    // a SEND after the READ shares the PSN space: READ takes 4 PSNs
    p.b.post_recv(1, 0, 64);
    p.a.send(10, 0, 8);
    p.run();
    assert_eq!(p.a.read_mem(1000, data.len()), data);
    let wa = p.a.poll();
    assert_eq!(wa.len(), 2);
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode),
        (9, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(wa[0].byte_len, data.len() as u32);
    assert_eq!((wa[1].wr_id, wa[1].status), (10, WcStatus::Success));
    let resp: Vec<(Opcode, u32)> = p
        .trace
        .iter()
        .filter(|s| s.dir == Dir::BtoA && s.opcode != Opcode::RC_ACKNOWLEDGE)
        .map(|s| (s.opcode, s.psn.value()))
        .collect();
    assert_eq!(
        resp,
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x102),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x103),
        ]
    );
    let send = p.trace.iter().find(|s| s.opcode == Opcode::RC_SEND_ONLY).unwrap();
    assert_eq!(send.psn, Psn::new(0x104));
    // MSN: the READ is message 1, the SEND message 2
    let ack = p.trace.iter().find(|s| s.opcode == Opcode::RC_ACKNOWLEDGE).unwrap();
    assert_eq!(ack.repr.aeth.unwrap().msn.value(), 2);
}

#[test]
fn rdma_read_zero_length() {
    let mut p = Pair::new();
    let wr = SendWr::new(9, WrOpcode::RdmaRead).remote(p.b.addr(0), p.b.mr.rkey);
    let wa = p.run_wr(wr);
    assert_eq!((wa[0].status, wa[0].byte_len), (WcStatus::Success, 0));
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_RDMA_READ_RESPONSE_ONLY), 1);
}

fn atomic(
    p: &mut Pair,
    id: u64,
    op: WrOpcode,
    result_off: u64,
    remote_off: u64,
    cmp_add: u64,
    swap: u64,
) {
    let mut wr = SendWr::new(id, op)
        .sge(p.a.addr(result_off), 8, p.a.mr.lkey)
        .remote(p.b.addr(remote_off), p.b.mr.rkey);
    wr.compare_add = cmp_add;
    wr.swap = swap;
    p.a.post(wr);
}

#[test]
fn atomics_cmp_swap_and_fetch_add() {
    let mut p = Pair::new();
    p.b.write_mem(64, &100u64.to_le_bytes());
    atomic(&mut p, 1, WrOpcode::AtomicFetchAndAdd, 0, 64, 5, 0);
    atomic(&mut p, 2, WrOpcode::AtomicCmpAndSwp, 8, 64, 105, 7); // matches → swap
    atomic(&mut p, 3, WrOpcode::AtomicCmpAndSwp, 16, 64, 105, 9); // no match
    p.run();
    let wa = p.a.poll();
    assert_eq!(wa.len(), 3);
    assert!(wa.iter().all(|w| w.status == WcStatus::Success && w.byte_len == 8));
    assert_eq!(wa[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(wa[1].opcode, WcOpcode::CompSwap);
    let r = |p: &Pair, off| u64::from_le_bytes(p.a.read_mem(off, 8).try_into().unwrap());
    assert_eq!(r(&p, 0), 100);
    assert_eq!(r(&p, 8), 105);
    assert_eq!(r(&p, 16), 7);
    assert_eq!(u64::from_le_bytes(p.b.read_mem(64, 8).try_into().unwrap()), 7);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_ATOMIC_ACKNOWLEDGE), 3);
    let aeth = p.trace.iter().find(|s| s.opcode == Opcode::RC_FETCH_ADD).unwrap();
    assert_eq!(aeth.repr.atomic_eth.unwrap().swap_add, 5);
    let ack = p.trace.iter().find(|s| s.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE).unwrap();
    assert_eq!(ack.repr.atomic_ack_eth.unwrap().orig_rem_data, 100);
}

#[test]
fn misaligned_atomic_is_invalid_request() {
    let mut p = Pair::new();
    atomic(&mut p, 1, WrOpcode::AtomicFetchAndAdd, 0, 65, 1, 0);
    p.run();
    let wa = p.a.poll();
    assert_eq!(wa[0].status, WcStatus::RemInvReqErr);
    assert_eq!(p.a.hca.qp_state(p.a.qpn), Some(QpState::Err));
    assert_eq!(p.b.read_mem(64, 16), vec![0; 16]);
}

#[test]
fn fence_waits_for_outstanding_read() {
    let mut p = Pair::new();
    p.b.write_mem(0, b"remote!!");
    let rd = p.one_sided(1, WrOpcode::RdmaRead, 0, 8, 0);
    p.a.post(rd);
    // fenced WRITE of the bytes the READ brings in
    let wr = p
        .one_sided(2, WrOpcode::RdmaWrite, 0, 8, 100)
        .with_flags(SendFlags::SIGNALED | SendFlags::FENCE);
    p.a.post(wr);
    // only the READ request may go out before its response arrives
    let first = p.a.hca.poll_transmit(Instant::ZERO).unwrap();
    assert!(p.a.hca.poll_transmit(Instant::ZERO).is_none());
    p.b.hca.handle_datagram(Instant::ZERO, first);
    p.run();
    assert_eq!(p.b.read_mem(100, 8), b"remote!!");
    assert_eq!(p.a.poll().len(), 2);
}

#[test]
fn max_rd_atomic_limits_outstanding_reads() {
    let mut p = Pair::with(Opts { max_rd_atomic: 2, ..Opts::default() });
    for i in 0..4u64 {
        let rd = p.one_sided(i, WrOpcode::RdmaRead, i * 8, 8, 0);
        p.a.post(rd);
    }
    let mut n = 0;
    while p.a.hca.poll_transmit(Instant::ZERO).is_some() {
        n += 1;
    }
    assert_eq!(n, 2);
}

#[test]
fn large_read_is_generated_lazily_and_intact() {
    let mut p = Pair::new();
    let len = 512 * 1024;
    let data = pattern(len, 0x33);
    p.b.write_mem(0, &data);
    let wr = p.one_sided(1, WrOpcode::RdmaRead, 0, len as u32, 0);
    p.a.post(wr);
    // hand the request over and take 3 responses by hand
    let req = p.a.hca.poll_transmit(Instant::ZERO).unwrap();
    p.b.hca.handle_datagram(Instant::ZERO, req);
    for _ in 0..3 {
        let d = p.b.hca.poll_transmit(Instant::ZERO).unwrap();
        p.a.hca.handle_datagram(Instant::ZERO, d);
    }
    p.run();
    assert_eq!(p.a.read_mem(0, len), data);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE), 510 - 2);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn dereg_of_read_source_mid_response_fails_cleanly() {
    let mut p = Pair::with(Opts { timeout: 8, retry_cnt: 2, ..Opts::default() });
    let wr = p.one_sided(1, WrOpcode::RdmaRead, 0, 64 * 1024, 0);
    p.a.post(wr);
    let req = p.a.hca.poll_transmit(Instant::ZERO).unwrap();
    p.b.hca.handle_datagram(Instant::ZERO, req);
    let d = p.b.hca.poll_transmit(Instant::ZERO).unwrap();
    p.a.hca.handle_datagram(Instant::ZERO, d);
    p.b.hca.dereg_mr(p.b.mr.handle).unwrap();
    p.run();
    // the rest of the READ is answered with a NAK (remote access error) at
    // the first response it cannot send: no timeout, no re-issued READ
    assert_eq!(p.b.counters().naks_sent, 1, "{}", p.dump());
    assert_eq!(p.b.counters().send_err, 0, "{}", p.dump());
    assert_eq!(p.b.counters().region_faults, 0, "a deregistered region is not a fault");
    assert_eq!(p.a.poll()[0].status, WcStatus::RemAccessErr);
    let reqs: Vec<_> = p.packets(Opcode::RC_RDMA_READ_REQUEST).collect();
    assert_eq!(reqs.len(), 0, "{}", p.dump());
    let naks: Vec<_> = p.packets(Opcode::RC_ACKNOWLEDGE).collect();
    assert_eq!(naks.len(), 1, "{}", p.dump());
    assert_eq!(naks[0].psn.value(), 0x101, "the NAK names the first response not sent");
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Err));
}

/// With ACK coalescing on (UDP devices), ten WRITEs that reach the
/// responder before it transmits are acknowledged by one ACK carrying the
/// last PSN and MSN 10; off (the default, rxe's behaviour), each gets its own.
#[test]
fn ack_coalescing_merges_queued_acks() {
    for on in [false, true] {
        let link_b = LinkProfile { ack_coalescing: on, ..LinkProfile::default() };
        let mut p = Pair::with(Opts { link_b, ..Opts::default() });
        p.a.write_mem(0, &pattern(640, 3));
        for i in 0..10u64 {
            let wr = p
                .one_sided(i, WrOpcode::RdmaWrite, i * 64, 64, 4096 + i * 64)
                .with_flags(SendFlags::SIGNALED);
            p.a.post(wr);
        }
        p.run();
        assert_eq!(p.b.read_mem(4096, 640), pattern(640, 3));
        let acks: Vec<&Seen> = p
            .trace
            .iter()
            .filter(|s| s.dir == Dir::BtoA && s.opcode == Opcode::RC_ACKNOWLEDGE)
            .collect();
        let wa = p.a.poll();
        assert_eq!(wa.len(), 10, "{}", p.dump());
        assert!(wa.iter().all(|w| w.status == WcStatus::Success));
        assert_eq!(wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
        let c = p.b.counters();
        assert_eq!(c.acks_sent, 10, "every AckReq still counts as acknowledged");
        if on {
            assert_eq!(acks.len(), 1, "{}", p.dump());
            assert_eq!(acks[0].psn, Psn::new(0x100 + 9));
            assert_eq!(acks[0].repr.aeth.unwrap().msn.value(), 10);
            assert_eq!(c.acks_merged, 9);
        } else {
            assert_eq!(acks.len(), 10, "{}", p.dump());
            assert_eq!(c.acks_merged, 0);
        }
    }
}

/// A duplicate request is re-acknowledged with the newest PSN (C9-108, as
/// rxe does), so with coalescing it merges into the queued ACK too.
#[test]
fn ack_coalescing_merges_a_duplicates_reack() {
    let link_b = LinkProfile { ack_coalescing: true, ..LinkProfile::default() };
    let mut p = Pair::with(Opts { link_b, ..Opts::default() });
    p.a.write_mem(0, &pattern(64, 5));
    for i in 0..2u64 {
        let wr = p.one_sided(i, WrOpcode::RdmaWrite, 0, 64, 0);
        p.a.post(wr);
    }
    let now = Instant::ZERO;
    let d0 = p.a.hca.poll_transmit(now).unwrap();
    let d1 = p.a.hca.poll_transmit(now).unwrap();
    // B sees PSN 0x100, 0x101, then 0x100 again before it transmits
    p.b.hca.handle_datagram(now, d0.clone());
    p.b.hca.handle_datagram(now, d1);
    p.b.hca.handle_datagram(now, d0);
    let mut acks = Vec::new();
    while let Some(d) = p.b.hca.poll_transmit(now) {
        let (r, _) = roce_packet::RoceRepr::parse_bytes(&d.payload).unwrap();
        assert_eq!(r.bth.opcode, Opcode::RC_ACKNOWLEDGE);
        acks.push((r.bth.psn, r.aeth.unwrap().msn.value()));
    }
    assert_eq!(acks, vec![(Psn::new(0x101), 2)]);
    assert_eq!(p.b.counters().acks_sent, 3);
    assert_eq!(p.b.counters().acks_merged, 2);
    assert_eq!(p.b.counters().duplicate_request, 1);
}

/// Held ACKs (`LinkProfile::ack_delay`): the first ACK of a QP leaves at once; later
/// ones are held (merged into the newest) until they cover 16 more PSNs,
/// ride along with another packet once `delay` old, leave alone at twice
/// `delay` (which `poll_timeout` announces), are forced out by
/// the driver going idle (`SansIo::on_idle`), or have a NAK queued behind them.
#[test]
fn held_acks_leave_by_count_by_age_with_traffic_or_forced() {
    let delay = core::time::Duration::from_micros(100);
    let us = Instant::from_micros;
    let link_b = LinkProfile { ack_delay: Some(delay), ..LinkProfile::default() };
    let mut p = Pair::with(Opts { link_b, ..Opts::default() });
    p.a.write_mem(0, &pattern(64, 1));
    let write = |p: &mut Pair, id: u64| {
        let wr = p.one_sided(id, WrOpcode::RdmaWrite, 0, 64, 0);
        p.a.post(wr);
    };
    // A's next request, delivered to B at `t`; B's transmits at `t` as (opcode, PSN)
    let step = |p: &mut Pair, t: Instant, deliver: bool| -> Vec<(Opcode, u32)> {
        if deliver {
            let d = p.a.hca.poll_transmit(t).expect("a request");
            p.b.hca.handle_datagram(t, d);
        }
        let mut out = Vec::new();
        while let Some(d) = p.b.hca.poll_transmit(t) {
            let (r, _) = roce_packet::RoceRepr::parse_bytes(&d.payload).unwrap();
            out.push((r.bth.opcode, r.bth.psn.value()));
        }
        out
    };
    let ack = |psn: u32| (Opcode::RC_ACKNOWLEDGE, 0x100 + psn);
    write(&mut p, 0);
    assert_eq!(step(&mut p, us(0), true), [ack(0)], "the first ACK leaves at once");
    for i in 1..16 {
        write(&mut p, i);
        assert_eq!(step(&mut p, us(1), true), [], "PSN +{i} held");
    }
    assert_eq!(p.b.hca.poll_timeout(), Some(us(1) + 2 * delay), "alone at twice the delay");
    write(&mut p, 16);
    assert_eq!(step(&mut p, us(2), true), [ack(16)], "16 PSNs after the last ACK sent");
    assert_eq!(p.b.counters().acks_merged, 15, "+1..+16 merged into one");
    assert_eq!(p.b.hca.poll_timeout(), None);
    // due after `delay`, but only with other traffic: B's own request takes it along
    write(&mut p, 17);
    assert_eq!(step(&mut p, us(10), true), []);
    assert_eq!(step(&mut p, us(150), false), [], "due, but alone before twice the delay");
    p.b.write_mem(64, b"from b");
    let wr = SendWr::new(90, WrOpcode::RdmaWrite)
        .sge(p.b.addr(64), 6, p.b.mr.lkey)
        .remote(p.a.addr(4096), p.a.mr.rkey);
    p.b.hca.post_send(p.b.qpn, wr).unwrap();
    assert_eq!(
        step(&mut p, us(150), false),
        [(Opcode::RC_RDMA_WRITE_ONLY, 0x200), ack(17)],
        "the due ACK rides with the request"
    );
    // alone at twice the delay
    write(&mut p, 18);
    assert_eq!(step(&mut p, us(300), true), []);
    assert_eq!(p.b.hca.poll_timeout().unwrap(), us(300) + 2 * delay);
    assert_eq!(step(&mut p, us(499), false), []);
    assert_eq!(step(&mut p, us(500), false), [ack(18)]);
    // forced out; the flush ends when nothing is left
    write(&mut p, 19);
    assert_eq!(step(&mut p, us(600), true), []);
    p.b.hca.on_idle();
    assert_eq!(step(&mut p, us(600), false), [ack(19)]);
    write(&mut p, 20);
    assert_eq!(step(&mut p, us(601), true), [], "held again after the flush");
    // a NAK behind a held ACK: both leave, in order (PSN +21 lost, +22 arrives)
    write(&mut p, 21);
    write(&mut p, 22);
    let _lost = p.a.hca.poll_transmit(us(602)).unwrap();
    assert_eq!(
        step(&mut p, us(602), true),
        [ack(20), (Opcode::RC_ACKNOWLEDGE, 0x100 + 21)],
        "ACK +20, then the sequence NAK for +21"
    );
    assert_eq!(p.b.counters().naks_sent, 1);
}
