//! Memory windows: type 1 and type 2 binds, access through window rkeys,
//! PD checks, rkey rotation and invalidation.

use roce_emulator::*;
use roce_packet::{Opcode, RKey};
use roce_sim::testkit::*;

const RW: AccessFlags = AccessFlags(AccessFlags::REMOTE_READ.0 | AccessFlags::REMOTE_WRITE.0);

/// B registers a bindable region; returns it.
fn bindable(p: &mut Pair) -> MrInfo {
    let acc = ALL_ACCESS | AccessFlags::MW_BIND;
    p.b.hca.reg_mr(p.b.pd, 1 << 16, acc).unwrap()
}

/// A writes `data` to B at `va` through `rkey`; returns A's completions.
fn write(p: &mut Pair, va: u64, rkey: RKey, data: &[u8]) -> Vec<WorkCompletion> {
    p.a.write_mem(0, data);
    let wr = SendWr::new(7, WrOpcode::RdmaWrite)
        .sge(p.a.addr(0), data.len() as u32, p.a.mr.lkey)
        .remote(va, rkey);
    p.run_wr(wr)
}

/// B binds type 1 window `mw` with `ibv_bind_mw` (signalled, wr_id 900),
/// lets the send queue run it and checks its BIND_MW completion.
fn bind1(p: &mut Pair, mw: MwHandle, bind: MwBind) -> RKey {
    let wr = MwBindWr { wr_id: 900, send_flags: SendFlags::SIGNALED, bind };
    let rkey = p.b.hca.bind_mw(p.b.qpn, mw, wr).unwrap();
    p.run();
    let wc = p.b.poll();
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (900, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rkey));
    rkey
}

/// B posts a BIND_MW work request (wr_id 901) for `mw` with `rkey`;
/// returns its completion.
fn bind_wr(p: &mut Pair, mw: MwHandle, rkey: RKey, bind: MwBind) -> WorkCompletion {
    p.b.hca.post_send(p.b.qpn, SendWr::new(901, WrOpcode::BindMw { mw, rkey, bind })).unwrap();
    p.run();
    let wc = p.b.poll();
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!((wc[0].wr_id, wc[0].opcode), (901, WcOpcode::BindMw));
    wc[0]
}

/// `rk` with key byte `key` (a type 2 bind's new rkey).
fn key(rk: RKey, key: u8) -> RKey {
    RKey::new((rk.value() & !0xFF) | u32::from(key))
}

/// A reads `len` bytes of B at `va` through `rkey` into its offset 4096.
fn read(p: &mut Pair, va: u64, rkey: RKey, len: u32) -> Vec<WorkCompletion> {
    let wr =
        SendWr::new(8, WrOpcode::RdmaRead).sge(p.a.addr(4096), len, p.a.mr.lkey).remote(va, rkey);
    p.run_wr(wr)
}

#[test]
fn type1_bind_then_write_and_read_through_window() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, rkey0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let bind = MwBind { mr: mr.handle, addr: mr.addr + 1024, length: 512, access: RW };
    let rkey = bind1(&mut p, mw, bind);
    // rkey rotation: same index, next key byte
    assert_eq!(rkey.value() & !0xFF, rkey0.value() & !0xFF);
    assert_eq!(rkey.value() & 0xFF, (rkey0.value() + 1) & 0xFF);
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rkey));
    assert_ne!(rkey, mr.rkey);

    let data = pattern(256, 3);
    let wc = write(&mut p, mr.addr + 1024 + 100, rkey, &data);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut got = vec![0; 256];
    p.b.hca.mr_read(mr.handle, 1124, &mut got).unwrap();
    assert_eq!(got, data);
    let reth = p.trace.iter().find(|s| s.opcode == Opcode::RC_RDMA_WRITE_ONLY).unwrap();
    assert_eq!(reth.repr.reth.unwrap().rkey, rkey);

    let wc = read(&mut p, mr.addr + 1024 + 100, rkey, 256);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(p.a.read_mem(4096, 256), data);
}

#[test]
fn access_beyond_the_window_is_remote_access_error() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let bind = MwBind { mr: mr.handle, addr: mr.addr + 1024, length: 512, access: RW };
    let rkey = bind1(&mut p, mw, bind);
    // last byte inside, one past the end outside
    let wc = write(&mut p, mr.addr + 1024 + 500, rkey, &[1; 12]);
    assert_eq!(wc[0].status, WcStatus::Success);
    let wc = write(&mut p, mr.addr + 1024 + 500, rkey, &[1; 13]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.count(Dir::BtoA, Opcode::RC_ACKNOWLEDGE), 2);
    let mut got = vec![0; 13];
    p.b.hca.mr_read(mr.handle, 1524, &mut got).unwrap();
    assert_eq!(got, [1; 12].iter().copied().chain([0]).collect::<Vec<u8>>());
}

