//! [`Driver`]: a dedicated thread between a sans-IO node and a transport.
//!
//! Each round: receive every waiting message (`recvmmsg`, GRO split, ICRC
//! check) → `handle_datagram(now)` for each; fire `handle_timeout(now)` if
//! the node's deadline has passed; drain `poll_transmit(now)` and send
//! (batched, GSO for equal-sized runs). When a round did nothing, the
//! thread sleeps in `ppoll` on the socket and an eventfd, for at most the
//! time until the node's next deadline (and at most `max_idle`).
//!
//! The node lives behind a `Mutex` shared with the application, which
//! posts work through it from any thread (sync or async code alike) and
//! then calls [`DriverHandle::notify`] so the driver wakes at once and sends
//! the new packets (without it they leave at the next wake-up: the next
//! received datagram, timer, or `max_idle`).
//!
//! Time: `now` is `std::time::Instant` mapped to nanoseconds since the
//! driver started ([`DriverHandle::now`]).
//!
//! Waiting for progress: [`DriverHandle::wait_for_progress`] blocks on a
//! condition variable (sync code; from tokio call it in `spawn_blocking`),
//! and [`DriverHandle::on_progress`] registers a callback run by the driver
//! thread after each round that handled datagrams or fired timers; for
//! async code, make it call `tokio::sync::Notify::notify_waiters()` (or
//! wake a waker) and await that. No async runtime is needed by this crate.

use crate::counters::{CountersSnapshot, TransportCounters};
use crate::udp::{SendOutcome, UdpTransport};
use nix::poll::{PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;
use roce_emulator::{Datagram, Instant, SansIo};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Tuning of a [`Driver`].
#[derive(Clone, Debug)]
pub struct DriverConfig {
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
    /// Send only the newest of several positive ACKs to one QP in a
    /// transmit batch ([`crate::coalesce::coalesce_acks`]; counted in
    /// `acks_coalesced`). The core still emits every ACK as rxe does.
    pub coalesce_acks: bool,
    /// Before sleeping, keep polling the socket (non-blocking receives) and
    /// the posted-work flag for this long (like the kernel's `SO_BUSY_POLL`).
    /// While the thread spins, a peer's datagram or a notify does not need
    /// to wake it (no eventfd write, no scheduler round trip), at the price
    /// of this much CPU after each busy period. Zero: sleep at once.
    pub spin: Duration,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            max_idle: Duration::from_millis(50),
            max_rx_batches: 8,
            max_tx_per_round: 256,
            name: "roce-udp-driver".into(),
            shutdown_timeout: Duration::from_secs(2),
            coalesce_acks: true,
            spin: Duration::ZERO,
        }
    }
}

/// What the driver needs from a transport ([`UdpTransport`] implements it;
/// a raw-socket transport can too).
pub trait Transport: AsFd + Send + 'static {
    /// Send in order without blocking; see [`UdpTransport::send`].
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome;
    /// One non-blocking receive batch; returns the number of messages read.
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize>;
    /// [`Transport::recv`] of at most `max` messages (a hint: the caller
    /// knows that many datagrams were just sent here).
    fn recv_at_most(&mut self, out: &mut Vec<Datagram>, max: usize) -> io::Result<usize> {
        let _ = max;
        self.recv(out)
    }
    /// Messages per receive batch (a full batch means: read again).
    fn batch(&self) -> usize;
    /// The local address.
    fn local_addr(&self) -> SocketAddr;
    /// The live counters.
    fn counters(&self) -> Arc<TransportCounters>;
    /// Called when the driver stops (flush recordings).
    fn finish(&mut self) {}
}

impl Transport for UdpTransport {
    fn send(&mut self, dgrams: &[Datagram]) -> SendOutcome {
        UdpTransport::send(self, dgrams)
    }
    fn recv(&mut self, out: &mut Vec<Datagram>) -> io::Result<usize> {
        UdpTransport::recv(self, out)
    }
    fn recv_at_most(&mut self, out: &mut Vec<Datagram>, max: usize) -> io::Result<usize> {
        UdpTransport::recv_at_most(self, out, max)
    }
    fn batch(&self) -> usize {
        self.config().batch.max(1)
    }
    fn local_addr(&self) -> SocketAddr {
        UdpTransport::local_addr(self)
    }
    fn counters(&self) -> Arc<TransportCounters> {
        UdpTransport::counters(self)
    }
    fn finish(&mut self) {
        self.flush_pcap();
    }
}

type Hook = Arc<dyn Fn() + Send + Sync>;

