//! CRC-32 arithmetic for the ICRC without re-reading payloads (what the UDP
//! transport uses to fix up and check ICRCs a plain socket cannot see whole;
//! pure arithmetic, no I/O; was `roce_transport::crcmath`).
//!
//! The ICRC is CRC-32 (IEEE, reflected, initial value and final XOR all
//! ones) over a pseudo header (eight 0xFF bytes, the IP and UDP headers with
//! their variant fields masked to ones), the BTH (one byte masked) and the
//! rest of the packet. For two inputs of equal length, `crc(a) ^ crc(b) =
//! raw(a ^ b)` where `raw` is the register with initial value 0 and no final
//! XOR, and `raw(d ‖ 0ⁿ) = raw(d) · x^(8n) mod P`. So:
//!
//! * **Send fix-up** ([`IcrcMath::fix`]): when the header that really goes
//!   on the wire differs from the one the core computed the ICRC over (the
//!   socket's source port, the GSO segment's IPv4 identification), the new
//!   ICRC is the old one XOR `raw(old_hdr ^ new_hdr) · x^(8·tail)`: a few
//!   dozen table lookups and one multiplication, no pass over the payload.
//! * **Receive** ([`IcrcMath::solve_id`]): one CRC pass for identification
//!   0, then the identification that makes the packet valid solves a 16×32
//!   GF(2) system whose columns depend only on the packet length (cached).

use crate::{IpMeta, UdpEndpoints};
use core::net::IpAddr;

/// The reflected CRC-32 polynomial.
const POLY: u32 = 0xEDB8_8320;

/// Largest pseudo header: 8 + IPv6 40 + UDP 8.
pub const MAX_PSEUDO: usize = 56;

/// Offset of the IPv4 identification in the pseudo header.
const ID_OFFSET: usize = 8 + 4;

const fn make_table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = make_table();

/// CRC register with initial value 0 and no final XOR after `bytes`.
pub fn raw_crc(bytes: &[u8]) -> u32 {
    let mut c = 0u32;
    for &b in bytes {
        c = TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    c
}

/// `a · b mod P` in the reflected representation (bit 31 = x^0).
pub fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut p = 0u32;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        m >>= 1;
    }
    p
}

/// `x^(8n) mod P`: the effect of `n` zero bytes on the register.
pub fn x_pow_8n(n: usize) -> u32 {
    let mut result = 1u32 << 31;
    let mut base = 1u32 << (31 - 8);
    let mut n = n;
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod_p(result, base);
        }
        base = mul_mod_p(base, base);
        n >>= 1;
    }
    result
}

/// The pseudo header the ICRC starts with, for a UDP payload of
/// `udp_payload_len` bytes; returns the buffer and its used length (36 for
/// IPv4, 56 for IPv6). `None` for mixed families or oversized payloads.
pub fn pseudo_header(
    ep: &UdpEndpoints,
    meta: &IpMeta,
    udp_payload_len: usize,
) -> Option<([u8; MAX_PSEUDO], usize)> {
    let udp_len = u16::try_from(udp_payload_len + 8).ok()?;
    let mut b = [0xFFu8; MAX_PSEUDO];
    let ip_len = match (ep.src, ep.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(udp_payload_len + 28).ok()?;
            let h = &mut b[8..28];
            h[0] = 0x45;
            // [1] TOS masked
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&meta.ipv4_id.to_be_bytes());
            h[6] = if meta.dont_fragment { 0x40 } else { 0 };
            h[7] = 0;
            // [8] TTL masked
            h[9] = 17;
            // [10..12] checksum masked
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&d.octets());
            20
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let h = &mut b[8..48];
            // [0..4] version | traffic class | flow label: masked (0x6F FF FF FF)
            h[0] = 0x6F;
            h[4..6].copy_from_slice(&udp_len.to_be_bytes());
            h[6] = 17;
            // [7] hop limit masked
            h[8..24].copy_from_slice(&s.octets());
            h[24..40].copy_from_slice(&d.octets());
            40
        }
        _ => return None,
    };
    let u = 8 + ip_len;
    b[u..u + 2].copy_from_slice(&ep.src_port.to_be_bytes());
    b[u + 2..u + 4].copy_from_slice(&ep.dst_port.to_be_bytes());
    b[u + 4..u + 6].copy_from_slice(&udp_len.to_be_bytes());
    // [u+6..u+8] checksum masked
    Some((b, u + 8))
}

