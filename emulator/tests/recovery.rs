//! RC recovery traces: one loss costs one retry (IBA §9.7.5.2.3 implied
//! NAK, §9.7.6.1.3 retry counter), whatever the responses still in flight
//! from before the go-back-N say, and stale responses are dropped.

use roce_emulator::*;
use roce_packet::{AethRepr, BthRepr, Msn, NakCode, Opcode, Psn, RoceRepr, Syndrome};
use roce_sim::testkit::*;

fn read_wr(p: &Pair, wr_id: u64, off: u64, len: u32) -> SendWr {
    SendWr::new(wr_id, WrOpcode::RdmaRead)
        .sge(p.a.addr(off), len, p.a.mr.lkey)
        .remote(p.b.addr(off), p.b.mr.rkey)
}

fn fetch_add(p: &Pair, wr_id: u64, local: u64, remote: u64, add: u64) -> SendWr {
    let mut wr = p.one_sided(wr_id, WrOpcode::AtomicFetchAndAdd, local, 8, remote);
    wr.compare_add = add;
    wr
}

fn u64_at(s: &Side, off: u64) -> u64 {
    u64::from_le_bytes(s.read_mem(off, 8).try_into().unwrap())
}

fn statuses(w: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    w.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// Six 2-packet READs; the first READ RESPONSE FIRST is lost. Its LAST
/// shows the gap (one retry, go back to the first READ); the ten responses
/// of the five later READs, already on the wire, cover the first READ and
/// would each be an implied NAK: they are dropped without another retry.
/// A paced run (up to 1 s) in which the first packet with opcode `op` gets
/// `action` and every other is delivered.
fn paced_with_first(p: &mut Pair, op: Opcode, action: Action) {
    run_paced(p, Instant::from_millis(1000), once(action, |s| s.opcode == op));
}

#[test]
fn lost_read_response_first_costs_one_retry() {
    let mut p = Pair::new();
    let data = pattern(6 * 2048, 9);
    p.b.write_mem(0, &data);
    for i in 0..6u64 {
        let wr = read_wr(&p, i, i * 2048, 2048);
        p.a.post(wr);
    }
    paced_with_first(&mut p, Opcode::RC_RDMA_READ_RESPONSE_FIRST, Action::Drop);
    let wa = p.a.poll();
    assert_eq!(statuses(&wa), (0..6).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>());
    assert!(wa.iter().all(|c| c.byte_len == 2048));
    assert_eq!(p.a.read_mem(0, 6 * 2048), data, "{}", p.dump());
    let ca = p.a.counters();
    assert_eq!(ca.completer_retry_err, 1, "{}", p.dump());
    assert_eq!(ca.retransmit_timeouts, 0, "{}", p.dump());
    assert_eq!(ca.retry_exceeded_err, 0);
    // recovered at once, without the timer
    assert_eq!(p.now, Instant::ZERO, "{}", p.dump());
    // every READ was re-issued once from its start (go-back-N)
    let reqs: Vec<u32> = p.packets(Opcode::RC_RDMA_READ_REQUEST).map(|s| s.psn.value()).collect();
    let once: Vec<u32> = (0..6).map(|i| 0x100 + 2 * i).collect();
    assert_eq!(reqs, [once.clone(), once].concat(), "{}", p.dump());
}

/// An ATOMIC ACKNOWLEDGE is lost and the ACKs of the SENDs behind the
/// atomic arrive: the first one is an implied NAK (one retry); the others,
/// sent before the requester rewound, change nothing. The atomic executes
/// once and its replayed result reaches the local buffer.
#[test]
fn lost_atomic_ack_then_later_acks_cost_one_retry() {
    let mut p = Pair::new();
    p.b.write_mem(0x1000, &1000u64.to_le_bytes());
    p.a.write_mem(0x2000, b"abcdefgh");
    for i in 0..5 {
        p.b.post_recv(i, 0x3000 + 64 * i, 64);
    }
    let wr = fetch_add(&p, 100, 0, 0x1000, 7);
    p.a.post(wr);
    for i in 0..5u64 {
        let wr = SendWr::new(i, WrOpcode::Send).sge(p.a.addr(0x2000), 8, p.a.mr.lkey);
        p.a.post(wr);
    }
    paced_with_first(&mut p, Opcode::RC_ATOMIC_ACKNOWLEDGE, Action::Drop);
    let wa = p.a.poll();
    let mut want = vec![(100, WcStatus::Success)];
    want.extend((0..5).map(|i| (i, WcStatus::Success)));
    assert_eq!(statuses(&wa), want, "{}", p.dump());
    assert_eq!(u64_at(&p.b, 0x1000), 1007, "executed exactly once");
    assert_eq!(u64_at(&p.a, 0), 1000, "the original value, replayed");
    let ca = p.a.counters();
    assert_eq!(ca.completer_retry_err, 1, "{}", p.dump());
    assert_eq!(ca.retransmit_timeouts, 0);
    assert!(ca.stale_response >= 4, "{ca:?}\n{}", p.dump());
    let cb = p.b.counters();
    assert_eq!(cb.rdma_recvs, 5, "each SEND consumed one receive");
    assert_eq!(cb.duplicate_request, 6, "the atomic and the five SENDs came twice");
    let wb = p.b.poll();
    assert_eq!(wb.len(), 5);
    assert!(wb.iter().all(|c| c.status == WcStatus::Success && c.byte_len == 8));
    assert_eq!(p.b.read_mem(0x3000 + 64 * 4, 8), b"abcdefgh");
}

/// A 3-packet READ; its READ RESPONSE MIDDLE is delayed behind the LAST.
/// The LAST shows a gap: one retry, the READ is re-issued for its last two
/// PSNs (a re-issue answers with FIRST there). The delayed MIDDLE then
/// arrives before the re-issue's FIRST: it is the same data at the same
/// offset and is accepted (it used to fail the READ with BAD_RESP_ERR, as
/// a FIRST was expected at the re-issue's PSN); the re-issue's FIRST is
/// then stale and its LAST completes the READ.
#[test]
fn late_response_of_an_earlier_read_issue_is_accepted() {
    let mut p = Pair::new();
    let data = pattern(3 * 1024 - 100, 21);
    p.b.write_mem(0, &data);
    let wr = read_wr(&p, 7, 0, data.len() as u32);
    p.a.post(wr);
    paced_with_first(&mut p, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, Action::Hold);
    let wa = p.a.poll();
    assert_eq!(statuses(&wa), vec![(7, WcStatus::Success)], "{}", p.dump());
    assert_eq!(wa[0].byte_len, data.len() as u32);
    assert_eq!(p.a.read_mem(0, data.len()), data);
    let ca = p.a.counters();
    assert_eq!(ca.completer_retry_err, 1, "{}", p.dump());
    assert_eq!(ca.retransmit_timeouts, 0);
    assert_eq!(ca.stale_response, 1, "the re-issue's FIRST, {}", p.dump());
    let b_out: Vec<(Opcode, u32)> =
        p.trace.iter().filter(|s| s.dir == Dir::BtoA).map(|s| (s.opcode, s.psn.value())).collect();
    assert_eq!(
        b_out,
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x102),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x101),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x102),
        ],
        "{}",
        p.dump()
    );
    let reissue = p.packets(Opcode::RC_RDMA_READ_REQUEST).nth(1);
    let reth = reissue.and_then(|s| s.repr.reth).expect("re-issued");
    assert_eq!((reth.va, reth.dma_len), (p.b.addr(1024), 2048 - 100));
}

