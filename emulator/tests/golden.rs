//! Replays of real kernel rxe captures (../shared/captures): the requests
//! rxe sent are fed to our HCA playing the other side, and everything our
//! HCA answers is compared with what rxe answered, field by field. Every
//! captured frame must pass our ICRC check with the IP header it was sent
//! with.

use bytes::Bytes;
use roce_emulator::*;
use roce_packet::{IpMeta, IpUdpHeader, Qpn, RKey, RoceRepr, Syndrome, UdpEndpoints};
use roce_sim::packet::PacketBuilder;
use roce_sim::testkit::{create_qp_numbered, qp_cap, qp_init, rc_connect, ud_up, RcPath};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

/// Where the full captures live; override with `ROCE_CAPTURES`. The
/// committed copies in `packet/tests/data` (some trimmed) are tried first,
/// so CI replays them without the lab. Tests skip (with a note) when a
/// capture is missing everywhere.
const CAPTURES: &str = "/work/shared/captures";

struct Frame {
    dgram: Datagram,
}

/// The capture `name`, which must be found (committed copies are in
/// packet/tests/data and emulator/tests/data).
fn capture(name: &str) -> Vec<Frame> {
    load(name).unwrap_or_else(|| {
        panic!("capture {name} not found (committed copies in packet/tests/data and emulator/tests/data)")
    })
}

fn load(name: &str) -> Option<Vec<Frame>> {
    let committed = PathBuf::from(crate::CRATE_DIR).join("../packet/tests/data");
    let mut dirs = Vec::new();
    if let Ok(d) = std::env::var("ROCE_CAPTURES") {
        dirs.push(PathBuf::from(d));
    }
    dirs.push(committed);
    dirs.push(PathBuf::from(crate::CRATE_DIR).join("tests/data"));
    dirs.push(PathBuf::from(CAPTURES));
    let file = dirs.iter().find_map(|d| std::fs::File::open(d.join(name)).ok())?;
    let mut rd = pcap_file::pcap::PcapReader::new(file).ok()?;
    let mut out = Vec::new();
    while let Some(Ok(pkt)) = rd.next_packet() {
        let d: &[u8] = &pkt.data;
        if d.len() < 14 + 20 + 8 || d[12..14] != [0x08, 0x00] {
            continue;
        }
        let ip = &d[14..];
        let ihl = usize::from(ip[0] & 0x0F) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ip[9] != 17 || total > ip.len() {
            continue;
        }
        let udp = &ip[ihl..total];
        if u16::from_be_bytes([udp[2], udp[3]]) != 4791 {
            continue;
        }
        let endpoints = UdpEndpoints {
            src: IpAddr::V4(Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15])),
            dst: IpAddr::V4(Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19])),
            src_port: u16::from_be_bytes([udp[0], udp[1]]),
            dst_port: 4791,
        };
        let meta = IpMeta {
            ttl: ip[8],
            tos: ip[1],
            ipv4_id: u16::from_be_bytes([ip[4], ip[5]]),
            dont_fragment: ip[6] & 0x40 != 0,
            flow_label: 0,
        };
        out.push(Frame {
            dgram: Datagram {
                endpoints,
                meta,
                payload: Bytes::copy_from_slice(&udp[8..]),
                body: None,
            },
        });
    }
    Some(out)
}

/// The fields a peer sees, ICRC aside (rxe's IPv4 identification differs).
type Key = (u8, u32, u32, bool, Option<Syndrome>, Option<u32>, usize);

fn key(r: &RoceRepr) -> Key {
    (
        r.bth.opcode.0,
        r.bth.psn.value(),
        r.bth.dest_qp.value(),
        r.bth.ack_req,
        r.aeth.map(|a| a.syndrome),
        r.aeth.map(|a| a.msn.value()),
        r.payload_len,
    )
}

fn parse(d: &Datagram) -> RoceRepr {
    RoceRepr::parse_bytes(&d.payload).unwrap().0
}

struct Us {
    hca: Hca,
    qpn: Qpn,
    mr: MrInfo,
    cq: CqHandle,
}

/// Our HCA at `me` with QP number `qpn`, connected to `peer`/`peer_qpn`.
fn us(
    me: [u8; 4],
    qpn: u32,
    peer: [u8; 4],
    peer_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
    rnr: u8,
) -> Us {
    us_retry(me, qpn, peer, peer_qpn, sq_psn, rq_psn, rnr, 7)
}

