//! Receive-side ICRC checking on a plain UDP socket.
//!
//! The ICRC covers the IPv4 identification field and the DF flag, which a
//! plain UDP socket never shows. What can and cannot be checked:
//!
//! * Seen by the receiver: addresses, ports, lengths (from the socket
//!   address, the local address and the datagram length) and the whole UDP
//!   payload. Everything the ICRC masks (TOS, TTL, IPv4 header checksum,
//!   UDP checksum, IPv6 traffic class, flow label, hop limit) does not matter.
//! * Not seen: the IPv4 identification (16 bits) and the IPv4 flags.
//!   We assume DF set (rxe, and Linux UDP sockets with `IP_PMTUDISC_DO`,
//!   always set it) and IP options absent (they would make every check fail).
//!
//! CRC-32 is affine over GF(2): flipping bits of the message changes the CRC
//! by a linear function of the flipped bits that depends only on their
//! distance from the end of the message. So with `c0` the ICRC computed for
//! identification 0 and `r` the received ICRC, the identification `id` that
//! makes the packet valid solves the linear system `L·id = c0 ⊕ r` (32
//! equations, 16 unknowns, columns independent because CRC-32 detects every
//! error burst of at most 32 bits). [`solve_ipv4_id`] returns that `id` if
//! it exists. One CRC pass per packet, plus a few hundred word operations.
//!
//! Strength: if the identification was sent as we expect (0, a GSO segment
//! index, or the peer's previous identification + 1) the check is a full
//! 32-bit CRC check ([`RxIcrc::Exact`]). Otherwise any identification is
//! accepted, which leaves 16 bits of protection: a corrupted payload passes
//! with probability 2^-16 ([`RxIcrc::SolvedId`]). IPv6 has no hidden
//! covered field, so its check is always exact.

use core::net::IpAddr;
use roce_packet::icrc_math::IcrcMath;
use roce_packet::{IpMeta, UdpEndpoints};

/// The IPv4 identification (with DF set, no IP options) for which the ICRC
/// of `udp_payload` received on `ep` is valid, if one exists. `None` for
/// IPv6 endpoints, mixed families or payloads too short to hold a BTH and
/// an ICRC. (The solver is `roce_packet`'s [`IcrcMath::solve_id`], which
/// the UDP transport keeps with its caches; this one-off call builds none.)
pub fn solve_ipv4_id(ep: &UdpEndpoints, udp_payload: &[u8]) -> Option<u16> {
    if !matches!((ep.src, ep.dst), (IpAddr::V4(_), IpAddr::V4(_))) {
        return None;
    }
    IcrcMath::new().solve_id(ep, udp_payload, &[]).map(|(id, _)| id)
}

/// Outcome of a receive-side ICRC check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RxIcrc {
    /// Valid with a full 32-bit check, the IPv4 identification (0 for IPv6)
    /// being one of the expected values.
    Exact {
        /// The identification the packet was checked with.
        ipv4_id: u16,
    },
    /// Valid only for an unexpected IPv4 identification, found by solving
    /// (16 bits of protection left).
    SolvedId {
        /// The identification that makes the ICRC valid.
        ipv4_id: u16,
    },
    /// No identification makes the ICRC valid (or the payload is too short).
    Bad,
}

impl RxIcrc {
    /// The identification to put in the delivered datagram's `IpMeta`.
    pub fn ipv4_id(self) -> Option<u16> {
        match self {
            RxIcrc::Exact { ipv4_id } | RxIcrc::SolvedId { ipv4_id } => Some(ipv4_id),
            RxIcrc::Bad => None,
        }
    }
}

