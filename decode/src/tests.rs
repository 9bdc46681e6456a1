//! Unit tests of the record decoder, the text line and the explainer, on
//! packets built with the packet crate (no capture files).

use crate::explain::Explainer;
use crate::human;
use crate::record::{ipv4_checksum_ok, udp_checksum_ok, Input, Record};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use roce_packet::ext::{AethRepr, AtomicEthRepr, DethRepr, NakCode, RethRepr, RnrTimer, Syndrome};
use roce_packet::frame::{IpMeta, IpUdpHeader, UdpEndpoints};
use roce_packet::{BthRepr, Msn, Opcode, PKey, Psn, QKey, Qpn, RKey, RoceRepr};

pub(crate) const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
pub(crate) const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

pub(crate) fn repr(op: Opcode, qp: u32, psn: u32, payload_len: usize) -> RoceRepr {
    RoceRepr {
        bth: BthRepr {
            opcode: op,
            pad_count: roce_packet::pad_for(payload_len),
            dest_qp: Qpn::new(qp),
            psn: Psn::new(psn),
            pkey: PKey::DEFAULT,
            ..BthRepr::default()
        },
        payload_len,
        ..RoceRepr::default()
    }
}

/// Bytes of a packet from `src` to `dst` with a correct ICRC: (IP+UDP header, UDP payload).
pub(crate) fn wire(src: IpAddr, dst: IpAddr, r: &RoceRepr) -> (IpUdpHeader, Vec<u8>) {
    let payload: Vec<u8> = (0..r.payload_len).map(|i| i as u8).collect();
    let mut ib = r.to_vec(&payload).expect("emit");
    let ep = UdpEndpoints { src, dst, src_port: 49152, dst_port: 4791 };
    let h = IpUdpHeader::build(&ep, &IpMeta::default(), ib.len()).expect("headers");
    h.fill_icrc(&mut ib);
    (h, ib)
}

pub(crate) fn record(frame: u64, time: f64, src: IpAddr, dst: IpAddr, r: &RoceRepr) -> Record {
    let (h, ib) = wire(src, dst, r);
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    Record::decode(&Input::simple(frame, time, h.ip(), udp, &ib))
}

fn reth(va: u64, len: u32) -> Option<RethRepr> {
    Some(RethRepr { va, rkey: RKey::new(0x1234), dma_len: len })
}

pub(crate) fn ack(psn: u32, s: Syndrome, msn: u32) -> RoceRepr {
    RoceRepr {
        aeth: Some(AethRepr { syndrome: s, msn: Msn::new(msn) }),
        ..repr(Opcode::RC_ACKNOWLEDGE, 0x11, psn, 0)
    }
}

#[test]
fn write_first_decodes_and_serialises_like_the_oracle() {
    let r = RoceRepr {
        reth: reth(0x7f00_0000_1000, 4096),
        ..repr(Opcode::RC_RDMA_WRITE_FIRST, 0x11, 0xa3f1, 1024)
    };
    let rec = record(12, 0.000123, A, B, &r);
    assert!(rec.icrc_ok);
    assert!(!rec.is_bad());
    assert!(rec.errors.is_empty());
    assert_eq!(rec.payload_len, Some(1024));
    let j = rec.to_json();
    assert_eq!(j["frame"], 12);
    assert_eq!(j["opcode"], 6);
    assert_eq!(j["opcode_name"], "RC_RDMA_WRITE_FIRST");
    assert_eq!(j["destqp"], 0x11);
    assert_eq!(j["psn"], 0xa3f1);
    assert_eq!(j["reth"]["va"], 0x7f00_0000_1000u64);
    assert_eq!(j["reth"]["rkey"], 0x1234);
    assert_eq!(j["reth"]["dmalen"], 4096);
    assert_eq!(j["udp_len"], 8 + 12 + 16 + 1024 + 4);
    assert_eq!(j["icrc_wire"], j["icrc_expected"]);
    assert_eq!(j["ipv4_csum_ok"], true);
    assert_eq!(j["udp_csum_ok"], Value::Null);
    assert_eq!(
        human::line(&rec),
        "   12  0.000123  10.0.0.1:49152 -> 10.0.0.2:4791  RC_RDMA_WRITE_FIRST  QP=0x000011 \
         PSN=0x00a3f1 A=0 len=1024 RETH va=0x7f0000001000 rkey=0x00001234 dmalen=4096  ICRC ok"
    );
}

use serde_json::Value;

#[test]
fn a_flipped_byte_makes_the_icrc_bad() {
    let r = repr(Opcode::RC_SEND_ONLY, 0x11, 5, 13);
    let (h, mut ib) = wire(A, B, &r);
    ib[20] ^= 1;
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    let rec = Record::decode(&Input::simple(1, 0.0, h.ip(), udp, &ib));
    assert!(!rec.icrc_ok);
    assert!(rec.is_bad());
    assert_ne!(rec.icrc_wire, rec.icrc_expected);
    assert!(human::line(&rec).ends_with(&format!(
        "ICRC BAD (wire {}, expected {})",
        crate::record::hex4(rec.icrc_wire.unwrap_or_default()),
        crate::record::hex4(rec.icrc_expected.unwrap_or_default())
    )));
    let mut ex = Explainer::new();
    assert!(ex.explain(&rec)[0].starts_with("ICRC bad: a receiver drops this packet silently"));
}

