//! The safe verbs API end to end on the simulated fabric.

use crate::common;
use common::{connect_qps, Node};
use roce_sim::SimNet;
use roce_verbs_api::*;
use std::net::IpAddr;

/// Everything one side of a connection needs, in one struct (the point of
/// the `Arc`-to-parent design: no lifetimes tie these together).
fn node(net: &SimNet, name: &str, addr: &str) -> Node {
    common::node(net.add_device(name, addr.parse::<IpAddr>().unwrap()).open())
}

fn pair(seed: u64) -> (SimNet, Node, Node) {
    let net = SimNet::new(seed);
    let a = node(&net, "roce0", "10.0.0.1");
    let b = node(&net, "roce1", "10.0.0.2");
    connect_qps(&a.qp, &b.qp, 0x1000, 0xFF_FFF0, &ConnectOptions::default());
    (net, a, b)
}

fn one(net: &SimNet, cq: &Cq) -> WorkCompletion {
    let v = net.poll_cq_blocking(cq, 1, 100_000).unwrap();
    assert_eq!(v.len(), 1, "no completion");
    v[0]
}

#[test]
fn reset_init_rtr_rts_dance() {
    let net = SimNet::new(1);
    let a = node(&net, "roce0", "10.0.0.1");
    let b = node(&net, "roce1", "10.0.0.2");
    let opts = ConnectOptions { mtu: PathMtu::Mtu2048, ..ConnectOptions::default() };
    assert_eq!(a.qp.state(), QpState::Reset);
    a.qp.to_init(&opts).unwrap();
    assert_eq!(a.qp.state(), QpState::Init);
    a.qp.to_rtr(&b.qp.endpoint(77), &opts).unwrap();
    assert_eq!(a.qp.state(), QpState::Rtr);
    a.qp.to_rts(1234, &opts).unwrap();
    assert_eq!(a.qp.state(), QpState::Rts);
    let (attr, init) = a.qp.query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Rts));
    assert_eq!(attr.path_mtu, Some(PathMtu::Mtu2048));
    assert_eq!(attr.dest_qp_num, b.qp.qpn().value());
    assert_eq!(attr.rq_psn, 77);
    assert_eq!(attr.sq_psn, 1234);
    assert_eq!((attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer), (14, 7, 7, 12));
    assert_eq!((attr.max_rd_atomic, attr.max_dest_rd_atomic), (16, 16));
    assert_eq!(attr.ah_attr.unwrap().dgid, "10.0.0.2".parse::<IpAddr>().unwrap());
    assert_eq!(init.cap.max_send_wr, 32);
    // and back to RESET, which is always allowed
    a.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
    assert_eq!(a.qp.state(), QpState::Reset);
}

#[test]
fn invalid_modify_names_the_missing_attribute() {
    let net = SimNet::new(2);
    let a = node(&net, "roce0", "10.0.0.1");
    a.qp.to_init(&ConnectOptions::default()).unwrap();
    let attr = QpAttr::new()
        .state(QpState::Rtr)
        .ah(AhAttr::new("10.0.0.2".parse().unwrap()))
        .mtu(PathMtu::Mtu1024)
        .rq_psn(0)
        .max_dest_rd_atomic(1)
        .min_rnr_timer(12);
    let e = a.qp.modify(&attr).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("INIT -> RTR") && msg.contains("missing [DEST_QPN]"), "{msg}");
    assert_eq!(a.qp.state(), QpState::Init);
    // RESET -> RTS is not a transition at all
    let b = node(&net, "roce1", "10.0.0.2");
    let e = b.qp.modify(&QpAttr::new().state(QpState::Rts)).unwrap_err();
    assert!(e.to_string().contains("RESET -> RTS"), "{e}");
}

#[test]
fn send_recv_with_data() {
    let (net, a, b) = pair(3);
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.mr.write(100, &msg).unwrap();
    b.qp.post_recv(RecvWr::new(9, b.mr.addr() + 500, 4096, b.mr.lkey())).unwrap();
    a.qp.post_send(SendWr::new(1, WrOpcode::Send).sge(a.mr.addr() + 100, 3000, a.mr.lkey()))
        .unwrap();
    let r = one(&net, &b.cq);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 3000)
    );
    assert_eq!(r.src_qp, a.qp.qpn().value());
    let s = one(&net, &a.cq);
    assert_eq!((s.wr_id, s.status, s.opcode), (1, WcStatus::Success, WcOpcode::Send));
    let mut got = vec![0u8; 3000];
    b.mr.read(500, &mut got).unwrap();
    assert_eq!(got, msg);
    assert_eq!(b.ctx.counters().rdma_recvs, 1);
    assert_eq!(a.ctx.counters().rdma_sends, 1);
}

