//! The datagram headers, byte for byte.

use roce_rsocket::dgram::*;

#[test]
fn ds_header_ipv4() {
    let h = DsHeader { port: 7471, addr: DsAddr::V4([10, 0, 0, 1]) };
    let b = h.emit();
    assert_eq!(b, [4, 8, 0x1d, 0x2f, 10, 0, 0, 1]);
    let mut dgram = b.clone();
    dgram.extend_from_slice(b"hello");
    assert_eq!(DsHeader::parse(&dgram), Ok((h, 5)));
    assert_eq!(h.max_payload(), 2040);
}

#[test]
fn ds_header_ipv6() {
    let mut addr = [0u8; 16];
    addr[15] = 1;
    let h = DsHeader { port: 1, addr: DsAddr::V6 { flowinfo: 0x12345, addr } };
    let b = h.emit();
    assert_eq!(b.len(), 24);
    assert_eq!(&b[..8], &[6, 24, 0, 1, 0, 1, 0x23, 0x45]);
    assert_eq!(&b[8..], &addr);
    assert_eq!(DsHeader::parse(&b), Ok((h, 0)));
    assert_eq!(h.max_payload(), 2024);
}

#[test]
fn ds_header_refusals() {
    assert_eq!(
        DsHeader::parse(&[5, 8, 0, 0, 0, 0, 0, 0]),
        Err(DsError::BadHeader { version: 5, length: 8 })
    );
    assert_eq!(
        DsHeader::parse(&[4, 24, 0, 0, 0, 0, 0, 0]),
        Err(DsError::BadHeader { version: 4, length: 24 })
    );
    assert_eq!(DsHeader::parse(&[6, 24, 0, 0, 0, 0, 0, 0]), Err(DsError::Short { len: 8 }));
    assert_eq!(DsHeader::parse(&[4]), Err(DsError::Short { len: 1 }));
}

#[test]
fn ud_receive_after_the_grh() {
    let h = DsHeader { port: 9, addr: DsAddr::V4([1, 2, 3, 4]) };
    let mut buf = h.emit();
    buf.extend_from_slice(&[7; 100]);
    buf.resize(2048, 0); // the posted buffer is longer than the datagram
    assert_eq!(DsHeader::parse_recv(&buf, 40 + 108), Ok((h, 8..108)));
    assert_eq!(DsHeader::parse_recv(&buf, 30), Err(DsError::Short { len: 0 }));
    assert_eq!(DsHeader::parse_recv(&buf[..50], 40 + 108), Err(DsError::Short { len: 50 }));
    // an IPv6 header in a 10-byte datagram: rdma-core would read past it
    let mut v6 = vec![6, 24];
    v6.resize(2048, 0);
    assert_eq!(DsHeader::parse_recv(&v6, 40 + 10), Err(DsError::Short { len: 10 }));
}

#[test]
fn udp_header_ipv4() {
    let h = DsUdpHeader { op: UdpOp::Data, qpn: 0x12_3456, addr: DsUdpAddr::V4([10, 0, 0, 2]) };
    let b = h.emit();
    assert_eq!(b, [0x55, 0x55, 0x55, 0x55, 4, 0, 16, 0, 0, 0x12, 0x34, 0x56, 10, 0, 0, 2]);
    let mut m = b.clone();
    m.extend_from_slice(b"data");
    assert_eq!(DsUdpHeader::parse(&m, false), Ok((h, 4)));
    assert_eq!(DsUdpHeader::parse(&m, true), Err(DsError::FamilyMismatch { version: 4 }));
    // the top byte of the QPN is not ours
    let h2 = DsUdpHeader { qpn: 0xFF12_3456, op: UdpOp::Ctrl, ..h };
    let b2 = h2.emit();
    assert_eq!((b2[5], &b2[8..12]), (7, &[0, 0x12, 0x34, 0x56][..]));
    let mut b3 = b2.clone();
    b3[8] = 0xAB;
    assert_eq!(DsUdpHeader::parse(&b3, false).unwrap().0.qpn, 0x12_3456);
}

#[test]
fn udp_header_ipv6_and_refusals() {
    let h = DsUdpHeader { op: UdpOp::Ctrl, qpn: 17, addr: DsUdpAddr::V6([0xfe; 16]) };
    let b = h.emit();
    assert_eq!(b.len(), 28);
    assert_eq!(&b[4..8], &[6, 7, 28, 0]);
    assert_eq!(DsUdpHeader::parse(&b, true), Ok((h, 0)));
    assert_eq!(DsUdpHeader::parse(&b[..20], true), Err(DsError::Short { len: 20 }));
    let mut bad = b.clone();
    bad[0] = 0x54;
    assert_eq!(DsUdpHeader::parse(&bad, true), Err(DsError::BadTag { tag: 0x5455_5555 }));
    let mut bad = b.clone();
    bad[6] = 16;
    assert_eq!(DsUdpHeader::parse(&bad, true), Err(DsError::BadHeader { version: 6, length: 16 }));
    assert_eq!(DsUdpHeader::parse(&[0x55; 15], false), Err(DsError::Short { len: 15 }));
}
