//! The top of the verbs: `ibv_open_device` fills the function tables a
//! program's inline verbs jump through (`ibv_context.ops`, the extended
//! verbs of the `verbs_context` in front of it, and, through the context,
//! the `ibv_wr_*` table of each new QP), and `ibv_close_device` frees what a
//! closed context leaves, of every object family. As rdma-core keeps a
//! provider's ops table at its top (`providers/rxe/rxe.c`, `rxe_ctx_ops`),
//! this file is above the object files it names, and they never name it.

use crate::abi;
use crate::device::{ctx_unchecked, entry, Ctx};
use crate::handles::{self, Kind};
use crate::util::{diag, guard_ptr, guard_rc};
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::size_of;
use std::os::fd::AsRawFd;
use std::sync::Mutex;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------- function tables

/// The function tables of a new context: the extended verbs of the
/// `verbs_context` and `ibv_context.ops`, which the inline verbs of
/// `<infiniband/verbs.h>` call. (A QP's `ibv_wr_*` table is
/// `crate::qp_ex::fill`, which [`open_device`] hands to QP creation in
/// [`Ctx::fill_qp_ex`].)
fn fill_ops(v: &mut abi::verbs_context) {
    v.query_port = Some(crate::device::query_port_ex);
    v.query_device_ex = Some(crate::device::query_device_ex);
    v.create_cq_ex = Some(crate::cq::create_cq_ex);
    v.create_qp_ex = Some(crate::qp::create_qp_ex);
    v.get_srq_num = Some(crate::srq::get_srq_num);
    v.advise_mr = Some(crate::mr::advise_mr);
    v.open_xrcd = Some(crate::xrc::open_xrcd);
    v.close_xrcd = Some(crate::xrc::close_xrcd);
    v.create_srq_ex = Some(crate::xrc::create_srq_ex);
    v.open_qp = Some(crate::qp::open_qp);
    let o = &mut v.context.ops;
    o.poll_cq = Some(crate::cq::poll_cq);
    o.req_notify_cq = Some(crate::cq::req_notify_cq);
    o.post_send = Some(crate::qp::post_send);
    o.post_recv = Some(crate::qp::post_recv);
    o.post_srq_recv = Some(crate::srq::post_srq_recv);
    o.alloc_mw = Some(crate::mr::alloc_mw);
    o.dealloc_mw = Some(crate::mr::dealloc_mw);
    o.bind_mw = Some(crate::qp::bind_mw);
}

// ---------------------------------------------------------------- open

/// At exit, flush the `ROCE_EMU_PCAP` recordings of devices still open (a
/// program that returns from `main` without `ibv_close_device` keeps the
/// whole of its recording). Registered once, with the first open.
fn flush_recordings_at_exit() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn flush_at_exit() {
            crate::util::guard((), roce_host::flush_recordings);
        }
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(flush_at_exit) };
    });
}

pub(crate) unsafe extern "C" fn open_device(dev: *mut abi::ibv_device) -> *mut abi::ibv_context {
    guard_ptr(|| {
        flush_recordings_at_exit();
        let e = entry(dev).ok_or(libc::ENODEV)?;
        let device = {
            let mut o = lock(&e.opened);
            let d = match &o.0 {
                Some(d) => d.clone(),
                None => {
                    let d = e.cfg.open().map_err(|err| {
                        eprintln!("roce-emu libibverbs: cannot open {}: {err}", e.cfg.name);
                        libc::ENODEV
                    })?;
                    o.0 = Some(d.clone());
                    d
                }
            };
            o.1 += 1;
            d
        };
        let ctx = device.open();
        let async_chan = ctx.async_event_channel().map_err(|err| {
            diag!("async event channel: {err}");
            err.raw_os_error().unwrap_or(libc::ENOMEM)
        })?;
        // SAFETY: verbs_context is C data: pointers (NULL), function
        // pointers (None), integers and a pthread mutex, for which all
        // zero bytes is PTHREAD_MUTEX_INITIALIZER on glibc.
        let mut v: abi::verbs_context = unsafe { std::mem::zeroed() };
        v.sz = size_of::<abi::verbs_context>() as _;
        fill_ops(&mut v);
        let c = &mut v.context;
        c.device = dev;
        let cmd_fd = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").ok();
        c.cmd_fd = cmd_fd.as_ref().map_or(-1, |f| f.as_raw_fd());
        c.async_fd = async_chan.as_raw_fd();
        c.num_comp_vectors = 1;
        c.abi_compat = usize::MAX as *mut c_void; // __VERBS_ABI_IS_EXTENDED
        let b = Box::new(Ctx {
            v,
            fill_qp_ex: crate::qp_ex::fill,
            dev: e,
            ctx,
            async_chan,
            cmd_fd,
            cqs: Mutex::new(HashMap::new()),
            qps: Mutex::new(HashMap::new()),
            srqs: Mutex::new(HashMap::new()),
        });
        let p = Box::into_raw(b);
        // SAFETY: p is the box just leaked.
        let c = unsafe { (*p).c() };
        handles::insert(Kind::Ctx, c, c);
        Ok(c)
    })
}