#[test]
fn rdma_write_and_read() {
    let (net, a, b) = pair(4);
    let data: Vec<u8> = (0..5000u32).map(|i| (i ^ (i >> 8)) as u8).collect();
    a.mr.write(0, &data).unwrap();
    a.qp.post_send(
        SendWr::new(1, WrOpcode::RdmaWrite)
            .sge(a.mr.addr(), 5000, a.mr.lkey())
            .remote(b.mr.remote_addr(8192), b.mr.rkey()),
    )
    .unwrap();
    let w = one(&net, &a.cq);
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(&b.mr.to_vec()[8192..8192 + 5000], &data[..]);

    // read it back into another place of A's region
    a.qp.post_send(
        SendWr::new(2, WrOpcode::RdmaRead)
            .sge(a.mr.addr() + 20000, 5000, a.mr.lkey())
            .remote(b.mr.remote_addr(8192), b.mr.rkey()),
    )
    .unwrap();
    let r = one(&net, &a.cq);
    assert_eq!(
        (r.wr_id, r.status, r.opcode, r.byte_len),
        (2, WcStatus::Success, WcOpcode::RdmaRead, 5000)
    );
    let mut back = vec![0u8; 5000];
    a.mr.read(20000, &mut back).unwrap();
    assert_eq!(back, data);
}

#[test]
fn atomics_compare_swap_and_fetch_add() {
    let (net, a, b) = pair(5);
    b.mr.write_u64(64, 40).unwrap();
    let atomic = |id: u64, op: WrOpcode, cmp_add: u64, swap: u64| {
        let mut wr = SendWr::new(id, op)
            .sge(a.mr.addr() + id * 8, 8, a.mr.lkey())
            .remote(b.mr.remote_addr(64), b.mr.rkey());
        wr.compare_add = cmp_add;
        wr.swap = swap;
        a.qp.post_send(wr).unwrap();
    };
    atomic(1, WrOpcode::AtomicFetchAndAdd, 2, 0); // 40 -> 42, returns 40
    atomic(2, WrOpcode::AtomicCmpAndSwp, 41, 7); // no match, returns 42
    atomic(3, WrOpcode::AtomicCmpAndSwp, 42, 1000); // match: 42 -> 1000
    let wcs = net.poll_cq_blocking(&a.cq, 3, 100_000).unwrap();
    let ids: Vec<(u64, WcStatus, WcOpcode)> =
        wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success, WcOpcode::FetchAdd),
            (2, WcStatus::Success, WcOpcode::CompSwap),
            (3, WcStatus::Success, WcOpcode::CompSwap)
        ]
    );
    assert_eq!(a.mr.read_u64(8).unwrap(), 40);
    assert_eq!(a.mr.read_u64(16).unwrap(), 42);
    assert_eq!(a.mr.read_u64(24).unwrap(), 42);
    assert_eq!(b.mr.read_u64(64).unwrap(), 1000);
}

#[test]
fn bad_rkey_gives_remote_access_error() {
    let (net, a, b) = pair(6);
    let bad = RKey::new(b.mr.rkey().value() ^ 0x5500);
    a.qp.post_send(
        SendWr::new(1, WrOpcode::RdmaWrite)
            .sge(a.mr.addr(), 64, a.mr.lkey())
            .remote(b.mr.addr(), bad),
    )
    .unwrap();
    a.qp.post_send(SendWr::new(2, WrOpcode::Send).sge(a.mr.addr(), 8, a.mr.lkey())).unwrap();
    let wcs = net.poll_cq_blocking(&a.cq, 2, 100_000).unwrap();
    assert_eq!(wcs[0].wr_id, 1);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert_eq!(wcs[0].status.to_string(), "remote access error");
    // the QP is in ERR: the next WR is flushed
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::WrFlushErr));
    assert_eq!(a.qp.state(), QpState::Err);
    assert!(b.ctx.counters().naks_sent >= 1);
    assert!(b.mr.to_vec().iter().all(|&x| x == 0), "nothing was written");
}

