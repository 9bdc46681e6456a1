//! Decision points emit `tracing` events with their reason as a field.

#[allow(dead_code)]
use crate::trace;
use roce_emulator::*;
use roce_packet::Psn;
use roce_sim::testkit::*;
use trace::capture;

#[test]
fn drops_naks_retries_and_state_changes_are_traced() {
    let evs = capture(|| {
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
    let lines: Vec<&str> = evs.iter().map(|e| e.line.as_str()).collect();
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
