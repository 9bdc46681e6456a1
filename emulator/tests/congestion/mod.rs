//! Congestion management (IBA Annex A17.9): packets leave ECN-capable, a
//! CE-marked packet is answered with one CNP per QP per interval, a CNP
//! cuts the receiving QP's rate (DCQCN) and its pacer spaces the packets,
//! a CNP is never acknowledged, and hostile CNPs are counted, never
//! obeyed beyond the rate floor.

use roce_emulator::*;
use roce_sim::testkit::*;
use std::time::Duration;

/// Every datagram the two sides exchange until both are idle and no timer
/// is due before `until`, each side's transmits delivered to the other at
/// once; `mark(from_a, &mut datagram)` may change a datagram on its way.
/// Returns `(time, from_a, datagram)` of each, in order.
fn pump(
    p: &mut Pair,
    until: Instant,
    mut mark: impl FnMut(bool, &mut Datagram),
) -> Vec<(Instant, bool, Datagram)> {
    let mut seen = Vec::new();
    for _ in 0..200_000 {
        let mut moved = false;
        for from_a in [true, false] {
            let (src, dst) = match from_a {
                true => (&mut p.a.hca, &mut p.b.hca),
                false => (&mut p.b.hca, &mut p.a.hca),
            };
            while let Some(mut d) = src.poll_transmit(p.now) {
                mark(from_a, &mut d);
                seen.push((p.now, from_a, d.clone()));
                dst.handle_datagram(p.now, d);
                moved = true;
            }
        }
        if moved {
            continue;
        }
        let next = [p.a.hca.poll_timeout(), p.b.hca.poll_timeout()].into_iter().flatten().min();
        match next {
            Some(t) if t <= until => {
                p.now = p.now.max(t);
                p.a.hca.handle_timeout(p.now);
                p.b.hca.handle_timeout(p.now);
            }
            _ => return seen,
        }
    }
    panic!("pump did not settle");
}

fn is_cnp(d: &Datagram) -> bool {
    d.payload.first() == Some(&0x81)
}

fn ce(d: &mut Datagram) {
    d.meta.tos |= 0b11;
}

/// A's WRITE of `len` bytes to B's offset 0 (signaled).
fn write(p: &mut Pair, id: u64, len: u32) {
    let wr = p.one_sided(id, WrOpcode::RdmaWrite, 0, len, 0).with_flags(SendFlags::SIGNALED);
    p.a.post(wr);
}

#[test]
fn packets_leave_ect0_and_a_ce_mark_gets_one_cnp_per_interval() {
    let mut p = Pair::new();
    p.a.write_mem(0, &pattern(4096, 3));
    write(&mut p, 1, 4096);
    // every request A sends is marked on its way to B
    let seen = pump(&mut p, Instant::from_millis(10), |from_a, d| {
        if from_a {
            assert_eq!(d.meta.tos & 3, 0b10, "ECT(0) on every packet");
            ce(d);
        }
    });
    let cnps: Vec<_> = seen.iter().filter(|s| is_cnp(&s.2)).collect();
    assert_eq!(cnps.len(), 1, "4 marked packets at one instant: one CNP");
    let (_, from_a, cnp) = cnps[0];
    assert!(!from_a);
    // A17.9.3: opcode 0x81, P_Key 0xFFFF, BECN, A's QPN, A 0, PSN 0, 16 zero bytes, ICRC
    let q = p.a.qpn.value().to_be_bytes();
    assert_eq!(&cnp.payload[..12], &[0x81, 0, 0xff, 0xff, 0x40, q[1], q[2], q[3], 0, 0, 0, 0]);
    assert_eq!(&cnp.payload[12..28], &[0u8; 16]);
    assert_eq!(cnp.payload.len(), 32);
    let hdr = roce_packet::IpUdpHeader::build(&cnp.endpoints, &cnp.meta, 32).unwrap();
    assert!(hdr.verify_icrc(&cnp.payload));
    assert_eq!(cnp.meta.tos, 48 << 2, "DSCP 48, not ECN-capable");
    assert_eq!((cnp.endpoints.dst, cnp.endpoints.dst_port), (p.a.hca.addr(), 4791));
    let (ca, cb) = (p.a.counters(), p.b.counters());
    assert_eq!((cb.np_ecn_marked_roce_packets, cb.np_cnp_sent), (4, 1));
    assert_eq!((ca.rp_cnp_handled, ca.rp_cnp_ignored), (1, 0));
    // the CNP got no answer: B's packets are the ACK and the CNP, A's the 4 requests
    assert_eq!(seen.iter().filter(|s| !s.1).count(), 2, "{seen:?}");
    assert_eq!(p.b.read_mem(0, 4096), pattern(4096, 3));
    let (sw, rate) = p.a.hca.qp_congestion(p.a.qpn).unwrap();
    assert_eq!(sw, QpCc { np: true, rp: true });
    // 100 Gb/s cut by alpha 1023/1024 / 2
    assert_eq!(rate, Some(50_048));

    // 49 µs later a marked packet gets no CNP; 50 µs after the first, one
    let t0 = cnps[0].0;
    for (at, cnps_then) in [(49, 1), (50, 2)] {
        p.now = t0 + Duration::from_micros(at);
        write(&mut p, 2, 64);
        let until = p.now;
        pump(&mut p, until, |from_a, d| {
            if from_a {
                ce(d)
            }
        });
        assert_eq!(p.b.counters().np_cnp_sent, cnps_then, "at {at} µs");
    }
}

