//! The new post-send API (`ibv_qp_ex`): `ibv_wr_start`, one `ibv_wr_<op>`
//! per request followed by its `ibv_wr_set_*`, then `ibv_wr_complete`
//! (perftest uses it by default). The requests are collected and posted
//! together by `wr_complete`, so they leave in one batch.

use crate::abi;
use crate::qp::{mw_bind_of, QpObj, WrBatch};
use crate::util::guard;
use crate::wr::{inline_bytes, inline_len, sges};
use roce_verbs_api::LKey;
use roce_verbs_api::{RKey, SendFlags, SendWr, Sge, UdDest, WrOpcode};

/// Fill the `wr_*` function pointers of a new QP (QP creation, below this
/// file, calls it through its context: `Ctx::fill_qp_ex`).
pub(crate) fn fill(x: &mut abi::ibv_qp_ex) {
    x.comp_mask = 0;
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_bind_mw = Some(wr_bind_mw);
    x.wr_local_inv = Some(wr_local_inv);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_send_tso = Some(wr_send_tso);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
    x.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_atomic_write = Some(wr_atomic_write);
}

fn with(q: *mut abi::ibv_qp_ex, f: impl FnOnce(&QpObj, &mut WrBatch, u64, u32)) {
    guard((), || {
        // SAFETY: the wr_* pointers are only in QPs this library built; the
        // program reads/writes wr_id and wr_flags from its posting thread.
        let o = unsafe { &*(q as *const QpObj) };
        if crate::fork::inherited(o.gen) {
            return; // a forked child's inherited QP (wr_complete: EIO)
        }
        // SAFETY: as above.
        let (id, flags) = unsafe { ((*q).wr_id, (*q).wr_flags) };
        let mut b = o.wr.lock().unwrap_or_else(|e| e.into_inner());
        f(o, &mut b, id, flags);
    })
}

fn push(q: *mut abi::ibv_qp_ex, op: WrOpcode, f: impl FnOnce(&mut SendWr)) {
    with(q, |_, b, id, flags| {
        let mut w = SendWr::new(id, op).with_flags(SendFlags(flags & 0xf));
        f(&mut w);
        b.list.push(w);
    })
}

/// [`push`] of an operation on remote memory (`rkey`, `addr`).
fn push_remote(
    q: *mut abi::ibv_qp_ex,
    op: WrOpcode,
    rkey: u32,
    addr: u64,
    f: impl FnOnce(&mut SendWr),
) {
    push(q, op, |w| {
        w.remote_addr = addr;
        w.rkey = RKey::new(rkey);
        f(w);
    })
}

fn last(q: *mut abi::ibv_qp_ex, f: impl FnOnce(&QpObj, &mut SendWr) -> Result<(), i32>) {
    with(q, |o, b, _, _| {
        let r = match b.list.last_mut() {
            Some(w) => f(o, w),
            None => Err(libc::EINVAL),
        };
        if let Err(e) = r {
            b.err.get_or_insert(e);
        }
    })
}

unsafe extern "C" fn wr_start(q: *mut abi::ibv_qp_ex) {
    with(q, |_, b, _, _| {
        b.list.clear();
        b.err = None;
    })
}

unsafe extern "C" fn wr_abort(q: *mut abi::ibv_qp_ex) {
    with(q, |_, b, _, _| {
        b.list.clear();
        b.err = None;
    })
}

unsafe extern "C" fn wr_complete(q: *mut abi::ibv_qp_ex) -> libc::c_int {
    let mut rc = libc::EIO;
    with(q, |o, b, _, _| {
        let list = std::mem::take(&mut b.list);
        if let Some(e) = b.err.take() {
            rc = e;
            return;
        }
        rc = match o.qp.post_send_list(list) {
            Ok(_) => 0,
            Err((_, e)) => crate::qp::post_send_err(&e),
        };
    });
    if rc != 0 {
        crate::util::fail(rc);
    }
    rc
}

unsafe extern "C" fn wr_rdma_write(q: *mut abi::ibv_qp_ex, rkey: u32, addr: u64) {
    push_remote(q, WrOpcode::RdmaWrite, rkey, addr, |_| {})
}

unsafe extern "C" fn wr_rdma_write_imm(
    q: *mut abi::ibv_qp_ex,
    rkey: u32,
    addr: u64,
    imm: abi::__be32,
) {
    push_remote(q, WrOpcode::RdmaWriteWithImm, rkey, addr, |w| {
        w.imm = u32::from_be(imm);
    })
}

unsafe extern "C" fn wr_rdma_read(q: *mut abi::ibv_qp_ex, rkey: u32, addr: u64) {
    push_remote(q, WrOpcode::RdmaRead, rkey, addr, |_| {})
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut abi::ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    push_remote(q, WrOpcode::AtomicCmpAndSwp, rkey, addr, |w| {
        w.compare_add = compare;
        w.swap = swap;
    })
}

unsafe extern "C" fn wr_atomic_fetch_add(q: *mut abi::ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    push_remote(q, WrOpcode::AtomicFetchAndAdd, rkey, addr, |w| {
        w.compare_add = add;
    })
}

unsafe extern "C" fn wr_atomic_write(
    q: *mut abi::ibv_qp_ex,
    rkey: u32,
    addr: u64,
    data: *const libc::c_void,
) {
    if data.is_null() {
        with(q, |_, b, _, _| {
            b.err.get_or_insert(libc::EINVAL);
        });
        return;
    }
    // SAFETY: ibv_wr_atomic_write's contract: 8 readable bytes at data.
    let v = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), 8) }.to_vec();
    push_remote(q, WrOpcode::AtomicWrite, rkey, addr, |w| {
        w.inline_data = v;
        w.flags |= SendFlags::INLINE;
    })
}

