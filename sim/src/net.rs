//! The simulated fabric as a verbs driver: devices on an in-memory network
//! with a virtual clock and seeded faults, programmed through
//! `roce_verbs_api` like real ones.
//!
//! ```
//! use roce_sim::SimNet;
//! use roce_verbs_api::{ConnectOptions, SendWr, WrOpcode, RecvWr, AccessFlags, Budget};
//!
//! let net = SimNet::new(7);
//! let (a, b) = (net.add_device("roce0", "10.0.0.1".parse().unwrap()).open(),
//!               net.add_device("roce1", "10.0.0.2".parse().unwrap()).open());
//! let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
//! let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
//! let (qa, qb) = (pa.qp_builder(&ca, &ca).build().unwrap(), pb.qp_builder(&cb, &cb).build().unwrap());
//! let opts = ConnectOptions::default();
//! let (ea, eb) = (qa.endpoint(100), qb.endpoint(200));
//! qa.connect(&ea, &eb, &opts).unwrap();
//! qb.connect(&eb, &ea, &opts).unwrap();
//!
//! let src = pa.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
//! let dst = pb.reg_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
//! src.write(0, b"hello, RoCE").unwrap();
//! qb.post_recv(RecvWr::new(1, dst.addr(), 64, dst.lkey())).unwrap();
//! qa.post_send(SendWr::new(2, WrOpcode::Send).sge(src.addr(), 11, src.lkey())).unwrap();
//! let wc = net.poll_cq_blocking(&cb, 1, 10_000).unwrap();
//! assert_eq!(wc[0].byte_len, 11);
//! assert_eq!(&dst.to_vec()[..11], b"hello, RoCE");
//! ```

use crate::{Fabric, FabricStats, FaultConfig, LinkConfig, NodeId};
use roce_emulator::{Hca, HcaConfig, Instant, PathMtu, PollCqError, WorkCompletion};
use roce_verbs_api::{Budget, Cq, Device, Driver, ENV_PCAP};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

struct SimShared {
    fabric: Mutex<Fabric>,
    /// The HCAs, not the [`Device`]s: a `Device` holds the network, so
    /// keeping devices here would be a reference cycle and a network would
    /// never be freed. Each with its node in the fabric.
    hcas: Mutex<Vec<(Arc<Mutex<Hca>>, NodeId)>>,
}

impl SimShared {
    fn fabric(&self) -> MutexGuard<'_, Fabric> {
        self.fabric.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hcas(&self) -> MutexGuard<'_, Vec<(Arc<Mutex<Hca>>, NodeId)>> {
        self.hcas.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The fabric node of the device whose core is `hca`.
    fn node_of(&self, hca: &Arc<Mutex<Hca>>) -> std::io::Result<NodeId> {
        let id = self.hcas().iter().find(|(h, _)| Arc::ptr_eq(h, hca)).map(|(_, id)| *id);
        id.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "not a device of this network")
        })
    }
}

impl Driver for SimShared {
    fn name(&self) -> &str {
        "sim"
    }

    fn now(&self) -> Option<Instant> {
        Some(self.fabric().now())
    }

    fn progress(&self, cond: &mut dyn FnMut() -> bool, budget: Budget) -> bool {
        if cond() {
            return true;
        }
        for _ in 0..budget.events {
            // the fabric lock is released before `cond` runs
            let stepped = self.fabric().step();
            if cond() {
                return true;
            }
            if !stepped {
                return false;
            }
        }
        false
    }

    /// A device's first QP attached to `group`: its node joins the group
    /// on the fabric (what a UDP device's `IP_ADD_MEMBERSHIP` is on a real
    /// network), so the fabric hands it a copy of the group's datagrams.
    fn join_group(&self, hca: &Arc<Mutex<Hca>>, group: IpAddr) -> std::io::Result<()> {
        let node = self.node_of(hca)?;
        if self.fabric().join_group(node, group) {
            Ok(())
        } else {
            Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{group} is not a multicast address"),
            ))
        }
    }

    /// The device's last QP left `group`: its node leaves it.
    fn leave_group(&self, hca: &Arc<Mutex<Hca>>, group: IpAddr) -> std::io::Result<()> {
        let node = self.node_of(hca)?;
        self.fabric().leave_group(node, group);
        Ok(())
    }
}

