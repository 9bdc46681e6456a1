//! IBA 1.5 ATOMIC_WRITE and FLUSH between two HCAs.

use roce_emulator::*;
use roce_packet::Opcode;
use roce_sim::testkit::*;

fn atomic_write(p: &mut Pair, va: u64, value: u64) -> Vec<WorkCompletion> {
    p.a.write_mem(0, &value.to_le_bytes());
    let wr = SendWr::new(3, WrOpcode::AtomicWrite)
        .sge(p.a.addr(0), 8, p.a.mr.lkey)
        .remote(va, p.b.mr.rkey);
    p.run_wr(wr)
}

#[test]
fn atomic_write_lands_8_bytes() {
    let mut p = Pair::new();
    p.b.write_mem(64, &[0xEE; 24]);
    let va = p.b.addr(72);
    let wc = atomic_write(&mut p, va, 0x0102_0304_0506_0708);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, WcOpcode::AtomicWrite));
    let mut want = vec![0xEE; 8];
    want.extend_from_slice(&0x0102_0304_0506_0708u64.to_le_bytes());
    want.extend_from_slice(&[0xEE; 8]);
    assert_eq!(p.b.read_mem(64, 24), want);
    // on the wire: ATOMIC_WRITE with RETH (len 8) and 8 bytes, answered
    // (IBA 1.5, as rxe does) by a zero-length READ RESPONSE ONLY
    let req = p.trace.iter().find(|s| s.dir == Dir::AtoB).unwrap();
    assert_eq!(req.opcode, Opcode::RC_ATOMIC_WRITE);
    let reth = req.repr.reth.unwrap();
    assert_eq!((reth.va, reth.rkey, reth.dma_len), (p.b.addr(72), p.b.mr.rkey, 8));
    assert!(req.ack_req);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_RDMA_READ_RESPONSE_ONLY), 1);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_ACKNOWLEDGE), 0);
    assert_eq!(p.a.counters().icrc_err + p.b.counters().icrc_err, 0);
}

#[test]
fn atomic_write_of_7_or_9_bytes_is_rejected() {
    let mut p = Pair::new();
    for n in [7u32, 9] {
        let wr = p.one_sided(3, WrOpcode::AtomicWrite, 0, n, 0);
        assert_eq!(p.a.hca.post_send(p.a.qpn, wr), Err(PostSendError::BadAtomicSge));
    }
    let wr = SendWr::new(3, WrOpcode::AtomicWrite).inline(&[1; 9]).remote(p.b.addr(0), p.b.mr.rkey);
    assert_eq!(p.a.hca.post_send(p.a.qpn, wr), Err(PostSendError::BadAtomicSge));
    p.run();
    assert!(p.trace.is_empty());
}

#[test]
fn atomic_write_needs_remote_write_on_the_region() {
    let mut p = Pair::new();
    let ro = p.b.hca.reg_mr(p.b.pd, 4096, AccessFlags::REMOTE_READ).unwrap();
    p.a.write_mem(0, &7u64.to_le_bytes());
    let wr = SendWr::new(3, WrOpcode::AtomicWrite)
        .sge(p.a.addr(0), 8, p.a.mr.lkey)
        .remote(ro.addr, ro.rkey);
    let wc = p.run_wr(wr);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    let mut got = [0u8; 8];
    p.b.hca.mr_read(ro.handle, 0, &mut got).unwrap();
    assert_eq!(got, [0; 8]);
}

fn flush_pair() -> Pair {
    let o = Opts {
        qp_access: ALL_ACCESS | AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT,
        ..Opts::default()
    };
    Pair::with(o)
}

fn flush(
    p: &mut Pair,
    va: u64,
    rkey: roce_packet::RKey,
    len: u32,
    placement: u8,
    level: u8,
) -> Vec<WorkCompletion> {
    let wr = SendWr::new(5, WrOpcode::Flush { len, placement, level }).remote(va, rkey);
    p.run_wr(wr)
}

