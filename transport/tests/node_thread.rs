//! The driver thread between fake sans-IO nodes and real UDP transports.

use crate::common;
use common::*;
use roce_transport::{NodeThread, NodeThreadConfig, NodeThreadHandle};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn wait_until(h: &NodeThreadHandle, limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    let mut seen = h.progress();
    while !cond() {
        if std::time::Instant::now() >= end {
            return false;
        }
        seen = h.wait_for_progress(seen, Duration::from_millis(20));
    }
    true
}

#[test]
fn echo_between_two_driven_nodes() {
    let (ta, tb, ep) = bind_pair("127.1.11");
    let a = Fake::shared();
    let b = Arc::new(Mutex::new(Fake { echo: true, ..Fake::default() }));
    let sent: Vec<_> = (0..200).map(|i| send_only(&ep, 4, i, &pattern(i as usize, 1024))).collect();
    a.lock().unwrap().outbox.extend(sent.iter().cloned());
    let ha = NodeThread::spawn(a.clone(), ta).unwrap();
    let hb = NodeThread::spawn(b.clone(), tb).unwrap();
    assert!(wait_until(&ha, Duration::from_secs(10), || a.lock().unwrap().inbox.len() >= 200));
    let a = a.lock().unwrap();
    assert_eq!(a.inbox.len(), 200);
    for (s, (_, g)) in sent.iter().zip(&a.inbox) {
        assert_eq!(body(&s.payload), body(&g.payload), "in order, intact");
        assert!(roce_packet::frame::verify_icrc(&g.endpoints, &g.meta, &g.payload));
    }
    assert_eq!(b.lock().unwrap().inbox.len(), 200);
    // B counts its sends after the syscall returns, which may be after A
    // has already received them.
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while hb.counters().dgrams_out < 200 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let (ca, cb) = (ha.counters(), hb.counters());
    assert_eq!((ca.dgrams_out, ca.dgrams_in), (200, 200));
    assert_eq!((cb.dgrams_out, cb.dgrams_in), (200, 200));
    assert_eq!(ca.icrc_ok_exact + cb.icrc_ok_exact, 400);
    assert!(ca.gso_segments >= 100, "equal sizes go out with GSO: {ca:?}");
    assert!(ha.progress() > 0);
}

#[test]
fn timers_fire_when_due() {
    let t = bind("127.1.12.2", |_| {});
    let n = Fake::shared();
    let h = NodeThread::spawn(n.clone(), t).unwrap();
    let now = h.now();
    let deadlines = [now + Duration::from_millis(30), now + Duration::from_millis(60)];
    n.lock().unwrap().timers.extend(deadlines);
    h.notify();
    assert!(wait_until(&h, Duration::from_secs(5), || n.lock().unwrap().fired.len() == 2));
    let fired = n.lock().unwrap().fired.clone();
    for ((deadline, at), want) in fired.iter().zip(deadlines) {
        assert_eq!(*deadline, want);
        assert!(*at >= want, "not early");
        let late = *at - want;
        assert!(late < Duration::from_millis(250), "fired {late:?} late");
    }
    assert!(n.lock().unwrap().timers.is_empty());
}

fn one_way_latency(notify: bool, octet: u8) -> Duration {
    let cfg =
        NodeThreadConfig { max_idle: Duration::from_millis(300), ..NodeThreadConfig::default() };
    let (ta, tb, ep) = bind_pair(&format!("127.1.{octet}"));
    let a = Fake::shared();
    let b = Fake::shared();
    let ha = NodeThread::spawn_with(a.clone(), ta, cfg.clone()).unwrap();
    let hb = NodeThread::spawn_with(b.clone(), tb, cfg).unwrap();
    let mut lat = Vec::new();
    for i in 0..5 {
        std::thread::sleep(Duration::from_millis(37));
        let t0 = std::time::Instant::now();
        a.lock().unwrap().outbox.push_back(send_only(&ep, 1, i, &pattern(0, 64)));
        if notify {
            ha.notify();
        }
        assert!(
            wait_until(&hb, Duration::from_secs(5), || b.lock().unwrap().inbox.len() > i as usize)
        );
        lat.push(t0.elapsed());
    }
    lat.sort();
    lat[lat.len() / 2]
}

#[test]
fn notify_sends_posted_work_promptly() {
    let with = one_way_latency(true, 13);
    let without = one_way_latency(false, 14);
    eprintln!("median post->delivery latency: with notify {with:?}, without {without:?} (max_idle 300 ms)");
    assert!(with < Duration::from_millis(50), "with notify: {with:?}");
    assert!(without > with, "without notify the packet waits for the next wake-up");
}

