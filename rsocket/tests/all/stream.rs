//! Two streams against each other through the wire model: byte-exact
//! delivery, credit exhaustion and recovery, shutdown, keepalive.

use crate::common::*;
use roce_rsocket::*;

/// Send `n` bytes from A to B with a seeded mix of sends, deliveries and
/// reads of random sizes; check every byte.
fn transfer(ca: StreamConfig, cb: StreamConfig, n: usize, seed: u64) -> Pair {
    let mut p = Pair::connected(ca, cb);
    let data = pattern(n, seed);
    let mut rng = Rng::new(seed);
    let (mut sent, mut ramp) = (0usize, SendRamp::new());
    let mut idle = 0;
    while p.b.got.len() < n {
        let mut progress = 0;
        if sent < n {
            let k = p.send(Side::A, &data, &mut sent, &mut ramp);
            if sent == n || k == 0 {
                ramp = SendRamp::new();
            }
            progress += k;
        }
        for _ in 0..rng.below(8) {
            progress += usize::from(p.deliver(Side::A)) + usize::from(p.deliver(Side::B));
        }
        let want = 1 + rng.below(3 * 65536) as usize;
        progress += p.read(Side::B, want);
        if progress == 0 {
            p.drain();
            idle += 1;
            assert!(idle < 3, "no progress: sent {sent}, received {}", p.b.got.len());
        } else {
            idle = 0;
        }
    }
    p.drain();
    assert_eq!(p.b.got.len(), n);
    assert!(p.b.got == data, "the bytes differ");
    assert_eq!(p.b.s.readable_bytes(), 0);
    assert!(p.a.s.all_sends_done() && p.b.s.all_sends_done());
    p
}

#[test]
fn sizes_from_one_byte_to_one_mebibyte() {
    let sizes =
        [1, 2, 63, 64, 65, 2047, 2048, 2049, 4096, 65535, 65536, 65537, 131072, 300_001, 1 << 20];
    for (i, &n) in sizes.iter().enumerate() {
        transfer(StreamConfig::default(), StreamConfig::default(), n, i as u64 + 1);
    }
}

#[test]
fn small_buffers_rotate_the_sgl_many_times() {
    for (i, &n) in [1usize, 2048, 2049, 4097, 100_000, 1 << 20].iter().enumerate() {
        let p = transfer(small(), small(), n, 100 + i as u64);
        assert_eq!(p.data_writes.0, n as u64);
    }
}

#[test]
fn unequal_sides() {
    let big = StreamConfig { rbuf_size: 1 << 20, rq_size: 1024, ..StreamConfig::default() };
    transfer(small(), big, 1 << 20, 7);
    transfer(big, small(), 1 << 20, 8);
}

#[test]
fn both_directions_at_once() {
    let mut p = Pair::connected(small(), StreamConfig::default());
    let (da, db) = (pattern(200_000, 1), pattern(150_000, 2));
    let (mut sa, mut sb) = (0, 0);
    let mut rng = Rng::new(3);
    for _ in 0..100_000 {
        if p.a.got.len() == db.len() && p.b.got.len() == da.len() {
            break;
        }
        p.send(Side::A, &da, &mut sa, &mut SendRamp::new());
        p.send(Side::B, &db, &mut sb, &mut SendRamp::new());
        for _ in 0..rng.below(5) {
            p.deliver(Side::A);
            p.deliver(Side::B);
        }
        p.read(Side::A, rng.below(10_000) as usize);
        p.read(Side::B, rng.below(10_000) as usize);
    }
    assert!(p.b.got == da && p.a.got == db);
}

#[test]
fn the_sender_stops_at_the_offered_buffer_and_resumes() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    let data = pattern(1 << 20, 9);
    let mut sent = 0;
    // B reads nothing: A fills both halves of B's 128 KiB, then stops
    loop {
        let k = p.send(Side::A, &data, &mut sent, &mut SendRamp::new());
        p.drain();
        if k == 0 {
            break;
        }
    }
    assert_eq!(sent, 128 * 1024, "exactly the receive buffer offered");
    assert_eq!(p.b.arrived, 128 * 1024);
    let v = p.a.s.sender_view();
    assert!(v.target_sgl.iter().all(|e| e.length == 0), "{v:?}");
    assert!(!p.a.s.can_send() && !p.a.s.poll().pollout);
    assert!(matches!(p.a.s.send(10, &mut SendRamp::new()), Err(Error::WouldBlock)));
    // reading less than a half gives nothing back
    p.read(Side::B, 60 * 1024);
    p.drain();
    assert_eq!(p.send(Side::A, &data, &mut sent, &mut SendRamp::new()), 0);
    // a whole half read: it is offered again and A goes on
    p.read(Side::B, 4 * 1024);
    p.drain();
    assert!(p.a.s.can_send());
    while p.b.got.len() < data.len() {
        p.send(Side::A, &data, &mut sent, &mut SendRamp::new());
        p.drain();
        p.read(Side::B, usize::MAX);
    }
    assert!(p.b.got == data);
}

