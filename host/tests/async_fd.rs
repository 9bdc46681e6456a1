//! Device async events through a pollable descriptor
//! (`AsyncEventChannel`, like `ibv_context.async_fd`): poll(2), blocking
//! and async/await, on the simulated fabric and over UDP loopback.

use crate::common;
use common::{connect, node, readable, Node};
use roce_host::DeviceConfig;
use roce_sim::SimNet;
use roce_verbs_api::*;
use std::time::Duration;

/// A WRITE with a bad rkey: B's responder NAKs it and its QP goes to ERR
/// (QP_FATAL on B), then A's QP fails with REM_ACCESS_ERR (QP_FATAL on A).
fn bad_write(a: &Node) {
    let wr = SendWr::new(9, WrOpcode::RdmaWrite)
        .sge(a.mr.addr(), 8, a.mr.lkey())
        .remote(0xdead_0000, RKey::new(0x0bad_0000));
    a.qp.post_send(wr).unwrap();
}

#[test]
fn sim_fd_readable_with_events_and_not_without() {
    let net = SimNet::new(11);
    let a = node(net.add_device("roce0", "10.0.0.1".parse().unwrap()).open());
    let b = node(net.add_device("roce1", "10.0.0.2".parse().unwrap()).open());
    connect(&a, &b);
    let ch = b.ctx.async_event_channel().unwrap();
    // PORT_ACTIVE is pending from the start
    assert!(readable(&ch, 0));
    assert_eq!(ch.pending(), 1);
    assert_eq!(ch.try_get_event(), Some(AsyncEvent::PortActive));
    assert!(!readable(&ch, 0));
    assert_eq!(ch.try_get_event(), None);
    // the context's channel is one channel
    let again = b.ctx.async_event_channel().unwrap();
    assert_eq!(again.pending(), 0);

    // SRQ limit: armed at 2, reached when the third of four receives is used
    let srq = b.pd.create_srq(8, 1).unwrap();
    for i in 0..4u64 {
        srq.post_recv(RecvWr::new(i, b.mr.addr() + 64 * i, 64, b.mr.lkey())).unwrap();
    }
    srq.set_limit(2).unwrap();
    let qb = b.pd.qp_builder(&b.cq, &b.cq).srq(&srq).build().unwrap();
    let qa = a.pd.qp_builder(&a.cq, &a.cq).build().unwrap();
    let opts = ConnectOptions::default();
    let (ea, eb) = (qa.endpoint(0x300), qb.endpoint(0x400));
    qa.connect(&ea, &eb, &opts).unwrap();
    qb.connect(&eb, &ea, &opts).unwrap();
    for i in 0..2u64 {
        qa.post_send(SendWr::new(i, WrOpcode::Send).sge(a.mr.addr(), 8, a.mr.lkey())).unwrap();
    }
    assert!(net.run_until_idle(100_000));
    ch.process();
    assert!(!readable(&ch, 0), "3 receives left: above the limit");
    qa.post_send(SendWr::new(2, WrOpcode::Send).sge(a.mr.addr(), 8, a.mr.lkey())).unwrap();
    assert!(net.run_until_idle(100_000));
    ch.process();
    assert!(readable(&ch, 0));
    assert_eq!(again.try_get_event(), Some(AsyncEvent::SrqLimitReached(srq.handle())));
    assert!(!readable(&ch, 0), "one event, one readable byte");
    assert_eq!(b.cq.poll(8).unwrap().len(), 3);

    // QP fatal, taken with the blocking call (which drives the fabric)
    bad_write(&a);
    assert_eq!(ch.get_event(Duration::from_secs(1)), Some(AsyncEvent::QpFatal(b.qp.qpn())));
    assert!(!readable(&ch, 0));
    assert_eq!(ch.get_event(Duration::from_millis(10)), None);
    // Context::poll_async_event takes from the same queue
    let ach = a.ctx.async_event_channel().unwrap();
    assert_eq!(a.ctx.poll_async_event(), Some(AsyncEvent::PortActive));
    // A's QP_FATAL (the NAK arrived while B's wait drove the fabric) is next
    assert!(readable(&ach, 0));
    assert_eq!(ach.pending(), 1);
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let got = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), ach.get_event_async()).await
    });
    assert_eq!(got.expect("async event"), AsyncEvent::QpFatal(a.qp.qpn()));
    let wc = a.cq.poll(8).unwrap();
    let failed: Vec<_> = wc.iter().filter(|w| w.status != WcStatus::Success).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].wr_id, failed[0].status), (9, WcStatus::RemAccessErr));
    assert_eq!(a.ctx.poll_async_event(), None);
    assert!(!readable(&ach, 0));
}

#[test]
fn udp_fd_becomes_readable_without_any_call() {
    let open = |n: &str, ip: &str| DeviceConfig::udp(n, ip.parse().unwrap()).open().unwrap().open();
    let a = node(open("afa", "127.0.5.12"));
    let b = node(open("afb", "127.0.5.13"));
    connect(&a, &b);
    let ch = b.ctx.async_event_channel().unwrap();
    assert_eq!(ch.try_get_event(), Some(AsyncEvent::PortActive));
    assert!(!readable(&ch, 0));
    // B's driver thread receives the bad WRITE, raises QP_FATAL and fills the fd
    bad_write(&a);
    assert!(readable(&ch, 5000), "fd readable within 5 s");
    assert_eq!(ch.try_get_event(), Some(AsyncEvent::QpFatal(b.qp.qpn())));
    assert!(!readable(&ch, 0));
    // A: blocking and async waits on a threaded driver
    let ach = a.ctx.async_event_channel().unwrap();
    assert_eq!(ach.get_event(Duration::from_secs(5)), Some(AsyncEvent::PortActive));
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let got = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), ach.get_event_async()).await
    });
    assert_eq!(got.expect("async event"), AsyncEvent::QpFatal(a.qp.qpn()));
    let wc = a.cq.poll(8).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::RemAccessErr));
    assert_eq!(ach.get_event(Duration::from_millis(50)), None);
    assert_eq!(b.ctx.counters().naks_sent, 1);
}