/// A hand-made READ response from B into A's completer.
fn read_resp(p: &mut Pair, op: Opcode, psn: u32, payload: &[u8]) {
    let mut r = response(p, op, psn, payload.len());
    if op != Opcode::RC_RDMA_READ_RESPONSE_MIDDLE {
        r.aeth = Some(AethRepr { syndrome: Syndrome::Ack { credit: 0x1F }, msn: Msn::new(1) });
    }
    inject(p, &r, payload);
}

/// A response header from B to A's QP.
fn response(p: &Pair, op: Opcode, psn: u32, len: usize) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: op,
            dest_qp: p.a.qpn,
            psn: Psn::new(psn),
            pad_count: roce_packet::pad_for(len),
            ..BthRepr::default()
        },
        payload_len: len,
        ..RoceRepr::default()
    }
}

/// Deliver a hand-made packet from B to A at `p.now`.
fn inject(p: &mut Pair, r: &RoceRepr, payload: &[u8]) {
    let d =
        PacketBuilder::new(p.b.hca.addr(), p.a.hca.addr()).src_port(0xC123).datagram(r, payload);
    p.a.hca.handle_datagram(p.now, d);
}

/// Position rules that still hold after the relaxation above: the READ's
/// first PSN must start a message, only an issue's first PSN may start
/// one, and the last packet must end it. Violations fail the READ with
/// BAD_RESP_ERR and the QP goes to ERR.
#[test]
fn read_responses_that_fit_no_issue_are_bad_responses() {
    let bad = [
        // MIDDLE at the READ's first PSN
        vec![(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x100, 1024)],
        // FIRST at a PSN no issue started at
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, 1024),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x101, 1024),
        ],
        // the READ's last packet as a MIDDLE
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, 1024),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101, 1024),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x102, 1024),
        ],
        // wrong length of the last packet
        vec![
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, 1024),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101, 1024),
            (Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x102, 1000),
        ],
    ];
    for (case, resps) in bad.iter().enumerate() {
        let mut p = Pair::new();
        let wr = read_wr(&p, 1, 0, 3000);
        p.a.post(wr);
        let reqs = std::iter::from_fn(|| p.a.hca.poll_transmit(Instant::ZERO)).count();
        assert_eq!(reqs, 1);
        for &(op, psn, len) in resps {
            read_resp(&mut p, op, psn, &vec![0xAB; len]);
        }
        let wa = p.a.poll();
        assert_eq!(statuses(&wa), vec![(1, WcStatus::BadRespErr)], "case {case}");
        assert_eq!(p.a.hca.qp_state(p.a.qpn), Some(QpState::Err), "case {case}");
        assert_eq!(p.a.counters().completer_retry_err, 0, "case {case}");
    }
    // and the same packets in a valid order complete the READ
    let mut p = Pair::new();
    let wr = read_wr(&p, 1, 0, 3000);
    p.a.post(wr);
    while p.a.hca.poll_transmit(Instant::ZERO).is_some() {}
    read_resp(&mut p, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, &[1; 1024]);
    read_resp(&mut p, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 0x101, &[2; 1024]);
    read_resp(&mut p, Opcode::RC_RDMA_READ_RESPONSE_LAST, 0x102, &[3; 952]);
    let wa = p.a.poll();
    assert_eq!(statuses(&wa), vec![(1, WcStatus::Success)]);
    assert_eq!(p.a.read_mem(1023, 2), vec![1, 2]);
    assert_eq!(p.a.read_mem(2047, 2), vec![2, 3]);
}