#[test]
fn progress_hook_and_bounded_shutdown() {
    let (ta, tb, ep) = bind_pair("127.1.15");
    let a = Fake::shared();
    let b = Fake::shared();
    let ha = NodeThread::spawn(a.clone(), ta).unwrap();
    let hb = NodeThread::spawn(b.clone(), tb).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    hb.on_progress(move || {
        let _ = tx.send(());
    });
    a.lock().unwrap().outbox.push_back(send_only(&ep, 1, 1, &pattern(0, 64)));
    ha.notify();
    rx.recv_timeout(Duration::from_secs(5)).expect("hook ran");
    assert_eq!(b.lock().unwrap().inbox.len(), 1);
    let t0 = std::time::Instant::now();
    let t = hb.shutdown().expect("thread stopped and returned the transport");
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(t.snapshot().dgrams_in, 1);
    let t0 = std::time::Instant::now();
    drop(ha);
    assert!(t0.elapsed() < Duration::from_secs(1));
}

#[test]
fn pcap_records_sent_and_received_frames() {
    let path =
        std::env::temp_dir().join(format!("roce_transport_driver_{}.pcap", std::process::id()));
    let p2 = path.clone();
    let ta = bind("127.1.16.2", move |c| c.pcap = Some(p2.clone()));
    let tb = bind("127.1.16.3", |_| {});
    let ep = core_ep(&ta, &tb);
    let (pa, pb) = (ta.local_addr().port(), tb.local_addr().port());
    let a = Fake::shared();
    let b = Arc::new(Mutex::new(Fake { echo: true, ..Fake::default() }));
    let sent: Vec<_> =
        (0..10).map(|i| send_only(&ep, 4, i, &pattern(i as usize, 256 + i as usize))).collect();
    a.lock().unwrap().outbox.extend(sent.iter().cloned());
    let ha = NodeThread::spawn(a.clone(), ta).unwrap();
    let _hb = NodeThread::spawn(b.clone(), tb).unwrap();
    assert!(wait_until(&ha, Duration::from_secs(5), || a.lock().unwrap().inbox.len() == 10));
    let t = ha.shutdown().expect("stopped");
    assert_eq!(t.snapshot().pcap_frames, 20);
    drop(t);
    let frames = roce_pcap::read_capture_file(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert_eq!(frames.len(), 20);
    let mut out = 0;
    for f in &frames {
        let ds = match roce_packet::frame::parse_frame(f.linktype, &f.data, pb).unwrap() {
            Some(d) => d,
            None => roce_packet::frame::parse_frame(f.linktype, &f.data, pa).unwrap().unwrap(),
        };
        for d in ds {
            assert!(d.icrc_ok(), "recorded header is the one the ICRC was computed over");
            if d.endpoints.src.to_string() == "127.1.16.2" {
                out += 1;
            }
        }
        assert!(f.timestamp > Duration::from_secs(1_600_000_000));
    }
    assert_eq!(out, 10);
}

/// With `spin`, a driver polls before sleeping and `notify` skips the
/// eventfd while it spins. No notify may be lost at the edge (spinning just
/// ending): with `max_idle` 300 ms a lost one would show as a 300 ms
/// delivery. Posts land at varied offsets around the 30 µs spin window.
#[test]
fn spinning_driver_loses_no_notify() {
    let cfg = NodeThreadConfig {
        max_idle: Duration::from_millis(300),
        spin: Duration::from_micros(30),
        ..NodeThreadConfig::default()
    };
    let (ta, tb, ep) = bind_pair("127.1.19");
    let a = Fake::shared();
    let b = Arc::new(Mutex::new(Fake { echo: true, ..Fake::default() }));
    let ha = NodeThread::spawn_with(a.clone(), ta, cfg.clone()).unwrap();
    let hb = NodeThread::spawn_with(b.clone(), tb, cfg.clone()).unwrap();
    assert_eq!(ha.spin(), Duration::from_micros(30));
    let n = 300;
    let mut worst = Duration::ZERO;
    for i in 0..n {
        // 0..60 µs after the previous round trip: before, at and after the
        // end of the driver's spin
        let pause = Duration::from_micros((i as u64 * 7) % 61);
        let t = std::time::Instant::now();
        while t.elapsed() < pause {
            std::hint::spin_loop();
        }
        let t0 = std::time::Instant::now();
        a.lock().unwrap().outbox.push_back(send_only(&ep, 1, i, &pattern(i as usize, 64)));
        ha.notify();
        assert!(
            wait_until(&ha, Duration::from_secs(5), || a.lock().unwrap().inbox.len() > i as usize),
            "round trip {i} never came back"
        );
        worst = worst.max(t0.elapsed());
    }
    assert!(worst < Duration::from_millis(250), "a notify was lost: worst round trip {worst:?}");
    assert_eq!(b.lock().unwrap().inbox.len(), n as usize);
    {
        let a = a.lock().unwrap();
        for (i, (_, g)) in a.inbox.iter().enumerate() {
            let want = send_only(&ep, 1, i as u32, &pattern(i, 64));
            assert_eq!(body(&g.payload), body(&want.payload));
        }
    } // (the node's lock is released before the driver is stopped)
    drop(hb);
    assert!(ha.shutdown().is_some(), "a spinning driver still stops");
}