#[allow(clippy::too_many_arguments)]
fn us_retry(
    me: [u8; 4],
    qpn: u32,
    peer: [u8; 4],
    peer_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
    rnr: u8,
    retry_cnt: u8,
) -> Us {
    let mut hca = Hca::new(HcaConfig::new("us", IpAddr::V4(Ipv4Addr::from(me)), 3));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(1024).unwrap();
    let acc = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = hca.reg_mr(pd, 1 << 17, acc).unwrap();
    let init = qp_init(pd, cq, QpType::Rc, qp_cap(256, 256), true);
    let q = create_qp_numbered(&mut hca, init, qpn);
    let path = RcPath {
        access: acc,
        sq_psn,
        rq_psn,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        min_rnr_timer: rnr,
        retry_cnt,
        ..RcPath::default()
    };
    rc_connect(&mut hca, q, Ipv4Addr::from(peer), peer_qpn, &path).unwrap();
    Us { hca, qpn: q, mr, cq }
}

fn drain(u: &mut Us, out: &mut Vec<Key>) {
    while let Some(d) = u.hca.poll_transmit(Instant::ZERO) {
        let hdr = IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len()).unwrap();
        assert!(hdr.verify_icrc(&d.payload));
        out.push(key(&parse(&d)));
    }
}

#[test]
fn rc_pingpong_small_server_side() {
    let frames = capture("rc_pingpong_small.pcap");
    let server = [192, 168, 77, 2];
    let client = [192, 168, 77, 3];
    // from the capture's log: both QPNs 0x12; client PSN 0x101f20, server PSN 0x21e1b8
    let mut u = us(server, 0x12, client, 0x12, 0x21e1b8, 0x101f20, 12);
    for i in 0..20 {
        let a = u.mr.addr + 64 * i;
        u.hca.post_recv(u.qpn, RecvWr::new(i, a, 64, u.mr.lkey)).unwrap();
    }
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut sent = 0;
    for f in &frames {
        let r = parse(&f.dgram);
        if f.dgram.endpoints.src == IpAddr::V4(Ipv4Addr::from(server)) {
            theirs.push(key(&r));
            continue;
        }
        u.hca.handle_datagram(Instant::ZERO, f.dgram.clone());
        drain(&mut u, &mut ours);
        // the pingpong server answers each receive with a 64-byte SEND
        for wc in u.hca.poll_cq(u.cq, 16).unwrap() {
            assert_eq!(wc.status, WcStatus::Success);
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.byte_len, 64);
                let wr =
                    SendWr::new(1000 + sent, WrOpcode::Send).sge(u.mr.addr + 8192, 64, u.mr.lkey);
                u.hca.post_send(u.qpn, wr).unwrap();
                sent += 1;
                drain(&mut u, &mut ours);
            }
        }
    }
    let c = u.hca.counters();
    assert_eq!(c.icrc_err, 0, "every rxe frame passes our ICRC check");
    assert_eq!(c.rcvd_pkts, 20);
    assert_eq!(sent, 10);
    assert_eq!(ours, theirs);
}

#[test]
fn rnr_server_side() {
    let frames = capture("rnr.pcap");
    let server = [192, 168, 77, 2];
    let client = [192, 168, 77, 3];
    let first = parse(&frames[0].dgram);
    assert_eq!(first.bth.dest_qp.value(), 0x2a);
    let mut u = us(server, 0x2a, client, 0x2b, 0, first.bth.psn.value(), 24);
    let n_sends = frames
        .iter()
        .filter(|f| f.dgram.endpoints.src != IpAddr::V4(Ipv4Addr::from(server)))
        .count();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut k = 0;
    for f in &frames {
        if f.dgram.endpoints.src == IpAddr::V4(Ipv4Addr::from(server)) {
            theirs.push(key(&parse(&f.dgram)));
            continue;
        }
        k += 1;
        if k == n_sends {
            // the server posted its receive before the last retry arrived
            u.hca.post_recv(u.qpn, RecvWr::new(1, u.mr.addr, 4096, u.mr.lkey)).unwrap();
        }
        u.hca.handle_datagram(Instant::ZERO, f.dgram.clone());
        drain(&mut u, &mut ours);
    }
    assert_eq!(theirs.len(), 22);
    assert_eq!(ours, theirs);
    let c = u.hca.counters();
    assert_eq!((c.send_rnr_err, c.icrc_err), (21, 0));
    assert_eq!(u.hca.poll_cq(u.cq, 4).unwrap()[0].status, WcStatus::Success);
}