#[test]
fn handles_stored_together_drop_in_any_order() {
    // every permutation-ish order of drops, none panics, and the device is
    // empty afterwards (a new PD/CQ/QP can be created; no leaks visible via
    // explicit destroy of the last handles).
    for order in 0..6 {
        let net = SimNet::new(7);
        let n = node(&net, "roce0", "10.0.0.1");
        let dev_ctx = n.ctx.clone();
        let Node { ctx, pd, cq, mr, qp } = n;
        match order {
            0 => {
                drop(ctx);
                drop(pd);
                drop(cq);
                drop(mr);
                drop(qp);
            }
            1 => {
                drop(qp);
                drop(mr);
                drop(cq);
                drop(pd);
                drop(ctx);
            }
            2 => {
                drop(pd);
                drop(qp);
                drop(ctx);
                drop(mr);
                drop(cq);
            }
            3 => {
                drop(cq);
                drop(mr);
                drop(pd);
                drop(qp);
                drop(ctx);
            }
            4 => {
                drop(mr);
                drop(ctx);
                drop(qp);
                drop(cq);
                drop(pd);
            }
            _ => {
                // explicit destroys: children first succeed
                assert!(matches!(
                    pd.clone().destroy(),
                    Err(DestroyError::Shared { what: "PD", .. })
                ));
                qp.destroy().unwrap();
                mr.destroy().unwrap();
                cq.destroy().unwrap();
                pd.destroy().unwrap();
                drop(ctx);
            }
        }
        // the device is still usable through another context
        let pd = dev_ctx.alloc_pd().unwrap();
        let cq = dev_ctx.create_cq(4).unwrap();
        let qp = pd.qp_builder(&cq, &cq).build().unwrap();
        assert_eq!(qp.state(), QpState::Reset);
        // the first QP was destroyed: its QPN (17) is gone, the new one differs
        assert_ne!(qp.qpn().value(), 17);
        dev_ctx.with_hca(|h| assert!(h.query_qp(Qpn::new(17)).is_err()));
    }
}

#[test]
fn destroy_reports_shared_and_verb_errors() {
    let net = SimNet::new(8);
    let n = node(&net, "roce0", "10.0.0.1");
    let e = n.cq.clone().destroy().unwrap_err();
    assert!(e.to_string().contains("CQ still has"), "{e}");
    let mr2 = n.mr.clone();
    assert!(matches!(n.mr.destroy(), Err(DestroyError::Shared { what: "MR", others: 1 })));
    // after the clone is gone the region can be destroyed; the shared
    // failure above did not deregister it
    assert_eq!(mr2.len(), 1 << 16);
    mr2.destroy().unwrap();
}

#[test]
fn mr_bounds_are_checked() {
    let net = SimNet::new(9);
    let n = node(&net, "roce0", "10.0.0.1");
    let mut b = [0u8; 8];
    assert!(n.mr.read((1 << 16) - 4, &mut b).is_err());
    assert!(n.mr.write(u64::MAX, &b).is_err());
    assert!(n.mr.try_sge((1 << 16) - 4, 8).is_err());
    let s = n.mr.try_sge(16, 8).unwrap();
    assert_eq!((s.addr, s.length, s.lkey), (n.mr.addr() + 16, 8, n.mr.lkey()));
    // a local SGE outside the region fails at execution with LOC_PROT_ERR
    let (net, a, _b) = pair(10);
    a.qp.post_send(SendWr::new(5, WrOpcode::Send).sge(a.mr.addr() + (1 << 16), 8, a.mr.lkey()))
        .unwrap();
    let wc = one(&net, &a.cq);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::LocProtErr));
}

/// `Cq::poll` takes up to 16 completions on the stack first (an empty poll
/// allocates nothing) and the rest into the vector: 30 flushed receives
/// come out whole and in order through polls of 100, 20 and 5.
#[test]
fn poll_returns_more_than_its_stack_batch_in_order() {
    let (net, _a, b) = pair(12);
    for i in 0..30u64 {
        b.qp.post_recv(RecvWr::new(100 + i, b.mr.addr() + 64 * i, 64, b.mr.lkey())).unwrap();
    }
    assert!(b.cq.poll(100).unwrap().is_empty());
    b.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    assert!(net.run_until_idle(10_000));
    let first = b.cq.poll(20).unwrap();
    let second = b.cq.poll(5).unwrap();
    let rest = b.cq.poll(100).unwrap();
    assert_eq!((first.len(), second.len(), rest.len()), (20, 5, 5));
    let all: Vec<(u64, WcStatus)> =
        first.iter().chain(&second).chain(&rest).map(|w| (w.wr_id, w.status)).collect();
    let want: Vec<(u64, WcStatus)> = (100..130).map(|i| (i, WcStatus::WrFlushErr)).collect();
    assert_eq!(all, want);
    assert!(b.cq.poll(100).unwrap().is_empty());
}

