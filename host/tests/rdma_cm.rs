//! The rdma_cm API (issue 14): identifiers, events and QPs moved by the
//! connection manager, on the simulated fabric (deterministic, virtual
//! clock: the CM's timeouts take no real time) and on real UDP sockets.

use roce_host::DeviceConfig;
use roce_sim::SimNet;
use roce_verbs_api::rdma_cm::{
    CmError, CmEvent, CmEventKind, CmId, ConnParam, EventChannel, PortSpace, RDMA_UDP_QKEY,
};
use roce_verbs_api::{
    ud_send, AccessFlags, Budget, QpEndpoint, QpState, RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

fn sim() -> (SimNet, EventChannel, EventChannel) {
    let net = SimNet::new(3);
    let a = net.add_device("roce0", "10.0.0.1".parse().unwrap());
    let b = net.add_device("roce1", "10.0.0.2".parse().unwrap());
    (net, EventChannel::new(vec![a]), EventChannel::new(vec![b]))
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn expect(ch: &EventChannel, kind: CmEventKind) -> CmEvent {
    let e = ch.get_event(T).unwrap_or_else(|e| panic!("waiting for {kind}: {e}"));
    assert_eq!(e.kind, kind, "status {}", e.status);
    e
}

fn listen(ch: &EventChannel, addr: &str, ps: PortSpace) -> CmId {
    let l = ch.create_id(ps);
    l.bind_addr(sa(addr)).unwrap();
    l.listen().unwrap();
    l
}

/// An active identifier resolved towards `dst`, with a QP.
fn client(ch: &EventChannel, dst: &str, ps: PortSpace) -> CmId {
    let id = ch.create_id(ps);
    id.resolve_addr(None, sa(dst)).unwrap();
    expect(ch, CmEventKind::AddrResolved);
    id.resolve_route().unwrap();
    expect(ch, CmEventKind::RouteResolved);
    with_qp(&id);
    id
}

/// [`sim`] with a listener at `addr` on the server's channel and a client
/// identifier resolved towards it, with a QP: the network, the server's and
/// the client's channels, the listener and the client identifier.
fn sim_listening(addr: &str, ps: PortSpace) -> (SimNet, EventChannel, EventChannel, CmId, CmId) {
    let (net, server, client_ch) = sim();
    let listener = listen(&server, addr, ps);
    let id = client(&client_ch, addr, ps);
    (net, server, client_ch, listener, id)
}

fn with_qp(id: &CmId) {
    let ctx = id.context().expect("bound to a device");
    let (pd, cq) = (ctx.alloc_pd().unwrap(), ctx.create_cq(64).unwrap());
    id.create_qp(pd.qp_builder(&cq, &cq)).unwrap();
}

#[test]
fn connect_accept_send_disconnect_and_timewait() {
    let (_net, server, client_ch, listener, id) = sim_listening("10.0.0.1:7174", PortSpace::Tcp);
    assert_eq!(id.qp().unwrap().state(), QpState::Init);
    let hello = b"rping-like hello".to_vec();
    id.connect(&ConnParam { private_data: hello.clone(), ..ConnParam::default() }).unwrap();

    let req = expect(&server, CmEventKind::ConnectRequest);
    assert_eq!(req.listen_id.as_ref(), Some(&listener));
    // librdmacm hands the application the bytes after its IP header
    assert_eq!(&req.param.private_data[..hello.len()], &hello[..]);
    assert_eq!(req.param.private_data.len(), 92 - 36);
    assert_eq!(req.param.qp_num, Some(id.qp().unwrap().qpn().value()));
    assert_eq!((req.param.responder_resources, req.param.initiator_depth), (1, 1));
    let child = req.id.clone();
    assert_eq!(child.local_addr(), Some(sa("10.0.0.1:7174")));
    assert_eq!(child.peer_addr(), id.local_addr());
    with_qp(&child);
    child.accept(&ConnParam { private_data: b"welcome".to_vec(), ..ConnParam::default() }).unwrap();
    assert_eq!(child.qp().unwrap().state(), QpState::Rts);

    let est = expect(&client_ch, CmEventKind::Established);
    assert_eq!(&est.param.private_data[..7], b"welcome");
    assert_eq!(est.param.qp_num, Some(child.qp().unwrap().qpn().value()));
    expect(&server, CmEventKind::Established);
    let (qa, qb) = (id.qp().unwrap(), child.qp().unwrap());
    assert_eq!((qa.state(), qb.state()), (QpState::Rts, QpState::Rts));

    // the QPs the CM connected carry data
    let (pa, pb) = (qa.pd().clone(), qb.pd().clone());
    let src = pa.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pb.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 1) as u8).collect();
    src.write(0, &data).unwrap();
    qb.post_recv(RecvWr::new(7, dst.addr(), 4096, dst.lkey())).unwrap();
    qa.post_send(SendWr::new(8, WrOpcode::Send).sge(src.addr(), 3000, src.lkey())).unwrap();
    let wc = qb.recv_cq().poll_blocking(1, Budget::default()).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (7, WcStatus::Success, 3000));
    let mut got = vec![0u8; 3000];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, data);

    // disconnect from the client: both QPs end in ERR, both sides hear it
    id.disconnect().unwrap();
    assert_eq!(qa.state(), QpState::Err);
    expect(&server, CmEventKind::Disconnected);
    assert_eq!(qb.state(), QpState::Err);
    expect(&client_ch, CmEventKind::Disconnected);
    expect(&client_ch, CmEventKind::TimewaitExit);
    expect(&server, CmEventKind::TimewaitExit);
    assert!(client_ch.try_get_event().is_none());
    assert_eq!(
        id.disconnect(),
        Err(CmError::InvalidState("disconnect of an id that is not connected"))
    );
}

