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
    Xrcd,
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

    /// `Ok` if `p` is a live object of `kind`, else EINVAL, with a
    /// diagnostic of `verb`.
    pub fn expect_live<T>(&self, kind: Kind, p: *const T, verb: &str) -> Result<(), i32> {
        if self.live(kind, p) {
            return Ok(());
        }
        crate::util::diag!("{verb}: {kind:?} {p:p} is not a live one (destroyed already?)");
        Err(libc::EINVAL)
    }

    /// Take the object of `kind` at `p` out of the table (it is the
    /// caller's to free), or EINVAL with a diagnostic of `verb` when it is
    /// not there: of two racing destroys one wins.
    pub fn take<T>(&mut self, kind: Kind, p: *const T, verb: &str) -> Result<(), i32> {
        if self.remove(kind, p) {
            return Ok(());
        }
        crate::util::diag!("{verb}: {kind:?} {p:p} is not a live one (destroyed already?)");
        Err(libc::EINVAL)
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

/// A verbs object of this library behind the program's C pointer: a
/// leaked `Box<Self>` whose C struct (`C`) is at offset 0.
pub(crate) trait Object: Sized {
    type C;
    const KIND: Kind;
    /// The fork generation it was made in ([`crate::fork`]), for the
    /// objects a forked child may not use; `None` for the others.
    fn generation(&self) -> Option<u32> {
        None
    }
}

/// The object behind `p`, unless `p` is NULL or the object is a parent's
/// that a forked child inherited.
///
/// # Safety
/// `p` is NULL or an object of type `O` this library made and did not
/// destroy yet.
pub(crate) unsafe fn object<'a, O: Object>(p: *mut O::C) -> Option<&'a O> {
    // SAFETY: per the contract, a leaked Box<O> (the C struct at offset 0).
    let o = (!p.is_null()).then(|| unsafe { &*(p as *const O) })?;
    (!o.generation().is_some_and(crate::fork::inherited)).then_some(o)
}

/// The live object behind `p` (EINVAL otherwise).
///
/// # Safety
/// The object must not be destroyed by another thread while the reference
/// is used (libibverbs' rule).
pub(crate) unsafe fn live_object<'a, O: Object>(p: *mut O::C) -> Result<&'a O, i32> {
    check(O::KIND, p)?;
    // SAFETY: live (checked), and per the contract.
    unsafe { object(p) }.ok_or(libc::EINVAL)
}

/// The object behind `p` if it is live in `t` (the table, whose lock the
/// caller holds): for a create that counts itself on it as a user before
/// the lock is released (see [`crate::mr::pd_hold`]), so that the object
/// is not freed while the reference is used.
pub(crate) fn held_object<'a, O: Object>(t: &Table, p: *mut O::C) -> Result<&'a O, i32> {
    if !t.live(O::KIND, p) {
        crate::util::diag!("{:?} {p:p} is not a live {:?} (destroyed already?)", O::KIND, O::KIND);
        return Err(libc::EINVAL);
    }
    // SAFETY: live in the table (checked under its lock, which the caller
    // holds): a leaked Box<O>, freed only after it leaves the table, which
    // the caller's count (taken before the lock is released) prevents.
    Ok(unsafe { &*(p as *const O) })
}

/// Implement [`Object`] for an object type (with `generation` from the
/// named field, for the objects a forked child may not use) and define its
/// two lookups: `get` ([`object`]) and `live` ([`live_object`]), both
/// unsafe with those functions' contracts.
macro_rules! c_object {
    ($obj:ident: $c:ty, $kind:ident $(, generation $gen:ident)?; $get:ident, $live:ident) => {
        impl $crate::handles::Object for $obj {
            type C = $c;
            const KIND: $crate::handles::Kind = $crate::handles::Kind::$kind;
            $(fn generation(&self) -> Option<u32> {
                Some(self.$gen)
            })?
        }

        /// The object behind `p`: see [`crate::handles::object`].
        ///
        /// # Safety
        /// As [`crate::handles::object`].
        pub(crate) unsafe fn $get<'a>(p: *mut $c) -> Option<&'a $obj> {
            // SAFETY: per the contract.
            unsafe { $crate::handles::object(p) }
        }

        /// The live object behind `p` (EINVAL otherwise).
        ///
        /// # Safety
        /// As [`crate::handles::live_object`].
        pub(crate) unsafe fn $live<'a>(p: *mut $c) -> Result<&'a $obj, i32> {
            // SAFETY: per the contract.
            unsafe { $crate::handles::live_object(p) }
        }
    };
}
pub(crate) use c_object;
