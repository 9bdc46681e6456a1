//! Completion channels (`ibv_comp_channel`) and device async events.
//!
//! A [`CompChannel`] collects the completion events of the CQs created on
//! it ([`Context::create_cq_with_channel`]). Arm a CQ with
//! [`Cq::req_notify`]; its next completion (or, solicited-only, its next
//! solicited receive or error completion) queues one event on the channel.
//! Take events with [`CompChannel::get_cq_event`] (blocking, with a
//! timeout), [`CompChannel::get_cq_event_async`] (a runtime-agnostic
//! future) or, for epoll users, wait for the channel's file descriptor
//! ([`std::os::fd::AsFd`]) to become readable and call
//! [`CompChannel::try_get_cq_event`]. Acknowledge with [`Cq::ack_events`].
//!
//! Device async events (QP fatal, CQ error, SRQ limit, ...) have the same
//! three ways in through the context's [`AsyncEventChannel`]
//! ([`Context::async_event_channel`], libibverbs' `async_fd`): a blocking
//! [`AsyncEventChannel::get_event`], a future, and a descriptor readable
//! while events are pending.
//!
//! Events move from the device to the channels when the driver makes
//! progress: a threaded driver (UDP) does it on its own thread after every
//! round, so the descriptor becomes readable without any call; with the
//! simulated fabric events are collected whenever the verbs drive it
//! (`get_cq_event`, `poll_blocking`, ...) or on [`CompChannel::process`].

use crate::driver::{poll_progress, Budget};
use crate::event_queue::EventQueue;
use crate::objects::{dispatch, route, AsyncInner, ChanInner, Context, Cq};
use roce_emulator::{AsyncEvent, CreateCqError};
use std::fmt;
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;

/// Dispatches on every round of a threaded driver, then re-registers.
struct Dispatcher {
    chan: Weak<ChanInner>,
}

impl Wake for Dispatcher {
    fn wake(self: Arc<Self>) {
        let Some(ch) = self.chan.upgrade() else { return };
        dispatch(&ch.ctx.inner.hca);
        let w = Waker::from(self.clone());
        ch.ctx.driver().register_waker(&w);
        // An event made between the dispatch and the registration found no
        // waker to call: take it now (else it waits for the next round of
        // the engine, which may never come on an idle device, and a reader
        // blocked on the channel's descriptor waits with it).
        dispatch(&ch.ctx.inner.hca);
    }
}

/// A completion channel (`struct ibv_comp_channel`). Clones share it.
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChanInner>,
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompChannel")
            .field("device", &self.inner.ctx.name())
            .field("pending", &self.inner.events.len())
            .finish()
    }
}

impl CompChannel {
    fn new(ctx: Context) -> std::io::Result<CompChannel> {
        let inner = Arc::new(ChanInner { ctx, events: EventQueue::new()? });
        let w = Waker::from(Arc::new(Dispatcher { chan: Arc::downgrade(&inner) }));
        inner.ctx.driver().register_waker(&w);
        Ok(CompChannel { inner })
    }

    /// Collect the device's pending completion events now (no progress).
    pub fn process(&self) {
        dispatch(&self.inner.ctx.inner.hca);
    }

    /// The number of events waiting on the channel.
    pub fn pending(&self) -> usize {
        self.process();
        self.inner.events.len()
    }

    /// Take an event without waiting (after the descriptor became readable).
    pub fn try_get_cq_event(&self) -> Option<Cq> {
        self.process();
        self.inner.pop()
    }

    /// `ibv_get_cq_event`: wait up to `timeout` for the next event and
    /// return the CQ it is for (acknowledge it with [`Cq::ack_events`]).
    /// With the simulated fabric this drives the fabric (and returns
    /// `None` early if it goes idle without an event).
    pub fn get_cq_event(&self, timeout: Duration) -> Option<Cq> {
        let ctx = &self.inner.ctx;
        let cq = self.inner.events.wait(ctx.driver(), timeout, || self.process())?;
        cq.inner.events_got.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(cq)
    }

    /// Async `ibv_get_cq_event`: resolves with the next event's CQ.
    /// Runtime-agnostic (wakers); no timeout of its own: wrap it in your
    /// runtime's (e.g. `tokio::time::timeout`).
    pub fn get_cq_event_async(&self) -> CqEvent<'_> {
        CqEvent { chan: self }
    }
}

/// The future of [`CompChannel::get_cq_event_async`].
#[derive(Debug)]
pub struct CqEvent<'a> {
    chan: &'a CompChannel,
}

impl Future for CqEvent<'_> {
    type Output = Cq;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Cq> {
        let chan = self.chan;
        chan.inner.events.poll_next(chan.inner.ctx.driver(), cx, || chan.try_get_cq_event())
    }
}

impl Context {
    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> std::io::Result<CompChannel> {
        CompChannel::new(self.clone())
    }

    /// `ibv_create_cq` with a completion channel: events of this CQ go to
    /// `channel` once armed with [`Cq::req_notify`].
    pub fn create_cq_with_channel(
        &self,
        cqe: u32,
        channel: &CompChannel,
    ) -> Result<Cq, CreateCqError> {
        let cq = self.create_cq(cqe)?;
        route(&channel.inner, &cq);
        Ok(cq)
    }

    /// `ibv_get_async_event`: wait up to `timeout` (driving a simulated
    /// fabric) for the next asynchronous event.
    pub fn get_async_event(&self, timeout: Duration) -> Option<AsyncEvent> {
        let mut got = None;
        self.progress(
            || {
                got = self.poll_async_event();
                got.is_some()
            },
            Budget { events: 1_000_000, wall: timeout },
        );
        got
    }