#[test]
fn message_credits_run_out_and_come_back() {
    let cfg = StreamConfig { sq_size: 64, ..small() };
    let mut p = Pair::connected(cfg, cfg);
    let data = pattern(100, 4);
    let mut sent = 0;
    // one byte per call: each is a message; B reads nothing
    let mut msgs = 0;
    while sent < data.len() {
        let one = &data[..sent + 1];
        if p.send(Side::A, one, &mut sent, &mut SendRamp::new()) == 0 {
            break;
        }
        msgs += 1;
        p.drain();
    }
    assert_eq!(msgs, 16, "the 16 credits of B's receive queue");
    let v = p.a.s.sender_view();
    assert_eq!((v.sseq_no, v.sseq_comp), (16, 16));
    // B reads 7 messages: not yet half a queue
    p.read(Side::B, 7);
    p.drain();
    assert_eq!(p.a.s.sender_view().sseq_comp, 16);
    // the 8th: a credit update without a buffer (0-byte write), limit 8 + 16
    p.read(Side::B, 1);
    assert_eq!(p.to_a.len(), 1);
    assert_eq!(p.to_a[0].wr.imm, Some(0x8000_0000 | 24));
    assert!(p.to_a[0].bytes.is_empty());
    p.drain();
    assert_eq!(p.a.s.sender_view().sseq_comp, 24);
    while sent < data.len() {
        let one = &data[..sent + 1];
        p.send(Side::A, one, &mut sent, &mut SendRamp::new());
        p.drain();
        p.read(Side::B, 5);
    }
    p.drain();
    p.read(Side::B, usize::MAX);
    assert!(p.b.got == data);
}

#[test]
fn credit_limits_wrap_around_sixteen_bits() {
    let cfg = StreamConfig { sq_size: 64, sbuf_size: 1 << 20, ..small() };
    let mut p = Pair::connected(cfg, cfg);
    let data = pattern(70_000, 5);
    let mut sent = 0;
    while sent < data.len() {
        let one = &data[..sent + 1];
        p.send(Side::A, one, &mut sent, &mut SendRamp::new());
        p.drain();
        p.read(Side::B, 3);
    }
    p.drain();
    p.read(Side::B, usize::MAX);
    assert!(p.b.got == data);
    assert_eq!(p.a.s.sender_view().sseq_no, (70_000u32 % 65536) as u16);
}

#[test]
fn shutdown_write_then_the_peer_finishes() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    let data = pattern(5000, 6);
    let mut sent = 0;
    p.send(Side::A, &data, &mut sent, &mut SendRamp::new());
    let acts = p.a.s.shutdown(Shutdown::Write);
    assert!(matches!(&acts[..], [Action::Post(w)] if w.imm == Some(0xE000_0002)));
    p.apply(Side::A, acts, &[]);
    assert_eq!(p.a.s.send(1, &mut SendRamp::new()), Err(Error::ConnReset));
    assert_eq!(Error::ConnReset.errno(), errno::ECONNRESET);
    p.drain();
    assert_eq!(p.b.events, vec![Action::PeerShutdown]);
    // the data before the shutdown is still there, then end of file
    assert!(!p.b.s.at_eof() && p.b.s.poll().pollin);
    p.read(Side::B, usize::MAX);
    assert!(p.b.got == data && p.b.s.at_eof() && p.b.s.poll().pollin);
    // B still sends to A
    let back = pattern(3000, 7);
    let mut bsent = 0;
    p.send(Side::B, &back, &mut bsent, &mut SendRamp::new());
    p.drain();
    p.read(Side::A, usize::MAX);
    assert!(p.a.got == back);
    // B shuts down too: it cannot receive any more, so DISCONNECT
    let acts = p.b.s.shutdown(Shutdown::Write);
    assert!(matches!(&acts[..], [Action::Post(w)] if w.imm == Some(0xE000_0000)));
    p.apply(Side::B, acts, &[]);
    p.drain();
    assert_eq!(p.a.events, vec![Action::Disconnected]);
    assert_eq!(p.b.events, vec![Action::PeerShutdown, Action::Disconnected]);
    assert_eq!((p.a.s.phase(), p.b.s.phase()), (Phase::Disconnected, Phase::Disconnected));
    assert!(p.a.s.poll().pollhup && p.b.s.poll().pollhup);
    assert!(p.a.s.all_sends_done() && p.b.s.all_sends_done());
}

