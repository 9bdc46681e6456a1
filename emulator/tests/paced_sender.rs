//! The transport timer runs from the last request packet sent: a QP whose
//! packets leave slowly (interleaved with thousands of other QPs' packets
//! on a busy device) is not timed out while its window is still on its way.
//! Timing out from the first packet made `roce perf write -q 1024` (64 MiB
//! in flight) retransmit every window before it arrived, for ever.

use roce_emulator::*;
use roce_sim::testkit::*;
use std::time::Duration;

#[test]
fn a_slowly_sent_window_is_not_timed_out() {
    // timeout code 10: 4.096 us * 2^10 = 4.2 ms; 40 packets 1 ms apart
    let mut p = Pair::with(Opts { timeout: 10, ..Opts::default() });
    let data = pattern(40 * 1024, 4);
    p.a.write_mem(0, &data);
    let wr = p.one_sided(1, WrOpcode::RdmaWrite, 0, data.len() as u32, 0);
    p.a.post(wr);
    let mut now = p.now;
    let mut sent = 0;
    for _ in 0..200 {
        now += Duration::from_millis(1);
        for h in [&mut p.a.hca, &mut p.b.hca] {
            if h.poll_timeout().is_some_and(|t| t <= now) {
                h.handle_timeout(now);
            }
        }
        // one request packet per millisecond
        if let Some(d) = p.a.hca.poll_transmit(now) {
            sent += 1;
            p.b.hca.handle_datagram(now, d);
        }
        while let Some(d) = p.b.hca.poll_transmit(now) {
            p.a.hca.handle_datagram(now, d);
        }
        if !p.a.poll().is_empty() {
            break;
        }
    }
    assert_eq!(sent, 40, "each packet sent once");
    assert_eq!(p.a.counters().retransmit_timeouts, 0);
    assert_eq!(p.b.read_mem(0, data.len()), data);
    // the timer still fires when nothing is sent: a lost window is resent
    let wr = p.one_sided(2, WrOpcode::RdmaWrite, 0, 2048, 0);
    p.a.post(wr);
    while p.a.hca.poll_transmit(now).is_some() {} // both packets lost
    now += Duration::from_millis(5);
    p.a.hca.handle_timeout(now);
    assert_eq!(p.a.counters().retransmit_timeouts, 1);
    assert!(p.a.hca.poll_transmit(now).is_some(), "retransmitted");
}