#[test]
fn window_access_rights_are_checked() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let bind =
        MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: AccessFlags::REMOTE_READ };
    let rkey = bind1(&mut p, mw, bind);
    let wc = read(&mut p, mr.addr, rkey, 64);
    assert_eq!(wc[0].status, WcStatus::Success);
    p.reconnect();
    let wc = write(&mut p, mr.addr, rkey, &[9; 8]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
}

/// B's bind fails when it executes: MW_BIND_ERR, QP in ERR, window
/// unchanged; then the pair is reconnected.
fn expect_bind_err(p: &mut Pair, mw: MwHandle, wc: WorkCompletion, rkey_before: RKey) {
    assert_eq!(wc.status, WcStatus::MwBindErr);
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Err));
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rkey_before));
    p.reconnect();
}

/// Type 1 bind through `bind_mw` that fails when executed.
fn bind1_err(p: &mut Pair, mw: MwHandle, b: MwBind) {
    let before = p.b.hca.mw_rkey(mw).unwrap();
    let wr = MwBindWr { wr_id: 902, send_flags: SendFlags::EMPTY, bind: b };
    p.b.hca.bind_mw(p.b.qpn, mw, wr).unwrap();
    p.run();
    let wc = p.b.poll();
    // errors complete even when unsignalled
    assert_eq!((wc.len(), wc[0].wr_id, wc[0].opcode), (1, 902, WcOpcode::BindMw));
    expect_bind_err(p, mw, wc[0], before);
}

#[test]
fn bind_checks_pd_mw_bind_and_range() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let other_pd = p.b.hca.alloc_pd().unwrap();
    let mr2 = p.b.hca.reg_mr(other_pd, 4096, ALL_ACCESS | AccessFlags::MW_BIND).unwrap();
    let b2 = MwBind { mr: mr2.handle, addr: mr2.addr, length: 64, access: RW };
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 64, access: RW };
    // type 1, window and region in one PD but not the QP's: MW_BIND_ERR
    let (mw, _) = p.b.hca.alloc_mw(other_pd, MwType::Type1).unwrap();
    bind1_err(&mut p, mw, b2);
    // type 1, window and region in different PDs: refused by the verb (as rxe's provider)
    let wr = MwBindWr { wr_id: 1, send_flags: SendFlags::SIGNALED, bind: b };
    assert_eq!(p.b.hca.bind_mw(p.b.qpn, mw, wr), Err(MwError::PdMismatch));
    // type 2: window in another PD than the QP
    let (mw2, rk) = p.b.hca.alloc_mw(other_pd, MwType::Type2).unwrap();
    let wc = bind_wr(&mut p, mw2, key(rk, 1), b);
    expect_bind_err(&mut p, mw2, wc, rk);
    // type 2: region in another PD than QP and window (rxe missed this check)
    let (mw2, rk) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let wc = bind_wr(&mut p, mw2, key(rk, 1), b2);
    expect_bind_err(&mut p, mw2, wc, rk);
    assert_eq!(p.b.counters().mw_bind_err, 3);

    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    // region without MW_BIND
    let plain = MwBind { mr: p.b.mr.handle, addr: p.b.mr.addr, length: 64, access: RW };
    bind1_err(&mut p, mw, plain);
    // outside the region
    bind1_err(&mut p, mw, MwBind { addr: mr.addr + (1 << 16) - 8, length: 9, ..b });
    // remote write on a region without LOCAL_WRITE
    let ro = p.b.hca.reg_mr(p.b.pd, 4096, AccessFlags::REMOTE_READ | AccessFlags::MW_BIND).unwrap();
    bind1_err(&mut p, mw, MwBind { mr: ro.handle, addr: ro.addr, length: 64, access: RW });
    // not a window right (LOCAL_WRITE is tolerated and ignored, as rxe)
    bind1_err(&mut p, mw, MwBind { access: RW | AccessFlags::ZERO_BASED, ..b });
    // wrong verb for the type: type 2 through bind_mw is refused at once
    let (mw2, rk2) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let wr = MwBindWr { wr_id: 1, send_flags: SendFlags::SIGNALED, bind: b };
    assert_eq!(p.b.hca.bind_mw(p.b.qpn, mw2, wr), Err(MwError::WrongType(MwType::Type2)));
    // ... and type 1 through a posted BIND_MW completes with MW_BIND_ERR
    let rk1 = p.b.hca.mw_rkey(mw).unwrap();
    let wc = bind_wr(&mut p, mw, key(rk1, rk1.value() as u8 ^ 1), b);
    expect_bind_err(&mut p, mw, wc, rk1);
    // type 2: the rkey index must stay
    let wc = bind_wr(&mut p, mw2, RKey::new(rk2.value() ^ 0x100), b);
    expect_bind_err(&mut p, mw2, wc, rk2);
    // type 2: zero length is not a bind (o10-37.2.40)
    let wc = bind_wr(&mut p, mw2, key(rk2, 7), MwBind { length: 0, ..b });
    expect_bind_err(&mut p, mw2, wc, rk2);
    let c = p.b.counters();
    assert_eq!((c.mw_bind, c.mw_bind_err), (0, 10), "{c}");
    // none of the failed windows gives access
    for rk in [rk1, rk2] {
        let wc = write(&mut p, mr.addr, rk, &[1; 8]);
        assert_eq!(wc[0].status, WcStatus::RemAccessErr);
        p.reconnect();
    }
    let mut got = vec![0; 8];
    p.b.hca.mr_read(mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, vec![0; 8]);
}