#[test]
fn write_bw_server_side_with_rkey_translation() {
    let frames = capture("write_bw.pcap");
    let server = [192, 168, 77, 2];
    let client = [192, 168, 77, 3];
    // from write_bw.log: server QPN 0x19 PSN 0x72f5f6 RKey 0x856 VAddr 0x7f5358117000
    let (their_va, their_rkey) = (0x7f53_5811_7000u64, 0x856u32);
    let first = parse(&frames[0].dgram);
    let mut u = us(server, 0x19, client, 0x19, 0x72f5f6, first.bth.psn.value(), 12);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut writes = 0;
    for f in &frames {
        if f.dgram.endpoints.src == IpAddr::V4(Ipv4Addr::from(server)) {
            theirs.push(key(&parse(&f.dgram)));
            continue;
        }
        let mut d = f.dgram.clone();
        let mut r = parse(&d);
        let (_, payload) = RoceRepr::parse_bytes(&d.payload).map(|(a, b)| (a, b.to_vec())).unwrap();
        if let Some(reth) = r.reth.as_mut() {
            assert_eq!(reth.rkey, RKey::new(their_rkey));
            reth.va = u.mr.addr + (reth.va - their_va);
            reth.rkey = u.mr.rkey;
            writes += 1;
            let mut b = r.to_vec(&payload).unwrap();
            // the original ICRC must have been good before we re-fill it
            assert!(IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len())
                .unwrap()
                .verify_icrc(&d.payload));
            PacketBuilder::of(&d).seal(&mut b);
            d.payload = Bytes::from(b);
        }
        u.hca.handle_datagram(Instant::ZERO, d);
        drain(&mut u, &mut ours);
    }
    // the committed copy holds the first 300 frames (5 WRITE_FIRSTs, 4
    // ACKed messages); the full capture has 100 messages
    assert!(writes >= 5, "{writes}");
    assert!(theirs.len() >= 4, "{}", theirs.len());
    let c = u.hca.counters();
    assert_eq!(c.icrc_err + c.malformed + c.bad_state, 0, "{c}");
    assert_eq!(ours.len(), theirs.len());
    assert_eq!(ours, theirs);
}

#[test]
fn read_lat_client_side() {
    let frames = capture("read_lat.pcap");
    let server = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 2));
    // from read_lat.log: client QPN 0x20 PSN 0x35514; server QPN 0x20 PSN 0xcc6ee1,
    // RKey 0xf74, VAddr 0x564ff309d000
    let mut u = us([192, 168, 77, 3], 0x20, [192, 168, 77, 2], 0x20, 0x35514, 0xcc6ee1, 12);
    // one READ at a time, as ib_read_lat does: post, compare the request
    // with rxe's, feed rxe's response
    let mut expect = Vec::new();
    let mut n = 0u64;
    for f in &frames {
        let t = parse(&f.dgram);
        if f.dgram.endpoints.src == server {
            let (_, payload) = RoceRepr::parse_bytes(&f.dgram.payload).unwrap();
            expect.extend_from_slice(payload);
            u.hca.handle_datagram(Instant::ZERO, f.dgram.clone());
            continue;
        }
        let reth = t.reth.expect("READ requests carry a RETH");
        assert_eq!(reth.rkey, RKey::new(0xf74));
        let wr = SendWr::new(n, WrOpcode::RdmaRead)
            .sge(u.mr.addr + 8 * n, reth.dma_len, u.mr.lkey)
            .remote(reth.va, reth.rkey);
        u.hca.post_send(u.qpn, wr).unwrap();
        n += 1;
        let m = parse(&u.hca.poll_transmit(Instant::ZERO).expect("one request"));
        assert_eq!((key(&m), m.reth), (key(&t), t.reth));
        assert!(u.hca.poll_transmit(Instant::ZERO).is_none());
    }
    assert!(n >= 100);
    let wcs = u.hca.poll_cq(u.cq, 1000).unwrap();
    assert_eq!(wcs.len() as u64, n);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::RdmaRead));
    let mut got = vec![0u8; expect.len()];
    u.hca.mr_read(u.mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, expect);
    assert_eq!(u.hca.counters().icrc_err, 0);
    assert_eq!(u.hca.poll_timeout(), None);
}

