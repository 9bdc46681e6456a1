//! What moves a device's frames: the driver behind a [`crate::Device`].
//!
//! The verbs types never do I/O themselves. Every device is an
//! `Arc<Mutex<Hca>>` (the sans-IO core) plus an `Arc<dyn Driver>` that feeds
//! it received datagrams, drains its transmits and fires its timers. This
//! crate has none: the simulated fabric's (`roce_sim::SimNet`, crate
//! `roce-sim`) advances a virtual clock when asked to make progress. Real
//! devices (UDP and raw sockets) have theirs in `roce-host` (`roce_host::EngineDriver`),
//! where the calling thread moves the frames itself: [`Driver::kick`] sends
//! what a post queued, [`Driver::progress`] receives and processes datagrams
//! (spinning, then sleeping on the sockets), and, unless the engine runs
//! without one, an engine thread fires timers and serves devices nobody
//! polls (see `transport/README.md`, "Progress in the caller's thread").
//! Neither needs any change in the verbs types.

use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

/// How long [`Driver::progress`] may work before giving up.
///
/// A simulated driver counts events (deliveries and timer firings); a
/// real-time driver waits at most `wall` of real time. Each driver uses the
/// bound that makes sense for it and ignores the other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Most simulation events to process.
    pub events: usize,
    /// Most wall-clock time to wait (real-time drivers).
    pub wall: Duration,
}

impl Budget {
    /// A budget of `events` simulation events (and 10 s of wall time).
    pub const fn events(events: usize) -> Budget {
        Budget { events, wall: Duration::from_secs(10) }
    }
}

impl Default for Budget {
    /// 1,000,000 events or 10 s.
    fn default() -> Self {
        Budget::events(1_000_000)
    }
}