#[test]
fn a_rejected_request_carries_the_reason_and_private_data() {
    let (_net, server, client_ch, _l, id) = sim_listening("10.0.0.1:5000", PortSpace::Tcp);
    id.connect(&ConnParam::default()).unwrap();
    let req = expect(&server, CmEventKind::ConnectRequest);
    req.id.reject(b"go away").unwrap();
    let rej = expect(&client_ch, CmEventKind::Rejected);
    assert_eq!(rej.status, 28, "consumer reject");
    assert_eq!(&rej.param.private_data[..7], b"go away");
    assert_eq!(rej.id, id);
}

#[test]
fn nobody_listening_is_rejected_with_reason_8() {
    let (_net, _server, client_ch) = sim();
    let id = client(&client_ch, "10.0.0.1:6000", PortSpace::Tcp);
    id.connect(&ConnParam::default()).unwrap();
    let rej = expect(&client_ch, CmEventKind::Rejected);
    assert_eq!(rej.status, 8, "invalid service ID");
}

#[test]
fn a_peer_that_never_answers_is_unreachable_after_the_cm_retries() {
    let (net, _server, client_ch) = sim();
    // an address nobody has: the REQs go nowhere
    let id = client(&client_ch, "10.0.0.9:7174", PortSpace::Tcp);
    id.connect(&ConnParam::default()).unwrap();
    let t0 = net.now();
    let e = expect(&client_ch, CmEventKind::Unreachable);
    assert_eq!(e.status, -110, "-ETIMEDOUT");
    // 16 REQs (15 retries), each waiting the request timeout (about 4.8 s
    // of virtual time)
    let waited = net.now().saturating_duration_since(t0);
    assert!(waited > Duration::from_secs(70) && waited < Duration::from_secs(85), "{waited:?}");
}

