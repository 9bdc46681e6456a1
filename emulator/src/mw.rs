//! Memory windows (IBA §10.6.7; rxe's `rxe_mw.c`). Both kinds of bind go
//! through the send queue and complete with [`crate::WcOpcode::BindMw`]
//! (signalled per their send flags), in order after every earlier work
//! request:
//!
//! - type 1 windows with [`Hca::bind_mw`] (`ibv_bind_mw`): the verb
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
//! posted BIND_MW (type 1 binds only through [`Hca::bind_mw`]).
//!
//! A remote access through a window's rkey is checked against the
//! window's range, rights and QP, then against the region's
//! (`MemTable::check_remote`). LOCAL_INV ([`crate::WrOpcode::LocalInv`],
//! or directly [`Hca::local_invalidate`]) and SEND_WITH_INVALIDATE's IETH
//! return a type 2 window to the free state.
//!
//! Counters: `mw_bind`, `mw_bind_err`, `mw_invalidate`, `mw_invalidate_err`.

use crate::error::PostSendError;
use crate::hca::Hca;
use crate::objects::{MemError, MemTable, MrHandle, PdHandle};
use crate::qp_attr::AccessFlags;
use crate::wr::{SendFlags, SendWr, WrOpcode};
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

/// `struct ibv_mw_bind_info`: what a window exposes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The region the window lies in (needs MW_BIND access).
    pub mr: MrHandle,
    /// First virtual address of the window.
    pub addr: u64,
    /// Bytes (0 unbinds a type 1 window; not allowed for type 2).
    pub length: u64,
    /// Remote rights: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC.
    pub access: AccessFlags,
}

/// `struct ibv_mw_bind`: the arguments of [`Hca::bind_mw`].
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

impl MemTable {
    /// Check a window rkey for `[va, va+len)` with `need`, for a request
    /// that arrived on `on_qp` (a type 2 window answers only on the QP it
    /// is bound to; `None` skips that check: see `check_remote`); `None`
    /// when `rkey` names no window (then it may name a region).
    pub(crate) fn check_mw(
        &self,
        pd: PdHandle,
        on_qp: Option<Qpn>,
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

    /// Execute a BIND_MW work request `wr_id` of `qpn` (in `qp_pd`): the
    /// send queue calls this when the request reaches its head.
    pub(crate) fn bind_wr(
        &mut self,
        qp_pd: PdHandle,
        qpn: Qpn,
        wr_id: u64,
        mw: MwHandle,
        new_rkey: RKey,
        b: MwBind,
    ) -> Result<RKey, MwError> {
        let m = self.mw.mws.get_mut(&mw).ok_or(MwError::UnknownMw(mw))?;
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
            self.check_bind(qp_pd, mw, &b)
        });
        if let Err(e) = r {
            tracing::debug!(%qpn, mw = mw.0, ?ty, %e, "bind_mw rejected");
            return Err(e);
        }
        let qp = (ty == MwType::Type2).then_some(qpn);
        Ok(self.install(mw, old, new_rkey, b, qp))
    }

    fn install(&mut self, mw: MwHandle, old: RKey, new: RKey, b: MwBind, qp: Option<Qpn>) -> RKey {
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
                qp,
            });
        }
        tracing::debug!(mw = mw.0, %old, %new, addr = b.addr, length = b.length, ?qp, "bind_mw");
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
        if d.mem.mw.mws.len() >= d.attr.max_mw as usize {
            return Err(MwError::TooMany { max: d.attr.max_mw });
        }
        let p = d.pds.get_mut(&pd).ok_or(MwError::UnknownPd(pd))?;
        p.users += 1;
        let (id, key) = d.next_mw_ids();
        let h = MwHandle(id);
        let rkey = RKey::new(key);
        let mw = Mw { pd, ty, rkey, bound: None, posted_rkey: rkey, verb_binds: Vec::new() };
        d.mem.mw.mws.insert(h, mw);
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

    /// The window's current rkey (changes when a bind executes).
    pub fn mw_rkey(&self, mw: MwHandle) -> Option<RKey> {
        self.dev.mem.mw.mws.get(&mw).map(|m| m.rkey)
    }

    fn qp_pd(&self, qpn: Qpn) -> Result<PdHandle, MwError> {
        Ok(self.qps.get(&qpn).ok_or(MwError::UnknownQp(qpn))?.init.pd)
    }

    /// `ibv_bind_mw` for a type 1 window: posts a BIND_MW work request on
    /// `qpn`'s send queue and returns the rkey the window will have (the
    /// next key byte, libibverbs' `ibv_inc_rkey`). The bind executes after
    /// every earlier work request of the QP and completes with opcode
    /// BIND_MW (signalled per `wr.send_flags`), or with MW_BIND_ERR if a
    /// check fails then (the rkey then stays what it was). A zero length
    /// unbinds.
    ///
    /// Refused at once: a type 2 window ([`MwError::WrongType`]), a region
    /// in another PD than the window (as rxe's provider does), and whatever
    /// `post_send` refuses ([`MwError::Post`]).
    pub fn bind_mw(&mut self, qpn: Qpn, mw: MwHandle, wr: MwBindWr) -> Result<RKey, MwError> {
        let mem = &self.dev.mem;
        let m = mem.mw.mws.get(&mw).ok_or(MwError::UnknownMw(mw))?;
        if m.ty != MwType::Type1 {
            return Err(MwError::WrongType(m.ty));
        }
        let mr = mem.mrs.get(&wr.bind.mr).ok_or(MwError::UnknownMr(wr.bind.mr))?;
        if mr.pd != m.pd {
            return Err(MwError::PdMismatch);
        }
        self.qp_pd(qpn)?;
        let rkey = inc_rkey(m.posted_rkey);
        let ticket = (qpn, wr.wr_id, rkey);
        let op = WrOpcode::BindMw { mw, rkey, bind: wr.bind };
        let mut swr = SendWr::new(wr.wr_id, op);
        swr.flags = wr.send_flags;
        if let Some(m) = self.dev.mem.mw.mws.get_mut(&mw) {
            m.verb_binds.push(ticket);
        }
        if let Err(e) = self.post_send(qpn, swr) {
            if let Some(m) = self.dev.mem.mw.mws.get_mut(&mw) {
                m.verb_binds.retain(|t| *t != ticket);
            }
            return Err(e.into());
        }
        let flushed = self.qps.get(&qpn).is_some_and(|q| q.state == crate::QpState::Err);
        if let Some(m) = self.dev.mem.mw.mws.get_mut(&mw) {
            m.posted_rkey = rkey;
            if flushed {
                // completed at once with WR_FLUSH_ERR: it will never execute
                m.verb_binds.retain(|t| *t != ticket);
            }
        }
        tracing::debug!(dev = %self.dev.name, %qpn, mw = mw.0, %rkey, "bind_mw posted");
        Ok(rkey)
    }

    /// Invalidate `rkey` for `qpn`'s PD directly, outside the send queue
    /// (what a [`crate::WrOpcode::LocalInv`] work request does in order).
    pub fn local_invalidate(&mut self, qpn: Qpn, rkey: RKey) -> Result<(), MwError> {
        let pd = self.qp_pd(qpn)?;
        let r = self.dev.mem.invalidate(pd, rkey);
        self.dev.counters.count_invalidate(r.is_ok());
        r
    }
}