#[test]
fn aeth_kinds_in_json_and_text() {
    let rnr = record(1, 0.0, B, A, &ack(7, Syndrome::RnrNak(RnrTimer::new(12)), 0));
    let j = rnr.to_json();
    assert_eq!(j["aeth"]["kind"], "RNR_NAK");
    assert_eq!(j["aeth"]["rnr_timer"], 12);
    assert_eq!(j["aeth"]["rnr_timer_ms"], 0.64);
    assert_eq!(j["aeth"]["syndrome"], 0x2c);
    assert!(human::line(&rnr).contains(" RNR_NAK timer=12 (0.64 ms) msn=0  ICRC ok"));

    let nak = record(2, 0.0, B, A, &ack(7, Syndrome::Nak(NakCode::PsnSequenceError), 4));
    let j = nak.to_json();
    assert_eq!(j["aeth"]["kind"], "NAK");
    assert_eq!(j["aeth"]["nak_code"], 0);
    assert_eq!(j["aeth"]["nak"], "PSN_SEQUENCE_ERROR");
    assert!(human::line(&nak).contains(" NAK PSN_SEQUENCE_ERROR msn=4 "));

    let ok = record(3, 0.0, B, A, &ack(7, Syndrome::Ack { credit: 31 }, 5));
    assert_eq!(ok.to_json()["aeth"]["credit"], 31);
    assert!(human::line(&ok).contains(" ACK msn=5 credit=31 "));
    assert!(!human::line(&ok).contains("len="), "no len= for opcodes without payload");
}

#[test]
fn atomic_ud_and_immediate_headers() {
    let cs = RoceRepr {
        atomic_eth: Some(AtomicEthRepr { va: 0x1000, rkey: RKey::new(9), swap_add: 2, compare: 1 }),
        ..repr(Opcode::RC_COMPARE_SWAP, 0x11, 1, 0)
    };
    let j = record(1, 0.0, A, B, &cs).to_json();
    assert_eq!(j["atomiceth"]["swap_add"], 2);
    assert_eq!(j["atomiceth"]["compare"], 1);
    assert_eq!(j["payload_len"], 0);

    let ud = RoceRepr {
        deth: Some(DethRepr { qkey: QKey::new(0x1111_1111), src_qp: Qpn::new(0x22), resv8: 0 }),
        immdt: Some(0xcafe_f00d),
        ..repr(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 0x21, 8, 32)
    };
    let rec = record(1, 0.0, A, B, &ud);
    let j = rec.to_json();
    assert_eq!(j["deth"]["qkey"], 0x1111_1111u32);
    assert_eq!(j["deth"]["srcqp"], 0x22);
    assert_eq!(j["immdt"], 0xcafe_f00du32);
    let line = human::line(&rec);
    assert!(line.contains("DETH qkey=0x11111111 srcqp=0x000022 imm=0xcafef00d"), "{line}");
    let text = Explainer::new().explain(&rec).join("\n");
    assert!(text.contains("UD SEND of 32 bytes from QP 0x22 to QP 0x21"), "{text}");
    assert!(text.contains("immediate data 0xcafef00d"), "{text}");

    // to the multicast QPN, at a group address
    let mc = RoceRepr {
        deth: Some(DethRepr { qkey: QKey::new(0x0123_4567), src_qp: Qpn::new(0x22), resv8: 0 }),
        ..repr(Opcode::UD_SEND_ONLY, 0xFF_FFFF, 9, 64)
    };
    let group = IpAddr::V4(std::net::Ipv4Addr::new(239, 1, 1, 1));
    let text = Explainer::new().explain(&record(2, 0.0, A, group, &mc)).join("\n");
    assert!(
        text.contains("UD SEND of 64 bytes from QP 0x22 to the multicast group 239.1.1.1 (destination QP 0xffffff, Q_Key 0x1234567)"),
        "{text}"
    );
    assert!(text.contains("every QP attached to the group"), "{text}");
}

#[test]
fn ipv6_endpoints_are_bracketed() {
    let s = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let d = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
    let rec = record(22, 0.5, s, d, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x190, 40));
    assert!(rec.icrc_ok);
    assert_eq!(rec.ip_version, 6);
    assert!(human::line(&rec).contains("[2001:db8::1]:49152 -> [2001:db8::2]:4791"));
    let j = rec.to_json();
    assert_eq!(j["src"], "2001:db8::1");
    assert!(j.get("ipv6_hlim").is_some() && j.get("ip_ttl").is_none());
}

#[test]
fn malformed_payloads_never_panic_and_are_flagged() {
    let r = repr(Opcode::RC_SEND_ONLY, 0x11, 5, 16);
    let (h, ib) = wire(A, B, &r);
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    let mut ex = Explainer::new();
    let mut seed: u32 = 0x1234_5678;
    for len in 0..80usize {
        for _ in 0..20 {
            let mut buf: Vec<u8> = ib.iter().copied().cycle().take(len).collect();
            for b in buf.iter_mut() {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                if seed >> 28 == 0 {
                    *b = (seed >> 16) as u8;
                }
            }
            let rec = Record::decode(&Input::simple(1, 0.0, h.ip(), udp, &buf));
            let _ = human::line(&rec);
            let _ = ex.explain(&rec);
            let _ = rec.to_json().to_string();
            if len < 16 {
                assert_eq!(rec.errors, vec!["too_short_for_bth_and_icrc".to_string()]);
                assert!(rec.bth.is_none());
            }
        }
    }
}

