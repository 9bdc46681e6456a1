//! Shared receive queues (`ibv_srq`).

use crate::error::{destroy_on_drop, DestroyError};
use crate::objects::Context;
use crate::pd::Pd;
use roce_emulator::{
    CreateSrqError, DestroySrqError, ModifySrqError, PostSrqRecvError, RecvWr, SrqAttr, SrqHandle,
};
use std::fmt;
use std::sync::Arc;

pub(crate) struct SrqInner {
    pd: Pd,
    handle: SrqHandle,
    destroyed: bool,
    /// An XRC SRQ's domain and CQ (kept alive while it is).
    xrc: Option<(crate::pd::Xrcd, crate::Cq)>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        destroy_on_drop(self.destroyed, "destroy_srq", self.handle.id(), || {
            self.pd.context().lock().destroy_srq(self.handle)
        });
    }
}

/// A shared receive queue (`struct ibv_srq`): receive WRs that any QP
/// created with [`crate::QpBuilder::srq`] consumes. QPs using it keep it
/// alive; clones share it.
#[derive(Clone)]
pub struct Srq {
    inner: Arc<SrqInner>,
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq")
            .field("device", &self.inner.pd.context().name())
            .field("handle", &self.inner.handle.id())
            .finish()
    }
}

impl Pd {
    /// `ibv_create_srq` on this PD with room for `max_wr` receive WRs of
    /// up to `max_sge` SGEs each (no limit event armed).
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq, CreateSrqError> {
        let attr = SrqAttr { max_wr, max_sge, srq_limit: 0 };
        let handle = self.context().lock().create_srq(self.handle(), attr)?;
        Ok(Srq {
            inner: Arc::new(SrqInner { pd: self.clone(), handle, destroyed: false, xrc: None }),
        })
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an XRC SRQ on this PD in the
    /// domain `xrcd`, whose receives complete on `cq` (see
    /// `roce_emulator::xrc`). Its number (`ibv_get_srq_num`,
    /// [`Srq::handle`]`.id()`) is what initiators put in their requests.
    pub fn create_xrc_srq(
        &self,
        max_wr: u32,
        max_sge: u32,
        xrcd: &crate::pd::Xrcd,
        cq: &crate::Cq,
    ) -> Result<Srq, CreateSrqError> {
        let attr = SrqAttr { max_wr, max_sge, srq_limit: 0 };
        let handle = self.context().lock().create_xrc_srq(
            self.handle(),
            attr,
            xrcd.handle(),
            cq.handle(),
        )?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: self.clone(),
                handle,
                destroyed: false,
                xrc: Some((xrcd.clone(), cq.clone())),
            }),
        })
    }
}

impl Context {
    /// `ibv_create_srq` on `pd` (the same as [`Pd::create_srq`]).
    pub fn create_srq(&self, pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq, CreateSrqError> {
        pd.create_srq(max_wr, max_sge)
    }
}

impl Srq {
    /// The device's handle.
    pub fn handle(&self) -> SrqHandle {
        self.inner.handle
    }
    /// The PD it was created on.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// An XRC SRQ's domain.
    pub fn xrcd(&self) -> Option<&crate::pd::Xrcd> {
        self.inner.xrc.as_ref().map(|(x, _)| x)
    }

    /// `ibv_post_srq_recv`: queue one receive buffer.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostSrqRecvError> {
        let ctx = self.inner.pd.context();
        ctx.lock().post_srq_recv(self.inner.handle, wr)?;
        ctx.kick();
        Ok(())
    }

    /// `ibv_modify_srq(IBV_SRQ_LIMIT)`: raise an `SrqLimitReached` async
    /// event when fewer than `limit` WRs remain (0 disarms).
    pub fn set_limit(&self, limit: u32) -> Result<(), ModifySrqError> {
        self.inner.pd.context().lock().modify_srq(self.inner.handle, limit)
    }

    /// `ibv_modify_srq` with IBV_SRQ_MAX_WR: room for `max_wr` WRs.
    pub fn resize(&self, max_wr: u32) -> Result<(), ModifySrqError> {
        self.inner.pd.context().lock().resize_srq(self.inner.handle, max_wr)
    }

    /// `ibv_query_srq`: the attributes and the number of queued WRs.
    pub fn query(&self) -> Option<(SrqAttr, usize)> {
        self.inner.pd.context().lock().query_srq(self.inner.handle)
    }

    /// `ibv_destroy_srq` now, reporting errors (fails while QPs use it or
    /// clones exist).
    pub fn destroy(self) -> Result<(), DestroyError<DestroySrqError>> {
        let mut inner = DestroyError::sole(self.inner, "SRQ")?;
        inner.destroyed = true;
        let r = inner.pd.context().lock().destroy_srq(inner.handle);
        r.map_err(DestroyError::Verb)
    }
}
