//! Protection domains, memory regions and memory windows (`ibv_pd`,
//! `ibv_mr`, `ibv_mw`).

use crate::error::{destroy_on_drop, DestroyError};
use crate::objects::{Context, Cq};
use roce_emulator::{
    AccessFlags, AllocPdError, DeallocPdError, DeregMrError, MrAccessError, MrInfo, MwBind,
    MwError, MwHandle, MwType, PdHandle, RegMrError, RegionMem, Sge,
};
use roce_emulator::{XrcError, XrcdHandle};
use roce_packet::{LKey, RKey};
use std::fmt;
use std::sync::Arc;

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<Pd, AllocPdError> {
        let h = self.lock().alloc_pd()?;
        Ok(Pd::new(self.clone(), h))
    }
}

pub(crate) struct PdInner {
    pub ctx: Context,
    pub handle: PdHandle,
    destroyed: bool,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        destroy_on_drop(self.destroyed, "dealloc_pd", self.handle.id(), || {
            self.ctx.lock().dealloc_pd(self.handle)
        });
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
        Ok(Mr::new(self.clone(), info))
    }

    /// `ibv_reg_mr` over given memory: an owned buffer
    /// ([`RegionMem::owned`]) or the application's own pages
    /// ([`RegionMem::external`], whose `unsafe` constructor carries the
    /// validity promise; this call is safe). `iova` `None` lets the device
    /// choose the I/O virtual address; `Some(v)` uses `v`, as the C ABI
    /// does with the application's address.
    pub fn reg_mr_mem(
        &self,
        mem: RegionMem,
        iova: Option<u64>,
        access: AccessFlags,
    ) -> Result<Mr, RegMrError> {
        let info = self.inner.ctx.lock().reg_mr_mem(self.inner.handle, mem, iova, access)?;
        Ok(Mr::new(self.clone(), info))
    }

    /// `ibv_dealloc_pd` now, reporting errors. Fails with
    /// [`DestroyError::Shared`] while MRs, QPs or clones of this PD exist
    /// (it is then deallocated when the last of them is dropped).
    pub fn destroy(self) -> Result<(), DestroyError<DeallocPdError>> {
        let mut inner = DestroyError::sole(self.inner, "PD")?;
        inner.destroyed = true;
        let r = inner.ctx.lock().dealloc_pd(inner.handle);
        r.map_err(DestroyError::Verb)
    }
}

pub(crate) struct MrInner {
    pd: Pd,
    /// The registration; changes with [`Mr::rereg`].
    info: std::sync::Mutex<MrInfo>,
    destroyed: bool,
}

impl MrInner {
    fn info(&self) -> MrInfo {
        *self.info.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        let h = self.info().handle;
        destroy_on_drop(self.destroyed, "dereg_mr", h.id(), || {
            self.pd.inner.ctx.lock().dereg_mr(h)
        });
    }
}

/// A registered memory region (`struct ibv_mr`).
///
/// An owned region ([`Pd::reg_mr`]) keeps its bytes inside the device,
/// because the remote side writes them (RDMA WRITE, atomics, incoming
/// SENDs) while the owner may read them. All access goes through the device
/// lock: a read sees either all or none of any single packet's effect,
/// never a torn copy in the middle of one, and no safe code can race.
/// An external region ([`Pd::reg_mr_mem`] with [`RegionMem::external`]) is
/// the application's own memory, written by the device as a NIC's DMA
/// would. Clones share the region; it is deregistered when the last is
/// dropped.
#[derive(Clone)]
pub struct Mr {
    inner: Arc<MrInner>,
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.inner.info();
        f.debug_struct("Mr")
            .field("addr", &format_args!("{:#x}", i.addr))
            .field("len", &i.length)
            .field("lkey", &i.lkey)
            .field("rkey", &i.rkey)
            .finish()
    }
}

impl Mr {
    fn new(pd: Pd, info: MrInfo) -> Mr {
        Mr { inner: Arc::new(MrInner { pd, info: std::sync::Mutex::new(info), destroyed: false }) }
    }

    /// The registration as the device sees it.
    pub fn info(&self) -> MrInfo {
        self.inner.info()
    }