#[test]
fn structural_errors_match_the_oracle_names() {
    // SEND_ONLY with 5 bytes after the BTH: payload+pad not a multiple of 4.
    let r = repr(Opcode::RC_SEND_ONLY, 0x11, 5, 0);
    let (h, ib) = wire(A, B, &r);
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    let mut bad = ib[..12].to_vec();
    bad.extend_from_slice(b"abcde");
    bad.extend_from_slice(&[0, 0, 0, 0]);
    let rec = Record::decode(&Input::simple(1, 0.0, h.ip(), udp, &bad));
    assert_eq!(rec.errors, vec!["payload_plus_pad_not_multiple_of_4 (5)".to_string()]);
    assert_eq!(rec.payload_len, Some(5));
    // Unknown opcode 0x1e: no payload_len, named UNKNOWN_0x1e.
    let mut unk = ib.clone();
    unk[0] = 0x1e;
    let rec = Record::decode(&Input::simple(1, 0.0, h.ip(), udp, &unk));
    assert_eq!(rec.errors, vec!["unknown_opcode".to_string()]);
    assert_eq!(rec.opcode_name.as_deref(), Some("UNKNOWN_0x1e"));
    assert_eq!(rec.payload_len, None);
    assert!(rec.to_json().get("payload_len").is_none());
    // roce-emu's member messages from a device's address to itself are
    // named, not malformed; the same bytes between two addresses are not
    // theirs
    let (hh, mut relay) = wire(A, A, &repr(Opcode::RC_SEND_ONLY, 0x11, 5, 4));
    relay[..4].copy_from_slice(&[0xFC, 1, b'X', b'R']);
    hh.fill_icrc(&mut relay);
    let mut uu = [0u8; 8];
    uu.copy_from_slice(hh.udp());
    let rec = Record::decode(&Input::simple(1, 0.0, hh.ip(), uu, &relay));
    assert_eq!(rec.opcode_name.as_deref(), Some("ROCE_EMU_XRC_EXEC"));
    assert!(rec.errors.is_empty() && rec.icrc_ok, "{:?}", rec.errors);
    let l = crate::human::line(&rec);
    assert!(
        l.contains("ROCE_EMU_XRC_EXEC  to member 0 target QP=") && l.ends_with("ICRC ok"),
        "{l}"
    );
    relay[1] = 2;
    hh.fill_icrc(&mut relay);
    let rec = Record::decode(&Input::simple(1, 0.0, hh.ip(), uu, &relay));
    assert_eq!(rec.opcode_name.as_deref(), Some("ROCE_EMU_XRC_VERDICT"));
    let mut far = ib.clone();
    far[..4].copy_from_slice(&[0xFC, 1, b'X', b'R']);
    let rec = Record::decode(&Input::simple(1, 0.0, h.ip(), udp, &far));
    assert!(rec.errors.iter().any(|e| e == "unknown_opcode"), "{:?}", rec.errors);
    // and explained as such, not as another application's datagram
    let mut ex = Explainer::new();
    for (op, what) in [(0xFC, "XRC request relayed"), (0xFD, "forwarded"), (0xFE, "probe")] {
        let mut m = ib.clone();
        m[0] = op;
        let rec = Record::decode(&Input::simple(1, 0.0, h.ip(), udp, &m));
        let lines = ex.explain(&rec).join(" ");
        assert!(lines.contains("never leaves the host") && lines.contains(what), "{lines}");
    }
}

#[test]
fn checksums() {
    let (h, ib) = wire(A, B, &repr(Opcode::RC_SEND_ONLY, 0x11, 5, 4));
    assert_eq!(ipv4_checksum_ok(h.ip()), Some(true));
    let mut ip = h.ip().to_vec();
    ip[8] ^= 1;
    assert_eq!(ipv4_checksum_ok(&ip), Some(false));
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    // IPv4 with checksum 0: absent.
    assert_eq!(udp_checksum_ok(h.ip(), &udp, &[&ib]), None);
    // A checksum that is certainly wrong.
    udp[6] = 0x12;
    udp[7] = 0x34;
    let ok = udp_checksum_ok(h.ip(), &udp, &[&ib]);
    assert_eq!(ok, Some(false));
}

#[test]
fn ms_text_trims() {
    assert_eq!(human::ms_text(0.64), "0.64");
    assert_eq!(human::ms_text(655.36), "655.36");
    assert_eq!(human::ms_text(0.01), "0.01");
    assert_eq!(human::ms_text(49.1), "49.1");
    assert_eq!(human::ms_text(2.0), "2");
}

/// Explain a sequence of records, returning each one's text.
fn explain_all(recs: &[Record]) -> Vec<String> {
    let mut ex = Explainer::new();
    recs.iter().map(|r| ex.explain(r).join(" | ")).collect()
}

