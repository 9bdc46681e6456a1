//! Shared receive queues and CQ notification.

use roce_emulator::*;
use roce_packet::Qpn;
use roce_sim::testkit::*;

fn qp_on(s: &mut Side, srq: Option<SrqHandle>) -> Qpn {
    s.rc_qp(16, 0, true, srq)
}

fn up(h: &mut Hca, q: Qpn, peer: [u8; 4], dest: Qpn) {
    rc_up(h, q, peer, dest, (0, 0), 1)
}

#[test]
fn two_qps_share_one_srq_and_the_limit_fires() {
    let mut p = Pair::new();
    let srq = p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..2 {
        let qa = qp_on(&mut p.a, None);
        let qb = qp_on(&mut p.b, Some(srq));
        up(&mut p.a.hca, qa, [10, 0, 0, 2], qb);
        up(&mut p.b.hca, qb, [10, 0, 0, 1], qa);
        pairs.push((qa, qb));
    }
    for i in 0..4u64 {
        let wr = RecvWr::new(i, p.b.addr(1024 * i), 1024, p.b.mr.lkey);
        p.b.hca.post_srq_recv(srq, wr).unwrap();
    }
    assert_eq!(
        p.b.hca.post_recv(pairs[0].1, RecvWr::new(9, p.b.addr(0), 8, p.b.mr.lkey)),
        Err(PostRecvError::UsesSrq)
    );
    p.b.hca.modify_srq(srq, 3).unwrap();
    p.b.hca.req_notify_cq(p.b.cq, false).unwrap();
    for (k, (qa, _)) in pairs.iter().enumerate() {
        p.a.write_mem(0, &[k as u8 + 1; 8]);
        let wr = SendWr::new(k as u64, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey);
        p.a.hca.post_send(*qa, wr).unwrap();
        p.run();
    }
    let wb = p.b.poll();
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.qp_num)).collect::<Vec<_>>(),
        vec![(0, pairs[0].1.value()), (1, pairs[1].1.value())]
    );
    assert_eq!(p.b.read_mem(0, 8), vec![1; 8]);
    assert_eq!(p.b.read_mem(1024, 8), vec![2; 8]);
    // 4 → 3 → 2 left: below the limit 3 once, event once, limit disarmed
    assert_eq!(p.b.hca.poll_async_event(), Some(AsyncEvent::SrqLimitReached(srq)));
    assert_eq!(p.b.hca.poll_async_event(), None);
    assert_eq!(p.b.hca.query_srq(srq).unwrap().1, 2);
    assert_eq!(p.b.hca.query_srq(srq).unwrap().0.srq_limit, 0);
    // the armed CQ notified once (one-shot)
    assert_eq!(p.b.hca.poll_comp_event(), Some(p.b.cq));
    assert_eq!(p.b.hca.poll_comp_event(), None);
    assert!(matches!(p.b.hca.destroy_srq(srq), Err(DestroySrqError::InUse { users: 2, .. })));
    for (_, qb) in &pairs {
        p.b.hca.destroy_qp(*qb).unwrap();
    }
    p.b.hca.destroy_srq(srq).unwrap();
}

#[test]
fn empty_srq_means_rnr() {
    let mut p = Pair::new();
    let srq = p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
    let qa = qp_on(&mut p.a, None);
    let qb = qp_on(&mut p.b, Some(srq));
    up(&mut p.a.hca, qa, [10, 0, 0, 2], qb);
    up(&mut p.b.hca, qb, [10, 0, 0, 1], qa);
    let wr = SendWr::new(1, WrOpcode::Send).sge(p.a.addr(0), 8, p.a.mr.lkey);
    p.a.hca.post_send(qa, wr).unwrap();
    p.run_with(Instant::from_micros(15), |_, _| Action::Deliver);
    assert_eq!(p.b.counters().send_rnr_err, 2);
    p.b.hca.post_srq_recv(srq, RecvWr::new(5, p.b.addr(0), 64, p.b.mr.lkey)).unwrap();
    p.run();
    assert_eq!(p.b.poll()[0].wr_id, 5);
    assert_eq!(p.a.poll()[0].status, WcStatus::Success);
    assert_eq!(
        p.b.hca.create_srq(p.b.pd, SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 4 }),
        Err(CreateSrqError::BadLimit { limit: 4, max_wr: 4 })
    );
}
