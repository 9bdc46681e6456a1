//! The engine's progress model: who moves the datagrams (the posting
//! thread, a waiting thread, the engine thread), on fake sans-IO nodes over
//! real UDP sockets on loopback. Addresses 127.1.20-24.x are this file's.

use crate::common;
use common::*;
use roce_transport::{Engine, EngineConfig};
use std::time::Duration;

fn no_thread() -> EngineConfig {
    EngineConfig { thread: false, ..EngineConfig::default() }
}

#[test]
fn a_flush_sends_from_the_calling_thread() {
    // No engine thread at all: the datagram is on the wire when flush returns.
    let ta = bind("127.1.20.2", |_| {});
    let mut tb = bind("127.1.20.3", |_| {});
    let ep = core_ep(&ta, &tb);
    let ca = ta.counters();
    let a = Fake::shared();
    let e = Engine::new(vec![(a.clone(), ta)], no_thread()).unwrap().start().unwrap();
    let sent = send_only(&ep, 4, 1, &pattern(1, 64));
    a.lock().unwrap().outbox.push_back(sent.clone());
    assert_eq!(ca.snapshot().dgrams_out, 0, "nothing leaves before the flush");
    assert_eq!(e.flush(Some(&a)), 1);
    assert_eq!(ca.snapshot().dgrams_out, 1);
    assert_eq!(ca.snapshot().send_syscalls, 1);
    let got = recv_n(&mut tb, 1, Duration::from_secs(5));
    assert_eq!(got.len(), 1);
    assert_eq!(body(&got[0].payload), body(&sent.payload));
}

#[test]
fn a_waiting_caller_sleeps_on_the_socket_and_the_datagram_wakes_it() {
    // B has no engine thread: only the waiting caller can receive. It spins
    // not at all, so it is asleep in ppoll when A's datagram comes.
    let (ta, tb, ep) = bind_pair("127.1.21");
    let b = Fake::shared();
    let eb = Engine::new(vec![(b.clone(), tb)], no_thread()).unwrap().start().unwrap();
    let a = Fake::shared();
    let ea = Engine::new(vec![(a.clone(), ta)], no_thread()).unwrap().start().unwrap();
    let sender = {
        let a = a.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            a.lock().unwrap().outbox.push_back(send_only(&ep, 4, 7, &pattern(7, 200)));
            ea.flush(Some(&a))
        })
    };
    let t0 = std::time::Instant::now();
    let b2 = b.clone();
    let got = eb.progress(&mut || !b2.lock().unwrap().inbox.is_empty(), Duration::from_secs(10));
    let waited = t0.elapsed();
    assert_eq!(sender.join().unwrap(), 1);
    assert!(got, "the waiting caller received the datagram itself");
    assert!(waited >= Duration::from_millis(90), "it waited for the send: {waited:?}");
    assert!(waited < Duration::from_secs(5), "and did not sit out its budget: {waited:?}");
    let b = b.lock().unwrap();
    assert_eq!(b.inbox.len(), 1);
    let want = send_only(&ep, 4, 7, &pattern(7, 200));
    assert_eq!(body(&b.inbox[0].1.payload), body(&want.payload));
    assert_eq!(eb.progress_count(), 1, "one round handled it");
}

#[test]
fn the_engine_thread_serves_a_port_nobody_polls() {
    let (ta, tb, ep) = bind_pair("127.1.22");
    let a = Fake::shared();
    let ea = Engine::new(vec![(a.clone(), ta)], no_thread()).unwrap().start().unwrap();
    let b = Fake::shared();
    let eb = Engine::new(vec![(b.clone(), tb)], EngineConfig::default()).unwrap().start().unwrap();
    let sent: Vec<_> = (0..20).map(|i| send_only(&ep, 4, i, &pattern(i as usize, 100))).collect();
    for d in &sent {
        a.lock().unwrap().outbox.push_back(d.clone());
        ea.flush(Some(&a));
    }
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while b.lock().unwrap().inbox.len() < 20 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    let b = b.lock().unwrap();
    assert_eq!(b.inbox.len(), 20, "B's thread received everything");
    for (s, (_, d)) in sent.iter().zip(b.inbox.iter()) {
        assert_eq!(body(&d.payload), body(&s.payload), "in order, intact");
    }
    assert!(eb.progress_count() >= 1);
}