    /// `ibv_rereg_mr`: move the region to another PD, give it new memory at
    /// a new iova, and/or change its access rights (`None` keeps each). The
    /// keys stay the same. Returns the new registration.
    pub fn rereg(
        &self,
        pd: Option<&Pd>,
        mem: Option<(RegionMem, u64)>,
        access: Option<AccessFlags>,
    ) -> Result<MrInfo, RegMrError> {
        let h = self.info().handle;
        let info =
            self.inner.pd.inner.ctx.lock().rereg_mr(h, pd.map(|p| p.handle()), mem, access)?;
        *self.inner.info.lock().unwrap_or_else(|e| e.into_inner()) = info;
        Ok(info)
    }
    /// The PD the region belongs to.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }
    /// The local key (for SGEs).
    pub fn lkey(&self) -> LKey {
        self.info().lkey
    }
    /// The remote key (for the peer's RETH / AtomicETH).
    pub fn rkey(&self) -> RKey {
        self.info().rkey
    }
    /// The region's I/O virtual address (offset 0).
    pub fn addr(&self) -> u64 {
        self.info().addr
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        usize::try_from(self.info().length).unwrap_or(usize::MAX)
    }
    /// Whether the region has zero length.
    pub fn is_empty(&self) -> bool {
        self.info().length == 0
    }
    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.info().access
    }

    /// An SGE for `len` bytes at `offset`. Not checked here: like the real
    /// verbs, an SGE outside the region makes its work request complete
    /// with LOC_PROT_ERR. See [`Mr::try_sge`] for a checked version.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge { addr: self.addr().wrapping_add(offset), length: len, lkey: self.lkey() }
    }

    /// [`Mr::sge`], refusing a range outside the region.
    pub fn try_sge(&self, offset: u64, len: u32) -> Result<Sge, MrAccessError> {
        let size = self.info().length;
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
        self.inner.pd.inner.ctx.lock().mr_read(self.info().handle, offset, buf)
    }

    /// Copy `data` into the region at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), MrAccessError> {
        self.inner.pd.inner.ctx.lock().mr_write(self.info().handle, offset, data)
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
        let mut inner = DestroyError::sole(self.inner, "MR")?;
        inner.destroyed = true;
        let r = inner.pd.inner.ctx.lock().dereg_mr(inner.info().handle);
        r.map_err(DestroyError::Verb)
    }
}

impl Mr {
    /// What a memory window over `length` bytes at `offset` of this region
    /// exposes with `access` (`struct ibv_mw_bind_info`); the region needs
    /// MW_BIND access for the bind to succeed.
    pub fn mw_bind(&self, offset: u64, length: u64, access: AccessFlags) -> MwBind {
        MwBind { mr: self.info().handle, addr: self.addr().wrapping_add(offset), length, access }
    }
}

pub(crate) struct MwInner {
    pd: Pd,
    handle: MwHandle,
    ty: MwType,
    destroyed: bool,
}

impl Drop for MwInner {
    fn drop(&mut self) {
        destroy_on_drop(self.destroyed, "dealloc_mw", self.handle.id(), || {
            self.pd.inner.ctx.lock().dealloc_mw(self.handle)
        });
    }
}

/// A memory window (`struct ibv_mw`): a remote key for part of a region,
/// bound and re-bound without re-registering. Type 1 windows are bound
/// with [`Qp::bind_mw`]; type 2 windows with a posted
/// [`roce_emulator::WrOpcode::BindMw`] work request (then only that QP may use the rkey)
/// and freed again by LOCAL_INV or a peer's SEND_WITH_INVALIDATE. Both
/// binds run in order on the QP's send queue and complete with
/// [`roce_emulator::WcOpcode::BindMw`]. Clones share the window; it is
/// deallocated when the last is dropped. See `roce_emulator::mw`.
#[derive(Clone)]
pub struct Mw {
    inner: Arc<MwInner>,
}

impl fmt::Debug for Mw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mw")
            .field("handle", &self.inner.handle.id())
            .field("type", &self.inner.ty)
            .field("rkey", &self.rkey())
            .finish()
    }
}

impl Pd {
    /// `ibv_alloc_mw`: an unbound window of type `ty` in this PD.
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw, MwError> {
        let (handle, _) = self.inner.ctx.lock().alloc_mw(self.inner.handle, ty)?;
        Ok(Mw { inner: Arc::new(MwInner { pd: self.clone(), handle, ty, destroyed: false }) })
    }
}

