//! Invariant CRC (IBA Annex A17.3.3 for RoCEv2, as implemented by rxe).
//!
//! CRC-32 (IEEE, reflected, as zlib and `crc32fast`) over:
//! 8 bytes of 0xFF (the absent LRH), the IP header with its variant fields
//! set to ones (IPv4: TOS, TTL, checksum; IPv6: traffic class, flow label,
//! hop limit), the UDP header with its checksum set to ones, the BTH with
//! byte 4 (FECN, BECN, reserved) set to ones, then everything after the BTH
//! up to and including the pad bytes. The result is stored little-endian in
//! the last four bytes of the packet.

use crate::bth;

/// Length of the ICRC trailer.
pub const LEN: usize = 4;

const ONES8: [u8; 8] = [0xFF; 8];

/// Set the variant fields of an IP header (IPv4 of any IHL, or the fixed
/// 40-byte IPv6 header) to ones, in place.
fn mask_ip(tmp: &mut [u8]) {
    let n = tmp.len();
    if n > 0 && tmp[0] >> 4 == 4 {
        if n >= 12 {
            tmp[1] = 0xFF; // TOS: DSCP + ECN
            tmp[8] = 0xFF; // TTL
            tmp[10] = 0xFF; // header checksum
            tmp[11] = 0xFF;
        }
    } else if n >= 8 {
        tmp[0] |= 0x0F; // traffic class, high nibble
        tmp[1] = 0xFF; // traffic class low nibble + flow label
        tmp[2] = 0xFF;
        tmp[3] = 0xFF;
        tmp[7] = 0xFF; // hop limit
    }
}

/// Compute the ICRC for a packet given its IP header, its 8-byte UDP header
/// and the InfiniBand part without the ICRC (BTH .. last pad byte).
/// Returns the 4 bytes exactly as they appear on the wire.
pub fn compute(ip_header: &[u8], udp_header: &[u8], ib_without_icrc: &[u8]) -> [u8; 4] {
    // The masked pseudo header is assembled in one buffer and fed in one
    // call: small separate updates were a visible part of a small-message
    // profile.
    let mut pre = [0u8; 8 + 60 + 8 + bth::LEN];
    pre[..8].copy_from_slice(&ONES8);
    let ip_n = ip_header.len().min(60);
    let mut at = 8;
    pre[at..at + ip_n].copy_from_slice(&ip_header[..ip_n]);
    mask_ip(&mut pre[at..at + ip_n]);
    at += ip_n;
    let mut h = crc32fast::Hasher::new();
    if ip_header.len() > ip_n {
        // (an IP header over 60 bytes cannot occur; fed unmasked)
        h.update(&pre[..at]);
        h.update(&ip_header[ip_n..]);
        at = 0;
    }
    let n = udp_header.len().min(8);
    pre[at..at + n].copy_from_slice(&udp_header[..n]);
    pre[at + 6] = 0xFF;
    pre[at + 7] = 0xFF;
    at += 8;
    let bl = ib_without_icrc.len().min(bth::LEN);
    pre[at..at + bl].copy_from_slice(&ib_without_icrc[..bl]);
    if bl > 4 {
        pre[at + 4] = 0xFF;
    }
    at += bl;
    h.update(&pre[..at]);
    h.update(&ib_without_icrc[bl..]);
    h.finalize().to_le_bytes()
}

/// Check the ICRC of a whole UDP payload (BTH .. ICRC). Returns false for
/// payloads shorter than a BTH plus ICRC.
pub fn verify(ip_header: &[u8], udp_header: &[u8], udp_payload: &[u8]) -> bool {
    if udp_payload.len() < bth::LEN + LEN {
        return false;
    }
    let (body, tail) = udp_payload.split_at(udp_payload.len() - LEN);
    compute(ip_header, udp_header, body) == tail
}

/// Compute and store the ICRC in the last four bytes of `udp_payload`.
/// Does nothing if the payload is shorter than four bytes.
pub fn fill(ip_header: &[u8], udp_header: &[u8], udp_payload: &mut [u8]) {
    if udp_payload.len() < LEN {
        return;
    }
    let n = udp_payload.len() - LEN;
    let c = compute(ip_header, udp_header, &udp_payload[..n]);
    udp_payload[n..].copy_from_slice(&c);
}