#[test]
fn retry_exceeded_client_timing_matches_rxe() {
    let frames = capture("retry_exceeded.pcap");
    let file = std::fs::File::open(
        PathBuf::from(std::env::var("ROCE_CAPTURES").unwrap_or_else(|_| CAPTURES.to_string()))
            .join("retry_exceeded.pcap"),
    )
    .unwrap();
    let mut rd = pcap_file::pcap::PcapReader::new(file).unwrap();
    let mut times = Vec::new();
    while let Some(Ok(p)) = rd.next_packet() {
        times.push(p.timestamp.as_nanos() as u64);
    }
    let t0 = times[0];
    let theirs: Vec<u64> = times.iter().map(|t| t - t0).collect();
    assert_eq!(frames.len(), 4);
    let first = parse(&frames[0].dgram);
    // client QPN 0x2d, retry_cnt 3, timeout 14; server QPN 0x2c
    let mut u =
        us_retry([192, 168, 77, 3], 0x2d, [192, 168, 77, 2], 0x2c, first.bth.psn.value(), 0, 12, 3);
    let wr = SendWr::new(1, WrOpcode::Send).sge(u.mr.addr, first.payload_len as u32, u.mr.lkey);
    u.hca.post_send(u.qpn, wr).unwrap();
    let mut now = Instant::ZERO;
    let mut ours = Vec::new();
    for _ in 0..10 {
        while let Some(d) = u.hca.poll_transmit(now) {
            assert_eq!(key(&parse(&d)), key(&first));
            ours.push(now.as_nanos());
        }
        match u.hca.poll_timeout() {
            Some(t) => {
                now = t;
                u.hca.handle_timeout(now);
            }
            None => break,
        }
    }
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(&theirs) {
        let diff = (*o as i64 - *t as i64).unsigned_abs();
        assert!(diff <= 2_000_000, "ours {o} ns vs rxe {t} ns");
    }
    let wc = u.hca.poll_cq(u.cq, 4).unwrap();
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);
    let c = u.hca.counters();
    // rxe's counter deltas for this run: completer_retry_err 3, retry_exceeded_err 1
    assert_eq!((c.completer_retry_err, c.retry_exceeded_err, c.sent_pkts), (3, 1, 4));
}

#[test]
fn uc_pingpong_server_side() {
    let frames = capture("uc_pingpong.pcap");
    let server = [192, 168, 77, 2];
    let server_ip = IpAddr::V4(Ipv4Addr::from(server));
    // from uc_pingpong.log: both QPNs 0x13; client PSN 0x7f1bec, server PSN 0x55baa1
    let mut hca = Hca::new(HcaConfig::new("us", server_ip, 3));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(1024).unwrap();
    let mr = hca.reg_mr(pd, 1 << 17, AccessFlags::LOCAL_WRITE).unwrap();
    let init = qp_init(pd, cq, QpType::Uc, qp_cap(64, 64), true);
    let q = create_qp_numbered(&mut hca, init, 0x13);
    hca.modify_qp(
        q,
        &QpAttr::new()
            .state(QpState::Init)
            .pkey_index(0)
            .port(1)
            .access_flags(AccessFlags::LOCAL_WRITE),
    )
    .unwrap();
    hca.modify_qp(
        q,
        &QpAttr::new()
            .state(QpState::Rtr)
            .ah(AhAttr::new(IpAddr::V4(Ipv4Addr::new(192, 168, 77, 3))))
            .mtu(PathMtu::Mtu1024)
            .dest_qpn(0x13)
            .rq_psn(0x7f1bec),
    )
    .unwrap();
    hca.modify_qp(q, &QpAttr::new().state(QpState::Rts).sq_psn(0x55baa1)).unwrap();
    for i in 0..30 {
        hca.post_recv(q, RecvWr::new(i, mr.addr + 4096 * i, 4096, mr.lkey)).unwrap();
    }
    let mut u = Us { hca, qpn: q, mr, cq };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut echoed = 0;
    for f in &frames {
        if f.dgram.endpoints.src == server_ip {
            theirs.push(key(&parse(&f.dgram)));
            continue;
        }
        u.hca.handle_datagram(Instant::ZERO, f.dgram.clone());
        for wc in u.hca.poll_cq(u.cq, 16).unwrap() {
            assert_eq!(wc.status, WcStatus::Success);
            if wc.opcode == WcOpcode::Recv {
                let wr = SendWr::new(echoed, WrOpcode::Send).sge(u.mr.addr, wc.byte_len, u.mr.lkey);
                u.hca.post_send(u.qpn, wr).unwrap();
                echoed += 1;
                drain(&mut u, &mut ours);
            }
        }
    }
    assert_eq!(u.hca.counters().icrc_err, 0);
    assert!(echoed >= 20, "{echoed}");
    assert_eq!(ours, theirs);
}