#[test]
fn explain_tracks_a_multi_packet_write_and_its_ack() {
    let first = RoceRepr {
        reth: reth(0x1000, 2100),
        ..repr(Opcode::RC_RDMA_WRITE_FIRST, 0x12, 0x10, 1024)
    };
    let recs = vec![
        record(1, 0.0, A, B, &first),
        record(2, 0.001, A, B, &repr(Opcode::RC_RDMA_WRITE_MIDDLE, 0x12, 0x11, 1024)),
        record(
            3,
            0.002,
            A,
            B,
            &RoceRepr {
                bth: BthRepr {
                    ack_req: true,
                    ..repr(Opcode::RC_RDMA_WRITE_LAST, 0x12, 0x12, 52).bth
                },
                ..repr(Opcode::RC_RDMA_WRITE_LAST, 0x12, 0x12, 52)
            },
        ),
        record(4, 0.003, B, A, &ack(0x12, Syndrome::Ack { credit: 31 }, 1)),
        // The requester did not get that ACK in time and resends the LAST.
        record(5, 0.100, A, B, &repr(Opcode::RC_RDMA_WRITE_LAST, 0x12, 0x12, 52)),
        record(6, 0.101, B, A, &ack(0x12, Syndrome::Ack { credit: 31 }, 1)),
    ];
    let t = explain_all(&recs);
    assert!(t[0].starts_with("first packet of an RDMA WRITE of 2100 bytes to va 0x1000 (rkey 0x1234): 3 packets of 1024 bytes"), "{}", t[0]);
    assert_eq!(t[1], "RDMA WRITE packet 2 of 3");
    assert_eq!(
        t[2],
        "last packet of the RDMA WRITE: 2100 bytes in 3 packets (AckReq: an ACK is requested)"
    );
    assert_eq!(
        t[3],
        "ACK covers everything up to PSN 0x12 (MSN 1): the requester can complete those WQEs \
         (completes the request that started in frame 1); credit 31 = no credit information"
    );
    assert!(t[4].starts_with("duplicate of PSN 0x12 (retransmission; copy 2, first sent in frame 3): an ACK covering it was already seen in frame 4"), "{}", t[4]);
    assert!(
        t[5].starts_with("duplicate ACK: PSN 0x12 was already acknowledged (frame 4)"),
        "{}",
        t[5]
    );
}

#[test]
fn explain_gap_nak_and_go_back_n() {
    let recs = vec![
        record(1, 0.0, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x20, 8)),
        // PSN 0x21 is lost; 0x22 arrives.
        record(2, 0.001, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x22, 8)),
        record(3, 0.002, B, A, &ack(0x21, Syndrome::Nak(NakCode::PsnSequenceError), 1)),
        record(4, 0.003, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x21, 8)),
        record(5, 0.004, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x22, 8)),
    ];
    let t = explain_all(&recs);
    assert!(
        t[1].starts_with("PSN jumps from the expected 0x21 to 0x22: 1 packet missing"),
        "{}",
        t[1]
    );
    assert!(t[2].starts_with("NAK PSN_SEQUENCE_ERROR: the responder expected PSN 0x21 but got a later one; everything before 0x21 is acknowledged (MSN 1)"), "{}", t[2]);
    assert!(t[3].starts_with("retransmission of PSN 0x21 (first copy not in this capture): go-back-N resend after the PSN_SEQUENCE_ERROR NAK for 0x21 in frame 3"), "{}", t[3]);
    assert!(
        t[4].starts_with("retransmission of PSN 0x22 (copy 2, first sent in frame 2): go-back-N"),
        "{}",
        t[4]
    );
}

#[test]
fn explain_bad_packets_do_not_advance_state() {
    let good = repr(Opcode::RC_SEND_ONLY, 0x12, 0x30, 8);
    let (h, mut ib) = wire(A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x31, 8));
    ib[13] ^= 0xff;
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    let recs = vec![
        record(1, 0.0, A, B, &good),
        Record::decode(&Input::simple(2, 0.001, h.ip(), udp, &ib)),
        record(3, 0.002, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x32, 8)),
    ];
    let t = explain_all(&recs);
    assert!(t[1].starts_with("ICRC bad"), "{}", t[1]);
    // The receiver dropped 0x31, so 0x32 is out of sequence.
    assert!(t[2].starts_with("PSN jumps from the expected 0x31 to 0x32"), "{}", t[2]);
}

#[test]
fn explain_pairs_responses_with_the_right_qp() {
    // Two RC connections between the same hosts: requests to QPs 0x12 and
    // 0x13, responses to the requesters' QPs 0x11 and 0x14.
    let read = |qp, psn, len| RoceRepr {
        reth: reth(0x2000, len),
        ..repr(Opcode::RC_RDMA_READ_REQUEST, qp, psn, 0)
    };
    let resp = |qp, psn, n, msn| RoceRepr {
        aeth: Some(AethRepr { syndrome: Syndrome::Ack { credit: 31 }, msn: Msn::new(msn) }),
        ..repr(Opcode::RC_RDMA_READ_RESPONSE_ONLY, qp, psn, n)
    };
    let recs = vec![
        record(1, 0.0, A, B, &read(0x12, 0x100, 64)),
        record(2, 0.0, A, B, &read(0x13, 0x900, 128)),
        record(3, 0.0, B, A, &resp(0x14, 0x900, 128, 1)),
        record(4, 0.0, B, A, &resp(0x11, 0x100, 64, 1)),
    ];
    let t = explain_all(&recs);
    assert!(
        t[2].starts_with(
            "READ RESPONSE ONLY 1 of 1 for the READ at PSN 0x900 (128 bytes requested, frame 2)"
        ),
        "{}",
        t[2]
    );
    assert!(
        t[3].starts_with(
            "READ RESPONSE ONLY 1 of 1 for the READ at PSN 0x100 (64 bytes requested, frame 1)"
        ),
        "{}",
        t[3]
    );
}

