//! XRC domains (`ibv_xrcd`) and XRC target QPs (see `roce_emulator::xrc`):
//! `ctx.alloc_xrcd()`, `pd.create_xrc_srq(n, sge, &xrcd, &cq)`,
//! `xrcd.create_tgt_qp()`, and initiators from `pd.qp_builder(&cq, &cq)
//! .qp_type(QpType::XrcSend)` whose work requests name the target's SRQ
//! (`SendWr::xrc(srq.handle().id())`).

use crate::error::{destroy_on_drop, DestroyError};
use crate::objects::Context;
use crate::{Cq, Pd, Qp};
use roce_emulator::{CreateQpError, XrcError, XrcdHandle};
use std::fmt;
use std::sync::Arc;

pub(crate) struct XrcdInner {
    ctx: Context,
    handle: XrcdHandle,
    /// The placeholder PD and CQ its target QPs are created on (they run
    /// each request with the XRC SRQ's own).
    pd: Pd,
    cq: Cq,
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
    inner: Arc<XrcdInner>,
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

    /// The SRQs and target QPs that use the domain.
    pub fn users(&self) -> u32 {
        self.inner.ctx.lock().xrcd_users(self.inner.handle).unwrap_or(0)
    }

    /// The device it is on.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: a target QP of this
    /// domain. Move it INIT -> RTR (-> RTS) with the initiator as its peer;
    /// requests then land in the XRC SRQ each names.
    pub fn create_tgt_qp(&self) -> Result<Qp, CreateQpError> {
        let i = &self.inner;
        let qpn = i.ctx.lock().create_xrc_tgt_qp(i.handle, i.pd.handle(), i.cq.handle())?;
        Ok(Qp::xrc_target(self, i.pd.clone(), i.cq.clone(), qpn))
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