/// The ICRC of `udp_payload` (its last four bytes ignored) under the pseudo
/// header `pseudo`, as the little-endian `u32` the packet carries.
pub fn icrc_with(pseudo: &[u8], udp_payload: &[u8]) -> Option<u32> {
    let n = udp_payload.len().checked_sub(4)?;
    if n < 12 {
        return None;
    }
    let body = &udp_payload[..n];
    let mut bth = [0u8; 12];
    bth.copy_from_slice(&body[..12]);
    bth[4] = 0xFF;
    let mut h = crc32fast::Hasher::new();
    h.update(pseudo);
    h.update(&bth);
    h.update(&body[12..]);
    Some(h.finalize())
}

/// Precomputed identification columns and their echelon basis for one
/// packet length.
#[derive(Clone, Copy)]
struct IdSolver {
    cols: [u32; 16],
    basis: [(u32, u16); 32],
}

impl IdSolver {
    fn new(shift: u32) -> IdSolver {
        let mut cols = [0u32; 16];
        for (i, col) in cols.iter_mut().enumerate() {
            *col = mul_mod_p(shift, raw_crc(&(1u16 << i).to_be_bytes()));
        }
        let mut basis = [(0u32, 0u16); 32];
        for (i, &c) in cols.iter().enumerate() {
            let (mut v, mut m) = (c, 1u16 << i);
            while v != 0 {
                let hb = 31 - v.leading_zeros() as usize;
                if basis[hb].0 == 0 {
                    basis[hb] = (v, m);
                    break;
                }
                v ^= basis[hb].0;
                m ^= basis[hb].1;
            }
        }
        IdSolver { cols, basis }
    }
    fn apply(&self, id: u16) -> u32 {
        let mut v = 0;
        for (i, c) in self.cols.iter().enumerate() {
            if id & (1 << i) != 0 {
                v ^= c;
            }
        }
        v
    }
    fn solve(&self, target: u32) -> Option<u16> {
        let (mut t, mut sol) = (target, 0u16);
        while t != 0 {
            let hb = 31 - t.leading_zeros() as usize;
            if self.basis[hb].0 == 0 {
                return None;
            }
            t ^= self.basis[hb].0;
            sol ^= self.basis[hb].1;
        }
        Some(sol)
    }
}

/// Multiplication by one fixed `x^(8n)` as four byte tables (the map is
/// linear in the multiplicand).
struct MulTable([[u32; 256]; 4]);

impl MulTable {
    fn new(shift: u32) -> MulTable {
        let mut t = [[0u32; 256]; 4];
        for (byte, tab) in t.iter_mut().enumerate() {
            let cols: [u32; 8] =
                core::array::from_fn(|bit| mul_mod_p(1u32 << (8 * byte + bit), shift));
            for v in 1..256usize {
                let low = v.trailing_zeros() as usize;
                tab[v] = tab[v & (v - 1)] ^ cols[low];
            }
        }
        MulTable(t)
    }
    fn mul(&self, d: u32) -> u32 {
        let b = d.to_le_bytes();
        self.0[0][b[0] as usize]
            ^ self.0[1][b[1] as usize]
            ^ self.0[2][b[2] as usize]
            ^ self.0[3][b[3] as usize]
    }
}

/// A few entries keyed by packet length, searched linearly (a device
/// sees a handful of distinct lengths).
struct LenCache<T> {
    items: Vec<(usize, T)>,
}

impl<T> Default for LenCache<T> {
    fn default() -> Self {
        LenCache { items: Vec::new() }
    }
}