#[test]
fn a_cut_rate_paces_the_qp_and_recovers() {
    let mut p = Pair::new();
    let data = pattern(64 * 1024, 5);
    p.a.write_mem(0, &data);
    // unthrottled: 64 packets at one instant
    write(&mut p, 1, 64 * 1024);
    let seen = pump(&mut p, Instant::from_millis(10), |_, _| {});
    let reqs: Vec<_> = seen.iter().filter(|s| s.1).collect();
    assert_eq!(reqs.len(), 64);
    assert_eq!(reqs.first().unwrap().0, reqs.last().unwrap().0, "no pacing at line rate");

    // CNPs 5 µs apart cut A's QP down towards 1 Gb/s
    let cnp = p.b.hca.cnp_for(p.b.qpn).expect("a CNP of B's QP");
    for _ in 0..7 {
        p.a.hca.handle_datagram(p.now, cnp.clone());
        p.now += Duration::from_micros(5);
    }
    assert_eq!(p.a.counters().rp_cnp_handled, 7);
    let (_, rate) = p.a.hca.qp_congestion(p.a.qpn).unwrap();
    let rate = rate.expect("limited");
    assert!((700..=2000).contains(&rate), "{rate} Mb/s");
    // the same WRITE is paced: each 1024-byte packet (1094-byte frame)
    // takes 8752 ns at 1 Gb/s; the rate grows back while it runs
    write(&mut p, 2, 64 * 1024);
    let start = p.now;
    let seen = pump(&mut p, start + Duration::from_secs(1), |_, _| {});
    let reqs: Vec<_> = seen.iter().filter(|s| s.1).map(|s| s.0).collect();
    assert_eq!(reqs.len(), 64);
    let span = *reqs.last().unwrap() - reqs[0];
    let floor = 63.0 * 1094.0 * 8.0 / (rate as f64 * 2.0 * 1e-3); // ns, at twice the cut rate
    assert!(span.as_nanos() as f64 >= floor * 0.5, "{span:?} for 63 gaps at {rate} Mb/s");
    assert!(reqs.windows(2).all(|w| w[1] > w[0]), "one packet per gate");
    assert_eq!(p.b.read_mem(0, data.len()), data);
    let wc = p.a.poll();
    assert_eq!(wc.iter().map(|w| w.status).collect::<Vec<_>>(), [WcStatus::Success; 2]);
    // with no more CNPs the timer brings A back: 5 Mb/s more every 300 µs
    // (additive: nothing sent, the byte counter's stage stays 0), so 100
    // ms later A is still limited, 10 s later at line rate again
    let (_, after) = p.a.hca.qp_congestion(p.a.qpn).unwrap();
    assert!(after.is_some_and(|r| r > rate), "the byte counter raised it: {after:?}");
    p.now += Duration::from_millis(100);
    let (_, later) = p.a.hca.qp_congestion(p.a.qpn).unwrap();
    assert_eq!(later, after, "nothing is caught up before the QP sends or gets a CNP");
    write(&mut p, 3, 64);
    let until = p.now;
    pump(&mut p, until, |_, _| {});
    let (_, later) = p.a.hca.qp_congestion(p.a.qpn).unwrap();
    let after = after.unwrap_or(0);
    assert!(later.is_some_and(|r| r > after + 1000 && r < 100_000), "{later:?} after {after}");
    p.now += Duration::from_secs(10);
    write(&mut p, 4, 64);
    let until = p.now;
    pump(&mut p, until, |_, _| {});
    assert_eq!(p.a.hca.qp_congestion(p.a.qpn).unwrap().1, None, "back at line rate");
}

