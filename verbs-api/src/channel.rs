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

use crate::cq::Cq;
use crate::device::Context;
use crate::driver::Budget;
use roce_emulator::{AsyncEvent, CqHandle, CreateCqError, Hca};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::Duration;

/// Which channel and CQ object a device CQ handle belongs to, per device.
type Routes = HashMap<(usize, CqHandle), (Weak<ChanInner>, Weak<crate::cq::CqInner>)>;

fn routes() -> &'static Mutex<Routes> {
    static R: OnceLock<Mutex<Routes>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn dev_key(hca: &Arc<Mutex<Hca>>) -> usize {
    Arc::as_ptr(hca) as usize
}

/// Move the device's pending completion events to their channels. Events
/// of CQs without a channel are dropped (nobody can wait for them).
pub(crate) fn dispatch(hca: &Arc<Mutex<Hca>>) {
    let handles: Vec<CqHandle> = {
        let mut h = crate::device::lock(hca);
        std::iter::from_fn(|| h.poll_comp_event()).collect()
    };
    if handles.is_empty() {
        return;
    }
    let key = dev_key(hca);
    for h in handles {
        let route = lock(routes()).get(&(key, h)).cloned();
        let Some((ch, cq)) = route else { continue };
        let (Some(ch), Some(cq)) = (ch.upgrade(), cq.upgrade()) else { continue };
        ch.push(Cq { inner: cq });
    }
}

struct Queue<T> {
    events: VecDeque<(T, bool)>,
    /// Threads in [`EventQueue::wait`].
    waiting: usize,
}

/// An event queue with a file descriptor: one byte in a socket pair per
/// pending event (a full socket only means "readable"), for
/// blocking waiters and wakers for futures. Shared by completion channels
/// and the async event channel.
///
/// An event pushed while a thread waits in [`EventQueue::wait`] (which
/// takes it at once) writes no byte: the two system calls of signalling
/// and taking back are saved on the common path of `ibv_get_cq_event`.
/// Events still queued when the last waiter leaves are signalled then, so
/// the descriptor is readable whenever events are pending and nobody is
/// taking them.
struct EventQueue<T> {
    /// Each event with whether its byte was written.
    queue: Mutex<Queue<T>>,
    wakers: Mutex<Vec<Waker>>,
    rx: UnixStream,
    tx: UnixStream,
}

impl<T> EventQueue<T> {
    fn new() -> std::io::Result<EventQueue<T>> {
        let (rx, tx) = UnixStream::pair()?;
        // The read end stays in blocking mode: it is the descriptor users
        // poll (and C programs may set O_NONBLOCK on it themselves, as on
        // libibverbs' channel fd); our own reads never block (MSG_DONTWAIT).
        tx.set_nonblocking(true)?;
        Ok(EventQueue {
            queue: Mutex::new(Queue { events: VecDeque::new(), waiting: 0 }),
            wakers: Mutex::new(Vec::new()),
            rx,
            tx,
        })
    }

    fn len(&self) -> usize {
        lock(&self.queue).events.len()
    }

    fn push(&self, e: T) {
        {
            let mut q = lock(&self.queue);
            let signal = q.waiting == 0;
            q.events.push_back((e, signal));
            if signal {
                let _ = (&self.tx).write(&[1]);
            }
        }
        for w in std::mem::take(&mut *lock(&self.wakers)) {
            w.wake();
        }
    }

    fn take_byte(&self) {
        let mut b = [0u8; 1];
        let _ = nix::sys::socket::recv(
            self.rx.as_raw_fd(),
            &mut b,
            nix::sys::socket::MsgFlags::MSG_DONTWAIT,
        );
    }

    /// Drop the queued events `gone` picks (and their bytes on the fd).
    fn discard(&self, gone: impl Fn(&T) -> bool) -> usize {
        let mut q = lock(&self.queue);
        let before = q.events.len();
        let mut bytes = 0;
        q.events.retain(|(e, signalled)| {
            let drop = gone(e);
            bytes += usize::from(drop && *signalled);
            !drop
        });
        for _ in 0..bytes {
            self.take_byte();
        }
        before - q.events.len()
    }

    fn pop(&self) -> Option<T> {
        let (e, signalled) = lock(&self.queue).events.pop_front()?;
        if signalled {
            self.take_byte();
        }
        Some(e)
    }

    /// Blocking get: let the driver make progress in this thread (a real
    /// device's engine receives on its sockets here and sleeps on them; the
    /// simulated fabric steps) until an event is there, calling `process`
    /// (move events from the device) before each check.
    fn wait(&self, ctx: &Context, timeout: Duration, process: impl Fn()) -> Option<T> {
        let budget = Budget { events: 1_000_000, wall: timeout };
        lock(&self.queue).waiting += 1;
        ctx.progress(
            || {
                process();
                self.len() > 0
            },
            budget,
        );
        let e = self.pop();
        // the last waiter leaving signals what it did not take
        let mut q = lock(&self.queue);
        q.waiting -= 1;
        if q.waiting == 0 {
            for (_, signalled) in q.events.iter_mut().filter(|(_, s)| !*s) {
                let _ = (&self.tx).write(&[1]);
                *signalled = true;
            }
        }
        e
    }

