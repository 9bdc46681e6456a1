//! Memory windows (IBA §10.6.7; rxe's `rxe_mw.c`): type 1 windows bound
//! with [`Hca::bind_mw`], type 2 windows bound to a QP with
//! [`Hca::bind_mw_type2`] (the effect of a BIND_MW work request) and
//! invalidated with [`Hca::local_invalidate`] (the effect of LOCAL_INV).
//!
//! Binds check that the window, the region and the QP share one protection
//! domain (rxe misses the region check), that the region allows MW_BIND,
//! that the window lies inside the region, and that a type 2 window is
//! free. A remote access through a window's rkey is checked against the
//! window's range and rights, then against the region's
//! ([`MemTable::check_remote`]).
//!
//! The BIND_MW and LOCAL_INV work requests run the same checks in send
//! queue order (`crate::requester`); SEND_WITH_INVALIDATE's IETH is applied
//! by the responder.

use crate::hca::Hca;
use crate::objects::{MemError, MemTable, MrHandle, PdHandle};
use crate::qp_attr::AccessFlags;
use roce_packet::{Qpn, RKey};

/// A memory window handle (`ibv_mw`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MwHandle(pub(crate) u32);

impl MwHandle {
    /// The handle's number (for traces).
    pub fn id(self) -> u32 {
        self.0
    }
}

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MwType {
    /// IBV_MW_TYPE_1: bound with `ibv_bind_mw`, checked against the PD.
    Type1,
    /// IBV_MW_TYPE_2: bound by a work request to one QP, invalidatable.
    Type2,
}

/// `struct ibv_mw_bind` / `ibv_mw_bind_info`: what a window exposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The region the window lies in (needs MW_BIND access).
    pub mr: MrHandle,
    /// First virtual address of the window.
    pub addr: u64,
    /// Bytes (0 unbinds a type 1 window).
    pub length: u64,
    /// Remote rights: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC.
    pub access: AccessFlags,
}

/// `alloc_mw` / `bind_mw` / `dealloc_mw` / `local_invalidate` failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MwError {
    /// Unknown protection domain.
    #[error("unknown protection domain {0:?}")]
    UnknownPd(PdHandle),
    /// Unknown memory window.
    #[error("unknown memory window {0:?}")]
    UnknownMw(MwHandle),
    /// Unknown QP.
    #[error("unknown QP {0}")]
    UnknownQp(Qpn),
    /// Unknown memory region.
    #[error("unknown memory region {0:?}")]
    UnknownMr(MrHandle),
    /// Window, region and QP are not all in one protection domain.
    #[error("window, region and QP are not in the same protection domain")]
    PdMismatch,
    /// The region lacks MW_BIND access.
    #[error("memory region lacks MW_BIND access")]
    MrNotBindable,
    /// Window access not allowed (unsupported flags, or remote write/atomic
    /// on a region without LOCAL_WRITE).
    #[error("window access {0:#x} not allowed on this region")]
    BadAccess(u32),
    /// The window does not lie inside the region.
    #[error("window [{addr:#x}, +{length}) outside the region")]
    OutOfBounds {
        /// Requested start.
        addr: u64,
        /// Requested length.
        length: u64,
    },
    /// The verb does not apply to this window type.
    #[error("operation not valid for a {0:?} window")]
    WrongType(MwType),
    /// A type 2 window must be free (unbound or invalidated) to be bound.
    #[error("type 2 window is already bound")]
    NotFree,
    /// A type 2 bind must keep the rkey's index (upper 24 bits).
    #[error("new rkey {new} does not keep the index of {old}")]
    BadRkeyIndex {
        /// The window's current rkey.
        old: RKey,
        /// The rkey the bind asked for.
        new: RKey,
    },
    /// No window or region with that rkey in this PD.
    #[error("no window or region with rkey {0} in this protection domain")]
    UnknownRkey(RKey),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    pub mr: MrHandle,
    pub addr: u64,
    pub length: u64,
    pub access: AccessFlags,
}

pub(crate) struct Mw {
    pub pd: PdHandle,
    pub ty: MwType,
    pub rkey: RKey,
    pub bound: Option<Binding>,
}

/// Windows, keyed by handle, plus the rkey index.
#[derive(Default)]
pub(crate) struct MwTable {
    pub mws: std::collections::HashMap<MwHandle, Mw>,
    pub by_rkey: std::collections::HashMap<RKey, MwHandle>,
}

