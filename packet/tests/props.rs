//! Property tests: every repr survives emit + parse, arbitrary bytes never
//! panic a parser, and the ICRC catches every single-bit flip of the fields
//! it covers while ignoring the variant ones.

use proptest::prelude::*;
use roce_packet::bth::Bth;
use roce_packet::{
    icrc, pad_for, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr,
    BthRepr, Deth, DethRepr, Error, ExtHeader, Feth, Ieth, ImmDt, IpMeta, IpUdpHeader, Msn, Opcode,
    PKey, Psn, QKey, Qpn, RKey, Rdeth, Reth, RethRepr, RocePacket, RoceRepr, Syndrome,
    UdpEndpoints,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

// ------------------------------------------------------------ strategies

fn bth() -> impl Strategy<Value = BthRepr> {
    (
        (any::<u8>(), any::<bool>(), any::<bool>(), 0u8..4, 0u8..16, any::<u16>()),
        (
            any::<bool>(),
            any::<bool>(),
            0u8..64,
            any::<u32>(),
            any::<bool>(),
            0u8..128,
            any::<u32>(),
        ),
    )
        .prop_map(|((op, se, m, pad, tver, pkey), (fecn, becn, r6, qp, ar, r7, psn))| {
            BthRepr {
                opcode: Opcode(op),
                solicited: se,
                migreq: m,
                pad_count: pad,
                tver,
                pkey: PKey::new(pkey),
                fecn,
                becn,
                resv6: r6,
                dest_qp: Qpn::new(qp),
                ack_req: ar,
                resv7: r7,
                psn: Psn::new(psn),
            }
        })
}

fn reth() -> impl Strategy<Value = RethRepr> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| RethRepr {
        va,
        rkey: RKey::new(rkey),
        dma_len,
    })
}

fn aeth() -> impl Strategy<Value = AethRepr> {
    // every syndrome byte, in its canonical decoded form
    (any::<u8>(), any::<u32>())
        .prop_map(|(s, msn)| AethRepr { syndrome: Syndrome::from_u8(s), msn: Msn::new(msn) })
}

fn atomic_eth() -> impl Strategy<Value = AtomicEthRepr> {
    (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
        |(va, rkey, swap_add, compare)| AtomicEthRepr {
            va,
            rkey: RKey::new(rkey),
            swap_add,
            compare,
        },
    )
}

fn deth() -> impl Strategy<Value = DethRepr> {
    (any::<u32>(), any::<u32>(), any::<u8>()).prop_map(|(q, s, r)| DethRepr {
        qkey: QKey::new(q),
        src_qp: Qpn::new(s),
        resv8: r,
    })
}

fn known_opcode() -> impl Strategy<Value = Opcode> {
    let known: Vec<Opcode> = (0..=255u8).map(Opcode).filter(|o| o.is_known()).collect();
    prop::sample::select(known)
}

/// Every extension header with arbitrary contents; `roce()` keeps the ones
/// the opcode needs.
#[derive(Clone, Debug)]
struct AllHeaders {
    rdeth: u32,
    deth: DethRepr,
    feth: u32,
    reth: RethRepr,
    atomic_eth: AtomicEthRepr,
    aeth: AethRepr,
    atomic_ack: u64,
    imm: u32,
    ieth: u32,
    cnp: [u8; 16],
}

fn all_headers() -> impl Strategy<Value = AllHeaders> {
    (
        (any::<u32>(), deth(), any::<u32>(), reth(), atomic_eth()),
        (aeth(), any::<u64>(), any::<u32>(), any::<u32>(), any::<[u8; 16]>()),
    )
        .prop_map(|((rdeth, deth, feth, reth, atomic_eth), (aeth, aa, imm, ieth, cnp))| {
            AllHeaders { rdeth, deth, feth, reth, atomic_eth, aeth, atomic_ack: aa, imm, ieth, cnp }
        })
}