pub(crate) unsafe extern "C" fn close_device(c: *mut abi::ibv_context) -> libc::c_int {
    guard_rc(|| {
        // The context and the objects left on it leave the table at once
        // (a second close, or a verb on one of its objects, is EINVAL from
        // here on); then they are freed, as the kernel destroys what a
        // closed context leaves.
        let children = {
            let mut t = handles::lock();
            t.take(Kind::Ctx, c, "ibv_close_device")?;
            t.remove_children(c)
        };
        if !children.is_empty() {
            diag!(
                "ibv_close_device: {} object(s) left on the context are destroyed",
                children.len()
            );
        }
        // QPs before what they use (the emulator's objects are reference
        // counted, so the order is for clarity, not for safety).
        for kind in [
            Kind::Qp,
            Kind::Ah,
            Kind::Mw,
            Kind::Mr,
            Kind::Srq,
            Kind::Xrcd,
            Kind::Cq,
            Kind::Chan,
            Kind::Pd,
        ] {
            for &(k, p) in &children {
                if k == kind {
                    // SAFETY: p was a live object of kind k of this context
                    // (just taken out of the table, so nothing else frees it).
                    unsafe { free_object(k, p) };
                }
            }
        }
        // SAFETY: c was live (taken out of the table just now): `&Ctx.v.context`
        // of the leaked box of open_device.
        let cx = unsafe { ctx_unchecked(c) }.ok_or(libc::EINVAL)?;
        let e = cx.dev;
        // SAFETY: cx is the leaked box of open_device; it left the table, so
        // this is its only free.
        drop(unsafe { Box::from_raw(cx as *const Ctx as *mut Ctx) });
        let last = {
            let mut o = lock(&e.opened);
            o.1 = o.1.saturating_sub(1);
            if o.1 == 0 {
                o.0.take()
            } else {
                None
            }
        };
        // the last context: the device goes (outside the lock; dropping it
        // stops its driver thread and flushes its capture)
        drop(last);
        Ok(())
    })
}

/// Free an object of a context being closed.
///
/// # Safety
/// `p` must be an object of `kind` this library created and that has just
/// left the handle table (so nothing else frees it).
unsafe fn free_object(kind: Kind, p: usize) {
    // SAFETY (each arm): per the contract, p is the leaked box of that kind.
    unsafe {
        match kind {
            Kind::Qp => drop(Box::from_raw(p as *mut crate::qp::QpObj)),
            Kind::Ah => drop(Box::from_raw(p as *mut crate::ah::AhObj)),
            Kind::Mw => drop(Box::from_raw(p as *mut crate::mr::MwObj)),
            Kind::Mr => drop(Box::from_raw(p as *mut crate::mr::MrObj)),
            Kind::Srq => drop(Box::from_raw(p as *mut crate::srq::SrqObj)),
            Kind::Cq => drop(Box::from_raw(p as *mut crate::cq::CqObj)),
            Kind::Chan => drop(Box::from_raw(p as *mut crate::cq::ChanObj)),
            Kind::Pd => drop(Box::from_raw(p as *mut crate::mr::PdObj)),
            Kind::Xrcd => crate::xrc::free(p),
            Kind::Ctx => {}
        }
    }
}