/// A simulated network of emulated HCAs: owns the sim [`Fabric`] and
/// creates [`Device`]s attached to it. Nothing moves until it is driven
/// (explicitly with [`SimNet::run_until_idle`] and friends, or by the
/// verbs' blocking helpers such as [`Cq::poll_blocking`]). Clones share
/// the network.
///
/// Multicast: when a device's first QP attaches to a group
/// (`Qp::attach_mcast`), the driver joins the device's node to the group on
/// the fabric ([`Fabric::join_group`]), and it leaves with the last QP, as
/// a UDP device joins the IP group on its interface; the fabric then hands
/// each member device a copy of the group's datagrams, and the device's
/// core one to each of its attached QPs.
///
/// Locking: the fabric lock is taken for each step and released before any
/// user callback runs; the fabric takes a device's lock inside a step.
/// Verbs take only device locks, so any mix of verbs and driving is
/// deadlock-free.
#[derive(Clone)]
pub struct SimNet {
    shared: Arc<SimShared>,
}

impl fmt::Debug for SimNet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimNet").field("fabric", &*self.shared.fabric()).finish()
    }
}

impl SimNet {
    /// An empty network whose randomness (faults, device keys) comes from
    /// `seed`.
    pub fn new(seed: u64) -> SimNet {
        SimNet::with_fabric_value(Fabric::new(seed))
    }

    /// Like [`SimNet::new`], but `ROCE_SIM_SEED` overrides `default`. A
    /// network dropped while its thread panics prints the replay command.
    pub fn from_env_seed(default: u64) -> SimNet {
        SimNet::with_fabric_value(Fabric::from_env_seed(default))
    }

    /// Wrap an existing fabric (no nodes yet, or only non-HCA nodes).
    ///
    /// With `ROCE_EMU_PCAP=DIR` set, every datagram the fabric delivers is
    /// recorded to `DIR/sim-<pid>-<n>.pcap` (n counts the networks of the
    /// process), timestamped with the virtual clock. The file is written
    /// unbuffered, so it is complete at any time.
    pub fn with_fabric_value(mut fabric: Fabric) -> SimNet {
        if let Some(dir) = std::env::var_os(ENV_PCAP).filter(|d| !d.is_empty()) {
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path =
                std::path::Path::new(&dir).join(format!("sim-{}-{n}.pcap", std::process::id()));
            let res = std::fs::File::create(&path)
                .map_err(|e| e.to_string())
                .and_then(|f| fabric.record_pcap(f).map_err(|e| e.to_string()));
            if let Err(e) = res {
                tracing::warn!(path = %path.display(), error = %e, "cannot record the sim fabric");
            }
        }
        SimNet {
            shared: Arc::new(SimShared { fabric: Mutex::new(fabric), hcas: Mutex::new(vec![]) }),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.shared.fabric().seed()
    }

    /// Add an HCA named `name` at `addr`, with rxe-like defaults and an
    /// active MTU of 4096 (the default sim link is a 9000-byte jumbo link).
    /// Its key RNG is seeded from the network seed and its position.
    pub fn add_device(&self, name: &str, addr: IpAddr) -> Device {
        let n = self.shared.hcas().len() as u64;
        let seed = self.seed().wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(n + 1);
        let mut cfg = HcaConfig::new(name, addr, seed);
        cfg.active_mtu = PathMtu::Mtu4096;
        self.add_device_with(cfg)
    }

    /// Add an HCA with an explicit configuration.
    pub fn add_device_with(&self, cfg: HcaConfig) -> Device {
        let addr = cfg.addr;
        let hca = Arc::new(Mutex::new(Hca::new(cfg)));
        let node = self.shared.fabric().add_node(addr, hca.clone());
        self.shared.hcas().push((hca.clone(), node));
        Device::new(hca, self.shared.clone())
    }

    /// Every device added so far.
    pub fn devices(&self) -> Vec<Device> {
        let hcas = self.shared.hcas();
        hcas.iter().map(|(h, _)| Device::new(h.clone(), self.shared.clone())).collect()
    }

    /// The names of the devices that joined the multicast group `group`
    /// (have a QP attached to it), in the order they were added.
    pub fn group_members(&self, group: IpAddr) -> Vec<String> {
        let members = self.shared.fabric().group_members(group);
        let hcas = self.shared.hcas();
        hcas.iter()
            .filter(|(_, id)| members.contains(id))
            .map(|(h, _)| Device::new(h.clone(), self.shared.clone()).name().to_string())
            .collect()
    }

    /// Set the random faults of every link (loss, duplication, reordering,
    /// corruption, jitter).
    pub fn set_faults(&self, faults: FaultConfig) {
        self.shared.fabric().set_faults(faults);
    }

    /// Set the default link properties (latency, rate, MTU).
    pub fn set_default_link(&self, link: LinkConfig) {
        self.shared.fabric().set_default_link(link);
    }

    /// Run `f` on the fabric (filters, per-link settings, pcap taps,
    /// statistics). Do not drive the network or call verbs from `f`.
    pub fn with_fabric<R>(&self, f: impl FnOnce(&mut Fabric) -> R) -> R {
        f(&mut self.shared.fabric())
    }

    /// The fabric's counters.
    pub fn stats(&self) -> FabricStats {
        self.shared.fabric().stats().clone()
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.shared.fabric().now()
    }

    /// Virtual time since the network was created.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now().as_nanos())
    }