unsafe extern "C" fn wr_send(q: *mut abi::ibv_qp_ex) {
    push(q, WrOpcode::Send, |_| {})
}

unsafe extern "C" fn wr_send_imm(q: *mut abi::ibv_qp_ex, imm: abi::__be32) {
    push(q, WrOpcode::SendWithImm, |w| w.imm = u32::from_be(imm))
}

unsafe extern "C" fn wr_send_inv(q: *mut abi::ibv_qp_ex, rkey: u32) {
    push(q, WrOpcode::SendWithInv { invalidate_rkey: RKey::new(rkey) }, |_| {})
}

unsafe extern "C" fn wr_local_inv(q: *mut abi::ibv_qp_ex, rkey: u32) {
    push(q, WrOpcode::LocalInv { rkey: RKey::new(rkey) }, |_| {})
}

unsafe extern "C" fn wr_bind_mw(
    q: *mut abi::ibv_qp_ex,
    m: *mut abi::ibv_mw,
    rkey: u32,
    info: *const abi::ibv_mw_bind_info,
) {
    // SAFETY: the program passes one of our windows and a bind info.
    let r = unsafe { crate::mr::mw(m) }
        .ok_or(libc::EINVAL)
        .and_then(|w| if info.is_null() { Err(libc::EINVAL) } else { Ok(w) })
        // SAFETY: checked non-NULL.
        .and_then(|w| Ok((w.mw.handle(), mw_bind_of(unsafe { &*info })?)));
    match r {
        Ok((mw, bind)) => push(q, WrOpcode::BindMw { mw, rkey: RKey::new(rkey), bind }, |_| {}),
        Err(e) => with(q, |_, b, _, _| {
            b.err.get_or_insert(e);
        }),
    }
}

unsafe extern "C" fn wr_send_tso(
    q: *mut abi::ibv_qp_ex,
    _hdr: *mut libc::c_void,
    _sz: u16,
    _mss: u16,
) {
    with(q, |_, b, _, _| {
        b.err.get_or_insert(libc::EOPNOTSUPP);
    })
}

unsafe extern "C" fn wr_set_xrc_srqn(q: *mut abi::ibv_qp_ex, srqn: u32) {
    last(q, |_, w| {
        w.xrc_remote_srqn = srqn;
        Ok(())
    })
}

unsafe extern "C" fn wr_set_ud_addr(
    q: *mut abi::ibv_qp_ex,
    a: *mut abi::ibv_ah,
    qpn: u32,
    qkey: u32,
) {
    last(q, |_, w| {
        // SAFETY: the program passes one of our AHs.
        let a = unsafe { crate::ah::ah(a) }.ok_or(libc::EINVAL)?;
        w.ud = Some(UdDest { ah: a.attr, remote_qpn: qpn, remote_qkey: qkey });
        Ok(())
    })
}

unsafe extern "C" fn wr_set_sge(q: *mut abi::ibv_qp_ex, lkey: u32, addr: u64, len: u32) {
    last(q, |_, w| {
        w.sg_list = [Sge { addr, length: len, lkey: LKey::new(lkey) }].into_iter().collect();
        Ok(())
    })
}

unsafe extern "C" fn wr_set_sge_list(q: *mut abi::ibv_qp_ex, n: usize, list: *const abi::ibv_sge) {
    last(q, |o, w| {
        let n = libc::c_int::try_from(n).map_err(|_| libc::EINVAL)?;
        // SAFETY: the program's array of n SGEs (n within the QP's limit).
        w.sg_list = unsafe { sges(list, n, o.max_send_sge) }?;
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data(
    q: *mut abi::ibv_qp_ex,
    addr: *mut libc::c_void,
    len: usize,
) {
    last(q, |o, w| {
        let length = u32::try_from(len).map_err(|_| libc::EINVAL)?;
        let s = [Sge { addr: addr as u64, length, lkey: LKey::new(0) }];
        inline_len(&s, o.max_inline_data)?;
        // SAFETY: the program's buffer of len readable bytes (within the
        // QP's limit, checked above).
        w.inline_data = unsafe { inline_bytes(&s) };
        w.flags |= SendFlags::INLINE;
        Ok(())
    })
}

unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut abi::ibv_qp_ex,
    n: usize,
    bufs: *const abi::ibv_data_buf,
) {
    last(q, |o, w| {
        if n > 0 && bufs.is_null() {
            return Err(libc::EINVAL);
        }
        // (more buffers than inline bytes cannot fit: refused before the
        // array is read)
        if n > o.max_inline_data.max(1) as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program's array of n buffers (never a slice from
        // NULL, which is undefined behaviour even when empty).
        let b = if n == 0 { &[][..] } else { unsafe { std::slice::from_raw_parts(bufs, n) } };
        let s: Vec<Sge> = b
            .iter()
            .map(|d| {
                let length = u32::try_from(d.length).map_err(|_| libc::EINVAL)?;
                Ok(Sge { addr: d.addr as u64, length, lkey: LKey::new(0) })
            })
            .collect::<Result<_, i32>>()?;
        inline_len(&s, o.max_inline_data)?;
        // SAFETY: each buffer is the program's readable memory (the total
        // within the QP's limit, checked above).
        w.inline_data = unsafe { inline_bytes(&s) };
        w.flags |= SendFlags::INLINE;
        Ok(())
    })
}
