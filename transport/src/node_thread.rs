//! [`NodeThread`]: a thread between a sans-IO node and a transport, for code
//! that posts through the node's mutex and waits on the thread. It is a
//! one-port [`crate::Engine`] with its thread (the engine's rounds: receive
//! every waiting message (`recvmmsg`, GRO split, ICRC check) →
//! `handle_datagram(now)` for each; fire `handle_timeout(now)` if the
//! node's deadline has passed; drain `poll_transmit(now)` and send
//! (batched, GSO for equal-sized runs); when a round did nothing, the
//! thread sleeps in `ppoll` on the socket and an eventfd, for at most the
//! time until the node's next deadline (and at most `max_idle`)). The
//! transport it drives is any [`Link`] (`crate::socket`).
//!
//! The node lives behind a `Mutex` shared with the application, which
//! posts work through it from any thread (sync or async code alike) and
//! then calls [`NodeThreadHandle::notify`] so the thread wakes at once and sends
//! the new packets (without it they leave at the next wake-up: the next
//! received datagram, timer, or `max_idle`).
//!
//! Time: `now` is `std::time::Instant` mapped to nanoseconds since the
//! thread started ([`NodeThreadHandle::now`]).
//!
//! Waiting for progress: [`NodeThreadHandle::wait_for_progress`] blocks on a
//! condition variable (sync code; from tokio call it in `spawn_blocking`),
//! and [`NodeThreadHandle::on_progress`] registers a callback run by the
//! thread after each round that handled datagrams or fired timers; for
//! async code, make it call `tokio::sync::Notify::notify_waiters()` (or
//! wake a waker) and await that. No async runtime is needed by this crate.

use crate::counters::{CountersSnapshot, TransportCounters};
use crate::engine::{Engine, EngineConfig, EngineHandle};
use crate::socket::Link;
use crate::udp::UdpTransport;
use roce_emulator::{Instant, SansIo};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Tuning of a [`NodeThread`].
#[derive(Clone, Debug)]
pub struct NodeThreadConfig {
    /// Longest sleep without any event (bounds shutdown and missed-notify latency).
    pub max_idle: Duration,
    /// Most `recvmmsg` calls per round.
    pub max_rx_batches: usize,
    /// Most datagrams taken from `poll_transmit` per round.
    pub max_tx_per_round: usize,
    /// Thread name.
    pub name: String,
    /// How long dropping the handle waits for the thread to end.
    pub shutdown_timeout: Duration,
    /// Before sleeping, keep polling the socket (non-blocking receives) and
    /// the posted-work flag for this long (like the kernel's `SO_BUSY_POLL`).
    /// While the thread spins, a peer's datagram or a notify does not need
    /// to wake it (no eventfd write, no scheduler round trip), at the price
    /// of this much CPU after each busy period. Zero: sleep at once.
    pub spin: Duration,
}

impl Default for NodeThreadConfig {
    fn default() -> Self {
        NodeThreadConfig {
            max_idle: Duration::from_millis(50),
            max_rx_batches: 8,
            max_tx_per_round: 256,
            name: "roce-nodethread".into(),
            shutdown_timeout: Duration::from_secs(2),
            spin: Duration::ZERO,
        }
    }
}

/// The engine behind a [`NodeThreadHandle`], with its node type erased.
trait Erased<T: Link>: Send + Sync {
    fn engine_notify(&self);
    fn engine_now(&self) -> Instant;
    fn progress_count(&self) -> u64;
    fn wait(&self, seen: u64, timeout: Duration) -> u64;
    fn hook(&self, f: Box<dyn Fn() + Send + Sync>);
    fn finished(&self) -> bool;
    fn into_transport(self: Box<Self>) -> Option<T>;
}

impl<N: SansIo + Send + 'static, T: Link> Erased<T> for EngineHandle<N, T> {
    fn engine_notify(&self) {
        self.notify()
    }
    fn engine_now(&self) -> Instant {
        self.now()
    }
    fn progress_count(&self) -> u64 {
        Engine::progress_count(self)
    }
    fn wait(&self, seen: u64, timeout: Duration) -> u64 {
        self.wait_for_progress(seen, timeout)
    }
    fn hook(&self, f: Box<dyn Fn() + Send + Sync>) {
        self.on_progress(f)
    }
    fn finished(&self) -> bool {
        self.thread_finished()
    }
    fn into_transport(self: Box<Self>) -> Option<T> {
        (*self).into_transports()?.pop()
    }
}

