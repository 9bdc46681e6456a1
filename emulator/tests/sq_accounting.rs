//! Send-queue accounting (issue 26, finding 6): a send-queue slot is freed
//! when the completion that frees it is polled, as mlx5 frees it, not when
//! the completion is generated. A signaled CQE frees its own WQE's slot and
//! those of the unsignaled WQEs completed before it on its QP; error and
//! flush CQEs free theirs when polled; a reset or destroyed QP's CQEs free
//! nothing in a later QP (same QPN included). So a program that relies on
//! `post_send`'s QueueFull (ENOMEM) for flow control cannot overrun its CQ.

use roce_emulator::*;
use roce_packet::Qpn;
use roce_sim::testkit::*;
use std::net::{IpAddr, Ipv4Addr};

/// An RC QP on `s`'s PD and CQ with `send` send WRs and 256 receive WRs.
fn qp_with(s: &mut Side, send: u32) -> Qpn {
    let cap = QpCap { max_inline_data: 64, ..qp_cap(send, 256) };
    s.hca.create_qp(qp_init(s.pd, s.cq, QpType::Rc, cap, false)).unwrap()
}

/// A connected pair of RC QPs with `send` send WRs each, on CQs of `cqe`.
fn pair(send: u32, cqe: u32) -> (Pair, Qpn, Qpn) {
    let mut p = Pair::with(Opts { cqe, ..Opts::default() });
    let qa = qp_with(&mut p.a, send);
    let qb = qp_with(&mut p.b, send);
    rc_up(&mut p.a.hca, qa, [10, 0, 0, 2], qb, (0x10, 0x20), 4);
    rc_up(&mut p.b.hca, qb, [10, 0, 0, 1], qa, (0x20, 0x10), 4);
    (p, qa, qb)
}

/// An 8-byte RDMA WRITE from A's region to B's (no receive needed).
fn write(p: &Pair, wr_id: u64, signaled: bool) -> SendWr {
    let mut wr = p.one_sided(wr_id, WrOpcode::RdmaWrite, wr_id * 8, 8, wr_id * 8);
    if !signaled {
        wr.flags = SendFlags::EMPTY;
    }
    wr
}

fn post(p: &mut Pair, qa: Qpn, wr_id: u64, signaled: bool) -> Result<(), PostSendError> {
    let wr = write(p, wr_id, signaled);
    p.a.hca.post_send(qa, wr)
}

fn held(p: &Pair, qa: Qpn) -> u32 {
    p.a.hca.sq_slots_held(qa).unwrap()
}

fn poll_n(p: &mut Pair, n: usize) -> Vec<WorkCompletion> {
    p.a.hca.poll_cq(p.a.cq, n).unwrap()
}

#[test]
fn signaled_slots_are_freed_when_polled_not_when_completed() {
    let (mut p, qa, _) = pair(8, 64);
    for i in 0..8 {
        post(&mut p, qa, i, true).unwrap();
    }
    assert_eq!(held(&p, qa), 8);
    assert_eq!(post(&mut p, qa, 8, true), Err(PostSendError::QueueFull { max: 8 }));
    p.run();
    // all eight completed (their CQEs wait in the CQ): the slots stay held
    assert_eq!(p.count(Dir::AtoB, roce_packet::Opcode::RC_RDMA_WRITE_ONLY), 8);
    assert_eq!(held(&p, qa), 8);
    assert_eq!(post(&mut p, qa, 8, true), Err(PostSendError::QueueFull { max: 8 }));
    // polling one CQE frees exactly one slot
    let wc = poll_n(&mut p, 1);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (0, WcStatus::Success));
    assert_eq!(held(&p, qa), 7);
    post(&mut p, qa, 8, true).unwrap();
    assert_eq!(post(&mut p, qa, 9, true), Err(PostSendError::QueueFull { max: 8 }));
    // the other seven free seven; the new WQE holds its slot until polled
    let wc = poll_n(&mut p, 100);
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (1..8).collect::<Vec<_>>());
    assert_eq!(held(&p, qa), 1);
    p.run();
    assert_eq!(held(&p, qa), 1);
    let wc = poll_n(&mut p, 100);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (8, WcStatus::Success));
    assert_eq!(held(&p, qa), 0);
    assert_eq!(p.a.counters().cq_overflow, 0);
}