/// Distinct packet lengths remembered before a cache starts over.
const MAX_CACHED: usize = 32;

impl<T> LenCache<T> {
    fn get_or_insert_with(&mut self, len: usize, f: impl FnOnce() -> T) -> &T {
        match self.items.iter().position(|(l, _)| *l == len) {
            Some(i) => &self.items[i].1,
            None => {
                if self.items.len() >= MAX_CACHED {
                    self.items.clear();
                }
                self.items.push((len, f()));
                &self.items[self.items.len() - 1].1
            }
        }
    }
}

/// Cached CRC arithmetic (one per transport; not shared between threads).
#[derive(Default)]
pub struct IcrcMath {
    muls: LenCache<Box<MulTable>>,
    solvers: LenCache<IdSolver>,
}

impl IcrcMath {
    /// A new, empty cache.
    pub fn new() -> IcrcMath {
        IcrcMath::default()
    }

    /// `d · x^(8n) mod P` (the effect of `n` zero bytes after `d`), with
    /// the multiplication table for `n` cached.
    pub fn shift_by(&mut self, d: u32, n: usize) -> u32 {
        self.muls.get_or_insert_with(n, || Box::new(MulTable::new(x_pow_8n(n)))).mul(d)
    }

    /// The ICRC (little-endian value) after replacing pseudo header `old`
    /// by `new` (same length) in a packet whose UDP payload is
    /// `udp_payload_len` bytes and whose ICRC was `icrc`.
    pub fn fix(&mut self, old: &[u8], new: &[u8], udp_payload_len: usize, icrc: u32) -> u32 {
        let mut delta = [0u8; MAX_PSEUDO];
        let n = old.len().min(new.len()).min(MAX_PSEUDO);
        for i in 0..n {
            delta[i] = old[i] ^ new[i];
        }
        // Bytes after the pseudo header up to the ICRC: BTH and payload.
        let tail = udp_payload_len.saturating_sub(4);
        let d = raw_crc(&delta[..n]);
        if d == 0 {
            return icrc;
        }
        icrc ^ self.shift_by(d, tail)
    }

    /// [`IcrcMath::fix`] without building either pseudo header: the XOR of
    /// the two is written directly from the fields that can differ
    /// (addresses, ports, IPv4 identification and DF), and the CRC of the
    /// difference starts at its first non-zero byte (leading zero bytes
    /// leave a zero register unchanged). `None` for mixed families.
    pub fn fix_fields(
        &mut self,
        old: (&UdpEndpoints, &IpMeta),
        new: (&UdpEndpoints, &IpMeta),
        udp_payload_len: usize,
        icrc: u32,
    ) -> Option<u32> {
        let (oe, om) = old;
        let (ne, nm) = new;
        let mut delta = [0u8; MAX_PSEUDO];
        let xor = |d: &mut [u8], a: &[u8], b: &[u8]| {
            for ((x, p), q) in d.iter_mut().zip(a).zip(b) {
                *x = p ^ q;
            }
        };
        let ports = match (oe.src, oe.dst, ne.src, ne.dst) {
            (IpAddr::V4(os), IpAddr::V4(od), IpAddr::V4(ns), IpAddr::V4(nd)) => {
                xor(&mut delta[12..14], &om.ipv4_id.to_be_bytes(), &nm.ipv4_id.to_be_bytes());
                if om.dont_fragment != nm.dont_fragment {
                    delta[14] = 0x40;
                }
                xor(&mut delta[20..24], &os.octets(), &ns.octets());
                xor(&mut delta[24..28], &od.octets(), &nd.octets());
                28
            }
            (IpAddr::V6(os), IpAddr::V6(od), IpAddr::V6(ns), IpAddr::V6(nd)) => {
                xor(&mut delta[16..32], &os.octets(), &ns.octets());
                xor(&mut delta[32..48], &od.octets(), &nd.octets());
                48
            }
            _ => return None,
        };
        xor(&mut delta[ports..ports + 2], &oe.src_port.to_be_bytes(), &ne.src_port.to_be_bytes());
        xor(
            &mut delta[ports + 2..ports + 4],
            &oe.dst_port.to_be_bytes(),
            &ne.dst_port.to_be_bytes(),
        );
        let n = ports + 8;
        let Some(first) = delta[..n].iter().position(|&b| b != 0) else {
            return Some(icrc);
        };
        let d = raw_crc(&delta[first..n]);
        Some(icrc ^ self.shift_by(d, udp_payload_len.saturating_sub(4)))
    }

