//! The hostile peer against a live drop-in device (issue 26): an ordinary
//! C program on the drop-in (`tests/c/hostile_target.c`) holds a region
//! of two pages between two read-only guard pages, and 16 RC QPs connected
//! to "peer" QPs at 127.0.100.5. This test is that peer: from a real UDP
//! socket on 127.0.100.5:4791 it sends each QP one crafted request with a
//! valid ICRC at the expected PSN (a wrong rkey, a range past the end or
//! into a guard page, a `va + len` that wraps, a DMA length of 2 GiB or
//! 4 GiB, a 2 GiB READ, misaligned atomics, payloads longer than announced
//! or than the MTU, a SEND longer than the receive, a MIDDLE without a
//! FIRST). Each must be answered with the right NAK and no data; the
//! program must survive, every QP must be in ERROR, and not one byte of the
//! region or the guards may change. (`emulator/tests/hostile_peer.rs` runs
//! the same requests against the core alone, with more cases.)
//!
//! Needs cc and libibverbs-dev (else SKIPPED). Device roce0 on
//! 127.0.100.4, the peer on 127.0.100.5.

use crate::common;
use common::text;

use roce_packet::{AtomicEthRepr, NakCode, Opcode, Qpn, RKey, RethRepr, RoceRepr, Syndrome};
use roce_sim::packet::{request, PacketBuilder};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DEV: &str = "127.0.100.4";
const PEER: &str = "127.0.100.5";

/// What the peer sends to QP `i`, and the NAK it must get.
fn case(i: usize, rkey: u32, va: u64, len: u64) -> (&'static str, RoceRepr, Vec<u8>, NakCode) {
    use NakCode::{InvalidRequest as Inv, RemoteAccessError as Acc};
    let rk = RKey::new(rkey);
    let bad = RKey::new(rkey ^ 0x0101_0000);
    let end = va + len;
    let reth = |va, rkey, dma_len| Some(RethRepr { va, rkey, dma_len });
    let w = |op| request(op, Qpn::new(0), 0x100);
    let (name, mut r, payload, want) = match i {
        0 => ("WRITE with a wrong rkey", w(Opcode::RC_RDMA_WRITE_ONLY), vec![1; 64], Acc),
        1 => ("WRITE past the end", w(Opcode::RC_RDMA_WRITE_ONLY), vec![2; 64], Acc),
        2 => ("WRITE whose va + len wraps 2^64", w(Opcode::RC_RDMA_WRITE_ONLY), vec![3; 64], Acc),
        3 => ("WRITE FIRST announcing 2 GiB", w(Opcode::RC_RDMA_WRITE_FIRST), vec![4; 1024], Acc),
        4 => {
            ("WRITE FIRST announcing 4 GiB - 1", w(Opcode::RC_RDMA_WRITE_FIRST), vec![5; 1024], Acc)
        }
        5 => ("WRITE into the guard page before", w(Opcode::RC_RDMA_WRITE_ONLY), vec![6; 64], Acc),
        6 => (
            "WRITE with more payload than its DMA length",
            w(Opcode::RC_RDMA_WRITE_ONLY),
            vec![7; 128],
            Inv,
        ),
        7 => {
            ("WRITE with a payload over the MTU", w(Opcode::RC_RDMA_WRITE_ONLY), vec![8; 2048], Inv)
        }
        8 => ("READ with a wrong rkey", w(Opcode::RC_RDMA_READ_REQUEST), vec![], Acc),
        9 => ("READ of 2 GiB", w(Opcode::RC_RDMA_READ_REQUEST), vec![], Acc),
        10 => ("READ whose va + len wraps 2^64", w(Opcode::RC_RDMA_READ_REQUEST), vec![], Acc),
        11 => ("READ of the guard page after", w(Opcode::RC_RDMA_READ_REQUEST), vec![], Acc),
        12 => ("FETCH_ADD misaligned", w(Opcode::RC_FETCH_ADD), vec![], Inv),
        13 => ("COMPARE_SWAP with a wrong rkey", w(Opcode::RC_COMPARE_SWAP), vec![], Acc),
        14 => ("SEND longer than the receive", w(Opcode::RC_SEND_ONLY), vec![9; 200], Inv),
        _ => ("SEND MIDDLE without a FIRST", w(Opcode::RC_SEND_MIDDLE), vec![10; 1024], Inv),
    };
    match i {
        0 => r.reth = reth(va, bad, 64),
        1 => r.reth = reth(end - 32, rk, 64),
        2 => r.reth = reth(u64::MAX - 15, rk, 64),
        3 => r.reth = reth(va, rk, 1 << 31),
        4 => r.reth = reth(va, rk, u32::MAX),
        5 => r.reth = reth(va - 4096, rk, 64),
        6 => r.reth = reth(va, rk, 64),
        7 => r.reth = reth(va, rk, 2048),
        8 => r.reth = reth(va, bad, 4096),
        9 => r.reth = reth(va, rk, 1 << 31),
        10 => r.reth = reth(u64::MAX - 15, rk, 64),
        11 => r.reth = reth(end, rk, 4096),
        12 => r.atomic_eth = Some(AtomicEthRepr { va: va + 3, rkey: rk, swap_add: 1, compare: 0 }),
        13 => r.atomic_eth = Some(AtomicEthRepr { va, rkey: bad, swap_add: 1, compare: 0 }),
        _ => {}
    }
    (name, r, payload, want)
}