/// An overflowed CQ through `Cq::poll` past its stack batch: what the CQ
/// holds comes out whole and in order, then `Overrun`.
#[test]
fn poll_of_an_overflowed_cq_returns_what_it_holds_then_overrun() {
    let net = SimNet::new(13);
    let a = node(&net, "roce0", "10.0.0.1");
    let ctx = net.add_device("roce1", "10.0.0.2".parse::<IpAddr>().unwrap()).open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(20).unwrap();
    let mr = pd.reg_mr(1 << 16, common::ALL).unwrap();
    let qp = pd.qp_builder(&cq, &cq).max_send_wr(32).max_recv_wr(32).build().unwrap();
    connect_qps(&a.qp, &qp, 0x10, 0x20, &ConnectOptions::default());
    for i in 0..32u64 {
        qp.post_recv(RecvWr::new(200 + i, mr.addr() + 64 * i, 64, mr.lkey())).unwrap();
    }
    let depth = cq.depth() as usize;
    assert!(depth > 16 && depth < 32, "a CQ of 20 holds {depth}");
    qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    assert!(net.run_until_idle(10_000));
    let got = cq.poll(100).unwrap();
    let want: Vec<(u64, WcStatus)> =
        (200..200 + depth as u64).map(|i| (i, WcStatus::WrFlushErr)).collect();
    assert_eq!(got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(), want);
    assert!(matches!(cq.poll(100), Err(PollCqError::Overrun(_))));
}