impl MemTable {
    /// Check a window rkey for `[va, va+len)` with `need`; `None` when
    /// `rkey` names no window (then it may name a region).
    pub(crate) fn check_mw(
        &self,
        pd: PdHandle,
        rkey: RKey,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Option<Result<(MrHandle, usize), MemError>> {
        let h = self.mw.by_rkey.get(&rkey)?;
        let r = (|| {
            let mw = self.mw.mws.get(h).ok_or(MemError::BadKey)?;
            let b = mw.bound.ok_or(MemError::BadKey)?;
            if mw.pd != pd {
                return Err(MemError::WrongPd);
            }
            if !b.access.contains(need) {
                return Err(MemError::Access);
            }
            let end = va.checked_add(len).ok_or(MemError::Bounds)?;
            if va < b.addr || end > b.addr.saturating_add(b.length) {
                return Err(MemError::Bounds);
            }
            let mr = self.mrs.get(&b.mr).ok_or(MemError::BadKey)?;
            if mr.pd != pd {
                return Err(MemError::WrongPd);
            }
            let off = mr.range(va, len).ok_or(MemError::Bounds)?;
            Ok((b.mr, off))
        })();
        if let Err(e) = r {
            tracing::debug!(%rkey, va, len, ?e, "memory window check failed");
        }
        Some(r)
    }
}

/// The next key byte after `k` (libibverbs' `ibv_inc_rkey`).
fn inc_rkey(k: RKey) -> RKey {
    let v = k.value();
    RKey::new((v & !0xFF) | (v.wrapping_add(1) & 0xFF))
}

impl MemTable {
    /// Bind checks for a QP in `qp_pd`: one PD for window, region and QP,
    /// MW_BIND on the region, remote rights only (write/atomic need the
    /// region's LOCAL_WRITE), window inside the region.
    fn check_bind(&self, qp_pd: PdHandle, mw: MwHandle, b: &MwBind) -> Result<(), MwError> {
        let m = self.mw.mws.get(&mw).ok_or(MwError::UnknownMw(mw))?;
        let mr = self.mrs.get(&b.mr).ok_or(MwError::UnknownMr(b.mr))?;
        if m.pd != qp_pd || mr.pd != qp_pd {
            return Err(MwError::PdMismatch);
        }
        if !mr.access.contains(AccessFlags::MW_BIND) {
            return Err(MwError::MrNotBindable);
        }
        let remote =
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        let extra = b.access.difference(remote);
        if !extra.is_empty() {
            return Err(MwError::BadAccess(extra.0));
        }
        if b.access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !mr.access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(MwError::BadAccess(b.access.0));
        }
        if b.length > 0 && mr.range(b.addr, b.length).is_none() {
            return Err(MwError::OutOfBounds { addr: b.addr, length: b.length });
        }
        Ok(())
    }

    /// Bind a type 2 window for `qpn` (in `qp_pd`): it must be free and
    /// `new_rkey` must keep its index.
    pub(crate) fn bind_type2(
        &mut self,
        qp_pd: PdHandle,
        qpn: Qpn,
        mw: MwHandle,
        new_rkey: RKey,
        b: MwBind,
    ) -> Result<RKey, MwError> {
        let m = self.mw.mws.get(&mw).ok_or(MwError::UnknownMw(mw))?;
        let (ty, old, free) = (m.ty, m.rkey, m.bound.is_none());
        let r = if ty != MwType::Type2 {
            Err(MwError::WrongType(ty))
        } else if !free {
            Err(MwError::NotFree)
        } else if new_rkey.value() & !0xFF != old.value() & !0xFF {
            Err(MwError::BadRkeyIndex { old, new: new_rkey })
        } else {
            self.check_bind(qp_pd, mw, &b)
        };
        if let Err(e) = r {
            tracing::debug!(%qpn, mw = mw.0, %e, "bind_mw (type 2) rejected");
            return Err(e);
        }
        Ok(self.install(mw, old, new_rkey, b, Some(qpn)))
    }

    fn install(&mut self, mw: MwHandle, old: RKey, new: RKey, b: MwBind, qpn: Option<Qpn>) -> RKey {
        let t = &mut self.mw;
        t.by_rkey.remove(&old);
        t.by_rkey.insert(new, mw);
        if let Some(m) = t.mws.get_mut(&mw) {
            m.rkey = new;
            m.bound = (b.length > 0).then_some(Binding {
                mr: b.mr,
                addr: b.addr,
                length: b.length,
                access: b.access,
            });
        }
        tracing::debug!(mw = mw.0, %old, %new, addr = b.addr, length = b.length, ?qpn, "bind_mw");
        new
    }

