//! Shared receive queues.

use crate::abi;
use crate::device::ctx;
use crate::handles::{self, Kind};
use crate::mr::{pd_hold, PdObj};
use crate::util::{diag, guard_ptr, guard_rc};
use crate::wr::post_recv_chain;
use roce_verbs_api::{PostSrqRecvError, Srq};
use std::sync::atomic::{AtomicUsize, Ordering};

/// An SRQ; `c` first.
#[repr(C)]
pub(crate) struct SrqObj {
    pub c: abi::ibv_srq,
    pub srq: Srq,
    pub pd: *mut PdObj,
    /// QPs attached to it (`ibv_destroy_srq` answers EBUSY while any is).
    pub users: AtomicUsize,
    /// SGEs per receive (as created): checked before a post's list is read.
    pub max_sge: u32,
    /// An XRC SRQ's CQ (held while the SRQ lives; NULL otherwise).
    pub cq: *mut crate::cq::CqObj,
    /// The fork generation it was made in ([`crate::fork`]).
    pub gen: u32,
}

handles::c_object!(SrqObj: abi::ibv_srq, Srq, generation gen; srq, srq_live);

/// The SRQ behind `p` if it is live, counted as used by a QP about to be
/// created on it (under the table's lock, which the caller holds; see
/// [`crate::mr::pd_hold`]). The caller gives the count back if the QP is
/// not created.
pub(crate) fn srq_hold<'a>(t: &handles::Table, p: *mut abi::ibv_srq) -> Result<&'a SrqObj, i32> {
    let o: &SrqObj = handles::held_object(t, p)?;
    o.users.fetch_add(1, Ordering::AcqRel);
    Ok(o)
}

pub(crate) unsafe extern "C" fn create_srq(
    p: *mut abi::ibv_pd,
    init: *mut abi::ibv_srq_init_attr,
) -> *mut abi::ibv_srq {
    guard_ptr(|| {
        if init.is_null() {
            return Err(libc::EINVAL);
        }
        let po = pd_hold(&handles::lock(), p)?;
        // SAFETY: init is the caller's ibv_srq_init_attr.
        let r = unsafe { new_srq(po, p, init) };
        if r.is_err() {
            po.put();
        }
        r
    })
}

/// A new SRQ on PD `po` (checked live and counted by the caller).
///
/// # Safety
/// `init` must point to the caller's `ibv_srq_init_attr`.
unsafe fn new_srq(
    po: &PdObj,
    p: *mut abi::ibv_pd,
    init: *mut abi::ibv_srq_init_attr,
) -> Result<*mut abi::ibv_srq, i32> {
    // SAFETY: the PD's context is live.
    let cx = unsafe { ctx(po.c.context) }.ok_or(libc::EINVAL)?;
    // SAFETY: the caller's ibv_srq_init_attr.
    let a = unsafe { &mut *init };
    let s = po.pd.create_srq(a.attr.max_wr.max(1), a.attr.max_sge.max(1)).map_err(|e| {
        diag!("create_srq: {e}");
        libc::EINVAL
    })?;
    if a.attr.srq_limit > 0 {
        s.set_limit(a.attr.srq_limit).map_err(|_| libc::EINVAL)?;
    }
    if let Some((attr, _)) = s.query() {
        a.attr.max_wr = attr.max_wr;
        a.attr.max_sge = attr.max_sge;
    }
    // SAFETY: C data; the pthread objects' zero bytes are their initializers.
    let mut c: abi::ibv_srq = unsafe { std::mem::zeroed() };
    c.context = po.c.context;
    c.srq_context = a.srq_context;
    c.pd = p;
    c.handle = s.handle().id();
    let h = c.handle;
    let b = Box::into_raw(Box::new(SrqObj {
        gen: crate::fork::generation(),
        c,
        srq: s,
        pd: p as *mut PdObj,
        users: AtomicUsize::new(0),
        max_sge: a.attr.max_sge,
        cq: std::ptr::null_mut(),
    }));
    cx.srqs.lock().unwrap_or_else(|e| e.into_inner()).insert(h, b as usize);
    handles::insert(Kind::Srq, b, po.c.context);
    Ok(b as *mut abi::ibv_srq)
}

/// An XRC SRQ (`ibv_create_srq_ex` with `IBV_SRQT_XRC`) on `a.pd` in the
/// domain `xrcd`, completing on `a.cq` (both checked live and held).
pub(crate) fn new_xrc_srq(
    cx: &crate::device::Ctx,
    a: &mut abi::ibv_srq_init_attr_ex,
    xrcd: &roce_verbs_api::Xrcd,
) -> Result<*mut abi::ibv_srq, i32> {
    let (po, co) = {
        let t = handles::lock();
        let po = pd_hold(&t, a.pd)?;
        match crate::cq::cq_hold(&t, a.cq) {
            Ok(co) => (po, co),
            Err(e) => {
                po.put();
                return Err(e);
            }
        }
    };
    let release = || {
        po.put();
        co.users.fetch_sub(1, Ordering::AcqRel);
    };
    let s = match po.pd.create_xrc_srq(a.attr.max_wr.max(1), a.attr.max_sge.max(1), xrcd, &co.cq) {
        Ok(s) => s,
        Err(e) => {
            diag!("create_srq_ex: {e}");
            release();
            return Err(libc::EINVAL);
        }
    };
    if a.attr.srq_limit > 0 && s.set_limit(a.attr.srq_limit).is_err() {
        release();
        return Err(libc::EINVAL);
    }
    if let Some((attr, _)) = s.query() {
        a.attr.max_wr = attr.max_wr;
        a.attr.max_sge = attr.max_sge;
    }
    // SAFETY: C data; the pthread objects' zero bytes are their initializers.
    let mut c: abi::ibv_srq = unsafe { std::mem::zeroed() };
    c.context = cx.c();
    c.srq_context = a.srq_context;
    c.pd = a.pd;
    c.handle = s.handle().id();
    let h = c.handle;
    let b = Box::into_raw(Box::new(SrqObj {
        gen: crate::fork::generation(),
        c,
        srq: s,
        pd: a.pd as *mut PdObj,
        users: AtomicUsize::new(0),
        max_sge: a.attr.max_sge,
        cq: a.cq as *mut crate::cq::CqObj,
    }));
    cx.srqs.lock().unwrap_or_else(|e| e.into_inner()).insert(h, b as usize);
    handles::insert(Kind::Srq, b, cx.c());
    Ok(b as *mut abi::ibv_srq)
}

