//! The fabric traces every fault it applies, with the opcode and PSN.
//!
//! Captured with the emulator tests' one global routing subscriber
//! (`emulator/tests/common/trace.rs`): `tracing` caches per-callsite
//! interest globally, and a scoped subscriber raced with test threads that
//! had none.

#[allow(dead_code)]
#[path = "../../emulator/tests/common/trace.rs"]
mod trace;
use core::net::{IpAddr, Ipv4Addr};
use roce_emulator::Datagram;
use roce_packet::{BthRepr, Opcode, Psn, Qpn, RoceRepr};
use roce_sim::packet::PacketBuilder;
use roce_sim::{Fabric, Filter, Match, NullNode};
use trace::capture;

fn send_only(src: IpAddr, dst: IpAddr, psn: u32) -> Datagram {
    let payload = psn.to_be_bytes();
    let repr = RoceRepr {
        bth: BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            dest_qp: Qpn::new(0x11),
            psn: Psn::new(psn),
            ..BthRepr::default()
        },
        payload_len: payload.len(),
        ..RoceRepr::default()
    };
    PacketBuilder::new(src, dst).src_port(0xC011).datagram(&repr, &payload)
}

#[test]
fn faults_are_traced_with_opcode_and_psn() {
    let (a, b) = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let evs = capture(|| {
        let mut f = Fabric::new(1);
        let from = f.add_node(a, NullNode);
        f.add_node(b, NullNode);
        f.add_filter(Filter::matching(Match::Psn(Psn::new(2))).drop());
        f.add_filter(Filter::matching(Match::Psn(Psn::new(3))).corrupt());
        for psn in 0..5 {
            f.inject(from, send_only(a, b, psn));
        }
        assert!(f.run_until_idle(100));
        assert_eq!(f.stats().delivered, 4);
    });
    let lines: Vec<&str> = evs.iter().map(|e| e.line.as_str()).collect();
    let drop = lines.iter().find(|l| l.contains("sim drop: filter")).expect("drop event");
    assert!(drop.contains("opcode=RC_SEND_ONLY") && drop.contains("psn=0x000002"), "{drop}");
    let flip = lines.iter().find(|l| l.contains("sim corrupt")).expect("corrupt event");
    assert!(flip.contains("psn=0x000003") && flip.contains("bit="), "{flip}");
    assert_eq!(lines.iter().filter(|l| l.contains("sim filter fired")).count(), 2);
}