#[test]
fn errors_have_librdmacms_errnos() {
    let (_net, server, client_ch) = sim();
    let _l = listen(&server, "10.0.0.1:7000", PortSpace::Tcp);
    let l2 = server.create_id(PortSpace::Tcp);
    l2.bind_addr(sa("10.0.0.1:7000")).unwrap();
    let e = l2.listen().unwrap_err();
    assert_eq!((e.clone(), e.errno()), (CmError::AddressInUse(7000), 98));
    let stray = server.create_id(PortSpace::Tcp);
    let e = stray.bind_addr(sa("10.9.9.9:1")).unwrap_err();
    assert_eq!(e.errno(), 99);
    assert_eq!(stray.connect(&ConnParam::default()).unwrap_err().errno(), 22);
    let id = client(&client_ch, "10.0.0.1:7000", PortSpace::Tcp);
    let long = ConnParam { private_data: vec![0; 57], ..ConnParam::default() };
    assert_eq!(id.connect(&long), Err(CmError::PrivateDataTooLong { len: 57, max: 56 }));
    assert!(matches!(id.resolve_route(), Ok(())));
    assert_eq!(CmEventKind::TimewaitExit.as_str(), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
    assert_eq!(CmEventKind::TimewaitExit.code(), 15);
    assert_eq!(CmEventKind::Established.code(), 9);
}

#[test]
fn ud_ids_resolve_with_sidr_and_then_send() {
    let (_net, server, client_ch, _l, id) = sim_listening("10.0.0.1:7471", PortSpace::Udp);
    assert_eq!(id.qp().unwrap().state(), QpState::Rts);
    id.connect(&ConnParam { private_data: b"udaddy".to_vec(), ..ConnParam::default() }).unwrap();
    let req = expect(&server, CmEventKind::ConnectRequest);
    assert_eq!(&req.param.private_data[..6], b"udaddy");
    with_qp(&req.id);
    req.id.accept(&ConnParam::default()).unwrap();
    let est = expect(&client_ch, CmEventKind::Established);
    let ud = est.ud.expect("UD parameters");
    let server_qp = req.id.qp().unwrap();
    assert_eq!((ud.qp_num, ud.qkey), (server_qp.qpn().value(), RDMA_UDP_QKEY));

    // a datagram to what SIDR told us
    let qa = id.qp().unwrap();
    let src = qa.pd().reg_mr(256, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = server_qp.pd().reg_mr(256, AccessFlags::LOCAL_WRITE).unwrap();
    src.write(0, b"datagram").unwrap();
    server_qp.post_recv(RecvWr::new(1, dst.addr(), 256, dst.lkey())).unwrap();
    let to = QpEndpoint { addr: "10.0.0.1".parse().unwrap(), qpn: ud.qp_num, psn: 0 };
    let wr =
        ud_send(SendWr::new(2, WrOpcode::Send).sge(src.addr(), 8, src.lkey()), ud.ah, &to, ud.qkey);
    qa.post_send(wr).unwrap();
    let wc = server_qp.recv_cq().poll_blocking(1, Budget::default()).unwrap();
    assert_eq!(
        (wc[0].status, wc[0].opcode, wc[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 48)
    );
    let mut got = [0u8; 8];
    dst.read(40, &mut got).unwrap();
    assert_eq!(&got, b"datagram");
}

#[test]
fn a_udp_request_nobody_serves_is_unreachable() {
    let (_net, _server, client_ch) = sim();
    let id = client(&client_ch, "10.0.0.1:7471", PortSpace::Udp);
    id.connect(&ConnParam::default()).unwrap();
    let e = expect(&client_ch, CmEventKind::Unreachable);
    assert_eq!(e.status, -104, "SIDR_REP status 1: -ECONNRESET");
}

/// Real UDP sockets on loopback: the server waits in another thread.
#[test]
fn over_udp_sockets_on_loopback() {
    let da = DeviceConfig::udp("cma", "127.0.14.2".parse().unwrap()).open().expect("open a");
    let db = DeviceConfig::udp("cmb", "127.0.14.3".parse().unwrap()).open().expect("open b");
    let server = EventChannel::new(vec![da]);
    let client_ch = EventChannel::new(vec![db]);
    let _l = listen(&server, "127.0.14.2:7174", PortSpace::Tcp);
    let srv = std::thread::spawn(move || {
        let req = expect(&server, CmEventKind::ConnectRequest);
        with_qp(&req.id);
        req.id.accept(&ConnParam::default()).unwrap();
        expect(&server, CmEventKind::Established);
        let qp = req.id.qp().unwrap();
        let mr = qp.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        qp.post_recv(RecvWr::new(1, mr.addr(), 64, mr.lkey())).unwrap();
        let wc = qp.recv_cq().poll_blocking(1, Budget { events: 0, wall: T }).unwrap();
        assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 5));
        let mut b = [0u8; 5];
        mr.read(0, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        expect(&server, CmEventKind::Disconnected);
        req.id.clone()
    });
    let id = client(&client_ch, "127.0.14.2:7174", PortSpace::Tcp);
    id.connect(&ConnParam::default()).unwrap();
    expect(&client_ch, CmEventKind::Established);
    let qp = id.qp().unwrap();
    let mr = qp.pd().reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    mr.write(0, b"hello").unwrap();
    qp.post_send(SendWr::new(9, WrOpcode::Send).sge(mr.addr(), 5, mr.lkey())).unwrap();
    let wc = qp.send_cq().poll_blocking(1, Budget { events: 0, wall: T }).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::Success));
    id.disconnect().unwrap();
    expect(&client_ch, CmEventKind::Disconnected);
    let child = srv.join().unwrap();
    assert_eq!(child.qp().unwrap().state(), QpState::Err);
}

