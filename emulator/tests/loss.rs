//! Loss, retransmission, RNR and exactly-once behaviour.

use roce_emulator::*;
use roce_packet::{NakCode, Opcode, Psn, Syndrome};
use roce_sim::testkit::*;

const T14_NS: u64 = 4096 << 14; // 4.096 µs × 2^14

#[test]
fn drop_middle_packet_one_nak_go_back_n() {
    let mut p = Pair::new();
    let data = pattern(5 * 1024, 1);
    p.stage_send(&data, 1, 8192, 1);
    let mut f = once(Action::Drop, |s| s.dir == Dir::AtoB && s.psn == Psn::new(0x102));
    p.run_with(Instant::from_millis(1000), |_, s| f(s));
    assert_eq!(p.b.read_mem(0, 5 * 1024), data);
    let naks: Vec<_> = p
        .trace
        .iter()
        .filter(|s| matches!(s.repr.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_))))
        .collect();
    assert_eq!(naks.len(), 1, "{}", p.dump());
    assert_eq!(naks[0].psn, Psn::new(0x102));
    assert_eq!(naks[0].repr.aeth.unwrap().syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    // go back N: 0x102..=0x104 resent, nothing earlier
    let a_psns: Vec<u32> =
        p.trace.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.psn.value()).collect();
    assert_eq!(a_psns, vec![0x100, 0x101, 0x102, 0x103, 0x104, 0x102, 0x103, 0x104]);
    let (ca, cb) = (p.a.counters(), p.b.counters());
    assert_eq!(cb.out_of_seq_request, 2);
    assert_eq!(cb.naks_sent, 1);
    assert_eq!(ca.rcvd_seq_err, 1);
    assert_eq!(ca.completer_retry_err, 1);
    assert_eq!(cb.duplicate_request, 0);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    let wb = p.b.poll();
    assert_eq!((wb.len(), wb[0].byte_len), (1, 5 * 1024));
    // recovered without waiting for the timer
    assert_eq!(p.now, Instant::ZERO);
}

#[test]
fn lost_ack_retransmits_and_counts_duplicate() {
    let mut p = Pair::new();
    p.a.write_mem(0, b"abcd");
    p.b.post_recv(1, 0, 64);
    p.a.send(1, 0, 4);
    let mut f = once(Action::Drop, |s| s.dir == Dir::BtoA);
    p.run_with(Instant::from_millis(1000), |_, s| f(s));
    let sends: Vec<_> = p.packets(Opcode::RC_SEND_ONLY).collect();
    assert_eq!(sends.len(), 2);
    assert_eq!(sends[1].at, Instant::from_nanos(T14_NS));
    assert_eq!(sends[1].psn, sends[0].psn);
    assert_eq!(p.b.counters().duplicate_request, 1);
    assert_eq!(p.a.counters().retransmit_timeouts, 1);
    assert_eq!(p.a.counters().completer_retry_err, 1);
    assert_eq!(p.b.poll().len(), 1, "the duplicate must not consume a second receive");
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn lost_atomic_ack_is_replayed_exactly_once() {
    let mut p = Pair::new();
    p.b.write_mem(8, &100u64.to_le_bytes());
    let mut wr = p.one_sided(1, WrOpcode::AtomicFetchAndAdd, 0, 8, 8);
    wr.compare_add = 5;
    p.a.post(wr);
    let mut f = once(Action::Drop, |s| s.opcode == Opcode::RC_ATOMIC_ACKNOWLEDGE);
    p.run_with(Instant::from_millis(1000), |_, s| f(s));
    assert_eq!(p.count(Dir::AtoB, Opcode::RC_FETCH_ADD), 2);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_ATOMIC_ACKNOWLEDGE), 2);
    // memory modified once, the replayed ACK carries the original value
    assert_eq!(u64::from_le_bytes(p.b.read_mem(8, 8).try_into().unwrap()), 105);
    assert_eq!(u64::from_le_bytes(p.a.read_mem(0, 8).try_into().unwrap()), 100);
    assert!(p.packets(Opcode::RC_ATOMIC_ACKNOWLEDGE).all(|s| s
        .repr
        .atomic_ack_eth
        .unwrap()
        .orig_rem_data
        == 100));
    assert_eq!(p.b.counters().duplicate_request, 1);
    let wa = p.a.poll();
    assert_eq!((wa.len(), wa[0].status), (1, WcStatus::Success));
}

