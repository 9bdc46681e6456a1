//! Completion channels (blocking, async, fd), async events, resize, SQD.

use crate::common;
use common::{connect_qps, readable, two_contexts, ALL};
use roce_host::DeviceConfig;
use roce_sim::SimNet;
use roce_verbs_api::*;
use std::time::Duration;

struct Node {
    ctx: Context,
    ch: CompChannel,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn node(ctx: Context, cqe: u32) -> Node {
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(cqe, &ch).unwrap();
    let mr = pd.reg_mr(1 << 16, ALL).unwrap();
    let qp = pd.qp_builder(&cq, &cq).max_send_wr(32).max_recv_wr(32).build().unwrap();
    Node { ctx, ch, cq, mr, qp }
}

fn connect(a: &Node, b: &Node) {
    connect_qps(&a.qp, &b.qp, 0x100, 0x200, &ConnectOptions::default());
}

fn sim_pair(seed: u64, cqe: u32) -> (SimNet, Node, Node) {
    let net = SimNet::new(seed);
    let (a, b) = two_contexts(&net, ["roce0", "roce1"]);
    let (a, b) = (node(a, cqe), node(b, cqe));
    connect(&a, &b);
    (net, a, b)
}

fn send(a: &Node, wr_id: u64, flags: SendFlags) {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send).sge(a.mr.addr(), 8, a.mr.lkey());
    wr.flags = flags;
    a.qp.post_send(wr).unwrap();
}

fn recv(b: &Node, wr_id: u64) {
    b.qp.post_recv(RecvWr::new(wr_id, b.mr.addr() + 64 * wr_id, 64, b.mr.lkey())).unwrap();
}

/// `b`'s next CQ event, awaited on a tokio current-thread runtime (the
/// future drives the device) for at most 5 s.
fn cq_event_on_tokio(b: &Node) -> Result<Cq, tokio::time::error::Elapsed> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), b.ch.get_cq_event_async()).await
    })
}

#[test]
fn solicited_only_wakes_only_on_se_one_event_per_arming_and_acks() {
    let (net, a, b) = sim_pair(1, 64);
    for i in 0..4 {
        recv(&b, i);
    }
    b.cq.req_notify(true).unwrap();
    send(&a, 1, SendFlags::EMPTY);
    assert!(net.run_until_idle(100_000));
    assert_eq!(b.cq.poll(8).unwrap().len(), 1, "the plain SEND arrived");
    assert!(b.ch.get_cq_event(Duration::from_millis(10)).is_none(), "no event without SE");
    assert!(!readable(&b.ch, 0));
    send(&a, 2, SendFlags::SOLICITED);
    let cq = b.ch.get_cq_event(Duration::from_secs(1)).expect("SE wakes");
    assert_eq!(cq.handle(), b.cq.handle());
    assert_eq!(b.cq.unacked_events(), 1);
    // one event per arming: the next SE send gives none until re-armed
    send(&a, 3, SendFlags::SOLICITED);
    assert!(net.run_until_idle(100_000));
    assert!(b.ch.get_cq_event(Duration::from_millis(10)).is_none());
    assert_eq!(b.cq.poll(8).unwrap().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1, 2]);
    // an error completion wakes a solicited-only arming
    b.cq.req_notify(true).unwrap();
    b.qp.modify(&QpAttr::new().state(QpState::Err)).unwrap();
    let cq = b.ch.get_cq_event(Duration::from_secs(1)).expect("error wakes");
    assert_eq!(b.cq.unacked_events(), 2);
    cq.ack_events(1);
    assert_eq!(b.cq.unacked_events(), 1);
    b.cq.ack_events(5); // never below zero
    assert_eq!(b.cq.unacked_events(), 0);
    let w = b.cq.poll(8).unwrap();
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::WrFlushErr));
}

#[test]
fn fd_becomes_readable_and_tokio_get_resolves_on_sim() {
    let (net, a, b) = sim_pair(2, 64);
    recv(&b, 0);
    recv(&b, 1);
    b.cq.req_notify(false).unwrap();
    send(&a, 1, SendFlags::EMPTY);
    assert!(!readable(&b.ch, 0));
    assert!(net.run_until_idle(100_000));
    b.ch.process();
    assert!(readable(&b.ch, 0), "fd readable with an event pending");
    let cq = b.ch.try_get_cq_event().expect("event");
    assert_eq!(cq.handle(), b.cq.handle());
    assert!(!readable(&b.ch, 0), "drained");
    cq.ack_events(1);
    // async on a tokio current-thread runtime (the future drives the sim)
    b.cq.req_notify(false).unwrap();
    send(&a, 2, SendFlags::EMPTY);
    assert_eq!(cq_event_on_tokio(&b).expect("event within 5 s").handle(), b.cq.handle());
    assert_eq!(b.cq.poll(8).unwrap().len(), 2);
}