    /// Invalidate `rkey` in `pd` (LOCAL_INV, or IETH at a responder): a
    /// type 2 window returns to the free state; a region loses its remote
    /// key. Type 1 windows cannot be invalidated.
    pub(crate) fn invalidate(&mut self, pd: PdHandle, rkey: RKey) -> Result<(), MwError> {
        let r = if let Some(&h) = self.mw.by_rkey.get(&rkey) {
            match self.mw.mws.get_mut(&h) {
                Some(m) if m.pd != pd => Err(MwError::PdMismatch),
                Some(m) if m.ty == MwType::Type1 => Err(MwError::WrongType(MwType::Type1)),
                Some(m) => {
                    m.bound = None;
                    Ok(())
                }
                None => Err(MwError::UnknownRkey(rkey)),
            }
        } else if let Some(&h) = self.by_rkey.get(&rkey) {
            match self.mrs.get(&h) {
                Some(mr) if mr.pd != pd => Err(MwError::PdMismatch),
                Some(_) => {
                    self.by_rkey.remove(&rkey);
                    Ok(())
                }
                None => Err(MwError::UnknownRkey(rkey)),
            }
        } else {
            Err(MwError::UnknownRkey(rkey))
        };
        tracing::debug!(%rkey, ok = r.is_ok(), "invalidate");
        r
    }
}

impl Hca {
    /// `ibv_alloc_mw`: an unbound window in `pd` with a fresh rkey.
    pub fn alloc_mw(&mut self, pd: PdHandle, ty: MwType) -> Result<(MwHandle, RKey), MwError> {
        let d = &mut self.dev;
        let p = d.pds.get_mut(&pd).ok_or(MwError::UnknownPd(pd))?;
        p.users += 1;
        let (id, key) = d.next_mw_ids();
        let h = MwHandle(id);
        let rkey = RKey::new(key);
        d.mem.mw.mws.insert(h, Mw { pd, ty, rkey, bound: None });
        d.mem.mw.by_rkey.insert(rkey, h);
        tracing::debug!(dev = %d.name, mw = id, ?ty, %rkey, "alloc_mw");
        Ok((h, rkey))
    }

    /// `ibv_dealloc_mw`.
    pub fn dealloc_mw(&mut self, mw: MwHandle) -> Result<(), MwError> {
        let d = &mut self.dev;
        let m = d.mem.mw.mws.remove(&mw).ok_or(MwError::UnknownMw(mw))?;
        d.mem.mw.by_rkey.remove(&m.rkey);
        if let Some(p) = d.pds.get_mut(&m.pd) {
            p.users = p.users.saturating_sub(1);
        }
        tracing::debug!(dev = %d.name, mw = mw.0, "dealloc_mw");
        Ok(())
    }

    /// The window's current rkey.
    pub fn mw_rkey(&self, mw: MwHandle) -> Option<RKey> {
        self.dev.mem.mw.mws.get(&mw).map(|m| m.rkey)
    }

    fn qp_pd(&self, qpn: Qpn) -> Result<PdHandle, MwError> {
        Ok(self.qps.get(&qpn).ok_or(MwError::UnknownQp(qpn))?.init.pd)
    }

    /// `ibv_bind_mw` for a type 1 window, done directly: checks PDs, the
    /// region's MW_BIND right, the window's access and range; on success the
    /// key byte advances (rkey rotation, `ibv_inc_rkey`) and the new rkey is
    /// returned. A zero length unbinds.
    pub fn bind_mw(&mut self, qpn: Qpn, mw: MwHandle, b: MwBind) -> Result<RKey, MwError> {
        let m = self.dev.mem.mw.mws.get(&mw).ok_or(MwError::UnknownMw(mw))?;
        let (ty, old) = (m.ty, m.rkey);
        if ty != MwType::Type1 {
            return Err(MwError::WrongType(ty));
        }
        let pd = self.qp_pd(qpn)?;
        if let Err(e) = self.dev.mem.check_bind(pd, mw, &b) {
            tracing::debug!(dev = %self.dev.name, %qpn, mw = mw.0, %e, "bind_mw rejected");
            return Err(e);
        }
        Ok(self.dev.mem.install(mw, old, inc_rkey(old), b, None))
    }

    /// Bind a type 2 window to `qpn` directly (what a
    /// [`crate::WrOpcode::BindMw`] work request does in order): the window
    /// must be free and `new_rkey` keep its index (only the low key byte
    /// changes — rkey rotation).
    pub fn bind_mw_type2(
        &mut self,
        qpn: Qpn,
        mw: MwHandle,
        new_rkey: RKey,
        b: MwBind,
    ) -> Result<RKey, MwError> {
        let pd = self.qp_pd(qpn)?;
        self.dev.mem.bind_type2(pd, qpn, mw, new_rkey, b)
    }

    /// Invalidate `rkey` for `qpn`'s PD directly (what a
    /// [`crate::WrOpcode::LocalInv`] work request does in order).
    pub fn local_invalidate(&mut self, qpn: Qpn, rkey: RKey) -> Result<(), MwError> {
        let pd = self.qp_pd(qpn)?;
        self.dev.mem.invalidate(pd, rkey)
    }
}