#[test]
fn flush_with_access_succeeds_with_zero_length_read_response() {
    let mut p = flush_pair();
    let acc = ALL_ACCESS | AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT;
    let mr = p.b.hca.reg_mr(p.b.pd, 8192, acc).unwrap();
    let wc = flush(&mut p, mr.addr + 100, mr.rkey, 200, 3, 0);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, WcOpcode::Flush));
    let req = p.trace.iter().find(|s| s.dir == Dir::AtoB).unwrap();
    assert_eq!(req.opcode, Opcode::RC_FLUSH);
    assert_eq!(req.repr.feth, Some(3));
    let reth = req.repr.reth.unwrap();
    assert_eq!((reth.va, reth.rkey, reth.dma_len), (mr.addr + 100, mr.rkey, 200));
    let resp = p.trace.iter().find(|s| s.dir == Dir::BtoA).unwrap();
    assert_eq!(resp.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
    assert_eq!(resp.psn, req.psn);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_RDMA_READ_RESPONSE_ONLY), 1);
    // whole-region selectivity, global visibility only: FETH 0x11
    let wc = flush(&mut p, mr.addr, mr.rkey, 0, 1, 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let req = p.trace.iter().filter(|s| s.dir == Dir::AtoB).nth(1).unwrap();
    assert_eq!(req.repr.feth, Some(0x11));
    assert_eq!(p.a.counters().icrc_err + p.b.counters().icrc_err, 0);
}

#[test]
fn flush_without_region_access_is_remote_access_error() {
    let mut p = flush_pair();
    let acc = ALL_ACCESS | AccessFlags::FLUSH_GLOBAL;
    let mr = p.b.hca.reg_mr(p.b.pd, 8192, acc).unwrap();
    // persistence asked, region only allows global visibility
    let wc = flush(&mut p, mr.addr, mr.rkey, 64, 2, 0);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_RDMA_READ_RESPONSE_ONLY), 0);
    p.reconnect();
    // the test pair's default region has no flush right at all
    let (va, rkey) = (p.b.addr(0), p.b.mr.rkey);
    let wc = flush(&mut p, va, rkey, 64, 1, 0);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    p.reconnect();
    // beyond the region
    let wc = flush(&mut p, mr.addr + 8000, mr.rkey, 400, 1, 0);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
}

#[test]
fn flush_on_a_qp_without_flush_access_is_rejected() {
    let mut p = Pair::new();
    let acc = ALL_ACCESS | AccessFlags::FLUSH_GLOBAL;
    let mr = p.b.hca.reg_mr(p.b.pd, 8192, acc).unwrap();
    let wc = flush(&mut p, mr.addr, mr.rkey, 64, 1, 0);
    assert_eq!(wc[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn atomic_write_of_wrong_size_on_the_wire_is_nakked() {
    for n in [7usize, 9] {
        let mut p = Pair::new();
        p.b.write_mem(0, &[0x55; 16]);
        let ep = p.a_qp_endpoints();
        p.a.write_mem(0, &1u64.to_le_bytes());
        let wr = p.one_sided(3, WrOpcode::AtomicWrite, 0, 8, 0);
        p.a.post(wr);
        p.run_with(Instant::from_millis(1000), |_, s| {
            if s.dir == Dir::AtoB && s.opcode == Opcode::RC_ATOMIC_WRITE {
                let mut r = s.repr;
                r.payload_len = n;
                r.bth.pad_count = ((4 - n % 4) % 4) as u8;
                Action::Replace(PacketBuilder::endpoints(ep).bytes(&r, &vec![0xAA; n]))
            } else {
                Action::Deliver
            }
        });
        let wc = p.a.poll();
        assert_eq!(wc[0].status, WcStatus::RemInvReqErr, "{n} bytes");
        assert_eq!(p.b.read_mem(0, 16), vec![0x55; 16]);
        assert_eq!(p.b.counters().icrc_err, 0);
        let nak = p.trace.iter().find(|s| s.dir == Dir::BtoA).unwrap();
        assert_eq!(nak.opcode, Opcode::RC_ACKNOWLEDGE);
    }
}