struct Shared {
    stop: AtomicBool,
    /// Work was posted (set by `notify`, cleared by the driver).
    kicked: AtomicBool,
    /// The driver is spinning: `notify` need not write the eventfd.
    spinning: AtomicBool,
    wake: EventFd,
    start: std::time::Instant,
    progress: Mutex<u64>,
    /// Threads in `wait_for_progress` (changed and read under `progress`'s
    /// lock): a round with nobody waiting skips the condvar wake-up.
    waiters: std::sync::atomic::AtomicUsize,
    cv: Condvar,
    hooks: Mutex<Vec<Hook>>,
}

impl Shared {
    fn now(&self) -> Instant {
        Instant::from_nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
    fn bump(&self) {
        let waiting = match self.progress.lock() {
            Ok(mut p) => {
                *p += 1;
                self.waiters.load(Ordering::Relaxed) > 0
            }
            Err(_) => true,
        };
        if waiting {
            self.cv.notify_all();
        }
        // (called in place: hooks are short and never register hooks)
        if let Ok(hooks) = self.hooks.lock() {
            for h in hooks.iter() {
                h();
            }
        }
    }
    fn wake(&self) {
        // EAGAIN means the counter is already huge: the driver will wake anyway.
        let _ = self.wake.write(1);
    }
    /// Posted work: flag it, and write the eventfd unless the driver spins
    /// (it sees the flag; it re-checks the flag after it stops spinning, so
    /// no notify is lost).
    fn kick(&self) {
        self.kicked.store(true, Ordering::SeqCst);
        if !self.spinning.load(Ordering::SeqCst) {
            self.wake();
        }
    }
}

/// Starts driver threads.
pub struct Driver;

impl Driver {
    /// Spawn a driver thread with the default [`DriverConfig`].
    pub fn spawn<N, T>(node: Arc<Mutex<N>>, transport: T) -> io::Result<DriverHandle<T>>
    where
        N: SansIo + Send + 'static,
        T: Transport,
    {
        Driver::spawn_with(node, transport, DriverConfig::default())
    }

    /// Spawn a driver thread that owns `transport` and drives `node`.
    pub fn spawn_with<N, T>(
        node: Arc<Mutex<N>>,
        transport: T,
        cfg: DriverConfig,
    ) -> io::Result<DriverHandle<T>>
    where
        N: SansIo + Send + 'static,
        T: Transport,
    {
        let wake = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            spinning: AtomicBool::new(false),
            wake,
            start: std::time::Instant::now(),
            progress: Mutex::new(0),
            waiters: std::sync::atomic::AtomicUsize::new(0),
            cv: Condvar::new(),
            hooks: Mutex::new(Vec::new()),
        });
        let counters = transport.counters();
        let local = transport.local_addr();
        let sh = shared.clone();
        let timeout = cfg.shutdown_timeout;
        let spin = cfg.spin;
        let thread = std::thread::Builder::new()
            .name(cfg.name.clone())
            .spawn(move || run(node, transport, sh, cfg))?;
        Ok(DriverHandle {
            shared,
            counters,
            local,
            thread: Some(thread),
            shutdown_timeout: timeout,
            spin,
        })
    }
}

/// Handle to a running driver thread; dropping it stops the thread.
pub struct DriverHandle<T: Transport = UdpTransport> {
    shared: Arc<Shared>,
    counters: Arc<TransportCounters>,
    local: SocketAddr,
    thread: Option<JoinHandle<T>>,
    shutdown_timeout: Duration,
    spin: Duration,
}

impl<T: Transport> DriverHandle<T> {
    /// Wake the driver: call after posting work through the node's mutex.
    pub fn notify(&self) {
        self.shared.kick();
    }
    /// The driver's clock (the `now` it passes to the node).
    pub fn now(&self) -> Instant {
        self.shared.now()
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
        self.shared.progress.lock().map(|p| *p).unwrap_or(0)
    }
    /// Block until the progress count exceeds `seen` or `timeout` passes;
    /// returns the progress count. Typical loop: `let mut seen =
    /// h.progress(); loop { check the node; seen = h.wait_for_progress(seen, t) }`.
    pub fn wait_for_progress(&self, seen: u64, timeout: Duration) -> u64 {
        let Ok(g) = self.shared.progress.lock() else { return seen };
        if *g > seen {
            return *g;
        }
        let w = &self.shared.waiters;
        w.fetch_add(1, Ordering::Relaxed);
        let r = match self.shared.cv.wait_timeout_while(g, timeout, |p| *p <= seen) {
            Ok((g, _)) => *g,
            Err(_) => seen,
        };
        // (after the lock: a round in between only wakes nobody)
        w.fetch_sub(1, Ordering::Relaxed);
        r
    }
    /// How long the driver thread spins before sleeping
    /// ([`DriverConfig::spin`]).
    pub fn spin(&self) -> Duration {
        self.spin
    }
    /// Run `f` on the driver thread after each round with progress (keep
    /// it short and non-blocking; e.g. notify a `tokio::sync::Notify`).
    pub fn on_progress(&self, f: impl Fn() + Send + Sync + 'static) {
        if let Ok(mut h) = self.shared.hooks.lock() {
            h.push(Arc::new(f));
        }
    }
    /// Whether the driver thread has ended (it only ends on shutdown or a
    /// panic in the node).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
    /// Stop the thread and return the transport (`None` if the thread
    /// panicked or did not stop within the shutdown timeout).
    pub fn shutdown(mut self) -> Option<T> {
        self.stop()
    }
    fn stop(&mut self) -> Option<T> {
        let t = self.thread.take()?;
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        let deadline = std::time::Instant::now() + self.shutdown_timeout;
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if t.is_finished() {
            t.join().ok()
        } else {
            tracing::warn!("driver thread did not stop in time; detached");
            None
        }
    }
}

