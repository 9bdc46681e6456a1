//! `create_ah_from_wc`: a UD server answers a client it knows only from the
//! receive completion and the 40-byte GRH area (IPv4 and IPv6 on the
//! simulated fabric, IPv4 over UDP loopback), and malformed input is an
//! error value.

use crate::common;
use common::{one_wc, ACCESS};
use roce_host::DeviceConfig;
use roce_sim::SimNet;
use roce_verbs_api::*;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

struct Node {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qp: Qp,
}

fn node(ctx: Context, sq_psn: u32) -> Node {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.reg_mr(8192, ACCESS).unwrap();
    let qp = pd.qp_builder(&cq, &cq).qp_type(QpType::Ud).build().unwrap();
    qp.activate_ud(DEFAULT_QKEY, sq_psn).unwrap();
    Node { ctx, cq, mr, qp }
}

/// How long to wait for a completion.
const WALL: Duration = Duration::from_secs(10);

/// The next completion on `to`'s CQ, which must be receive `wr_id` of a
/// `len`-byte message (GRH area included) from `from`'s QP, and the `len`
/// bytes it left at `off` of `to`'s region.
fn ud_received(
    to: &Node,
    from: &Node,
    wr_id: u64,
    off: u64,
    len: u32,
) -> (WorkCompletion, Vec<u8>) {
    let wc = one_wc(&to.cq, WALL);
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (wr_id, WcStatus::Success, len));
    assert_eq!(wc.src_qp, from.qp.qpn().value());
    let mut area = vec![0u8; len as usize];
    to.mr.read(off, &mut area).unwrap();
    (wc, area)
}

/// The client sends "ping" to the server; the server answers "pong: ping"
/// through the AH it builds from the completion; returns the server's AH
/// and the GRH area it decoded.
fn ping_pong(client: &Node, server: &Node) -> (AhAttr, Grh) {
    // server: a receive at offset 0 (GRH area + payload)
    server.qp.post_recv(RecvWr::new(1, server.mr.addr(), 1024, server.mr.lkey())).unwrap();
    client.qp.post_recv(RecvWr::new(2, client.mr.addr() + 4096, 1024, client.mr.lkey())).unwrap();
    client.mr.write(0, b"ping").unwrap();
    let ah = create_ah(server.ctx.addr());
    let wr = SendWr::new(10, WrOpcode::Send).sge(client.mr.addr(), 4, client.mr.lkey());
    client.qp.post_send(ud_send(wr, ah, &server.qp.endpoint(0), DEFAULT_QKEY)).unwrap();

    let (wc, area) = ud_received(server, client, 1, 0, 44);
    assert_eq!(&area[40..], b"ping");
    let grh = Grh::parse(&area[..40]).unwrap();
    let back = server.ctx.create_ah_from_wc(&wc, &area[..40]).unwrap();

    // the reply uses only what the completion and the GRH area told
    server.mr.write(2048, b"pong: ping").unwrap();
    let wr = SendWr::new(11, WrOpcode::Send).sge(server.mr.addr() + 2048, 10, server.mr.lkey()).ud(
        back,
        wc.src_qp,
        DEFAULT_QKEY,
    );
    server.qp.post_send(wr).unwrap();
    let sent = one_wc(&server.cq, WALL);
    assert_eq!((sent.wr_id, sent.status, sent.opcode), (11, WcStatus::Success, WcOpcode::Send));
    let sent = one_wc(&client.cq, WALL);
    assert_eq!((sent.wr_id, sent.status), (10, WcStatus::Success));
    let (_, reply) = ud_received(client, server, 2, 4096, 50);
    assert_eq!(&reply[40..], b"pong: ping");
    // and the client's GRH area names the server as the sender
    let g = Grh::parse(&reply[..40]).unwrap();
    assert_eq!(g.sgid, server.ctx.query_gid(1).unwrap());
    assert_eq!(g.dgid, client.ctx.query_gid(1).unwrap());
    (back, grh)
}

fn sim(a: &str, b: &str) -> (SimNet, Node, Node) {
    let net = SimNet::new(7);
    let c = node(net.add_device("roce0", a.parse().unwrap()).open(), 1);
    let s = node(net.add_device("roce1", b.parse().unwrap()).open(), 2);
    (net, c, s)
}

