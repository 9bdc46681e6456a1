//! [`Engine`]: the one real-time driver. Progress happens in the caller's
//! thread when it can, and a thread covers the rest.
//!
//! An engine moves the datagrams of one or more *ports* (a sans-IO node
//! behind a mutex, and a transport) and fires their timers. Every piece of
//! work is the same [`Engine::round`]: receive what waits on a socket, feed
//! it to the node, fire due timers, take the node's transmits and send them.
//! Who runs a round:
//!
//! * **the posting thread** ([`Engine::flush`], after `post_send`): the new
//!   packets leave from the thread that posted them, with no wake-up (the
//!   manual-progress model of libfabric and UCX; rxe also runs its requester
//!   in the context of the post);
//! * **a waiting thread** ([`Engine::progress`], behind `poll_cq`-and-wait
//!   loops and the completion-channel wait): it runs rounds itself, spins
//!   for [`EngineConfig::caller_spin`], then sleeps in `ppoll` on the
//!   sockets (and an eventfd), so a peer's datagram wakes exactly the thread
//!   that waits for it;
//! * **the engine's thread** (optional, [`EngineConfig::thread`]): timers,
//!   ports nobody polls (a passive WRITE target), and the fallback when the
//!   caller is busy elsewhere. It leaves the sockets to the callers while one
//!   is waiting or has run a round within [`EngineConfig::handoff`], and then
//!   sleeps until the next timer deadline instead of watching the sockets.
//!
//! Locks: a port's transport lock, then its node's lock, each once per round
//! (not per datagram). Neither is held while sleeping. A round that finds a
//! port's transport busy skips it (the holder is moving its frames).

use crate::counters::TransportCounters;
use crate::socket::Link;
use nix::poll::{PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;
use roce_emulator::{Datagram, Instant, SansIo};
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Tuning of an [`Engine`].
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Thread name (and the name in traces).
    pub name: String,
    /// A caller waiting in [`Engine::progress`] keeps polling without
    /// sleeping this long before it blocks in `ppoll` on the sockets;
    /// `Duration::MAX` never blocks (busy polling).
    pub caller_spin: Duration,
    /// Start the engine's thread (timers, ports nobody polls).
    pub thread: bool,
    /// The thread keeps polling this long before it sleeps (like the
    /// kernel's `SO_BUSY_POLL`); zero: sleep at once.
    pub thread_spin: Duration,
    /// Longest sleep of the thread (bounds shutdown latency).
    pub max_idle: Duration,
    /// After a caller's last round, the thread leaves the sockets alone this
    /// long (the caller is expected back: a datagram then wakes only it).
    pub handoff: Duration,
    /// Doorbell batching: a flush (a post) that comes within this long of
    /// the port's previous post does not send itself; it flags the
    /// port and wakes the engine thread (once per batch), which sends
    /// everything posted meanwhile in one batch, unless a caller's round
    /// does first. Programs that post one work request per call at a high
    /// rate (perftest) then get GSO batches instead of a system call per
    /// message; an isolated post still leaves at once. Zero: always send
    /// inline. Needs the thread.
    pub post_batch: Duration,
    /// Most datagrams taken from a node per round.
    pub max_tx_per_round: usize,
    /// Most receive batches per port per round.
    pub max_rx_batches: usize,
    /// How long dropping the engine waits for its thread to end.
    pub shutdown_timeout: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            name: "roce-engine".into(),
            caller_spin: Duration::ZERO,
            thread: true,
            thread_spin: Duration::ZERO,
            max_idle: Duration::from_millis(20),
            handoff: Duration::from_micros(50),
            post_batch: Duration::ZERO,
            max_tx_per_round: 256,
            max_rx_batches: 8,
            shutdown_timeout: Duration::from_secs(2),
        }
    }
}

/// What one round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundStats {
    /// Datagrams handed to nodes.
    pub handled: usize,
    /// Ports whose timers fired.
    pub fired: usize,
    /// Datagrams sent.
    pub sent: usize,
}

impl RoundStats {
    /// Whether a node got input (datagrams or timers).
    pub fn progressed(&self) -> bool {
        self.handled + self.fired > 0
    }
}

type Hook = Arc<dyn Fn() + Send + Sync>;

/// The shortest sleep of the engine thread while callers own the sockets.
const MIN_THREAD_SLEEP: Duration = Duration::from_micros(50);

/// A caller that polls again within this long of its previous poll is
/// polling in a loop: it owns the sockets for a while ([`Engine::mark_caller`]).
/// One poll after a longer gap (a program that posts, polls its completion
/// once and then spins on its own memory, as perftest's `ib_write_lat`)
/// owns nothing: the thread keeps receiving for it, so a peer's WRITE is
/// placed while the program spins.
const BUSY_GAP: Duration = Duration::from_micros(20);

/// How long a polling loop owns the sockets after its latest poll, in
/// units of its own gap between polls (at most [`EngineConfig::handoff`]):
/// a loop that stops is presumed gone after a few of its own periods.
const OWN_GAPS: u64 = 8;