#[test]
fn explain_rnr_nak_and_retry() {
    let recs = vec![
        record(1, 0.0, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x40, 8)),
        record(2, 0.001, B, A, &ack(0x40, Syndrome::RnrNak(RnrTimer::new(12)), 0)),
        record(3, 0.0025, A, B, &repr(Opcode::RC_SEND_ONLY, 0x12, 0x40, 8)),
    ];
    let t = explain_all(&recs);
    assert_eq!(
        t[1],
        "RNR NAK: the responder had no receive WQE posted for the request at PSN 0x40; the \
         requester waits 0.64 ms (timer code 12) and retries PSN 0x40"
    );
    assert!(t[2].starts_with("retry of PSN 0x40 after the RNR NAK in frame 2 (copy 2, first sent in frame 1): it came 1.5 ms after the NAK, which asked for 0.64 ms"), "{}", t[2]);
}

/// XRC is RC between an initiator and a target QP: its ACKs answer its
/// requests (AckReq, the request an ACK completes), as RC's do.
#[test]
fn explain_pairs_xrc_acks_with_their_requests() {
    let send = |psn: u32, srq: u32| RoceRepr {
        bth: BthRepr { ack_req: true, ..repr(Opcode(0xA4), 0x11, psn, 100).bth },
        xrceth: Some(srq),
        ..repr(Opcode(0xA4), 0x11, psn, 100)
    };
    let xack = |psn: u32, s: Syndrome, msn: u32| RoceRepr {
        bth: BthRepr { opcode: Opcode(0xB1), ..ack(psn, s, msn).bth },
        ..ack(psn, s, msn)
    };
    let nak = Syndrome::Nak(NakCode::InvalidRequest);
    let recs = vec![
        record(1, 0.0, A, B, &send(0x100, 9)),
        record(2, 0.001, B, A, &xack(0x100, Syndrome::Ack { credit: 31 }, 1)),
        record(3, 0.002, A, B, &send(0x101, 0xe)),
        record(4, 0.003, B, A, &xack(0x101, nak, 1)),
    ];
    let t = explain_all(&recs);
    assert!(
        t[0].contains("XRC SRQ 0x9") && t[0].ends_with("(AckReq: an ACK is requested)"),
        "{}",
        t[0]
    );
    assert!(t[1].contains("(completes the request that started in frame 1)"), "{}", t[1]);
    assert!(!t[1].contains("not in this capture"), "{}", t[1]);
    assert!(t[3].starts_with("NAK INVALID_REQUEST for PSN 0x101"), "{}", t[3]);
    assert!(!t[3].contains("not in this capture"), "{}", t[3]);
}

/// Like [`record`], with the IPv4 TOS byte `tos` (DSCP << 2 | ECN).
pub(crate) fn record_tos(
    frame: u64,
    time: f64,
    src: IpAddr,
    dst: IpAddr,
    r: &RoceRepr,
    tos: u8,
) -> Record {
    let payload: Vec<u8> = (0..r.payload_len).map(|i| i as u8).collect();
    let mut ib = r.to_vec(&payload).expect("emit");
    let ep = UdpEndpoints { src, dst, src_port: 49152, dst_port: 4791 };
    let meta = IpMeta { tos, ..IpMeta::default() };
    let h = IpUdpHeader::build(&ep, &meta, ib.len()).expect("headers");
    h.fill_icrc(&mut ib);
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    Record::decode(&Input::simple(frame, time, h.ip(), udp, &ib))
}

/// A CNP to QP `qp` as Annex A17.9.3 has it (BECN set, P_Key 0xffff, A=0,
/// 16 zero reserved bytes), with PSN `psn`.
pub(crate) fn cnp(qp: u32, psn: u32) -> RoceRepr {
    let mut r = repr(Opcode::CNP, qp, psn, 0);
    r.bth.becn = true;
    r.cnp = Some([0; 16]);
    r
}

/// An RC SEND_ONLY with AckReq to QP 0x22 at B from A.
pub(crate) fn send_a(psn: u32) -> RoceRepr {
    let mut r = repr(Opcode::RC_SEND_ONLY, 0x22, psn, 8);
    r.bth.ack_req = true;
    r
}

/// DSCP 26 (what RoCE traffic classes often use) with each ECN codepoint.
pub(crate) const TOS_ECT0: u8 = (26 << 2) | 0b10;
pub(crate) const TOS_CE: u8 = (26 << 2) | 0b11;

