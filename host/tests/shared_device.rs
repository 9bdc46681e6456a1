//! One device, several members: the device 127.0.71.1:4791 opened three
//! times in one process is three members of one `SO_REUSEPORT` group, as
//! three processes would be (slots are file locks, one per open file).
//! The kernel steers each datagram to the member whose slot its QPN
//! carries; members talk to each other over the one address.

use crate::common;
use common::{connect, node, one_wc, Node};
use roce_host::DeviceConfig;
use roce_verbs_api::{RecvWr, SendWr, WcOpcode, WcStatus, WrOpcode};
use std::net::IpAddr;
use std::time::Duration;

const WALL: Duration = Duration::from_secs(10);

/// Device `name` at `addr`:4791 opened as `DeviceConfig::open` does, shared
/// or bound alone.
fn open_dev(
    addr: IpAddr,
    name: &str,
    share: bool,
) -> Result<roce_verbs_api::Device, roce_host::OpenError> {
    let c = DeviceConfig::udp(name, addr);
    let opts = roce_host::GroupOptions { engine: c.engine_config(), share, ..Default::default() };
    DeviceConfig::open_group(std::slice::from_ref(&c), opts).map(|mut v| v.pop().unwrap())
}

/// A member of the shared device at `addr`.
fn member(addr: IpAddr, name: &str) -> roce_verbs_api::Device {
    open_dev(addr, name, true).expect("join")
}

fn open(addr: IpAddr, name: &str) -> roce_verbs_api::Context {
    member(addr, name).open()
}

/// Two members (`names`) of the shared device at `addr`, their QPs
/// connected and one exchange made: the address, the device's socket
/// address and the two nodes.
fn two_members(addr: &str, names: [&str; 2]) -> (IpAddr, std::net::SocketAddr, Node, Node) {
    let addr: IpAddr = addr.parse().unwrap();
    let dev = std::net::SocketAddr::new(addr, 4791);
    let a = node(open(addr, names[0]));
    let b = node(open(addr, names[1]));
    connect(&a, &b);
    exchange(&a, &b, 100, 1);
    (addr, dev, a, b)
}

fn slot(n: &Node) -> u32 {
    n.qp.qpn().value() >> 16
}

/// SEND `len` patterned bytes from `a` to `b`, then WRITE them back from
/// `b` to `a` at offset 32 KiB: every byte and status checked.
fn exchange(a: &Node, b: &Node, len: usize, seed: u8) {
    let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    a.mr.write(0, &data).unwrap();
    b.qp.post_recv(RecvWr::new(7, b.mr.addr(), len as u32, b.mr.lkey())).unwrap();
    a.qp.post_send(SendWr::new(8, WrOpcode::Send).sge(a.mr.addr(), len as u32, a.mr.lkey()))
        .unwrap();
    let wb = one_wc(&b.cq, WALL);
    assert_eq!(
        (wb.wr_id, wb.status, wb.opcode, wb.byte_len),
        (7, WcStatus::Success, WcOpcode::Recv, len as u32)
    );
    let wa = one_wc(&a.cq, WALL);
    assert_eq!((wa.wr_id, wa.status), (8, WcStatus::Success));
    let mut got = vec![0u8; len];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(got, data, "SEND bytes");
    let wr = SendWr::new(9, WrOpcode::RdmaWrite)
        .sge(b.mr.addr(), len as u32, b.mr.lkey())
        .remote(a.mr.remote_addr(32 << 10), a.mr.rkey());
    b.qp.post_send(wr).unwrap();
    let w = one_wc(&b.cq, WALL);
    assert_eq!((w.wr_id, w.status), (9, WcStatus::Success));
    a.mr.read(32 << 10, &mut got).unwrap();
    assert_eq!(got, data, "WRITE bytes");
}

fn foreign(ctx: &roce_verbs_api::Context) -> u64 {
    roce_host::transport_counters(ctx).expect("UDP").snapshot().steer_foreign
}

