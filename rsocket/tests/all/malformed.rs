//! Bad input from the peer: an error value with rdma-core's errno, the
//! stream in its error state, never a panic.

use crate::common::*;
use roce_rsocket::*;

fn recv(s: &mut Stream, imm: u32, byte_len: u32, target: &[u8]) -> Result<Vec<Action>, Error> {
    s.handle_recv_completion(RecvCompletion { imm, byte_len, ok: true }, target)
}

/// The error state as rdma-core's callers see it: `SO_ERROR` is EIO, sends
/// fail with ECONNRESET, reads give what is queued and then end of file,
/// `rpoll` says POLLERR.
fn assert_failed(h: &mut Host) {
    assert_eq!(h.s.phase(), Phase::Error);
    assert_eq!(h.s.take_error(), errno::EIO);
    assert_eq!(h.s.send(1, &mut SendRamp::new()).unwrap_err().errno(), errno::ECONNRESET);
    assert!(h.s.poll().pollerr);
    h.read(usize::MAX);
    assert!(h.s.at_eof());
    // later completions change nothing
    assert_eq!(
        h.s.handle_recv_completion(RecvCompletion { imm: 5, byte_len: 5, ok: true }, &[0; 32]),
        Ok(vec![])
    );
}

#[test]
fn reserved_ops() {
    for op in [1u32, 2, 3, 5] {
        let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
        p.drain();
        let e = recv(&mut p.b.s, op << 29 | 10, 10, &[0; 32]).unwrap_err();
        assert_eq!(e, Error::ReservedOp { op: op as u8 });
        assert_eq!(e.errno(), errno::EIO);
        assert_failed(&mut p.b);
    }
}

#[test]
fn data_longer_than_the_offered_buffer() {
    let mut p = Pair::connected(small(), small());
    p.drain();
    // B offered A 2 KiB, then the other 2 KiB: one message may not pass the first
    let e = recv(&mut p.b.s, 2049, 2049, &[0; 32]).unwrap_err();
    assert_eq!(e, Error::DataBeyondBuffer { len: 2049, room: 2048 });
    assert_failed(&mut p.b);

    // the same after part of the half was used
    let mut p = Pair::connected(small(), small());
    p.drain();
    assert!(recv(&mut p.b.s, 2000, 2000, &[0; 32]).is_ok());
    assert_eq!(
        recv(&mut p.b.s, 100, 100, &[0; 32]).unwrap_err(),
        Error::DataBeyondBuffer { len: 100, room: 48 }
    );

    // and with nothing offered at all
    let mut p = Pair::connected(small(), small());
    p.drain();
    assert!(recv(&mut p.b.s, 2048, 2048, &[0; 32]).is_ok());
    assert!(recv(&mut p.b.s, 2048, 2048, &[0; 32]).is_ok());
    assert_eq!(
        recv(&mut p.b.s, 1, 1, &[0; 32]).unwrap_err(),
        Error::DataBeyondBuffer { len: 1, room: 0 }
    );
}

#[test]
fn data_whose_write_is_another_length() {
    let mut p = Pair::connected(small(), small());
    p.drain();
    let e = recv(&mut p.b.s, 100, 200, &[0; 32]).unwrap_err();
    assert_eq!(e, Error::DataLengthMismatch { len: 100, byte_len: 200 });
    assert_failed(&mut p.b);
}

#[test]
fn more_messages_than_credits() {
    let mut p = Pair::connected(small(), small());
    p.drain();
    // B granted 16 messages and reads none
    for _ in 0..16 {
        recv(&mut p.b.s, 1, 1, &[0; 32]).unwrap();
    }
    let e = recv(&mut p.b.s, 1, 1, &[0; 32]).unwrap_err();
    assert_eq!(e, Error::DataBeyondCredits { limit: 16 });
    assert_eq!(e.errno(), errno::EIO);
    // what arrived in time is still readable
    assert_eq!(p.b.s.readable_bytes(), 16);
    assert_eq!(p.b.s.phase(), Phase::Error);
}

#[test]
fn iomap_messages_take_credits_too() {
    let mut p = Pair::connected(small(), small());
    p.drain();
    for _ in 0..16 {
        recv(&mut p.b.s, 0xC000_0000, 24, &[0; 32]).unwrap();
    }
    assert_eq!(
        recv(&mut p.b.s, 1, 1, &[0; 32]).unwrap_err(),
        Error::DataBeyondCredits { limit: 16 }
    );
}

/// A's target list with entry 1 set to `sge`.
fn target_with(p: &Pair, sge: Sge) -> Vec<u8> {
    let mut t = p.a.target.clone();
    t[16..32].copy_from_slice(&sge.emit(ByteOrder::native()));
    t
}

#[test]
fn sgl_update_outside_the_receive_buffer() {
    let cfg = StreamConfig::default();
    let base = Pair::connected(cfg, cfg).b.mem;
    let half = 65536;
    for sge in [
        Sge { addr: base.rbuf_addr + 2 * half as u64, key: base.rbuf_rkey, length: half },
        Sge { addr: base.rbuf_addr + half as u64 + 1, key: base.rbuf_rkey, length: half },
        Sge { addr: base.rbuf_addr - 1, key: base.rbuf_rkey, length: 10 },
        Sge { addr: u64::MAX - 5, key: base.rbuf_rkey, length: 10 },
        Sge { addr: base.rbuf_addr, key: base.rbuf_rkey, length: 0 },
    ] {
        // a fresh pair, B's own first offer not delivered: the forged one instead
        let mut p = Pair::connected(cfg, cfg);
        let t = target_with(&p, sge);
        let e = recv(&mut p.a.s, 0x8000_0000 | 384, 16, &t).unwrap_err();
        assert_eq!(e, Error::SglBeyondBuffer { addr: sge.addr, length: sge.length });
        assert_eq!(e.errno(), errno::EIO);
        assert_failed(&mut p.a);
    }
}