/// librdmacm's `RDMA_MAX_RESP_RES` / `RDMA_MAX_INIT_DEPTH` (0xFF): the
/// requester offers its device's limits (rxe's 128), the responder's 0xFF
/// takes the offer within its own limits; the wire never carries 255 (a
/// kernel peer refuses a REP that asks for more than it offered: libfabric
/// accepts with 0xFF).
#[test]
fn max_resources_0xff_are_the_devices_limits() {
    let (_net, server, client_ch, _listener, id) = sim_listening("10.0.0.1:7190", PortSpace::Tcp);
    let max =
        ConnParam { responder_resources: 0xFF, initiator_depth: 0xFF, ..ConnParam::default() };
    id.connect(&max).unwrap();
    let req = expect(&server, CmEventKind::ConnectRequest);
    assert_eq!((req.param.responder_resources, req.param.initiator_depth), (128, 128));
    let child = req.id.clone();
    with_qp(&child);
    child.accept(&max).unwrap();
    let est = expect(&client_ch, CmEventKind::Established);
    assert_eq!((est.param.responder_resources, est.param.initiator_depth), (128, 128));
    expect(&server, CmEventKind::Established);
    // a requester that offers less gets no more than that
    let id2 = client(&client_ch, "10.0.0.1:7190", PortSpace::Tcp);
    id2.connect(&ConnParam { responder_resources: 4, initiator_depth: 2, ..ConnParam::default() })
        .unwrap();
    let req2 = expect(&server, CmEventKind::ConnectRequest);
    let child2 = req2.id.clone();
    with_qp(&child2);
    child2.accept(&max).unwrap();
    let est2 = expect(&client_ch, CmEventKind::Established);
    // the responder answers 2 reads in flight (the requester's depth) and
    // starts at most 4 (what the requester will answer)
    assert_eq!((est2.param.responder_resources, est2.param.initiator_depth), (2, 4));
}

/// `rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`: the QP the CM moves to RTS
/// gets that local ACK timeout (pyverbs' test_rdmacm asserts it with
/// `ibv_query_qp`), on both sides; above 31 is refused.
#[test]
fn ack_timeout_option_reaches_the_qps() {
    let (_net, server, client_ch, _listener, id) = sim_listening("10.0.0.1:7191", PortSpace::Tcp);
    assert!(id.set_ack_timeout(32).is_err());
    id.set_ack_timeout(21).unwrap();
    id.connect(&ConnParam::default()).unwrap();
    let req = expect(&server, CmEventKind::ConnectRequest);
    let child = req.id.clone();
    child.set_ack_timeout(17).unwrap();
    with_qp(&child);
    child.accept(&ConnParam::default()).unwrap();
    expect(&client_ch, CmEventKind::Established);
    let (a, _) = id.qp().unwrap().query().unwrap();
    let (b, _) = child.qp().unwrap().query().unwrap();
    assert_eq!((a.timeout, b.timeout), (21, 17));
}

#[test]
fn the_tos_option_is_the_traffic_class_of_both_sides_qps() {
    let (_net, server, client_ch, _listener, id) = sim_listening("10.0.0.1:7190", PortSpace::Tcp);
    id.set_tos(0x60);
    id.connect(&ConnParam::default()).unwrap();
    let req = expect(&server, CmEventKind::ConnectRequest);
    let child = req.id.clone();
    // the passive side takes the REQ's path, whatever its own option says
    child.set_tos(0x10);
    with_qp(&child);
    let rtr = child.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(rtr.ah_attr.map(|a| a.traffic_class), Some(0x60));
    child.accept(&ConnParam::default()).unwrap();
    expect(&client_ch, CmEventKind::Established);
    expect(&server, CmEventKind::Established);
    for (side, qp) in [("active", id.qp().unwrap()), ("passive", child.qp().unwrap())] {
        let (attr, _) = qp.query().unwrap();
        assert_eq!(attr.ah_attr.map(|a| a.traffic_class), Some(0x60), "{side}");
    }
    assert_eq!(id.init_qp_attr(QpState::Rtr).unwrap().ah_attr.unwrap().traffic_class, 0x60);
}