/// Check a received datagram. `expected_ids` are the IPv4 identifications
/// that count as an exact match (e.g. 0, the GSO/GRO segment index, the
/// peer's last identification + 1). With `solve == false` only those are
/// tried (each still a full 32-bit check) and anything else is
/// [`RxIcrc::Bad`].
pub fn check(ep: &UdpEndpoints, udp_payload: &[u8], expected_ids: &[u16], solve: bool) -> RxIcrc {
    match (ep.src, ep.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => {
            match IcrcMath::new().solve_id(ep, udp_payload, expected_ids) {
                Some((id, true)) => RxIcrc::Exact { ipv4_id: id },
                Some((id, false)) if solve => RxIcrc::SolvedId { ipv4_id: id },
                _ => RxIcrc::Bad,
            }
        }
        (IpAddr::V6(_), IpAddr::V6(_)) => {
            if roce_packet::frame::verify_icrc(ep, &IpMeta::default(), udp_payload) {
                RxIcrc::Exact { ipv4_id: 0 }
            } else {
                RxIcrc::Bad
            }
        }
        _ => RxIcrc::Bad,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;
    use roce_packet::icrc_math::{mul_mod_p, raw_crc, x_pow_8n};

    fn ep() -> UdpEndpoints {
        UdpEndpoints {
            src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)),
            src_port: 0xC001,
            dst_port: 4791,
        }
    }

    fn packet(len: usize, id: u16) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        p[0] = 0x04; // SEND_ONLY
        let meta = IpMeta { ipv4_id: id, ..IpMeta::default() };
        roce_packet::frame::fill_icrc(&ep(), &meta, &mut p).unwrap();
        p
    }

    #[test]
    fn zero_bytes_shift_matches_direct_crc() {
        let msg = [0x12u8, 0x34, 0, 0, 0, 0, 0];
        assert_eq!(raw_crc(&msg), mul_mod_p(x_pow_8n(5), raw_crc(&msg[..2])));
        assert_eq!(x_pow_8n(0), 1 << 31);
    }

    #[test]
    fn solves_every_kind_of_id() {
        for len in [16usize, 20, 64, 1028, 4124] {
            for id in [0u16, 1, 2, 0x8000, 0xFFFF, 0x1234, 0xBEEF] {
                let p = packet(len, id);
                assert_eq!(solve_ipv4_id(&ep(), &p), Some(id), "len {len} id {id:#x}");
                assert_eq!(check(&ep(), &p, &[0], true).ipv4_id(), Some(id));
            }
        }
    }

    #[test]
    fn exact_versus_solved_classification() {
        let p = packet(64, 5);
        assert_eq!(check(&ep(), &p, &[0, 5], true), RxIcrc::Exact { ipv4_id: 5 });
        assert_eq!(check(&ep(), &p, &[0], true), RxIcrc::SolvedId { ipv4_id: 5 });
        assert_eq!(check(&ep(), &p, &[0], false), RxIcrc::Bad);
    }

    #[test]
    fn flipped_payload_bits_are_mostly_bad() {
        // A single flipped bit is a burst of length 1 that no identification
        // change (a burst inside 16 bits far away) can cancel unless the
        // combined error is a multiple of P; count how many flips pass.
        let p = packet(256, 0);
        let mut passed = 0;
        for bit in (12 * 8)..(252 * 8) {
            let mut q = p.clone();
            q[bit / 8] ^= 1 << (bit % 8);
            if check(&ep(), &q, &[0], true) != RxIcrc::Bad {
                passed += 1;
            }
        }
        // Expect about (1312 flips) * 2^-16 ≈ 0.02 false accepts.
        assert!(passed <= 1, "{passed} single-bit flips accepted");
        let mut q = p.clone();
        q[100] ^= 0x10;
        assert_eq!(check(&ep(), &q, &[0], true), RxIcrc::Bad);
    }

    #[test]
    fn short_or_mixed_family_is_bad() {
        assert_eq!(check(&ep(), &[0u8; 15], &[0], true), RxIcrc::Bad);
        let mut e = ep();
        e.dst = IpAddr::V6(core::net::Ipv6Addr::LOCALHOST);
        assert_eq!(check(&e, &packet(64, 0), &[0], true), RxIcrc::Bad);
        assert_eq!(solve_ipv4_id(&e, &packet(64, 0)), None);
    }
}