#[test]
fn ud_pingpong_server_side() {
    let frames = capture("ud_pingpong.pcap");
    let server_ip = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 2));
    let client_ip = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 3));
    // from ud_pingpong.log: both QPNs 0x14, server PSN 0xdd85fa, Q_Key 0x11111111
    let mut hca = Hca::new(HcaConfig::new("us", server_ip, 3));
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(1024).unwrap();
    let mr = hca.reg_mr(pd, 1 << 17, AccessFlags::LOCAL_WRITE).unwrap();
    let init = qp_init(pd, cq, QpType::Ud, qp_cap(64, 64), true);
    let q = create_qp_numbered(&mut hca, init, 0x14);
    ud_up(&mut hca, q, 0x1111_1111, 0xdd85fa).unwrap();
    for i in 0..30 {
        hca.post_recv(q, RecvWr::new(i, mr.addr + 2048 * i, 1024 + 40, mr.lkey)).unwrap();
    }
    let mut u = Us { hca, qpn: q, mr, cq };
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut echoed = 0;
    for f in &frames {
        if f.dgram.endpoints.src == server_ip {
            let r = parse(&f.dgram);
            theirs.push((key(&r), r.deth));
            continue;
        }
        u.hca.handle_datagram(Instant::ZERO, f.dgram.clone());
        for wc in u.hca.poll_cq(u.cq, 16).unwrap() {
            assert_eq!(wc.status, WcStatus::Success);
            if wc.opcode == WcOpcode::Recv {
                assert_eq!((wc.byte_len, wc.src_qp), (1064, 0x14));
                let wr = SendWr::new(echoed, WrOpcode::Send).sge(u.mr.addr, 1024, u.mr.lkey).ud(
                    AhAttr::new(client_ip),
                    wc.src_qp,
                    0x1111_1111,
                );
                u.hca.post_send(u.qpn, wr).unwrap();
                echoed += 1;
                while let Some(d) = u.hca.poll_transmit(Instant::ZERO) {
                    assert_eq!(d.endpoints.dst, client_ip);
                    let r = parse(&d);
                    ours.push((key(&r), r.deth));
                }
            }
        }
    }
    assert_eq!(u.hca.counters().icrc_err + u.hca.counters().ud_dropped, 0);
    assert!(echoed >= 20, "{echoed}");
    assert_eq!(ours, theirs);
}

/// What `replay_pingpong_server` saw: our ACK/NAKs and SEND packets, rxe's,
/// and our HCA's counters.
struct PingpongReplay {
    our_acks: Vec<Key>,
    their_acks: Vec<Key>,
    our_reqs: Vec<Key>,
    their_reqs: Vec<Key>,
    sent: u64,
    counters: Counters,
}

/// Play the server of an `ibv_rc_pingpong` capture (at 192.168.77.2):
/// every client packet (as rxe's server received it) goes into our HCA,
/// which answers each `size`-byte receive with a `size`-byte SEND. The
/// interleaving of ACKs and the next SEND follows the application's timing
/// in the capture, so ACK/NAKs and requests are returned as two sequences
/// (rxe's requests without its retransmissions).
fn replay_pingpong_server(frames: &[Frame], size: u32) -> PingpongReplay {
    let server = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 2));
    let first_client = frames.iter().find(|f| f.dgram.endpoints.src != server).unwrap();
    let first_client = parse(&first_client.dgram);
    let first_server = frames
        .iter()
        .map(|f| (f, parse(&f.dgram)))
        .find(|(f, r)| f.dgram.endpoints.src == server && r.aeth.is_none())
        .map(|(_, r)| r)
        .unwrap();
    let (qpn, peer_qpn) = (first_client.bth.dest_qp.value(), first_server.bth.dest_qp.value());
    let mut u = us(
        [192, 168, 77, 2],
        qpn,
        [192, 168, 77, 3],
        peer_qpn,
        first_server.bth.psn.value(),
        first_client.bth.psn.value(),
        12,
    );
    for i in 0..25 {
        let a = u.mr.addr + u64::from(size) * i;
        u.hca.post_recv(u.qpn, RecvWr::new(i, a, size, u.mr.lkey)).unwrap();
    }
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    let mut sent = 0;
    for f in frames {
        if f.dgram.endpoints.src == server {
            theirs.push(key(&parse(&f.dgram)));
            continue;
        }
        u.hca.handle_datagram(Instant::ZERO, f.dgram.clone());
        drain(&mut u, &mut ours);
        for wc in u.hca.poll_cq(u.cq, 16).unwrap() {
            assert_eq!(wc.status, WcStatus::Success);
            if wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.byte_len, size);
                let a = u.mr.addr + (1 << 16);
                let wr = SendWr::new(1000 + sent, WrOpcode::Send).sge(a, size, u.mr.lkey);
                u.hca.post_send(u.qpn, wr).unwrap();
                sent += 1;
                drain(&mut u, &mut ours);
                let a = u.mr.addr + u64::from(size) * (sent % 25);
                u.hca.post_recv(u.qpn, RecvWr::new(sent, a, size, u.mr.lkey)).unwrap();
            }
        }
    }
    let split = |v: &Vec<Key>, acks: bool| {
        let mut out: Vec<Key> = Vec::new();
        for k in v.iter().filter(|k| k.4.is_some() == acks) {
            if acks || !out.contains(k) {
                out.push(*k);
            }
        }
        out
    };
    PingpongReplay {
        our_acks: split(&ours, true),
        their_acks: split(&theirs, true),
        our_reqs: split(&ours, false),
        their_reqs: split(&theirs, false),
        sent,
        counters: u.hca.counters(),
    }
}

