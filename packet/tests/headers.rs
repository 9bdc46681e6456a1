//! Literal-byte tests for every header and for whole packets, both ways:
//! parse known bytes and check each field, emit a repr and compare with the
//! same bytes. Packet literals come from real rxe captures
//! (/work/shared/captures) and from the scapy-built oracle samples
//! (/work/shared/oracles/samples.pcap); their ICRCs were computed by
//! independent implementations, so `icrc::verify` is checked against them.

use roce_packet::bth::{self, Bth};
use roce_packet::{
    icrc, Aeth, AethRepr, AtomicAckEth, AtomicAckEthRepr, AtomicEth, AtomicEthRepr, BthRepr, Deth,
    DethRepr, Error, ExtHeader, Feth, Ieth, ImmDt, Msn, NakCode, Opcode, PKey, Psn, QKey, Qpn,
    RKey, Rdeth, Reth, RethRepr, RnrTimer, RocePacket, RoceRepr, Syndrome, RNR_TIMER_US,
};

/// Hex literal with optional whitespace.
fn h(s: &str) -> Vec<u8> {
    hex::decode(s.split_whitespace().collect::<String>()).expect("valid hex literal")
}

fn trunc(what: &'static str, need: usize, have: usize) -> Error {
    Error::Truncated { what, need, have }
}

// =================================================================== BTH

/// Every field zero (including the P_Key, which defaults to 0xFFFF).
const BTH_ZERO: BthRepr = BthRepr {
    opcode: Opcode(0),
    solicited: false,
    migreq: false,
    pad_count: 0,
    tver: 0,
    pkey: PKey::new(0),
    fecn: false,
    becn: false,
    resv6: 0,
    dest_qp: Qpn::new(0),
    ack_req: false,
    resv7: 0,
    psn: Psn::new(0),
};

fn emit_bth(r: &BthRepr) -> Vec<u8> {
    let mut b = vec![0u8; 12];
    r.emit_bytes(&mut b).unwrap();
    b
}

#[test]
fn bth_each_field_alone() {
    let cases: Vec<(BthRepr, &str)> = vec![
        (BTH_ZERO, "00 00 0000 00 000000 00 000000"),
        (BthRepr { opcode: Opcode(0xFF), ..BTH_ZERO }, "ff 00 0000 00 000000 00 000000"),
        (BthRepr { opcode: Opcode(0x0B), ..BTH_ZERO }, "0b 00 0000 00 000000 00 000000"),
        (BthRepr { solicited: true, ..BTH_ZERO }, "00 80 0000 00 000000 00 000000"),
        (BthRepr { migreq: true, ..BTH_ZERO }, "00 40 0000 00 000000 00 000000"),
        (BthRepr { pad_count: 1, ..BTH_ZERO }, "00 10 0000 00 000000 00 000000"),
        (BthRepr { pad_count: 2, ..BTH_ZERO }, "00 20 0000 00 000000 00 000000"),
        (BthRepr { pad_count: 3, ..BTH_ZERO }, "00 30 0000 00 000000 00 000000"),
        (BthRepr { tver: 1, ..BTH_ZERO }, "00 01 0000 00 000000 00 000000"),
        (BthRepr { tver: 0xF, ..BTH_ZERO }, "00 0f 0000 00 000000 00 000000"),
        (BthRepr { pkey: PKey::new(0x8001), ..BTH_ZERO }, "00 00 8001 00 000000 00 000000"),
        (BthRepr { pkey: PKey::DEFAULT, ..BTH_ZERO }, "00 00 ffff 00 000000 00 000000"),
        (BthRepr { fecn: true, ..BTH_ZERO }, "00 00 0000 80 000000 00 000000"),
        (BthRepr { becn: true, ..BTH_ZERO }, "00 00 0000 40 000000 00 000000"),
        (BthRepr { resv6: 0x3F, ..BTH_ZERO }, "00 00 0000 3f 000000 00 000000"),
        (BthRepr { resv6: 0x15, ..BTH_ZERO }, "00 00 0000 15 000000 00 000000"),
        (BthRepr { dest_qp: Qpn::new(0xABCDEF), ..BTH_ZERO }, "00 00 0000 00 abcdef 00 000000"),
        (BthRepr { dest_qp: Qpn::GSI, ..BTH_ZERO }, "00 00 0000 00 000001 00 000000"),
        (BthRepr { ack_req: true, ..BTH_ZERO }, "00 00 0000 00 000000 80 000000"),
        (BthRepr { resv7: 0x7F, ..BTH_ZERO }, "00 00 0000 00 000000 7f 000000"),
        (BthRepr { resv7: 0x2A, ..BTH_ZERO }, "00 00 0000 00 000000 2a 000000"),
        (BthRepr { psn: Psn::new(0x123456), ..BTH_ZERO }, "00 00 0000 00 000000 00 123456"),
        (BthRepr { psn: Psn::MAX, ..BTH_ZERO }, "00 00 0000 00 000000 00 ffffff"),
    ];
    for (repr, hex) in cases {
        let want = h(hex);
        assert_eq!(emit_bth(&repr), want, "emit {repr:?}");
        assert_eq!(BthRepr::parse_bytes(&want).unwrap(), repr, "parse {hex}");
    }
}

#[test]
fn bth_all_ones() {
    let b = [0xFFu8; 12];
    let v = Bth::new_checked(&b[..]).unwrap();
    assert_eq!(v.opcode(), Opcode(0xFF));
    assert!(v.solicited() && v.migreq() && v.fecn() && v.becn() && v.ack_req());
    assert_eq!(v.pad_count(), 3);
    assert_eq!(v.tver(), 0xF);
    assert_eq!(v.pkey(), PKey::new(0xFFFF));
    assert_eq!(v.resv6(), 0x3F);
    assert_eq!(v.dest_qp(), Qpn::new(0xFF_FFFF));
    assert_eq!(v.resv7(), 0x7F);
    assert_eq!(v.psn(), Psn::MAX);
    let r = BthRepr::parse(&v);
    assert_eq!(emit_bth(&r), b.to_vec());
}