#[test]
fn a_signaled_cqe_frees_the_unsignaled_wqes_before_it() {
    let (mut p, qa, _) = pair(8, 64);
    // 3 unsignaled + 1 signaled: one CQE, four slots
    for i in 0..3 {
        post(&mut p, qa, i, false).unwrap();
    }
    post(&mut p, qa, 3, true).unwrap();
    p.run();
    assert_eq!(held(&p, qa), 4);
    let wc = poll_n(&mut p, 100);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
    assert_eq!(held(&p, qa), 0);

    // unsignaled WQEs after the last signaled one keep their slots
    post(&mut p, qa, 10, true).unwrap();
    post(&mut p, qa, 11, true).unwrap();
    post(&mut p, qa, 12, false).unwrap();
    post(&mut p, qa, 13, false).unwrap();
    p.run();
    let wc = poll_n(&mut p, 100);
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![10, 11]);
    assert_eq!(held(&p, qa), 2);
    for i in 0..6 {
        post(&mut p, qa, 20 + i, false).unwrap();
    }
    assert_eq!(post(&mut p, qa, 26, true), Err(PostSendError::QueueFull { max: 8 }));
    p.run();
    // all eight completed, none signaled: nothing to poll, nothing freed
    // (why an application must signal at least every max_send_wr posts)
    assert_eq!(poll_n(&mut p, 100).len(), 0);
    assert_eq!(held(&p, qa), 8);
    assert_eq!(post(&mut p, qa, 26, true), Err(PostSendError::QueueFull { max: 8 }));
}

#[test]
fn each_cqe_frees_the_unsignaled_run_before_it_when_polled_one_by_one() {
    let (mut p, qa, _) = pair(8, 64);
    // U U S U S: the first CQE frees 3, the second 2
    for (i, s) in [false, false, true, false, true].into_iter().enumerate() {
        post(&mut p, qa, i as u64, s).unwrap();
    }
    p.run();
    assert_eq!(held(&p, qa), 5);
    assert_eq!(poll_n(&mut p, 1)[0].wr_id, 2);
    assert_eq!(held(&p, qa), 2);
    assert_eq!(poll_n(&mut p, 1)[0].wr_id, 4);
    assert_eq!(held(&p, qa), 0);
}

#[test]
fn error_and_flush_completions_free_their_slots_when_polled() {
    let (mut p, qa, _) = pair(8, 64);
    // U (ok), S with a bad rkey (REM_ACCESS_ERR), then U U flushed
    post(&mut p, qa, 0, false).unwrap();
    let mut bad = write(&p, 1, true);
    bad.rkey = roce_packet::RKey::new(bad.rkey.value() ^ 0x8000_0000);
    p.a.hca.post_send(qa, bad).unwrap();
    post(&mut p, qa, 2, false).unwrap();
    post(&mut p, qa, 3, false).unwrap();
    p.run();
    assert_eq!(p.a.hca.qp_state(qa), Some(QpState::Err));
    assert_eq!(held(&p, qa), 4);
    let wc = poll_n(&mut p, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::RemAccessErr));
    // the error CQE frees its slot and the unsignaled one before it
    assert_eq!(held(&p, qa), 2);
    let wc = poll_n(&mut p, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::WrFlushErr));
    assert_eq!(held(&p, qa), 1);
    // a WR posted in ERR is flushed at once and holds its slot until polled
    post(&mut p, qa, 4, false).unwrap();
    assert_eq!(held(&p, qa), 2);
    let wc = poll_n(&mut p, 100);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(3, WcStatus::WrFlushErr), (4, WcStatus::WrFlushErr)]
    );
    assert_eq!(held(&p, qa), 0);
}