#[test]
fn sgl_update_over_an_entry_in_use() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain(); // entry 1 now holds B's second half, entry 0 its first
               // a second update would write entry 0, which A has not used at all
    let mut t = p.a.target.clone();
    t[..16].copy_from_slice(
        &Sge { addr: p.b.mem.rbuf_addr, key: p.b.mem.rbuf_rkey, length: 65536 }
            .emit(ByteOrder::native()),
    );
    assert_eq!(
        recv(&mut p.a.s, 0x8000_0000 | 384, 16, &t).unwrap_err(),
        Error::SglInUse { index: 0 }
    );
}

#[test]
fn sgl_write_of_another_length() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    let t = p.a.target.clone();
    assert_eq!(
        recv(&mut p.a.s, 0x8000_0000 | 384, 8, &t).unwrap_err(),
        Error::SglWriteLength { len: 8 }
    );
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    assert_eq!(
        recv(&mut p.a.s, 0x8000_0000 | 384, 16, &[0; 20]).unwrap_err(),
        Error::TargetListShort { len: 20 }
    );
}

#[test]
fn credits_beyond_the_peers_queue() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    let t = p.a.target.clone();
    // nothing sent; B's queue is 384: a limit of 385 is a lie
    let e = recv(&mut p.a.s, 0x8000_0000 | 385, 0, &t).unwrap_err();
    assert_eq!(e, Error::CreditsBeyondQueue { limit: 385, sent: 0 });
    // a limit behind what was sent is one too (it wraps to a huge window)
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    assert!(recv(&mut p.a.s, 0x8000_0000 | 0xFFFF, 0, &t).is_err());
    // bits 16..28 are ignored, as rdma-core keeps only the low 16
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    assert!(recv(&mut p.a.s, 0x8000_0000 | 0x1_0000 | 384, 0, &t).is_ok());
}

#[test]
fn bad_connection_data() {
    let cfg = StreamConfig::default();
    let good = Pair::connected(cfg, cfg).a.s.conn_data().emit();
    let mut s = Host::new(cfg, 0x1000_0000).s;
    let e = s.establish(&good[..39]).unwrap_err();
    assert_eq!((e, e.errno()), (Error::ConnDataShort { len: 39 }, errno::ENOTSUP));
    assert_eq!(s.establish(&[]).unwrap_err(), Error::ConnDataShort { len: 0 });
    let mut v2 = good;
    v2[0] = 2;
    let e = s.establish(&v2).unwrap_err();
    assert_eq!((e, e.errno()), (Error::ConnDataVersion { version: 2 }, errno::ENOTSUP));
    let mut no_sgl = good;
    no_sgl[20..24].copy_from_slice(&[0; 4]);
    assert_eq!(s.establish(&no_sgl).unwrap_err(), Error::ConnDataNoSgl);
    assert_eq!(s.phase(), Phase::Idle, "still usable: the C layer rejects or fails the connect");
    assert_eq!(s.send(1, &mut SendRamp::new()), Err(Error::NotConnected));
    // longer private data (the REQ's 56 bytes after the CM header) is fine
    let mut long = good.to_vec();
    long.extend_from_slice(&[0; 16]);
    assert!(s.establish(&long).is_ok());
    assert_eq!(s.establish(&good).unwrap_err(), Error::NotConnected, "once only");
}

#[test]
fn failed_receives_are_ignored_as_flushes() {
    let mut p = Pair::connected(StreamConfig::default(), StreamConfig::default());
    p.drain();
    let c = RecvCompletion { imm: 0xFFFF_FFFF, byte_len: 99, ok: false };
    assert_eq!(p.b.s.handle_recv_completion(c, &[]), Ok(vec![]));
    assert_eq!(p.b.s.phase(), Phase::Connected);
}

#[test]
fn random_completions_never_panic() {
    let mut rng = Rng::new(42);
    for round in 0..200 {
        let mut p = Pair::connected(small(), StreamConfig::default());
        if round % 2 == 0 {
            p.drain();
        }
        for _ in 0..50 {
            let imm = match rng.below(4) {
                0 => rng.next() as u32,
                1 => (rng.below(8) as u32) << 29 | rng.below(5000) as u32,
                2 => 0x8000_0000 | rng.below(70_000) as u32,
                _ => rng.below(3000) as u32,
            };
            let byte_len = if rng.below(2) == 0 { imm & 0x1FFF_FFFF } else { rng.below(40) as u32 };
            let target: Vec<u8> = (0..rng.below(40)).map(|_| rng.next() as u8).collect();
            let h = if rng.below(2) == 0 { &mut p.a } else { &mut p.b };
            let _ = h.s.handle_recv_completion(RecvCompletion { imm, byte_len, ok: true }, &target);
            let _ = h.s.handle_send_completion(rng.next(), rng.below(4) != 0);
            let _ = h.s.consume(rng.below(5000) as usize);
            let _ = h.s.send(rng.below(100_000) as usize, &mut SendRamp::new());
            let _ = h.s.read_spans(rng.below(100_000) as usize);
        }
    }
}