#[test]
fn bth_from_rxe_read_request() {
    // read_lat.pcap, first RoCE frame: RC_RDMA_READ_REQUEST to QP 0x20, AckReq, PSN 218388.
    let b = h("0c 00 ffff 00 000020 80 035514");
    let v = Bth::new_checked(&b[..]).unwrap();
    assert_eq!(v.opcode(), Opcode::RC_RDMA_READ_REQUEST);
    assert!(!v.solicited() && !v.migreq() && !v.fecn() && !v.becn());
    assert_eq!((v.pad_count(), v.tver(), v.resv6(), v.resv7()), (0, 0, 0, 0));
    assert_eq!(v.pkey(), PKey::DEFAULT);
    assert_eq!(v.dest_qp(), Qpn::new(0x20));
    assert!(v.ack_req());
    assert_eq!(v.psn(), Psn::new(218_388));
    let r = BthRepr::parse(&v);
    assert_eq!(
        r,
        BthRepr {
            opcode: Opcode::RC_RDMA_READ_REQUEST,
            dest_qp: Qpn::new(0x20),
            ack_req: true,
            psn: Psn::new(0x035514),
            ..BthRepr::default()
        }
    );
    assert_eq!(emit_bth(&r), b);
}

#[test]
fn bth_setters_touch_only_their_bits() {
    // Start from all ones; each clear must change exactly the field's bits.
    type Clear = fn(&mut Bth<&mut [u8]>);
    let cases: [(Clear, usize, u8); 12] = [
        (|v| v.set_solicited(false), 1, 0x7F),
        (|v| v.set_migreq(false), 1, 0xBF),
        (|v| v.set_pad_count(0), 1, 0xCF),
        (|v| v.set_tver(0), 1, 0xF0),
        (|v| v.set_fecn(false), 4, 0x7F),
        (|v| v.set_becn(false), 4, 0xBF),
        (|v| v.set_resv6(0), 4, 0xC0),
        (|v| v.set_ack_req(false), 8, 0x7F),
        (|v| v.set_resv7(0), 8, 0x80),
        (|v| v.set_opcode(Opcode(0)), 0, 0x00),
        (|v| v.set_pkey(PKey::new(0xFF00)), 3, 0x00),
        (|v| v.set_psn(Psn::new(0xFFFF00)), 11, 0x00),
    ];
    for (i, (clear, byte, val)) in cases.iter().enumerate() {
        let mut b = [0xFFu8; 12];
        clear(&mut Bth::new_unchecked(&mut b[..]));
        let mut want = [0xFFu8; 12];
        want[*byte] = *val;
        assert_eq!(b, want, "case {i}");
    }
    // Setters mask out-of-range values instead of spilling into neighbours.
    let mut b = [0u8; 12];
    let mut v = Bth::new_unchecked(&mut b[..]);
    v.set_pad_count(0xFF);
    v.set_tver(0xFF);
    v.set_resv6(0xFF);
    v.set_resv7(0xFF);
    v.set_dest_qp(Qpn::new(0xFFFF_FFFF));
    assert_eq!(b.to_vec(), h("00 3f 0000 3f ffffff 7f 000000"));
}

#[test]
fn bth_emit_writes_exactly_twelve_bytes() {
    let mut b = [0xEEu8; 16];
    BTH_ZERO.emit_bytes(&mut b).unwrap();
    assert_eq!(&b[..12], &[0u8; 12]);
    assert_eq!(&b[12..], &[0xEE; 4]);
    // emit clears whatever was there before
    let mut b = [0xFFu8; 12];
    let r = BthRepr { opcode: Opcode::RC_ACKNOWLEDGE, psn: Psn::new(1), ..BTH_ZERO };
    r.emit(&mut Bth::new_unchecked(&mut b[..]));
    assert_eq!(b.to_vec(), h("11 00 0000 00 000000 00 000001"));
}

#[test]
fn bth_errors() {
    for n in 0..bth::LEN {
        let b = vec![0u8; n];
        assert_eq!(Bth::new_checked(&b[..]).unwrap_err(), trunc("BTH", 12, n));
        assert_eq!(BthRepr::parse_bytes(&b).unwrap_err(), trunc("BTH", 12, n));
        let mut out = vec![0u8; n];
        assert_eq!(
            BTH_ZERO.emit_bytes(&mut out).unwrap_err(),
            Error::BufferTooSmall { need: 12, have: n }
        );
    }
    assert_eq!(BTH_ZERO.buffer_len(), 12);
}

// =================================================================== RETH

#[test]
fn reth_literals() {
    // read_lat.pcap: VA 0x564ff309d000, rkey 0xf74 (3956), DMA length 8.
    let cases = [
        ("0000564ff309d000 00000f74 00000008", 0x0000_564F_F309_D000u64, 0xF74u32, 8u32),
        ("0102030405060708 090a0b0c 0d0e0f10", 0x0102_0304_0506_0708, 0x090A_0B0C, 0x0D0E_0F10),
        ("ffffffffffffffff ffffffff ffffffff", u64::MAX, u32::MAX, u32::MAX),
    ];
    for (hex, va, rkey, len) in cases {
        let b = h(hex);
        let v = Reth::new_checked(&b[..]).unwrap();
        assert_eq!((v.va(), v.rkey(), v.dma_len()), (va, RKey::new(rkey), len));
        let r = RethRepr::parse(&b).unwrap();
        assert_eq!(r, RethRepr { va, rkey: RKey::new(rkey), dma_len: len });
        let mut out = [0u8; 16];
        r.emit(&mut out).unwrap();
        assert_eq!(out.to_vec(), b);
    }
    assert_eq!(Reth::<&[u8]>::LEN, 16);
}

// =================================================================== AETH

fn aeth_roundtrip(hex: &str, syndrome: Syndrome, msn: u32) {
    let b = h(hex);
    let v = Aeth::new_checked(&b[..]).unwrap();
    assert_eq!(v.syndrome(), syndrome, "{hex}");
    assert_eq!(v.msn(), Msn::new(msn), "{hex}");
    let r = AethRepr::parse(&b).unwrap();
    assert_eq!(r, AethRepr { syndrome, msn: Msn::new(msn) });
    let mut out = [0u8; 4];
    r.emit(&mut out).unwrap();
    assert_eq!(out.to_vec(), b, "{hex}");
}

#[test]
fn aeth_ack_with_credit() {
    // rxe always sends credit 31 ("no credit information"): read_lat.pcap.
    aeth_roundtrip("1f 000001", Syndrome::Ack { credit: Syndrome::NO_CREDIT }, 1);
    aeth_roundtrip("00 000000", Syndrome::Ack { credit: 0 }, 0);
    aeth_roundtrip("05 abcdef", Syndrome::Ack { credit: 5 }, 0xABCDEF);
    aeth_roundtrip("10 ffffff", Syndrome::Ack { credit: 16 }, 0xFF_FFFF);
    assert_eq!(Syndrome::Ack { credit: 5 }.kind_name(), "ACK");
}

/// IBA Table 45, in milliseconds as the spec prints them.
const RNR_MS: [f64; 32] = [
    655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28,
    1.92, 2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84,
    245.76, 327.68, 491.52,
];