#[test]
fn devices_live_on_the_sim_and_run_until() {
    let (net, a, b) = pair(11);
    assert_eq!(net.devices().len(), 2);
    assert_eq!(a.ctx.addr(), "10.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!(a.ctx.query_gid(1).unwrap().to_string(), "::ffff:10.0.0.1");
    assert_eq!(a.ctx.query_gid(0).unwrap().to_string(), "fe80::aff:fe00:1");
    assert_eq!(a.ctx.query_port().active_mtu, PathMtu::Mtu4096);
    b.qp.post_recv(RecvWr::new(1, b.mr.addr(), 64, b.mr.lkey())).unwrap();
    a.qp.post_send(SendWr::new(1, WrOpcode::Send).inline(b"inline!")).unwrap();
    let cq = b.cq.clone();
    let mut got = Vec::new();
    assert!(net.run_until(
        || {
            got.extend(cq.poll(4).unwrap());
            !got.is_empty()
        },
        10_000
    ));
    assert_eq!(got[0].byte_len, 7);
    assert_eq!(&b.mr.to_vec()[..7], b"inline!");
    assert!(net.run_until_idle(10_000));
    assert!(net.stats().delivered >= 2);
    assert!(net.elapsed().as_nanos() > 0);
    let _ = &a.pd;
}

/// No heap allocation per operation in steady state (issue 41): 10 000
/// WRITEs and SENDs through the verbs API on the simulator, counted by a
/// counting global allocator (per thread: the simulator runs in the test's
/// thread), after a warm-up that fills the packet-buffer pools.
mod alloc_steady {

    use crate::common::{connect_qps, node, two_contexts, Node};
    use roce_sim::SimNet;
    use roce_verbs_api::*;

    /// Allocations `f` made in this thread.
    fn allocations(f: impl FnOnce()) -> u64 {
        allocation_counter::measure(f).count_total
    }

    /// Post `op` from `a` to `b` (a receive first for a SEND), step the
    /// network until both completions are polled (into arrays: no
    /// allocation), and check them.
    fn one_op(net: &SimNet, a: &Node, b: &Node, op: WrOpcode, i: u64, len: u32) {
        if op == WrOpcode::Send {
            b.qp.post_recv(RecvWr::new(i, b.mr.addr(), len, b.mr.lkey())).unwrap();
        }
        let wr = SendWr::new(i, op)
            .sge(a.mr.addr(), len, a.mr.lkey())
            .remote(b.mr.remote_addr(4096), b.mr.rkey());
        a.qp.post_send(wr).unwrap();
        let mut wcs = [WorkCompletion::EMPTY; 4];
        let want_b = usize::from(op == WrOpcode::Send);
        let (mut got_a, mut got_b) = (0, 0);
        for _ in 0..10_000 {
            if got_a == 1 && got_b == want_b {
                break;
            }
            net.step();
            let n = a.cq.poll_into(&mut wcs).unwrap();
            for w in &wcs[..n] {
                assert_eq!((w.wr_id, w.status), (i, WcStatus::Success));
            }
            got_a += n;
            let n = b.cq.poll_into(&mut wcs).unwrap();
            for w in &wcs[..n] {
                assert_eq!((w.wr_id, w.status, w.byte_len), (i, WcStatus::Success, len));
            }
            got_b += n;
        }
        assert_eq!((got_a, got_b), (1, want_b), "{op:?} {i} completed");
    }

    #[test]
    fn writes_and_sends_allocate_nothing_in_steady_state() {
        let net = SimNet::new(41);
        let (ca, cb) = two_contexts(&net, ["za", "zb"]);
        let (a, b) = (node(ca), node(cb));
        connect_qps(&a.qp, &b.qp, 1, 2, &ConnectOptions::default());
        // bytes checked once: the counted loop moves these same bytes
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        a.mr.write(0, &data).unwrap();
        let ops = [(WrOpcode::RdmaWrite, 64), (WrOpcode::Send, 64), (WrOpcode::RdmaWrite, 3000)];
        for (k, &(op, len)) in ops.iter().enumerate() {
            // warm-up: the CQ's and queues' storage grows, the pools fill
            for i in 0..200 {
                one_op(&net, &a, &b, op, i, len);
            }
            let n = 10_000 / ops.len() as u64;
            let count = allocations(|| {
                for i in 0..n {
                    one_op(&net, &a, &b, op, i, len);
                }
            });
            assert_eq!(
                count, 0,
                "op {k} ({op:?}, {len} bytes): {count} allocations in {n} operations"
            );
        }
        let mut got = vec![0u8; 3000];
        b.mr.read(4096, &mut got).unwrap();
        assert_eq!(got, data, "the WRITEs' bytes");
        b.mr.read(0, &mut got[..64]).unwrap();
        assert_eq!(got[..64], data[..64], "the SENDs' bytes");
    }
}

/// Receives posted without the device lock (issue 41, step 2:
/// `roce_emulator::RqRing`): the limits, the states, and a thread posting
/// while another moves the QP to ERR, RESET and back, or destroys it.
mod rq_ring {
    use crate::common::{connect_qps, node, poll_all, two_contexts};
    use roce_sim::SimNet;
    use roce_verbs_api::*;

    fn recv(b: &crate::common::Node, id: u64) -> RecvWr {
        RecvWr::new(id, b.mr.addr(), 64, b.mr.lkey())
    }

    /// RESET -> INIT (receives may be posted from there on).
    fn to_init(qp: &Qp) {
        let a = QpAttr::new().state(QpState::Init).pkey_index(0).port(1);
        qp.modify(&a.access_flags(AccessFlags::LOCAL_WRITE)).unwrap();
    }

    #[test]
    fn limits_and_states_are_the_devices() {
        let net = SimNet::new(43);
        let (ca, cb) = two_contexts(&net, ["ra", "rb"]);
        let (a, b) = (node(ca), node(cb));
        // RESET: the device's answer
        assert!(matches!(b.qp.post_recv(recv(&b, 0)), Err(PostRecvError::InvalidState(_))));
        connect_qps(&a.qp, &b.qp, 1, 2, &ConnectOptions::default());
        // 32 receives, then the queue is full; too many SGEs
        for i in 0..32 {
            b.qp.post_recv(recv(&b, i)).unwrap();
        }
        assert!(matches!(b.qp.post_recv(recv(&b, 99)), Err(PostRecvError::QueueFull { max: 32 })));
        let mut five = RecvWr::new(98, b.mr.addr(), 8, b.mr.lkey());
        for _ in 0..4 {
            five.sg_list.push(five.sg_list[0]);
        }
        assert!(matches!(b.qp.post_recv(five), Err(PostRecvError::TooManySge { .. })));
        // a SEND takes the first; one slot is free again
        a.mr.write(0, b"ring").unwrap();
        a.qp.post_send(SendWr::new(7, WrOpcode::Send).sge(a.mr.addr(), 4, a.mr.lkey())).unwrap();
        for _ in 0..100 {
            net.step();
        }
        let got = poll_all(&b.cq);
        assert_eq!(got.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), vec![(0, 4)]);
        b.qp.post_recv(recv(&b, 32)).unwrap();
        assert!(matches!(b.qp.post_recv(recv(&b, 99)), Err(PostRecvError::QueueFull { .. })));
        // ERR flushes all 32 in order; a post in ERR completes at once
        b.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        let flushed = poll_all(&b.cq);
        assert_eq!(
            flushed.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            (1..=32).collect::<Vec<_>>()
        );
        assert!(flushed.iter().all(|w| w.status == WcStatus::WrFlushErr));
        b.qp.post_recv(recv(&b, 40)).unwrap();
        let now = poll_all(&b.cq);
        assert_eq!(
            now.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(40, WcStatus::WrFlushErr)]
        );
        // RESET empties the queue; from INIT on it takes 32 again
        b.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        assert!(matches!(b.qp.post_recv(recv(&b, 0)), Err(PostRecvError::InvalidState(_))));
        to_init(&b.qp);
        for i in 0..32 {
            b.qp.post_recv(recv(&b, 100 + i)).unwrap();
        }
        assert!(matches!(b.qp.post_recv(recv(&b, 99)), Err(PostRecvError::QueueFull { .. })));
    }

    /// One thread posts receives as fast as it can while this one moves the
    /// QP through ERR, RESET and INIT, then destroys its handle: every post
    /// either fails or its WR completes (flushed) exactly once, never
    /// twice, and nothing panics (debug assertions check the counts).
    #[test]
    fn a_thread_posting_while_the_qp_changes_state_loses_nothing_twice() {
        let net = SimNet::new(44);
        let (ca, cb) = two_contexts(&net, ["rc", "rd"]);
        let (a, mut b) = (node(ca), node(cb));
        // a CQ with room for every flush completion of the run
        b.cq = b.ctx.create_cq(32767).unwrap();
        b.qp = b.pd.qp_builder(&b.cq, &b.cq).max_send_wr(32).max_recv_wr(32).build().unwrap();
        connect_qps(&a.qp, &b.qp, 1, 2, &ConnectOptions::default());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let qp = b.qp.clone();
        let (mr_addr, lkey) = (b.mr.addr(), b.mr.lkey());
        let s = stop.clone();
        // the poster posts what it is granted (the flushes of a post in ERR
        // complete at once: a grant bounds what the CQ must hold)
        let granted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let tries = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (g, t) = (granted.clone(), tries.clone());
        let poster = std::thread::spawn(move || {
            use std::sync::atomic::Ordering::Relaxed;
            let mut ok = Vec::new();
            let mut id = 0u64;
            while !s.load(Relaxed) {
                if id >= g.load(Relaxed) {
                    std::thread::yield_now();
                    continue;
                }
                id += 1;
                if qp.post_recv(RecvWr::new(id, mr_addr, 64, lkey)).is_ok() {
                    ok.push(id);
                }
                t.store(id, Relaxed);
            }
            ok
        });
        // grant `n` more posts and wait until they are made (1 s at most)
        let more = |n: u64| {
            use std::sync::atomic::Ordering::Relaxed;
            let want = granted.fetch_add(n, Relaxed) + n;
            let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
            while tries.load(Relaxed) < want / 2 && std::time::Instant::now() < end {
                std::thread::yield_now();
            }
        };
        let mut seen = std::collections::BTreeMap::<u64, usize>::new();
        let drain = |seen: &mut std::collections::BTreeMap<u64, usize>| {
            for w in poll_all(&b.cq) {
                *seen.entry(w.wr_id).or_default() += 1;
            }
        };
        for _ in 0..50 {
            more(100);
            b.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
            more(100);
            drain(&mut seen);
            b.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            to_init(&b.qp);
            drain(&mut seen);
        }
        more(20);
        b.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let ok = poster.join().expect("the poster did not panic");
        // what was posted after the last ERR completes now (flushed by the
        // device's path); the rest was dropped by a RESET, without completions
        b.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        drain(&mut seen);
        assert!(seen.values().all(|&n| n == 1), "a receive completed twice");
        let posted: std::collections::BTreeSet<u64> = ok.iter().copied().collect();
        assert!(seen.keys().all(|id| posted.contains(id)), "a completion for a failed post");
        assert!(!ok.is_empty() && !seen.is_empty(), "{} posted, {} flushed", ok.len(), seen.len());
        drop(b.qp);
    }
}