/// The shortest sleep of the thread while a polling loop owns the sockets
/// (its ownership may be a few microseconds).
const MIN_OWNED_SLEEP: Duration = Duration::from_micros(5);

/// While a caller waits in [`Engine::progress`] (receiving and firing
/// timers itself), each time the thread finds it still there it sleeps
/// twice as long, up to 2^this times the hand-off (16 x 50 us = 800 us by
/// default): a thread that checks every 50 us on a host whose cores the
/// callers keep busy costs them a context switch each time (fio's
/// completion-channel waits: 8-9 thousand a second per engine thread).
/// Timer deadlines still bound every sleep, and a post kicks the thread
/// at once; what waits longer is only the take-over of the sockets after
/// the waiting caller has returned and not come back.
const OWN_BACKOFF_MAX_SHIFT: u32 = 4;

struct Io<T> {
    t: T,
    rx: Vec<Datagram>,
    tx: Vec<Datagram>,
    /// The socket refused part of `tx` (wait for POLLOUT).
    blocked: bool,
}

struct Port<N, T> {
    node: Arc<Mutex<N>>,
    io: Mutex<Io<T>>,
    /// A duplicate of the transport's descriptor, to sleep on without the
    /// transport lock.
    fd: OwnedFd,
    local: SocketAddr,
    counters: Arc<TransportCounters>,
    batch: usize,
    /// Datagrams another port of this engine just sent here: over loopback
    /// they are already queued, so the next receive skips the readiness
    /// check and reads no more messages than that.
    expect: AtomicUsize,
    /// The node may have packets to send that no flush announced (it
    /// received or fired timers since its last pull).
    dirty: AtomicBool,
    /// What `io.tx` holds waits for a receiver's credits
    /// ([`crate::credits`]): retried after [`crate::credits::RETRY`], not
    /// in a spin.
    credit_wait: AtomicBool,
    /// Engine time (ns) of the last flush of a post.
    last_post: AtomicU64,
    /// A duplicate of the transport's multicast descriptor
    /// ([`Link::group_fd`]), once a group is joined: slept on too.
    gfd: std::sync::OnceLock<OwnedFd>,
}

struct State {
    stop: AtomicBool,
    /// Wakes callers blocked in `ppoll` when another thread made progress.
    callers: EventFd,
    /// Wakes the thread (stop, [`Engine::notify`]).
    thread: EventFd,
    /// Callers inside [`Engine::progress`].
    active: AtomicUsize,
    /// Callers asleep in `ppoll`.
    blocked: AtomicUsize,
    /// Engine time (ns) of a caller's latest round.
    last_caller: AtomicU64,
    /// Engine time (ns) until which the callers own the sockets: set by a
    /// caller that polls in a loop ([`Engine::mark_caller`]).
    owned_until: AtomicU64,
    /// Engine time (ns) until which the thread may sleep (0: it is awake).
    /// A caller whose flush arms an earlier timer wakes it (see
    /// [`Engine::wake_for`]).
    sleep_until: AtomicU64,
    /// Posted work flagged for the thread ([`Engine::notify`]).
    kicked: AtomicBool,
    /// Rounds that handled datagrams or fired timers.
    rounds: AtomicU64,
    /// How many times in a row the thread found the sockets the callers'
    /// (its sleep backs off; see [`OWN_BACKOFF_MAX_SHIFT`]).
    own_streak: AtomicU32,
    /// For [`Engine::wait_for_progress`] (taken only when someone waits).
    progress: Mutex<()>,
    waiters: AtomicUsize,
    cv: Condvar,
    /// Copy-on-write: a round clones the `Arc`, not the list.
    hooks: Mutex<Arc<Vec<Hook>>>,
    has_hooks: AtomicBool,
    ticks: AtomicU64,
}

/// The one real-time driver; see the [module documentation](self).
pub struct Engine<N: SansIo + Send + 'static, T: Link> {
    ports: Vec<Port<N, T>>,
    st: State,
    start: std::time::Instant,
    cfg: EngineConfig,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn lock<X>(m: &Mutex<X>) -> MutexGuard<'_, X> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn try_lock<X>(m: &Mutex<X>) -> Option<MutexGuard<'_, X>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