#[test]
fn members_of_one_device_talk_through_kernel_steering() {
    let addr: IpAddr = "127.0.71.1".parse().unwrap();
    let m0 = node(open(addr, "s0"));
    let m1 = node(open(addr, "s1"));
    let m2 = node(open(addr, "s2"));
    let mut slots = vec![slot(&m0), slot(&m1), slot(&m2)];
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), 3, "three members, three slots: {slots:?}");
    for n in [&m0, &m1, &m2] {
        assert_eq!(n.ctx.query_gid(1).unwrap().to_string(), "::ffff:127.0.71.1", "one GID");
    }
    connect(&m1, &m2);
    exchange(&m1, &m2, 5000, 1);
    exchange(&m2, &m1, 64, 2);
    let m1a = node(m1.ctx.clone());
    connect(&m0, &m1a);
    exchange(&m0, &m1a, 3000, 3);
    // the program was right for every datagram
    for n in [&m0, &m1, &m2] {
        assert_eq!(foreign(&n.ctx), 0);
    }
    let probes: u64 = [&m0, &m1, &m2]
        .iter()
        .map(|n| roce_host::transport_counters(&n.ctx).unwrap().snapshot().steer_probes)
        .sum();
    assert!(probes >= 3, "each join probes every member: {probes}");

    // The first member leaves: the last socket takes its index, and the
    // leaver steered for that before closing: no datagram goes astray.
    let gone = slot(&m0);
    drop(m0);
    exchange(&m1, &m2, 4096, 4);
    exchange(&m2, &m1, 1, 5);
    assert_eq!(foreign(&m1.ctx) + foreign(&m2.ctx), 0);

    // A new member takes the free slot and talks to both.
    let m3 = node(open(addr, "s3"));
    assert_eq!(slot(&m3), gone, "the freed slot is taken again");
    let m1b = node(m1.ctx.clone());
    connect(&m3, &m1b);
    exchange(&m3, &m1b, 2000, 6);
    exchange(&m1, &m2, 100, 7);
    assert_eq!(foreign(&m1.ctx) + foreign(&m2.ctx) + foreign(&m3.ctx), 0);
}

