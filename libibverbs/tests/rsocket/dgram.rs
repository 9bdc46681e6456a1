//! Datagram rsockets (`SOCK_DGRAM` over UD): rdma-core's `udpong` in both
//! roles (two processes on one pair of devices; echo, one-way and
//! poll-driven runs), and two datagram rsockets of this executable
//! exchanging checked datagrams with the sender's address checked.

use super::{child, cmd};
use crate::common::{self, need, text};
use ibverbs::roce_rdmacm::RSocket;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The UDP port `port` of `addr` is bound on this host (`/proc/net/udp`).
fn udp_bound(addr: [u8; 4], port: u16) -> bool {
    let want = format!("{:08X}:{:04X}", u32::from_le_bytes(addr), port);
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|t| t.contains(&want))
}

/// `udpong -b` serving (it serves until killed) three clients in turn:
/// an echo run (-T e: every datagram answered), a one-way run (the
/// server counts), an echo run driven by `rpoll` (-T a). Each client must
/// exit 0 with its result line. Sizes stay below the devices' MTU (1024):
/// a UD datagram is one packet.
#[test]
fn udpong_both_roles() {
    let Some(exe) = need("udpong", "rdmacm-utils") else { return };
    let net = 162;
    let (addr, port) = ("127.0.162.2", 7690u16);
    let ps = port.to_string();
    let server = cmd(&exe, net, &["-b", addr, "-p", &ps]).spawn().expect("spawn the udpong server");
    let end = Instant::now() + Duration::from_secs(20);
    while !udp_bound([127, 0, net, 2], port) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let runs: [(&[&str], &str); 3] = [
        (&["-T", "e", "-C", "300", "-S", "1000"], "1000"),
        (&["-C", "3000", "-S", "64"], "64"),
        (&["-T", "a", "-T", "e", "-C", "200", "-S", "100"], "100"),
    ];
    let mut outs = String::new();
    for (args, bytes) in runs {
        let mut a = vec!["-s", addr, "-p", ps.as_str()];
        a.extend_from_slice(args);
        let c = cmd(&exe, net, &a).spawn().expect("spawn the udpong client");
        let (o, killed) = common::finish(c, Duration::from_secs(60));
        let out = format!("{}{}", text(&o.stdout), text(&o.stderr));
        let result = out.lines().find(|l| l.starts_with("custom")).unwrap_or("");
        let f: Vec<&str> = result.split_whitespace().collect();
        assert!(
            !killed && o.status.success() && f.len() == 7 && f[1] == bytes,
            "udpong {}:\n{out}",
            args.join(" ")
        );
        outs += &out;
    }
    let (s, _) = common::finish(server, Duration::from_millis(300));
    println!("{outs}--- server\n{}{}", text(&s.stdout), text(&s.stderr));
}

const NET: u8 = 163;

fn pattern(seq: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(31) ^ seq.wrapping_mul(7)) as u8).collect()
}

/// One datagram each way, checked: the bytes, the length, the sender.
fn exchange(c: &RSocket, s: &RSocket, ca: SocketAddr, sa: SocketAddr, i: usize, len: usize) {
    let mut b = [0u8; 2048];
    let d = pattern(i, len);
    assert_eq!(c.send_to(&d, sa).expect("rsendto"), len);
    let (n, from) = s.recv_from(&mut b).expect("rrecvfrom at the server");
    assert_eq!((n, from), (len, ca), "datagram {i}");
    assert!(b[..n] == d[..], "datagram {i}: bytes differ");
    let r = pattern(i + 1000, len);
    assert_eq!(s.send_to(&r, from).expect("rsendto back"), len);
    let (n, from) = c.recv_from(&mut b).expect("rrecvfrom at the client");
    assert_eq!((n, from), (len, sa), "answer {i}");
    assert!(b[..n] == r[..], "answer {i}: bytes differ");
}

/// Two datagram rsockets on two devices: 200 datagrams of 1 to 1016
/// bytes (the first over UDP, the rest over UD once the QPNs are known),
/// each answered; the bytes and the sender's address checked each way;
/// a short buffer truncates; an unbound rsocket's receive says EINVAL and
/// an empty non-blocking one EAGAIN (rdma-core's errnos); a
/// datagram longer than a receive buffer's 2048 bytes is refused.
#[test]
fn two_dgram_rsockets_exchange_checked_datagrams() {
    if std::env::var_os("ROCE_RS_CHILD").is_none() {
        let out = child("rsocket::dgram::two_dgram_rsockets_exchange_checked_datagrams", NET);
        assert!(out.contains("dgram: 200 datagrams checked each way"), "{out}");
        return;
    }
    let sa: SocketAddr = format!("127.0.{NET}.2:7700").parse().expect("address");
    let ca: SocketAddr = format!("127.0.{NET}.3:7701").parse().expect("address");
    let s = RSocket::dgram(false).expect("rsocket");
    let e = s.recv_from(&mut [0u8; 16]).expect_err("neither bound nor connected");
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    s.bind(sa).expect("rbind");
    let c = RSocket::dgram(false).expect("rsocket");
    c.bind(ca).expect("rbind");
    s.set_nonblocking(true).expect("rfcntl");
    let e = s.recv_from(&mut [0u8; 16]).expect_err("nothing to read");
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    s.set_nonblocking(false).expect("rfcntl");
    let sizes = [1usize, 64, 1016, 500, 7, 999, 128, 1000];
    for i in 0..200 {
        exchange(&c, &s, ca, sa, i, sizes[i % sizes.len()]);
    }
    // truncated to the buffer; the next datagram is whole
    c.send_to(&pattern(1, 100), sa).expect("rsendto");
    c.send_to(&pattern(2, 50), sa).expect("rsendto");
    let mut b = [0u8; 10];
    assert_eq!(s.recv_from(&mut b).expect("rrecvfrom"), (10, ca));
    assert!(b[..] == pattern(1, 100)[..10]);
    let mut b = [0u8; 64];
    assert_eq!(s.recv_from(&mut b).expect("rrecvfrom"), (50, ca));
    assert!(b[..50] == pattern(2, 50)[..]);
    let e = c.send_to(&[0u8; 2041], sa).expect_err("longer than a receive buffer");
    assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE));
    println!("dgram: 200 datagrams checked each way");
}