#[test]
fn ecn_field_is_decoded_and_only_ce_shows_in_the_line() {
    use crate::record::Ecn;
    let names: Vec<&str> = (0u8..4).map(|t| Ecn::from_tos(0x68 | t).name()).collect();
    assert_eq!(names, ["Not-ECT", "ECT(1)", "ECT(0)", "CE"]);
    let plain = record(1, 0.0, A, B, &send_a(7));
    let ect = record_tos(1, 0.0, A, B, &send_a(7), TOS_ECT0);
    let ce = record_tos(1, 0.0, A, B, &send_a(7), TOS_CE);
    assert_eq!((plain.ecn, ect.ecn, ce.ecn), (Ecn::NotEct, Ecn::Ect0, Ecn::Ce));
    // the TOS byte is masked out of the ICRC: the mark leaves it valid
    assert!(ce.icrc_ok && !ce.is_bad());
    let line = |r: &Record| human::line(r);
    assert_eq!(
        line(&plain),
        "    1  0.000000  10.0.0.1:49152 -> 10.0.0.2:4791  RC_SEND_ONLY  QP=0x000022 \
         PSN=0x000007 A=1 len=8  ICRC ok"
    );
    assert_eq!(line(&ect), line(&plain), "ECT is not in the text line");
    assert_eq!(
        line(&ce),
        "    1  0.000000  10.0.0.1:49152 -> 10.0.0.2:4791  RC_SEND_ONLY  QP=0x000022 \
         PSN=0x000007 A=1 ECN=CE len=8  ICRC ok"
    );
    // JSON: "ecn" after the IP keys, absent for Not-ECT (the oracle's record)
    assert!(plain.to_json().get("ecn").is_none());
    assert_eq!(ect.to_json()["ecn"], "ECT(0)");
    let j = ce.to_json();
    assert_eq!(j["ecn"], "CE");
    assert_eq!(j["ip_tos"], TOS_CE);
    let keys: Vec<&str> = j.as_object().expect("object").keys().map(|k| k.as_str()).collect();
    let at = keys.iter().position(|k| *k == "ecn").expect("ecn key");
    assert_eq!(keys[at - 1], "ip_ttl");
    // IPv6: from the traffic class
    let s6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1));
    let d6 = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2));
    let ce6 = record_tos(1, 0.0, s6, d6, &send_a(7), TOS_CE);
    assert_eq!(ce6.ecn, Ecn::Ce);
    assert!(ce6.icrc_ok && human::line(&ce6).contains(" A=1 ECN=CE len=8 "));
    assert_eq!(ce6.to_json()["ecn"], "CE");
}

/// (a) a CE-marked RC SEND, (b) the CNP that answers it, (c) a CNP with a
/// nonzero PSN: the lines, the explanations and the finding.
#[test]
fn ce_mark_cnp_and_malformed_cnp_are_explained() {
    let recs = vec![
        record_tos(1, 0.0, A, B, &send_a(7), TOS_ECT0),
        record_tos(2, 0.000005, B, A, &ack(7, Syndrome::Ack { credit: 31 }, 1), TOS_ECT0),
        record_tos(3, 0.000010, A, B, &send_a(8), TOS_CE),
        record(4, 0.000012, B, A, &cnp(0x11, 0)),
        record(5, 0.000070, B, A, &cnp(0x11, 5)),
    ];
    assert_eq!(
        human::line(&recs[2]),
        "    3  0.000010  10.0.0.1:49152 -> 10.0.0.2:4791  RC_SEND_ONLY  QP=0x000022 \
         PSN=0x000008 A=1 ECN=CE len=8  ICRC ok"
    );
    assert_eq!(
        human::line(&recs[3]),
        "    4  0.000012  10.0.0.2:49152 -> 10.0.0.1:4791  CNP  QP=0x000011 PSN=0x000000 A=0 \
         BECN  congestion notification to qp=0x11  ICRC ok"
    );
    assert_eq!(
        human::line(&recs[4]),
        "    5  0.000070  10.0.0.2:49152 -> 10.0.0.1:4791  CNP  QP=0x000011 PSN=0x000005 A=0 \
         BECN  congestion notification to qp=0x11 (malformed CNP: PSN 0x5 not 0)  ICRC ok"
    );
    // a malformed CNP is a finding, not an error: the packet is not bad
    assert!(!recs[4].is_bad());
    assert!(recs[4].to_json().get("warnings").is_none());

    let mut ex = Explainer::new();
    let t: Vec<Vec<String>> = recs.iter().map(|r| ex.explain(r)).collect();
    assert_eq!(
        t[0].last().map(String::as_str),
        Some(
            "IP ECN ECT(0): sent ECN-capable, so a congested switch marks it CE (Congestion \
             Experienced) instead of dropping it (said once: the packets that follow are \
             ECN-capable too unless marked)"
        )
    );
    // (a): the requester's QP is known from the ACK of frame 2
    assert_eq!(t[2].len(), 2, "{:?}", t[2]);
    assert!(t[2][0].starts_with("a whole SEND of 8 bytes in one packet"), "{:?}", t[2]);
    assert_eq!(
        t[2][1],
        "IP ECN CE: a switch on the path found its queue above its ECN threshold and marked \
         this packet Congestion Experienced instead of dropping it; the receiving device \
         answers with a CNP to the sending QP (0x11), at most one per QP per interval"
    );
    // (b)
    assert_eq!(
        t[3],
        [
            "Congestion Notification Packet (Annex A17.9.3): tells QP 0x11 to slow down; its \
             reaction point (DCQCN) cuts the QP's rate; never acknowledged; BECN set; PSN and \
             the 16 reserved bytes are zero",
            "it answers the CE mark on frame 3, a packet QP 0x11 sent",
        ]
    );
    // (c): the finding first, as for the other findings
    assert_eq!(
        t[4][0],
        "malformed CNP (PSN 0x5 not 0): Annex A17.9.3's CNP has BECN set, AckReq clear, PSN 0 \
         and 16 zero reserved bytes; a reaction point may ignore this one"
    );
    assert!(t[4][1].ends_with("cuts the QP's rate; never acknowledged"), "{:?}", t[4]);
    // a CNP is neither a request nor a response: no stream, no RTT
    let mut ex = Explainer::new();
    for r in &recs {
        let (_, f) = ex.analyze(r);
        if r.is_cnp() {
            assert!(f.stream.is_none() && !f.request && !f.response, "{f:?}");
        }
    }
}

