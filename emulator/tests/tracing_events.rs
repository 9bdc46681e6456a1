//! Decision points emit `tracing` events with their reason as a field.

mod common;
use common::*;
use roce_emulator::*;
use roce_packet::Psn;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Line(String);
impl Visit for Line {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?} ", f.name(), v);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, e: &Event<'_>) {
        let mut l = Line(String::new());
        e.record(&mut l);
        self.0.lock().unwrap().push(l.0);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn drops_naks_retries_and_state_changes_are_traced() {
    let cap = Capture::default();
    let lines = cap.0.clone();
    tracing::subscriber::with_default(cap, || {
        // (callsites cached as "never" by other test threads: recompute)
        tracing::callsite::rebuild_interest_cache();
        let mut p = Pair::with(Opts { retry_cnt: 0, timeout: 5, ..Opts::default() });
        p.b.post_recv(1, 0, 8192);
        p.a.send(1, 0, 4 * 1024);
        let mut n = 0;
        p.run_with(Instant::from_millis(100), |_, s| {
            n += 1;
            match n {
                // lose the middle packet: one NAK, one retry... with retry_cnt 0
                // the NAK itself exhausts the retries
                2 if s.psn == Psn::new(0x101) => Action::Drop,
                _ => Action::Deliver,
            }
        });
        assert_eq!(p.a.poll()[0].status, WcStatus::RetryExcErr);
    });
    let lines = lines.lock().unwrap();
    let all = lines.join("\n");
    assert!(
        lines.iter().any(|l| l.contains("NAK sent") && l.contains("PSN_SEQUENCE_ERROR")),
        "{all}"
    );
    assert!(lines.iter().any(|l| l.contains("NAK received")), "{all}");
    assert!(lines.iter().any(|l| l.contains("retry count exceeded")), "{all}");
    assert!(lines.iter().any(|l| l.contains("QP state change") && l.contains("ERR")), "{all}");
    assert!(lines.iter().any(|l| l.contains("out of sequence after NAK")), "{all}");
}
