//! Memory windows: type 1 and type 2 binds, access through window rkeys,
//! PD checks, rkey rotation and invalidation.

mod common;
use common::*;
use roce_emulator::*;
use roce_packet::{Opcode, RKey};

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
    p.a.hca.post_send(p.a.qpn, wr).unwrap();
    p.run();
    p.a.poll()
}

/// A reads `len` bytes of B at `va` through `rkey` into its offset 4096.
fn read(p: &mut Pair, va: u64, rkey: RKey, len: u32) -> Vec<WorkCompletion> {
    let wr =
        SendWr::new(8, WrOpcode::RdmaRead).sge(p.a.addr(4096), len, p.a.mr.lkey).remote(va, rkey);
    p.a.hca.post_send(p.a.qpn, wr).unwrap();
    p.run();
    p.a.poll()
}

#[test]
fn type1_bind_then_write_and_read_through_window() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, rkey0) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let bind = MwBind { mr: mr.handle, addr: mr.addr + 1024, length: 512, access: RW };
    let rkey = p.b.hca.bind_mw(p.b.qpn, mw, bind).unwrap();
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
    let rkey = p.b.hca.bind_mw(p.b.qpn, mw, bind).unwrap();
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
    let rkey = p.b.hca.bind_mw(p.b.qpn, mw, bind).unwrap();
    let wc = read(&mut p, mr.addr, rkey, 64);
    assert_eq!(wc[0].status, WcStatus::Success);
    p.reconnect();
    let wc = write(&mut p, mr.addr, rkey, &[9; 8]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
}

#[test]
fn bind_checks_pd_mw_bind_and_range() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let other_pd = p.b.hca.alloc_pd().unwrap();
    // window in another PD than the QP (both types)
    for ty in [MwType::Type1, MwType::Type2] {
        let (mw, rk) = p.b.hca.alloc_mw(other_pd, ty).unwrap();
        let b = MwBind { mr: mr.handle, addr: mr.addr, length: 64, access: RW };
        let r = match ty {
            MwType::Type1 => p.b.hca.bind_mw(p.b.qpn, mw, b),
            MwType::Type2 => p.b.hca.bind_mw_type2(p.b.qpn, mw, RKey::new(rk.value() ^ 1), b),
        };
        assert_eq!(r, Err(MwError::PdMismatch), "{ty:?}");
    }
    // region in another PD than the QP and window (rxe missed this check)
    let mr2 = p.b.hca.reg_mr(other_pd, 4096, ALL_ACCESS | AccessFlags::MW_BIND).unwrap();
    for ty in [MwType::Type1, MwType::Type2] {
        let (mw, rk) = p.b.hca.alloc_mw(p.b.pd, ty).unwrap();
        let b = MwBind { mr: mr2.handle, addr: mr2.addr, length: 64, access: RW };
        let r = match ty {
            MwType::Type1 => p.b.hca.bind_mw(p.b.qpn, mw, b),
            MwType::Type2 => p.b.hca.bind_mw_type2(p.b.qpn, mw, RKey::new(rk.value() ^ 1), b),
        };
        assert_eq!(r, Err(MwError::PdMismatch), "{ty:?}");
        // the rkey did not change and gives no access
        assert_eq!(p.b.hca.mw_rkey(mw), Some(rk));
    }
    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    // region without MW_BIND
    let b = MwBind { mr: p.b.mr.handle, addr: p.b.mr.addr, length: 64, access: RW };
    assert_eq!(p.b.hca.bind_mw(p.b.qpn, mw, b), Err(MwError::MrNotBindable));
    // outside the region
    let b = MwBind { mr: mr.handle, addr: mr.addr + (1 << 16) - 8, length: 9, access: RW };
    assert!(matches!(p.b.hca.bind_mw(p.b.qpn, mw, b), Err(MwError::OutOfBounds { .. })));
    // remote write on a region without LOCAL_WRITE
    let ro = p.b.hca.reg_mr(p.b.pd, 4096, AccessFlags::REMOTE_READ | AccessFlags::MW_BIND).unwrap();
    let b = MwBind { mr: ro.handle, addr: ro.addr, length: 64, access: RW };
    assert!(matches!(p.b.hca.bind_mw(p.b.qpn, mw, b), Err(MwError::BadAccess(_))));
    // wrong verb for the type
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 64, access: RW };
    let (mw2, rk2) = p.b.hca.alloc_mw(p.b.pd, MwType::Type2).unwrap();
    assert_eq!(p.b.hca.bind_mw(p.b.qpn, mw2, b), Err(MwError::WrongType(MwType::Type2)));
    // type 2: the rkey index must stay
    let bad = RKey::new(rk2.value() ^ 0x100);
    assert!(matches!(
        p.b.hca.bind_mw_type2(p.b.qpn, mw2, bad, b),
        Err(MwError::BadRkeyIndex { .. })
    ));
}