/// A datagram for a live member that reaches another (as after a member
/// crashed and the kernel renumbered the group) is counted, never given to
/// the receiver's core (it is forwarded, and here comes back: the program
/// is stale), and makes the receiver re-map the group; traffic then flows
/// again.
#[test]
fn misdelivered_datagrams_are_dropped_and_repair_the_map() {
    let (_, dev, a, b) = two_members("127.0.71.2", ["ma", "mb"]);
    let (sa, sb) = (slot(&a) as u8, slot(&b) as u8);
    let map = roce_host::registry::SteerMap::read(&roce_host::registry::device_dir(dev));
    let ia = map.entries.iter().find(|e| e.0 == sa).expect("a is mapped").1;
    // A stale program: b's slot steered to a's socket. Any socket of the
    // group may attach one: a bare socket joins to do it.
    let mut cfg = roce_transport::UdpConfig::new(dev);
    cfg.reuseport = true;
    let bare = roce_transport::UdpTransport::bind(cfg).unwrap().try_clone_socket().unwrap();
    roce_host::steer::attach(&bare, &roce_host::steer::program(&[(sa, ia), (sb, ia)], &[]))
        .unwrap();
    let before = foreign(&a.ctx);
    let mut bth = [0u8; 28];
    bth[0] = 0x04; // RC SEND ONLY
    bth[5..8].copy_from_slice(&b.qp.qpn().value().to_be_bytes()[1..]);
    let tx = std::net::UdpSocket::bind("127.0.71.9:0").unwrap();
    tx.send_to(&bth, dev).unwrap();
    let t0 = std::time::Instant::now();
    while foreign(&a.ctx) == before && t0.elapsed() < WALL {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(foreign(&a.ctx), before + 1, "counted by a");
    // a's steward re-maps (the bare socket does not answer its probe and
    // is left out); b's traffic flows again, a and b both receive
    exchange(&a, &b, 3000, 9);
    exchange(&b, &a, 3000, 10);
    let map2 = roce_host::registry::SteerMap::read(&roce_host::registry::device_dir(dev));
    assert_eq!(map2.entries.len(), 2, "{map2:?}");
    drop(bare);
}

/// The CM on one shared device: the listener and the connecting process
/// are members of one device (one IP); the REQ reaches the listener's
/// process by its service ID, the REP, RTU and DREQ reach their owners by
/// the slot in their comm IDs. A second listener on the port in another
/// member gets EADDRINUSE until the first one goes.
#[test]
fn rdma_cm_server_and_client_on_one_device() {
    use roce_verbs_api::rdma_cm::{CmError, CmEventKind, ConnParam, EventChannel, PortSpace};
    let addr: IpAddr = "127.0.71.3".parse().unwrap();
    let at: std::net::SocketAddr = "127.0.71.3:7174".parse().unwrap();
    let server = EventChannel::new(vec![member(addr, "cs")]);
    let client = EventChannel::new(vec![member(addr, "cc")]);
    let third = EventChannel::new(vec![member(addr, "ct")]);
    let expect = |ch: &EventChannel, kind: CmEventKind| {
        let e = ch.get_event(WALL).unwrap_or_else(|e| panic!("waiting for {kind}: {e}"));
        assert_eq!(e.kind, kind, "status {}", e.status);
        e
    };
    let listener = server.create_id(PortSpace::Tcp);
    listener.bind_addr(at).unwrap();
    listener.listen().unwrap();
    let other = third.create_id(PortSpace::Tcp);
    other.bind_addr(at).unwrap();
    assert_eq!(other.listen(), Err(CmError::AddressInUse(7174)), "another process listens");

    let id = client.create_id(PortSpace::Tcp);
    id.resolve_addr(None, at).unwrap();
    expect(&client, CmEventKind::AddrResolved);
    id.resolve_route().unwrap();
    expect(&client, CmEventKind::RouteResolved);
    let with_qp = |id: &roce_verbs_api::rdma_cm::CmId| {
        let ctx = id.context().expect("bound");
        let (pd, cq) = (ctx.alloc_pd().unwrap(), ctx.create_cq(64).unwrap());
        id.create_qp(pd.qp_builder(&cq, &cq)).unwrap();
    };
    with_qp(&id);
    id.connect(&ConnParam { private_data: b"hello".to_vec(), ..ConnParam::default() }).unwrap();
    let req = expect(&server, CmEventKind::ConnectRequest);
    assert_eq!(&req.param.private_data[..5], b"hello");
    let child = req.id.clone();
    with_qp(&child);
    child.accept(&ConnParam::default()).unwrap();
    expect(&client, CmEventKind::Established);
    expect(&server, CmEventKind::Established);
    let (qa, qb) = (id.qp().unwrap(), child.qp().unwrap());
    assert_ne!(qa.qpn().value() >> 16, qb.qpn().value() >> 16, "two members, two slots");
    let (pa, pb) = (qa.pd().clone(), qb.pd().clone());
    let src = pa.reg_mr(4096, roce_verbs_api::AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pb.reg_mr(4096, roce_verbs_api::AccessFlags::LOCAL_WRITE).unwrap();
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 1) as u8).collect();
    src.write(0, &data).unwrap();
    qb.post_recv(RecvWr::new(7, dst.addr(), 4096, dst.lkey())).unwrap();
    qa.post_send(SendWr::new(8, WrOpcode::Send).sge(src.addr(), 3000, src.lkey())).unwrap();
    let wc = qb.recv_cq().poll_blocking(1, roce_verbs_api::Budget::default()).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].byte_len), (7, WcStatus::Success, 3000));
    let mut got = vec![0u8; 3000];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, data);
    id.disconnect().unwrap();
    expect(&server, CmEventKind::Disconnected);
    expect(&client, CmEventKind::Disconnected);

    // the listener goes (with the event that named it): the port is free
    // for the third member
    drop(req);
    drop(listener);
    let other = third.create_id(PortSpace::Tcp);
    other.bind_addr(at).unwrap();
    other.listen().expect("the port is free again");
}

