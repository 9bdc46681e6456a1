//! The fabric traces every fault it applies, with the opcode and PSN.
//!
//! Alone in its own test binary on purpose: `tracing` caches per-callsite
//! interest globally, and other tests of the fabric running in parallel
//! threads without a subscriber raced with this one's scoped subscriber
//! (an intermittent failure seen in the full suite).

use core::net::{IpAddr, Ipv4Addr};
use roce_emulator::sim::packet::PacketBuilder;
use roce_emulator::sim::{Fabric, Filter, Match, NullNode};
use roce_emulator::Datagram;
use roce_packet::{BthRepr, Opcode, Psn, Qpn, RoceRepr};
use std::sync::{Arc, Mutex};

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

/// Collects tracing events as "field=value ..." lines.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>);

struct Line(String);
impl tracing::field::Visit for Line {
    fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = write!(self.0, "{}={:?} ", f.name(), v);
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        let mut l = Line(String::new());
        e.record(&mut l);
        self.0.lock().unwrap().push(l.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn faults_are_traced_with_opcode_and_psn() {
    let (a, b) = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let rec = Recorder::default();
    tracing::subscriber::with_default(rec.clone(), || {
        // (callsites cached as "never" by other test threads: recompute)
        tracing::callsite::rebuild_interest_cache();
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
    let lines = rec.0.lock().unwrap();
    let drop = lines.iter().find(|l| l.contains("sim drop: filter")).expect("drop event");
    assert!(drop.contains("opcode=RC_SEND_ONLY") && drop.contains("psn=0x000002"), "{drop}");
    let flip = lines.iter().find(|l| l.contains("sim corrupt")).expect("corrupt event");
    assert!(flip.contains("psn=0x000003") && flip.contains("bit="), "{flip}");
    assert_eq!(lines.iter().filter(|l| l.contains("sim filter fired")).count(), 2);
}