/// A valid packet repr for a random known opcode, with its payload.
fn roce() -> impl Strategy<Value = (RoceRepr, Vec<u8>)> {
    (known_opcode(), bth(), all_headers(), prop::collection::vec(any::<u8>(), 0..=80)).prop_map(
        |(op, bth, hd, mut payload)| {
            let info = op.info().unwrap();
            if !info.has_payload {
                payload.clear();
            }
            let hs = info.headers;
            let r = RoceRepr {
                bth: BthRepr { opcode: op, pad_count: pad_for(payload.len()), ..bth },
                rdeth: hs.contains(ExtHeader::Rdeth).then_some(hd.rdeth),
                deth: hs.contains(ExtHeader::Deth).then_some(hd.deth),
                xrceth: hs.contains(ExtHeader::Xrceth).then_some(hd.rdeth & 0xFF_FFFF),
                feth: hs.contains(ExtHeader::Feth).then_some(hd.feth),
                reth: hs.contains(ExtHeader::Reth).then_some(hd.reth),
                atomic_eth: hs.contains(ExtHeader::AtomicEth).then_some(hd.atomic_eth),
                aeth: hs.contains(ExtHeader::Aeth).then_some(hd.aeth),
                atomic_ack_eth: hs
                    .contains(ExtHeader::AtomicAckEth)
                    .then_some(AtomicAckEthRepr { orig_rem_data: hd.atomic_ack }),
                immdt: hs.contains(ExtHeader::ImmDt).then_some(hd.imm),
                ieth: hs.contains(ExtHeader::Ieth).then_some(RKey::new(hd.ieth)),
                cnp: hs.contains(ExtHeader::CnpPad).then_some(hd.cnp),
                payload_len: payload.len(),
            };
            (r, payload)
        },
    )
}

fn endpoints() -> impl Strategy<Value = UdpEndpoints> {
    let v4 = (any::<[u8; 4]>(), any::<[u8; 4]>())
        .prop_map(|(s, d)| (IpAddr::V4(Ipv4Addr::from(s)), IpAddr::V4(Ipv4Addr::from(d))));
    let v6 = (any::<[u8; 16]>(), any::<[u8; 16]>())
        .prop_map(|(s, d)| (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d))));
    (prop_oneof![v4, v6], any::<u16>(), prop_oneof![Just(4791u16), any::<u16>()])
        .prop_map(|((src, dst), src_port, dst_port)| UdpEndpoints { src, dst, src_port, dst_port })
}

fn ip_meta() -> impl Strategy<Value = IpMeta> {
    (any::<u8>(), any::<u8>(), any::<u16>(), any::<bool>(), 0u32..(1 << 20)).prop_map(
        |(ttl, tos, ipv4_id, dont_fragment, flow_label)| IpMeta {
            ttl,
            tos,
            ipv4_id,
            dont_fragment,
            flow_label,
        },
    )
}

