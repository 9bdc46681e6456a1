//! Completion queues (`ibv_cq`).

use crate::driver::{poll_progress, Budget};
use crate::error::DestroyError;
use crate::objects::{discard_events, Context};
use roce_emulator::{
    CqHandle, CreateCqError, DestroyCqError, NotifyCqError, PollCqError, ResizeCqError, SqRelease,
    WorkCompletion,
};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

pub use crate::objects::Cq;

impl Context {
    /// `ibv_create_cq` with room for `cqe` completions. A CQ that overflows
    /// enters error and its QPs go to ERR (IBA §11.4.2.1): size it for
    /// every completion that can be outstanding.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq, CreateCqError> {
        let (h, ring) = {
            let mut g = self.lock();
            let h = g.create_cq(cqe)?;
            (h, g.cq_ring(h).ok_or(CreateCqError::InvalidDepth { cqe, max: 0 })?)
        };
        Ok(Cq::new(self.clone(), h, cqe, ring))
    }
}

impl Cq {
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
        self.inner.depth.load(Ordering::Relaxed)
    }

    /// `ibv_resize_cq`: change the capacity to `cqe` completions; refused
    /// below the number of completions the CQ holds now.
    pub fn resize(&self, cqe: u32) -> Result<(), ResizeCqError> {
        let mut h = self.inner.ctx.lock();
        h.resize_cq(self.inner.handle, cqe)?;
        self.inner.depth.store(cqe, Ordering::Relaxed);
        Ok(())
    }

    /// `ibv_req_notify_cq`: arm the CQ once. Its next completion (with
    /// `solicited_only`: its next receive of a message sent with the
    /// Solicited Event bit, or any error completion) queues one event on
    /// the CQ's [`crate::CompChannel`]; re-arm after each event.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), NotifyCqError> {
        self.inner.ctx.lock().req_notify_cq(self.inner.handle, solicited_only)
    }

    /// `ibv_ack_cq_events`: acknowledge `n` events taken for this CQ
    /// (at most the number not yet acknowledged).
    pub fn ack_events(&self, n: u32) {
        let got = self.inner.events_got.load(Ordering::Relaxed);
        let _ = self.inner.events_acked.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |a| {
            Some(a.saturating_add(n).min(got))
        });
    }

    /// Events taken from the channel for this CQ and not yet acknowledged
    /// (libibverbs' `ibv_destroy_cq` waits for this to reach 0).
    pub fn unacked_events(&self) -> u32 {
        let got = self.inner.events_got.load(Ordering::Relaxed);
        got.saturating_sub(self.inner.events_acked.load(Ordering::Relaxed))
    }

    /// `ibv_poll_cq`: up to `max` completions, oldest first (an empty
    /// vector when there are none). After an overflow the CQ returns what
    /// it holds, then `Overrun`.
    pub fn poll(&self, max: usize) -> Result<Vec<WorkCompletion>, PollCqError> {
        // a few on the stack first: an empty poll (a spinning program's
        // usual one) allocates nothing
        let cap = max.min(self.inner.ring.len());
        let mut first = [WorkCompletion::EMPTY; 16];
        let k = cap.min(first.len());
        let n = self.poll_into(&mut first[..k])?;
        let mut out = first[..n].to_vec();
        if n == k && cap > k {
            out.resize(cap, WorkCompletion::EMPTY);
            // (an overrun found now is reported by the next poll)
            let more = self.poll_into(&mut out[k..]).unwrap_or(0);
            out.truncate(k + more);
        }
        Ok(out)
    }

    /// `ibv_poll_cq` into the caller's array: how many completions were
    /// written, oldest first (0 when there are none); no allocation.
    pub fn poll_into(&self, out: &mut [WorkCompletion]) -> Result<usize, PollCqError> {
        // the CQ's entries, not the device: no device lock
        self.inner.ring.poll_into(out).map_err(|()| PollCqError::Overrun(self.inner.handle))
    }

    /// [`Cq::poll_progress`] into the caller's array ([`Cq::poll_into`]).
    pub fn poll_progress_into(&self, out: &mut [WorkCompletion]) -> Result<usize, PollCqError> {
        let got = self.poll_into(out)?;
        if got > 0 {
            self.inner.ctx.driver().polled();
            return Ok(got);
        }
        self.inner.ctx.driver().poll_once();
        self.poll_into(out)
    }

    /// [`Cq::poll`] for a consumer that takes completions ahead of the
    /// program (the C ABI's extended CQ reads a batch): the send-queue
    /// slots they free ([`Cq::poll`] frees them at once) are freed only when
    /// each [`SqRelease`] is handed to [`Cq::release_sq`], when the program
    /// reads that completion.
    pub fn poll_deferred(
        &self,
        max: usize,
    ) -> Result<Vec<(WorkCompletion, SqRelease)>, PollCqError> {
        let h = self.inner.handle;
        self.inner.ring.poll_deferred(max).map_err(|()| PollCqError::Overrun(h))
    }

    /// Free the send-queue slots of a completion taken with
    /// [`Cq::poll_deferred`] (an atomic addition: no lock).
    pub fn release_sq(&self, rel: SqRelease) {
        rel.release();
    }

    /// [`Cq::poll`], and when it finds nothing, let the driver run one
    /// non-blocking round in this thread ([`crate::Driver::poll_once`]:
    /// receive what waits, fire timers, send) and poll again. For programs
    /// that spin on `ibv_poll_cq` (perftest): their spinning moves the
    /// frames, with no thread in between.
    pub fn poll_progress(&self, max: usize) -> Result<Vec<WorkCompletion>, PollCqError> {
        let mut out = vec![WorkCompletion::EMPTY; max];
        let n = self.poll_progress_into(&mut out)?;
        out.truncate(n);
        Ok(out)
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

    /// Async [`Cq::poll_blocking`]: resolves once `n` completions were
    /// collected (or the CQ failed). Runtime-agnostic: a threaded driver
    /// (UDP) wakes the task from its own thread after each round with
    /// progress; with a driver that has no thread (the simulated fabric) the
    /// future steps it a little on each poll and wakes itself. No timeout
    /// here: wrap it in your runtime's (e.g. `tokio::time::timeout`).
    pub fn poll_async(&self, n: usize) -> PollCq<'_> {
        PollCq { cq: self, n, out: Vec::with_capacity(n) }
    }

    /// `ibv_destroy_cq` now, reporting errors. Fails with
    /// [`DestroyError::Shared`] while QPs use it or clones exist.
    pub fn destroy(self) -> Result<(), DestroyError<DestroyCqError>> {
        let mut arc = self.inner;
        // Completion events never taken from the channel hold clones: they
        // go with the CQ. A clone a dispatching thread holds for a moment
        // (between the device's event and the channel's queue) is waited
        // for, briefly.
        for attempt in 0..50 {
            discard_events(&arc.ctx.inner.hca, arc.handle);
            match Arc::try_unwrap(arc) {
                Ok(mut inner) => {
                    inner.destroyed = true;
                    let r = inner.ctx.lock().destroy_cq(inner.handle);
                    return r.map_err(DestroyError::Verb);
                }
                Err(a) if attempt < 49 => {
                    arc = a;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(a) => arc = a,
            }
        }
        Err(DestroyError::Shared { what: "CQ", others: Arc::strong_count(&arc) - 1 })
    }
}

/// The future of [`Cq::poll_async`].
#[derive(Debug)]
pub struct PollCq<'a> {
    cq: &'a Cq,
    n: usize,
    out: Vec<WorkCompletion>,
}

impl Future for PollCq<'_> {
    type Output = Result<Vec<WorkCompletion>, PollCqError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let (cq, n, out) = (this.cq, this.n, &mut this.out);
        let got = poll_progress(cq.inner.ctx.driver(), cx, || match cq.poll(n - out.len()) {
            Ok(v) => {
                out.extend(v);
                (out.len() >= n).then_some(Ok(()))
            }
            Err(e) => Some(Err(e)),
        });
        match got {
            Poll::Ready(Err(e)) if this.out.is_empty() => Poll::Ready(Err(e)),
            Poll::Ready(_) => Poll::Ready(Ok(std::mem::take(&mut this.out))),
            Poll::Pending => Poll::Pending,
        }
    }
}