/// `ibv_post_send` without the device lock (issue 41, step 3): the QP's
/// send queue checks and holds what is posted in RTS until the device
/// answers its doorbell; other states take the device's path.
mod sq_ring {
    use crate::common::{connect_qps, node, poll_all, two_contexts, Node};
    use roce_sim::SimNet;
    use roce_verbs_api::*;

    fn write(a: &Node, b: &Node, id: u64) -> SendWr {
        SendWr::new(id, WrOpcode::RdmaWrite)
            .sge(a.mr.addr(), 8, a.mr.lkey())
            .remote(b.mr.addr() + 8 * (id % 64), b.mr.rkey())
            .with_flags(SendFlags::SIGNALED)
    }

    fn ids(v: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
        v.iter().map(|w| (w.wr_id, w.status)).collect()
    }

    #[test]
    fn limits_states_and_order_are_the_devices() {
        let net = SimNet::new(45);
        let (ca, cb) = two_contexts(&net, ["sa", "sb"]);
        let (a, b) = (node(ca), node(cb));
        // RESET and INIT: the device's answer
        let e = a.qp.post_send(write(&a, &b, 0));
        assert!(matches!(e, Err(PostSendError::InvalidState(QpState::Reset))), "{e:?}");
        connect_qps(&a.qp, &b.qp, 1, 2, &ConnectOptions::default());
        // the checks the device made, made by the queue: too many SGEs, a
        // message over max_msg_sz, inline data over max_inline_data
        let mut five = write(&a, &b, 90);
        for _ in 0..4 {
            five.sg_list.push(five.sg_list[0]);
        }
        assert!(matches!(a.qp.post_send(five), Err(PostSendError::TooManySge { n: 5, .. })));
        let huge = SendWr::new(91, WrOpcode::RdmaWrite)
            .sge(a.mr.addr(), 0x8000_0001, a.mr.lkey())
            .remote(b.mr.addr(), b.mr.rkey());
        assert!(matches!(a.qp.post_send(huge), Err(PostSendError::MessageTooLarge { .. })));
        let big_inline = SendWr::new(92, WrOpcode::RdmaWrite)
            .inline(&[7u8; 4096])
            .remote(b.mr.addr(), b.mr.rkey());
        assert!(matches!(a.qp.post_send(big_inline), Err(PostSendError::InlineTooLarge { .. })));
        // 32 WRITEs held (nothing stepped), the 33rd refused; a refused
        // post holds no slot
        for i in 1..=32u64 {
            a.mr.write(0, &i.to_le_bytes()).unwrap();
            a.qp.post_send(write(&a, &b, i)).unwrap();
        }
        let e = a.qp.post_send(write(&a, &b, 33));
        assert!(matches!(e, Err(PostSendError::QueueFull { max: 32 })), "{e:?}");
        net.run_until_idle(100_000);
        let done = poll_all(&a.cq);
        let want: Vec<_> = (1..=32).map(|i| (i, WcStatus::Success)).collect();
        assert_eq!(ids(&done), want, "every WRITE once, in order");
        // held by the queue when the QP moves to ERR: flushed in order,
        // before a post made in ERR (the device's path: at once)
        for i in 40..43 {
            a.qp.post_send(write(&a, &b, i)).unwrap();
        }
        a.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        a.qp.post_send(write(&a, &b, 43)).unwrap();
        let flushed = poll_all(&a.cq);
        let want: Vec<_> = (40..44).map(|i| (i, WcStatus::WrFlushErr)).collect();
        assert_eq!(ids(&flushed), want);
        // held when the QP is reset: gone without completions; RTS again
        // takes 32 new posts (a new incarnation's slots)
        a.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        b.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        connect_qps(&a.qp, &b.qp, 5, 6, &ConnectOptions::default());
        for i in 50..53 {
            a.qp.post_send(write(&a, &b, i)).unwrap();
        }
        a.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        assert!(poll_all(&a.cq).is_empty(), "a reset completes nothing");
        b.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
        connect_qps(&a.qp, &b.qp, 7, 8, &ConnectOptions::default());
        for i in 60..92 {
            a.qp.post_send(write(&a, &b, i)).unwrap();
        }
        assert!(matches!(a.qp.post_send(write(&a, &b, 92)), Err(PostSendError::QueueFull { .. })));
        net.run_until_idle(100_000);
        assert_eq!(poll_all(&a.cq).len(), 32);
        // the bytes landed: a WRITE reads its source when it is sent, and
        // nothing was sent before the last of the first 32 posts wrote 32
        let mut got = [0u8; 8];
        b.mr.read(8 * (91 % 64), &mut got).unwrap();
        assert_eq!(got, 32u64.to_le_bytes());
    }