#[test]
fn lost_read_response_middle_implied_nak() {
    let mut p = Pair::new();
    let data = pattern(4 * 1024, 77);
    p.b.write_mem(0, &data);
    let wr = p.one_sided(5, WrOpcode::RdmaRead, 0, 4096, 0);
    p.a.post(wr);
    let mut f = once(Action::Drop, |s| s.opcode == Opcode::RC_RDMA_READ_RESPONSE_MIDDLE);
    p.run_with(Instant::from_millis(1000), |_, s| f(s));
    assert_eq!(p.a.read_mem(0, 4096), data, "{}", p.dump());
    let wa = p.a.poll();
    assert_eq!((wa.len(), wa[0].status, wa[0].byte_len), (1, WcStatus::Success, 4096));
    // the READ was re-issued for the missing part, without waiting for a timer
    let reqs: Vec<_> = p.packets(Opcode::RC_RDMA_READ_REQUEST).collect();
    assert_eq!(reqs.len(), 2, "{}", p.dump());
    assert_eq!(reqs[1].psn, Psn::new(0x101));
    let reth = reqs[1].repr.reth.unwrap();
    assert_eq!((reth.va, reth.dma_len), (p.b.addr(1024), 3072));
    assert_eq!(reqs[1].at, Instant::ZERO);
    assert_eq!(p.a.counters().completer_retry_err, 1);
    assert_eq!(p.b.counters().duplicate_request, 1);
}

#[test]
fn rnr_then_success_after_post_recv() {
    let mut p = Pair::new(); // min_rnr_timer code 1 = 10 µs
    p.a.write_mem(0, b"late");
    p.a.send(1, 0, 4);
    p.run_with(Instant::from_micros(25), |_, _| Action::Deliver);
    assert!(p.a.poll().is_empty());
    p.b.post_recv(9, 0, 16);
    p.run();
    let times: Vec<u64> = p.packets(Opcode::RC_SEND_ONLY).map(|s| s.at.as_nanos()).collect();
    assert_eq!(times, vec![0, 10_000, 20_000, 30_000]);
    let rnrs = p
        .trace
        .iter()
        .filter(|s| matches!(s.repr.aeth.map(|a| a.syndrome), Some(Syndrome::RnrNak(t)) if t.code() == 1))
        .count();
    assert_eq!(rnrs, 3);
    assert_eq!(p.b.counters().send_rnr_err, 3);
    assert_eq!(p.a.counters().rcvd_rnr_err, 3);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(p.b.read_mem(0, 4), b"late");
    assert_eq!(p.b.poll()[0].wr_id, 9);
}

#[test]
fn rnr_retry_exceeded() {
    let mut p = Pair::with(Opts { rnr_retry: 2, ..Opts::default() });
    p.a.send(1, 0, 4);
    p.a.send(2, 0, 4);
    p.run();
    let wa = p.a.poll();
    assert_eq!(wa.len(), 2);
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::RnrRetryExcErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(p.a.counters().retry_rnr_exceeded_err, 1);
    assert_eq!(p.a.counters().rcvd_rnr_err, 3);
    assert_eq!(p.a.hca.qp_state(p.a.qpn), Some(QpState::Err));
    // first transmission plus two retries, each after the RNR wait
    let sends: Vec<u64> = p
        .trace
        .iter()
        .filter(|s| s.dir == Dir::AtoB && s.psn == Psn::new(0x100))
        .map(|s| s.at.as_nanos())
        .collect();
    assert_eq!(sends, vec![0, 10_000, 20_000]);
    // the second SEND, behind the RNR-NAKed one, was dropped silently (one NAK per gap)
    assert_eq!(p.b.counters().out_of_seq_request, 3);
    assert_eq!(p.b.counters().naks_sent, 0);
    assert!(matches!(p.a.hca.poll_async_event(), Some(AsyncEvent::QpFatal(q)) if q == p.a.qpn));
}

/// Run (up to 1 s) with every packet from A lost, as to a silent peer: the
/// times (ns) A sent its first PSN (0x100) at.
fn first_psn_times_to_a_silent_peer(p: &mut Pair) -> Vec<u64> {
    p.run_with(Instant::from_millis(1000), |_, s| {
        if s.dir == Dir::AtoB {
            Action::Drop
        } else {
            Action::Deliver
        }
    });
    p.trace.iter().filter(|s| s.psn == Psn::new(0x100)).map(|s| s.at.as_nanos()).collect()
}