#[test]
fn rc_pingpong_4k_server_side_with_retransmitted_message() {
    // ibv_rc_pingpong -n 20 (4096 B = FIRST/MIDDLE×2/LAST at MTU 1024): rxe
    // coalesces one ACK per message, and the client retransmits one whole
    // message whose packets the server answers as duplicates (one ACK
    // with the newest PSN per duplicate packet).
    let frames = capture("rc_pingpong.pcap");
    let r = replay_pingpong_server(&frames, 4096);
    assert_eq!(r.counters.icrc_err, 0, "every rxe frame passes our ICRC check");
    assert_eq!(r.counters.duplicate_request, 4);
    assert_eq!(r.sent, 20);
    assert_eq!(r.our_acks.len(), 24);
    assert_eq!(r.our_acks, r.their_acks, "ACK opcodes, PSNs, syndromes, MSNs");
    assert_eq!(r.our_reqs.len(), 80);
    assert_eq!(r.our_reqs, r.their_reqs);
}

#[test]
fn loss_rc_pingpong_server_side_naks_and_duplicates() {
    // lab scenario loss_rc_pingpong (tests/data/loss_rc_pingpong.{pcap,log}):
    // netem loss 10 % on the client's egress, ibv_rc_pingpong -n 50 (4 KiB).
    // What reached rxe's server (the br0 capture, before the server) goes
    // into our HCA: PSN gaps → one PSN-sequence-error NAK per gap,
    // out-of-order packets dropped until the retransmission, duplicates
    // re-ACKed with the newest PSN; our ACK/NAKs must equal rxe's.
    let frames = capture("loss_rc_pingpong.pcap");
    let r = replay_pingpong_server(&frames, 4096);
    assert_eq!(r.counters.icrc_err, 0, "every rxe frame passes our ICRC check");
    assert_eq!(r.sent, 50);
    let naks = r.their_acks.iter().filter(|k| matches!(k.4, Some(Syndrome::Nak(_)))).count();
    assert_eq!(naks, 14, "rxe's PSN sequence error NAKs in the capture");
    assert_eq!(r.our_acks, r.their_acks, "ACK/NAK PSNs, syndromes, MSNs as rxe's");
    assert_eq!(r.our_reqs.len(), 200);
    assert_eq!(r.our_reqs, r.their_reqs);
}

