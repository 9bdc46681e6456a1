//! A peer cannot make the device's memory grow without bound: a UD flood
//! to a QP with no receives, a requester kept in RNR forever, and a flood of
//! READ requests whose responses nobody ever takes. Each runs long enough
//! that a per-datagram leak would show, and the process's resident memory
//! is compared before and after (one test, so no other test of this binary
//! runs beside it).

use roce_emulator::*;
use roce_packet::{BthRepr, DethRepr, Opcode, Psn, QKey, Qpn, RethRepr, RoceRepr};
use roce_sim::testkit::*;
use std::net::{IpAddr, Ipv4Addr};

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s.split_whitespace().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
    pages * 4
}

fn datagram(r: &RoceRepr, payload: &[u8]) -> Datagram {
    let mut r = *r;
    r.payload_len = payload.len();
    PacketBuilder::new(A, B).datagram(&r, payload)
}

/// Grows by at most `limit_kib` while `f` runs `rounds` times (after a
/// warm-up of the same work).
fn bounded(what: &str, limit_kib: u64, rounds: usize, mut f: impl FnMut(usize)) {
    for k in 0..rounds / 10 {
        f(k);
    }
    let before = rss_kib();
    for k in rounds / 10..rounds {
        f(k);
    }
    let after = rss_kib();
    assert!(
        after <= before + limit_kib,
        "{what}: resident memory grew from {before} KiB to {after} KiB"
    );
}

#[test]
fn no_peer_behaviour_grows_memory_without_bound() {
    // 1. UD flood to a QP with no receive posted: every datagram dropped
    let mut p = Pair::with(Opts { qp_type: QpType::Ud, ..Opts::default() });
    let r = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            dest_qp: p.b.qpn,
            psn: Psn::new(1),
            ..BthRepr::default()
        },
        deth: Some(DethRepr { qkey: QKey::new(UD_QKEY), src_qp: Qpn::new(0x11), resv8: 0 }),
        ..RoceRepr::default()
    };
    let d = datagram(&r, &[7u8; 1024]);
    bounded("UD flood without receives", 4096, 200_000, |_| {
        p.b.hca.handle_datagram(Instant::ZERO, d.clone());
        while p.b.hca.poll_transmit(Instant::ZERO).is_some() {}
    });
    assert_eq!(p.b.counters().ud_dropped, 200_000);

    // 2. RNR forever (rnr_retry 7): the requester retries a SEND to a peer
    // that never posts a receive, for a long virtual time
    let mut p = Pair::with(Opts { rnr_retry: 7, min_rnr_timer: 1, ..Opts::default() });
    p.a.send(1, 0, 64);
    let mut now = Instant::ZERO;
    bounded("RNR forever", 4096, 50_000, |_| {
        now = p.a.hca.poll_timeout().unwrap_or(now).max(now);
        p.a.hca.handle_timeout(now);
        while let Some(d) = p.a.hca.poll_transmit(now) {
            p.b.hca.handle_datagram(now, d);
        }
        while let Some(d) = p.b.hca.poll_transmit(now) {
            p.a.hca.handle_datagram(now, d);
        }
    });
    assert!(p.b.counters().send_rnr_err >= 40_000, "{}", p.b.counters());
    assert!(p.a.poll().is_empty(), "the SEND neither completed nor failed");

    // 3. READ requests far beyond the responder's resources, whose
    // responses are never taken off the wire: the first READ beyond
    // max_dest_rd_atomic is NAKed (invalid request) and the QP stops taking
    // more; the queue of responses owed does not grow with the flood
    let mut p = Pair::new();
    let (va, rkey) = (p.b.addr(0), p.b.mr.rkey);
    let mut psn = Opts::default().a_psn;
    bounded("READs nobody takes", 8192, 100_000, |_| {
        let r = RoceRepr {
            bth: BthRepr {
                opcode: Opcode::RC_RDMA_READ_REQUEST,
                dest_qp: p.b.qpn,
                psn: Psn::new(psn),
                ack_req: true,
                ..BthRepr::default()
            },
            reth: Some(RethRepr { va, rkey, dma_len: 1 << 20 }),
            ..RoceRepr::default()
        };
        psn = (psn + 1024) & 0xFF_FFFF; // a 1 MiB READ takes 1024 PSNs
        p.b.hca.handle_datagram(Instant::ZERO, datagram(&r, &[]));
        // take a few packets now and then, never all
        for _ in 0..2 {
            let _ = p.b.hca.poll_transmit(Instant::ZERO);
        }
    });
    let c = p.b.counters();
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Err), "{c}");
    assert_eq!(c.naks_sent, 1, "{c}");
    assert!(c.bad_state > 90_000, "the rest was dropped at a QP in ERR: {c}");
}