/// The transport behind a device. See the [module documentation](self).
pub trait Driver: Send + Sync + 'static {
    /// A short name for traces and `Debug` output (`"sim"`, `"udp"`...).
    fn name(&self) -> &str;

    /// New work was posted to a device: a threaded driver wakes its loop so
    /// the packets leave now. The simulated fabric polls transmits on every
    /// step and needs nothing.
    fn kick(&self) {}

    /// [`Driver::kick`] for work posted to the device whose core is `hca`
    /// (a driver of several devices may then move only that one's packets).
    fn kick_device(&self, hca: &std::sync::Arc<std::sync::Mutex<roce_emulator::Hca>>) {
        let _ = hca;
        self.kick()
    }

    /// A receive buffer was posted. Posting a receive sends nothing, so a
    /// driver that sends inline on [`Driver::kick`] may leave its queued
    /// packets (ACKs) for the next kick; the default is to kick.
    fn recv_posted(&self) {
        self.kick()
    }

    /// `ibv_poll_cq` found nothing: a driver that moves frames in the
    /// caller's thread runs one non-blocking round (receive what waits,
    /// fire due timers, send). The default does nothing.
    fn poll_once(&self) {}

    /// `ibv_poll_cq` found completions: the caller is polling the device
    /// (a driver that leaves the sockets to polling callers, and takes
    /// them over only when the callers are gone, keeps them theirs). The
    /// default does nothing.
    fn polled(&self) {}

    /// Make progress until `cond` returns true or `budget` is spent; returns
    /// whether `cond` held. `cond` is called without any driver lock held,
    /// so it may use the verbs (poll a CQ, read an MR).
    fn progress(&self, cond: &mut dyn FnMut() -> bool, budget: Budget) -> bool;

    /// The devices' clock now (the `now` this driver passes to the cores),
    /// for calls that start timers between inputs (the CM's). `None` when
    /// the driver cannot tell; callers then use the time of the device's
    /// latest input.
    fn now(&self) -> Option<roce_emulator::Instant> {
        None
    }

    /// The live counters of the transport under the device whose core is
    /// `hca` (`None` for the simulated fabric), as the driver keeps them
    /// (see [`TransportStats`]).
    fn transport_counters(
        &self,
        hca: &std::sync::Arc<std::sync::Mutex<roce_emulator::Hca>>,
    ) -> Option<TransportStats> {
        let _ = hca;
        None
    }

    /// Async support: wake `waker` (once) after the driver next makes
    /// progress on its own thread; returns false if this driver has no
    /// thread of its own (then the caller must call [`Driver::progress`]
    /// itself, as the simulated fabric needs).
    fn register_waker(&self, _waker: &std::task::Waker) -> bool {
        false
    }

    /// `rdma_listen` on `service_id` for the whole host: on a device
    /// shared with other processes, connection requests to it must reach
    /// this process, and another process may not listen on it too.
    /// `Ok(Some(hold))` listens until `hold` is dropped;
    /// `Err(AddrInUse)` when another process of the device listens on it.
    /// The default (a device of this process alone) holds nothing.
    fn host_listen(
        &self,
        hca: &std::sync::Arc<std::sync::Mutex<roce_emulator::Hca>>,
        service_id: u64,
    ) -> std::io::Result<Option<HostHold>> {
        let _ = (hca, service_id);
        Ok(None)
    }

    /// An XRC domain opened by the file whose `(st_dev, st_ino)` is `key`
    /// on the device whose core is `hca` (`ibv_open_xrcd`): on a device
    /// shared by several processes, whether another process holds the
    /// file's domain (`true`), and this process's hold on it (kept while
    /// it has the domain). The default (a device of this process alone):
    /// nobody else, no hold.
    fn host_xrcd(
        &self,
        hca: &std::sync::Arc<std::sync::Mutex<roce_emulator::Hca>>,
        key: (u64, u64),
    ) -> std::io::Result<(bool, Option<HostHold>)> {
        let _ = (hca, key);
        Ok((false, None))
    }

    /// The device whose core is `hca` got its first QP in the multicast
    /// group `group` (`ibv_attach_mcast`): receive the group's datagrams
    /// from the wire (a UDP device joins the IP group on its interface;
    /// the simulated fabric makes the device's node a member of the group).
    /// The default (a network that delivers a group's datagrams without a
    /// join) does nothing.
    fn join_group(
        &self,
        hca: &std::sync::Arc<std::sync::Mutex<roce_emulator::Hca>>,
        group: std::net::IpAddr,
    ) -> std::io::Result<()> {
        let _ = (hca, group);
        Ok(())
    }

    /// The device's last QP in `group` left it: stop receiving it.
    fn leave_group(
        &self,
        hca: &std::sync::Arc<std::sync::Mutex<roce_emulator::Hca>>,
        group: std::net::IpAddr,
    ) -> std::io::Result<()> {
        let _ = (hca, group);
        Ok(())
    }
}

/// Something held for the host while it lives (see [`Driver::host_listen`]).
pub type HostHold = Box<dyn std::any::Any + Send + Sync>;

/// A transport's live counters, of whatever type its driver keeps (a real
/// device's are `roce_transport::TransportCounters`; `roce_host::transport_counters`
/// hands them out as that type). The verbs only pass them on.
pub type TransportStats = std::sync::Arc<dyn std::any::Any + Send + Sync>;

/// One poll of a future that is ready when `try_get` returns a value.
/// The task's waker is registered first (a value that comes in between
/// still wakes it): a threaded driver wakes the task after each round with
/// progress; a driver without a thread (the simulated fabric) is stepped a
/// little here, and the task wakes itself to be polled again.
pub(crate) fn poll_progress<T>(
    driver: &dyn Driver,
    cx: &mut TaskContext<'_>,
    mut try_get: impl FnMut() -> Option<T>,
) -> Poll<T> {
    let threaded = driver.register_waker(cx.waker());
    if let Some(v) = try_get() {
        return Poll::Ready(v);
    }
    if !threaded {
        let mut got = None;
        driver.progress(
            &mut || {
                got = try_get();
                got.is_some()
            },
            Budget::events(1000),
        );
        if let Some(v) = got {
            return Poll::Ready(v);
        }
        cx.waker().wake_by_ref();
    }
    Poll::Pending
}