#[test]
fn flush_on_modify_to_err_frees_at_poll() {
    let (mut p, qa, _) = pair(8, 64);
    for i in 0..8 {
        post(&mut p, qa, i, i == 3).unwrap();
    }
    // never sent: the move to ERR flushes all eight, one CQE each
    p.a.hca.modify_qp(qa, &QpAttr::new().state(QpState::Err)).unwrap();
    assert_eq!(held(&p, qa), 8);
    assert_eq!(post(&mut p, qa, 8, true), Err(PostSendError::QueueFull { max: 8 }));
    assert_eq!(poll_n(&mut p, 3).len(), 3);
    assert_eq!(held(&p, qa), 5);
    let wc = poll_n(&mut p, 100);
    assert_eq!(wc.len(), 5);
    assert!(wc.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert_eq!(held(&p, qa), 0);
}

#[test]
fn the_issue_scenario_never_overruns_the_cq() {
    // max_send_wr 64, CQ of 256: 128 posts without polling get QueueFull
    // after 64; polling and posting on completes all 128, CQ intact
    let (mut p, qa, qb) = pair(64, 256);
    for i in 0..128u64 {
        let a = p.b.addr(i * 16);
        p.b.hca.post_recv(qb, RecvWr::new(i, a, 16, p.b.mr.lkey)).unwrap();
    }
    let send =
        |p: &Pair, i: u64| SendWr::new(i, WrOpcode::Send).sge(p.a.addr(i * 16), 16, p.a.mr.lkey);
    let mut posted = 0u64;
    while posted < 128 {
        let wr = send(&p, posted);
        match p.a.hca.post_send(qa, wr) {
            Ok(()) => posted += 1,
            Err(e) => {
                assert_eq!(e, PostSendError::QueueFull { max: 64 });
                break;
            }
        }
    }
    assert_eq!(posted, 64);
    p.run();
    // everything sent completed; still full until polled
    assert_eq!(p.a.hca.post_send(qa, send(&p, 64)), Err(PostSendError::QueueFull { max: 64 }));
    let mut done = Vec::new();
    while done.len() < 128 {
        done.extend(p.a.hca.poll_cq(p.a.cq, 16).unwrap());
        while posted < 128 && p.a.hca.post_send(qa, send(&p, posted)).is_ok() {
            posted += 1;
        }
        p.run();
    }
    assert_eq!(posted, 128);
    assert_eq!(done.iter().map(|w| w.wr_id).collect::<Vec<_>>(), (0..128).collect::<Vec<_>>());
    assert!(done.iter().all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::Send));
    assert_eq!(p.a.counters().cq_overflow, 0);
    assert_eq!(p.a.hca.qp_state(qa), Some(QpState::Rts));
    assert_eq!(held(&p, qa), 0);
    // the receiver's 128 completions, on B's CQ
    let rx = p.b.hca.poll_cq(p.b.cq, 1000).unwrap();
    assert_eq!(rx.len(), 128);
}

// ---- without a wire: QPs in ERR complete every post at once ----

fn lone_hca(qpns: std::ops::Range<u32>) -> (Hca, PdHandle, CqHandle) {
    let mut cfg = HcaConfig::new("x", IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 7);
    cfg.qpns = qpns.clone();
    cfg.first_qpn = qpns.start;
    let mut h = Hca::new(cfg);
    let pd = h.alloc_pd().unwrap();
    let cq = h.create_cq(64).unwrap();
    (h, pd, cq)
}

fn err_qp(h: &mut Hca, pd: PdHandle, cq: CqHandle) -> Qpn {
    let q = h.create_qp(qp_init(pd, cq, QpType::Rc, qp_cap(8, 8), false)).unwrap();
    to_err(h, q);
    q
}

fn to_err(h: &mut Hca, q: Qpn) {
    let init = QpAttr::new().state(QpState::Init).pkey_index(0).port(1).access_flags(ALL_ACCESS);
    h.modify_qp(q, &init).unwrap();
    h.modify_qp(q, &QpAttr::new().state(QpState::Err)).unwrap();
}

fn flush_post(h: &mut Hca, q: Qpn, wr_id: u64) -> Result<(), PostSendError> {
    h.post_send(q, SendWr::new(wr_id, WrOpcode::Send).with_flags(SendFlags::EMPTY))
}