    /// The IPv4 identification that makes `udp_payload` received on `ep`
    /// valid (DF set, no IP options), and whether it is one of `expected`.
    /// `None`: no identification does (or not IPv4, or too short).
    pub fn solve_id(
        &mut self,
        ep: &UdpEndpoints,
        udp_payload: &[u8],
        expected: &[u16],
    ) -> Option<(u16, bool)> {
        let meta = IpMeta { ipv4_id: 0, dont_fragment: true, ..IpMeta::default() };
        if !ep.src.is_ipv4() {
            return None;
        }
        let (ph, plen) = pseudo_header(ep, &meta, udp_payload.len())?;
        let c0 = icrc_with(&ph[..plen], udp_payload)?;
        let n = udp_payload.len() - 4;
        let rx = u32::from_le_bytes(udp_payload[n..].try_into().ok()?);
        let target = c0 ^ rx;
        if target == 0 {
            return Some((0, expected.contains(&0)));
        }
        // Bytes of ICRC input after the identification field.
        let after = plen - ID_OFFSET - 2 + n;
        let solver = *self.solvers.get_or_insert_with(after, || IdSolver::new(x_pow_8n(after)));
        for &e in expected {
            if e != 0 && solver.apply(e) == target {
                return Some((e, true));
            }
        }
        solver.solve(target).map(|id| (id, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IpUdpHeader;
    use core::net::{Ipv4Addr, Ipv6Addr};

    fn ep4() -> UdpEndpoints {
        UdpEndpoints {
            src: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            dst: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)),
            src_port: 0xC001,
            dst_port: 4791,
        }
    }

    fn ep6() -> UdpEndpoints {
        UdpEndpoints {
            src: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            dst: IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            src_port: 0xC123,
            dst_port: 4791,
        }
    }

    fn packet(ep: &UdpEndpoints, meta: &IpMeta, len: usize) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
        p[0] = 0x0A; // RDMA WRITE FIRST
        crate::frame::fill_icrc(ep, meta, &mut p).unwrap();
        p
    }

    fn icrc_of(p: &[u8]) -> u32 {
        u32::from_le_bytes(p[p.len() - 4..].try_into().unwrap())
    }

    #[test]
    fn table_crc_matches_bitwise_and_pseudo_header_matches_packet_crate() {
        let msg: Vec<u8> = (0..77u8).collect();
        let mut c = 0u32;
        for &b in &msg {
            c ^= u32::from(b);
            for _ in 0..8 {
                c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            }
        }
        assert_eq!(raw_crc(&msg), c);
        for (ep, meta) in [
            (ep4(), IpMeta { ipv4_id: 0x1234, ttl: 3, tos: 0xB8, ..IpMeta::default() }),
            (ep4(), IpMeta { dont_fragment: false, ..IpMeta::default() }),
            (ep6(), IpMeta { tos: 7, flow_label: 0x12345, ttl: 9, ..IpMeta::default() }),
        ] {
            for len in [16usize, 17, 100, 1056, 4124] {
                let p = packet(&ep, &meta, len);
                let (ph, n) = pseudo_header(&ep, &meta, len).unwrap();
                assert_eq!(icrc_with(&ph[..n], &p), Some(icrc_of(&p)), "{ep:?} {len}");
                let hdr = IpUdpHeader::build(&ep, &meta, len).unwrap();
                assert!(hdr.verify_icrc(&p));
            }
        }
        assert!(pseudo_header(&UdpEndpoints { dst: ep6().dst, ..ep4() }, &IpMeta::default(), 100)
            .is_none());
        assert_eq!(icrc_with(&[0u8; 36], &[0u8; 15]), None);
    }