/// A duplicated PSN SEQUENCE ERROR NAK: the first one starts the
/// go-back-N, the copy is for the PSN already being resent and charges
/// nothing. With retry_cnt 1 a second charge would fail the SEND.
#[test]
fn duplicated_sequence_nak_costs_one_retry() {
    let mut p = Pair::with(Opts { retry_cnt: 1, ..Opts::default() });
    let data = pattern(4 * 1024, 3);
    p.stage_send(&data, 1, 8192, 1);
    let mut dropped = false;
    run_paced(&mut p, Instant::from_millis(1000), |s| {
        if s.dir == Dir::AtoB && s.psn == Psn::new(0x101) && !dropped {
            dropped = true;
            Action::Drop
        } else if matches!(s.repr.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_))) {
            Action::Duplicate
        } else {
            Action::Deliver
        }
    });
    let naks: Vec<_> = p
        .trace
        .iter()
        .filter(|s| {
            s.repr.aeth.map(|a| a.syndrome) == Some(Syndrome::Nak(NakCode::PsnSequenceError))
        })
        .collect();
    assert_eq!(naks.len(), 1, "{}", p.dump());
    let ca = p.a.counters();
    assert_eq!(ca.rcvd_seq_err, 2, "both copies were seen");
    assert_eq!(ca.completer_retry_err, 1, "{}", p.dump());
    assert_eq!(ca.retry_exceeded_err, 0);
    let wa = p.a.poll();
    assert_eq!(statuses(&wa), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.read_mem(0, 4 * 1024), data);
    let wb = p.b.poll();
    assert_eq!((wb.len(), wb[0].status, wb[0].byte_len), (1, WcStatus::Success, 4096));
    // go back N once: 0x101..=0x103 resent once
    let a_psns: Vec<u32> =
        p.trace.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.psn.value()).collect();
    assert_eq!(a_psns, vec![0x100, 0x101, 0x102, 0x103, 0x101, 0x102, 0x103], "{}", p.dump());
}