#[test]
fn ud_server_replies_through_the_ah_built_from_the_wc_ipv4() {
    let (_net, c, s) = sim("10.0.0.1", "10.0.0.2");
    let (ah, grh) = ping_pong(&c, &s);
    assert!(grh.ipv4);
    assert_eq!(grh.sgid, "::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(grh.dgid, "::ffff:10.0.0.2".parse::<Ipv6Addr>().unwrap());
    assert_eq!(ah.dgid, c.ctx.addr());
    // the server's own GID the datagram was sent to: index 1 (RoCEv2, rxe's table)
    assert_eq!(ah.sgid_index, 1);
    assert_eq!((ah.hop_limit, ah.flow_label, ah.port_num), (0xFF, 0, 1));
    assert_eq!(s.ctx.counters().ud_dropped + c.ctx.counters().ud_dropped, 0);
}

#[test]
fn ud_server_replies_through_the_ah_built_from_the_wc_ipv6() {
    let (_net, c, s) = sim("fd00::1", "fd00::2");
    let (ah, grh) = ping_pong(&c, &s);
    assert!(!grh.ipv4);
    assert_eq!(grh.sgid, "fd00::1".parse::<Ipv6Addr>().unwrap());
    assert_eq!(ah.dgid, "fd00::1".parse::<IpAddr>().unwrap());
    assert_eq!((ah.sgid_index, ah.hop_limit), (1, 0xFF));
}

#[test]
fn ud_server_replies_over_udp_loopback() {
    let open = |name: &str, ip: &str| {
        DeviceConfig::udp(name, ip.parse().unwrap()).open().expect("open udp device").open()
    };
    let c = node(open("ahc", "127.0.5.2"), 1);
    let s = node(open("ahs", "127.0.5.3"), 2);
    let (ah, grh) = ping_pong(&c, &s);
    assert!(grh.ipv4);
    assert_eq!(ah.dgid, "127.0.5.2".parse::<IpAddr>().unwrap());
    assert_eq!(ah.sgid_index, 1);
}

fn recv_wc() -> WorkCompletion {
    WorkCompletion {
        wr_id: 1,
        status: WcStatus::Success,
        opcode: WcOpcode::Recv,
        byte_len: 44,
        imm: None,
        qp_num: 0x11,
        src_qp: 0x12,
        wc_flags: WcFlags::GRH,
    }
}

/// A valid IPv4 GRH area from 10.0.0.1 to 10.0.0.2 (TOS 0x28, TTL 64).
fn v4_area() -> [u8; 40] {
    let mut a = [0u8; 40];
    let h = &mut a[20..];
    h.copy_from_slice(&[0x45, 0x28, 0, 44, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    let mut sum: u32 = h.chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    a
}

#[test]
fn malformed_input_is_an_error_not_a_panic() {
    let gids: Vec<Ipv6Addr> =
        ["fe80::1", "::ffff:10.0.0.2"].iter().map(|g| g.parse().unwrap()).collect();
    let area = v4_area();
    let ah = init_ah_from_wc(&gids, &recv_wc(), &area).unwrap();
    assert_eq!(ah.dgid, "10.0.0.1".parse::<IpAddr>().unwrap());
    assert_eq!((ah.sgid_index, ah.traffic_class, ah.hop_limit), (1, 0x28, 0xFF));
    assert_eq!(Grh::parse(&area).unwrap().hop_limit, 64);
    // no GRH flag (an RC/UC completion)
    let mut wc = recv_wc();
    wc.wc_flags = WcFlags::EMPTY;
    assert_eq!(init_ah_from_wc(&gids, &wc, &area), Err(AhFromWcError::NoGrh));
    // a failed completion
    let mut wc = recv_wc();
    wc.status = WcStatus::LocLenErr;
    assert_eq!(
        init_ah_from_wc(&gids, &wc, &area),
        Err(AhFromWcError::NotSuccess(WcStatus::LocLenErr))
    );
    // short areas, every length
    for n in 0..40 {
        assert_eq!(
            init_ah_from_wc(&gids, &recv_wc(), &area[..n]),
            Err(AhFromWcError::Truncated(n))
        );
    }
    // a broken IPv4 checksum, a wrong IHL, all zeros, all ones
    let mut bad = area;
    bad[30] ^= 1;
    assert_eq!(Grh::parse(&bad), Err(AhFromWcError::Malformed));
    let mut bad = area;
    bad[20] = 0x46;
    assert_eq!(Grh::parse(&bad), Err(AhFromWcError::Malformed));
    assert_eq!(Grh::parse(&[0; 40]), Err(AhFromWcError::Malformed));
    assert_eq!(Grh::parse(&[0xFF; 40]), Err(AhFromWcError::Malformed));
    // sent to a GID this device does not have
    let other: Vec<Ipv6Addr> = vec!["fe80::1".parse().unwrap()];
    assert_eq!(
        init_ah_from_wc(&other, &recv_wc(), &area),
        Err(AhFromWcError::UnknownGid("::ffff:10.0.0.2".parse().unwrap()))
    );
    // IPv6: traffic class and flow label are echoed
    let mut v6 = [0u8; 40];
    v6[..4].copy_from_slice(&[0x6A, 0xB1, 0x23, 0x45]);
    v6[6] = 17;
    v6[7] = 9;
    v6[8..24].copy_from_slice(&"fd00::7".parse::<Ipv6Addr>().unwrap().octets());
    v6[24..40].copy_from_slice(&"fd00::8".parse::<Ipv6Addr>().unwrap().octets());
    let gids6: Vec<Ipv6Addr> = vec!["fe80::8".parse().unwrap(), "fd00::8".parse().unwrap()];
    let ah = init_ah_from_wc(&gids6, &recv_wc(), &v6).unwrap();
    assert_eq!(ah.dgid, "fd00::7".parse::<IpAddr>().unwrap());
    assert_eq!((ah.sgid_index, ah.traffic_class, ah.flow_label), (1, 0xAB, 0x12345));
    // pseudo-random areas never panic
    let mut x = 0x1234_5678_u32;
    for _ in 0..2000 {
        let mut a = [0u8; 40];
        for b in a.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        let _ = init_ah_from_wc(&gids, &recv_wc(), &a);
    }
}