#[test]
fn a_burst_of_posts_leaves_in_one_batch() {
    // A post within post_batch of the previous one leaves its datagram to
    // the engine thread, which sends everything posted meanwhile at once.
    let ta = bind("127.1.23.2", |_| {});
    let mut tb = bind("127.1.23.3", |_| {});
    let ep = core_ep(&ta, &tb);
    let ca = ta.counters();
    let a = Fake::shared();
    let cfg = EngineConfig { post_batch: Duration::from_secs(3600), ..EngineConfig::default() };
    let ea = Engine::new(vec![(a.clone(), ta)], cfg).unwrap().start().unwrap();
    let sent: Vec<_> = (0..32).map(|i| send_only(&ep, 4, i, &pattern(i as usize, 512))).collect();
    // the first post of the burst is sent at once (by the poster, or by the
    // engine thread if its round came first: it serves an idle port too)
    a.lock().unwrap().outbox.push_back(sent[0].clone());
    assert!(ea.flush(Some(&a)) <= 1);
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while ca.snapshot().dgrams_out < 1 && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_micros(100));
    }
    assert_eq!(ca.snapshot().dgrams_out, 1);
    // the next 31 are queued under the lock and flushed one by one (so the
    // thread cannot take them before the last post): each returns 0
    {
        let mut g = a.lock().unwrap();
        g.outbox.extend(sent[1..].iter().cloned());
    }
    for _ in 1..32 {
        assert_eq!(ea.flush(Some(&a)), 0, "left to the engine thread");
    }
    let got = recv_n(&mut tb, 32, Duration::from_secs(10));
    assert_eq!(got.len(), 32);
    for (s, d) in sent.iter().zip(&got) {
        assert_eq!(body(&d.payload), body(&s.payload), "in order, intact");
    }
    let s = ca.snapshot();
    assert_eq!(s.dgrams_out, 32);
    assert!(s.send_syscalls <= 4, "31 datagrams in a batch or few, not 31 sends: {s:?}");
}

#[test]
fn dropping_the_engine_stops_its_thread_and_finishes_the_transports() {
    let dir = std::env::temp_dir().join(format!("roce_engine_drop_{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let pcap = dir.join("a.pcap");
    let ta = bind("127.1.24.2", |c| c.pcap = Some(pcap.clone()));
    let tb = bind("127.1.24.3", |_| {});
    let ep = core_ep(&ta, &tb);
    let a = Fake::shared();
    let ea = Engine::new(vec![(a.clone(), ta)], EngineConfig::default()).unwrap().start().unwrap();
    a.lock().unwrap().outbox.push_back(send_only(&ep, 4, 3, &pattern(3, 64)));
    ea.flush(Some(&a));
    assert!(!ea.thread_finished());
    drop(ea);
    // the recording is complete when drop returns: header + one record
    let bytes = std::fs::read(&pcap).unwrap();
    assert!(bytes.len() > 24 + 16, "pcap has its record: {} bytes", bytes.len());
    let _ = std::fs::remove_dir_all(&dir);
    drop(tb);
}

/// Who receives (issue 41, step 4): a caller that polls in a loop owns the
/// sockets for a few of its own gaps (the thread leaves them alone); a lone
/// poll, or polls further apart than the busy gap (a program that polls
/// once per iteration and spins on its memory in between, as
/// `ib_write_lat`), owns nothing, so the thread keeps receiving for it.
#[test]
fn only_a_polling_loop_owns_the_sockets() {
    let ta = bind("127.1.24.7", |_| {});
    // (a thread-enabled engine that is never started: its bookkeeping only)
    let cfg = EngineConfig { thread: true, ..EngineConfig::default() };
    let e = Engine::new(vec![(Fake::shared(), ta)], cfg).unwrap();
    assert!(!e.callers_own());
    e.mark_caller();
    assert!(!e.callers_own(), "a lone poll owns nothing");
    // (two polls back to back: a loop; tried again if this thread was
    // preempted between them for longer than the busy gap)
    let looped = (0..100).any(|_| {
        e.mark_caller();
        e.callers_own()
    });
    assert!(looped, "polls back to back: a loop");
    std::thread::sleep(Duration::from_millis(2));
    assert!(!e.callers_own(), "the loop stopped: its ownership ended with the hand-off at most");
    // polls 200 us apart: never a loop
    for _ in 0..5 {
        std::thread::sleep(Duration::from_micros(200));
        e.mark_caller();
        assert!(!e.callers_own());
    }
}
