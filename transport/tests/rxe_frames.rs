//! The receive-side ICRC solver on real rxe frames (Linux 6.1 rxe, non-zero
//! IPv4 identifications), copied from shared/captures into tests/data.

use roce_packet::frame::parse_frame;
use roce_pcap::read_capture_file;
use roce_transport::rxcheck::{check, solve_ipv4_id, RxIcrc};
use std::path::Path;

fn datagrams(name: &str) -> Vec<roce_packet::frame::RoceDatagram> {
    let p = Path::new(crate::CRATE_DIR).join("tests/data").join(name);
    let frames = read_capture_file(&p).expect("fixture");
    frames
        .iter()
        .filter_map(|f| parse_frame(f.linktype, &f.data, 4791).ok().flatten())
        .flatten()
        .collect()
}

fn solve_all(name: &str, min: usize) {
    let ds = datagrams(name);
    let good: Vec<_> = ds.iter().filter(|d| d.icrc_ok()).collect();
    assert!(good.len() >= min, "{name}: {} valid frames", good.len());
    let nonzero = good.iter().filter(|d| d.meta.ipv4_id != 0).count();
    assert!(nonzero >= min, "rxe sends non-zero identifications ({nonzero})");
    for d in &good {
        assert!(d.meta.dont_fragment);
        // What a plain socket sees: endpoints and payload, not the id.
        assert_eq!(solve_ipv4_id(&d.endpoints, &d.udp_payload), Some(d.meta.ipv4_id));
        let v = check(&d.endpoints, &d.udp_payload, &[0], true);
        let want = if d.meta.ipv4_id == 0 {
            RxIcrc::Exact { ipv4_id: 0 }
        } else {
            RxIcrc::SolvedId { ipv4_id: d.meta.ipv4_id }
        };
        assert_eq!(v, want);
        // A full-strength check when the id is expected.
        assert_eq!(
            check(&d.endpoints, &d.udp_payload, &[d.meta.ipv4_id], false),
            RxIcrc::Exact { ipv4_id: d.meta.ipv4_id }
        );
    }
}

#[test]
fn solver_recovers_rxe_identifications_rc_pingpong() {
    solve_all("rxe_rc_pingpong.pcap", 50);
}

#[test]
fn solver_recovers_rxe_identifications_host_udp() {
    solve_all("rxe_host_udp.pcap", 100);
}

#[test]
fn corrupted_rxe_frames_are_rejected() {
    let ds = datagrams("rxe_rc_pingpong.pcap");
    let mut bad = 0;
    let mut tried = 0;
    for d in ds.iter().filter(|d| d.icrc_ok()) {
        let n = d.udp_payload.len();
        for pos in [0usize, 12, n / 2, n - 5, n - 1].into_iter().filter(|&p| p != 4 && p < n) {
            let mut p = d.udp_payload.clone();
            p[pos] ^= 0x80;
            tried += 1;
            if check(&d.endpoints, &p, &[0], true) == RxIcrc::Bad {
                bad += 1;
            }
        }
    }
    assert!(tried >= 200);
    assert_eq!(bad, tried, "every single-bit corruption is caught");
}

#[test]
fn the_non_roce_datagram_in_host_udp_is_bad() {
    // host_udp holds one non-RoCE datagram sent to port 4791 (bad ICRC).
    let ds = datagrams("rxe_host_udp.pcap");
    let bad: Vec<_> = ds.iter().filter(|d| !d.icrc_ok()).collect();
    assert_eq!(bad.len(), 1);
    assert_eq!(check(&bad[0].endpoints, &bad[0].udp_payload, &[0], true), RxIcrc::Bad);
}