#[test]
fn type1_rebind_rotates_rkey_old_one_fails() {
    let mut p = Pair::new();
    let mr = bindable(&mut p);
    let (mw, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let b = MwBind { mr: mr.handle, addr: mr.addr, length: 4096, access: RW };
    let old = p.b.hca.bind_mw(p.b.qpn, mw, b).unwrap();
    let new = p.b.hca.bind_mw(p.b.qpn, mw, b).unwrap();
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
    assert_eq!(p.b.hca.bind_mw_type2(p.b.qpn, mw, k1, b), Ok(k1));
    // bound: not free
    assert_eq!(p.b.hca.bind_mw_type2(p.b.qpn, mw, k1, b), Err(MwError::NotFree));
    let wc = write(&mut p, mr.addr + 8192, k1, &[0xAB; 32]);
    assert_eq!(wc[0].status, WcStatus::Success);
    // type 1 windows cannot be invalidated
    let (mw1, _) = p.b.hca.alloc_mw(p.b.pd, MwType::Type1).unwrap();
    let r1 = p.b.hca.bind_mw(p.b.qpn, mw1, b).unwrap();
    assert_eq!(p.b.hca.local_invalidate(p.b.qpn, r1), Err(MwError::WrongType(MwType::Type1)));
    // invalidate, then remote use fails
    p.b.hca.local_invalidate(p.b.qpn, k1).unwrap();
    let wc = write(&mut p, mr.addr + 8192, k1, &[0xCD; 32]);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    p.reconnect();
    // rebind with a rotated key: old key still fails, new works
    let k2 = RKey::new((rk0.value() & !0xFF) | 0x5B);
    p.b.hca.bind_mw_type2(p.b.qpn, mw, k2, b).unwrap();
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
    let rkey = p.b.hca.bind_mw(p.b.qpn, mw, b).unwrap();
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
    p.b.hca.bind_mw_type2(p.b.qpn, mw, k, b).unwrap();
    // a two-packet SEND_WITH_INV: FIRST then LAST_WITH_INVALIDATE
    p.b.post_recv(1, 0, 4096);
    let data = pattern(1500, 4);
    p.a.write_mem(0, &data);
    let wr = SendWr::new(2, WrOpcode::SendWithInv { invalidate_rkey: k }).sge(
        p.a.addr(0),
        1500,
        p.a.mr.lkey,
    );
    p.a.hca.post_send(p.a.qpn, wr).unwrap();
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
    assert_eq!(p.b.hca.bind_mw_type2(p.b.qpn, mw, k2, b), Ok(k2));
}

#[test]
fn send_with_invalidate_of_unknown_rkey_is_rem_inv_req() {
    let mut p = Pair::new();
    p.b.post_recv(1, 0, 64);
    let bogus = RKey::new(0xDEAD_BE00);
    let wr = SendWr::new(2, WrOpcode::SendWithInv { invalidate_rkey: bogus }).inline(b"hello");
    p.a.hca.post_send(p.a.qpn, wr).unwrap();
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
}