#[test]
fn bind_mw_waits_for_earlier_work_requests_and_honours_signalling() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, rk0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 256, access: RW };
    // a SEND first, then the bind: the bind runs only once the SEND is acknowledged
    p.a.post_recv(1, 0, 64);
    p.b.send(10, 0, 32);
    let wr = MwBindWr { wr_id: 11, send_flags: SendFlags::SIGNALED, bind: b };
    let rk1 = p.b.hca.bind_mw(p.b.qpn, mw, wr).unwrap();
    assert_eq!(rk1, key(rk0, (rk0.value() as u8).wrapping_add(1)));
    let send = p.b.hca.poll_transmit(p.now).expect("the SEND leaves");
    assert!(p.b.hca.poll_transmit(p.now).is_none(), "the bind sends nothing");
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rk0), "not bound before the SEND completes");
    assert_eq!(p.b.counters().mw_bind, 0);
    p.a.hca.handle_datagram(p.now, send);
    p.run();
    let wc: Vec<_> = p.b.poll().iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        wc,
        vec![(10, WcStatus::Success, WcOpcode::Send), (11, WcStatus::Success, WcOpcode::BindMw)]
    );
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rk1));
    // unsignalled: no completion, still executed (and the key byte advances again)
    let wr = MwBindWr { wr_id: 12, send_flags: SendFlags::EMPTY, bind: b };
    let rk2 = p.b.hca.bind_mw(p.b.qpn, mw, wr).unwrap();
    p.run();
    assert!(p.b.poll().is_empty());
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rk2));
    assert_eq!(rk2, key(rk0, (rk0.value() as u8).wrapping_add(2)));
    let wc = write(&mut p, mr.addr + 8, rk2, &[7; 8]);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(p.b.counters().mw_bind, 2);
    // a zero-length bind unbinds a type 1 window
    let wr = MwBindWr { wr_id: 13, send_flags: SendFlags::EMPTY, bind: MwBind { length: 0, ..b } };
    let rk3 = p.b.hca.bind_mw(p.b.qpn, mw, wr).unwrap();
    p.run();
    let wc = write(&mut p, mr.addr + 8, rk3, &[8; 8]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    let mut got = vec![0; 8];
    p.b.hca.mr_read(mr.handle, 8, &mut got).unwrap();
    assert_eq!(got, vec![7; 8]);
    // posting on a QP that cannot take work fails at once
    p.b.hca.modify_qp(p.b.qpn, &QpAttr::new().state(QpState::Reset)).unwrap();
    let wr = MwBindWr { wr_id: 14, send_flags: SendFlags::SIGNALED, bind: b };
    assert!(matches!(p.b.hca.bind_mw(p.b.qpn, mw, wr), Err(MwError::Post(_))));
    assert_eq!(p.b.counters().mw_bind, 3);
}

