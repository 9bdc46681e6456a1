//! Memory windows (IBA §10.6.7; rxe's `rxe_mw.c`). Both kinds of bind go
//! through the send queue and complete with [`crate::WcOpcode::BindMw`]
//! (signalled per their send flags), in order after every earlier work
//! request:
//!
//! - type 1 windows with [`Hca::bind_mw`](crate::Hca::bind_mw) (`ibv_bind_mw`): the verb
//!   returns the window's next rkey at once (key byte + 1, as libibverbs'
//!   `ibv_inc_rkey`) and posts the bind;
//! - type 2 windows with a posted [`crate::WrOpcode::BindMw`] work request
//!   (`IBV_WR_BIND_MW`), which names the new rkey; the window is then bound
//!   to that QP: an access through its rkey arriving on another QP is a
//!   remote access error, as in rxe.
//!
//! A bind that fails when it executes completes with MW_BIND_ERR and moves
//! the QP to ERR: window, region and QP not in one protection domain (rxe
//! misses the region check), a region without MW_BIND, window outside the
//! region, rights other than remote read/write/atomic (write and atomic
//! need the region's LOCAL_WRITE), a type 2 window not free, a zero-length
//! type 2 bind, a new rkey with another index, and a type 1 window in a
//! posted BIND_MW (type 1 binds only through [`Hca::bind_mw`](crate::Hca::bind_mw)).
//!
//! A remote access through a window's rkey is checked against the
//! window's range, rights and QP, then against the region's
//! (`MemTable::check_remote`). LOCAL_INV ([`crate::WrOpcode::LocalInv`],
//! or directly [`Hca::local_invalidate`](crate::Hca::local_invalidate)) and SEND_WITH_INVALIDATE's IETH
//! return a type 2 window to the free state.
//!
//! Counters: `mw_bind`, `mw_bind_err`, `mw_invalidate`, `mw_invalidate_err`.

use crate::error::PostSendError;
use crate::objects::{MemError, MrHandle, Mrs, PdHandle};
use crate::qp_attr::AccessFlags;
use crate::wr::SendFlags;
use roce_packet::{Qpn, RKey};

pub use crate::objects::{MwBind, MwHandle, MwType};

/// `struct ibv_mw_bind`: the arguments of [`Hca::bind_mw`](crate::Hca::bind_mw).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBindWr {
    /// Returned in the BIND_MW completion.
    pub wr_id: u64,
    /// SIGNALED (a completion on success), FENCE.
    pub send_flags: SendFlags,
    /// Region, range and rights.
    pub bind: MwBind,
}

/// `alloc_mw` / `bind_mw` / `dealloc_mw` / `local_invalidate` failed, or
/// (traced) why a BIND_MW / LOCAL_INV work request completed in error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MwError {
    /// The device has `max_mw` windows already.
    #[error("too many memory windows (max {max})")]
    TooMany {
        /// The device limit (`max_mw`).
        max: u32,
    },
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
    /// The verb or work request does not apply to this window type (type 1
    /// windows are bound with `bind_mw`, type 2 with a BIND_MW work
    /// request; type 1 windows cannot be invalidated).
    #[error("operation not valid for a {0:?} window")]
    WrongType(MwType),
    /// A type 2 window must be free (unbound or invalidated) to be bound.
    #[error("type 2 window is already bound")]
    NotFree,
    /// A type 2 window cannot be bound with length 0 (o10-37.2.40).
    #[error("zero-length bind of a type 2 window")]
    ZeroLength,
    /// A bind must keep the rkey's index (upper 24 bits).
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
    /// `bind_mw` could not post its work request.
    #[error("bind_mw could not post: {0}")]
    Post(#[from] PostSendError),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Binding {
    pub mr: MrHandle,
    pub addr: u64,
    pub length: u64,
    pub access: AccessFlags,
    /// Type 2: the QP the window is bound to (accesses on others fail).
    pub qp: Option<Qpn>,
}

pub(crate) struct Mw {
    pub pd: PdHandle,
    pub ty: MwType,
    pub rkey: RKey,
    pub bound: Option<Binding>,
    /// Type 1: the rkey the latest `bind_mw` returned (the window's rkey
    /// once that bind executes).
    pub posted_rkey: RKey,
    /// Type 1: binds posted by `bind_mw`, not yet executed, as
    /// (QP, wr_id, new rkey); a BIND_MW work request for a type 1 window
    /// that is not one of these was posted directly and fails.
    pub verb_binds: Vec<(Qpn, u64, RKey)>,
}

/// Windows, keyed by handle, plus the rkey index.
#[derive(Default)]
pub(crate) struct MwTable {
    pub mws: rustc_hash::FxHashMap<MwHandle, Mw>,
    pub by_rkey: rustc_hash::FxHashMap<RKey, MwHandle>,
}