#[test]
fn the_reaction_point_switched_off_ignores_cnps() {
    let mut p = Pair::new();
    let cnp = p.b.hca.cnp_for(p.b.qpn).unwrap();
    p.a.hca.set_qp_congestion(p.a.qpn, QpCc { np: true, rp: false }).unwrap();
    p.a.hca.handle_datagram(p.now, cnp.clone());
    assert_eq!((p.a.counters().rp_cnp_handled, p.a.counters().rp_cnp_ignored), (0, 1));
    assert_eq!(p.a.hca.qp_congestion(p.a.qpn).unwrap().1, None);
    // on again: obeyed; off again: the limit is lifted at once
    p.a.hca.set_qp_congestion(p.a.qpn, QpCc { np: true, rp: true }).unwrap();
    p.a.hca.handle_datagram(p.now, cnp);
    assert!(p.a.hca.qp_congestion(p.a.qpn).unwrap().1.is_some());
    p.a.hca.set_qp_congestion(p.a.qpn, QpCc { np: true, rp: false }).unwrap();
    assert_eq!(p.a.hca.qp_congestion(p.a.qpn).unwrap().1, None);
    // the notification point switched off: marks counted, no CNP
    p.b.hca.set_qp_congestion(p.b.qpn, QpCc { np: false, rp: true }).unwrap();
    p.a.write_mem(0, &pattern(64, 1));
    write(&mut p, 1, 64);
    let seen = pump(&mut p, Instant::from_millis(10), |from_a, d| {
        if from_a {
            ce(d)
        }
    });
    assert!(!seen.iter().any(|s| is_cnp(&s.2)));
    assert_eq!((p.b.counters().np_ecn_marked_roce_packets, p.b.counters().np_cnp_sent), (1, 0));
}

#[test]
fn hostile_cnps_are_counted_and_never_crash() {
    let mut p = Pair::new();
    let good = p.b.hca.cnp_for(p.b.qpn).unwrap();
    // a CNP for a QP that does not exist: dropped as any packet to it
    let mut bytes = good.payload.to_vec();
    bytes[5..8].copy_from_slice(&[0x00, 0x0f, 0xff]);
    let stray = resealed(&good, bytes);
    p.a.hca.handle_datagram(p.now, stray);
    assert_eq!(p.a.counters().unknown_qp, 1);
    // a flood: 100 000 CNPs in 10 ms; the rate stops at rpg_min_rate
    for i in 0..100_000u64 {
        p.a.hca.handle_datagram(Instant::from_nanos(i * 100), good.clone());
    }
    p.now = Instant::from_millis(10);
    assert_eq!(p.a.counters().rp_cnp_handled, 100_000);
    assert_eq!(p.a.hca.qp_congestion(p.a.qpn).unwrap().1, Some(1));
    // truncated CNPs (no reserved bytes): malformed
    let short = resealed(&good, good.payload[..16].to_vec());
    p.a.hca.handle_datagram(p.now, short);
    assert_eq!(p.a.counters().malformed, 1);
    // the QP still works (slowly): a 64-byte WRITE lands
    p.a.write_mem(0, &pattern(64, 9));
    write(&mut p, 1, 64);
    let until = p.now + Duration::from_secs(1);
    pump(&mut p, until, |_, _| {});
    assert_eq!(p.b.read_mem(0, 64), pattern(64, 9));
}

