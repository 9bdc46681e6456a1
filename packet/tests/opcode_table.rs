//! Invariants of the opcode table, checked over all 256 opcode values
//! against the IBA opcode list (Vol 1 Table 38, IBA 1.5 FLUSH and
//! ATOMIC_WRITE, RoCEv2 CNP).

use roce_packet::opcode::TABLE;
use roce_packet::{ExtHeader, HeaderSet, OpKind, Opcode, Position, Transport};
use std::collections::{BTreeSet, HashSet};

/// The defined opcodes, written out from the spec rather than derived.
fn iba_set() -> BTreeSet<u8> {
    let mut s = BTreeSet::new();
    s.extend(0x00..=0x14u8); // RC
    s.extend([0x16, 0x17, 0x1C, 0x1D]); // RC: SEND with invalidate, FLUSH, ATOMIC_WRITE
    s.extend(0x20..=0x2Bu8); // UC
    s.extend(0x40..=0x55u8); // RD
    s.extend([0x64, 0x65]); // UD
    s.insert(0x81); // CNP
                    // XRC (Annex A14): RC's operations up to FETCH_ADD and the invalidate sends
    s.extend(0xA0..=0xB4u8);
    s.extend([0xB6, 0xB7]);
    s
}

fn all() -> impl Iterator<Item = (Opcode, &'static roce_packet::OpInfo)> {
    (0..=255u8).filter_map(|v| Opcode(v).info().map(|i| (Opcode(v), i)))
}

#[test]
fn known_set_is_exactly_iba() {
    let known: BTreeSet<u8> = (0..=255u8).filter(|v| Opcode(*v).is_known()).collect();
    assert_eq!(known, iba_set());
    assert_eq!(known.len(), 25 + 12 + 22 + 2 + 1 + 23);
    for v in 0..=255u8 {
        assert_eq!(TABLE[v as usize].is_some(), Opcode(v).is_known());
        assert_eq!(Opcode(v).info().is_some(), Opcode(v).is_known());
    }
}

#[test]
fn transport_from_top_bits() {
    for (op, i) in all() {
        let want = match op.0 {
            0x81 => Transport::Cnp,
            v if v >> 5 == 0 => Transport::Rc,
            v if v >> 5 == 1 => Transport::Uc,
            v if v >> 5 == 2 => Transport::Rd,
            v if v >> 5 == 3 => Transport::Ud,
            v if v >> 5 == 5 => Transport::Xrc,
            v => panic!("known opcode {v:#04x} outside the transports"),
        };
        assert_eq!(i.transport, want, "{op:?}");
    }
}