#[test]
fn silent_peer_retry_exceeded_at_timer_spacing() {
    let mut p = Pair::with(Opts { timeout: 10, retry_cnt: 3, ..Opts::default() });
    let t = 4096u64 << 10; // 4.194304 ms
    p.a.send(1, 0, 4);
    p.a.send(2, 0, 4);
    // sends of PSN 0x100 at 0, T, 2T, 3T (retry_cnt 3 = three retries)
    let first = first_psn_times_to_a_silent_peer(&mut p);
    assert_eq!(first, vec![0, t, 2 * t, 3 * t]);
    assert_eq!(p.now, Instant::from_nanos(4 * t));
    let wa = p.a.poll();
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!((wa[1].wr_id, wa[1].status), (2, WcStatus::WrFlushErr));
    let c = p.a.counters();
    assert_eq!((c.retry_exceeded_err, c.completer_retry_err, c.retransmit_timeouts), (1, 3, 4));
    assert_eq!(p.a.hca.qp_state(p.a.qpn), Some(QpState::Err));
    assert_eq!(p.a.hca.poll_timeout(), None);
    assert_eq!(format!("{}", wa[0].status), "transport retry counter exceeded");
}

/// `retry_cnt` 7 retries forever, as Linux rxe does (rdma-core's tools pass
/// 7): a silent peer is retransmitted to at the timer spacing and the WR
/// never completes with RETRY_EXC_ERR.
#[test]
fn retry_cnt_7_retries_forever_like_rxe() {
    let mut p = Pair::with(Opts { timeout: 10, retry_cnt: 7, ..Opts::default() });
    let t = 4096u64 << 10; // 4.194304 ms
    p.a.send(1, 0, 4);
    let sends = first_psn_times_to_a_silent_peer(&mut p);
    let expected: Vec<u64> = (0..=1_000_000_000 / t).map(|k| k * t).collect();
    assert_eq!(sends, expected, "one send per timer period for a whole second");
    assert!(p.a.poll().is_empty(), "no completion: still retrying");
    let c = p.a.counters();
    assert_eq!(c.retry_exceeded_err, 0);
    assert_eq!(c.completer_retry_err, expected.len() as u64 - 1);
    assert_eq!(p.a.hca.qp_state(p.a.qpn), Some(QpState::Rts));
    assert!(p.a.hca.poll_timeout().is_some());
}

#[test]
fn timeout_zero_means_no_timer() {
    let mut p = Pair::with(Opts { timeout: 0, ..Opts::default() });
    p.a.send(1, 0, 4);
    p.run_with(Instant::from_millis(1000), |_, _| Action::Drop);
    assert_eq!(p.a.hca.poll_timeout(), None);
    assert_eq!(p.trace.len(), 1);
    assert!(p.a.poll().is_empty());
}