#[test]
fn port_active_is_the_first_async_event_of_a_context() {
    let (_net, a, _b) = sim_pair(3, 64);
    assert_eq!(a.ctx.poll_async_event(), Some(AsyncEvent::PortActive));
    assert_eq!(a.ctx.poll_async_event(), None);
}

#[test]
fn cq_overflow_raises_cq_err_and_qp_fatal() {
    let (_net, a, b) = sim_pair(4, 1);
    assert_eq!(b.ctx.poll_async_event(), Some(AsyncEvent::PortActive));
    for i in 0..3 {
        recv(&b, i);
    }
    send(&a, 1, SendFlags::EMPTY);
    send(&a, 2, SendFlags::EMPTY);
    let e1 = b.ctx.get_async_event(Duration::from_secs(1));
    assert_eq!(e1, Some(AsyncEvent::CqErr(b.cq.handle())));
    let e2 = b.ctx.get_async_event(Duration::from_secs(1));
    assert_eq!(e2, Some(AsyncEvent::QpFatal(b.qp.qpn())));
    assert_eq!(b.qp.state(), QpState::Err);
    assert_eq!(b.ctx.counters().cq_overflow, 1);
}

#[test]
fn resize_grows_and_refuses_shrinking_below_entries() {
    let (net, a, b) = sim_pair(5, 2);
    for i in 0..3 {
        recv(&b, i);
    }
    send(&a, 1, SendFlags::EMPTY);
    send(&a, 2, SendFlags::EMPTY);
    assert!(net.run_until_idle(100_000));
    assert_eq!(b.cq.resize(1), Err(ResizeCqError::BelowEntries { cqe: 1, entries: 2 }));
    assert_eq!(b.cq.depth(), 2);
    b.cq.resize(16).unwrap();
    assert_eq!(b.cq.depth(), 16);
    send(&a, 3, SendFlags::EMPTY);
    assert!(net.run_until_idle(100_000));
    assert_eq!(b.cq.poll(16).unwrap().len(), 3);
    assert_eq!(b.ctx.counters().cq_overflow, 0);
}

#[test]
fn sqd_drain_event_then_resume() {
    let (net, a, b) = sim_pair(6, 64);
    recv(&b, 0);
    recv(&b, 1);
    send(&a, 1, SendFlags::SIGNALED);
    assert_eq!(a.ctx.poll_async_event(), Some(AsyncEvent::PortActive));
    // let the first SEND leave, not yet acknowledged
    net.run_until(|| a.ctx.counters().sent_pkts >= 1, 100);
    send(&a, 2, SendFlags::SIGNALED);
    a.qp.modify(&QpAttr::new().state(QpState::Sqd).en_sqd_async_notify(true)).unwrap();
    let e = a.ctx.get_async_event(Duration::from_secs(1));
    assert_eq!(e, Some(AsyncEvent::SqDrained(a.qp.qpn())));
    assert_eq!(a.cq.poll(8).unwrap().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![1]);
    assert!(net.run_until_idle(100_000));
    assert_eq!(a.cq.poll(8).unwrap().len(), 0, "WQE 2 not started in SQD");
    a.qp.modify(&QpAttr::new().state(QpState::Rts)).unwrap();
    assert!(net.run_until_idle(100_000));
    assert_eq!(a.cq.poll(8).unwrap().iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![2]);
}

#[test]
fn udp_channel_fd_blocking_and_async() {
    let ca = DeviceConfig::udp("ea", "127.0.1.22".parse().unwrap()).open().expect("a").open();
    let cb = DeviceConfig::udp("eb", "127.0.1.23".parse().unwrap()).open().expect("b").open();
    let (a, b) = (node(ca, 64), node(cb, 64));
    connect(&a, &b);
    for i in 0..3 {
        recv(&b, i);
    }
    // fd: the driver thread dispatches, no call on our side
    b.cq.req_notify(true).unwrap();
    send(&a, 1, SendFlags::SOLICITED);
    assert!(readable(&b.ch, 5000), "fd readable within 5 s");
    let cq = b.ch.try_get_cq_event().expect("event");
    cq.ack_events(1);
    // blocking get
    b.cq.req_notify(false).unwrap();
    send(&a, 2, SendFlags::EMPTY);
    assert!(b.ch.get_cq_event(Duration::from_secs(5)).is_some());
    assert!(b.ch.get_cq_event(Duration::from_millis(50)).is_none(), "not re-armed");
    // async get on tokio
    b.cq.req_notify(false).unwrap();
    send(&a, 3, SendFlags::EMPTY);
    assert_eq!(cq_event_on_tokio(&b).expect("async event").handle(), b.cq.handle());
    b.cq.ack_events(2);
    assert_eq!(b.cq.unacked_events(), 0);
    let w = b.cq.poll(8).unwrap();
    assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2]);
}