#[test]
fn cnp_findings_and_a_cnp_before_the_requester_qp_is_known() {
    // BECN clear, AckReq set, reserved bytes not zero
    let mut odd = cnp(0x11, 0);
    odd.bth.becn = false;
    odd.bth.ack_req = true;
    odd.cnp = Some([1; 16]);
    let rec = record(1, 0.0, B, A, &odd);
    assert_eq!(
        rec.cnp_problems(),
        ["BECN not set", "AckReq set", "reserved bytes not 0"].map(String::from)
    );
    assert!(human::line(&rec).contains(
        "CNP  QP=0x000011 PSN=0x000000 A=1  congestion notification to qp=0x11 (malformed CNP: \
         BECN not set, AckReq set, reserved bytes not 0)  ICRC ok"
    ));
    assert!(record(1, 0.0, B, A, &repr(Opcode::RC_SEND_ONLY, 1, 1, 0)).cnp_problems().is_empty());
    // the CE mark comes before any response shows the requester's QP
    let mut ex = Explainer::new();
    let ce = ex.explain(&record_tos(1, 0.0, A, B, &send_a(7), TOS_CE));
    assert!(
        ce[1].ends_with("answers with a CNP to the sending QP, at most one per QP per interval")
    );
    let t = ex.explain(&record(2, 0.00001, B, A, &cnp(0x11, 0)));
    assert_eq!(
        t[1],
        "it probably answers the CE mark on frame 1, the last CE-marked packet from 10.0.0.1 to \
         10.0.0.2 (the capture has not shown yet which QP sent it)"
    );
    // a CE-marked CNP is not answered; a CNP the other way answers nothing
    let t = ex.explain(&record_tos(3, 0.0001, A, B, &cnp(0x22, 0), TOS_CE));
    assert_eq!(t.len(), 2, "{t:?}");
    assert!(t[1].ends_with("a CNP is never answered with a CNP"), "{t:?}");
}

/// The brief's example CNP, byte for byte, decoded from its wire bytes.
#[test]
fn the_wire_bytes_of_a_cnp() {
    let mut ib = vec![0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x00, 0xd2, 0, 0, 0, 0];
    ib.extend_from_slice(&[0; 16 + 4]);
    let (h, ours) = wire(B, A, &cnp(0xd2, 0));
    h.fill_icrc(&mut ib);
    assert_eq!(ib, ours, "the packet crate emits the same CNP");
    let mut udp = [0u8; 8];
    udp.copy_from_slice(h.udp());
    let rec = Record::decode(&Input::simple(9, 0.0, h.ip(), udp, &ib));
    assert!(rec.is_cnp() && rec.icrc_ok && rec.errors.is_empty());
    assert!(human::line(&rec).ends_with(
        "CNP  QP=0x0000d2 PSN=0x000000 A=0 BECN  congestion notification to qp=0xd2  ICRC ok"
    ));
    // a truncated CNP is malformed (dropped), never a panic
    let rec = Record::decode(&Input::simple(9, 0.0, h.ip(), udp, &ib[..20]));
    assert_eq!(rec.errors, ["truncated_CNP"]);
    assert!(Explainer::new().explain(&rec)[0].starts_with("malformed (truncated_CNP)"));
}

/// The capture of [`ce_mark_cnp_and_malformed_cnp_are_explained`] as a
/// pcap file in memory (Ethernet frames, 10 us apart from t = 1 s).
fn congestion_pcap() -> Vec<u8> {
    use roce_packet::frame::{ethernet_frame, LinkType};
    let frames: [(IpAddr, IpAddr, RoceRepr, u8); 5] = [
        (A, B, send_a(7), TOS_ECT0),
        (B, A, ack(7, Syndrome::Ack { credit: 31 }, 1), TOS_ECT0),
        (A, B, send_a(8), TOS_CE),
        (B, A, cnp(0x11, 0), 0),
        (B, A, cnp(0x11, 5), 0),
    ];
    let mut w = roce_pcap::PcapWriter::new(Vec::new(), LinkType::Ethernet).expect("pcap");
    for (i, (src, dst, r, tos)) in frames.iter().enumerate() {
        let payload: Vec<u8> = (0..r.payload_len).map(|i| i as u8).collect();
        let mut ib = r.to_vec(&payload).expect("emit");
        let ep = UdpEndpoints { src: *src, dst: *dst, src_port: 49152, dst_port: 4791 };
        let meta = IpMeta { tos: *tos, ..IpMeta::default() };
        roce_packet::frame::fill_icrc(&ep, &meta, &mut ib).expect("icrc");
        let f = ethernet_frame([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], &ep, &meta, &ib);
        let ts = std::time::Duration::from_micros(1_000_000 + 10 * i as u64);
        w.write_frame(ts, &f.expect("frame")).expect("write");
    }
    w.into_inner().expect("flush")
}

