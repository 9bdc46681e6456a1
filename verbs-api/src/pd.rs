//! Protection domains and memory regions (`ibv_pd`, `ibv_mr`).

use crate::cq::Cq;
use crate::device::Context;
use crate::error::DestroyError;
use crate::qp::QpBuilder;
use roce_emulator::{
    AccessFlags, DeallocPdError, DeregMrError, MrAccessError, MrInfo, PdHandle, RegMrError, Sge,
};
use roce_packet::{LKey, RKey};
use std::fmt;
use std::sync::Arc;

pub(crate) struct PdInner {
    pub ctx: Context,
    pub handle: PdHandle,
    destroyed: bool,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.ctx.lock().dealloc_pd(self.handle) {
                tracing::warn!(pd = self.handle.id(), error = %e, "dealloc_pd in drop failed");
            }
        }
    }
}

/// A protection domain (`struct ibv_pd`). Clones share it; its MRs and QPs
/// keep it (and the context) alive, so it is deallocated after the last of
/// them is dropped, whatever the order of the drops.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.inner.ctx.name())
            .field("handle", &self.inner.handle.id())
            .finish()
    }
}

impl Pd {
    pub(crate) fn new(ctx: Context, handle: PdHandle) -> Pd {
        Pd { inner: Arc::new(PdInner { ctx, handle, destroyed: false }) }
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The device's handle for this PD.
    pub fn handle(&self) -> PdHandle {
        self.inner.handle
    }

    /// `ibv_reg_mr`: a zeroed region of `len` bytes owned by the device.
    /// The buffer lives inside the HCA (the peer may write it at any time);
    /// the application reaches it through [`Mr::read`] and [`Mr::write`],
    /// under the device lock, so there is no shared mutable memory and no
    /// unsafe code. REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE.
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr, RegMrError> {
        let info = self.inner.ctx.lock().reg_mr(self.inner.handle, len, access)?;
        Ok(Mr { inner: Arc::new(MrInner { pd: self.clone(), info, destroyed: false }) })
    }

    /// Start creating a QP on this PD (RC by default) that reports to
    /// `send_cq` and `recv_cq` (they may be the same CQ).
    pub fn qp_builder(&self, send_cq: &Cq, recv_cq: &Cq) -> QpBuilder {
        QpBuilder::new(self.clone(), send_cq.clone(), recv_cq.clone())
    }

    /// `ibv_dealloc_pd` now, reporting errors. Fails with
    /// [`DestroyError::Shared`] while MRs, QPs or clones of this PD exist
    /// (it is then deallocated when the last of them is dropped).
    pub fn destroy(self) -> Result<(), DestroyError<DeallocPdError>> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.destroyed = true;
                let r = inner.ctx.lock().dealloc_pd(inner.handle);
                r.map_err(DestroyError::Verb)
            }
            Err(arc) => {
                Err(DestroyError::Shared { what: "PD", others: Arc::strong_count(&arc) - 1 })
            }
        }
    }
}

pub(crate) struct MrInner {
    pd: Pd,
    info: MrInfo,
    destroyed: bool,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.pd.inner.ctx.lock().dereg_mr(self.info.handle) {
                tracing::warn!(mr = self.info.handle.id(), error = %e, "dereg_mr in drop failed");
            }
        }
    }
}

/// A registered memory region (`struct ibv_mr`) that owns its buffer.
///
/// The bytes live inside the device, because the remote side writes them
/// (RDMA WRITE, atomics, incoming SENDs) while the owner may read them. All
/// access goes through the device lock: a read sees either all or none of
/// any single packet's effect, never a torn copy in the middle of one.
/// Clones share the region; it is deregistered when the last is dropped.
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner.info;
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", i.addr))
            .field("len", &i.length)
            .field("lkey", &i.lkey)
            .field("rkey", &i.rkey)
            .finish()
    }
}

impl Mr {
    /// The registration as the device sees it.
    pub fn info(&self) -> MrInfo {
        self.inner.info
    }
    /// The PD the region belongs to.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }
    /// The local key (for SGEs).
    pub fn lkey(&self) -> LKey {
        self.inner.info.lkey
    }
    /// The remote key (for the peer's RETH / AtomicETH).
    pub fn rkey(&self) -> RKey {
        self.inner.info.rkey
    }
    /// The region's I/O virtual address (offset 0).
    pub fn addr(&self) -> u64 {
        self.inner.info.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        usize::try_from(self.inner.info.length).unwrap_or(usize::MAX)
    }
    /// Whether the region has zero length.
    pub fn is_empty(&self) -> bool {
        self.inner.info.length == 0
    }
    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.inner.info.access
    }

    /// An SGE for `len` bytes at `offset`. Not checked here: like the real
    /// verbs, an SGE outside the region makes its work request complete
    /// with LOC_PROT_ERR. See [`Mr::try_sge`] for a checked version.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge { addr: self.addr().wrapping_add(offset), length: len, lkey: self.lkey() }
    }

    /// [`Mr::sge`], refusing a range outside the region.
    pub fn try_sge(&self, offset: u64, len: u32) -> Result<Sge, MrAccessError> {
        let size = self.inner.info.length;
        match offset.checked_add(u64::from(len)) {
            Some(end) if end <= size => Ok(self.sge(offset, len)),
            _ => Err(MrAccessError::OutOfBounds { offset, len: u64::from(len), size }),
        }
    }

    /// The remote address of `offset` (what the peer puts in its RETH).
    pub fn remote_addr(&self, offset: u64) -> u64 {
        self.addr().wrapping_add(offset)
    }

    /// Copy `buf.len()` bytes at `offset` out of the region.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), MrAccessError> {
        self.inner.pd.inner.ctx.lock().mr_read(self.inner.info.handle, offset, buf)
    }

    /// Copy `data` into the region at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), MrAccessError> {
        self.inner.pd.inner.ctx.lock().mr_write(self.inner.info.handle, offset, data)
    }

    /// Read the little-endian `u64` at `offset` (an atomic target or result).
    pub fn read_u64(&self, offset: u64) -> Result<u64, MrAccessError> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Write `v` little-endian at `offset`.
    pub fn write_u64(&self, offset: u64, v: u64) -> Result<(), MrAccessError> {
        self.write(offset, &v.to_le_bytes())
    }

    /// The whole region, copied.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len()];
        // cannot fail: the range is the region itself while we hold it
        if let Err(e) = self.read(0, &mut v) {
            tracing::warn!(error = %e, "Mr::to_vec");
        }
        v
    }

    /// `ibv_dereg_mr` now, reporting errors. Fails with
    /// [`DestroyError::Shared`] while clones exist.
    pub fn destroy(self) -> Result<(), DestroyError<DeregMrError>> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.destroyed = true;
                let r = inner.pd.inner.ctx.lock().dereg_mr(inner.info.handle);
                r.map_err(DestroyError::Verb)
            }
            Err(arc) => {
                Err(DestroyError::Shared { what: "MR", others: Arc::strong_count(&arc) - 1 })
            }
        }
    }
}