    /// Async [`Context::get_async_event`] (runtime-agnostic; no timeout).
    pub fn get_async_event_async(&self) -> AsyncEventFuture<'_> {
        AsyncEventFuture { ctx: self }
    }
}

/// The future of [`Context::get_async_event_async`].
#[derive(Debug)]
pub struct AsyncEventFuture<'a> {
    ctx: &'a Context,
}

impl Future for AsyncEventFuture<'_> {
    type Output = AsyncEvent;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<AsyncEvent> {
        poll_progress(self.ctx.driver(), cx, || self.ctx.poll_async_event())
    }
}

/// Collects async events on every round of a threaded driver, then
/// re-registers (holds the channel weakly: a dropped context stops it).
struct AsyncDispatcher {
    chan: Weak<AsyncInner>,
}

impl Wake for AsyncDispatcher {
    fn wake(self: Arc<Self>) {
        let Some(ch) = self.chan.upgrade() else { return };
        ch.collect();
        let w = Waker::from(self.clone());
        ch.driver.register_waker(&w);
    }
}

/// A context's asynchronous events as a channel with a file descriptor,
/// like libibverbs' `ibv_context.async_fd`: the descriptor
/// ([`std::os::fd::AsFd`]) is readable while events are pending, for
/// `poll(2)`/epoll users; [`AsyncEventChannel::get_event`] waits (blocking,
/// with a timeout) and [`AsyncEventChannel::get_event_async`] is a
/// runtime-agnostic future.
///
/// One channel per context ([`Context::async_event_channel`] returns
/// clones of it). Once it exists, every async event of the context goes
/// through it, so [`Context::poll_async_event`] and
/// [`Context::get_async_event`] take from the same queue and keep the
/// descriptor in step. Events move from the device to the channel when
/// the driver makes progress: a threaded driver (UDP) does it on its own
/// thread after every round that received datagrams or fired timers, so
/// the descriptor becomes readable without any call; with the simulated
/// fabric they are collected whenever the verbs drive it, or on
/// [`AsyncEventChannel::process`].
#[derive(Clone)]
pub struct AsyncEventChannel {
    ctx: Context,
    inner: Arc<AsyncInner>,
}

impl fmt::Debug for AsyncEventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEventChannel")
            .field("device", &self.ctx.name())
            .field("pending", &self.inner.events.len())
            .finish()
    }
}

impl AsyncEventChannel {
    /// Collect the device's pending async events now (no progress).
    pub fn process(&self) {
        self.inner.collect();
    }

    /// The number of events waiting on the channel.
    pub fn pending(&self) -> usize {
        self.process();
        self.inner.events.len()
    }

    /// Take an event without waiting (after the descriptor became readable).
    pub fn try_get_event(&self) -> Option<AsyncEvent> {
        self.process();
        self.inner.pop()
    }

    /// `ibv_get_async_event`: wait up to `timeout` for the next event. With
    /// the simulated fabric this drives the fabric (and returns `None`
    /// early if it goes idle without an event).
    pub fn get_event(&self, timeout: Duration) -> Option<AsyncEvent> {
        self.inner.events.wait(self.ctx.driver(), timeout, || self.process())
    }

    /// Async [`AsyncEventChannel::get_event`]: resolves with the next
    /// event. Runtime-agnostic; no timeout of its own.
    pub fn get_event_async(&self) -> AsyncChannelEvent<'_> {
        AsyncChannelEvent { chan: self }
    }
}

/// The future of [`AsyncEventChannel::get_event_async`].
#[derive(Debug)]
pub struct AsyncChannelEvent<'a> {
    chan: &'a AsyncEventChannel,
}

impl Future for AsyncChannelEvent<'_> {
    type Output = AsyncEvent;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<AsyncEvent> {
        let chan = self.chan;
        chan.inner.events.poll_next(&*chan.inner.driver, cx, || chan.try_get_event())
    }
}

impl Context {
    /// The context's async event channel (`ibv_context.async_fd`), created
    /// on first use; later calls return the same channel. A not yet taken
    /// [`AsyncEvent::PortActive`] is its first event.
    pub fn async_event_channel(&self) -> std::io::Result<AsyncEventChannel> {
        let inner = match self.inner.async_chan.get() {
            Some(i) => i.clone(),
            None => {
                let events = EventQueue::new()?;
                let mut created = false;
                let i = self
                    .inner
                    .async_chan
                    .get_or_init(|| {
                        created = true;
                        Arc::new(AsyncInner {
                            hca: self.inner.hca.clone(),
                            driver: self.inner.driver.clone(),
                            events,
                        })
                    })
                    .clone();
                if created {
                    if self.take_port_active() {
                        i.push(AsyncEvent::PortActive);
                    }
                    let w = Waker::from(Arc::new(AsyncDispatcher { chan: Arc::downgrade(&i) }));
                    i.driver.register_waker(&w);
                }
                i
            }
        };
        Ok(AsyncEventChannel { ctx: self.clone(), inner })
    }
}

/// The descriptor of a channel's event queue: readable while events are
/// pending (for epoll/poll users).
macro_rules! event_fd {
    ($($t:ty),*) => {$(
        impl AsFd for $t {
            fn as_fd(&self) -> BorrowedFd<'_> {
                self.inner.events.rx.as_fd()
            }
        }

        impl AsRawFd for $t {
            fn as_raw_fd(&self) -> RawFd {
                self.inner.events.rx.as_raw_fd()
            }
        }
    )*};
}

event_fd!(CompChannel, AsyncEventChannel);
