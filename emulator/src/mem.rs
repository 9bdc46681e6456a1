//! The memory module: regions and windows with key lookups and checked
//! copies (IBA §10.6 memory management; windows in [`crate::mw`]).

use crate::mw::{BindOn, MwError, MwTable};
use crate::objects::{MemError, MrHandle, Mrs, MwBind, MwHandle, PdHandle, RegionMem};
use crate::qp_attr::AccessFlags;
use crate::wr::Sge;
use roce_packet::{LKey, Qpn, RKey};
use std::sync::Arc;

/// The memory tables, with key lookups and checked copies.
#[derive(Default)]
pub(crate) struct MemTable {
    pub mrs: Mrs,
    pub by_lkey: rustc_hash::FxHashMap<LKey, MrHandle>,
    pub by_rkey: rustc_hash::FxHashMap<RKey, MrHandle>,
    /// Memory windows (see `crate::mw`).
    pub mw: MwTable,
}

impl MemTable {
    fn check(
        &self,
        h: Option<&MrHandle>,
        pd: PdHandle,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(MrHandle, usize), MemError> {
        let h = *h.ok_or(MemError::BadKey)?;
        let mr = self.mrs.get(&h).ok_or(MemError::BadKey)?;
        if mr.pd != pd {
            return Err(MemError::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(MemError::Access);
        }
        let off = mr.range(va, len).ok_or(MemError::Bounds)?;
        Ok((h, off))
    }

    /// Check a local key for `[va, va+len)` with `need` access.
    pub fn check_local(
        &self,
        pd: PdHandle,
        sge: &Sge,
        need: AccessFlags,
    ) -> Result<(MrHandle, usize), MemError> {
        self.check(self.by_lkey.get(&sge.lkey), pd, sge.addr, u64::from(sge.length), need)
    }

    /// Check a remote key for `[va, va+len)` with `need` access, for a
    /// request that arrived on `on_qp` (a type 2 window's rkey is valid
    /// only on the QP it is bound to, crate::mw); `None` for a re-check of
    /// a request already checked on arrival (READ responses).
    pub fn check_remote(
        &self,
        pd: PdHandle,
        on_qp: Option<Qpn>,
        rkey: RKey,
        va: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<(MrHandle, usize), MemError> {
        if let Some(r) = self.mw.check(pd, on_qp, rkey, va, len, need) {
            // a memory window's rkey: then the region it lies in
            let r = r.and_then(|h| {
                let mr = self.mrs.get(&h).ok_or(MemError::BadKey)?;
                if mr.pd != pd {
                    return Err(MemError::WrongPd);
                }
                let off = mr.range(va, len).ok_or(MemError::Bounds)?;
                Ok((h, off))
            });
            if let Err(e) = r {
                tracing::debug!(%rkey, va, len, ?e, "memory window check failed");
            }
            return r;
        }
        self.check(self.by_rkey.get(&rkey), pd, va, len, need)
    }

    /// Validate every SGE of a list (for reading, or with LOCAL_WRITE for writing).
    pub fn check_sges(&self, pd: PdHandle, sges: &[Sge], write: bool) -> Result<(), MemError> {
        let need = if write { AccessFlags::LOCAL_WRITE } else { AccessFlags::EMPTY };
        for s in sges {
            self.check_local(pd, s, need)?;
        }
        Ok(())
    }

    /// Copy `len` bytes starting `offset` bytes into the SGE list into `out`.
    pub fn gather(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        offset: u64,
        len: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), MemError> {
        let mut done = 0;
        for (s, off, take) in pieces(sges, offset, len) {
            let (h, base) = self.check_local(pd, s, AccessFlags::EMPTY)?;
            let mr = self.mrs.get(&h).ok_or(MemError::BadKey)?;
            mr.mem.read_into_vec(base + off, take, out).ok_or(MemError::Bounds)?;
            done += take;
        }
        if done != len {
            return Err(MemError::Bounds);
        }
        Ok(())
    }

    /// Where `len` bytes starting `offset` bytes into the SGE list are, if
    /// they lie in one SGE: that region's memory (shared, for a datagram
    /// that sends from it) and the offset in it. `Ok(None)` if they span
    /// SGEs (then [`Self::gather`] copies them). The checks of `gather`.
    pub fn span(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        offset: u64,
        len: usize,
    ) -> Result<Option<(Arc<RegionMem>, usize)>, MemError> {
        let Some((s, off, take)) = pieces(sges, offset, len).next() else {
            return Err(MemError::Bounds);
        };
        if take < len {
            return Ok(None);
        }
        let (h, base) = self.check_local(pd, s, AccessFlags::EMPTY)?;
        let mr = self.mrs.get(&h).ok_or(MemError::BadKey)?;
        Ok(Some((mr.mem.share(), base + off)))
    }

    /// Copy `data` into the SGE list starting `offset` bytes in (needs LOCAL_WRITE).
    pub fn scatter(
        &mut self,
        pd: PdHandle,
        sges: &[Sge],
        offset: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let mut done = 0;
        for (s, off, take) in pieces(sges, offset, data.len()) {
            let (h, base) = self.check_local(pd, s, AccessFlags::LOCAL_WRITE)?;
            let mr = self.mrs.get(&h).ok_or(MemError::BadKey)?;
            mr.mem.write(base + off, &data[done..done + take]).ok_or(MemError::Bounds)?;
            done += take;
        }
        if done != data.len() {
            return Err(MemError::Bounds);
        }
        Ok(())
    }

    /// The region memory behind a handle returned by a check (for the
    /// responder's copies and atomics at that offset).
    pub fn region(&self, h: MrHandle) -> Option<&RegionMem> {
        self.mrs.get(&h).map(|m| &*m.mem)
    }

    /// Region `h`'s memory, shared (for a datagram that sends from it).
    pub fn share(&self, h: MrHandle) -> Option<Arc<RegionMem>> {
        self.mrs.get(&h).map(|m| m.mem.share())
    }

    /// Append `len` bytes at `off` of region `h` to `out`.
    pub fn read_into(&self, h: MrHandle, off: usize, len: usize, out: &mut Vec<u8>) -> Option<()> {
        self.mrs.get(&h)?.mem.read_into_vec(off, len, out)
    }
}

impl MemTable {
    /// Execute a BIND_MW work request (see [`MwTable::bind_wr`]).
    pub(crate) fn bind_wr(
        &mut self,
        on: BindOn,
        mw: MwHandle,
        new_rkey: RKey,
        b: MwBind,
    ) -> Result<RKey, MwError> {
        self.mw.bind_wr(&self.mrs, on, mw, new_rkey, b)
    }

    /// Invalidate `rkey` in `pd` (LOCAL_INV, or IETH at a responder): a
    /// type 2 window returns to the free state; a region loses its remote
    /// key. Type 1 windows cannot be invalidated.
    pub(crate) fn invalidate(&mut self, pd: PdHandle, rkey: RKey) -> Result<(), MwError> {
        let r = if let Some(r) = self.mw.invalidate(pd, rkey) {
            r
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

/// The pieces of `len` bytes starting `offset` bytes into an SGE list, in
/// order: each SGE they touch, the offset in it and the bytes taken from
/// it. Bytes past the end of the list are in no piece (the callers' bounds
/// error).
fn pieces(
    sges: &[Sge],
    mut offset: u64,
    mut len: usize,
) -> impl Iterator<Item = (&Sge, usize, usize)> {
    sges.iter().filter_map(move |s| {
        let sl = u64::from(s.length);
        if len == 0 {
            return None;
        }
        if offset >= sl {
            offset -= sl;
            return None;
        }
        let take = ((sl - offset) as usize).min(len);
        let off = offset as usize;
        len -= take;
        offset = 0;
        Some((s, off, take))
    })
}
