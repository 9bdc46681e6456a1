//! Completion queues (`ibv_cq`).

use crate::device::Context;
use crate::driver::Budget;
use crate::error::DestroyError;
use roce_emulator::{CqHandle, DestroyCqError, PollCqError, WorkCompletion};
use std::fmt;
use std::sync::Arc;

pub(crate) struct CqInner {
    pub ctx: Context,
    pub handle: CqHandle,
    depth: u32,
    destroyed: bool,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if !self.destroyed {
            if let Err(e) = self.ctx.lock().destroy_cq(self.handle) {
                tracing::warn!(cq = self.handle.id(), error = %e, "destroy_cq in drop failed");
            }
        }
    }
}

/// A completion queue (`struct ibv_cq`). Clones share it; the QPs that
/// report to it keep it alive.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq")
            .field("device", &self.inner.ctx.name())
            .field("handle", &self.inner.handle.id())
            .field("depth", &self.inner.depth)
            .finish()
    }
}

impl Cq {
    pub(crate) fn new(ctx: Context, handle: CqHandle, depth: u32) -> Cq {
        Cq { inner: Arc::new(CqInner { ctx, handle, depth, destroyed: false }) }
    }

    /// The context this CQ belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The device's handle for this CQ.
    pub fn handle(&self) -> CqHandle {
        self.inner.handle
    }

    /// Its capacity in completions.
    pub fn depth(&self) -> u32 {
        self.inner.depth
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first (an empty
    /// vector when there are none). After an overflow the CQ returns what
    /// it holds, then `Overrun`.
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>, PollCqError> {
        self.inner.ctx.lock().poll_cq(self.inner.handle, max)
    }

    /// Poll until `n` completions have been collected, letting the driver
    /// make progress in between, within `budget`. Returns what was
    /// collected (fewer than `n` if the budget ran out or the fabric went
    /// idle; check the length).
    pub fn poll_blocking(
        &self,
        n: usize,
        budget: Budget,
    ) -> Result<Vec<WorkCompletion>, PollCqError> {
        let mut out = Vec::with_capacity(n);
        let mut err = None;
        self.inner.ctx.progress(
            || {
                if out.len() >= n {
                    return true;
                }
                match self.poll(n - out.len()) {
                    Ok(v) => out.extend(v),
                    Err(e) => {
                        err = Some(e);
                        return true;
                    }
                }
                out.len() >= n
            },
            budget,
        );
        match err {
            Some(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }

    /// `ibv_destroy_cq` now, reporting errors. Fails with
    /// [`DestroyError::Shared`] while QPs use it or clones exist.
    pub fn destroy(self) -> Result<(), DestroyError<DestroyCqError>> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                inner.destroyed = true;
                let r = inner.ctx.lock().destroy_cq(inner.handle);
                r.map_err(DestroyError::Verb)
            }
            Err(arc) => {
                Err(DestroyError::Shared { what: "CQ", others: Arc::strong_count(&arc) - 1 })
            }
        }
    }
}