    #[test]
    fn fix_equals_recompute_for_port_address_and_id_changes() {
        let mut m = IcrcMath::new();
        for (ep, len) in [(ep4(), 1056usize), (ep4(), 16), (ep6(), 1040), (ep6(), 28)] {
            let meta0 = IpMeta::default();
            let p = packet(&ep, &meta0, len);
            let (old, n) = pseudo_header(&ep, &meta0, len).unwrap();
            for (port, id) in [(4791u16, 0u16), (50000, 7), (1, 0xFFFF)] {
                let ep2 = UdpEndpoints { src_port: port, ..ep };
                let meta2 = IpMeta { ipv4_id: if ep.src.is_ipv4() { id } else { 0 }, ..meta0 };
                let want = packet(&ep2, &meta2, len);
                let (new, n2) = pseudo_header(&ep2, &meta2, len).unwrap();
                assert_eq!(n, n2);
                let got = m.fix(&old[..n], &new[..n], len, icrc_of(&p));
                assert_eq!(got, icrc_of(&want), "{ep:?} len {len} port {port} id {id}");
                let got = m.fix_fields((&ep, &meta0), (&ep2, &meta2), len, icrc_of(&p));
                assert_eq!(got, Some(icrc_of(&want)), "fields: {ep:?} len {len} port {port}");
                // Source address and DF changes too.
                let src = if ep.src.is_ipv4() {
                    IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))
                } else {
                    IpAddr::V6(Ipv6Addr::new(0xfd00, 9, 0, 0, 0, 0, 0, 7))
                };
                let ep3 = UdpEndpoints { src, ..ep2 };
                let meta3 = IpMeta { dont_fragment: !ep.src.is_ipv4(), ..meta2 };
                let want3 = packet(&ep3, &meta3, len);
                let got = m.fix_fields((&ep, &meta0), (&ep3, &meta3), len, icrc_of(&p));
                assert_eq!(got, Some(icrc_of(&want3)), "src/DF: {ep:?} len {len}");
            }
        }
    }

    #[test]
    fn table_multiplication_equals_mul_mod_p() {
        let mut m = IcrcMath::new();
        for n in [0usize, 1, 12, 1052, 65_000] {
            for d in [1u32, 0x8000_0000, 0xDEAD_BEEF, 0x0102_0304, u32::MAX] {
                assert_eq!(m.shift_by(d, n), mul_mod_p(d, x_pow_8n(n)), "{n} {d:#x}");
            }
        }
        for n in 0..40 {
            m.shift_by(1, n); // more lengths than the cache holds
        }
        assert_eq!(m.shift_by(7, 3), mul_mod_p(7, x_pow_8n(3)));
    }

    #[test]
    fn solve_id_exact_solved_and_bad() {
        let mut m = IcrcMath::new();
        for len in [16usize, 64, 1040, 1056, 4124] {
            for id in [0u16, 1, 5, 61, 0x8000, 0xBEEF] {
                let meta = IpMeta { ipv4_id: id, ..IpMeta::default() };
                let p = packet(&ep4(), &meta, len);
                assert_eq!(m.solve_id(&ep4(), &p, &[0, id]), Some((id, true)), "{len} {id}");
                let exp = id == 0;
                assert_eq!(m.solve_id(&ep4(), &p, &[0]), Some((id, exp)));
                let mut q = p.clone();
                q[len / 2] ^= 0x10;
                let r = m.solve_id(&ep4(), &q, &[0, id]);
                assert!(r.is_none() || r.is_some_and(|(x, e)| x != id && !e), "{r:?}");
            }
        }
        assert_eq!(m.solve_id(&ep6(), &packet(&ep6(), &IpMeta::default(), 64), &[0]), None);
        assert_eq!(m.solve_id(&ep4(), &[0u8; 15], &[0]), None);
    }
}
