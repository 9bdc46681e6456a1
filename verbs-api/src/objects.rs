//! The state the verbs objects share, below the modules of the objects:
//! the inner halves of contexts and CQs, the completion and async event
//! queues, and the routes of completion events from a device's CQs to
//! their channels. The object modules (`device`, `cq`, `channel`, `pd`,
//! `qp`, `srq`) build on this one and never import each other back: a
//! child object's module adds its constructor to its parent
//! (`Context::alloc_pd` is in `pd`, `Pd::qp_builder` in `qp`).

use crate::driver::Driver;
use crate::error::destroy_on_drop;
use crate::event_queue::{lock as lock_queue, EventQueue};
use roce_emulator::{AsyncEvent, CqHandle, Hca};
use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

/// Lock a device. A poisoned lock (a thread panicked while holding it) is
/// used anyway: the HCA's state is whatever the panicking holder left, and
/// the verbs stay usable for cleanup.
pub(crate) fn lock(hca: &Mutex<Hca>) -> MutexGuard<'_, Hca> {
    hca.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct ContextInner {
    pub hca: Arc<Mutex<Hca>>,
    pub driver: Arc<dyn Driver>,
    pub name: String,
    pub addr: IpAddr,
    /// IBV_EVENT_PORT_ACTIVE not yet reported to this context.
    pub port_active: AtomicBool,
    /// The async event channel, once created (then every async event of
    /// this context goes through it).
    pub async_chan: OnceLock<Arc<AsyncInner>>,
}

/// An opened device (`struct ibv_context`). Clones share the context; PDs
/// and CQs keep it alive.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.inner.name)
            .field("addr", &self.inner.addr)
            .finish()
    }
}

impl Context {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Hca> {
        lock(&self.inner.hca)
    }

    /// On a device shared by several processes, this process's member
    /// slot: the top byte of its QPNs and XRC SRQ numbers.
    pub fn member_slot(&self) -> Option<u8> {
        self.lock().member_slot()
    }

    pub(crate) fn driver(&self) -> &dyn Driver {
        &*self.inner.driver
    }

    /// Kick the driver for work posted to this device.
    pub(crate) fn kick(&self) {
        self.inner.driver.kick_device(&self.inner.hca);
    }

    /// Whether PORT_ACTIVE was still to be reported (it is not any more).
    pub(crate) fn take_port_active(&self) -> bool {
        self.inner.port_active.swap(false, Ordering::Relaxed)
    }
}

pub(crate) struct CqInner {
    pub ctx: Context,
    pub handle: CqHandle,
    /// The CQ's entries, polled without the device lock.
    pub ring: Arc<roce_emulator::CqRing>,
    pub depth: AtomicU32,
    pub destroyed: bool,
    /// Completion events taken from a channel for this CQ.
    pub events_got: AtomicU32,
    /// Of those, acknowledged with [`Cq::ack_events`].
    pub events_acked: AtomicU32,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        unroute(&self.ctx.inner.hca, self.handle);
        destroy_on_drop(self.destroyed, "destroy_cq", self.handle.id(), || {
            self.ctx.lock().destroy_cq(self.handle)
        });
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
            .field("depth", &self.inner.depth.load(Ordering::Relaxed))
            .finish()
    }
}

impl Cq {
    pub(crate) fn new(
        ctx: Context,
        handle: CqHandle,
        depth: u32,
        ring: Arc<roce_emulator::CqRing>,
    ) -> Cq {
        Cq {
            inner: Arc::new(CqInner {
                ctx,
                handle,
                ring,
                depth: AtomicU32::new(depth),
                destroyed: false,
                events_got: AtomicU32::new(0),
                events_acked: AtomicU32::new(0),
            }),
        }
    }
}

// ---- completion channels and the routes to them ----

/// Which channel and CQ object a device CQ handle belongs to, per device.
type Routes = HashMap<(usize, CqHandle), (Weak<ChanInner>, Weak<CqInner>)>;

fn routes() -> &'static Mutex<Routes> {
    static R: OnceLock<Mutex<Routes>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

fn dev_key(hca: &Arc<Mutex<Hca>>) -> usize {
    Arc::as_ptr(hca) as usize
}

/// Move the device's pending completion events to their channels. Events
/// of CQs without a channel are dropped (nobody can wait for them).
pub(crate) fn dispatch(hca: &Arc<Mutex<Hca>>) {
    let handles: Vec<CqHandle> = {
        let mut h = lock(hca);
        std::iter::from_fn(|| h.poll_comp_event()).collect()
    };
    if handles.is_empty() {
        return;
    }
    let key = dev_key(hca);
    for h in handles {
        let route = lock_queue(routes()).get(&(key, h)).cloned();
        let Some((ch, cq)) = route else { continue };
        let (Some(ch), Some(cq)) = (ch.upgrade(), cq.upgrade()) else { continue };
        ch.push(Cq { inner: cq });
    }
}

/// Route the completion events of `cq` to `chan`.
pub(crate) fn route(chan: &Arc<ChanInner>, cq: &Cq) {
    let key = (dev_key(&cq.inner.ctx.inner.hca), cq.inner.handle);
    lock_queue(routes()).insert(key, (Arc::downgrade(chan), Arc::downgrade(&cq.inner)));
}

/// Drop the completion events of `cq` that wait in its channel and were
/// never taken: the CQ is being destroyed (the kernel discards them the
/// same way when a program destroys a CQ). Their `Cq` clones would
/// otherwise keep it from being destroyed.
pub(crate) fn discard_events(hca: &Arc<Mutex<Hca>>, cq: CqHandle) {
    let route = lock_queue(routes()).get(&(dev_key(hca), cq)).cloned();
    if let Some(ch) = route.and_then(|(ch, _)| ch.upgrade()) {
        ch.events.discard(|c| c.inner.handle == cq);
    }
}

/// Forget a CQ's route (its handle may be reused after destruction).
pub(crate) fn unroute(hca: &Arc<Mutex<Hca>>, cq: CqHandle) {
    lock_queue(routes()).remove(&(dev_key(hca), cq));
}

/// The queue behind a [`crate::CompChannel`].
pub(crate) struct ChanInner {
    pub ctx: Context,
    pub events: EventQueue<Cq>,
}

impl ChanInner {
    fn push(&self, cq: Cq) {
        self.events.push(cq);
    }

    pub(crate) fn pop(&self) -> Option<Cq> {
        let cq = self.events.pop()?;
        cq.inner.events_got.fetch_add(1, Ordering::Relaxed);
        Some(cq)
    }
}

// ---- device async events with a file descriptor (`ibv_context.async_fd`) ----

/// The queue behind a context's [`crate::AsyncEventChannel`]: events moved from
/// the device, one byte in the socket pair per pending event.
pub(crate) struct AsyncInner {
    pub hca: Arc<Mutex<Hca>>,
    pub driver: Arc<dyn Driver>,
    pub events: EventQueue<AsyncEvent>,
}

impl AsyncInner {
    pub(crate) fn push(&self, e: AsyncEvent) {
        self.events.push(e);
    }

    /// Move the device's pending async events here.
    pub(crate) fn collect(&self) {
        let events: Vec<AsyncEvent> = {
            let mut h = lock(&self.hca);
            std::iter::from_fn(|| h.poll_async_event()).collect()
        };
        for e in events {
            self.push(e);
        }
    }

    pub(crate) fn pop(&self) -> Option<AsyncEvent> {
        self.events.pop()
    }
}