#[test]
fn corrupted_frame_is_dropped_and_retransmitted() {
    let mut p = Pair::new();
    p.a.write_mem(0, b"precious");
    p.b.post_recv(1, 0, 64);
    p.a.send(1, 0, 8);
    let mut flipped = false;
    p.run_with(Instant::from_millis(1000), |_, s| {
        if s.dir == Dir::AtoB && !flipped {
            flipped = true;
            let mut b = s.repr.to_vec(b"precious").unwrap();
            // rebuild the exact bytes then flip one payload bit (ICRC stays stale)
            b[12] ^= 0x01;
            Action::Replace(b)
        } else {
            Action::Deliver
        }
    });
    let cb = p.b.counters();
    assert_eq!(cb.icrc_err, 1);
    assert_eq!(cb.rcvd_pkts, 1); // only the retransmission was accepted
    assert_eq!(p.b.read_mem(0, 8), b"precious");
    assert_eq!(p.b.poll().len(), 1);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn window_of_128_unacked_psns() {
    let mut p = Pair::new();
    let len = 300 * 1024;
    let data = pattern(len, 5);
    p.a.write_mem(0, &data);
    let wr = p.one_sided(1, WrOpcode::RdmaWrite, 0, len as u32, 0);
    p.a.post(wr);
    p.run();
    assert_eq!(p.b.read_mem(0, len), data);
    // replay the trace: at no point more than 128 PSNs unacknowledged
    let mut acked = 0x100u32; // oldest unacked
    let mut max_out = 0;
    for s in &p.trace {
        match s.dir {
            Dir::AtoB => max_out = max_out.max(s.psn.value() + 1 - acked),
            Dir::BtoA => acked = s.psn.value() + 1,
        }
    }
    assert_eq!(max_out, 128);
    // AckReq every 64 packets and on the last
    let reqs: Vec<_> = p.trace.iter().filter(|s| s.dir == Dir::AtoB).collect();
    assert_eq!(reqs.len(), 300);
    for (i, s) in reqs.iter().enumerate() {
        assert_eq!(s.ack_req, (i + 1) % 64 == 0 || i == 299, "packet {i}");
    }
    // the first 128 requests go out before any ACK
    assert!(p.trace[..128].iter().all(|s| s.dir == Dir::AtoB));
    assert_eq!(p.trace[128].dir, Dir::BtoA);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}

#[test]
fn random_loss_duplication_reordering_keep_data_intact() {
    let seeds: Vec<u64> = match std::env::var("ROCE_SEED") {
        Ok(s) => vec![s.parse().expect("ROCE_SEED must be a number")],
        Err(_) => (0..40).collect(),
    };
    for seed in seeds {
        eprintln!("seed {seed} (replay with ROCE_SEED={seed})");
        random_loss(seed);
    }
}

fn random_loss(seed: u64) {
    // a small seeded LCG decides the fate of every packet
    let mut state: u64 = 0x5eed ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rnd = move || {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) as u32 % 100
    };
    let mut p = Pair::with(Opts { timeout: 8, retry_cnt: 7, ..Opts::default() });
    let msg = pattern(3000, 1);
    let rd = pattern(5000, 2);
    p.a.write_mem(0, &msg);
    p.b.write_mem(100_000, &rd);
    p.b.write_mem(200_000, &1u64.to_le_bytes());
    for i in 0..6u64 {
        p.b.post_recv(i, 4096 * (i + 1), 4096);
    }
    for i in 0..6u64 {
        p.a.send(i, 0, 3000);
        let wr = p.one_sided(100 + i, WrOpcode::RdmaRead, 50_000 + 8192 * i, 5000, 100_000);
        p.a.post(wr);
        let mut fa = p.one_sided(200 + i, WrOpcode::AtomicFetchAndAdd, 300_000 + 8 * i, 8, 200_000);
        fa.compare_add = 1;
        p.a.post(fa);
    }
    p.run_with(Instant::from_millis(10_000), |_, _| match rnd() {
        0..=9 => Action::Drop,
        10..=14 => Action::Duplicate,
        15..=19 => Action::Hold,
        _ => Action::Deliver,
    });
    let wa = p.a.poll();
    assert_eq!(wa.len(), 18, "{}", p.dump());
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}\n{}", p.dump());
    for i in 0..6u64 {
        assert_eq!(p.b.read_mem(4096 * (i + 1), 3000), msg);
        assert_eq!(p.a.read_mem(50_000 + 8192 * i, 5000), rd);
    }
    // six fetch-and-adds of 1 on 1: exactly once each
    assert_eq!(u64::from_le_bytes(p.b.read_mem(200_000, 8).try_into().unwrap()), 7);
    let mut olds: Vec<u64> = (0..6)
        .map(|i| u64::from_le_bytes(p.a.read_mem(300_000 + 8 * i, 8).try_into().unwrap()))
        .collect();
    olds.sort();
    assert_eq!(olds, vec![1, 2, 3, 4, 5, 6]);
    let (ca, cb) = (p.a.counters(), p.b.counters());
    assert!(p.trace.iter().filter(|s| s.action == Action::Drop).count() > 0);
    assert!(ca.completer_retry_err > 0 || cb.duplicate_request > 0);
    let wb = p.b.poll();
    assert_eq!(wb.len(), 6);
    assert!(wb.iter().all(|w| w.status == WcStatus::Success && w.byte_len == 3000));
}

#[test]
fn reordered_packets_one_nak_then_recovery() {
    let mut p = Pair::new();
    let data = pattern(3 * 1024, 8);
    p.stage_send(&data, 1, 4096, 1);
    let mut f = once(Action::Hold, |s| s.dir == Dir::AtoB && s.psn == Psn::new(0x101));
    p.run_with(Instant::from_millis(1000), |_, s| f(s));
    assert_eq!(p.b.read_mem(0, 3 * 1024), data);
    let cb = p.b.counters();
    // 0x102 arrived early: one NAK; the late 0x101 was then in order
    assert_eq!(cb.out_of_seq_request, 1);
    assert_eq!(cb.naks_sent, 1);
    // go-back-N resent 0x101 (now a duplicate) and 0x102 (now expected)
    assert_eq!(cb.duplicate_request, 1);
    assert_eq!(p.b.poll().len(), 1);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
}
