//! Completion notification (solicited-only), resize_cq, SQD drain, SRQ limit re-arming.

use roce_emulator::*;
use roce_sim::testkit::*;

fn send_flags(p: &mut Pair, wr_id: u64, flags: SendFlags) {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey);
    wr.flags = flags;
    p.a.post(wr);
}

#[test]
fn solicited_only_wakes_on_se_and_errors_once_per_arming() {
    let mut p = Pair::new();
    p.b.post_recvs(4, 64);
    p.b.hca.req_notify_cq(p.b.cq, true).unwrap();
    // a plain SEND: completion queued, no event
    send_flags(&mut p, 1, SendFlags::EMPTY);
    p.run();
    assert_eq!(p.b.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0]);
    assert_eq!(p.b.hca.poll_comp_event(), None);
    // SEND with SE: one event
    send_flags(&mut p, 2, SendFlags::SOLICITED);
    p.run();
    assert_eq!(p.b.hca.poll_comp_event(), Some(p.b.cq));
    assert_eq!(p.b.hca.poll_comp_event(), None);
    // not re-armed: another SE send gives no event
    send_flags(&mut p, 3, SendFlags::SOLICITED);
    p.run();
    assert_eq!(p.b.hca.poll_comp_event(), None);
    assert_eq!(p.b.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    // re-armed solicited-only: an error completion (flush) notifies
    p.b.hca.req_notify_cq(p.b.cq, true).unwrap();
    p.b.hca.modify_qp(p.b.qpn, &QpAttr::new().state(QpState::Err)).unwrap();
    assert_eq!(p.b.hca.poll_comp_event(), Some(p.b.cq));
    assert_eq!(p.b.hca.poll_comp_event(), None);
    let w = p.b.poll();
    assert_eq!(w.len(), 1);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn any_completion_arming_fires_on_send_side_success() {
    let mut p = Pair::new();
    p.b.post_recv(0, 0, 64);
    p.a.hca.req_notify_cq(p.a.cq, false).unwrap();
    send_flags(&mut p, 7, SendFlags::SIGNALED);
    p.run();
    assert_eq!(p.a.hca.poll_comp_event(), Some(p.a.cq));
    assert_eq!(p.a.hca.poll_comp_event(), None);
    assert_eq!(p.a.poll()[0].wr_id, 7);
}

#[test]
fn resize_cq_grows_and_refuses_to_shrink_below_entries() {
    let mut p = Pair::with(Opts { cqe: 2, ..Opts::default() });
    p.b.post_recvs(3, 64);
    send_flags(&mut p, 1, SendFlags::EMPTY);
    send_flags(&mut p, 2, SendFlags::EMPTY);
    p.run();
    assert_eq!(p.b.hca.cq_depth(p.b.cq), Some(2));
    assert_eq!(
        p.b.hca.resize_cq(p.b.cq, 1),
        Err(ResizeCqError::BelowEntries { cqe: 1, entries: 2 })
    );
    assert_eq!(
        p.b.hca.resize_cq(p.b.cq, 0),
        Err(ResizeCqError::InvalidDepth { cqe: 0, max: 32767 })
    );
    p.b.hca.resize_cq(p.b.cq, 8).unwrap();
    assert_eq!(p.b.hca.cq_depth(p.b.cq), Some(8));
    // a third completion fits now (it would have overflowed at depth 2)
    send_flags(&mut p, 3, SendFlags::EMPTY);
    p.run();
    assert_eq!(p.b.poll().len(), 3);
    assert_eq!(p.b.counters().cq_overflow, 0);
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Rts));
    p.b.hca.resize_cq(p.b.cq, 1).unwrap();
}

#[test]
fn sqd_drains_started_wqes_then_raises_sq_drained() {
    let mut p = Pair::new();
    p.b.post_recvs(3, 64);
    send_flags(&mut p, 1, SendFlags::SIGNALED);
    send_flags(&mut p, 2, SendFlags::SIGNALED);
    // the first SEND leaves; then SQD before its ACK arrives
    let d = p.a.hca.poll_transmit(p.now).expect("first SEND");
    let sqd = QpAttr::new().state(QpState::Sqd).en_sqd_async_notify(true);
    p.a.hca.modify_qp(p.a.qpn, &sqd).unwrap();
    assert_eq!(p.a.hca.poll_async_event(), None, "WQE 1 still outstanding");
    p.b.hca.handle_datagram(p.now, d);
    p.run();
    // WQE 1 completed, WQE 2 never started
    assert_eq!(p.a.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(p.b.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0]);
    assert_eq!(p.a.hca.poll_async_event(), Some(AsyncEvent::SqDrained(p.a.qpn)));
    assert_eq!(p.a.hca.poll_async_event(), None);
    // SQD → RTS resumes
    p.a.hca.modify_qp(p.a.qpn, &QpAttr::new().state(QpState::Rts)).unwrap();
    p.run();
    assert_eq!(p.a.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(p.b.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1]);
    assert_eq!(p.a.hca.poll_async_event(), None);
}

