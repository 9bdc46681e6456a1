//! Devices and opened device contexts (`ibv_device`, `ibv_context`).

use crate::driver::{Budget, Driver};
use crate::objects::{lock, ContextInner};
use roce_emulator::objects::{eui64, gid_table, mac_of};
use roce_emulator::{AsyncEvent, Counters, DeviceAttr, Hca, PortAttr};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::objects::Context;

/// A device a driver serves (`struct ibv_device`): the emulated HCA and the
/// transport that moves its frames. Cheap to clone; open it to use it.
#[derive(Clone)]
pub struct Device {
    hca: Arc<Mutex<Hca>>,
    driver: Arc<dyn Driver>,
    name: String,
    addr: IpAddr,
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name)
            .field("addr", &self.addr)
            .field("driver", &self.driver.name())
            .finish()
    }
}

impl Device {
    /// Wrap an HCA that `driver` serves. Drivers call this; applications
    /// get devices from a driver (e.g. `roce_sim::SimNet::add_device`).
    pub fn new(hca: Arc<Mutex<Hca>>, driver: Arc<dyn Driver>) -> Device {
        let (name, addr) = {
            let h = lock(&hca);
            (h.name().to_string(), h.addr())
        };
        Device { hca, driver, name, addr }
    }

    /// The device name (e.g. `roce0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port's IP address (its RoCEv2 GID 0).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// `ibv_open_device`.
    pub fn open(&self) -> Context {
        Context {
            inner: Arc::new(ContextInner {
                hca: self.hca.clone(),
                driver: self.driver.clone(),
                name: self.name.clone(),
                addr: self.addr,
                port_active: AtomicBool::new(true),
                async_chan: OnceLock::new(),
            }),
        }
    }
}

impl Context {
    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The port's IP address.
    pub fn addr(&self) -> IpAddr {
        self.inner.addr
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> DeviceAttr {
        self.lock().query_device()
    }

    /// `ibv_query_port` (port 1).
    pub fn query_port(&self) -> PortAttr {
        self.lock().query_port()
    }

    /// `ibv_query_gid` with rxe's table: index 0 is the link-local GID
    /// (`fe80::` + the EUI-64 of the device's MAC), index 1 the port
    /// address's RoCEv2 GID (`::ffff:a.b.c.d` for IPv4); see
    /// [`crate::gid::gid_table`]. Other indices are empty.
    pub fn query_gid(&self, index: u32) -> Option<Ipv6Addr> {
        gid_table(self.inner.addr).get(index as usize).copied()
    }

    /// The node GUID as rxe derives it (EUI-64 of the device's MAC).
    pub fn node_guid(&self) -> u64 {
        u64::from_be_bytes(eui64(mac_of(self.inner.addr)))
    }

    /// The driver's name (`"sim"`, `"udp"`).
    pub fn driver_name(&self) -> &str {
        self.inner.driver.name()
    }

    /// The device counters (rxe's names; see [`Counters`]).
    pub fn counters(&self) -> Counters {
        self.lock().counters()
    }

    /// The live counters of the device's transport (`None` on the
    /// simulated fabric), of the type its driver keeps: for a real device
    /// `roce_host::transport_counters(ctx)` returns them as
    /// `roce_transport::TransportCounters`.
    pub fn transport_counters(&self) -> Option<crate::driver::TransportStats> {
        self.inner.driver.transport_counters(&self.inner.hca)
    }

    /// `ibv_get_async_event`, non-blocking. The first event of a newly
    /// opened context is [`AsyncEvent::PortActive`] (the port is up).
    /// With an [`crate::AsyncEventChannel`] the event comes from its queue.
    pub fn poll_async_event(&self) -> Option<AsyncEvent> {
        if let Some(ch) = self.inner.async_chan.get() {
            ch.collect();
            return ch.pop();
        }
        if self.take_port_active() {
            return Some(AsyncEvent::PortActive);
        }
        self.lock().poll_async_event()
    }

    /// Let the driver make progress until `cond` holds (see
    /// [`Driver::progress`]); returns whether it held.
    pub fn progress(&self, mut cond: impl FnMut() -> bool, budget: Budget) -> bool {
        self.driver().progress(&mut cond, budget)
    }

    /// Run `f` on the underlying HCA, under its lock. For this crate's
    /// tests' diagnostics only (hidden from the docs): applications and the
    /// CLI use the verbs of this crate, and whatever they need of the core
    /// becomes one of them. Do not call verbs of this crate from inside `f`
    /// (the lock is not reentrant).
    #[doc(hidden)]
    pub fn with_hca<R>(&self, f: impl FnOnce(&mut Hca) -> R) -> R {
        f(&mut self.lock())
    }
}