#[test]
fn shutdown_both_leaves_the_queued_data_readable() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    let data = pattern(100_000, 8);
    let mut sent = 0;
    p.send(Side::B, &data, &mut sent, &mut SendRamp::new());
    p.drain();
    let acts = p.b.s.shutdown(Shutdown::Both);
    p.apply(Side::B, acts, &[]);
    p.drain();
    assert_eq!(p.a.events, vec![Action::Disconnected]);
    assert_eq!(p.b.events, vec![Action::Disconnected]);
    assert_eq!(p.a.s.readable_bytes(), sent as u64);
    p.read(Side::A, usize::MAX);
    assert!(p.a.got == data[..sent] && p.a.s.at_eof());
    assert_eq!(p.a.s.send(1, &mut SendRamp::new()), Err(Error::ConnReset));
}

#[test]
fn shutdown_read_alone_sends_nothing() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    assert!(p.a.s.shutdown(Shutdown::Read).is_empty());
    assert!(p.a.s.at_eof());
    // then write: DISCONNECT, as reading is already shut
    let acts = p.a.s.shutdown(Shutdown::Write);
    assert!(matches!(&acts[..], [Action::Post(w)] if w.imm == Some(0xE000_0000)));
}

#[test]
fn shutdown_waits_for_a_control_slot() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    let kas: Vec<Wr> = (0..4).map(|_| p.a.s.keepalive().expect("a control slot")).collect();
    assert!(p.a.s.keepalive().is_none(), "four control writes in flight at most");
    assert!(p.a.s.shutdown(Shutdown::Write).is_empty());
    assert!(!p.a.s.all_sends_done());
    let acts = p.a.s.handle_send_completion(kas[0].wr_id, true).unwrap();
    assert!(matches!(&acts[..], [Action::Post(w)] if w.imm == Some(0xE000_0002)));
}

#[test]
fn keepalive_is_a_zero_byte_write_the_peer_never_sees() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    let ka = p.a.s.keepalive().unwrap();
    assert_eq!((ka.imm, ka.payload.len(), ka.wr_id), (None, 0, 0xE000_0001));
    p.apply(Side::A, vec![Action::Post(ka)], &[]);
    let recvs = p.b.recvs;
    p.drain();
    assert_eq!(p.b.recvs, recvs, "no receive used");
    assert!(p.a.s.all_sends_done());
    // a failed keepalive is a dead link
    let ka = p.a.s.keepalive().unwrap();
    assert_eq!(p.a.s.handle_send_completion(ka.wr_id, false), Err(Error::CompletionFailed));
    assert_eq!(
        (p.a.s.phase(), p.a.s.take_error(), p.a.s.take_error()),
        (Phase::Error, errno::EIO, 0)
    );
    assert!(p.a.s.poll().pollerr);
}

#[test]
fn the_first_actions_offer_the_second_half() {
    let p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    // A's offer to B: one SGE into entry 1 of B's target SGL, credits 384
    let f = &p.to_b[0];
    assert_eq!(f.wr.imm, Some(0x8000_0000 | 384));
    assert_eq!(f.wr.remote_addr, p.b.mem.target_addr + 16);
    assert_eq!(f.wr.rkey, p.b.mem.target_rkey);
    let sge = Sge::parse(&f.bytes, ByteOrder::Little).unwrap();
    assert_eq!(sge, Sge { addr: p.a.mem.rbuf_addr + 65536, key: p.a.mem.rbuf_rkey, length: 65536 });
    assert!(f.wr.payload.inline(), "16 bytes fit the default 64-byte inline limit");
}

#[test]
fn without_inline_sgl_updates_use_the_control_slots() {
    let mut p = Pair::connected(small(), small());
    let f = &p.to_b[0];
    let Payload::Sbuf { segs, .. } = &f.wr.payload else { panic!("{:?}", f.wr.payload) };
    assert_eq!(segs, &[Seg { offset: 4096 + 16, len: 16 }], "slot 1 after the 4 KiB data part");
    p.drain();
}