#[test]
fn aeth_rnr_nak_every_timer_code() {
    for code in 0u8..32 {
        let t = RnrTimer::new(code);
        assert_eq!(t.code(), code);
        let us = (RNR_MS[code as usize] * 1000.0).round() as u32;
        assert_eq!(t.micros(), us, "code {code}");
        assert_eq!(RNR_TIMER_US[code as usize], us);
        aeth_roundtrip(&format!("{:02x} 000007", 0x20 | code), Syndrome::RnrNak(t), 7);
    }
    assert_eq!(RnrTimer::new(0).micros(), 655_360);
    assert_eq!(RnrTimer::new(1).micros(), 10);
    assert_eq!(RnrTimer::new(14).micros(), 1_280);
    assert_eq!(RnrTimer::new(31).micros(), 491_520);
    // rnr.pcap: rxe's RNR NAK with syndrome 0x38 = timer code 24 = 40.96 ms
    aeth_roundtrip("38 000000", Syndrome::RnrNak(RnrTimer::new(24)), 0);
    assert_eq!(RnrTimer::new(24).micros(), 40_960);
    // samples.pcap frame 12: RNR NAK timer 14
    aeth_roundtrip("2e 000003", Syndrome::RnrNak(RnrTimer::new(14)), 3);
    // the constructor keeps five bits
    assert_eq!(RnrTimer::new(0xE1).code(), 1);
    assert_eq!(Syndrome::RnrNak(RnrTimer::new(3)).kind_name(), "RNR_NAK");
}

#[test]
fn aeth_nak_codes() {
    let named = [
        (0, NakCode::PsnSequenceError, "PSN_SEQUENCE_ERROR"),
        (1, NakCode::InvalidRequest, "INVALID_REQUEST"),
        (2, NakCode::RemoteAccessError, "REMOTE_ACCESS_ERROR"),
        (3, NakCode::RemoteOperationalError, "REMOTE_OPERATIONAL_ERROR"),
        (4, NakCode::InvalidRdRequest, "INVALID_RD_REQUEST"),
    ];
    for (v, code, name) in named {
        assert_eq!(NakCode::from_u5(v), code);
        assert_eq!(code.to_u5(), v);
        assert_eq!(code.name(), name);
        aeth_roundtrip(&format!("{:02x} 000100", 0x60 | v), Syndrome::Nak(code), 0x100);
    }
    for v in 5u8..32 {
        assert_eq!(NakCode::from_u5(v), NakCode::Reserved(v));
        assert_eq!(NakCode::Reserved(v).name(), "RESERVED");
        aeth_roundtrip(&format!("{:02x} 000000", 0x60 | v), Syndrome::Nak(NakCode::Reserved(v)), 0);
    }
    // samples.pcap frame 11: NAK PSN sequence error, MSN 3
    aeth_roundtrip("60 000003", Syndrome::Nak(NakCode::PsnSequenceError), 3);
    assert_eq!(Syndrome::Nak(NakCode::InvalidRequest).kind_name(), "NAK");
}

#[test]
fn aeth_reserved_syndromes_kept() {
    // kind 0b10 and anything with bit 7 set are reserved and kept verbatim
    for v in (0x40u8..=0x5F).chain(0x80..=0xFF) {
        let s = Syndrome::from_u8(v);
        assert_eq!(s, Syndrome::Reserved(v));
        assert_eq!(s.kind_name(), "RESERVED");
        aeth_roundtrip(&format!("{v:02x} 123456"), s, 0x123456);
    }
    // every one of the 256 syndrome bytes survives parse + emit
    for v in 0u8..=255 {
        assert_eq!(Syndrome::from_u8(v).to_u8(), v);
    }
}

// ============================================================ AtomicETH

#[test]
fn atomic_eth_literal() {
    // samples.pcap frame 13 (RC COMPARE_SWAP)
    let b = h("00007f0012347008 00abcdef 1111222233334444 5555666677778888");
    let v = AtomicEth::new_checked(&b[..]).unwrap();
    assert_eq!(v.va(), 0x0000_7F00_1234_7008);
    assert_eq!(v.rkey(), RKey::new(0x00AB_CDEF));
    assert_eq!(v.swap_add(), 0x1111_2222_3333_4444);
    assert_eq!(v.compare(), 0x5555_6666_7777_8888);
    let r = AtomicEthRepr::parse(&b).unwrap();
    assert_eq!(
        r,
        AtomicEthRepr {
            va: 0x0000_7F00_1234_7008,
            rkey: RKey::new(0xABCDEF),
            swap_add: 0x1111_2222_3333_4444,
            compare: 0x5555_6666_7777_8888,
        }
    );
    let mut out = [0u8; 28];
    r.emit(&mut out).unwrap();
    assert_eq!(out.to_vec(), b);
    assert_eq!(AtomicEth::<&[u8]>::LEN, 28);
}

#[test]
fn atomic_ack_eth_literal() {
    let b = h("5555666677778888");
    assert_eq!(AtomicAckEth::new_checked(&b[..]).unwrap().orig_rem_data(), 0x5555_6666_7777_8888);
    let r = AtomicAckEthRepr::parse(&b).unwrap();
    assert_eq!(r.orig_rem_data, 0x5555_6666_7777_8888);
    let mut out = [0u8; 8];
    AtomicAckEthRepr { orig_rem_data: 0x0102_0304_0506_0708 }.emit(&mut out).unwrap();
    assert_eq!(out.to_vec(), h("0102030405060708"));
}

// ============================================================ 4-byte headers

#[test]
fn immdt_big_endian() {
    let b = h("cafef00d");
    assert_eq!(ImmDt::new_checked(&b[..]).unwrap().imm(), 0xCAFE_F00D);
    let mut out = [0u8; 4];
    ImmDt::new_checked(&mut out[..]).unwrap().set_imm(0x0102_0304);
    assert_eq!(out, [1, 2, 3, 4]);
}

#[test]
fn ieth_rkey() {
    let b = h("00abcdef");
    assert_eq!(Ieth::new_checked(&b[..]).unwrap().rkey(), RKey::new(0xABCDEF));
    let mut out = [0u8; 4];
    Ieth::new_checked(&mut out[..]).unwrap().set_rkey(RKey::new(0xDEAD_BEEF));
    assert_eq!(out.to_vec(), h("deadbeef"));
}

#[test]
fn rdeth_reserved_byte_and_ee_context() {
    let b = h("a5 123456");
    let v = Rdeth::new_checked(&b[..]).unwrap();
    assert_eq!(v.raw(), 0xA512_3456);
    assert_eq!(v.ee_context(), 0x12_3456);
    let mut out = [0u8; 4];
    Rdeth::new_checked(&mut out[..]).unwrap().set_raw(0xA512_3456);
    assert_eq!(out.to_vec(), b);
}

