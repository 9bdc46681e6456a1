//! The live-handle table: every verbs object this library hands to the
//! program (context, PD, MR, MW, CQ, completion channel, QP, SRQ, AH), by
//! the address the program holds, with its kind and its context.
//!
//! The slow-path verbs (create, destroy, modify, query, resize, and the
//! creates that take another object) look the program's pointer up here
//! before they read the object: a pointer that is not a live object of
//! the expected kind (destroyed already, of a closed context, or never
//! ours) is answered with EINVAL, never with a read of freed memory. The
//! fast paths (`ibv_post_*`, `ibv_poll_cq`, `ibv_req_notify_cq`, the
//! `ibv_wr_*` and extended-poll calls) trust the pointer as libibverbs
//! does: a lookup there would cost every work request a global lock.
//!
//! The check is about the liveness of the pointer *value*, which is the
//! most rdma-core's users get: after a destroy, the allocator may hand the
//! same address to a new object of the same kind, and a stale pointer to
//! the old one then names the new one (as with any C API that frees).
//!
//! The table's lock is also where the reference counts that make a
//! destroy refuse (EBUSY) are taken: a create that takes a parent (a PD,
//! CQ, SRQ or channel) checks it live and counts itself on it under this
//! lock, and the parent's destroy checks the count and leaves the table
//! under it, so a create racing a destroy either sees the parent gone
//! (EINVAL) or makes the destroy refuse (EBUSY). A destroy leaves the table
//! before the object is freed, so of two racing destroys one wins and the
//! other gets EINVAL.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The kinds of verbs objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Ctx,
    Pd,
    Mr,
    Mw,
    Cq,
    Chan,
    Qp,
    Srq,
    Ah,
}

#[derive(Clone, Copy)]
struct Entry {
    kind: Kind,
    /// The `ibv_context *` the object belongs to (itself for a context).
    ctx: usize,
}

/// The locked table. Hold it only for lookups and counts: never while
/// blocking, and never call a function that takes it again (`live`,
/// `device::ctx`) while holding it.
pub(crate) struct Table(MutexGuard<'static, HashMap<usize, Entry>>);

/// Lock the table.
pub(crate) fn lock() -> Table {
    static T: OnceLock<Mutex<HashMap<usize, Entry>>> = OnceLock::new();
    Table(T.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner()))
}

impl Table {
    /// Whether `p` is a live object of `kind`.
    pub fn live<T>(&self, kind: Kind, p: *const T) -> bool {
        !p.is_null() && self.0.get(&(p as usize)).is_some_and(|e| e.kind == kind)
    }

    /// Record a new object of `kind` at `p`, belonging to context `ctx`.
    pub fn insert<T, C>(&mut self, kind: Kind, p: *const T, ctx: *const C) {
        self.0.insert(p as usize, Entry { kind, ctx: ctx as usize });
    }

    /// Take `p` out of the table if it is a live object of `kind`
    /// (false: it was not; the caller answers EINVAL).
    pub fn remove<T>(&mut self, kind: Kind, p: *const T) -> bool {
        if self.live(kind, p) {
            self.0.remove(&(p as usize));
            true
        } else {
            false
        }
    }

    /// Forget every object (a forked child: what it inherited is the
    /// parent's; see [`crate::fork`]). Nothing is freed.
    pub fn forget_all(&mut self) {
        self.0.clear();
    }

    /// Take the objects of context `ctx` (not the context itself) out of
    /// the table: `ibv_close_device` frees them.
    pub fn remove_children<C>(&mut self, ctx: *const C) -> Vec<(Kind, usize)> {
        let c = ctx as usize;
        let v: Vec<(Kind, usize)> = self
            .0
            .iter()
            .filter(|(&p, e)| e.ctx == c && p != c)
            .map(|(&p, e)| (e.kind, p))
            .collect();
        for (_, p) in &v {
            self.0.remove(p);
        }
        v
    }
}

/// Whether `p` is a live object of `kind` (locks the table for the lookup).
pub(crate) fn live<T>(kind: Kind, p: *const T) -> bool {
    lock().live(kind, p)
}

/// Record a new object (locks the table).
pub(crate) fn insert<T, C>(kind: Kind, p: *const T, ctx: *const C) {
    lock().insert(kind, p, ctx)
}

/// `p` if it is a live object of `kind`, else EINVAL.
pub(crate) fn check<T>(kind: Kind, p: *mut T) -> Result<*mut T, i32> {
    if live(kind, p) {
        Ok(p)
    } else {
        crate::util::diag!(
            "{kind:?} {p:p} is not a live object of this library (destroyed already?)"
        );
        Err(libc::EINVAL)
    }
}