// ------------------------------------------------------------ round trips

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn bth_roundtrip(r in bth()) {
        let mut b = [0u8; 12];
        r.emit_bytes(&mut b).unwrap();
        prop_assert_eq!(BthRepr::parse_bytes(&b).unwrap(), r);
        // and bytes -> repr -> bytes
        let r2 = BthRepr::parse(&Bth::new_checked(&b[..]).unwrap());
        let mut b2 = [0xAAu8; 12];
        r2.emit_bytes(&mut b2).unwrap();
        prop_assert_eq!(b, b2);
    }

    #[test]
    fn bth_bytes_roundtrip(b in any::<[u8; 12]>()) {
        let r = BthRepr::parse_bytes(&b).unwrap();
        let mut out = [0u8; 12];
        r.emit_bytes(&mut out).unwrap();
        prop_assert_eq!(out, b);
    }

    #[test]
    fn reth_roundtrip(r in reth()) {
        let mut b = [0u8; 16];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(RethRepr::parse(&b).unwrap(), r);
    }

    #[test]
    fn aeth_roundtrip(r in aeth()) {
        let mut b = [0u8; 4];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(AethRepr::parse(&b).unwrap(), r);
    }

    #[test]
    fn atomic_eth_roundtrip(r in atomic_eth()) {
        let mut b = [0u8; 28];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(AtomicEthRepr::parse(&b).unwrap(), r);
    }

    #[test]
    fn atomic_ack_eth_roundtrip(v in any::<u64>()) {
        let r = AtomicAckEthRepr { orig_rem_data: v };
        let mut b = [0u8; 8];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(AtomicAckEthRepr::parse(&b).unwrap(), r);
    }

    #[test]
    fn deth_roundtrip(r in deth()) {
        let mut b = [0u8; 8];
        r.emit(&mut b).unwrap();
        prop_assert_eq!(DethRepr::parse(&b).unwrap(), r);
    }

    #[test]
    fn word_headers_roundtrip(v in any::<u32>()) {
        let mut b = [0u8; 4];
        ImmDt::new_checked(&mut b[..]).unwrap().set_imm(v);
        prop_assert_eq!(ImmDt::new_checked(&b[..]).unwrap().imm(), v);
        Ieth::new_checked(&mut b[..]).unwrap().set_rkey(RKey::new(v));
        prop_assert_eq!(Ieth::new_checked(&b[..]).unwrap().rkey(), RKey::new(v));
        Rdeth::new_checked(&mut b[..]).unwrap().set_raw(v);
        prop_assert_eq!(Rdeth::new_checked(&b[..]).unwrap().raw(), v);
        prop_assert_eq!(Rdeth::new_checked(&b[..]).unwrap().ee_context(), v & 0xFF_FFFF);
        Feth::new_checked(&mut b[..]).unwrap().set_raw(v);
        let f = Feth::new_checked(&b[..]).unwrap();
        prop_assert_eq!(f.raw(), v);
        prop_assert_eq!(f.placement_type() as u32, v & 0xF);
        prop_assert_eq!(f.selectivity() as u32, (v >> 4) & 3);
        prop_assert_eq!(b, v.to_be_bytes());
    }

    #[test]
    fn roce_roundtrip((r, payload) in roce()) {
        let bytes = r.to_vec(&payload).unwrap();
        prop_assert_eq!(bytes.len(), r.buffer_len().unwrap());
        prop_assert_eq!(bytes.len() % 4, 0);
        // built in place (headers, then the payload appended) it is the same
        let mut v = r.start_vec().unwrap();
        prop_assert_eq!(v.capacity() >= bytes.len(), true);
        v.extend_from_slice(&payload);
        r.finish_vec(&mut v).unwrap();
        prop_assert_eq!(&v, &bytes);
        // a wrong payload length is an error, not a bad packet
        let mut short = r.start_vec().unwrap();
        short.extend_from_slice(&payload[..payload.len().saturating_sub(1)]);
        prop_assert_eq!(r.finish_vec(&mut short).is_err(), !payload.is_empty());
        let (r2, p2) = RoceRepr::parse_bytes(&bytes).unwrap();
        prop_assert_eq!(r2, r);
        prop_assert_eq!(p2, &payload[..]);
        let p = RocePacket::new_checked(&bytes[..]).unwrap();
        prop_assert_eq!(p.opcode(), r.bth.opcode);
        prop_assert_eq!(p.payload(), &payload[..]);
        prop_assert!(p.pad().iter().all(|b| *b == 0));
        prop_assert_eq!(p.pad().len(), pad_for(payload.len()) as usize);
        prop_assert_eq!(p.icrc(), [0u8; 4]);
        prop_assert_eq!(p.without_icrc().len(), bytes.len() - 4);
        // the views agree with the repr
        prop_assert_eq!(p.reth().map(|v| v.va()), r.reth.map(|x| x.va));
        prop_assert_eq!(p.aeth().map(|v| v.syndrome()), r.aeth.map(|x| x.syndrome));
        prop_assert_eq!(p.deth().map(|v| v.src_qp()), r.deth.map(|x| x.src_qp));
        prop_assert_eq!(p.immdt(), r.immdt);
        prop_assert_eq!(p.ieth(), r.ieth);
    }
}

// ------------------------------------------------------------ no panics

/// Touch every accessor of a validated packet.
fn exercise(p: &RocePacket<&[u8]>) {
    let b = p.bth();
    let _ = (b.opcode(), b.solicited(), b.migreq(), b.pad_count(), b.tver(), b.pkey());
    let _ = (b.fecn(), b.becn(), b.resv6(), b.dest_qp(), b.ack_req(), b.resv7(), b.psn());
    if let Some(v) = p.reth() {
        let _ = (v.va(), v.rkey(), v.dma_len());
    }
    if let Some(v) = p.aeth() {
        let _ = (v.syndrome(), v.msn(), v.syndrome().kind_name());
    }
    if let Some(v) = p.atomic_eth() {
        let _ = (v.va(), v.rkey(), v.swap_add(), v.compare());
    }
    if let Some(v) = p.atomic_ack_eth() {
        let _ = v.orig_rem_data();
    }
    if let Some(v) = p.deth() {
        let _ = (v.qkey(), v.src_qp(), v.resv8());
    }
    if let Some(v) = p.rdeth() {
        let _ = (v.raw(), v.ee_context());
    }
    if let Some(v) = p.feth() {
        let _ = (v.raw(), v.placement_type(), v.selectivity());
    }
    let _ = (p.immdt(), p.ieth(), p.cnp_reserved(), p.payload(), p.pad(), p.icrc());
    let _ = (p.payload_offset(), p.without_icrc(), p.info());
}