/// What `roce decode` prints for [`congestion_pcap`] with `style`.
fn decode_congestion(style: &crate::Style) -> String {
    let frames = roce_pcap::read_capture(&congestion_pcap()).expect("read back");
    let mut out = Vec::new();
    let sum = crate::decode_frames(&frames, 4791, style, &mut out).expect("decode");
    assert_eq!((sum.frames, sum.packets, sum.bad), (5, 5, 0));
    String::from_utf8(out).expect("utf-8")
}

/// `roce decode --explain`, `--stats` (text and JSON) and `--ladder` of a
/// CE mark and two CNPs, from a pcap file's bytes.
#[test]
fn congestion_capture_end_to_end() {
    let text = decode_congestion(&crate::Style { explain: true, ..Default::default() });
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 14, "{text}");
    assert_eq!(
        lines[1..3],
        [
            "        a whole SEND of 8 bytes in one packet: takes one receive WQE at the responder \
             (AckReq: an ACK is requested)",
            "        IP ECN ECT(0): sent ECN-capable, so a congested switch marks it CE (Congestion \
             Experienced) instead of dropping it (said once: the packets that follow are \
             ECN-capable too unless marked)",
        ]
    );
    assert_eq!(
        lines[5..],
        [
            "    3  0.000020  10.0.0.1:49152 -> 10.0.0.2:4791  RC_SEND_ONLY  QP=0x000022 \
             PSN=0x000008 A=1 ECN=CE len=8  ICRC ok",
            "        a whole SEND of 8 bytes in one packet: takes one receive WQE at the responder \
             (AckReq: an ACK is requested)",
            "        IP ECN CE: a switch on the path found its queue above its ECN threshold and \
             marked this packet Congestion Experienced instead of dropping it; the receiving \
             device answers with a CNP to the sending QP (0x11), at most one per QP per interval",
            "    4  0.000030  10.0.0.2:49152 -> 10.0.0.1:4791  CNP  QP=0x000011 PSN=0x000000 A=0 \
             BECN  congestion notification to qp=0x11  ICRC ok",
            "        Congestion Notification Packet (Annex A17.9.3): tells QP 0x11 to slow down; \
             its reaction point (DCQCN) cuts the QP's rate; never acknowledged; BECN set; PSN \
             and the 16 reserved bytes are zero",
            "        it answers the CE mark on frame 3, a packet QP 0x11 sent",
            "    5  0.000040  10.0.0.2:49152 -> 10.0.0.1:4791  CNP  QP=0x000011 PSN=0x000005 A=0 \
             BECN  congestion notification to qp=0x11 (malformed CNP: PSN 0x5 not 0)  ICRC ok",
            "        malformed CNP (PSN 0x5 not 0): Annex A17.9.3's CNP has BECN set, AckReq clear, \
             PSN 0 and 16 zero reserved bytes; a reaction point may ignore this one",
            "        Congestion Notification Packet (Annex A17.9.3): tells QP 0x11 to slow down; \
             its reaction point (DCQCN) cuts the QP's rate; never acknowledged",
            // the CE mark of frame 3 was answered by frame 4
        ]
    );

    let stats = decode_congestion(&crate::Style { stats: true, ..Default::default() });
    let head: Vec<&str> = stats.lines().take(4).collect();
    assert_eq!(
        head,
        [
            "10.0.0.1 QP 0x11 <-> 10.0.0.2 QP 0x22: 5 packets, frames 1-5, 0.000000-0.000040 s",
            "  2 packets outside any request/response stream (UD, CNP, or unmatched responses)",
            "  congestion: 1 packet marked CE (ECN), 2 CNPs to QP 0x11",
            "  RC requests 10.0.0.1 QP 0x11 -> 10.0.0.2 QP 0x22",
        ]
    );
    let json = decode_congestion(&crate::Style { stats: true, json: true, ..Default::default() });
    let v: Value = serde_json::from_str(json.trim()).expect("one object");
    assert_eq!(v["ce_marked"], 1);
    assert_eq!(v["cnps"], serde_json::json!([{"qpn": 0x11, "count": 2}]));

    let json = decode_congestion(&crate::Style { json: true, ..Default::default() });
    let ecn: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json")["ecn"].clone())
        .collect();
    let want = [Value::from("ECT(0)"), "ECT(0)".into(), "CE".into(), Value::Null, Value::Null];
    assert_eq!(ecn, want);

    let lad = decode_congestion(&crate::Style { ladder: true, ..Default::default() });
    assert!(lad.contains("│── SEND_ONLY psn=0x8 len=8 ──►│  [ECN CE]"), "{lad}");
    assert!(
        lad.contains("│◄─ CNP qp=0x11 ───────────────│  [malformed CNP: PSN 0x5 not 0]"),
        "{lad}"
    );
    assert_eq!(lad.matches("CNP qp=0x11").count(), 2, "{lad}");
}