pub(crate) unsafe extern "C" fn modify_srq(
    s: *mut abi::ibv_srq,
    attr: *mut abi::ibv_srq_attr,
    mask: libc::c_int,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_modify_srq.
        let o = unsafe { srq_live(s) }?;
        // SAFETY: the caller's ibv_srq_attr.
        let a = unsafe { crate::util::arg_ref(attr) }?;
        let mask = mask as u32;
        if mask & !(abi::IBV_SRQ_MAX_WR | abi::IBV_SRQ_LIMIT) != 0 {
            return Err(libc::EINVAL);
        }
        // (both at once: the limit is checked against the new size first)
        let both = abi::IBV_SRQ_MAX_WR | abi::IBV_SRQ_LIMIT;
        if mask & both == both && a.srq_limit != 0 && a.srq_limit >= a.max_wr {
            diag!("modify_srq: srq_limit {} not below max_wr {}", a.srq_limit, a.max_wr);
            return Err(libc::EINVAL);
        }
        if mask & abi::IBV_SRQ_MAX_WR != 0 {
            o.srq.resize(a.max_wr).map_err(|e| {
                diag!("modify_srq: {e}");
                libc::EINVAL
            })?;
        }
        if mask & abi::IBV_SRQ_LIMIT != 0 {
            o.srq.set_limit(a.srq_limit).map_err(|e| {
                diag!("modify_srq: {e}");
                libc::EINVAL
            })?;
        }
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn query_srq(
    s: *mut abi::ibv_srq,
    attr: *mut abi::ibv_srq_attr,
) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_query_srq.
        let o = unsafe { srq_live(s) }?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let (a, _) = o.srq.query().ok_or(libc::EINVAL)?;
        // SAFETY: the caller's struct.
        unsafe {
            attr.write(abi::ibv_srq_attr {
                max_wr: a.max_wr,
                max_sge: a.max_sge,
                srq_limit: a.srq_limit,
            })
        };
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn destroy_srq(s: *mut abi::ibv_srq) -> libc::c_int {
    guard_rc(|| {
        let o = {
            let mut t = handles::lock();
            t.expect_live(Kind::Srq, s, "ibv_destroy_srq")?;
            // SAFETY: live in the table, whose lock we hold.
            let o = unsafe { &*(s as *const SrqObj) };
            // QPs use it: refused before anything is undone (the count is
            // taken under this lock, srq_hold).
            if o.users.load(Ordering::Acquire) > 0 {
                return Err(libc::EBUSY);
            }
            t.remove(Kind::Srq, s);
            o
        };
        // SAFETY: the SRQ's context is live while the SRQ is (a close
        // takes the SRQ out of the table first).
        if let Some(cx) = unsafe { ctx(o.c.context) } {
            cx.srqs.lock().unwrap_or_else(|e| e.into_inner()).remove(&o.c.handle);
        }
        // SAFETY: s is the leaked box; it left the table above, so this is
        // its only free. Nothing refuses past here (the emulator's destroy
        // fails only while another handle exists, which the users count
        // rules out).
        let b = unsafe { Box::from_raw(s as *mut SrqObj) };
        // SAFETY: the PD (and an XRC SRQ's CQ) outlive the SRQ.
        if let Some(p) = unsafe { b.pd.as_ref() } {
            p.put();
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { b.cq.as_ref() } {
            c.users.fetch_sub(1, Ordering::AcqRel);
        }
        b.srq.destroy().map_err(|e| {
            diag!("destroy_srq: {e}");
            libc::EBUSY
        })
    })
}

pub(crate) unsafe extern "C" fn post_srq_recv(
    s: *mut abi::ibv_srq,
    wr: *mut abi::ibv_recv_wr,
    bad: *mut *mut abi::ibv_recv_wr,
) -> libc::c_int {
    crate::util::guard_errno(|| {
        // SAFETY: contract of ibv_post_srq_recv.
        let Some(o) = (unsafe { srq(s) }) else { return libc::EINVAL };
        // SAFETY: the program's chain and out pointer.
        unsafe {
            post_recv_chain(wr, bad, o.max_sge, |w| {
                o.srq.post_recv(w).map_err(|e| {
                    diag!("post_srq_recv: {e}");
                    match e {
                        PostSrqRecvError::QueueFull { .. } => libc::ENOMEM,
                        _ => libc::EINVAL,
                    }
                })
            })
        }
    })
}

pub(crate) unsafe extern "C" fn get_srq_num(s: *mut abi::ibv_srq, num: *mut u32) -> libc::c_int {
    guard_rc(|| {
        // SAFETY: contract of ibv_get_srq_num.
        let o = unsafe { srq_live(s) }?;
        if num.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's out pointer.
        unsafe { *num = o.srq.handle().id() };
        Ok(())
    })
}