impl<N: SansIo + Send + 'static, T: Link> Engine<N, T> {
    /// An engine for these ports (node and transport each). Call
    /// [`Engine::start`] to start its thread (if configured).
    pub fn new(ports: Vec<(Arc<Mutex<N>>, T)>, cfg: EngineConfig) -> std::io::Result<Engine<N, T>> {
        let mut out = Vec::with_capacity(ports.len());
        for (node, t) in ports {
            out.push(Port {
                node,
                fd: t.as_fd().try_clone_to_owned()?,
                local: t.local_addr(),
                counters: t.counters(),
                batch: t.batch().max(1),
                expect: AtomicUsize::new(0),
                dirty: AtomicBool::new(false),
                credit_wait: AtomicBool::new(false),
                last_post: AtomicU64::new(0),
                gfd: std::sync::OnceLock::new(),
                io: Mutex::new(Io { t, rx: Vec::new(), tx: Vec::new(), blocked: false }),
            });
        }
        let fl = EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC;
        Ok(Engine {
            ports: out,
            st: State {
                stop: AtomicBool::new(false),
                callers: EventFd::from_flags(fl)?,
                thread: EventFd::from_flags(fl)?,
                active: AtomicUsize::new(0),
                blocked: AtomicUsize::new(0),
                last_caller: AtomicU64::new(0),
                owned_until: AtomicU64::new(0),
                sleep_until: AtomicU64::new(0),
                kicked: AtomicBool::new(false),
                rounds: AtomicU64::new(0),
                own_streak: AtomicU32::new(0),
                progress: Mutex::new(()),
                waiters: AtomicUsize::new(0),
                cv: Condvar::new(),
                hooks: Mutex::new(Arc::new(Vec::new())),
                has_hooks: AtomicBool::new(false),
                ticks: AtomicU64::new(0),
            },
            start: std::time::Instant::now(),
            cfg,
            thread: Mutex::new(None),
        })
    }

    /// Start the engine's thread if [`EngineConfig::thread`] is set.
    /// Dropping the returned handle stops the thread and then the engine
    /// (transports finished, recordings flushed) before it returns.
    pub fn start(self) -> std::io::Result<EngineHandle<N, T>> {
        let me = Arc::new(self);
        if me.cfg.thread {
            let e = me.clone();
            let h = crate::signals::spawn_quiet(me.cfg.name.clone(), move || thread_main(e))?;
            *lock(&me.thread) = Some(h);
        }
        Ok(EngineHandle { e: Some(me) })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The nodes' clock now (nanoseconds since the engine was made).
    pub fn now(&self) -> Instant {
        self.core_time(std::time::Instant::now())
    }

    fn core_time(&self, t: std::time::Instant) -> Instant {
        Instant::from_nanos(
            u64::try_from(t.saturating_duration_since(self.start).as_nanos()).unwrap_or(u64::MAX),
        )
    }

    /// The ports' local addresses.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.ports.iter().map(|p| p.local).collect()
    }

    /// The transport counters of the port whose node is `node`.
    pub fn counters_of(&self, node: &Arc<Mutex<N>>) -> Option<Arc<TransportCounters>> {
        self.ports.iter().find(|p| Arc::ptr_eq(&p.node, node)).map(|p| p.counters.clone())
    }

    /// Port `i`'s transport counters.
    pub fn counters(&self, i: usize) -> Option<Arc<TransportCounters>> {
        self.ports.get(i).map(|p| p.counters.clone())
    }

    /// Rounds so far that handled datagrams or fired timers.
    pub fn progress_count(&self) -> u64 {
        self.st.rounds.load(Ordering::SeqCst)
    }

    /// Run `f` after every round that handled datagrams or fired timers,
    /// on the thread that ran it (keep it short, non-blocking, and do not
    /// call the engine from it).
    pub fn on_progress(&self, f: impl Fn() + Send + Sync + 'static) {
        let mut g = lock(&self.st.hooks);
        let mut v: Vec<Hook> = g.as_ref().clone();
        v.push(Arc::new(f));
        *g = Arc::new(v);
        self.st.has_hooks.store(true, Ordering::Relaxed);
    }

    /// Flag posted work for the thread and wake it (for code that posts
    /// without calling [`Engine::flush`]).
    pub fn notify(&self) {
        self.st.kicked.store(true, Ordering::SeqCst);
        let _ = self.st.thread.write(1);
    }

    /// Whether the thread has ended (never started, stopped, or panicked).
    pub fn thread_finished(&self) -> bool {
        lock(&self.thread).as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stop the thread (bounded by [`EngineConfig::shutdown_timeout`]);
    /// returns whether it ended.
    pub fn stop(&self) -> bool {
        self.st.stop.store(true, Ordering::SeqCst);
        let _ = self.st.thread.write(1);
        let _ = self.st.callers.write(1);
        let Some(t) = lock(&self.thread).take() else { return true };
        let deadline = std::time::Instant::now() + self.cfg.shutdown_timeout;
        while !t.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if t.is_finished() {
            let _ = t.join();
            true
        } else {
            tracing::warn!("engine thread did not stop in time; detached");
            false
        }
    }

    /// Note that a caller is polling the ports now (a round of its own, or
    /// a poll that found completions and needed none). A caller that polls
    /// in a loop (its previous poll within [`BUSY_GAP`]) owns the sockets
    /// for [`OWN_GAPS`] of its gaps from now, at most
    /// [`EngineConfig::handoff`]: the thread leaves them to it (a datagram
    /// then wakes only the caller). A lone poll owns nothing.
    pub fn mark_caller(&self) {
        if !self.cfg.thread {
            return; // no thread to hand the sockets back to
        }
        let now = self.now().as_nanos();
        let prev = self.st.last_caller.swap(now, Ordering::Relaxed);
        let gap = now.saturating_sub(prev);
        if prev != 0 && gap <= BUSY_GAP.as_nanos() as u64 {
            let own = (gap.saturating_mul(OWN_GAPS))
                .clamp(MIN_OWNED_SLEEP.as_nanos() as u64, self.cfg.handoff.as_nanos() as u64);
            self.st.owned_until.fetch_max(now + own, Ordering::Relaxed);
        }
    }

    /// Send what the node of `only` (or every node, `None`) has queued,
    /// and what nodes marked dirty have; from the calling thread. Returns
    /// the datagrams sent.
    pub fn flush(&self, only: Option<&Arc<Mutex<N>>>) -> usize {
        if let (Some(node), false) = (only, self.cfg.post_batch.is_zero()) {
            if let Some(p) = self.ports.iter().find(|p| Arc::ptr_eq(&p.node, node)) {
                // (at least 1: 0 means "no post yet")
                let now = self.now().as_nanos().max(1);
                let last = p.last_post.swap(now, Ordering::Relaxed);
                let window = self.cfg.post_batch.as_nanos() as u64;
                if self.cfg.thread && last != 0 && now.saturating_sub(last) < window {
                    // Within a burst: leave the packets to the thread (or
                    // to the caller's next round), waking it once.
                    p.dirty.store(true, Ordering::SeqCst);
                    if !self.st.kicked.swap(true, Ordering::SeqCst) {
                        let _ = self.st.thread.write(1);
                    }
                    return 0;
                }
            }
        }
        self.flush_with(false, only)
    }

    fn flush_with(&self, force: bool, only: Option<&Arc<Mutex<N>>>) -> usize {
        let mut sent = 0;
        let mut wall: Option<std::time::Instant> = None;
        for p in &self.ports {
            let chosen = only.is_none_or(|h| Arc::ptr_eq(h, &p.node));
            let dirty = p.dirty.swap(false, Ordering::Relaxed);
            if !chosen && !dirty && !force {
                continue;
            }
            // The posting thread waits for a round in progress: it is
            // short, and the posted packets must not wait for the next one.
            let mut io = lock(&p.io);
            let io = &mut *io;
            if io.tx.is_empty() {
                let now = self.core_time(*wall.get_or_insert_with(std::time::Instant::now));
                let mut n = lock(&p.node);
                if force {
                    n.on_idle();
                }
                self.pull(p, &mut n, now, &mut io.tx);
                self.wake_for(&n);
            }
            sent += self.send(p, io);
        }
        sent
    }

    /// A caller's flush may have armed a timer (a request's retransmit
    /// timer) earlier than the thread's planned wake-up: wake it, or the
    /// timer would fire up to [`EngineConfig::max_idle`] late.
    /// (The node's deadline is read only while the thread sleeps: a
    /// busy-polling caller, whose thread is awake or absent, pays one
    /// atomic load.)
    fn wake_for(&self, n: &N) {
        let until = self.st.sleep_until.load(Ordering::SeqCst);
        if until == 0 {
            return;
        }
        if n.poll_timeout().is_some_and(|d| d.as_nanos() < until) {
            self.st.sleep_until.store(0, Ordering::SeqCst);
            let _ = self.st.thread.write(1);
        }
    }

    /// The thread is about to sleep for at most `wait`: note until when
    /// (before it reads the nodes' deadlines, so a timer armed meanwhile
    /// is seen either by it or by [`Engine::wake_for`]).
    fn going_to_sleep(&self, wait: Duration) {
        let until = self.now().as_nanos().saturating_add(wait.as_nanos() as u64).max(1);
        self.st.sleep_until.store(until, Ordering::SeqCst);
    }

    fn pull(&self, p: &Port<N, T>, n: &mut N, now: Instant, tx: &mut Vec<Datagram>) {
        let max = self.cfg.max_tx_per_round.max(1);
        while tx.len() < max {
            match n.poll_transmit(now) {
                Some(d) => tx.push(d),
                None => return,
            }
        }
        p.dirty.store(true, Ordering::Relaxed); // more left
    }

    fn send(&self, p: &Port<N, T>, io: &mut Io<T>) -> usize {
        if io.tx.is_empty() {
            return 0;
        }
        let o = io.t.send(&io.tx);
        let k = o.consumed.min(io.tx.len());
        if self.ports.len() > 1 {
            for d in &io.tx[..k] {
                let to = SocketAddr::new(d.endpoints.dst, d.endpoints.dst_port);
                if let Some(peer) = self.ports.iter().find(|q| q.local == to) {
                    peer.expect.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        for d in io.tx.drain(..k) {
            // (sent: the bytes build a later packet of this thread's)
            roce_emulator::bufpool::give(d.payload);
        }
        io.blocked = o.would_block && !io.tx.is_empty();
        p.credit_wait.store(o.credit_wait && !io.tx.is_empty(), Ordering::Relaxed);
        if !io.tx.is_empty() {
            p.dirty.store(true, Ordering::Relaxed);
        }
        k
    }

    /// One round over every port whose transport is free: receive, feed,
    /// fire timers, send. `ready[i]` says whether port `i`'s socket is known
    /// readable (`None`: find out with one zero-timeout `poll`).
    fn round_with(&self, ready: Option<&[bool]>, timers: bool) -> RoundStats {
        let mut s = RoundStats::default();
        let ticks = self.st.ticks.fetch_add(1, Ordering::Relaxed);
        let full = ticks.is_multiple_of(64);
        let timers = timers || full;
        let mut polled: Option<Vec<bool>> = None;
        let mut now_cache: Option<Instant> = None;
        // Expected datagrams (sent here by another port of this engine):
        // when some port expects one, that port is read without asking
        // `poll`, and the others wait for a later round (every 64th reads
        // them all). (On the stack for up to 8 ports: this runs per spin.)
        let mut wbuf = [0usize; 8];
        let mut wvec = Vec::new();
        let wants: &mut [usize] = if self.ports.len() <= wbuf.len() {
            &mut wbuf[..self.ports.len()]
        } else {
            wvec.resize(self.ports.len(), 0);
            &mut wvec
        };
        for (w, p) in wants.iter_mut().zip(&self.ports) {
            *w = p.expect.swap(0, Ordering::Relaxed);
        }
        let expected = wants.iter().any(|w| *w > 0);
        for (i, p) in self.ports.iter().enumerate() {
            let want = wants[i];
            let Some(mut io) = try_lock(&p.io) else {
                p.expect.fetch_add(want, Ordering::Relaxed);
                continue; // someone else is moving this port's frames
            };
            let io = &mut *io;
            let readable = if want > 0 {
                true
            } else if expected && !full {
                false
            } else if let Some(r) = ready {
                r.get(i).copied().unwrap_or(true)
            } else if self.ports.len() == 1 {
                true // one socket: a receive that finds nothing costs what a `poll` does
            } else {
                let r = polled.get_or_insert_with(|| self.readable());
                r.get(i).copied().unwrap_or(true)
            };
            if readable {
                // Expected datagrams: one read of at most that many (a
                // ping-pong's one datagram is one plain receive); every
                // 64th round reads fully so others cannot pile up behind.
                let want = if full { 0 } else { want };
                let first_full = want == 0
                    || matches!(io.t.recv_at_most(&mut io.rx, want), Ok(k) if k >= p.batch);
                if first_full {
                    for _ in 0..self.cfg.max_rx_batches.max(1) {
                        match io.t.recv(&mut io.rx) {
                            Ok(k) if k >= p.batch => continue,
                            _ => break,
                        }
                    }
                }
            }
            let has_tx = !io.tx.is_empty() || p.dirty.load(Ordering::Relaxed);
            if io.rx.is_empty() && !has_tx && !timers && !readable {
                // nothing arrived: timers only every 64th round (the clock
                // read and the node lock are the cost of an idle spin)
                continue;
            }
            let now = *now_cache.get_or_insert_with(|| self.now());
            {
                let mut n = lock(&p.node);
                s.handled += io.rx.len();
                for d in io.rx.drain(..) {
                    n.handle_datagram(now, d);
                }
                if n.poll_timeout().is_some_and(|d| d <= now) {
                    n.handle_timeout(now);
                    s.fired += 1;
                }
                if io.tx.is_empty() {
                    p.dirty.store(false, Ordering::Relaxed);
                    self.pull(p, &mut n, now, &mut io.tx);
                }
            }
            s.sent += self.send(p, io);
        }
        if s.progressed() {
            self.after_progress();
        }
        s
    }

    /// One round from the calling thread (counts as a caller's round: the
    /// thread leaves the sockets alone for a while). For `poll_cq`.
    pub fn round(&self) -> RoundStats {
        self.mark_caller();
        self.round_with(None, false)
    }

    /// Which ports have a datagram waiting: one zero-timeout `poll`.
    fn readable(&self) -> Vec<bool> {
        let mut fds: Vec<PollFd<'_>> =
            self.ports.iter().map(|p| PollFd::new(p.fd.as_fd(), PollFlags::POLLIN)).collect();
        self.push_group_fds(&mut fds);
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(_) => self.port_readiness(&fds),
            Err(_) => vec![true; self.ports.len()],
        }
    }

    /// The multicast descriptors of the ports that have one, after the
    /// ports' own (see [`Engine::port_readiness`]).
    fn push_group_fds<'a>(&'a self, fds: &mut Vec<PollFd<'a>>) {
        for p in &self.ports {
            if let Some(g) = p.gfd.get() {
                fds.push(PollFd::new(g.as_fd(), PollFlags::POLLIN));
            }
        }
    }

    /// Which ports are ready, from `fds` as built by the callers: one per
    /// port, then [`Engine::push_group_fds`]'s (a port is ready when its
    /// socket or its groups are).
    fn port_readiness(&self, fds: &[PollFd<'_>]) -> Vec<bool> {
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        let mut out: Vec<bool> = fds[..self.ports.len()].iter().map(ready).collect();
        let mut k = self.ports.len();
        for (i, p) in self.ports.iter().enumerate() {
            if p.gfd.get().is_some() {
                out[i] |= fds.get(k).is_some_and(ready);
                k += 1;
            }
        }
        out
    }

    /// Join the multicast group `group` on the transport of `node`'s port
    /// (see [`Link::join_group`]); the thread is woken to sleep on the
    /// group's socket too.
    pub fn join_group(&self, node: &Arc<Mutex<N>>, group: std::net::IpAddr) -> std::io::Result<()> {
        let p = self.port_of(node)?;
        {
            let mut io = lock(&p.io);
            io.t.join_group(group)?;
            if p.gfd.get().is_none() {
                if let Some(fd) = io.t.group_fd() {
                    let _ = p.gfd.set(fd.try_clone_to_owned()?);
                }
            }
        }
        self.notify();
        Ok(())
    }

    /// Leave the multicast group `group` on `node`'s port.
    pub fn leave_group(
        &self,
        node: &Arc<Mutex<N>>,
        group: std::net::IpAddr,
    ) -> std::io::Result<()> {
        let p = self.port_of(node)?;
        let r = lock(&p.io).t.leave_group(group);
        r
    }

    fn port_of(&self, node: &Arc<Mutex<N>>) -> std::io::Result<&Port<N, T>> {
        self.ports.iter().find(|p| Arc::ptr_eq(&p.node, node)).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such device on this engine")
        })
    }

    fn after_progress(&self) {
        self.st.rounds.fetch_add(1, Ordering::SeqCst);
        if self.st.waiters.load(Ordering::SeqCst) > 0 {
            // (under the lock: a waiter between its check and its sleep
            // holds it, so the notification cannot fall in between)
            let _g = lock(&self.st.progress);
            self.st.cv.notify_all();
        }
        // Callers asleep on the sockets may be waiting for what this round
        // did (a completion from a timer, or from a datagram this thread
        // took): wake them. Not in the common path: a caller that sleeps
        // on the socket is woken by the datagram and runs the round itself.
        if self.st.blocked.load(Ordering::SeqCst) > 0 {
            let _ = self.st.callers.write(1);
        }
        if self.st.has_hooks.load(Ordering::Relaxed) {
            let hooks = lock(&self.st.hooks).clone();
            for h in hooks.iter() {
                h();
            }
        }
    }

    /// `wait`, or [`crate::credits::RETRY`] when a port's datagrams wait
    /// for a receiver's credits (nothing wakes a sleeper when they come).
    fn credit_cap(&self, wait: Duration) -> Duration {
        match self.ports.iter().any(|p| p.credit_wait.load(Ordering::Relaxed)) {
            true => wait.min(crate::credits::RETRY),
            false => wait,
        }
    }

    /// The earliest timer deadline of any node.
    fn deadline(&self) -> Option<Instant> {
        self.ports.iter().filter_map(|p| lock(&p.node).poll_timeout()).min()
    }

    /// Block until the progress count exceeds `seen` or `timeout` passes
    /// (for code that waits on the thread's work); returns the count.
    pub fn wait_for_progress(&self, seen: u64, timeout: Duration) -> u64 {
        let g = lock(&self.st.progress);
        self.st.waiters.fetch_add(1, Ordering::SeqCst);
        let rounds = &self.st.rounds;
        let _ =
            self.st.cv.wait_timeout_while(g, timeout, |_| rounds.load(Ordering::SeqCst) <= seen);
        self.st.waiters.fetch_sub(1, Ordering::SeqCst);
        rounds.load(Ordering::SeqCst)
    }

    /// Make progress from the calling thread until `cond` holds or `wall`
    /// passes; returns whether `cond` held. Rounds, then spinning for
    /// [`EngineConfig::caller_spin`], then sleeping on the sockets until a
    /// datagram, a timer deadline or another thread's progress. `cond` is
    /// called with no engine lock held.
    pub fn progress(&self, cond: &mut dyn FnMut() -> bool, wall: Duration) -> bool {
        self.st.active.fetch_add(1, Ordering::SeqCst);
        let r = self.progress_inner(cond, wall);
        self.mark_caller();
        self.st.active.fetch_sub(1, Ordering::SeqCst);
        r
    }

    fn progress_inner(&self, cond: &mut dyn FnMut() -> bool, wall: Duration) -> bool {
        // The clock starts after the first round (a ping-pong's answer is
        // usually there at once).
        let mut start: Option<std::time::Instant> = None;
        let mut idle: u32 = 0;
        let mut flushed_idle = false;
        loop {
            let s = self.round_with(None, false);
            if cond() {
                return true;
            }
            let t0 = *start.get_or_insert_with(std::time::Instant::now);
            if s.handled + s.fired + s.sent > 0 {
                idle = 0;
                flushed_idle = false;
                continue;
            }
            idle = idle.wrapping_add(1);
            if idle == 64 && !flushed_idle {
                flushed_idle = true;
                self.flush_with(true, None); // idle: held ACKs leave
                continue;
            }
            if self.st.stop.load(Ordering::Relaxed) {
                return cond();
            }
            if !idle.is_multiple_of(16) {
                std::hint::spin_loop();
                continue;
            }
            let elapsed = t0.elapsed();
            if elapsed >= wall {
                return false;
            }
            self.mark_caller();
            if elapsed < self.cfg.caller_spin {
                std::hint::spin_loop();
                continue;
            }
            // Sleep on the sockets, the callers' eventfd, and until the
            // next deadline (and at most 5 ms: a completion no datagram
            // announces is seen that late at worst).
            self.st.blocked.fetch_add(1, Ordering::SeqCst);
            if cond() {
                self.st.blocked.fetch_sub(1, Ordering::SeqCst);
                return true;
            }
            let now = self.now();
            let mut wait = self.credit_cap((wall - elapsed).min(Duration::from_millis(5)));
            if let Some(d) = self.deadline() {
                wait = wait.min(d.saturating_duration_since(now));
            }
            let ready = self.sleep(wait);
            self.st.blocked.fetch_sub(1, Ordering::SeqCst);
            self.mark_caller();
            // a signal interrupted the caller's wait: return to it (it
            // reports EINTR, as a blocking read(2) of rdma-core would)
            if crate::signals::interrupted() {
                return cond();
            }
            // a timeout may be a timer deadline: check timers then
            let s = match ready {
                Some(r) => self.round_with(Some(&r), false),
                None => self.round_with(Some(&vec![false; self.ports.len()]), true),
            };
            if s.handled + s.fired + s.sent > 0 {
                idle = 0;
                flushed_idle = false;
            }
        }
    }

    /// Sleep in `ppoll` on every socket and the callers' eventfd for at
    /// most `wait`; returns which sockets are readable (None on error or
    /// timeout with nothing ready).
    fn sleep(&self, wait: Duration) -> Option<Vec<bool>> {
        self.sleep_on(&self.st.callers, wait)
    }

    /// Sleep in `ppoll` on every socket (and for writability where a send
    /// was refused) and on `wake` for at most `wait`; a readable `wake` is
    /// consumed. Returns which sockets are ready (None on error or timeout).
    fn sleep_on(&self, wake: &EventFd, wait: Duration) -> Option<Vec<bool>> {
        let mut fds: Vec<PollFd<'_>> = self
            .ports
            .iter()
            .map(|p| {
                let mut ev = PollFlags::POLLIN;
                if try_lock(&p.io).is_some_and(|io| io.blocked) {
                    ev |= PollFlags::POLLOUT;
                }
                PollFd::new(p.fd.as_fd(), ev)
            })
            .collect();
        self.push_group_fds(&mut fds);
        fds.push(PollFd::new(wake.as_fd(), PollFlags::POLLIN));
        let n = match nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => {
                crate::signals::note_interrupted();
                return None;
            }
            Err(_) => return None,
        };
        let last = fds.len() - 1;
        if fds[last].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
            let _ = wake.read();
        }
        if n == 0 {
            return None;
        }
        Some(self.port_readiness(&fds[..last]))
    }

    /// Whether callers own the sockets now (one waits in
    /// [`Engine::progress`], or polls in a loop: [`Engine::mark_caller`]);
    /// the thread leaves them alone meanwhile.
    pub fn callers_own(&self) -> bool {
        self.st.active.load(Ordering::SeqCst) > 0 || !self.handoff_left().is_zero()
    }

    /// What is left of a polling loop's ownership of the sockets (zero
    /// when it is over, or there was none; see [`Engine::mark_caller`]).
    fn handoff_left(&self) -> Duration {
        let until = self.st.owned_until.load(Ordering::Relaxed);
        Duration::from_nanos(until.saturating_sub(self.now().as_nanos()))
    }

    /// The thread's loop.
    fn thread_round(&self) {
        if self.callers_own() {
            // Leave the sockets to the callers; fire due timers (and send
            // what the node has) without receiving, then sleep until the
            // next deadline or the end of the hand-off.
            let now = self.now();
            let mut fired = false;
            for p in &self.ports {
                let Some(mut io) = try_lock(&p.io) else { continue };
                let io = &mut *io;
                let mut n = lock(&p.node);
                if n.poll_timeout().is_some_and(|d| d <= now) {
                    n.handle_timeout(now);
                    fired = true;
                }
                let dirty = p.dirty.swap(false, Ordering::Relaxed);
                if io.tx.is_empty() && (fired || dirty || self.st.kicked.load(Ordering::Relaxed)) {
                    self.pull(p, &mut n, now, &mut io.tx);
                }
                drop(n);
                self.send(p, io);
            }
            if self.st.kicked.swap(false, Ordering::SeqCst) {
                return; // posts came while this round ran: look again at once
            }
            if fired {
                self.after_progress();
            }
            // Sleep until the next deadline, but at least a little: a
            // deadline this round could not serve (a caller held the
            // transport) is the callers' to serve, not a reason to spin.
            // Otherwise until the end of the hand-off; while a caller
            // waits in `progress` (it receives and fires timers itself),
            // longer each time it still does.
            let streak = self.st.own_streak.fetch_add(1, Ordering::Relaxed);
            // (a polling loop's ownership renews with each poll: the
            // thread's look backs off while it lasts)
            let wait = match self.st.active.load(Ordering::SeqCst) {
                0 => {
                    self.handoff_left().max(MIN_OWNED_SLEEP)
                        * (1 << streak.min(OWN_BACKOFF_MAX_SHIFT))
                }
                _ => self.cfg.handoff * (1 << streak.min(OWN_BACKOFF_MAX_SHIFT)),
            }
            .min(self.cfg.max_idle);
            let mut wait = self.credit_cap(wait);
            self.going_to_sleep(wait);
            if let Some(d) = self.deadline() {
                wait = wait.min(d.saturating_duration_since(self.now()).max(MIN_THREAD_SLEEP));
                self.going_to_sleep(wait);
            }
            let mut fds = [PollFd::new(self.st.thread.as_fd(), PollFlags::POLLIN)];
            let _ = nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None);
            self.st.sleep_until.store(0, Ordering::SeqCst);
            if fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
                let _ = self.st.thread.read();
            }
            return;
        }
        self.st.own_streak.store(0, Ordering::Relaxed);
        if self.st.kicked.swap(false, Ordering::SeqCst) {
            self.flush_with(false, None);
        }
        // (the thread's rounds visit every node: timers, and packets queued
        // without a flush)
        let s = self.round_with(None, true);
        let more = |p: &Port<N, T>| {
            p.dirty.load(Ordering::Relaxed) && !p.credit_wait.load(Ordering::Relaxed)
        };
        if s.handled + s.sent > 0 || self.ports.iter().any(more) {
            return; // more may be waiting
        }
        if !self.cfg.thread_spin.is_zero() && self.thread_spin() {
            return;
        }
        // idle: what the nodes held back (ACKs) leaves
        for p in &self.ports {
            lock(&p.node).on_idle();
        }
        if self.flush_with(false, None) > 0 {
            return;
        }
        let now = self.now();
        let mut wait = self.credit_cap(self.cfg.max_idle);
        self.going_to_sleep(wait);
        if let Some(d) = self.deadline() {
            if d <= now {
                self.st.sleep_until.store(0, Ordering::SeqCst);
                return;
            }
            wait = wait.min(d.saturating_duration_since(now));
            self.going_to_sleep(wait);
        }
        // (the next round reads whatever woke it)
        let _ = self.sleep_on(&self.st.thread, wait);
        self.st.sleep_until.store(0, Ordering::SeqCst);
    }

    /// Poll without sleeping for up to `thread_spin`; returns whether
    /// something arrived, was posted, or a caller took over.
    fn thread_spin(&self) -> bool {
        let until = std::time::Instant::now() + self.cfg.thread_spin;
        let mut k: u32 = 0;
        loop {
            if self.st.kicked.load(Ordering::SeqCst) || self.st.stop.load(Ordering::SeqCst) {
                return true;
            }
            if self.callers_own() {
                return true;
            }
            if self.readable().iter().any(|r| *r) {
                return true;
            }
            k = k.wrapping_add(1);
            if k.is_multiple_of(16) && std::time::Instant::now() >= until {
                return false;
            }
            std::hint::spin_loop();
        }
    }
}