#[test]
fn write_lat_server_side_acks_and_duplicate() {
    // ib_write_lat -s 8 -n 100: both sides RDMA WRITE_ONLY 8 bytes in turn;
    // rxe's client retransmitted one WRITE, which rxe's server ACKed again
    // with the newest PSN. We play the server (192.168.77.2): our WRITEs are
    // posted where the capture shows the server's (first transmissions),
    // the client's WRITEs are fed in with their RETH moved into our MR.
    let frames = capture("write_lat.pcap");
    let server = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 2));
    let from_server = |f: &Frame| f.dgram.endpoints.src == server;
    let first_srv = frames.iter().find(|f| from_server(f)).map(|f| parse(&f.dgram)).unwrap();
    let first_cli = frames
        .iter()
        .find(|f| !from_server(f) && parse(&f.dgram).reth.is_some())
        .map(|f| parse(&f.dgram))
        .unwrap();
    let their_va = first_cli.reth.unwrap().va;
    let mut u = us(
        [192, 168, 77, 2],
        first_cli.bth.dest_qp.value(),
        [192, 168, 77, 3],
        first_srv.bth.dest_qp.value(),
        first_srv.bth.psn.value(),
        first_cli.bth.psn.value(),
        12,
    );
    let mut ours = Vec::new();
    let mut their_acks = Vec::new();
    let mut their_writes = Vec::new();
    for f in &frames {
        let r = parse(&f.dgram);
        if from_server(f) {
            if r.aeth.is_some() {
                their_acks.push(key(&r));
            } else if !their_writes.contains(&key(&r)) {
                // first transmission of the server's WRITE: post ours
                their_writes.push(key(&r));
                let wr = SendWr::new(their_writes.len() as u64, WrOpcode::RdmaWrite)
                    .sge(u.mr.addr + 4096, 8, u.mr.lkey)
                    .remote(0x1000, RKey::new(0x1234));
                u.hca.post_send(u.qpn, wr).unwrap();
                drain(&mut u, &mut ours);
            }
            continue;
        }
        let mut d = f.dgram.clone();
        let mut r2 = r;
        if let Some(reth) = r2.reth.as_mut() {
            let (_, payload) =
                RoceRepr::parse_bytes(&d.payload).map(|(a, b)| (a, b.to_vec())).unwrap();
            reth.va = u.mr.addr + (reth.va - their_va);
            reth.rkey = u.mr.rkey;
            d.payload = Bytes::from(PacketBuilder::of(&d).bytes(&r2, &payload));
        }
        u.hca.handle_datagram(Instant::ZERO, d);
        drain(&mut u, &mut ours);
    }
    let acks: Vec<Key> = ours.iter().filter(|k| k.4.is_some()).cloned().collect();
    let writes: Vec<Key> = ours.iter().filter(|k| k.4.is_none()).cloned().collect();
    let c = u.hca.counters();
    assert_eq!((c.icrc_err, c.malformed, c.bad_state), (0, 0, 0), "{c}");
    assert_eq!(c.duplicate_request, 1);
    assert_eq!(their_acks.len(), 101, "100 WRITEs + 1 duplicate");
    assert_eq!(acks, their_acks, "ACK PSNs, syndromes and MSNs as rxe's");
    assert_eq!(writes.len(), 100);
    assert_eq!(writes, their_writes);
    let wcs = u.hca.poll_cq(u.cq, 256).unwrap();
    assert_eq!(wcs.len(), 100);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
}

// ---------------------------------------------------------------------------
// us <-> rxe conversations from scripts/interop.sh (emulator/tests/data/us_rxe_*,
// trimmed with scripts/trim_pcap.py; facts from the run's logs in
// emulator/tests/data/us_rxe.log). 192.168.77.1 is our device, .2/.3 rxe.

/// The UDP payload without its ICRC (the ICRC covers the IPv4
/// identification, which differs between senders).
fn body(d: &Datagram) -> &[u8] {
    &d.payload[..d.payload.len() - 4]
}

/// Re-point a request's RETH/AtomicETH from rxe's buffer to ours and
/// re-fill its ICRC (after checking the captured one).
fn translate(d: &Datagram, their_va: u64, u: &Us) -> Datagram {
    let hdr = IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len()).unwrap();
    assert!(hdr.verify_icrc(&d.payload), "captured ICRC");
    let (mut r, payload) = RoceRepr::parse_bytes(&d.payload).map(|(a, b)| (a, b.to_vec())).unwrap();
    if let Some(reth) = r.reth.as_mut() {
        reth.va = u.mr.addr + (reth.va - their_va);
        reth.rkey = u.mr.rkey;
    }
    if let Some(a) = r.atomic_eth.as_mut() {
        a.va = u.mr.addr + (a.va - their_va);
        a.rkey = u.mr.rkey;
    }
    PacketBuilder::of(d).datagram(&r, &payload)
}