#[test]
fn sixteen_crafted_requests_get_their_naks_and_move_no_byte() {
    let lib = common::drop_in_dir("hostile-test-lib", &["libibverbs.so.1"]);
    let Some(exe) = common::compile_verbs_c("hostile_target", &lib) else { return };
    let peer: IpAddr = PEER.parse().unwrap();
    let dev: SocketAddr = format!("{DEV}:4791").parse().unwrap();
    let sock = UdpSocket::bind(SocketAddr::new(peer, 4791)).expect("bind the peer's 4791");
    let mut child = Command::new(&exe)
        .arg(PEER)
        .env("LD_LIBRARY_PATH", &lib)
        .env("ROCE_EMU_DEVICES", format!("roce0=udp:{DEV}"))
        .env("ROCE_EMU_STATS", "0")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hostile_target");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut next = |out: &mut BufReader<_>| {
        line.clear();
        out.read_line(&mut line).expect("read the target's output");
        line.trim().to_string()
    };
    let ready = next(&mut out);
    let f: Vec<&str> = ready.split_whitespace().collect();
    assert_eq!(f.first(), Some(&"READY"), "{ready}");
    let (rkey, va, len): (u32, u64, u64) =
        (f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap());
    let qpns: Vec<u32> = (0..16)
        .map(|i| {
            let l = next(&mut out);
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!((f[0], f[1]), ("QPN", i.to_string().as_str()), "{l}");
            f[2].parse().unwrap()
        })
        .collect();

    let pb = PacketBuilder::new(peer, dev.ip()).src_port(4791);
    let mut want = BTreeMap::new();
    for (i, qpn) in qpns.iter().enumerate() {
        let (name, mut r, payload, nak) = case(i, rkey, va, len);
        r.bth.dest_qp = Qpn::new(*qpn);
        sock.send_to(&pb.sized_bytes(&r, &payload), dev).expect("send");
        want.insert(0x100 + i as u32, (name, nak));
    }
    // every answer, by the peer QPN it is addressed to
    let mut got: BTreeMap<u32, Vec<RoceRepr>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 9000];
    while got.len() < 16 && Instant::now() < deadline {
        sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let Ok((n, _)) = sock.recv_from(&mut buf) else { continue };
        let (r, _) =
            RoceRepr::parse_bytes(&buf[..n]).expect("the device sends well-formed packets");
        got.entry(r.bth.dest_qp.value()).or_default().push(r);
    }
    // a moment for anything that should not come (data after a NAK)
    sock.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        let (r, _) = RoceRepr::parse_bytes(&buf[..n]).expect("well-formed");
        got.entry(r.bth.dest_qp.value()).or_default().push(r);
    }
    child.stdin.as_mut().unwrap().write_all(b"CHECK\n").unwrap();
    let status = child.wait().expect("wait");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "the target survives: {status:?}\n{rest}\n{err}");

    for (peer_qpn, (name, nak)) in &want {
        let answers = got.get(peer_qpn).cloned().unwrap_or_default();
        let naks: Vec<(NakCode, u32)> = answers
            .iter()
            .filter_map(|r| match r.aeth.map(|a| a.syndrome) {
                Some(Syndrome::Nak(c)) => Some((c, r.bth.psn.value())),
                _ => None,
            })
            .collect();
        assert_eq!(naks, vec![(*nak, 0x100)], "{name}: {answers:?}");
        assert_eq!(answers.len(), 1, "{name}: a NAK and nothing else (no data): {answers:?}");
    }
    for i in 0..16 {
        assert!(rest.contains(&format!("STATE {i} 6\n")), "QP {i} in ERROR\n{rest}");
    }
    assert!(rest.contains("REGION intact"), "{rest}");
    assert!(rest.contains("GUARDS intact"), "{rest}");
    // the receive of QP 14 completes with a local length error
    assert!(rest.contains("RECV 1 "), "QP 14's receive: IBV_WC_LOC_LEN_ERR\n{rest}");
    assert!(rest.contains("DONE"), "{rest}\n{}", text(err.as_bytes()));
}
