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
    IcrcHasher::new(ip_header, udp_header, ib_without_icrc).finish()
}

/// An ICRC computed in pieces: the masked pseudo header and the start of
/// the InfiniBand part first, then the rest of the packet as it comes (a
/// payload read from region memory a chunk at a time, then the pad).
/// `IcrcHasher::new(ip, udp, ib).finish()` is [`compute`]`(ip, udp, ib)`.
#[derive(Clone)]
pub struct IcrcHasher(crc32fast::Hasher);

impl IcrcHasher {
    /// Start with the IP and UDP headers and `ib_start`, the first bytes
    /// of the InfiniBand part (the BTH, whose byte 4 is masked, and
    /// anything after it).
    pub fn new(ip_header: &[u8], udp_header: &[u8], ib_start: &[u8]) -> IcrcHasher {
        // The masked pseudo header is assembled in one buffer and fed in one
        // call: small separate updates were a visible part of a small-
        // message profile.
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
        let bl = ib_start.len().min(bth::LEN);
        pre[at..at + bl].copy_from_slice(&ib_start[..bl]);
        if bl > 4 {
            pre[at + 4] = 0xFF;
        }
        at += bl;
        h.update(&pre[..at]);
        h.update(&ib_start[bl..]);
        IcrcHasher(h)
    }

    /// Feed the next bytes of the packet.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes)
    }

    /// The 4 ICRC bytes exactly as they appear on the wire.
    pub fn finish(self) -> [u8; 4] {
        self.0.finalize().to_le_bytes()
    }
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

#[cfg(test)]
mod hasher_tests {
    use super::*;

    /// Feeding a packet in pieces gives the ICRC of the whole, wherever it
    /// is cut (inside the BTH, after it, byte by byte).
    #[test]
    fn pieces_give_the_whole_packets_icrc() {
        let ip = [0x45u8, 0, 0, 60, 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 2];
        let udp = [0x12u8, 0x34, 0x12, 0xB7, 0, 40, 0, 0];
        let ib: Vec<u8> = (0..300u32).map(|i| (i * 29 + 5) as u8).collect();
        let whole = compute(&ip, &udp, &ib);
        for cut in [0, 3, 12, 13, 28, 299, 300] {
            let mut h = IcrcHasher::new(&ip, &udp, &ib[..cut.min(12)]);
            if cut > 12 {
                h.update(&ib[12..cut]);
            }
            for b in &ib[cut.max(12)..] {
                h.update(std::slice::from_ref(b));
            }
            if cut >= 12 {
                assert_eq!(h.finish(), whole, "cut at {cut}");
            }
        }
        // a known vector: the same bytes through crc32fast directly
        let mut pre = vec![0xFFu8; 8];
        let mut m = ip;
        m[1] = 0xFF;
        m[8] = 0xFF;
        m[10] = 0xFF;
        m[11] = 0xFF;
        pre.extend_from_slice(&m);
        let mut u = udp;
        u[6] = 0xFF;
        u[7] = 0xFF;
        pre.extend_from_slice(&u);
        let mut i2 = ib.clone();
        i2[4] = 0xFF;
        pre.extend_from_slice(&i2);
        assert_eq!(whole, crc32fast::hash(&pre).to_le_bytes());
    }
}
