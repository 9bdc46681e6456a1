//! The verbs [`Driver`] of real devices ([`EngineDriver`]): a
//! [`roce_transport::Engine`] over UDP or raw sockets. Progress happens in
//! the calling thread; an engine thread, when the engine has one
//! ([`EngineConfig::thread`], on unless turned off), fires timers and moves
//! the frames of devices nobody polls.

use roce_emulator::Hca;
use roce_transport::{Engine, EngineConfig, EngineHandle, Link, TransportCounters, UdpTransport};
use roce_verbs_api::driver::{HostHold, TransportStats};
use roce_verbs_api::{Budget, Context, Driver};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::Waker;

/// The verbs [`Driver`] of real devices: a [`roce_transport::Engine`] over
/// one or more (core, transport) pairs, UDP or raw.
///
/// Progress happens in the caller's thread (see `transport/README.md`,
/// "Progress in the caller's thread"): [`Driver::kick_device`] (after
/// `post_send`) sends the posted packets from the posting thread;
/// [`Driver::progress`] (`poll_blocking`, the completion-channel wait, the
/// CM's waits) receives and processes datagrams itself, spinning for
/// [`EngineConfig::caller_spin`] and then sleeping on the sockets;
/// [`Driver::poll_once`] (an empty `ibv_poll_cq`) runs one non-blocking
/// round. The engine's thread (unless [`EngineConfig::thread`] is off)
/// fires timers and moves the frames of devices nobody polls, and wakes
/// async tasks ([`Driver::register_waker`]) after every round with progress.
pub struct EngineDriver<T: Link = UdpTransport> {
    // dropped before `publishers`: the final snapshot follows the last round
    e: EngineHandle<Hca, T>,
    wakers: Arc<Mutex<Vec<Waker>>>,
    name: String,
    threaded: bool,
    publishers: Vec<crate::publish::Publisher>,
    // dropped after `e`: a member leaves its device's group once its
    // engine has stopped
    stewards: Vec<(Arc<Mutex<Hca>>, crate::Steward)>,
}

/// The driver of UDP devices.
pub type UdpDriver = EngineDriver<UdpTransport>;

impl<T: Link> Drop for EngineDriver<T> {
    /// A member of a shared device stops its steward and says it is leaving
    /// while the engine still runs; the fields then drop in order: the
    /// engine stops, the stewards leave their groups.
    fn drop(&mut self) {
        for (_, st) in &mut self.stewards {
            st.prepare_leave();
        }
    }
}

impl<T: Link> fmt::Debug for EngineDriver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineDriver").field("local", &self.e.local_addrs()).finish()
    }
}

impl<T: Link> EngineDriver<T> {
    /// Start an engine for these devices (core and transport each); `name`
    /// is what [`Driver::name`] reports (`"udp"`, `"raw"`).
    pub fn new(
        devices: Vec<(Arc<Mutex<Hca>>, T)>,
        cfg: EngineConfig,
        name: &str,
    ) -> std::io::Result<EngineDriver<T>> {
        let threaded = cfg.thread;
        let e = Engine::new(devices, cfg)?.start()?;
        let wakers: Arc<Mutex<Vec<Waker>>> = Arc::new(Mutex::new(Vec::new()));
        let w = wakers.clone();
        // (without a thread nobody registers wakers: no hook, no cost per round)
        if threaded {
            e.on_progress(move || {
                let list: Vec<Waker> = {
                    let mut g = w.lock().unwrap_or_else(|e| e.into_inner());
                    if g.is_empty() {
                        return;
                    }
                    std::mem::take(&mut *g)
                };
                for wk in list {
                    wk.wake();
                }
            });
        }
        Ok(EngineDriver {
            e,
            wakers,
            name: name.to_string(),
            threaded,
            publishers: Vec::new(),
            stewards: Vec::new(),
        })
    }

    /// Publish the devices' counters while this driver runs (see
    /// [`crate::publish`]); [`crate::DeviceConfig::open`] does this for every device.
    pub fn with_publishers(mut self, p: Vec<crate::publish::Publisher>) -> EngineDriver<T> {
        self.publishers = p;
        self
    }

    /// Keep the stewards of shared devices ([`crate::Steward`]) until
    /// the engine has stopped.
    pub fn with_stewards(mut self, s: Vec<(Arc<Mutex<Hca>>, crate::Steward)>) -> EngineDriver<T> {
        self.stewards = s;
        self
    }

    /// The steward of the shared device whose core is `hca`.
    pub fn steward_of(&self, hca: &Arc<Mutex<Hca>>) -> Option<&crate::Steward> {
        self.stewards.iter().find(|(h, _)| Arc::ptr_eq(h, hca)).map(|(_, s)| s)
    }

    /// The engine (counters, local addresses, progress count).
    pub fn engine(&self) -> &Engine<Hca, T> {
        &self.e
    }
}

impl<T: Link> Driver for EngineDriver<T> {
    fn name(&self) -> &str {
        &self.name
    }

    fn kick(&self) {
        self.e.flush(None);
    }

    fn kick_device(&self, hca: &Arc<Mutex<Hca>>) {
        // Only the posting device (and those with unannounced work).
        self.e.flush(Some(hca));
    }

    // Posting a receive sends nothing: no flush.
    fn recv_posted(&self) {}

    fn poll_once(&self) {
        self.e.round();
    }

    fn polled(&self) {
        self.e.mark_caller();
    }

    fn transport_counters(&self, hca: &Arc<Mutex<Hca>>) -> Option<TransportStats> {
        self.e.counters_of(hca).map(|c| c as TransportStats)
    }

    fn now(&self) -> Option<roce_emulator::Instant> {
        Some(self.e.now())
    }

    fn progress(&self, cond: &mut dyn FnMut() -> bool, budget: Budget) -> bool {
        self.e.progress(cond, budget.wall)
    }

    fn host_listen(
        &self,
        hca: &Arc<Mutex<Hca>>,
        service_id: u64,
    ) -> std::io::Result<Option<HostHold>> {
        match self.steward_of(hca) {
            Some(st) => Ok(Some(Box::new(st.listen(service_id)?))),
            None => Ok(None),
        }
    }

    fn host_xrcd(
        &self,
        hca: &Arc<Mutex<Hca>>,
        key: (u64, u64),
    ) -> std::io::Result<(bool, Option<HostHold>)> {
        match self.steward_of(hca) {
            Some(st) => {
                let (elsewhere, hold) = st.xrcd(key)?;
                Ok((elsewhere, Some(Box::new(hold))))
            }
            None => Ok((false, None)),
        }
    }

    fn join_group(&self, hca: &Arc<Mutex<Hca>>, group: std::net::IpAddr) -> std::io::Result<()> {
        self.e.join_group(hca, group)
    }

    fn leave_group(&self, hca: &Arc<Mutex<Hca>>, group: std::net::IpAddr) -> std::io::Result<()> {
        self.e.leave_group(hca, group)
    }

    fn register_waker(&self, waker: &Waker) -> bool {
        if !self.threaded {
            return false;
        }
        let mut g = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        if !g.iter().any(|w| w.will_wake(waker)) {
            g.push(waker.clone());
        }
        true
    }
}

/// The live counters of the transport under `ctx`'s device, when an
/// [`EngineDriver`] runs it (`None` on the simulated fabric): the
/// [`TransportCounters`] behind [`Context::transport_counters`].
pub fn transport_counters(ctx: &Context) -> Option<Arc<TransportCounters>> {
    ctx.transport_counters()?.downcast::<TransportCounters>().ok()
}