#[test]
fn a_destroyed_qps_cqes_free_nothing_in_the_qp_that_reuses_its_qpn() {
    // one QPN in the range: the second QP gets the first one's
    let (mut h, pd, cq) = lone_hca(40..41);
    let q1 = err_qp(&mut h, pd, cq);
    for i in 0..4 {
        flush_post(&mut h, q1, i).unwrap();
    }
    assert_eq!(h.sq_slots_held(q1), Some(4));
    h.destroy_qp(q1).unwrap();
    let q2 = err_qp(&mut h, pd, cq);
    assert_eq!(q2, q1);
    assert_eq!(h.sq_slots_held(q2), Some(0));
    for i in 10..18 {
        flush_post(&mut h, q2, i).unwrap();
    }
    assert_eq!(flush_post(&mut h, q2, 18), Err(PostSendError::QueueFull { max: 8 }));
    // the old QP's four CQEs come first: they free nothing in q2
    let wc = h.poll_cq(cq, 4).unwrap();
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(h.sq_slots_held(q2), Some(8));
    assert_eq!(flush_post(&mut h, q2, 18), Err(PostSendError::QueueFull { max: 8 }));
    let wc = h.poll_cq(cq, 3).unwrap();
    assert_eq!(wc.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![10, 11, 12]);
    assert_eq!(h.sq_slots_held(q2), Some(5));
}

#[test]
fn a_reset_drops_the_accounting_and_older_cqes_free_nothing() {
    let (mut h, pd, cq) = lone_hca(40..50);
    let q = err_qp(&mut h, pd, cq);
    for i in 0..4 {
        flush_post(&mut h, q, i).unwrap();
    }
    assert_eq!(h.sq_slots_held(q), Some(4));
    h.modify_qp(q, &QpAttr::new().state(QpState::Reset)).unwrap();
    assert_eq!(h.sq_slots_held(q), Some(0));
    to_err(&mut h, q);
    for i in 10..18 {
        flush_post(&mut h, q, i).unwrap();
    }
    assert_eq!(h.sq_slots_held(q), Some(8));
    assert_eq!(h.poll_cq(cq, 4).unwrap().iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1, 2, 3]);
    assert_eq!(h.sq_slots_held(q), Some(8));
    assert_eq!(h.poll_cq(cq, 2).unwrap().len(), 2);
    assert_eq!(h.sq_slots_held(q), Some(6));
    // cap reporting is unchanged by the accounting
    let (attr, init) = h.query_qp(q).unwrap();
    assert_eq!((attr.cap.max_send_wr, init.cap.max_send_wr), (8, 8));
}

#[test]
fn qps_sharing_a_send_cq_free_their_own_slots() {
    let (mut h, pd, cq) = lone_hca(40..50);
    let x = err_qp(&mut h, pd, cq);
    let y = err_qp(&mut h, pd, cq);
    // x y x y x
    for i in 0..5u64 {
        let q = if i % 2 == 0 { x } else { y };
        flush_post(&mut h, q, i).unwrap();
    }
    assert_eq!((h.sq_slots_held(x), h.sq_slots_held(y)), (Some(3), Some(2)));
    assert_eq!(h.poll_cq(cq, 3).unwrap().len(), 3);
    assert_eq!((h.sq_slots_held(x), h.sq_slots_held(y)), (Some(1), Some(1)));
    // a deferred poll frees nothing until each release is handed back
    let got = h.poll_cq_deferred(cq, 10).unwrap();
    assert_eq!(got.iter().map(|(w, r)| (w.wr_id, r.slots())).collect::<Vec<_>>(), [(3, 1), (4, 1)]);
    assert_eq!((h.sq_slots_held(x), h.sq_slots_held(y)), (Some(1), Some(1)));
    h.release_sq(got[0].1.clone());
    assert_eq!((h.sq_slots_held(x), h.sq_slots_held(y)), (Some(1), Some(0)));
    h.release_sq(got[1].1.clone());
    assert_eq!((h.sq_slots_held(x), h.sq_slots_held(y)), (Some(0), Some(0)));
}