fn thread_main<N: SansIo + Send + 'static, T: Link>(e: Arc<Engine<N, T>>) {
    while !e.st.stop.load(Ordering::SeqCst) {
        e.thread_round();
    }
}

/// The owner of a started [`Engine`] (it derefs to it). Dropping it stops
/// the thread, waits for it (bounded), and finishes the transports.
pub struct EngineHandle<N: SansIo + Send + 'static, T: Link> {
    e: Option<Arc<Engine<N, T>>>,
}

impl<N: SansIo + Send + 'static, T: Link> std::ops::Deref for EngineHandle<N, T> {
    type Target = Engine<N, T>;
    fn deref(&self) -> &Engine<N, T> {
        self.e.as_deref().expect("engine present until drop")
    }
}

impl<N: SansIo + Send + 'static, T: Link> EngineHandle<N, T> {
    /// Stop the thread and take the transports back, finished (`None` if
    /// the thread did not stop in time).
    pub fn into_transports(mut self) -> Option<Vec<T>> {
        let e = self.e.take()?;
        if !e.stop() {
            return None;
        }
        let me = Arc::try_unwrap(e).ok()?;
        let mut ts = Vec::new();
        for p in me.ports {
            let mut io = p.io.into_inner().unwrap_or_else(|e| e.into_inner());
            io.t.finish();
            ts.push(io.t);
        }
        Some(ts)
    }
}

impl<N: SansIo + Send + 'static, T: Link> Drop for EngineHandle<N, T> {
    fn drop(&mut self) {
        let Some(e) = self.e.take() else { return };
        e.stop();
        // What the nodes still have queued leaves before the sockets close
        // (a destroyed QP's owed ACKs, held ACKs): a NIC would have sent it.
        e.flush_with(true, None);
        for p in &e.ports {
            lock(&p.io).t.finish();
        }
    }
}