    /// Process one event; false if there was nothing to do.
    pub fn step(&self) -> bool {
        self.shared.fabric().step()
    }

    /// Process up to `n` events (one lock for all of them); returns how
    /// many were processed (fewer when the fabric went idle).
    pub fn run_steps(&self, n: usize) -> usize {
        let mut f = self.shared.fabric();
        for i in 0..n {
            if !f.step() {
                return i;
            }
        }
        n
    }

    /// Step until nothing is in flight and no timer is armed, at most
    /// `max_events` steps; true if the fabric went idle.
    pub fn run_until_idle(&self, max_events: usize) -> bool {
        self.shared.fabric().run_until_idle(max_events)
    }

    /// Step until `cond` holds (checked before the first step and after
    /// each, without the fabric lock), at most `max_events` steps.
    pub fn run_until(&self, mut cond: impl FnMut() -> bool, max_events: usize) -> bool {
        self.shared.progress(&mut cond, Budget::events(max_events))
    }

    /// Poll `cq` until `n` completions arrived, stepping the fabric in
    /// between (at most `max_events` steps). Returns what arrived: fewer
    /// than `n` if the bound was hit or the fabric went idle.
    pub fn poll_cq_blocking(
        &self,
        cq: &Cq,
        n: usize,
        max_events: usize,
    ) -> Result<Vec<WorkCompletion>, PollCqError> {
        cq.poll_blocking(n, Budget::events(max_events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_network_is_freed_when_its_last_handle_goes() {
        let net = SimNet::new(1);
        let a = net.add_device("a", "10.0.0.1".parse().unwrap());
        let b = net.add_device("b", "10.0.0.2".parse().unwrap());
        assert_eq!(
            net.devices().iter().map(|d| d.name().to_string()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let weak = Arc::downgrade(&net.shared);
        assert_eq!(Arc::strong_count(&net.shared), 3);
        drop(net);
        drop(a);
        assert!(weak.upgrade().is_some(), "device b still holds the network");
        drop(b);
        assert!(weak.upgrade().is_none(), "a network with no handles left must be freed");
    }
}
