//! Work requests: the program's C lists (SGEs, inline buffers, receive
//! chains) read into the emulator's types, checked against the queue's
//! limits before anything past them is read. Used by the posting verbs of
//! QPs, SRQs and the `ibv_wr_*` calls.

use crate::abi;
use crate::util::diag;
use roce_verbs_api::{LKey, RecvWr, SgList, Sge};

/// The SGEs of a C list of at most `max` entries (the QP's or SRQ's limit,
/// checked before the list is read: rxe refuses a larger `num_sge` first).
///
/// # Safety
/// `sg` must point to `n` SGEs (or `n` be 0) when `n <= max`.
pub(crate) unsafe fn sges(
    sg: *const abi::ibv_sge,
    n: libc::c_int,
    max: u32,
) -> Result<SgList, i32> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    if n as u32 > max {
        diag!("post: num_sge = {n} exceeds the limit {max}");
        return Err(libc::EINVAL);
    }
    if n == 0 {
        // sg_list may be NULL (or anything) with no entries: never made a
        // slice (a slice from NULL is undefined behaviour even when empty)
        return Ok(SgList::new());
    }
    // SAFETY: per the contract.
    let s = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    Ok(s.iter().map(|e| Sge { addr: e.addr, length: e.length, lkey: LKey::new(e.lkey) }).collect())
}

/// The total length of inline buffers, if it is within `max` (the QP's
/// `max_inline_data`): checked before anything is copied, as rxe checks.
pub(crate) fn inline_len(list: &[Sge], max: u32) -> Result<u32, i32> {
    let total = list.iter().try_fold(0u32, |a, s| a.checked_add(s.length));
    match total {
        Some(t) if t <= max => Ok(t),
        _ => {
            diag!("post: inline data of {total:?} bytes exceeds max_inline_data {max}");
            Err(libc::EINVAL)
        }
    }
}

/// Copy inline data out of the program's buffers (IBV_SEND_INLINE: the
/// buffers need no registration and may be reused as soon as the post
/// returns). Check the length first ([`inline_len`]).
///
/// # Safety
/// Each SGE must name `length` readable bytes at `addr`.
pub(crate) unsafe fn inline_bytes(list: &[Sge]) -> Vec<u8> {
    let mut v = Vec::with_capacity(list.iter().map(|s| s.length as usize).sum());
    for s in list {
        if s.length > 0 {
            // SAFETY: per the contract.
            v.extend_from_slice(unsafe {
                std::slice::from_raw_parts(s.addr as usize as *const u8, s.length as usize)
            });
        }
    }
    v
}

/// Receive requests with the C entry each came from.
pub(crate) type RecvList = Vec<(RecvWr, *mut abi::ibv_recv_wr)>;
/// A malformed C entry and its errno.
pub(crate) type BadRecv = Option<(*mut abi::ibv_recv_wr, i32)>;

/// The receive requests of a C chain; on a malformed entry, those before it
/// and that entry's pointer with the errno.
///
/// # Safety
/// `wr` must be the program's `ibv_recv_wr` chain.
pub(crate) unsafe fn recv_wrs(wr: *mut abi::ibv_recv_wr, max_sge: u32) -> (RecvList, BadRecv) {
    let mut out = Vec::new();
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: per the contract.
        let w = unsafe { &*cur };
        // SAFETY: as above.
        match unsafe { sges(w.sg_list, w.num_sge, max_sge) } {
            Ok(s) => out.push((RecvWr { wr_id: w.wr_id, sg_list: s }, cur)),
            Err(e) => return (out, Some((cur, e))),
        }
        cur = w.next;
    }
    (out, None)
}

/// 0, or the errno of the chain entry that failed, whose pointer goes to
/// `*bad` (libibverbs' `bad_wr`) when that is not NULL.
///
/// # Safety
/// `bad` is NULL or the caller's out pointer.
pub(crate) unsafe fn report_bad<T>(bad: *mut *mut T, failed: Option<(*mut T, i32)>) -> i32 {
    match failed {
        None => 0,
        Some((at, e)) => {
            if !bad.is_null() {
                // SAFETY: per the contract.
                unsafe { *bad = at };
            }
            e
        }
    }
}

/// Post the program's receive chain `wr` with `post`, in order, until an
/// entry is malformed or refused (then its errno, and the entry in `*bad`).
///
/// # Safety
/// `wr` is the program's `ibv_recv_wr` chain; `bad` is NULL or the
/// caller's out pointer.
pub(crate) unsafe fn post_recv_chain(
    wr: *mut abi::ibv_recv_wr,
    bad: *mut *mut abi::ibv_recv_wr,
    max_sge: u32,
    mut post: impl FnMut(RecvWr) -> Result<(), i32>,
) -> i32 {
    // SAFETY: per the contract.
    let (list, err) = unsafe { recv_wrs(wr, max_sge) };
    let failed = list.into_iter().find_map(|(w, p)| post(w).err().map(|e| (p, e)));
    // SAFETY: per the contract.
    unsafe { report_bad(bad, failed.or(err)) }
}