/// A CQ whose completion event waits in the channel, never taken, can be
/// destroyed (the event goes with it, as the kernel discards it), and the
/// channel's fd is no longer readable for it. Before, the queued event's
/// handle kept the CQ shared: `ibv_srq_pingpong -e` failed now and then
/// with "Couldn't destroy CQ".
#[test]
fn destroying_a_cq_discards_its_untaken_events() {
    let (net, a, b) = sim_pair(11, 16);
    b.cq.req_notify(false).unwrap();
    recv(&b, 1);
    send(&a, 1, SendFlags::SIGNALED);
    assert!(net.run_until_idle(100_000));
    b.ch.process();
    assert!(readable(&b.ch, 0), "the event is queued");
    let Node { qp, cq, ch, .. } = b;
    let wc = cq.poll(4).unwrap();
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success));
    qp.destroy().unwrap();
    cq.destroy().unwrap();
    assert!(!readable(&ch, 0), "the destroyed CQ's event left the channel");
    drop(ch);
}

/// Two events become pending while a thread waits in `get_cq_event`: that
/// thread takes one, and the other must still make the descriptor readable
/// (events pushed during a wait write no byte; the waiter signals what it
/// leaves behind), then stop doing so once it is taken.
#[test]
fn events_left_by_a_waiter_keep_the_fd_readable() {
    let net = SimNet::new(11);
    let a_ctx = net.add_device("roce0", "10.0.0.1".parse().unwrap()).open();
    let b_ctx = net.add_device("roce1", "10.0.0.2".parse().unwrap()).open();
    let (pa, pb) = (a_ctx.alloc_pd().unwrap(), b_ctx.alloc_pd().unwrap());
    let cqa = a_ctx.create_cq(64).unwrap();
    let ch = b_ctx.create_comp_channel().unwrap();
    let cq1 = b_ctx.create_cq_with_channel(16, &ch).unwrap();
    let cq2 = b_ctx.create_cq_with_channel(16, &ch).unwrap();
    let ma = pa.reg_mr(4096, ALL).unwrap();
    let mb = pb.reg_mr(4096, ALL).unwrap();
    let opts = ConnectOptions::default();
    let mut pairs = Vec::new();
    for (k, cq) in [&cq1, &cq2].into_iter().enumerate() {
        let qa = pa.qp_builder(&cqa, &cqa).build().unwrap();
        let qb = pb.qp_builder(cq, cq).build().unwrap();
        let (ea, eb) = (qa.endpoint(0x100 + k as u32), qb.endpoint(0x200 + k as u32));
        qa.connect(&ea, &eb, &opts).unwrap();
        qb.connect(&eb, &ea, &opts).unwrap();
        qb.post_recv(RecvWr::new(k as u64, mb.addr() + 64 * k as u64, 64, mb.lkey())).unwrap();
        pairs.push((qa, qb));
    }
    cq1.req_notify(false).unwrap();
    cq2.req_notify(false).unwrap();
    for (k, (qa, _)) in pairs.iter().enumerate() {
        qa.post_send(SendWr::new(k as u64, WrOpcode::Send).sge(ma.addr(), 8, ma.lkey())).unwrap();
    }
    assert!(net.run_until_idle(100_000));
    assert!(!readable(&ch, 0), "nothing moved to the channel yet");
    // the wait moves both events to the channel and takes the first
    let first = ch.get_cq_event(Duration::from_secs(1)).expect("an event");
    assert!(readable(&ch, 0), "the second event is pending: the fd must say so");
    assert_eq!(ch.pending(), 1);
    let second = ch.try_get_cq_event().expect("the second event");
    assert_ne!(first.handle(), second.handle(), "one event per CQ");
    assert!(!readable(&ch, 0), "no event left, no byte left");
    first.ack_events(1);
    second.ack_events(1);
    assert_eq!(cq1.poll(4).unwrap().len() + cq2.poll(4).unwrap().len(), 2);
}
