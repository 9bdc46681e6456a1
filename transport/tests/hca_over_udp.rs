//! Two real HCAs (the sans-IO core) over UDP on 127.1.20.2 / 127.1.20.3,
//! port 4791, each driven by its own driver thread: RC SEND and RDMA WRITE
//! with the data verified, large messages going out with GSO.

use crate::common;
use common::DrivenSide;

use roce_emulator::*;
use roce_sim::testkit::RcPath;
use roce_transport::{UdpConfig, UdpTransport};
use std::net::IpAddr;

type Side = DrivenSide<UdpTransport>;

fn side(name: &str, ip: IpAddr, seed: u64) -> Side {
    let mut cfg = HcaConfig::new(name, ip, seed);
    cfg.active_mtu = PathMtu::Mtu4096; // loopback: 64 KiB link MTU
                                       // RoCE peers send to port 4791: these unique loopback addresses have it free.
    let t = UdpTransport::bind(UdpConfig::on(ip)).expect("bind port 4791");
    DrivenSide::new(Hca::new(cfg), t, 1024, 256)
}

fn connect(s: &Side, peer_ip: IpAddr, peer_qpn: roce_packet::Qpn, sq_psn: u32, rq_psn: u32) {
    s.connect(
        peer_ip,
        peer_qpn,
        RcPath { mtu: PathMtu::Mtu4096, sq_psn, rq_psn, ..RcPath::default() },
    );
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed)).collect()
}

#[test]
fn send_and_rdma_write_between_two_hcas_over_udp() {
    let ia: IpAddr = "127.1.20.2".parse().unwrap();
    let ib: IpAddr = "127.1.20.3".parse().unwrap();
    let a = side("udp-a", ia, 1);
    let b = side("udp-b", ib, 2);
    connect(&a, ib, b.qpn, 0x100, 0x200);
    connect(&b, ia, a.qpn, 0x200, 0x100);

    // SEND of 3 * 4096 + 100 bytes into a posted receive.
    let msg = pattern(3 * 4096 + 100, 7);
    a.send_checked(&b, &msg, 64 * 1024);

    // RDMA WRITE of 64 KiB + 3 bytes (17 packets: a GSO run of full MTUs).
    a.write_checked(&b, &pattern(64 * 1024 + 3, 99));

    let (ca, cb) = (a.h.counters(), b.h.counters());
    assert_eq!(cb.icrc_bad + ca.icrc_bad, 0);
    assert_eq!(cb.icrc_ok_solved_id + ca.icrc_ok_solved_id, 0, "our own peers: exact checks only");
    assert!(cb.dgrams_in >= 4 + 17, "{cb:?}");
    assert!(ca.gso_sends >= 1, "full-MTU runs leave with GSO: {ca:?}");
    assert_eq!(ca.send_errors + cb.send_errors, 0);
    let (ka, kb) = (a.hca.lock().unwrap().counters(), b.hca.lock().unwrap().counters());
    assert_eq!(ka.icrc_err + kb.icrc_err, 0, "the core's own exact ICRC check passes");
    assert_eq!(kb.rcvd_pkts, cb.dgrams_in);
}