/// Starts a node thread for one node: an [`Engine`] with one port and
/// its thread, for code that posts through the node's mutex and waits on
/// the thread (`notify`, `wait_for_progress`).
pub struct NodeThread;

impl NodeThread {
    /// Spawn a node thread with the default [`NodeThreadConfig`].
    pub fn spawn<N, T>(node: Arc<Mutex<N>>, transport: T) -> io::Result<NodeThreadHandle<T>>
    where
        N: SansIo + Send + 'static,
        T: Link,
    {
        NodeThread::spawn_with(node, transport, NodeThreadConfig::default())
    }

    /// Spawn a node thread that owns `transport` and drives `node`.
    pub fn spawn_with<N, T>(
        node: Arc<Mutex<N>>,
        transport: T,
        cfg: NodeThreadConfig,
    ) -> io::Result<NodeThreadHandle<T>>
    where
        N: SansIo + Send + 'static,
        T: Link,
    {
        let counters = transport.counters();
        let local = transport.local_addr();
        let ec = EngineConfig {
            name: cfg.name.clone(),
            thread: true,
            thread_spin: cfg.spin,
            max_idle: cfg.max_idle,
            max_tx_per_round: cfg.max_tx_per_round,
            max_rx_batches: cfg.max_rx_batches,
            shutdown_timeout: cfg.shutdown_timeout,
            ..EngineConfig::default()
        };
        let e = Engine::new(vec![(node, transport)], ec)?.start()?;
        Ok(NodeThreadHandle { e: Some(Box::new(e)), counters, local, spin: cfg.spin })
    }
}

/// Handle to a running node thread; dropping it stops the thread.
pub struct NodeThreadHandle<T: Link = UdpTransport> {
    e: Option<Box<dyn Erased<T>>>,
    counters: Arc<TransportCounters>,
    local: SocketAddr,
    spin: Duration,
}

impl<T: Link> NodeThreadHandle<T> {
    fn e(&self) -> &dyn Erased<T> {
        self.e.as_deref().expect("engine present until shutdown")
    }
    /// Wake the thread: call after posting work through the node's mutex.
    pub fn notify(&self) {
        self.e().engine_notify();
    }
    /// The thread's clock (the `now` it passes to the node).
    pub fn now(&self) -> Instant {
        self.e().engine_now()
    }
    /// The transport's local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
    /// The transport's counters.
    pub fn counters(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }
    /// Number of rounds so far that handled datagrams or fired timers.
    pub fn progress(&self) -> u64 {
        self.e().progress_count()
    }
    /// Block until the progress count exceeds `seen` or `timeout` passes;
    /// returns the progress count. Typical loop: `let mut seen =
    /// h.progress(); loop { check the node; seen = h.wait_for_progress(seen, t) }`.
    pub fn wait_for_progress(&self, seen: u64, timeout: Duration) -> u64 {
        self.e().wait(seen, timeout)
    }
    /// How long the node thread spins before sleeping
    /// ([`NodeThreadConfig::spin`]).
    pub fn spin(&self) -> Duration {
        self.spin
    }
    /// Run `f` on the node thread after each round with progress (keep
    /// it short and non-blocking; e.g. notify a `tokio::sync::Notify`).
    pub fn on_progress(&self, f: impl Fn() + Send + Sync + 'static) {
        self.e().hook(Box::new(f));
    }
    /// Whether the node thread has ended (it only ends on shutdown or a
    /// panic in the node).
    pub fn is_finished(&self) -> bool {
        self.e.as_ref().is_none_or(|e| e.finished())
    }
    /// Stop the thread and return the transport (`None` if the thread
    /// panicked or did not stop within the shutdown timeout).
    pub fn shutdown(mut self) -> Option<T> {
        self.e.take()?.into_transport()
    }
}