/// A QP in SQD still takes receive WRs (IBA C10-97.2.1: any state but
/// RESET; rxe: any state from INIT on) and its responder still serves the
/// peer's SENDs with them.
#[test]
fn sqd_accepts_posted_receives_and_serves_incoming_sends() {
    let mut p = Pair::new();
    let sqd = QpAttr::new().state(QpState::Sqd);
    p.b.hca.modify_qp(p.b.qpn, &sqd).unwrap();
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Sqd));
    let data = pattern(48, 7);
    p.a.write_mem(0, &data);
    p.b.post_recv(9, 256, 64); // (unwraps: an error here fails the test)
    p.a.send(1, 0, 48);
    p.run();
    let w = p.b.poll();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!((w[0].wr_id, w[0].status, w[0].byte_len), (9, WcStatus::Success, 48));
    assert_eq!(p.b.read_mem(256, 48), data);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    // RESET still refuses
    p.b.hca.modify_qp(p.b.qpn, &QpAttr::new().state(QpState::Reset)).unwrap();
    let lkey = p.b.mr.lkey;
    let a = p.b.addr(0);
    assert_eq!(
        p.b.hca.post_recv(p.b.qpn, RecvWr::new(1, a, 8, lkey)),
        Err(PostRecvError::InvalidState(QpState::Reset))
    );
}

#[test]
fn sqd_retransmits_a_lost_started_wqe_before_draining() {
    let mut p = Pair::new();
    p.b.post_recvs(3, 64);
    send_flags(&mut p, 1, SendFlags::SIGNALED);
    let lost = p.a.hca.poll_transmit(p.now).expect("first SEND");
    drop(lost);
    let sqd = QpAttr::new().state(QpState::Sqd).en_sqd_async_notify(true);
    p.a.hca.modify_qp(p.a.qpn, &sqd).unwrap();
    // posting in SQD queues the WR without starting it
    send_flags(&mut p, 2, SendFlags::SIGNALED);
    p.run();
    assert_eq!(p.a.counters().retransmit_timeouts, 1, "the lost SEND was resent in SQD");
    assert_eq!(
        p.a.poll().iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success)]
    );
    assert_eq!(p.b.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0]);
    assert_eq!(p.a.hca.poll_async_event(), Some(AsyncEvent::SqDrained(p.a.qpn)));
    p.a.hca.modify_qp(p.a.qpn, &QpAttr::new().state(QpState::Rts)).unwrap();
    p.run();
    assert_eq!(p.a.poll().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
    assert_eq!(p.a.hca.poll_async_event(), None);
}

#[test]
fn sqd_without_notify_raises_nothing() {
    let mut p = Pair::new();
    p.b.post_recv(0, 0, 64);
    send_flags(&mut p, 1, SendFlags::SIGNALED);
    p.a.hca.modify_qp(p.a.qpn, &QpAttr::new().state(QpState::Sqd)).unwrap();
    p.run();
    assert_eq!(p.a.poll().len(), 0, "nothing started before SQD");
    assert_eq!(p.a.hca.poll_async_event(), None);
}

#[test]
fn srq_limit_fires_once_per_arming() {
    let mut p = Pair::new();
    let srq = p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    let qb = p.b.rc_qp(8, 0, false, Some(srq));
    // rewire a's QP to the SRQ-backed QP
    let qa = p.a.qpn;
    p.a.hca.modify_qp(qa, &QpAttr::new().state(QpState::Reset)).unwrap();
    for (h, q, peer, dest) in
        [(&mut p.a.hca, qa, [10, 0, 0, 2], qb), (&mut p.b.hca, qb, [10, 0, 0, 1], qa)]
    {
        rc_up(h, q, peer, dest, (0, 0), 1);
    }
    for i in 0..6u64 {
        p.b.hca.post_srq_recv(srq, RecvWr::new(i, p.b.addr(64 * i), 64, p.b.mr.lkey)).unwrap();
    }
    p.b.hca.modify_srq(srq, 5).unwrap();
    // 6 → 5 → 4 → 3: below 5 three times, one event
    for i in 0..3 {
        send_flags(&mut p, i, SendFlags::EMPTY);
    }
    p.run();
    assert_eq!(p.b.poll().len(), 3);
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::SrqLimitReached(srq)));
    assert_eq!(p.b.hca.poll_async_event(), None);
    // re-arm at 2: 3 → 2 stays at the limit (no event), 2 → 1 fires once
    p.b.hca.modify_srq(srq, 2).unwrap();
    send_flags(&mut p, 10, SendFlags::EMPTY);
    p.run();
    assert_eq!(p.b.hca.poll_async_event(), None);
    send_flags(&mut p, 11, SendFlags::EMPTY);
    send_flags(&mut p, 12, SendFlags::EMPTY);
    p.run();
    assert_eq!(p.b.poll().len(), 3);
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::SrqLimitReached(srq)));
    assert_eq!(p.b.hca.poll_async_event(), None);
    // the SRQ QP entering ERR (nothing queued on it): QP_LAST_WQE_REACHED
    p.b.hca.modify_qp(qb, &QpAttr::new().state(QpState::Err)).unwrap();
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::QpFatal(qb)));
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::QpLastWqeReached(qb)));
    assert_eq!(p.b.hca.poll_async_event(), None);
    assert_eq!(p.b.hca.query_srq(srq).unwrap().1, 0, "SRQ WQEs are not flushed");
}

#[test]
fn last_wqe_reached_only_for_srq_qps() {
    let mut p = Pair::new();
    p.b.post_recv(0, 0, 64);
    p.b.hca.modify_qp(p.b.qpn, &QpAttr::new().state(QpState::Err)).unwrap();
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::QpFatal(p.b.qpn)));
    assert_eq!(p.b.hca.poll_async_event(), None);
    assert_eq!(p.b.poll()[0].status, WcStatus::WrFlushErr);
}