/// A hostile member: a process of the same user crafting requests (valid
/// ICRC, the right QPN and PSN) to another member's QP gets what a remote
/// peer would: a WRITE with a wrong rkey is NAKed (to the QP's peer) and
/// no byte moves. A request to a QPN of a slot nobody holds reaches no QP.
#[test]
fn a_hostile_member_gets_what_a_remote_peer_gets() {
    use roce_packet::{Opcode, Qpn, RKey, RethRepr};
    use roce_sim::packet::{request, PacketBuilder};
    let (addr, dev, a, b) = two_members("127.0.71.4", ["ha", "hb"]); // a sent PSN 0x100: b expects 0x101
    let mut before = vec![0u8; 1 << 16];
    b.mr.read(0, &mut before).unwrap();

    let evil = std::net::UdpSocket::bind(std::net::SocketAddr::new(addr, 0)).unwrap();
    evil.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let port = evil.local_addr().unwrap().port();
    let pb = PacketBuilder::new(addr, addr).src_port(port);
    let mut r = request(Opcode::RC_RDMA_WRITE_ONLY, Qpn::new(b.qp.qpn().value()), 0x101);
    let bad = RKey::new(b.mr.rkey().value() ^ 0x5a5a_0000);
    r.reth = Some(RethRepr { va: b.mr.addr(), rkey: bad, dma_len: 64 });
    let naks = b.ctx.counters().naks_sent;
    evil.send_to(&pb.sized_bytes(&r, &[0xEE; 64]), dev).unwrap();
    // b's responder NAKs it (to its connected peer, a, as any RC responder)
    let t0 = std::time::Instant::now();
    while b.ctx.counters().naks_sent == naks && t0.elapsed() < WALL {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(b.ctx.counters().naks_sent, naks + 1, "b NAKed the crafted WRITE");
    let mut buf = [0u8; 2048];
    let mut after = vec![0u8; 1 << 16];
    b.mr.read(0, &mut after).unwrap();
    assert!(after == before, "no byte of b's region moved");

    // a QPN of a slot nobody holds: no QP gets it, nothing answers
    let (sa, sb) = (slot(&a), slot(&b));
    let free = (0..64u32).find(|s| *s != sa && *s != sb).unwrap();
    let mut r = request(Opcode::RC_RDMA_WRITE_ONLY, Qpn::new(free << 16 | 0x11), 0);
    r.reth = Some(RethRepr { va: b.mr.addr(), rkey: b.mr.rkey(), dma_len: 64 });
    let seen = foreign(&a.ctx) + foreign(&b.ctx);
    evil.send_to(&pb.sized_bytes(&r, &[0xEE; 64]), dev).unwrap();
    evil.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(evil.recv_from(&mut buf).is_err(), "no answer for a QPN nobody owns");
    assert_eq!(foreign(&a.ctx) + foreign(&b.ctx), seen + 1, "dropped and counted");
    b.mr.read(0, &mut after).unwrap();
    assert!(after == before, "no byte of b's region moved");
}

/// A datagram that reached the wrong member is forwarded to its own in an
/// envelope (`roce_transport::steer`) from the device's address: the
/// member takes it as if it came from its source (a crafted WRITE with a
/// wrong rkey, checked by ICRC over that source, is NAKed as straight from
/// it). An envelope from another address is dropped and counted, as is
/// one for a slot nobody holds once it has been forwarded enough.
#[test]
fn forwarded_datagrams_reach_their_member_as_from_their_source() {
    use roce_packet::{Opcode, Qpn, RKey, RethRepr};
    use roce_sim::packet::{request, PacketBuilder};
    use roce_transport::steer::{wrap, MAX_HOPS};
    let (addr, dev, a, b) = two_members("127.0.71.6", ["fa", "fb"]); // b expects PSN 0x101
    let counters = |n: &Node| roce_host::transport_counters(&n.ctx).unwrap().snapshot();
    let mut before = vec![0u8; 1 << 16];
    b.mr.read(0, &mut before).unwrap();
    let src: std::net::SocketAddr = "127.0.71.66:4791".parse().unwrap();
    let pb = PacketBuilder::new(src.ip(), addr).src_port(src.port());
    let mut r = request(Opcode::RC_RDMA_WRITE_ONLY, Qpn::new(b.qp.qpn().value()), 0x101);
    let bad = RKey::new(b.mr.rkey().value() ^ 0x5a5a_0000);
    r.reth = Some(RethRepr { va: b.mr.addr(), rkey: bad, dma_len: 64 });
    let d = pb.sized_bytes(&r, &[0xEE; 64]);
    let env = wrap(&d, src, slot(&b) as u8, 1);

    // from elsewhere: dropped, counted, nothing NAKed
    let (naks, dropped) = (b.ctx.counters().naks_sent, counters(&b).steer_forward_dropped);
    let outsider = std::net::UdpSocket::bind("127.0.71.67:0").unwrap();
    outsider.send_to(&env, dev).unwrap();
    let t0 = std::time::Instant::now();
    while counters(&b).steer_forward_dropped == dropped && t0.elapsed() < WALL {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(counters(&b).steer_forward_dropped, dropped + 1, "not from the device");
    assert_eq!(b.ctx.counters().naks_sent, naks);

    // from the device's address (as a member forwards): b takes it
    let (inb, icrc_bad) = (counters(&b).steer_forwarded_in, counters(&b).icrc_bad);
    let member = std::net::UdpSocket::bind(std::net::SocketAddr::new(addr, 0)).unwrap();
    member.send_to(&env, dev).unwrap();
    let t0 = std::time::Instant::now();
    while b.ctx.counters().naks_sent == naks && t0.elapsed() < WALL {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(b.ctx.counters().naks_sent, naks + 1, "b NAKed the forwarded WRITE");
    assert_eq!(counters(&b).steer_forwarded_in, inb + 1);
    assert_eq!(counters(&b).icrc_bad, icrc_bad, "ICRC checked over the original source");
    let mut after = vec![0u8; 1 << 16];
    b.mr.read(0, &mut after).unwrap();
    assert!(after == before, "no byte of b's region moved");

    // for a slot nobody holds: forwarded MAX_HOPS times in all, then dropped
    let (sa, sb) = (slot(&a), slot(&b));
    let free = (0..64u32).find(|s| *s != sa && *s != sb).unwrap() as u8;
    let all = |f: fn(&roce_transport::CountersSnapshot) -> u64| f(&counters(&a)) + f(&counters(&b));
    let (out0, drop0) = (all(|c| c.steer_forwarded_out), all(|c| c.steer_forward_dropped));
    member.send_to(&wrap(&d, src, free, 1), dev).unwrap();
    let t0 = std::time::Instant::now();
    while all(|c| c.steer_forward_dropped) == drop0 && t0.elapsed() < WALL {
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(all(|c| c.steer_forward_dropped), drop0 + 1);
    assert_eq!(all(|c| c.steer_forwarded_out), out0 + u64::from(MAX_HOPS) - 1);
}

/// A process that binds a device alone (ROCE_EMU_SHARED=0) and one that
/// shares it cannot both have it; the error says why, both ways.
#[test]
fn sharing_and_binding_alone_exclude_each_other_with_a_clear_error() {
    let addr: IpAddr = "127.0.71.5".parse().unwrap();
    let alone = |share: bool| open_dev(addr, "alone", share);
    let a = alone(false).expect("bound alone");
    let e = alone(true).expect_err("cannot join a device bound alone");
    assert!(matches!(e, roce_host::OpenError::HeldAlone { .. }), "{e}");
    assert!(
        e.to_string().contains("127.0.71.5:4791 is in use by a process that does not share it"),
        "{e}"
    );
    drop(a);
    let shared = alone(true).expect("joined");
    let e = alone(false).expect_err("cannot bind alone a shared device");
    assert!(matches!(e, roce_host::OpenError::HeldAlone { .. }), "{e}");
    drop(shared);
}