impl MwTable {
    /// Check a window rkey for `[va, va+len)` with `need`, for a request
    /// that arrived on `on_qp` (a type 2 window answers only on the QP it
    /// is bound to; `None` skips that check: see `MemTable::check_remote`):
    /// the window's PD, QP, rights and range; the region it lies in is
    /// the caller's to check. `None` when `rkey` names no window (then it
    /// may name a region).
    #[inline]
    pub(crate) fn check(
        &self,
        pd: PdHandle,
        on_qp: Option<Qpn>,
        rkey: RKey,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Option<Result<MrHandle, MemError>> {
        let h = self.by_rkey.get(&rkey)?;
        Some((|| {
            let mw = self.mws.get(h).ok_or(MemError::BadKey)?;
            let b = mw.bound.ok_or(MemError::BadKey)?;
            if mw.pd != pd {
                return Err(MemError::WrongPd);
            }
            if let (Some(bound), Some(on)) = (b.qp, on_qp) {
                if bound != on {
                    return Err(MemError::WrongQp);
                }
            }
            if !b.access.contains(need) {
                return Err(MemError::Access);
            }
            let end = va.checked_add(len).ok_or(MemError::Bounds)?;
            if va < b.addr || end > b.addr.saturating_add(b.length) {
                return Err(MemError::Bounds);
            }
            Ok(b.mr)
        })())
    }
}

/// The next key byte after `k` (libibverbs' `ibv_inc_rkey`).
pub(crate) fn inc_rkey(k: RKey) -> RKey {
    let v = k.value();
    RKey::new((v & !0xFF) | (v.wrapping_add(1) & 0xFF))
}

/// The QP a BIND_MW work request executes on, and the request's `wr_id`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindOn {
    pub qpn: Qpn,
    /// The QP's protection domain.
    pub pd: PdHandle,
    pub wr_id: u64,
}

impl MwTable {
    /// Bind checks for a QP in `qp_pd`: one PD for window, region and QP,
    /// MW_BIND on the region, remote rights only (write/atomic need the
    /// region's LOCAL_WRITE), window inside the region.
    fn check_bind(
        &self,
        mrs: &Mrs,
        qp_pd: PdHandle,
        mw: MwHandle,
        b: &MwBind,
    ) -> Result<(), MwError> {
        let m = self.mws.get(&mw).ok_or(MwError::UnknownMw(mw))?;
        let mr = mrs.get(&b.mr).ok_or(MwError::UnknownMr(b.mr))?;
        if m.pd != qp_pd || mr.pd != qp_pd {
            return Err(MwError::PdMismatch);
        }
        if !mr.access.contains(AccessFlags::MW_BIND) {
            return Err(MwError::MrNotBindable);
        }
        let remote =
            AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        // LOCAL_WRITE is tolerated and ignored, as rxe does (rdma-core's own
        // tests bind windows with LOCAL_WRITE | REMOTE_WRITE); a window grants
        // remote rights only.
        let extra = b.access.difference(remote | AccessFlags::LOCAL_WRITE);
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

    /// Execute a BIND_MW work request (`on`: its QP and `wr_id`) of window
    /// `mw` to `new_rkey` over a region of `mrs`: the send queue calls this
    /// when the request reaches its head.
    pub(crate) fn bind_wr(
        &mut self,
        mrs: &Mrs,
        on: BindOn,
        mw: MwHandle,
        new_rkey: RKey,
        b: MwBind,
    ) -> Result<RKey, MwError> {
        let BindOn { qpn, pd: qp_pd, wr_id } = on;
        let m = self.mws.get_mut(&mw).ok_or(MwError::UnknownMw(mw))?;
        let (ty, old) = (m.ty, m.rkey);
        let r = match ty {
            MwType::Type1 => {
                let ticket = (qpn, wr_id, new_rkey);
                match m.verb_binds.iter().position(|t| *t == ticket) {
                    Some(i) => {
                        m.verb_binds.remove(i);
                        Ok(())
                    }
                    None => Err(MwError::WrongType(MwType::Type1)),
                }
            }
            MwType::Type2 if m.bound.is_some() => Err(MwError::NotFree),
            MwType::Type2 if b.length == 0 => Err(MwError::ZeroLength),
            MwType::Type2 => Ok(()),
        };
        let r = r.and_then(|()| {
            if new_rkey.value() & !0xFF != old.value() & !0xFF {
                return Err(MwError::BadRkeyIndex { old, new: new_rkey });
            }
            self.check_bind(mrs, qp_pd, mw, &b)
        });
        if let Err(e) = r {
            tracing::debug!(%qpn, mw = mw.0, ?ty, %e, "bind_mw rejected");
            return Err(e);
        }
        let qp = (ty == MwType::Type2).then_some(qpn);
        Ok(self.install(mw, old, new_rkey, b, qp))
    }

    fn install(&mut self, mw: MwHandle, old: RKey, new: RKey, b: MwBind, qp: Option<Qpn>) -> RKey {
        self.by_rkey.remove(&old);
        self.by_rkey.insert(new, mw);
        if let Some(m) = self.mws.get_mut(&mw) {
            m.rkey = new;
            m.bound = (b.length > 0).then_some(Binding {
                mr: b.mr,
                addr: b.addr,
                length: b.length,
                access: b.access,
                qp,
            });
        }
        tracing::debug!(mw = mw.0, %old, %new, addr = b.addr, length = b.length, ?qp, "bind_mw");
        new
    }

    /// Invalidate the window with `rkey` in `pd` (LOCAL_INV, or IETH at a
    /// responder): a type 2 window returns to the free state; type 1
    /// windows cannot be invalidated. `None` when `rkey` names no window
    /// (then it may name a region: `MemTable::invalidate`).
    pub(crate) fn invalidate(&mut self, pd: PdHandle, rkey: RKey) -> Option<Result<(), MwError>> {
        let &h = self.by_rkey.get(&rkey)?;
        Some(match self.mws.get_mut(&h) {
            Some(m) if m.pd != pd => Err(MwError::PdMismatch),
            Some(m) if m.ty == MwType::Type1 => Err(MwError::WrongType(MwType::Type1)),
            Some(m) => {
                m.bound = None;
                Ok(())
            }
            None => Err(MwError::UnknownRkey(rkey)),
        })
    }
}