#[test]
fn feth_placement_and_selectivity() {
    // (raw word, placement type (bits 3:0), selectivity (bits 5:4))
    let cases = [
        ("00000000", 0, 0),
        ("00000001", 1, 0), // global visibility
        ("00000002", 2, 0), // persistence
        ("00000003", 3, 0),
        ("00000012", 2, 1), // whole memory region, persistence
        ("00000021", 1, 2),
        ("0000003f", 0xF, 3),
        ("ffffffc0", 0, 0), // reserved bits never leak into the fields
        ("ffffffff", 0xF, 3),
    ];
    for (hex, plt, sel) in cases {
        let b = h(hex);
        let v = Feth::new_checked(&b[..]).unwrap();
        assert_eq!(v.raw(), u32::from_str_radix(hex, 16).unwrap());
        assert_eq!((v.placement_type(), v.selectivity()), (plt, sel), "{hex}");
        let mut out = [0u8; 4];
        Feth::new_checked(&mut out[..]).unwrap().set_raw(v.raw());
        assert_eq!(out.to_vec(), b);
    }
}

// =================================================================== DETH

#[test]
fn deth_literals() {
    let cases = [
        // ud_pingpong.pcap: Q_Key 0x11111111 from QP 0x14
        ("11111111 00 000014", 0x1111_1111u32, 0u8, 0x14u32, false),
        // rping.pcap: a CM MAD, privileged Q_Key 0x80010000 from QP1 (GSI)
        ("80010000 00 000001", 0x8001_0000, 0, 1, true),
        // the reserved byte is kept for exact re-emission
        ("0000002a a5 abcdef", 0x2A, 0xA5, 0xAB_CDEF, false),
    ];
    for (hex, qkey, resv8, src_qp, privileged) in cases {
        let b = h(hex);
        let v = Deth::new_checked(&b[..]).unwrap();
        assert_eq!((v.qkey(), v.resv8(), v.src_qp()), (QKey::new(qkey), resv8, Qpn::new(src_qp)));
        assert_eq!(v.qkey().is_privileged(), privileged);
        let r = DethRepr::parse(&b).unwrap();
        assert_eq!(r, DethRepr { qkey: QKey::new(qkey), src_qp: Qpn::new(src_qp), resv8 });
        let mut out = [0u8; 8];
        r.emit(&mut out).unwrap();
        assert_eq!(out.to_vec(), b);
    }
    assert_eq!(DethRepr::parse(&h("80010000 00 000001")).unwrap().src_qp, Qpn::GSI);
}

// =================================================================== header errors

#[test]
fn every_header_truncated_at_every_length() {
    let big = [0u8; 32];
    for n in 0..28 {
        let b = &big[..n];
        let chk = |what, need| {
            if n < need {
                Some(trunc(what, need, n))
            } else {
                None
            }
        };
        assert_eq!(Reth::new_checked(b).err(), chk("RETH", 16));
        assert_eq!(RethRepr::parse(b).err(), chk("RETH", 16));
        assert_eq!(Aeth::new_checked(b).err(), chk("AETH", 4));
        assert_eq!(AethRepr::parse(b).err(), chk("AETH", 4));
        assert_eq!(AtomicEth::new_checked(b).err(), chk("AtomicETH", 28));
        assert_eq!(AtomicEthRepr::parse(b).err(), chk("AtomicETH", 28));
        assert_eq!(AtomicAckEth::new_checked(b).err(), chk("AtomicAckETH", 8));
        assert_eq!(AtomicAckEthRepr::parse(b).err(), chk("AtomicAckETH", 8));
        assert_eq!(ImmDt::new_checked(b).err(), chk("ImmDt", 4));
        assert_eq!(Ieth::new_checked(b).err(), chk("IETH", 4));
        assert_eq!(Rdeth::new_checked(b).err(), chk("RDETH", 4));
        assert_eq!(Feth::new_checked(b).err(), chk("FETH", 4));
        assert_eq!(Deth::new_checked(b).err(), chk("DETH", 8));
        assert_eq!(DethRepr::parse(b).err(), chk("DETH", 8));
    }
}

#[test]
fn every_header_emit_buffer_too_small() {
    let too_small = |need: usize, f: &dyn Fn(&mut [u8]) -> Result<(), Error>| {
        for n in 0..need {
            let mut b = vec![0u8; n];
            assert_eq!(f(&mut b).unwrap_err(), Error::BufferTooSmall { need, have: n });
        }
        let mut b = vec![0u8; need];
        f(&mut b).unwrap();
    };
    let reth = RethRepr { va: 1, rkey: RKey::new(2), dma_len: 3 };
    too_small(16, &|b| reth.emit(b));
    let aeth = AethRepr { syndrome: Syndrome::Ack { credit: 1 }, msn: Msn::new(1) };
    too_small(4, &|b| aeth.emit(b));
    let at = AtomicEthRepr { va: 1, rkey: RKey::new(2), swap_add: 3, compare: 4 };
    too_small(28, &|b| at.emit(b));
    let aa = AtomicAckEthRepr { orig_rem_data: 9 };
    too_small(8, &|b| aa.emit(b));
    let deth = DethRepr { qkey: QKey::new(1), src_qp: Qpn::new(2), resv8: 0 };
    too_small(8, &|b| deth.emit(b));
}

// =================================================================== whole packets

/// Check a captured packet end to end: the structure validates, the ICRC
/// verifies against the literal IP/UDP headers, the repr re-emits the same
/// bytes (ICRC placeholder zero) and `icrc::fill` restores the ICRC.
/// Returns the parsed view's repr and payload.
fn captured(ip: &str, udp: &str, pl: &str) -> (RoceRepr, Vec<u8>, Vec<u8>) {
    let (ip, udp, pl) = (h(ip), h(udp), h(pl));
    assert!(icrc::verify(&ip, &udp, &pl), "ICRC of the literal");
    let (repr, payload) = RoceRepr::parse_bytes(&pl).unwrap();
    let mut out = repr.to_vec(payload).unwrap();
    assert_eq!(out.len(), pl.len());
    assert_eq!(&out[..pl.len() - 4], &pl[..pl.len() - 4]);
    assert_eq!(&out[pl.len() - 4..], &[0u8; 4]);
    icrc::fill(&ip, &udp, &mut out);
    assert_eq!(out, pl);
    (repr, payload.to_vec(), pl)
}

