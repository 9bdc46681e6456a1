//! What really goes on the wire: capture our own frames on loopback with an
//! AF_PACKET socket (needs CAP_NET_RAW; skipped with a message otherwise)
//! and check IPv4 identification, DF and ICRC of every frame, GSO
//! super-packets included (segment k must carry identification k).

use crate::common;
use common::*;
use nix::sys::socket::{
    self as s, AddressFamily, LinkAddr, MsgFlags, SockFlag, SockProtocol, SockType,
};
use roce_packet::frame::parse_frame;
use roce_packet::frame::LinkType;
use roce_pcap::PcapWriter;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

const PACKET_OUTGOING: u8 = 4;

fn sniffer() -> Option<OwnedFd> {
    match s::socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_NONBLOCK,
        SockProtocol::EthAll,
    ) {
        Ok(fd) => Some(fd),
        Err(e) => {
            eprintln!("SKIPPED: no AF_PACKET socket ({e}); needs CAP_NET_RAW");
            None
        }
    }
}

/// Outgoing loopback frames for `limit`.
fn capture(fd: &OwnedFd, limit: Duration, want: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut buf = vec![0u8; 70_000];
    let end = Instant::now() + limit;
    while Instant::now() < end {
        match s::recvfrom::<LinkAddr>(fd.as_raw_fd(), &mut buf) {
            Ok((n, Some(a))) if a.pkttype() == PACKET_OUTGOING && want(&buf[..n]) => {
                frames.push(buf[..n].to_vec())
            }
            Ok(_) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    let _ = MsgFlags::empty();
    frames
}

#[test]
fn ipv4_id_df_and_icrc_on_the_wire() {
    let Some(fd) = sniffer() else { return };
    let mut a = bind("127.1.10.2", |c| c.gso = true);
    let mut b = bind("127.1.10.3", |_| {});
    let ep = core_ep(&a, &b);
    // 12 equal-sized datagrams (one GSO send), then 3 of distinct sizes.
    let mut sent: Vec<_> =
        (0..12).map(|i| send_only(&ep, 9, i, &pattern(i as usize, 1000))).collect();
    for (k, len) in [1usize, 333, 4096].iter().enumerate() {
        sent.push(send_only(&ep, 9, 12 + k as u32, &pattern(k, *len)));
    }
    assert_eq!(a.send(&sent).consumed, sent.len());
    assert!(a.snapshot().gso_sends >= 1);
    let got = recv_n(&mut b, sent.len(), Duration::from_secs(5));
    assert_eq!(got.len(), sent.len());
    let dport = b.local_addr().port().to_be_bytes();
    let src = [127u8, 1, 10, 2];
    let frames = capture(&fd, Duration::from_millis(300), |f| {
        f.len() > 38 && f[12..14] == [8, 0] && f[26..30] == src && f[36..38] == dport
    });
    assert_eq!(frames.len(), 4, "one GSO super-packet + 3 singles");
    let mut n = 0;
    let mut file = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
    for f in &frames {
        file.write_frame(Duration::ZERO, f).unwrap();
        let ds = parse_frame(LinkType::Ethernet, f, b.local_addr().port()).unwrap().unwrap();
        for d in ds {
            assert!(d.meta.dont_fragment, "DF set");
            let k = d.gso.map(|g| g.segment).unwrap_or(0) as u16;
            assert_eq!(d.meta.ipv4_id, k, "identification 0, or k for GSO segment k");
            assert!(d.icrc_ok(), "ICRC valid for the real header (frame {n})");
            assert_eq!(d.endpoints.src_port, a.local_addr().port());
            assert_eq!(body(&d.udp_payload), body(&sent[n].payload));
            n += 1;
        }
    }
    assert_eq!(n, sent.len());
    // Keep a copy for the independent oracle (oracle.py --no-tshark FILE).
    let out = std::env::temp_dir().join("roce_transport_wire_ipv4.pcap");
    let _ = std::fs::write(&out, file.into_inner().unwrap());
    eprintln!("capture written to {}", out.display());
}

#[test]
fn ipv6_lengths_and_addresses_on_the_wire() {
    let Some(fd) = sniffer() else { return };
    let mut a = bind("::1", |c| c.local.set_port(0));
    let mut b = bind("::1", |c| c.local.set_port(0));
    let ep = core_ep(&a, &b);
    let sent: Vec<_> = (0..4).map(|i| send_only(&ep, 2, i, &pattern(i as usize, 700))).collect();
    assert_eq!(a.send(&sent).consumed, 4);
    assert_eq!(recv_n(&mut b, 4, Duration::from_secs(5)).len(), 4);
    let dport = b.local_addr().port().to_be_bytes();
    let sport = a.local_addr().port().to_be_bytes();
    let frames = capture(&fd, Duration::from_millis(300), |f| {
        f.len() > 58 && f[12..14] == [0x86, 0xDD] && f[54..56] == sport && f[56..58] == dport
    });
    let mut n = 0;
    for f in &frames {
        for d in parse_frame(LinkType::Ethernet, f, b.local_addr().port()).unwrap().unwrap() {
            assert!(d.icrc_ok());
            assert_eq!(body(&d.udp_payload), body(&sent[n].payload));
            n += 1;
        }
    }
    assert_eq!(n, 4);
}