#[test]
fn a_device_with_congestion_off_sends_not_ect_and_no_cnps() {
    let mut p = Pair::with(Opts { congestion: CongestionConfig::off(), ..Opts::default() });
    assert_eq!(p.b.hca.congestion().ecn, Ecn::NotEct);
    assert_eq!(p.b.hca.qp_congestion(p.b.qpn).unwrap().0, QpCc { np: false, rp: false });
    p.a.write_mem(0, &pattern(2048, 1));
    write(&mut p, 1, 2048);
    // a switch marks only ECN-capable packets; marked anyway, B counts them and sends no CNP
    let seen = pump(&mut p, Instant::from_millis(10), |from_a, d| {
        assert_eq!(d.meta.tos & 3, 0, "not ECN-capable");
        if from_a {
            ce(d)
        }
    });
    assert!(!seen.iter().any(|s| is_cnp(&s.2)));
    assert_eq!((p.b.counters().np_ecn_marked_roce_packets, p.b.counters().np_cnp_sent), (2, 0));
    // and A ignores CNPs
    let cnp = p.b.hca.cnp_for(p.b.qpn).unwrap();
    assert_eq!(cnp.meta.tos, 48 << 2);
    p.a.hca.handle_datagram(p.now, cnp);
    assert_eq!(p.a.counters().rp_cnp_ignored, 1);
}

/// `d` with a new payload and its ICRC recomputed.
fn resealed(d: &Datagram, mut bytes: Vec<u8>) -> Datagram {
    let n = bytes.len();
    if let Ok(h) = roce_packet::IpUdpHeader::build(&d.endpoints, &d.meta, n) {
        h.fill_icrc(&mut bytes);
    }
    Datagram::new(d.endpoints, d.meta, bytes.into())
}

#[test]
fn read_responses_are_paced_acks_are_not() {
    let mut p = Pair::new();
    let data = pattern(32 * 1024, 8);
    p.b.write_mem(0, &data);
    // CNPs cut B's QP (the READ responder) towards 1 Gb/s
    let cnp = p.a.hca.cnp_for(p.a.qpn).unwrap();
    for _ in 0..7 {
        p.b.hca.handle_datagram(p.now, cnp.clone());
        p.now += Duration::from_micros(5);
    }
    let rate = p.b.hca.qp_congestion(p.b.qpn).unwrap().1.expect("limited");
    let wr =
        p.one_sided(1, WrOpcode::RdmaRead, 0, data.len() as u32, 0).with_flags(SendFlags::SIGNALED);
    p.a.post(wr);
    let start = p.now;
    let seen = pump(&mut p, start + Duration::from_secs(1), |_, _| {});
    let resp: Vec<Instant> = seen.iter().filter(|s| !s.1).map(|s| s.0).collect();
    assert_eq!(resp.len(), 32, "32 READ response packets");
    // 31 gaps of a 1094-byte frame each, at no more than twice the cut rate
    let span = *resp.last().unwrap() - resp[0];
    let floor_ns = 31.0 * 1094.0 * 8.0 / (rate as f64 * 2.0 * 1e-3);
    assert!(span.as_nanos() as f64 >= floor_ns, "{span:?} at {rate} Mb/s");
    assert_eq!(p.a.read_mem(0, data.len()), data);
    assert_eq!(p.a.poll().iter().map(|w| w.status).collect::<Vec<_>>(), [WcStatus::Success]);
    // while B is limited, its ACK to a SEND from A leaves at once
    p.b.post_recv(7, 0, 64);
    p.a.send(8, 0, 64);
    let t0 = p.now;
    let seen = pump(&mut p, t0 + Duration::from_secs(1), |_, _| {});
    let ack = seen.iter().find(|s| !s.1).expect("an ACK");
    assert_eq!(ack.0, t0, "the ACK is not paced");
}