/// Our requests (from `roce perf` at .1) that rxe (.2) answered: our HCA,
/// put in rxe's place with rxe's memory contents (taken from its
/// answers), must answer the same requests with the same bytes.
fn rxe_responder_equivalence(name: &str, rxe_qpn: u32, their_va: u64) -> (usize, usize) {
    let frames = load(name).unwrap_or_else(|| panic!("{name} not found (emulator/tests/data)"));
    let rxe = IpAddr::V4(Ipv4Addr::new(192, 168, 77, 2));
    let reqs: Vec<&Datagram> =
        frames.iter().map(|f| &f.dgram).filter(|d| d.endpoints.src != rxe).collect();
    let theirs: Vec<&Datagram> =
        frames.iter().map(|f| &f.dgram).filter(|d| d.endpoints.src == rxe).collect();
    let first = parse(reqs[0]);
    let mut u =
        us([192, 168, 77, 2], rxe_qpn, [192, 168, 77, 1], 0x11, 0, first.bth.psn.value(), 12);
    // rxe's memory before the run: the first answer for each address
    let mut seen = std::collections::HashSet::new();
    for q in &reqs {
        let r = parse(q);
        let psn = r.bth.psn.value();
        if let Some(a) = r.atomic_eth {
            let resp = theirs.iter().map(|d| parse(d)).find(|x| x.bth.psn.value() == psn);
            if let (Some(resp), true) = (resp, seen.insert(a.va)) {
                let orig = resp.atomic_ack_eth.unwrap().orig_rem_data;
                u.hca.mr_write(u.mr.handle, a.va - their_va, &orig.to_le_bytes()).unwrap();
            }
        }
        if let Some(reth) = r.reth {
            if !seen.insert(reth.va) {
                continue;
            }
            let n = reth.dma_len.div_ceil(1024).max(1);
            let mut data = Vec::new();
            for k in 0..n {
                let p = (psn + k) & 0xff_ffff;
                if let Some(d) = theirs.iter().find(|d| parse(d).bth.psn.value() == p) {
                    data.extend_from_slice(RoceRepr::parse_bytes(&d.payload).unwrap().1);
                }
            }
            u.hca.mr_write(u.mr.handle, reth.va - their_va, &data).unwrap();
        }
    }
    let mut ours: Vec<Datagram> = Vec::new();
    for q in &reqs {
        u.hca.handle_datagram(Instant::ZERO, translate(q, their_va, &u));
        while let Some(d) = u.hca.poll_transmit(Instant::ZERO) {
            ours.push(d);
        }
    }
    // the trimmed capture ends before rxe answered its last requests: every
    // answer it holds is compared
    let n = theirs.len();
    assert!(ours.len() >= n, "{} answers of ours, {n} of rxe's", ours.len());
    for k in 0..n {
        assert_eq!(
            body(&ours[k]),
            body(theirs[k]),
            "{name}: answer {k}: ours {:?}\nrxe's {:?}",
            key(&parse(&ours[k])),
            key(&parse(theirs[k]))
        );
    }
    let c = u.hca.counters();
    assert_eq!(c.icrc_err + c.malformed + c.bad_state + c.naks_sent, 0, "{c}");
    (reqs.len(), n)
}

#[test]
fn us_rxe_fetch_and_add_rxe_answers_equal_ours() {
    // ours.log: rxe QPN 0x29 RKey 0x16ab VAddr 0x561fe07dd000; we are QPN 0x11
    let (reqs, answers) =
        rxe_responder_equivalence("us_rxe_atomic_faa_client.pcap", 0x29, 0x561f_e07d_d000);
    assert_eq!((reqs, answers), (80, 80));
}

#[test]
fn us_rxe_compare_and_swap_rxe_answers_equal_ours() {
    // ours.log: rxe QPN 0x2a RKey 0x17f2 VAddr 0x5647df626000
    let (reqs, answers) =
        rxe_responder_equivalence("us_rxe_atomic_cas_client.pcap", 0x2a, 0x5647_df62_6000);
    assert_eq!((reqs, answers), (82, 78));
}

#[test]
fn us_rxe_read_rxe_answers_equal_ours() {
    // ours.log: rxe QPN 0x27 RKey 0x1450 VAddr 0x55d56cedc000; 4096-byte READs
    let (reqs, answers) =
        rxe_responder_equivalence("us_rxe_read_client.pcap", 0x27, 0x55d5_6ced_c000);
    // 21 READs of 4 KiB; rxe's first 29 response packets are in the file
    assert_eq!((reqs, answers), (21, 29));
}

#[test]
fn us_rxe_bad_rkey_write_is_naked_as_recorded() {
    // rxe's ib_write_bw (.3, QPN 0x2c) wrote with the wrong R_Key we
    // advertised (0xa558ae); our device (.1, QPN 0x11) NAKed it with
    // REMOTE_ACCESS_ERROR and rxe's WC was REM_ACCESS_ERR
    let frames = load("us_rxe_badrkey_server.pcap").expect("us_rxe_badrkey_server.pcap");
    assert_eq!(frames.len(), 2);
    let req = parse(&frames[0].dgram);
    assert_eq!(req.reth.unwrap().rkey, RKey::new(0x00a5_58ae));
    let mut u =
        us([192, 168, 77, 1], 0x11, [192, 168, 77, 3], 0x2c, 0xdfb675, req.bth.psn.value(), 12);
    u.hca.handle_datagram(Instant::ZERO, frames[0].dgram.clone());
    let nak = u.hca.poll_transmit(Instant::ZERO).expect("a NAK");
    assert!(u.hca.poll_transmit(Instant::ZERO).is_none());
    assert_eq!(body(&nak), body(&frames[1].dgram), "the NAK byte for byte");
    let a = parse(&nak).aeth.unwrap();
    assert_eq!(a.syndrome, Syndrome::Nak(roce_packet::NakCode::RemoteAccessError));
    assert_eq!(u.hca.counters().naks_sent, 1);
}