#[test]
fn packet_rxe_read_request() {
    let (r, payload, pl) = captured(
        "4500003cc9dd40004011557dc0a84d03c0a84d02",
        "c40012b700280000",
        "0c00ffff00000020800355140000564ff309d00000000f7400000008d3f930ba",
    );
    assert_eq!(r.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
    assert_eq!(r.bth.psn, Psn::new(218_388));
    assert!(r.bth.ack_req);
    assert_eq!(r.reth, Some(RethRepr { va: 0x564F_F309_D000, rkey: RKey::new(0xF74), dma_len: 8 }));
    assert_eq!(r.aeth, None);
    assert_eq!(r.payload_len, 0);
    assert!(payload.is_empty());
    let p = RocePacket::new_checked(&pl[..]).unwrap();
    assert_eq!(p.icrc(), [0xD3, 0xF9, 0x30, 0xBA]);
    assert_eq!(p.payload_offset(), 28);
    assert!(p.pad().is_empty());
}

#[test]
fn packet_rxe_read_response_only() {
    let (r, payload, _) = captured(
        "450000382f3a40004011f024c0a84d02c0a84d03",
        "c40012b700240000",
        "1000ffff00000020000355141f00000175c348857ddc6e3933a46aa1",
    );
    assert_eq!(r.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert!(!r.bth.ack_req);
    assert_eq!(r.aeth, Some(AethRepr { syndrome: Syndrome::Ack { credit: 31 }, msn: Msn::new(1) }));
    assert_eq!(r.reth, None);
    assert_eq!(payload, h("75c348857ddc6e39"));
}

#[test]
fn packet_rxe_rnr_nak() {
    let (r, _, _) = captured(
        "45000030687540004011b6f1c0a84d02c0a84d03",
        "c70e12b7001c0000",
        "1100ffff0000002b00002000380000008cdc42c0",
    );
    assert_eq!(r.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(r.bth.dest_qp, Qpn::new(0x2B));
    assert_eq!(r.bth.psn, Psn::new(0x2000));
    let a = r.aeth.unwrap();
    assert_eq!(a.syndrome, Syndrome::RnrNak(RnrTimer::new(24)));
    assert_eq!(a.msn, Msn::new(0));
}

#[test]
fn packet_rc_send_only_with_pad() {
    // samples.pcap frame 1: "hello, rocev2" (13 bytes), PadCnt 3, SE set
    let (r, payload, pl) = captured(
        "4502003c123440004011a477c0000201c0000202",
        "c00112b700280000",
        "04b0ffff000000128000006468656c6c6f2c20726f6365763200000026eece1b",
    );
    assert_eq!(r.bth.opcode, Opcode::RC_SEND_ONLY);
    assert!(r.bth.solicited);
    assert_eq!(r.bth.pad_count, 3);
    assert_eq!(payload, b"hello, rocev2");
    let p = RocePacket::new_checked(&pl[..]).unwrap();
    assert_eq!(p.pad(), &[0, 0, 0]);
    assert_eq!(p.without_icrc().len(), 28);
}

#[test]
fn packet_rc_write_only_with_immediate_payload_and_pad() {
    // Built by hand; ICRC from oracle.py's reference implementation.
    let ip = h("45020048123440004011a46bc0000201c0000202");
    let udp = h("c00112b700340000");
    let wire = h("0b b0 ffff 00 000012 80 000130
                  00007f0012345678 00001234 00000005
                  deadbeef
                  68656c6c6f 000000
                  0487da3b");
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            solicited: true,
            pad_count: 3,
            dest_qp: Qpn::new(0x12),
            ack_req: true,
            psn: Psn::new(0x130),
            ..BthRepr::default()
        },
        reth: Some(RethRepr { va: 0x7F00_1234_5678, rkey: RKey::new(0x1234), dma_len: 5 }),
        immdt: Some(0xDEAD_BEEF),
        payload_len: 5,
        ..RoceRepr::default()
    };
    assert_eq!(repr.buffer_len().unwrap(), 44);
    let mut out = vec![0xAAu8; 44];
    assert_eq!(repr.emit(b"hello", &mut out).unwrap(), 44);
    icrc::fill(&ip, &udp, &mut out);
    assert_eq!(out, wire);
    let p = RocePacket::new_checked(&wire[..]).unwrap();
    assert_eq!(p.reth().unwrap().va(), 0x7F00_1234_5678);
    assert_eq!(p.immdt(), Some(0xDEAD_BEEF));
    assert_eq!(p.payload(), b"hello");
    assert_eq!(p.pad(), &[0, 0, 0]);
    assert_eq!(RoceRepr::parse(&p), repr);
    assert!(icrc::verify(&ip, &udp, &wire));

    // samples.pcap frame 21: the same opcode from scapy, 8-byte payload, no pad
    let (r, payload, _) = captured(
        "45020048123440004011a46bc0000201c0000202",
        "c00112b700340000",
        "0b00ffff000000128000012f000000000000100000000055000000080000abcd151c232a31383f46713d3454",
    );
    assert_eq!(r.reth, Some(RethRepr { va: 0x1000, rkey: RKey::new(0x55), dma_len: 8 }));
    assert_eq!(r.immdt, Some(0xABCD));
    assert_eq!(payload, h("151c232a31383f46"));
}

#[test]
fn packet_ud_send_only_with_deth() {
    // samples.pcap frame 16: 30 bytes, PadCnt 2, Q_Key 0x11111111 from QP 0x22
    let (r, payload, pl) = captured(
        "45020054123440004011a45fc0000201c0000202",
        "c00312b700400000",
        "6420ffff0000002100000007111111110000002210171e252c333a41484f565d646b727980878e959ca3aab1b8bfc6cdd4db0000995bd0f2",
    );
    assert_eq!(r.bth.opcode, Opcode::UD_SEND_ONLY);
    assert_eq!(r.bth.pad_count, 2);
    assert_eq!(r.bth.dest_qp, Qpn::new(0x21));
    assert_eq!(r.bth.psn, Psn::new(7));
    assert_eq!(
        r.deth,
        Some(DethRepr { qkey: QKey::new(0x1111_1111), src_qp: Qpn::new(0x22), resv8: 0 })
    );
    assert_eq!(payload.len(), 30);
    assert_eq!(payload[0], 0x10);
    assert_eq!(RocePacket::new_checked(&pl[..]).unwrap().payload_offset(), 20);

    // samples.pcap frame 17: UD SEND_ONLY_WITH_IMMEDIATE: DETH comes before ImmDt
    let (r, payload, _) = captured(
        "45020058123440004011a45bc0000201c0000202",
        "c00312b700440000",
        "6500ffff00000021000000081111111100000022cafef00d11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eacfd6971e",
    );
    assert_eq!(r.immdt, Some(0xCAFE_F00D));
    assert_eq!(r.deth.unwrap().src_qp, Qpn::new(0x22));
    assert_eq!(payload.len(), 32);
}

#[test]
fn packet_atomic_acknowledge() {
    // samples.pcap frame 15
    let (r, payload, pl) = captured(
        "45020038123440004011a47bc0000202c0000201",
        "c00112b700240000",
        "1200ffff00000011000000c81f0000095555666677778888779ea32e",
    );
    assert_eq!(r.bth.opcode, Opcode::RC_ATOMIC_ACKNOWLEDGE);
    assert_eq!(r.bth.psn, Psn::new(200));
    assert_eq!(r.aeth, Some(AethRepr { syndrome: Syndrome::Ack { credit: 31 }, msn: Msn::new(9) }));
    assert_eq!(r.atomic_ack_eth, Some(AtomicAckEthRepr { orig_rem_data: 0x5555_6666_7777_8888 }));
    assert!(payload.is_empty());
    let p = RocePacket::new_checked(&pl[..]).unwrap();
    assert_eq!(p.atomic_ack_eth().unwrap().orig_rem_data(), 0x5555_6666_7777_8888);
    assert_eq!(p.payload_offset(), 24);
}

#[test]
fn packet_compare_swap() {
    // samples.pcap frame 13
    let (r, _, _) = captured(
        "45020048123440004011a46bc0000201c0000202",
        "c00112b700340000",
        "1300ffff00000012800000c800007f001234700800abcdef11112222333344445555666677778888dfb64351",
    );
    assert_eq!(r.bth.opcode, Opcode::RC_COMPARE_SWAP);
    assert_eq!(
        r.atomic_eth,
        Some(AtomicEthRepr {
            va: 0x7F00_1234_7008,
            rkey: RKey::new(0xABCDEF),
            swap_add: 1_229_801_703_532_086_340,
            compare: 6_148_933_456_521_300_104,
        })
    );
}

#[test]
fn packet_send_with_invalidate() {
    // samples.pcap frames 19 (ONLY) and 20 (LAST)
    for (op, pl) in [
        (
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            "1700ffff000000128000012d00abcdef131a21282f363d444b525960676e757ce55f2016",
        ),
        (
            Opcode::RC_SEND_LAST_WITH_INVALIDATE,
            "1600ffff000000128000012e00abcdef141b222930373e454c535a61686f767de5459228",
        ),
    ] {
        let (r, payload, _) =
            captured("45020040123440004011a473c0000201c0000202", "c00112b7002c0000", pl);
        assert_eq!(r.bth.opcode, op);
        assert_eq!(r.ieth, Some(RKey::new(0xABCDEF)));
        assert_eq!(payload.len(), 16);
    }
}

#[test]
fn packet_ipv6_send_only_and_variant_fields() {
    // samples.pcap frames 22 and 23: the same packet, frame 23 with other
    // traffic class, flow label, hop limit, FECN/BECN and UDP checksum.
    let (r, _, pl) = captured(
        "602123450040114020010db800000000000000000000000120010db8000000000000000000000002",
        "c00212b70040f324",
        "0400ffff0000001280000190161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b12192027b4d67df0",
    );
    assert_eq!(r.bth.psn, Psn::new(400));
    assert_eq!(r.payload_len, 40);
    let (r2, _, pl2) = captured(
        "6bbabcde0040110320010db800000000000000000000000120010db8000000000000000000000002",
        "c00212b700403324",
        "0400ffffc000001280000190161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b12192027b4d67df0",
    );
    assert!(r2.bth.fecn && r2.bth.becn);
    assert_eq!(BthRepr { fecn: false, becn: false, ..r2.bth }, r.bth);
    assert_eq!(pl[pl.len() - 4..], pl2[pl2.len() - 4..]);
}

#[test]
fn packet_cnp() {
    // samples.pcap frame 27
    let ip = h("4502003c123440004011a477c0000202c0000201");
    let udp = h("c00112b700280000");
    let (r, payload, pl) = captured(
        "4502003c123440004011a477c0000202c0000201",
        "c00112b700280000",
        "8100ffff40000011 00000000 00000000000000000000000000000000 bf330d9a",
    );
    assert_eq!(r.bth.opcode, Opcode::CNP);
    assert!(r.bth.becn && !r.bth.fecn);
    assert_eq!(r.bth.dest_qp, Qpn::new(0x11));
    assert_eq!(r.cnp, Some([0u8; 16]));
    assert!(payload.is_empty());
    let p = RocePacket::new_checked(&pl[..]).unwrap();
    assert_eq!(p.cnp_reserved(), Some(&[0u8; 16][..]));
    assert_eq!(p.info().headers.len(), 16);
    // reserved bytes are kept as received
    let mut odd = pl.clone();
    odd[12 + 3] = 0x5A;
    icrc::fill(&ip, &udp, &mut odd);
    let (r, _) = RoceRepr::parse_bytes(&odd).unwrap();
    let mut want = [0u8; 16];
    want[3] = 0x5A;
    assert_eq!(r.cnp, Some(want));
    let mut out = r.to_vec(&[]).unwrap();
    icrc::fill(&ip, &udp, &mut out);
    assert_eq!(out, odd);
    // a CNP repr without reserved bytes emits zeros
    let bare = RoceRepr { cnp: None, ..r };
    assert_eq!(&bare.to_vec(&[]).unwrap()[12..28], &[0u8; 16]);
}

#[test]
fn packet_flush_feth_before_reth() {
    let wire = h("1c 00 ffff 00 000005 80 000010
                  00000012
                  0000000000002000 00000abc 00000040
                  00000000");
    let p = RocePacket::new_checked(&wire[..]).unwrap();
    assert_eq!(p.opcode(), Opcode::RC_FLUSH);
    let f = p.feth().unwrap();
    assert_eq!((f.placement_type(), f.selectivity()), (2, 1));
    let reth = p.reth().unwrap();
    assert_eq!((reth.va(), reth.rkey(), reth.dma_len()), (0x2000, RKey::new(0xABC), 0x40));
    let r = RoceRepr::parse(&p);
    assert_eq!(r.feth, Some(0x12));
    assert_eq!(r.to_vec(&[]).unwrap(), wire);
}

#[test]
fn packet_rd_write_first_headers_in_wire_order() {
    // RD RDMA WRITE FIRST: BTH, RDETH, DETH, RETH, payload
    let wire = h("46 00 ffff 00 000009 00 000001
                  00 000042
                  00000777 00 000033
                  0000000000001000 00000011 00001000
                  01020304
                  00000000");
    let p = RocePacket::new_checked(&wire[..]).unwrap();
    assert_eq!(p.opcode().name(), "RD_RDMA_WRITE_FIRST");
    assert_eq!(p.rdeth().unwrap().ee_context(), 0x42);
    assert_eq!(p.deth().unwrap().src_qp(), Qpn::new(0x33));
    assert_eq!(p.deth().unwrap().qkey(), QKey::new(0x777));
    assert_eq!(p.reth().unwrap().dma_len(), 0x1000);
    assert_eq!(p.payload(), &[1, 2, 3, 4]);
    let r = RoceRepr::parse(&p);
    assert_eq!(r.rdeth, Some(0x42));
    assert_eq!(r.to_vec(p.payload()).unwrap(), wire);
}

#[test]
fn packet_read_response_middle_has_no_aeth() {
    let wire = h("0e 00 ffff 00 000001 00 000002 aabbccdd 00000000");
    let p = RocePacket::new_checked(&wire[..]).unwrap();
    assert!(p.aeth().is_none());
    assert_eq!(p.payload(), &[0xAA, 0xBB, 0xCC, 0xDD]);
    assert_eq!(p.payload_offset(), 12);
}

// =================================================================== packet errors

/// A valid RC RDMA_WRITE_ONLY_WITH_IMMEDIATE (headers 32 bytes), 5 bytes +
/// 3 pad, zero ICRC.
fn write_imm_wire() -> Vec<u8> {
    h("0b 30 ffff 00 000012 80 000130
       00007f0012345678 00001234 00000005
       deadbeef
       68656c6c6f 000000
       00000000")
}

#[test]
fn packet_truncated_at_every_length() {
    let wire = write_imm_wire();
    for n in 0..wire.len() {
        if n == 40 {
            // 4 bytes before the "ICRC": structurally a 1-byte payload + 3 pad
            let p = RocePacket::new_checked(&wire[..n]).unwrap();
            assert_eq!(p.payload(), b"h");
            continue;
        }
        let got = RocePacket::new_checked(&wire[..n]).map(|_| ()).unwrap_err();
        let want = if n < 16 {
            trunc("BTH+ICRC", 16, n)
        } else if n < 36 {
            // the last header the opcode needs is ImmDt
            trunc("ImmDt", 36, n)
        } else if (n - 36) % 4 != 0 {
            Error::Misaligned(n - 36)
        } else {
            // n = 36: no bytes for the 3 pad bytes
            Error::PadExceedsPayload { pad: 3, avail: n - 36 }
        };
        assert_eq!(got, want, "length {n}");
        assert_eq!(RoceRepr::parse_bytes(&wire[..n]).unwrap_err(), want);
    }
    // an opcode without payload: every shorter length is a truncation
    let ack = h("12 00 ffff 00 000011 00 0000c8 1f000009 5555666677778888 00000000");
    assert!(RocePacket::new_checked(&ack[..]).is_ok());
    for n in 16..ack.len() {
        assert_eq!(
            RocePacket::new_checked(&ack[..n]).unwrap_err(),
            trunc("AtomicAckETH", 28, n),
            "length {n}"
        );
    }
    // payload-less BTH-only opcodes still need the ICRC
    let mid = h("01 00 ffff 00 000001 00 000002");
    assert_eq!(RocePacket::new_checked(&mid[..]).unwrap_err(), trunc("BTH+ICRC", 16, 12));
}

#[test]
fn packet_unknown_opcodes() {
    for op in [
        0x15u8, 0x18, 0x1A, 0x1E, 0x1F, 0x2C, 0x3F, 0x56, 0x60, 0x66, 0x80, 0x82, 0xB5, 0xB8, 0xBC,
        0xC0, 0xFF,
    ] {
        let mut wire = vec![0u8; 64];
        wire[0] = op;
        assert_eq!(
            RocePacket::new_checked(&wire[..]).unwrap_err(),
            Error::UnknownOpcode(op),
            "{op:#04x}"
        );
        assert_eq!(RoceRepr::parse_bytes(&wire).unwrap_err(), Error::UnknownOpcode(op));
        let r = RoceRepr {
            bth: BthRepr { opcode: Opcode(op), ..BthRepr::default() },
            ..Default::default()
        };
        assert_eq!(r.info().unwrap_err(), Error::UnknownOpcode(op));
        assert_eq!(r.buffer_len().unwrap_err(), Error::UnknownOpcode(op));
        assert_eq!(r.to_vec(&[]).unwrap_err(), Error::UnknownOpcode(op));
        assert_eq!(Opcode(op).name(), format!("UNKNOWN_{op:#04x}"));
    }
}

#[test]
fn packet_misaligned_payload() {
    // RC SEND_ONLY, 5 payload bytes, PadCnt 0: 5 bytes before the ICRC
    let wire = h("04 00 ffff 00 000001 00 000000 0102030405 00000000");
    assert_eq!(RocePacket::new_checked(&wire[..]).unwrap_err(), Error::Misaligned(5));
    // with PadCnt 3 but only 5+2 bytes before the ICRC
    let wire = h("04 30 ffff 00 000001 00 000000 01020304050000 00000000");
    assert_eq!(RocePacket::new_checked(&wire[..]).unwrap_err(), Error::Misaligned(7));
}

#[test]
fn packet_pad_larger_than_payload() {
    for pad in 1u8..=3 {
        let mut wire = h("04 00 ffff 00 000001 00 000000 00000000");
        wire[1] = pad << 4;
        assert_eq!(
            RocePacket::new_checked(&wire[..]).unwrap_err(),
            Error::PadExceedsPayload { pad, avail: 0 }
        );
    }
    // an ACK with a pad count but nothing after the AETH
    let ack = h("11 10 ffff 00 000001 00 000000 1f000001 00000000");
    assert_eq!(
        RocePacket::new_checked(&ack[..]).unwrap_err(),
        Error::PadExceedsPayload { pad: 1, avail: 0 }
    );
}

#[test]
fn packet_payload_on_opcodes_without_one() {
    let cases = [
        ("11 00 ffff 00 000001 00 000000 1f000001 deadbeef 00000000", "ACKNOWLEDGE"),
        (
            "12 00 ffff 00 000001 00 000000 1f000001 0000000000000000 deadbeef 00000000",
            "ATOMIC_ACKNOWLEDGE",
        ),
        (
            "0c 00 ffff 00 000001 00 000000 0000000000000000 00000000 00000008 deadbeef 00000000",
            "RDMA_READ_REQUEST",
        ),
        (
            "81 00 ffff 00 000001 00 000000 00000000000000000000000000000000 deadbeef 00000000",
            "CNP",
        ),
    ];
    for (hex, name) in cases {
        let wire = h(hex);
        assert_eq!(
            RocePacket::new_checked(&wire[..]).unwrap_err(),
            Error::UnexpectedPayload { opcode: name, len: 4 },
            "{name}"
        );
        // without the 4 extra bytes it is fine
        let mut ok = wire.clone();
        ok.drain(ok.len() - 8..ok.len() - 4);
        assert!(RocePacket::new_checked(&ok[..]).is_ok(), "{name}");
    }
}

fn write_imm_repr() -> RoceRepr {
    RoceRepr::parse_bytes(&write_imm_wire()).unwrap().0
}

#[test]
fn emit_missing_header_is_an_error() {
    let r = write_imm_repr();
    let no_reth = RoceRepr { reth: None, ..r };
    assert_eq!(no_reth.to_vec(b"hello").unwrap_err(), Error::InvalidField("RETH"));
    let no_imm = RoceRepr { immdt: None, ..r };
    assert_eq!(no_imm.to_vec(b"hello").unwrap_err(), Error::InvalidField("ImmDt"));
    let ud = RoceRepr {
        bth: BthRepr { opcode: Opcode::UD_SEND_ONLY, ..BthRepr::default() },
        ..RoceRepr::default()
    };
    assert_eq!(ud.to_vec(&[]).unwrap_err(), Error::InvalidField("DETH"));
    let ack = RoceRepr {
        bth: BthRepr { opcode: Opcode::RC_ATOMIC_ACKNOWLEDGE, ..BthRepr::default() },
        aeth: Some(AethRepr { syndrome: Syndrome::Ack { credit: 31 }, msn: Msn::new(0) }),
        ..RoceRepr::default()
    };
    assert_eq!(ack.to_vec(&[]).unwrap_err(), Error::InvalidField("AtomicAckETH"));
    let inv = RoceRepr {
        bth: BthRepr { opcode: Opcode::RC_SEND_ONLY_WITH_INVALIDATE, ..BthRepr::default() },
        ..RoceRepr::default()
    };
    assert_eq!(inv.to_vec(&[]).unwrap_err(), Error::InvalidField("IETH"));
    let flush = RoceRepr {
        bth: BthRepr { opcode: Opcode::RC_FLUSH, ..BthRepr::default() },
        reth: Some(RethRepr { va: 0, rkey: RKey::new(0), dma_len: 0 }),
        ..RoceRepr::default()
    };
    assert_eq!(flush.to_vec(&[]).unwrap_err(), Error::InvalidField("FETH"));
    let cs = RoceRepr {
        bth: BthRepr { opcode: Opcode::RC_COMPARE_SWAP, ..BthRepr::default() },
        ..RoceRepr::default()
    };
    assert_eq!(cs.to_vec(&[]).unwrap_err(), Error::InvalidField("AtomicETH"));
    let rd = RoceRepr {
        bth: BthRepr { opcode: Opcode(0x40), ..BthRepr::default() },
        ..RoceRepr::default()
    };
    assert_eq!(rd.to_vec(&[]).unwrap_err(), Error::InvalidField("RDETH"));
}

#[test]
fn emit_errors() {
    let r = write_imm_repr();
    assert_eq!(r.buffer_len().unwrap(), 44);
    // buffer too small at every length
    for n in 0..44 {
        let mut b = vec![0u8; n];
        assert_eq!(
            r.emit(b"hello", &mut b).unwrap_err(),
            Error::BufferTooSmall { need: 44, have: n }
        );
    }
    // a longer buffer is fine; only the packet's bytes are written
    let mut b = vec![0xEEu8; 50];
    assert_eq!(r.emit(b"hello", &mut b).unwrap(), 44);
    assert_eq!(&b[..44], &write_imm_wire()[..]);
    assert_eq!(&b[44..], &[0xEE; 6]);
    // payload length must match payload_len
    assert_eq!(
        r.to_vec(b"hell").unwrap_err(),
        Error::InvalidField("payload length differs from payload_len")
    );
    let mut b = vec![0u8; 64];
    assert_eq!(
        r.emit(b"hello!", &mut b).unwrap_err(),
        Error::InvalidField("payload length differs from payload_len")
    );
    // pad count beyond two bits
    let bad_pad = RoceRepr { bth: BthRepr { pad_count: 7, ..r.bth }, ..r };
    assert_eq!(bad_pad.to_vec(b"hello").unwrap_err(), Error::InvalidField("pad_count > 3"));
    // payload + pad not a multiple of 4 (would not parse back)
    let mis = RoceRepr { bth: BthRepr { pad_count: 1, ..r.bth }, ..r };
    assert_eq!(mis.to_vec(b"hello").unwrap_err(), Error::Misaligned(6));
    // a payload (or pad) on an opcode without one
    let ack = RoceRepr {
        bth: BthRepr { opcode: Opcode::RC_ACKNOWLEDGE, ..BthRepr::default() },
        aeth: Some(AethRepr { syndrome: Syndrome::Ack { credit: 31 }, msn: Msn::new(0) }),
        payload_len: 4,
        ..RoceRepr::default()
    };
    assert_eq!(
        ack.to_vec(&[1, 2, 3, 4]).unwrap_err(),
        Error::UnexpectedPayload { opcode: "ACKNOWLEDGE", len: 4 }
    );
    let ack_pad = RoceRepr { bth: BthRepr { pad_count: 2, ..ack.bth }, payload_len: 0, ..ack };
    assert!(matches!(ack_pad.to_vec(&[]).unwrap_err(), Error::UnexpectedPayload { .. }));
    let ack_ok = RoceRepr { payload_len: 0, ..ack };
    assert_eq!(ack_ok.to_vec(&[]).unwrap(), h("11 00 ffff 00 000000 00 000000 1f000000 00000000"));
}

#[test]
fn packet_accessors_absent_headers() {
    let p = RocePacket::new_checked(&write_imm_wire()[..]).unwrap().into_inner().to_vec();
    let p = RocePacket::new_checked(&p[..]).unwrap();
    assert!(p.aeth().is_none());
    assert!(p.deth().is_none());
    assert!(p.rdeth().is_none());
    assert!(p.feth().is_none());
    assert!(p.atomic_eth().is_none());
    assert!(p.atomic_ack_eth().is_none());
    assert!(p.ieth().is_none());
    assert!(p.cnp_reserved().is_none());
    assert_eq!(p.info().headers.offset_of(ExtHeader::Reth), Some(12));
    assert_eq!(p.info().headers.offset_of(ExtHeader::ImmDt), Some(28));
    assert_eq!(p.payload_offset(), 32);
    assert_eq!(p.icrc(), [0; 4]);
}