impl<T: Transport> Drop for DriverHandle<T> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn run<N: SansIo, T: Transport>(
    node: Arc<Mutex<N>>,
    mut t: T,
    sh: Arc<Shared>,
    cfg: DriverConfig,
) -> T {
    let batch = t.batch();
    let counters = t.counters();
    let mut rx: Vec<Datagram> = Vec::new();
    let mut tx: Vec<Datagram> = Vec::new();
    let mut blocked = false;
    while !sh.stop.load(Ordering::SeqCst) {
        let mut msgs = 0;
        sh.kicked.store(false, Ordering::SeqCst);
        for _ in 0..cfg.max_rx_batches.max(1) {
            match t.recv(&mut rx) {
                Ok(n) => {
                    msgs += n;
                    if n < batch {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        let now = sh.now();
        let mut progressed = !rx.is_empty();
        let deadline;
        let mut more_tx = false;
        {
            let mut n = match node.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            for d in rx.drain(..) {
                n.handle_datagram(now, d);
            }
            if n.poll_timeout().is_some_and(|d| d <= now) {
                n.handle_timeout(now);
                progressed = true;
            }
            if tx.is_empty() {
                while tx.len() < cfg.max_tx_per_round.max(1) {
                    match n.poll_transmit(now) {
                        Some(d) => tx.push(d),
                        None => break,
                    }
                }
                more_tx = tx.len() >= cfg.max_tx_per_round.max(1);
                if cfg.coalesce_acks {
                    let k = crate::coalesce::coalesce_acks(&mut tx);
                    TransportCounters::add(&counters.acks_coalesced, k as u64);
                }
            }
            deadline = n.poll_timeout();
        }
        if !tx.is_empty() {
            let o = t.send(&tx);
            tx.drain(..o.consumed.min(tx.len()));
            blocked = o.would_block;
        }
        if progressed {
            sh.bump();
        }
        if msgs > 0 || more_tx || (!tx.is_empty() && !blocked) {
            continue;
        }
        let sending = blocked && !tx.is_empty();
        if !cfg.spin.is_zero() && !sending && spin(&mut t, &sh, &cfg, &mut rx) {
            continue; // something arrived or was posted while spinning
        }
        let now = sh.now();
        let wait = match deadline {
            Some(d) if d <= now => continue,
            Some(d) => d.saturating_duration_since(now).min(cfg.max_idle),
            None => cfg.max_idle,
        };
        let mut sock_ev = PollFlags::POLLIN;
        if blocked && !tx.is_empty() {
            sock_ev |= PollFlags::POLLOUT;
        }
        let woke = {
            let mut fds =
                [PollFd::new(t.as_fd(), sock_ev), PollFd::new(sh.wake.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None);
            fds[1].revents().is_some_and(|r| r.contains(PollFlags::POLLIN))
        };
        if woke {
            let _ = sh.wake.read();
        }
    }
    t.finish();
    t
}

/// Poll without sleeping for up to `cfg.spin`: non-blocking receives (into
/// `rx`, handled by the next round) and the posted-work flag. Returns
/// whether there is something to do. Leaves `spinning` cleared.
fn spin<T: Transport>(t: &mut T, sh: &Shared, cfg: &DriverConfig, rx: &mut Vec<Datagram>) -> bool {
    let until = std::time::Instant::now() + cfg.spin;
    sh.spinning.store(true, Ordering::SeqCst);
    let mut k: u32 = 0;
    let found = loop {
        if sh.kicked.load(Ordering::SeqCst) || sh.stop.load(Ordering::SeqCst) {
            break true;
        }
        if matches!(t.recv(rx), Ok(n) if n > 0) || !rx.is_empty() {
            break true;
        }
        k = k.wrapping_add(1);
        if k.is_multiple_of(16) && std::time::Instant::now() >= until {
            break false;
        }
        std::hint::spin_loop();
    };
    sh.spinning.store(false, Ordering::SeqCst);
    // a notify that saw `spinning` set wrote no eventfd: its flag is seen here
    found || sh.kicked.load(Ordering::SeqCst)
}