    /// One poll of a future waiting for an event taken by `try_get`.
    fn poll_next(
        &self,
        driver: &dyn crate::driver::Driver,
        cx: &mut TaskContext<'_>,
        mut try_get: impl FnMut() -> Option<T>,
    ) -> Poll<T> {
        {
            let mut w = lock(&self.wakers);
            if !w.iter().any(|x| x.will_wake(cx.waker())) {
                w.push(cx.waker().clone());
            }
        }
        if let Some(e) = try_get() {
            return Poll::Ready(e);
        }
        if !driver.register_waker(cx.waker()) {
            let mut got = None;
            driver.progress(
                &mut || {
                    got = try_get();
                    got.is_some()
                },
                Budget::events(1000),
            );
            if let Some(e) = got {
                return Poll::Ready(e);
            }
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

pub(crate) struct ChanInner {
    ctx: Context,
    events: EventQueue<Cq>,
}

impl ChanInner {
    fn push(&self, cq: Cq) {
        self.events.push(cq);
    }

    fn pop(&self) -> Option<Cq> {
        let cq = self.events.pop()?;
        cq.inner.events_got.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(cq)
    }
}

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
        let cq = self.inner.events.wait(ctx, timeout, || self.process())?;
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

impl AsFd for CompChannel {
    /// Readable while events are pending (for epoll/poll users).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.events.rx.as_fd()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.events.rx.as_raw_fd()
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
        let key = (dev_key(&self.inner.hca), cq.handle());
        lock(routes()).insert(key, (Arc::downgrade(&channel.inner), Arc::downgrade(&cq.inner)));
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

/// Forget a CQ's route (its handle may be reused after destruction).
/// Drop the completion events of `cq` that wait in its channel and were
/// never taken: the CQ is being destroyed (the kernel discards them the
/// same way when a program destroys a CQ). Their `Cq` clones would
/// otherwise keep it from being destroyed.
pub(crate) fn discard_events(hca: &Arc<Mutex<Hca>>, cq: CqHandle) {
    let route = lock(routes()).get(&(dev_key(hca), cq)).cloned();
    if let Some(ch) = route.and_then(|(ch, _)| ch.upgrade()) {
        ch.events.discard(|c| c.inner.handle == cq);
    }
}

pub(crate) fn unroute(hca: &Arc<Mutex<Hca>>, cq: CqHandle) {
    lock(routes()).remove(&(dev_key(hca), cq));
}

/// The future of [`Context::get_async_event_async`].
#[derive(Debug)]
pub struct AsyncEventFuture<'a> {
    ctx: &'a Context,
}

impl Future for AsyncEventFuture<'_> {
    type Output = AsyncEvent;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<AsyncEvent> {
        let driver = self.ctx.driver();
        let threaded = driver.register_waker(cx.waker());
        if let Some(e) = self.ctx.poll_async_event() {
            return Poll::Ready(e);
        }
        if !threaded {
            let mut got = None;
            driver.progress(
                &mut || {
                    got = self.ctx.poll_async_event();
                    got.is_some()
                },
                Budget::events(1000),
            );
            if let Some(e) = got {
                return Poll::Ready(e);
            }
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

// ---- device async events with a file descriptor (`ibv_context.async_fd`) ----

/// The queue behind a context's [`AsyncEventChannel`]: events moved from
/// the device, one byte in the socket pair per pending event.
pub(crate) struct AsyncInner {
    hca: Arc<Mutex<Hca>>,
    driver: Arc<dyn crate::driver::Driver>,
    events: EventQueue<AsyncEvent>,
}

impl AsyncInner {
    fn push(&self, e: AsyncEvent) {
        self.events.push(e);
    }

    /// Move the device's pending async events here.
    pub(crate) fn collect(&self) {
        let events: Vec<AsyncEvent> = {
            let mut h = crate::device::lock(&self.hca);
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
        self.inner.events.wait(&self.ctx, timeout, || self.process())
    }

    /// Async [`AsyncEventChannel::get_event`]: resolves with the next
    /// event. Runtime-agnostic; no timeout of its own.
    pub fn get_event_async(&self) -> AsyncChannelEvent<'_> {
        AsyncChannelEvent { chan: self }
    }
}

impl AsFd for AsyncEventChannel {
    /// Readable while events are pending (for epoll/poll users).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.events.rx.as_fd()
    }
}

impl AsRawFd for AsyncEventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.events.rx.as_raw_fd()
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