    /// One thread posts WRITEs as fast as it is allowed while this one
    /// runs the fabric and moves the QP through ERR, RESET and back to
    /// RTS: every completion is of a post that succeeded, none completes
    /// twice, and both successes and flushes happen.
    #[test]
    fn a_thread_posting_while_the_qp_changes_state_completes_nothing_twice() {
        let net = SimNet::new(46);
        let (ca, cb) = two_contexts(&net, ["sc", "sd"]);
        let (mut a, b) = (node(ca), node(cb));
        a.cq = a.ctx.create_cq(32767).unwrap();
        a.qp = a.pd.qp_builder(&a.cq, &a.cq).max_send_wr(32).max_recv_wr(32).build().unwrap();
        connect_qps(&a.qp, &b.qp, 1, 2, &ConnectOptions::default());
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let granted = Arc::new(AtomicU64::new(0));
        let tries = Arc::new(AtomicU64::new(0));
        let (qp, s, g, t) = (a.qp.clone(), stop.clone(), granted.clone(), tries.clone());
        let (addr, lkey, raddr, rkey) = (a.mr.addr(), a.mr.lkey(), b.mr.addr(), b.mr.rkey());
        let poster = std::thread::spawn(move || {
            let mut ok = Vec::new();
            let mut id = 0u64;
            while !s.load(Relaxed) {
                if id >= g.load(Relaxed) {
                    std::thread::yield_now();
                    continue;
                }
                id += 1;
                let wr = SendWr::new(id, WrOpcode::RdmaWrite)
                    .sge(addr, 8, lkey)
                    .remote(raddr, rkey)
                    .with_flags(SendFlags::SIGNALED);
                if qp.post_send(wr).is_ok() {
                    ok.push(id);
                }
                t.store(id, Relaxed);
            }
            ok
        });
        let more = |n: u64| {
            let want = granted.fetch_add(n, Relaxed) + n;
            let end = std::time::Instant::now() + std::time::Duration::from_secs(1);
            while tries.load(Relaxed) < want / 2 && std::time::Instant::now() < end {
                std::thread::yield_now();
            }
        };
        let mut seen = std::collections::BTreeMap::<u64, Vec<WcStatus>>::new();
        let drain = |a: &Node, seen: &mut std::collections::BTreeMap<u64, Vec<WcStatus>>| {
            for w in poll_all(&a.cq) {
                seen.entry(w.wr_id).or_default().push(w.status);
            }
        };
        for round in 0..30u32 {
            more(40);
            for _ in 0..20 {
                net.run_until_idle(10_000);
                drain(&a, &mut seen);
            }
            a.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
            more(40);
            // (one post of this thread's in ERR: flushed at once, whatever
            // the poster managed meanwhile)
            let mine = (1 << 40) + u64::from(round);
            let wr = SendWr::new(mine, WrOpcode::RdmaWrite).sge(addr, 8, lkey).remote(raddr, rkey);
            a.qp.post_send(wr).unwrap();
            drain(&a, &mut seen);
            assert_eq!(seen.get(&mine).map(Vec::as_slice), Some(&[WcStatus::WrFlushErr][..]));
            a.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            b.qp.modify(&QpAttr::new().state(QpState::Reset)).unwrap();
            connect_qps(&a.qp, &b.qp, 100 * round, 100 * round + 50, &ConnectOptions::default());
            drain(&a, &mut seen);
        }
        stop.store(true, Relaxed);
        let ok = poster.join().expect("the poster did not panic");
        a.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
        drain(&a, &mut seen);
        let twice: Vec<_> = seen.iter().filter(|(_, v)| v.len() > 1).collect();
        assert!(twice.is_empty(), "completed twice: {twice:?}");
        let posted: std::collections::BTreeSet<u64> = ok.iter().copied().collect();
        let theirs = |id: &&u64| **id < 1 << 40;
        assert!(
            seen.keys().filter(theirs).all(|id| posted.contains(id)),
            "a completion for a failed post"
        );
        let count = |st| seen.iter().filter(|(id, v)| theirs(id) && v[0] == st).count();
        assert!(count(WcStatus::Success) > 0, "none of the poster's WRITEs succeeded: {seen:?}");
    }
}