/// Two separate gaps in one 6-packet SEND with retry_cnt 1: the second
/// PSN SEQUENCE ERROR NAK is for a later PSN, so it acknowledges progress
/// (everything before it arrived), the retry counter is reset and the
/// second gap gets its own retry instead of RETRY_EXC_ERR.
#[test]
fn progress_between_two_gaps_resets_the_retry_counter() {
    let mut p = Pair::with(Opts { retry_cnt: 1, ..Opts::default() });
    let data = pattern(6 * 1024, 5);
    p.stage_send(&data, 1, 8192, 1);
    // lose 0x101 when first sent, and 0x104 when resent
    let mut seen = std::collections::HashMap::new();
    run_paced(&mut p, Instant::from_millis(1000), |s| {
        let n = seen.entry((s.dir == Dir::AtoB, s.psn.value())).or_insert(0);
        *n += 1;
        match (s.dir, s.psn.value(), *n) {
            (Dir::AtoB, 0x101, 1) | (Dir::AtoB, 0x104, 2) => Action::Drop,
            _ => Action::Deliver,
        }
    });
    let naks: Vec<u32> = p
        .trace
        .iter()
        .filter(|s| matches!(s.repr.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_))))
        .map(|s| s.psn.value())
        .collect();
    assert_eq!(naks, vec![0x101, 0x104], "{}", p.dump());
    let ca = p.a.counters();
    assert_eq!((ca.rcvd_seq_err, ca.completer_retry_err), (2, 2), "{}", p.dump());
    assert_eq!(ca.retry_exceeded_err, 0);
    assert_eq!(ca.retransmit_timeouts, 0);
    assert_eq!(statuses(&p.a.poll()), vec![(1, WcStatus::Success)]);
    assert_eq!(p.b.read_mem(0, 6 * 1024), data);
    assert_eq!(p.b.poll()[0].byte_len, 6 * 1024);
}

/// A duplicated RNR NAK while the requester already waits out the first:
/// nothing was resent since, so the copy is for a PSN not outstanding and
/// is dropped; with rnr_retry 1 it must not use up the only RNR retry.
#[test]
fn duplicated_rnr_nak_is_waited_out_once() {
    let mut p = Pair::with(Opts { rnr_retry: 1, min_rnr_timer: 1, ..Opts::default() });
    p.a.write_mem(0, b"later");
    p.a.send(1, 0, 5);
    let dup_rnr = |s: &Seen| {
        if matches!(s.repr.aeth.map(|a| a.syndrome), Some(Syndrome::RnrNak(_))) {
            Action::Duplicate
        } else {
            Action::Deliver
        }
    };
    // the first RNR wait is 10 µs; the receive is posted before it ends
    run_paced(&mut p, Instant::from_micros(5), dup_rnr);
    let ca = p.a.counters();
    assert_eq!((ca.rcvd_rnr_err, ca.stale_response), (1, 1), "{}", p.dump());
    assert!(p.a.poll().is_empty());
    p.b.post_recv(9, 64, 64);
    run_paced(&mut p, Instant::from_millis(1000), dup_rnr);
    let ca = p.a.counters();
    assert_eq!(ca.retry_rnr_exceeded_err, 0, "{}", p.dump());
    assert_eq!(ca.completer_retry_err, 0);
    assert_eq!(statuses(&p.a.poll()), vec![(1, WcStatus::Success)], "{}", p.dump());
    assert_eq!(p.b.read_mem(64, 5), b"later");
    assert_eq!(p.count(Dir::AtoB, Opcode::RC_SEND_ONLY), 2, "{}", p.dump());
}

/// The retransmit timer restarts on progress only: an ACK for a PSN inside
/// an outstanding READ (no peer sends one, but a broken or malicious one
/// may) acknowledges nothing and must not postpone the timeout.
#[test]
fn ack_without_progress_does_not_postpone_the_timer() {
    let mut p = Pair::new();
    let wr = read_wr(&p, 1, 0, 3000);
    p.a.post(wr);
    assert!(p.a.hca.poll_transmit(Instant::ZERO).is_some());
    let period = Instant::from_nanos(4096 << 14);
    assert_eq!(p.a.hca.poll_timeout(), Some(period));
    p.now = Instant::from_millis(10);
    let mut ack = response(&p, Opcode::RC_ACKNOWLEDGE, 0x101, 0);
    ack.aeth = Some(AethRepr { syndrome: Syndrome::Ack { credit: 0x1F }, msn: Msn::new(0) });
    inject(&mut p, &ack, &[]);
    assert_eq!(p.a.hca.poll_timeout(), Some(period));
    assert!(p.a.poll().is_empty());
    // a READ response is progress and does restart it
    read_resp(&mut p, Opcode::RC_RDMA_READ_RESPONSE_FIRST, 0x100, &[7; 1024]);
    let restarted = Instant::from_nanos(10_000_000 + (4096 << 14));
    assert_eq!(p.a.hca.poll_timeout(), Some(restarted));
    assert_eq!(p.a.counters().completer_retry_err, 0);
}