impl Mw {
    /// The device's handle (for [`roce_emulator::WrOpcode::BindMw`]).
    pub fn handle(&self) -> MwHandle {
        self.inner.handle
    }
    /// Type 1 or type 2.
    pub fn mw_type(&self) -> MwType {
        self.inner.ty
    }
    /// The PD the window belongs to.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }
    /// The window's current rkey (it changes when a bind executes).
    pub fn rkey(&self) -> RKey {
        let h = self.inner.pd.inner.ctx.lock().mw_rkey(self.inner.handle);
        h.unwrap_or(RKey::new(0))
    }
    /// The current rkey with its key byte advanced (`ibv_inc_rkey`): the
    /// rkey to ask for in a type 2 [`roce_emulator::WrOpcode::BindMw`].
    pub fn inc_rkey(&self) -> RKey {
        let v = self.rkey().value();
        RKey::new((v & !0xFF) | (v.wrapping_add(1) & 0xFF))
    }

    /// `ibv_dealloc_mw` now, reporting errors. Fails with
    /// [`DestroyError::Shared`] while clones exist.
    pub fn destroy(self) -> Result<(), DestroyError<MwError>> {
        let mut inner = DestroyError::sole(self.inner, "MW")?;
        inner.destroyed = true;
        let r = inner.pd.inner.ctx.lock().dealloc_mw(inner.handle);
        r.map_err(DestroyError::Verb)
    }
}

// ---- XRC domains (see crate::xrc) ----

pub(crate) struct XrcdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: XrcdHandle,
    /// The placeholder PD and CQ its target QPs are created on (they run
    /// each request with the XRC SRQ's own).
    pub(crate) pd: Pd,
    pub(crate) cq: Cq,
    destroyed: bool,
}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        destroy_on_drop(self.destroyed, "close_xrcd", self.handle.id(), || {
            self.ctx.lock().dealloc_xrcd(self.handle)
        });
    }
}

/// An XRC domain (`struct ibv_xrcd`). Its SRQs and target QPs keep it
/// alive; clones share it.
#[derive(Clone)]
pub struct Xrcd {
    pub(crate) inner: Arc<XrcdInner>,
}

impl fmt::Debug for Xrcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Xrcd")
            .field("device", &self.inner.ctx.name())
            .field("handle", &self.inner.handle.id())
            .finish()
    }
}

/// `alloc_xrcd` failed.
#[derive(Debug, thiserror::Error)]
pub enum AllocXrcdError {
    /// The device refused.
    #[error(transparent)]
    Verb(#[from] XrcError),
    /// The placeholder PD or CQ could not be made.
    #[error("cannot make the domain's placeholder PD or CQ")]
    Resources,
}

impl Context {
    /// `ibv_open_xrcd`: a new XRC domain on this device.
    pub fn alloc_xrcd(&self) -> Result<Xrcd, AllocXrcdError> {
        let pd = self.alloc_pd().map_err(|_| AllocXrcdError::Resources)?;
        let cq = self.create_cq(1).map_err(|_| AllocXrcdError::Resources)?;
        let handle = self.lock().alloc_xrcd()?;
        Ok(Xrcd {
            inner: Arc::new(XrcdInner { ctx: self.clone(), handle, pd, cq, destroyed: false }),
        })
    }
}

impl Xrcd {
    /// The device's handle.
    pub fn handle(&self) -> XrcdHandle {
        self.inner.handle
    }

    /// Make this the domain of the file whose `(st_dev, st_ino)` is `key`
    /// (`ibv_open_xrcd` with a descriptor). On a device shared by several
    /// processes, the domains of one file are one domain: a target QP's
    /// requests reach the XRC SRQs of the others
    /// ([`roce_emulator::xrc_relay`]). Returns whether another process of
    /// the device has the file's domain, and this process's hold on it,
    /// to keep as long as it keeps the domain.
    pub fn join_file(
        &self,
        key: (u64, u64),
    ) -> std::io::Result<(bool, Option<crate::driver::HostHold>)> {
        let ctx = &self.inner.ctx;
        ctx.lock().set_xrcd_key(self.inner.handle, key).map_err(std::io::Error::other)?;
        ctx.driver().host_xrcd(&ctx.inner.hca, key)
    }

    /// The SRQs and target QPs that use the domain.
    pub fn users(&self) -> u32 {
        self.inner.ctx.lock().xrcd_users(self.inner.handle).unwrap_or(0)
    }

    /// The device it is on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `ibv_close_xrcd` now, reporting errors (EBUSY while SRQs or target
    /// QPs use it: they hold handles, so this reports them as `Shared`).
    pub fn destroy(self) -> Result<(), DestroyError<XrcError>> {
        let mut inner = DestroyError::sole(self.inner, "XRCD")?;
        inner.destroyed = true;
        let r = inner.ctx.lock().dealloc_xrcd(inner.handle);
        r.map_err(DestroyError::Verb)
    }
}
