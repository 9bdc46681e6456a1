//! Known-answer ICRC tests.
use roce_packet::{icrc, Opcode, RocePacket};

/// A CNP captured on a Mellanox ConnectX-4 Lx (public hex dump in scapy's
/// RoCE tests): TOS 0xC2 and BECN=1 exercise the variant-field masks.
const CX4_CNP: &str = "e41d2dab2bc27cfe90643b32080045c2003c718c400040119161\
0a0011010a001201000012b700280000\
8100ffff400001180000000000000000\
000000000000000000000000\
82fd002a";

#[test]
fn connectx4_cnp_icrc() {
    let f = hex::decode(CX4_CNP).unwrap();
    let ip = &f[14..34];
    let udp = &f[34..42];
    let ib = &f[42..];
    assert!(icrc::verify(ip, udp, ib));
    assert_eq!(icrc::compute(ip, udp, &ib[..ib.len() - 4]), [0x82, 0xfd, 0x00, 0x2a]);
    let p = RocePacket::new_checked(ib).unwrap();
    assert_eq!(p.opcode(), Opcode::CNP);
    assert!(p.bth().becn());
    // a variant field (TTL) changes nothing; an invariant one (IP id) does
    let mut ip2 = ip.to_vec();
    ip2[8] = 1;
    assert!(icrc::verify(&ip2, udp, ib));
    ip2[4] ^= 1;
    assert!(!icrc::verify(&ip2, udp, ib));
}