/// A second RC connection between the same two HCAs; returns (qpn on A, qpn on B).
fn second_connection(p: &mut Pair) -> (roce_packet::Qpn, roce_packet::Qpn) {
    let (qa, qb) = (p.a.rc_qp(64, 64, false, None), p.b.rc_qp(64, 64, false, None));
    let (ip_a, ip_b) = (p.a.hca.addr(), p.b.hca.addr());
    rc_up(&mut p.a.hca, qa, ip_b, qb, (0x500, 0x500), 4);
    rc_up(&mut p.b.hca, qb, ip_a, qa, (0x500, 0x500), 4);
    (qa, qb)
}

#[test]
fn type2_window_answers_only_on_its_qp() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (qa2, qb2) = second_connection(&mut p);
    let (mw, rk0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let k = key(rk0, 0x33);
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: RW };
    assert_eq!(bind_wr(&mut p, mw, k, b).status, WcStatus::Success);
    // a type 1 window in the same PD works on either connection
    let (mw1, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let k1 = bind1(&mut p, mw1, MwBind { addr: mr.addr + 8192, ..b });
    // the bound QP: fine
    let wc = write(&mut p, mr.addr, k, &[0x11; 16]);
    assert_eq!(wc[0].status, WcStatus::Success);
    // the same rkey on the other connection (same PD): remote access error
    p.a.write_mem(64, &[0x22; 16]);
    for (id, rkey, va) in [(70, k1, mr.addr + 8192), (71, k, mr.addr)] {
        let wr = SendWr::new(id, WrOpcode::RdmaWrite)
            .sge(p.a.addr(64), 16, p.a.mr.lkey)
            .remote(va, rkey);
        p.a.hca.post_send(qa2, wr).unwrap();
        p.run();
    }
    let wc: Vec<_> = p.a.poll().iter().map(|w| (w.wr_id, w.status, w.qp_num)).collect();
    assert_eq!(
        wc,
        vec![(70, WcStatus::Success, qa2.value()), (71, WcStatus::RemAccessErr, qa2.value())]
    );
    let nak = p.trace.iter().rev().find(|s| s.dir == Dir::BtoA).unwrap();
    assert_eq!(nak.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(
        nak.repr.aeth.unwrap().syndrome,
        roce_packet::Syndrome::Nak(roce_packet::NakCode::RemoteAccessError)
    );
    assert_eq!(p.b.hca.qp_state(qb2), Some(QpState::Err));
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Rts));
    let mut got = vec![0; 16];
    p.b.hca.mr_read(mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, vec![0x11; 16], "the refused write left memory alone");
    p.b.hca.mr_read(mr.handle, 8192, &mut got).unwrap();
    assert_eq!(got, vec![0x22; 16]);
    // the bound QP still works; READ through the window too
    let wc = read(&mut p, mr.addr, k, 16);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(p.a.read_mem(4096, 16), vec![0x11; 16]);
}

#[test]
fn type1_rebind_rotates_rkey_old_one_fails() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: RW };
    let old = bind1(&mut p, mw, b);
    let new = bind1(&mut p, mw, b);
    assert_ne!(old, new);
    let wc = write(&mut p, mr.addr, new, &[5; 16]);
    assert_eq!(wc[0].status, WcStatus::Success);
    let wc = write(&mut p, mr.addr, old, &[6; 16]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    let mut got = vec![0; 16];
    p.b.hca.mr_read(mr.handle, 0, &mut got).unwrap();
    assert_eq!(got, vec![5; 16]);
}