/// Random bytes, often with a known opcode and a length that passes the
/// alignment check, so that the deeper paths are reached.
fn noise() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..=96),
        (known_opcode(), 0usize..=24, prop::collection::vec(any::<u8>(), 96)).prop_map(
            |(op, words, mut v)| {
                v.truncate(16 + 4 * words);
                v[0] = op.0;
                v
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn arbitrary_bytes_never_panic(b in noise()) {
        match RocePacket::new_checked(&b[..]) {
            Ok(p) => {
                exercise(&p);
                // a valid packet re-emits to itself, with zero pad and ICRC
                let r = RoceRepr::parse(&p);
                let out = r.to_vec(p.payload()).unwrap();
                let mut want = b.clone();
                let n = want.len();
                let pad = p.pad().len();
                want[n - 4 - pad..].fill(0);
                prop_assert_eq!(out, want);
                let (r2, pl) = RoceRepr::parse_bytes(&b).unwrap();
                prop_assert_eq!(r2, r);
                prop_assert_eq!(pl, p.payload());
            }
            Err(e) => {
                prop_assert_eq!(RoceRepr::parse_bytes(&b).unwrap_err(), e);
                // the error names a real cause
                let ok = match e {
                    Error::Truncated { need, have, .. } => have < need && have == b.len(),
                    Error::UnknownOpcode(op) => op == b[0] && !Opcode(op).is_known(),
                    Error::Misaligned(n) => n % 4 != 0,
                    Error::PadExceedsPayload { pad, avail } => pad as usize > avail,
                    Error::UnexpectedPayload { len, .. } => len > 0,
                    _ => false,
                };
                prop_assert!(ok, "{:?}", e);
            }
        }
        // every header parser on the same bytes
        let _ = BthRepr::parse_bytes(&b);
        let _ = RethRepr::parse(&b);
        let _ = AethRepr::parse(&b);
        let _ = AtomicEthRepr::parse(&b);
        let _ = AtomicAckEthRepr::parse(&b);
        let _ = DethRepr::parse(&b);
        if let Ok(v) = Bth::new_checked(&b[..]) { let _ = BthRepr::parse(&v); }
        if let Ok(v) = Reth::new_checked(&b[..]) { let _ = (v.va(), v.rkey(), v.dma_len()); }
        if let Ok(v) = Aeth::new_checked(&b[..]) { let _ = (v.syndrome(), v.msn()); }
        if let Ok(v) = AtomicEth::new_checked(&b[..]) { let _ = (v.swap_add(), v.compare()); }
        if let Ok(v) = AtomicAckEth::new_checked(&b[..]) { let _ = v.orig_rem_data(); }
        if let Ok(v) = Deth::new_checked(&b[..]) { let _ = (v.qkey(), v.src_qp(), v.resv8()); }
        if let Ok(v) = ImmDt::new_checked(&b[..]) { let _ = v.imm(); }
        if let Ok(v) = Ieth::new_checked(&b[..]) { let _ = v.rkey(); }
        if let Ok(v) = Rdeth::new_checked(&b[..]) { let _ = (v.raw(), v.ee_context()); }
        if let Ok(v) = Feth::new_checked(&b[..]) { let _ = (v.placement_type(), v.selectivity()); }
        // the ICRC functions accept any lengths
        let _ = icrc::verify(&b, &b, &b);
        let _ = icrc::compute(&b, &b, &b);
        let mut c = b.clone();
        icrc::fill(&b, &b, &mut c);
    }

    /// Valid packets with one byte changed or cut short: never panic, and
    /// whatever parses re-emits consistently.
    #[test]
    fn mutated_packets_never_panic(
        (r, payload) in roce(),
        pos in any::<prop::sample::Index>(),
        val in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut b = r.to_vec(&payload).unwrap();
        let i = pos.index(b.len());
        b[i] = val;
        let n = cut.index(b.len() + 1);
        for buf in [&b[..], &b[..n]] {
            if let Ok(p) = RocePacket::new_checked(buf) {
                exercise(&p);
                let r2 = RoceRepr::parse(&p);
                let out = r2.to_vec(p.payload()).unwrap();
                prop_assert_eq!(out.len(), buf.len());
                prop_assert_eq!(RoceRepr::parse_bytes(&out).unwrap().0, r2);
            }
        }
    }

    /// `RoceRepr::emit` on arbitrary, possibly inconsistent reprs: never
    /// panics, and whatever it writes parses.
    #[test]
    fn emit_arbitrary_repr_never_panics(
        (good, _) in roce(),
        op in any::<u8>(),
        pad in 0u8..8,
        payload in prop::collection::vec(any::<u8>(), 0..=40),
        plen in 0usize..=40,
        drop in any::<u16>(),
        buf_len in 0usize..=160,
    ) {
        let d = |bit: u16| drop & (1 << bit) != 0;
        let r = RoceRepr {
            bth: BthRepr { opcode: Opcode(op), pad_count: pad, ..good.bth },
            rdeth: if d(0) { None } else { Some(1) },
            deth: if d(1) { None } else { Some(DethRepr { qkey: QKey::new(1), src_qp: Qpn::new(2), resv8: 0 }) },
            xrceth: if d(11) { None } else { Some(0x12_3456) },
            feth: if d(2) { None } else { Some(3) },
            reth: if d(3) { None } else { Some(RethRepr { va: 4, rkey: RKey::new(5), dma_len: 6 }) },
            atomic_eth: if d(4) { None } else { Some(AtomicEthRepr { va: 7, rkey: RKey::new(8), swap_add: 9, compare: 10 }) },
            aeth: if d(5) { None } else { Some(AethRepr { syndrome: Syndrome::Ack { credit: 31 }, msn: Msn::new(11) }) },
            atomic_ack_eth: if d(6) { None } else { Some(AtomicAckEthRepr { orig_rem_data: 12 }) },
            immdt: if d(7) { None } else { Some(13) },
            ieth: if d(8) { None } else { Some(RKey::new(14)) },
            cnp: if d(9) { None } else { Some([15; 16]) },
            payload_len: if d(10) { payload.len() } else { plen },
        };
        let mut buf = vec![0u8; buf_len];
        if let Ok(n) = r.emit(&payload, &mut buf) {
            let p = RocePacket::new_checked(&buf[..n]);
            prop_assert!(p.is_ok(), "emitted bytes do not parse: {:?}", p.err());
            let p = p.unwrap();
            prop_assert_eq!(p.payload(), &payload[..]);
            prop_assert_eq!(p.opcode(), Opcode(op));
        }
        let _ = r.to_vec(&payload);
        let _ = r.buffer_len();
    }
}

// ------------------------------------------------------------ ICRC

/// Is bit `bit` of byte `i` of the concatenated IP+UDP+RoCE datagram one
/// the ICRC deliberately ignores?
fn is_variant(i: usize, bit: u8, ip_len: usize, v4: bool) -> bool {
    if i < ip_len {
        if v4 {
            matches!(i, 1 | 8 | 10 | 11) // TOS, TTL, header checksum
        } else {
            // traffic class (low nibble of byte 0 + high nibble of byte 1),
            // flow label (rest of bytes 1..4), hop limit (byte 7)
            (i == 0 && bit < 4) || matches!(i, 1..=3 | 7)
        }
    } else if i < ip_len + 8 {
        matches!(i - ip_len, 6 | 7) // UDP checksum
    } else {
        i - ip_len - 8 == 4 // BTH byte 4: FECN, BECN, resv6
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every single-bit flip of the datagram breaks the ICRC exactly when
    /// the bit is covered by it.
    #[test]
    fn icrc_covers_exactly_the_invariant_fields(
        (r, payload) in roce(),
        ep in endpoints(),
        meta in ip_meta(),
    ) {
        let mut pl = r.to_vec(&payload).unwrap();
        let hdr = IpUdpHeader::build(&ep, &meta, pl.len()).unwrap();
        hdr.fill_icrc(&mut pl);
        prop_assert!(hdr.verify_icrc(&pl));
        let v4 = ep.src.is_ipv4();
        let ip_len = hdr.ip().len();
        prop_assert_eq!(ip_len, if v4 { 20 } else { 40 });
        prop_assert_eq!(hdr.udp().len(), 8);
        prop_assert_eq!(u16::from_be_bytes([hdr.udp()[4], hdr.udp()[5]]) as usize, pl.len() + 8);
        prop_assert!(icrc::verify(hdr.ip(), hdr.udp(), &pl));

        let mut dgram = hdr.as_bytes().to_vec();
        dgram.extend_from_slice(&pl);
        for i in 0..dgram.len() {
            for bit in 0..8u8 {
                dgram[i] ^= 1 << bit;
                let (ip, rest) = dgram.split_at(ip_len);
                let (udp, ib) = rest.split_at(8);
                let ok = icrc::verify(ip, udp, ib);
                let variant = is_variant(i, bit, ip_len, v4);
                prop_assert_eq!(ok, variant, "byte {} bit {} (ip_len {})", i, bit, ip_len);
                dgram[i] ^= 1 << bit;
            }
        }
        // all variant fields changed at once still verify
        let mut d = dgram.clone();
        for (i, byte) in d.iter_mut().enumerate() {
            for bit in 0..8u8 {
                if is_variant(i, bit, ip_len, v4) {
                    *byte ^= 1 << bit;
                }
            }
        }
        let (ip, rest) = d.split_at(ip_len);
        let (udp, ib) = rest.split_at(8);
        prop_assert!(icrc::verify(ip, udp, ib));
    }

    /// Building the headers with other variant values (TTL, TOS, flow
    /// label) gives the same ICRC; an invariant one (IPv4 id, DF) does not.
    #[test]
    fn icrc_independent_of_variant_meta(
        (r, payload) in roce(),
        ep in endpoints(),
        meta in ip_meta(),
        other in ip_meta(),
    ) {
        let mut pl = r.to_vec(&payload).unwrap();
        let a = IpUdpHeader::build(&ep, &meta, pl.len()).unwrap();
        a.fill_icrc(&mut pl);
        let same = IpMeta { ipv4_id: meta.ipv4_id, dont_fragment: meta.dont_fragment, ..other };
        prop_assert!(IpUdpHeader::build(&ep, &same, pl.len()).unwrap().verify_icrc(&pl));
        if ep.src.is_ipv4() && (other.ipv4_id, other.dont_fragment) != (meta.ipv4_id, meta.dont_fragment) {
            prop_assert!(!IpUdpHeader::build(&ep, &other, pl.len()).unwrap().verify_icrc(&pl));
        }
    }
}

// ------------------------------------------- IP/UDP header vs etherparse

/// The IP header etherparse builds from the same fields.
fn etherparse_ip(ep: &UdpEndpoints, meta: &IpMeta, udp_len: u16) -> Vec<u8> {
    use etherparse::{IpDscp, IpEcn, IpNumber, Ipv4Header, Ipv6FlowLabel, Ipv6Header};
    match (ep.src, ep.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let mut h =
                Ipv4Header::new(udp_len, meta.ttl, IpNumber::UDP, s.octets(), d.octets()).unwrap();
            h.dscp = IpDscp::try_new(meta.tos >> 2).unwrap();
            h.ecn = IpEcn::try_new(meta.tos & 3).unwrap();
            h.identification = meta.ipv4_id;
            h.dont_fragment = meta.dont_fragment;
            h.header_checksum = h.calc_header_checksum();
            h.to_bytes().to_vec()
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => Ipv6Header {
            traffic_class: meta.tos,
            flow_label: Ipv6FlowLabel::try_new(meta.flow_label & 0xF_FFFF).unwrap(),
            payload_length: udp_len,
            next_header: IpNumber::UDP,
            hop_limit: meta.ttl,
            source: s.octets(),
            destination: d.octets(),
        }
        .to_bytes()
        .to_vec(),
        _ => unreachable!("the strategy pairs families"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// `IpUdpHeader::build` writes its IP header field by field; it must be
    /// byte for byte what etherparse builds (checksum included).
    #[test]
    fn ip_udp_header_equals_etherparse(
        ep in endpoints(),
        meta in ip_meta(),
        len in prop_oneof![0usize..2000, 65400usize..65600],
    ) {
        let built = IpUdpHeader::build(&ep, &meta, len);
        let limit = if ep.src.is_ipv4() { 65535 - 20 - 8 } else { 65535 - 8 };
        prop_assert_eq!(built.is_ok(), len <= limit);
        if let Ok(h) = built {
            prop_assert_eq!(h.ip(), &etherparse_ip(&ep, &meta, (len + 8) as u16)[..]);
            let udp = h.udp();
            prop_assert_eq!(&udp[..2], &ep.src_port.to_be_bytes()[..]);
            prop_assert_eq!(&udp[2..4], &ep.dst_port.to_be_bytes()[..]);
            prop_assert_eq!(&udp[4..6], &((len + 8) as u16).to_be_bytes()[..]);
            prop_assert_eq!(&udp[6..8], &[0u8, 0][..]);
        }
    }
}
