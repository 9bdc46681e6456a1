//! Counters of FLUSH and memory-window operations (`flush_ops`,
//! `flush_err`, `mw_bind`, `mw_bind_err`, `mw_invalidate`,
//! `mw_invalidate_err`): each operation bumps exactly one of them.

use roce_emulator::*;
use roce_sim::testkit::*;

fn flush_pair() -> Pair {
    let o = Opts {
        qp_access: ALL_ACCESS | AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT,
        ..Opts::default()
    };
    Pair::with(o)
}

fn flush(p: &mut Pair, mr: &MrInfo, len: u32, placement: u8) -> WcStatus {
    let wr = SendWr::new(5, WrOpcode::Flush { len, placement, level: 0 }).remote(mr.addr, mr.rkey);
    let wc = p.run_wr(wr);
    assert_eq!(wc.len(), 1);
    wc[0].status
}

#[test]
fn flush_ops_and_flush_err_count_executed_and_refused_flushes() {
    let mut p = flush_pair();
    let acc = ALL_ACCESS | AccessFlags::FLUSH_GLOBAL;
    let mr = p.b.hca.reg_mr(p.b.pd, 8192, acc).unwrap();
    assert_eq!(flush(&mut p, &mr, 100, 1), WcStatus::Success);
    assert_eq!(flush(&mut p, &mr, 8192, 1), WcStatus::Success);
    let c = p.b.counters();
    assert_eq!((c.flush_ops, c.flush_err), (2, 0));
    // persistence on a region that only allows global visibility: refused
    assert_eq!(flush(&mut p, &mr, 100, 2), WcStatus::RemAccessErr);
    p.reconnect();
    // beyond the region: refused
    assert_eq!(flush(&mut p, &mr, 8193, 1), WcStatus::RemAccessErr);
    let c = p.b.counters();
    assert_eq!((c.flush_ops, c.flush_err, c.naks_sent), (2, 2, 2), "{c}");
    // the requester side counts nothing of these
    let a = p.a.counters();
    assert_eq!((a.flush_ops, a.flush_err), (0, 0));
}

#[test]
fn mw_counters_bind_invalidate_and_their_errors() {
    let mut p = Pair::new();
    let mr = p.b.hca.reg_mr(p.b.pd, 1 << 16, ALL_ACCESS | AccessFlags::MW_BIND).unwrap();
    let rw = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let bind = MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: rw };
    let (mw1, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let (mw2, rk2) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let k2 = roce_packet::RKey::new((rk2.value() & !0xFF) | 0x42);
    let wr1 = MwBindWr { wr_id: 1, send_flags: SendFlags::EMPTY, bind };
    let r1 = p.b.hca.bind_mw(p.b.qpn, mw1, wr1).unwrap();
    p.b.hca
        .post_send(p.b.qpn, SendWr::new(2, WrOpcode::BindMw { mw: mw2, rkey: k2, bind }))
        .unwrap();
    p.b.hca.post_send(p.b.qpn, SendWr::new(3, WrOpcode::LocalInv { rkey: k2 })).unwrap();
    p.run();
    let wc: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        wc,
        vec![(2, WcStatus::Success, WcOpcode::BindMw), (3, WcStatus::Success, WcOpcode::LocalInv)]
    );
    let c = p.b.counters();
    assert_eq!((c.mw_bind, c.mw_bind_err, c.mw_invalidate, c.mw_invalidate_err), (2, 0, 1, 0));
    // a type 1 window cannot be invalidated: LOC_QP_OP_ERR, counted as an error
    p.b.hca.post_send(p.b.qpn, SendWr::new(4, WrOpcode::LocalInv { rkey: r1 })).unwrap();
    p.run();
    assert_eq!(p.b.poll()[0].status, WcStatus::LocQpOpErr);
    p.reconnect();
    // the direct verb counts too
    assert!(p.b.hca.local_invalidate(p.b.qpn, r1).is_err());
    p.b.hca.local_invalidate(p.b.qpn, mr.rkey).unwrap();
    // a bind that fails (outside the region)
    let bad = MwBind { addr: mr.addr + (1 << 16), ..bind };
    p.b.hca
        .post_send(p.b.qpn, SendWr::new(5, WrOpcode::BindMw { mw: mw2, rkey: k2, bind: bad }))
        .unwrap();
    p.run();
    assert_eq!(p.b.poll()[0].status, WcStatus::MwBindErr);
    let c = p.b.counters();
    assert_eq!((c.mw_bind, c.mw_bind_err, c.mw_invalidate, c.mw_invalidate_err), (2, 1, 2, 2));
    for name in
        ["mw_bind", "mw_bind_err", "mw_invalidate", "mw_invalidate_err", "flush_ops", "flush_err"]
    {
        assert!(c.get(name).is_some(), "{name} is listed");
    }
    assert_eq!(p.a.counters().mw_bind + p.a.counters().mw_invalidate, 0);
}