#[test]
fn names_unique_and_prefixed() {
    let mut seen = HashSet::new();
    for (op, i) in all() {
        let n = op.name();
        assert!(seen.insert(n.clone()), "duplicate name {n}");
        assert_eq!(format!("{op}"), n);
        if i.transport == Transport::Cnp {
            assert_eq!(n, "CNP");
            continue;
        }
        let prefix = format!("{}_", i.transport.prefix());
        assert!(n.starts_with(&prefix), "{n}");
        assert_eq!(&n[prefix.len()..], i.name);
        // the short name is the same for every transport carrying the op
        for tr in [Transport::Rc, Transport::Uc, Transport::Rd, Transport::Ud] {
            if let Some(o) = Opcode::from_parts(tr, op.0 & 0x1F) {
                assert_eq!(o.info().unwrap().name, i.name);
            }
        }
    }
    // a few spelled out
    assert_eq!(Opcode(0x0B).name(), "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
    assert_eq!(Opcode(0x2B).name(), "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE");
    assert_eq!(Opcode(0x55).name(), "RD_RESYNC");
    assert_eq!(Opcode(0x64).name(), "UD_SEND_ONLY");
    assert_eq!(Opcode(0x1C).name(), "RC_FLUSH");
    assert_eq!(Opcode(0x1D).name(), "RC_ATOMIC_WRITE");
    assert_eq!(Opcode(0x1E).name(), "UNKNOWN_0x1e");
    assert_eq!(format!("{:?}", Opcode(0x11)), "Opcode(0x11 RC_ACKNOWLEDGE)");
}

#[test]
fn named_constants_match_names() {
    let consts = [
        (Opcode::RC_SEND_FIRST, "RC_SEND_FIRST"),
        (Opcode::RC_SEND_MIDDLE, "RC_SEND_MIDDLE"),
        (Opcode::RC_SEND_LAST, "RC_SEND_LAST"),
        (Opcode::RC_SEND_LAST_WITH_IMMEDIATE, "RC_SEND_LAST_WITH_IMMEDIATE"),
        (Opcode::RC_SEND_ONLY, "RC_SEND_ONLY"),
        (Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, "RC_SEND_ONLY_WITH_IMMEDIATE"),
        (Opcode::RC_RDMA_WRITE_FIRST, "RC_RDMA_WRITE_FIRST"),
        (Opcode::RC_RDMA_WRITE_MIDDLE, "RC_RDMA_WRITE_MIDDLE"),
        (Opcode::RC_RDMA_WRITE_LAST, "RC_RDMA_WRITE_LAST"),
        (Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE"),
        (Opcode::RC_RDMA_WRITE_ONLY, "RC_RDMA_WRITE_ONLY"),
        (Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
        (Opcode::RC_RDMA_READ_REQUEST, "RC_RDMA_READ_REQUEST"),
        (Opcode::RC_RDMA_READ_RESPONSE_FIRST, "RC_RDMA_READ_RESPONSE_FIRST"),
        (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, "RC_RDMA_READ_RESPONSE_MIDDLE"),
        (Opcode::RC_RDMA_READ_RESPONSE_LAST, "RC_RDMA_READ_RESPONSE_LAST"),
        (Opcode::RC_RDMA_READ_RESPONSE_ONLY, "RC_RDMA_READ_RESPONSE_ONLY"),
        (Opcode::RC_ACKNOWLEDGE, "RC_ACKNOWLEDGE"),
        (Opcode::RC_ATOMIC_ACKNOWLEDGE, "RC_ATOMIC_ACKNOWLEDGE"),
        (Opcode::RC_COMPARE_SWAP, "RC_COMPARE_SWAP"),
        (Opcode::RC_FETCH_ADD, "RC_FETCH_ADD"),
        (Opcode::RC_SEND_LAST_WITH_INVALIDATE, "RC_SEND_LAST_WITH_INVALIDATE"),
        (Opcode::RC_SEND_ONLY_WITH_INVALIDATE, "RC_SEND_ONLY_WITH_INVALIDATE"),
        (Opcode::RC_FLUSH, "RC_FLUSH"),
        (Opcode::RC_ATOMIC_WRITE, "RC_ATOMIC_WRITE"),
        (Opcode::UC_SEND_FIRST, "UC_SEND_FIRST"),
        (Opcode::UC_SEND_MIDDLE, "UC_SEND_MIDDLE"),
        (Opcode::UC_SEND_LAST, "UC_SEND_LAST"),
        (Opcode::UC_SEND_LAST_WITH_IMMEDIATE, "UC_SEND_LAST_WITH_IMMEDIATE"),
        (Opcode::UC_SEND_ONLY, "UC_SEND_ONLY"),
        (Opcode::UC_SEND_ONLY_WITH_IMMEDIATE, "UC_SEND_ONLY_WITH_IMMEDIATE"),
        (Opcode::UC_RDMA_WRITE_FIRST, "UC_RDMA_WRITE_FIRST"),
        (Opcode::UC_RDMA_WRITE_MIDDLE, "UC_RDMA_WRITE_MIDDLE"),
        (Opcode::UC_RDMA_WRITE_LAST, "UC_RDMA_WRITE_LAST"),
        (Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE"),
        (Opcode::UC_RDMA_WRITE_ONLY, "UC_RDMA_WRITE_ONLY"),
        (Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE"),
        (Opcode::UD_SEND_ONLY, "UD_SEND_ONLY"),
        (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, "UD_SEND_ONLY_WITH_IMMEDIATE"),
        (Opcode::CNP, "CNP"),
    ];
    for (op, name) in consts {
        assert_eq!(op.name(), name);
    }
}

#[test]
fn header_lengths_and_offsets() {
    for (op, i) in all() {
        let sum: usize = i.headers.iter().map(|h| h.len()).sum();
        assert_eq!(i.headers.len(), sum, "{op}");
        assert_eq!(i.header_len(), 12 + sum, "{op}");
        assert_eq!(i.header_len() % 4, 0, "{op}");
        // offsets strictly increasing in wire order and contiguous
        let mut next = 12;
        for h in i.headers.iter() {
            assert_eq!(i.headers.offset_of(h), Some(next), "{op} {h:?}");
            next += h.len();
        }
        assert_eq!(next, i.header_len());
        // absent headers have no offset
        for h in ExtHeader::ALL {
            assert_eq!(i.headers.contains(h), i.headers.offset_of(h).is_some(), "{op} {h:?}");
        }
        assert_eq!(i.headers.is_empty(), i.headers.iter().next().is_none());
    }
    // the wire order of ALL is the discriminant order
    for w in ExtHeader::ALL.windows(2) {
        assert!((w[0] as u8) < (w[1] as u8));
    }
    let lens: Vec<usize> = ExtHeader::ALL.iter().map(|h| h.len()).collect();
    assert_eq!(lens, [4, 8, 4, 4, 16, 28, 4, 8, 4, 4, 16]);
    // XRC requests carry the XRCETH right after the BTH; responses do not
    for (op, i) in all().filter(|(_, i)| i.transport == Transport::Xrc) {
        assert_eq!(i.headers.contains(ExtHeader::Xrceth), i.is_request(), "{op}");
        if i.is_request() {
            assert_eq!(i.headers.offset_of(ExtHeader::Xrceth), Some(12), "{op}");
        }
        // the same operation as RC's, 0xA0 above it
        let rc = Opcode(op.0 - 0xA0).info().unwrap();
        assert_eq!((rc.name, rc.kind, rc.position), (i.name, i.kind, i.position), "{op}");
    }
    // spot checks of total header lengths (IBA Table 38 / rxe opcode table)
    let expect = [
        (0x04, 12),
        (0x05, 16),
        (0x06, 28),
        (0x0B, 32),
        (0x0C, 28),
        (0x0D, 16),
        (0x0E, 12),
        (0x11, 16),
        (0x12, 24),
        (0x13, 40),
        (0x17, 16),
        (0x1C, 32),
        (0x1D, 28),
        (0x46, 40),
        (0x51, 20),
        (0x52, 28),
        (0x53, 52),
        (0x64, 20),
        (0x65, 24),
        (0x81, 28),
    ];
    for (v, len) in expect {
        assert_eq!(Opcode(v).info().unwrap().header_len(), len, "{}", Opcode(v));
    }
}

#[test]
fn header_set_basics() {
    let s = HeaderSet::EMPTY.with(ExtHeader::ImmDt).with(ExtHeader::Reth);
    assert_eq!(s, HeaderSet::of(ExtHeader::Reth).with(ExtHeader::ImmDt));
    assert_eq!(s.iter().collect::<Vec<_>>(), [ExtHeader::Reth, ExtHeader::ImmDt]);
    assert_eq!(s.len(), 20);
    assert_eq!(s.offset_of(ExtHeader::Reth), Some(12));
    assert_eq!(s.offset_of(ExtHeader::ImmDt), Some(28));
    assert_eq!(s.offset_of(ExtHeader::Aeth), None);
    assert!(HeaderSet::EMPTY.is_empty());
    assert_eq!(HeaderSet::EMPTY.len(), 0);
    assert_eq!(format!("{s:?}"), r#"{"RETH", "ImmDt"}"#);
    assert_eq!(s.bits(), (1 << ExtHeader::Reth as u8) | (1 << ExtHeader::ImmDt as u8));
}

fn has(i: &roce_packet::OpInfo, h: ExtHeader) -> bool {
    i.headers.contains(h)
}

#[test]
fn write_headers() {
    for (op, i) in all().filter(|(_, i)| i.kind == OpKind::Write) {
        // RETH on FIRST and ONLY, not on MIDDLE and LAST
        assert_eq!(has(i, ExtHeader::Reth), i.position.starts(), "{op}");
        assert_eq!(has(i, ExtHeader::ImmDt), i.name.ends_with("_WITH_IMMEDIATE"), "{op}");
        assert!(i.has_payload, "{op}");
    }
    assert!(has(Opcode::RC_ATOMIC_WRITE.info().unwrap(), ExtHeader::Reth));
}

#[test]
fn immediate_and_invalidate() {
    for (op, i) in all() {
        assert_eq!(i.has_imm(), i.name.ends_with("_WITH_IMMEDIATE"), "{op}");
        assert_eq!(has(i, ExtHeader::ImmDt), i.has_imm());
        assert_eq!(i.has_inv(), i.name.ends_with("_WITH_INVALIDATE"), "{op}");
        assert_eq!(has(i, ExtHeader::Ieth), i.has_inv());
        assert!(!(i.has_imm() && i.has_inv()), "{op}");
    }
}

#[test]
fn datagram_headers() {
    for (op, i) in all() {
        match i.transport {
            Transport::Ud => {
                assert!(has(i, ExtHeader::Deth), "{op}");
                assert!(!has(i, ExtHeader::Rdeth), "{op}");
                assert_eq!(i.kind, OpKind::Send);
            }
            Transport::Rd => {
                assert!(has(i, ExtHeader::Rdeth), "{op}");
                // RD requests carry a DETH; responses and ACKs do not
                assert_eq!(has(i, ExtHeader::Deth), i.is_request(), "{op}");
                assert_eq!(i.headers.offset_of(ExtHeader::Rdeth), Some(12));
            }
            _ => {
                assert!(!has(i, ExtHeader::Deth), "{op}");
                assert!(!has(i, ExtHeader::Rdeth), "{op}");
            }
        }
        assert_eq!(has(i, ExtHeader::CnpPad), i.transport == Transport::Cnp, "{op}");
        assert_eq!(has(i, ExtHeader::Feth), i.kind == OpKind::Flush, "{op}");
    }
}

#[test]
fn read_response_and_ack_headers() {
    for (op, i) in all() {
        match i.kind {
            OpKind::ReadResponse => {
                assert_eq!(has(i, ExtHeader::Aeth), i.position != Position::Middle, "{op}");
                assert!(i.has_payload);
            }
            OpKind::Ack | OpKind::AtomicAck => assert!(has(i, ExtHeader::Aeth), "{op}"),
            _ => assert!(!has(i, ExtHeader::Aeth), "{op}"),
        }
        assert_eq!(has(i, ExtHeader::AtomicAckEth), i.kind == OpKind::AtomicAck, "{op}");
        assert_eq!(
            has(i, ExtHeader::AtomicEth),
            matches!(i.kind, OpKind::CompareSwap | OpKind::FetchAdd),
            "{op}"
        );
        assert_eq!(
            has(i, ExtHeader::Reth),
            matches!(i.kind, OpKind::ReadRequest | OpKind::Flush | OpKind::AtomicWrite)
                || (i.kind == OpKind::Write && i.position.starts()),
            "{op}"
        );
    }
}

#[test]
fn payload_rules() {
    for (op, i) in all() {
        let no_payload = matches!(
            i.kind,
            OpKind::Ack
                | OpKind::AtomicAck
                | OpKind::ReadRequest
                | OpKind::CompareSwap
                | OpKind::FetchAdd
                | OpKind::Flush
                | OpKind::Resync
                | OpKind::Cnp
        );
        assert_eq!(i.has_payload, !no_payload, "{op}");
    }
}

#[test]
fn position_matches_name() {
    for (op, i) in all() {
        let n = i.name;
        let want = if n.contains("_FIRST") {
            Position::First
        } else if n.contains("_MIDDLE") {
            Position::Middle
        } else if n.contains("_LAST") {
            Position::Last
        } else {
            // ONLY ops and single-packet ops (requests, ACKs, atomics, CNP)
            Position::Only
        };
        assert_eq!(i.position, want, "{op}");
        assert_eq!(i.position.starts(), matches!(want, Position::First | Position::Only));
        assert_eq!(i.position.ends(), matches!(want, Position::Last | Position::Only));
        // only SENDs, WRITEs and read responses span several packets
        if i.position != Position::Only {
            assert!(matches!(i.kind, OpKind::Send | OpKind::Write | OpKind::ReadResponse), "{op}");
        }
    }
}

#[test]
fn kind_matches_name() {
    for (op, i) in all() {
        let n = i.name;
        let want = match () {
            _ if n.starts_with("SEND_") => OpKind::Send,
            _ if n.starts_with("RDMA_WRITE_") => OpKind::Write,
            _ if n == "RDMA_READ_REQUEST" => OpKind::ReadRequest,
            _ if n.starts_with("RDMA_READ_RESPONSE_") => OpKind::ReadResponse,
            _ if n == "ACKNOWLEDGE" => OpKind::Ack,
            _ if n == "ATOMIC_ACKNOWLEDGE" => OpKind::AtomicAck,
            _ if n == "COMPARE_SWAP" => OpKind::CompareSwap,
            _ if n == "FETCH_ADD" => OpKind::FetchAdd,
            _ if n == "RESYNC" => OpKind::Resync,
            _ if n == "ATOMIC_WRITE" => OpKind::AtomicWrite,
            _ if n == "FLUSH" => OpKind::Flush,
            _ if n == "CNP" => OpKind::Cnp,
            _ => panic!("unexpected name {n}"),
        };
        assert_eq!(i.kind, want, "{op}");
    }
}

#[test]
fn from_parts_round_trips() {
    for (op, i) in all() {
        assert_eq!(Opcode::from_parts(i.transport, op.0 & 0x1F), Some(op), "{op}");
    }
    for tr in [Transport::Rc, Transport::Uc, Transport::Rd, Transport::Ud] {
        for low in 0..=0xFFu8 {
            match Opcode::from_parts(tr, low) {
                Some(op) => {
                    assert_eq!(op.info().unwrap().transport, tr);
                    assert_eq!(op.0 & 0x1F, low & 0x1F);
                }
                None => {
                    let base = match tr {
                        Transport::Rc => 0x00,
                        Transport::Uc => 0x20,
                        Transport::Rd => 0x40,
                        _ => 0x60,
                    };
                    assert!(!Opcode(base | (low & 0x1F)).is_known());
                }
            }
        }
    }
    assert_eq!(Opcode::from_parts(Transport::Rc, 0x15), None); // RESYNC is RD only
    assert_eq!(Opcode::from_parts(Transport::Uc, 0x0C), None); // no reads on UC
    assert_eq!(Opcode::from_parts(Transport::Ud, 0x00), None);
    assert_eq!(Opcode::from_parts(Transport::Cnp, 0), Some(Opcode::CNP));
}

#[test]
fn request_response_partition() {
    for (op, i) in all() {
        if i.transport == Transport::Cnp {
            assert!(!i.is_request() && !i.is_response(), "{op}");
            continue;
        }
        assert_ne!(i.is_request(), i.is_response(), "{op}");
        assert_eq!(
            i.is_response(),
            matches!(i.kind, OpKind::ReadResponse | OpKind::Ack | OpKind::AtomicAck),
            "{op}"
        );
    }
}

#[test]
fn uses_recv_wqe_exactly_sends_and_write_with_immediate() {
    for (op, i) in all() {
        let want = i.name.starts_with("SEND_")
            || (i.name.starts_with("RDMA_WRITE_") && i.name.ends_with("_WITH_IMMEDIATE"));
        assert_eq!(i.uses_recv_wqe(), want, "{op}");
    }
}

#[test]
fn per_transport_operation_sets() {
    let low = |tr: Transport| -> BTreeSet<&'static str> {
        all().filter(|(_, i)| i.transport == tr).map(|(_, i)| i.name).collect()
    };
    let uc = low(Transport::Uc);
    assert!(uc.iter().all(|n| n.starts_with("SEND_") || n.starts_with("RDMA_WRITE_")));
    assert_eq!(uc.len(), 12);
    let ud = low(Transport::Ud);
    assert_eq!(ud, BTreeSet::from(["SEND_ONLY", "SEND_ONLY_WITH_IMMEDIATE"]));
    let rc = low(Transport::Rc);
    assert!(rc.contains("SEND_ONLY_WITH_INVALIDATE") && !rc.contains("RESYNC"));
    let rd = low(Transport::Rd);
    assert!(rd.contains("RESYNC") && !rd.contains("FLUSH") && !rd.contains("ATOMIC_WRITE"));
}