#[test]
fn type2_bind_rotation_and_local_invalidate() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, rk0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let b = MwBind { mr: mr.handle, addr: mr.addr + 8192, length: 4096, access: RW };
    let k1 = RKey::new((rk0.value() & !0xFF) | 0x5A);
    assert_eq!(bind_wr(&mut p, mw, k1, b).status, WcStatus::Success);
    assert_eq!(p.b.hca.mw_rkey(mw), Some(k1));
    // bound: not free
    let wc = bind_wr(&mut p, mw, key(k1, 0x60), b);
    expect_bind_err(&mut p, mw, wc, k1);
    let wc = write(&mut p, mr.addr + 8192, k1, &[0xAB; 32]);
    assert_eq!(wc[0].status, WcStatus::Success);
    // type 1 windows cannot be invalidated
    let (mw1, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let r1 = bind1(&mut p, mw1, b);
    assert_eq!(p.b.hca.local_invalidate(p.b.qpn, r1), Err(MwError::WrongType(MwType::Type1)));
    // invalidate, then remote use fails
    p.b.hca.local_invalidate(p.b.qpn, k1).unwrap();
    let wc = write(&mut p, mr.addr + 8192, k1, &[0xCD; 32]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    p.reconnect();
    // rebind with a rotated key: old key still fails, new works
    let k2 = RKey::new((rk0.value() & !0xFF) | 0x5B);
    assert_eq!(bind_wr(&mut p, mw, k2, b).status, WcStatus::Success);
    let wc = write(&mut p, mr.addr + 8192, k1, &[0xCD; 32]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    p.reconnect();
    let wc = write(&mut p, mr.addr + 8192, k2, &[0xEF; 32]);
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut got = vec![0; 32];
    p.b.hca.mr_read(mr.handle, 8192, &mut got).unwrap();
    assert_eq!(got, vec![0xEF; 32]);
}

#[test]
fn invalidating_an_mr_rkey_blocks_remote_access() {
    let mut p = Pair::new();
    let rkey = p.b.mr.rkey;
    let va = p.b.addr(0);
    let wc = write(&mut p, va, rkey, &[1; 8]);
    assert_eq!(wc[0].status, WcStatus::Success);
    p.b.hca.local_invalidate(p.b.qpn, rkey).unwrap();
    assert_eq!(p.b.hca.local_invalidate(p.b.qpn, rkey), Err(MwError::UnknownRkey(rkey)));
    let wc = write(&mut p, va, rkey, &[2; 8]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.b.read_mem(0, 8), vec![1; 8]);
}

#[test]
fn dealloc_releases_window_and_pd() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let pd2 = p.b.hca.alloc_pd().unwrap();
    let (mw, _) = p.b.hca.alloc_mw(pd2, MwType::Type1).unwrap();
    assert!(p.b.hca.dealloc_pd(pd2).is_err());
    p.b.hca.dealloc_mw(mw).unwrap();
    assert_eq!(p.b.hca.dealloc_mw(mw), Err(MwError::UnknownMw(mw)));
    p.b.hca.dealloc_pd(pd2).unwrap();
    // a deallocated window's rkey gives no access
    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 64, access: RW };
    let rkey = bind1(&mut p, mw, b);
    p.b.hca.dealloc_mw(mw).unwrap();
    let wc = write(&mut p, mr.addr, rkey, &[1; 8]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
}

#[test]
fn send_with_invalidate_carries_ieth_and_invalidates() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, rk0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let k = RKey::new((rk0.value() & !0xFF) | 0x11);
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: RW };
    assert_eq!(bind_wr(&mut p, mw, k, b).status, WcStatus::Success);
    // a two-packet SEND_WITH_INV: FIRST then LAST_WITH_INVALIDATE
    p.b.post_recv(1, 0, 4096);
    let data = pattern(1500, 4);
    p.a.write_mem(0, &data);
    let wr = SendWr::new(2, WrOpcode::SendWithInv { invalidate_rkey: k }).sge(
        p.a.addr(0),
        1500,
        p.a.mr.lkey,
    );
    p.a.post(wr);
    p.run();
    let ops: Vec<Opcode> =
        p.trace.iter().filter(|s| s.dir == Dir::AtoB).map(|s| s.opcode).collect();
    assert_eq!(ops, vec![Opcode::RC_SEND_FIRST, Opcode::RC_SEND_LAST_WITH_INVALIDATE]);
    assert_eq!(p.trace.iter().find(|s| s.dir == Dir::AtoB).unwrap().repr.ieth, None);
    let last = p.trace.iter().find(|s| s.opcode == Opcode::RC_SEND_LAST_WITH_INVALIDATE).unwrap();
    assert_eq!(last.repr.ieth, Some(k));
    let wa = p.a.poll();
    assert_eq!((wa[0].status, wa[0].opcode), (WcStatus::Success, WcOpcode::Send));
    let wb = p.b.poll();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].status, wb[0].opcode, wb[0].byte_len),
        (WcStatus::Success, WcOpcode::Recv, 1500)
    );
    assert!(wb[0].wc_flags.contains(WcFlags::WITH_INV));
    assert!(!wb[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(wb[0].imm, Some(k.value()));
    assert_eq!(p.b.read_mem(0, 1500), data);
    assert_eq!(p.a.counters().icrc_err + p.b.counters().icrc_err, 0);
    // the window is free again: remote use fails, a new bind works
    let wc = write(&mut p, mr.addr, k, &[1; 8]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    let k2 = RKey::new((rk0.value() & !0xFF) | 0x12);
    p.reconnect();
    assert_eq!(bind_wr(&mut p, mw, k2, b).status, WcStatus::Success);
    let c = p.b.counters();
    assert_eq!((c.mw_bind, c.mw_invalidate, c.mw_invalidate_err), (2, 1, 0), "{c}");
}

#[test]
fn send_with_invalidate_of_unknown_rkey_is_rem_inv_req() {
    let mut p = Pair::new();
    p.b.post_recv(1, 0, 64);
    let bogus = RKey::new(0xDEAD_BE00);
    let wr = SendWr::new(2, WrOpcode::SendWithInv { invalidate_rkey: bogus }).inline(b"hello");
    p.a.post(wr);
    p.run();
    let last = p.trace.iter().find(|s| s.opcode == Opcode::RC_SEND_ONLY_WITH_INVALIDATE).unwrap();
    assert_eq!(last.repr.ieth, Some(bogus));
    let wa = p.a.poll();
    assert_eq!(wa[0].status, WcStatus::RemInvReqErr);
    let wb = p.b.poll();
    assert_eq!(wb[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn bind_mw_and_local_inv_work_requests() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, rk0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    let k = RKey::new((rk0.value() & !0xFF) | 0x77);
    let bind = MwBind { mr: mr.handle, addr: mr.addr + 4096, length: 1024, access: RW };
    let wr = SendWr::new(40, WrOpcode::BindMw { mw, rkey: k, bind });
    p.b.hca.post_send(p.b.qpn, wr).unwrap();
    p.run();
    let wb = p.b.poll();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].opcode),
        (40, WcStatus::Success, WcOpcode::BindMw)
    );
    assert_eq!(p.b.hca.mw_rkey(mw), Some(k));
    assert!(p.trace.is_empty(), "local operations send nothing");
    let wc = write(&mut p, mr.addr + 4096, k, &[3; 64]);
    assert_eq!(wc[0].status, WcStatus::Success);
    // LOCAL_INV behind a SEND runs after it, in order
    p.a.post_recv(1, 0, 64);
    p.b.send(41, 0, 16);
    p.b.hca.post_send(p.b.qpn, SendWr::new(42, WrOpcode::LocalInv { rkey: k })).unwrap();
    p.run();
    let wb = p.b.poll();
    let got: Vec<(u64, WcStatus, WcOpcode)> =
        wb.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        vec![(41, WcStatus::Success, WcOpcode::Send), (42, WcStatus::Success, WcOpcode::LocalInv)]
    );
    let wa = p.a.poll();
    assert_eq!((wa[0].wr_id, wa[0].opcode, wa[0].byte_len), (1, WcOpcode::Recv, 16));
    let wc = write(&mut p, mr.addr + 4096, k, &[4; 64]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    let mut got = vec![0; 64];
    p.b.hca.mr_read(mr.handle, 4096, &mut got).unwrap();
    assert_eq!(got, vec![3; 64]);
    let c = p.b.counters();
    assert_eq!((c.mw_bind, c.mw_bind_err, c.mw_invalidate), (1, 0, 1), "{c}");
}

#[test]
fn bind_mw_work_request_across_pds_completes_with_mw_bind_err() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let other = p.b.hca.alloc_pd().unwrap();
    let (mw, rk0) = p.b.hca.alloc_mw(other, MwType::Type2).unwrap();
    let k = RKey::new((rk0.value() & !0xFF) | 0x01);
    let bind = MwBind { mr: mr.handle, addr: mr.addr, length: 64, access: RW };
    p.b.hca.post_send(p.b.qpn, SendWr::new(50, WrOpcode::BindMw { mw, rkey: k, bind })).unwrap();
    p.run();
    let wb = p.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].status), (50, WcStatus::MwBindErr));
    assert_eq!(p.b.hca.qp_state(p.b.qpn), Some(QpState::Err));
    assert_eq!(p.b.hca.mw_rkey(mw), Some(rk0));
}

#[test]
fn local_inv_of_unknown_rkey_is_loc_qp_op_err() {
    let mut p = Pair::new();
    let bogus = RKey::new(0x00AB_CD00);
    p.b.hca.post_send(p.b.qpn, SendWr::new(60, WrOpcode::LocalInv { rkey: bogus })).unwrap();
    p.run();
    let wb = p.b.poll();
    assert_eq!((wb[0].wr_id, wb[0].status), (60, WcStatus::LocQpOpErr));
    let c = p.b.counters();
    assert_eq!((c.mw_invalidate, c.mw_invalidate_err), (0, 1));
}
