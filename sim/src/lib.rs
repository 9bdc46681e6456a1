//! A deterministic simulated fabric: any number of [`SansIo`] nodes (HCAs,
//! or small test nodes), a virtual clock, links with latency, rate and MTU,
//! and seeded fault injection on every datagram in flight.
//!
//! The fabric drives the core (`roce_emulator`) from outside: it uses only
//! the core's [`SansIo`] interface (`roce_emulator::io`) and its virtual
//! time (`roce_emulator::time`), so it drives any `SansIo` node. The
//! `testkit` (feature `testkit`) builds two `Hca`s wired back to back on it (the two-node
//! harness of the tests of every crate).
//!
//! # Model
//!
//! * Each node is reachable at one or more IP addresses; a datagram goes to
//!   the node that owns `endpoints.dst` (unknown destinations are dropped
//!   and counted). Source and destination node define a directed link.
//! * A datagram to an IP multicast address (IPv4 224.0.0.0/4, IPv6
//!   ff00::/8, IPv4-mapped or not) goes to every node that joined the group
//!   ([`Fabric::join_group`]; a device joins when its first QP attaches,
//!   see [`SimNet`]), one copy each, in node order, as a switch replicates
//!   a group's frames to the ports that asked for them by IGMP/MLD. The
//!   sender gets a copy too if it is a member itself (IP_MULTICAST_LOOP on,
//!   as the UDP transport sets it). Each copy is a datagram of its own on
//!   its own link from then on: MTU, filters, random faults, latency and
//!   FIFO order apply per copy (the sender's transmission is counted once
//!   in `transmitted` and tapped once at `Egress`; [`FabricStats::mcast_copies`]
//!   counts the copies). A group nobody joined is unroutable. Lockstep
//!   runs ([`Fabric::run_lockstep`]) route unicast only.
//! * A link ([`LinkConfig`]) has a propagation latency, an optional rate in
//!   bytes per second (a datagram occupies the link for its Ethernet frame
//!   length, see [`wire_len`], and datagrams queue behind each other), and
//!   an MTU on the IP packet length (larger datagrams never enter the link:
//!   dropped and counted).
//! * Faults ([`FaultConfig`], [`Filter`]) are decided when a datagram
//!   enters the link, in a fixed order: MTU, filters (all of them, in the
//!   order added, so each counts every datagram), random loss, corruption,
//!   duplication, reordering and delay, the ECN congestion mark, jitter.
//!   A mark ([`FaultConfig::ce_mark`], [`Action::MarkCe`]) sets the ECN
//!   field of an ECN-capable datagram's `meta.tos` to CE, as a switch's
//!   RED/ECN queue does ([`roce_faults::mark_ce`]: a non-ECT datagram is
//!   never marked). Links are FIFO: jitter
//!   varies arrival times but never reorders; only explicit holds (the
//!   reorder fault, a filter's delay) let later datagrams overtake.
//! * Events are ordered by (virtual time, sequence number); at equal times
//!   deliveries come before timers. All randomness comes from one
//!   `SmallRng` seeded with a `u64` ([`Fabric::seed`]), so a run replays
//!   exactly from its seed (on the same platform and `rand` version).
//!
//! # Driving
//!
//! [`Fabric::step`] processes one event: before and after it, every node is
//! asked for its transmits (`poll_transmit` at the current virtual time).
//! The run loops ([`Fabric::run_until_idle`], [`Fabric::run_until`],
//! [`Fabric::run_for`]) are all bounded by an event count.
//!
//! # Lockstep runs, the trace, test packets
//!
//! The fabric is the one simulated wire of every test layer. Besides the
//! event-driven runs above, [`Fabric::run_lockstep`] moves datagrams with
//! no latency in rounds ([`Pace`]) and offers each RoCE datagram to a hook
//! that observes it and answers a [`Verdict`] (deliver, drop, duplicate,
//! replace its bytes, hold it behind the next one); the two-node test
//! harness (`testkit`, behind the feature of that name) is exactly that, with two `Hca`s lent to a
//! `Fabric<&mut Hca>` for each run (the node type `N` is a parameter;
//! owned boxed nodes are the default). Lockstep runs always record the
//! wire trace ([`Traced`]: headers, direction, fate), the event-driven ones
//! after [`Fabric::record_trace`]; [`Fabric::count`] counts an opcode per
//! direction and [`Fabric::dump`] prints the trace. [`packet::PacketBuilder`]
//! builds hand-made datagrams with a valid ICRC for tests and hooks.
//!
//! The random faults of a datagram are decided by one function,
//! [`FaultDice::decide`], which the real transports' `ROCE_EMU_FAULTS`
//! injector (`roce_transport::faults`) calls as well.
//!
//! # Example
//!
//! ```
//! use roce_sim::{Fabric, FaultConfig, Filter, Match};
//! use roce_packet::Opcode;
//! use std::time::Duration;
//!
//! let mut fabric = Fabric::from_env_seed(1);
//! fabric.set_faults(FaultConfig { drop: 0.01, jitter: Duration::from_nanos(500), ..FaultConfig::default() });
//! let third_middle = fabric.add_filter(
//!     Filter::matching(Match::Opcode(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE)).nth(3).drop(),
//! );
//! // fabric.add_node("10.0.0.1".parse().unwrap(), hca_a); ... (any `SansIo + Send`,
//! // or an `Arc<Mutex<_>>` of one to keep a handle for posting work)
//! assert!(fabric.run_until_idle(100_000));
//! assert_eq!(fabric.filter(third_middle).unwrap().fired(), 0);
//! ```
//!
//! # Seeds
//!
//! [`Fabric::from_env_seed`] takes the seed from `ROCE_SIM_SEED` when set.
//! A fabric dropped while its thread panics (a failing test) prints
//! `replay with ROCE_SIM_SEED=<seed>` on stderr; [`SeedGuard`] does the
//! same for other seeded things.

pub mod incast;
#[cfg(test)]
mod mcast_tests;
mod net;
pub mod packet;
pub mod switched;
mod tap;
#[cfg(feature = "testkit")]
pub mod testkit;
mod wire;

pub use net::SimNet;

pub use roce_faults::{
    mark_ce, Action, Fate, FaultConfig, FaultDice, FaultRates, Filter, FilterFn, FilterId, Match,
    NodeId, Occurrence, PacketInfo,
};
pub use tap::{mac_for, TapId, TapPoint};
pub use wire::{Pace, Traced, Verdict};

use bytes::Bytes;
use core::cmp::Ordering;
use core::net::IpAddr;
use core::time::Duration;
use rand::rngs::SmallRng;
use rand::Rng;
use roce_emulator::io::{Datagram, SansIo};
use roce_emulator::time::Instant;
use roce_packet::{RocePacket, RoceRepr};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use tracing::{debug, trace};

/// The environment variable that overrides a test's default seed.
pub const SEED_ENV: &str = "ROCE_SIM_SEED";

/// Properties of a directed link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkConfig {
    /// Propagation delay (default 2 µs).
    pub latency: Duration,
    /// Bytes per second, `None` for unlimited (default). With a rate, a
    /// datagram takes `wire_len * 1e9 / rate` ns (rounded up) to serialize
    /// and waits for the datagrams before it.
    pub rate: Option<u64>,
    /// Largest IP packet (IP + UDP headers + payload) the link carries
    /// (default 9000, a jumbo-frame link on which every IBA path MTU fits).
    pub mtu: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig { latency: Duration::from_micros(2), rate: None, mtu: 9000 }
    }
}

/// Counters of one fabric. Tests assert on them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Datagrams taken from nodes (or injected).
    pub transmitted: u64,
    /// Datagrams handed to a node (duplicates included).
    pub delivered: u64,
    /// Lost to [`FaultConfig::drop`].
    pub dropped_loss: u64,
    /// Dropped by a [`Filter`].
    pub dropped_filter: u64,
    /// Larger than the link MTU.
    pub dropped_mtu: u64,
    /// Destination address owned by no node (or a multicast group no node
    /// joined).
    pub dropped_unroutable: u64,
    /// Copies of multicast datagrams made for the groups' members (one per
    /// member node and datagram, before faults).
    pub mcast_copies: u64,
    /// Extra copies created (by [`FaultConfig::duplicate`] or a filter).
    pub duplicated: u64,
    /// Held back by [`FaultConfig::reorder`].
    pub reorder_held: u64,
    /// Delivered after a datagram sent later on the same link (measured at
    /// delivery, whatever caused it: reorder fault, filter delay, a
    /// duplicate's copy).
    pub reordered: u64,
    /// Datagrams with a flipped bit.
    pub corrupted: u64,
    /// Datagrams delayed by a filter.
    pub delayed: u64,
    /// ECN-capable datagrams marked Congestion Experienced (by
    /// [`FaultConfig::ce_mark`] or a filter's [`Action::MarkCe`]; once per
    /// datagram, its duplicate carries the mark too). Non-ECT datagrams
    /// are never marked, so never counted.
    pub ce_marked: u64,
    /// `handle_timeout` calls made.
    pub timers_fired: u64,
    /// Frames the capture tap could not write (recording stops at the
    /// first write error).
    pub tap_errors: u64,
}

impl FabricStats {
    /// All drops, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_loss + self.dropped_filter + self.dropped_mtu + self.dropped_unroutable
    }
}

/// Per-node counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Datagrams this node transmitted.
    pub transmitted: u64,
    /// Datagrams delivered to this node.
    pub delivered: u64,
    /// Timer firings.
    pub timers_fired: u64,
}

/// Prints `replay with ROCE_SIM_SEED=<seed>` on stderr when dropped during
/// a panic, so a failing randomized test says how to replay it.
#[derive(Debug)]
pub struct SeedGuard {
    seed: u64,
    /// Off for runs that draw nothing from the seed (lockstep runs): their
    /// replay line would only mislead.
    armed: bool,
}

impl SeedGuard {
    /// Guard `seed`.
    pub fn new(seed: u64) -> SeedGuard {
        SeedGuard { seed, armed: true }
    }
    /// The guarded seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }
}

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if self.armed && std::thread::panicking() {
            eprintln!("replay with {SEED_ENV}={}", self.seed);
        }
    }
}

/// The seed from `ROCE_SIM_SEED` (decimal, or hex with `0x`), else
/// `default`. An unparsable value is reported on stderr and ignored.
pub fn seed_from_env(default: u64) -> u64 {
    match std::env::var(SEED_ENV) {
        Ok(s) => match parse_seed(&s) {
            Some(v) => v,
            None => {
                eprintln!("{SEED_ENV}={s:?} is not a u64; using seed {default}");
                default
            }
        },
        Err(_) => default,
    }
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Bytes a datagram occupies on an Ethernet link: the Ethernet header (14),
/// IP header (20 or 40), UDP header (8) and payload. Preamble, FCS and
/// inter-frame gap are not modelled.
pub fn wire_len(d: &Datagram) -> usize {
    14 + ip_len(d)
}

/// Length of the IP packet carrying `d`.
pub fn ip_len(d: &Datagram) -> usize {
    let ip = if d.endpoints.dst.is_ipv4() { 20 } else { 40 };
    ip + 8 + d.payload.len()
}

/// A node that swallows every datagram, never transmits and arms no
/// timer: a peer for tests that only look at the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NullNode;

impl SansIo for NullNode {
    fn handle_datagram(&mut self, _now: Instant, _dgram: Datagram) {}
    fn poll_transmit(&mut self, _now: Instant) -> Option<Datagram> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

struct Node<N> {
    addrs: Vec<IpAddr>,
    io: N,
    stats: NodeStats,
}

#[derive(Default)]
struct LinkState {
    config: Option<LinkConfig>,
    faults: Option<FaultConfig>,
    /// When the link finishes serializing what it has been given.
    busy_until: Instant,
    /// Transmissions on this link so far.
    sent: u64,
    /// Highest link sequence number delivered so far.
    max_delivered: Option<u64>,
    /// Latest arrival of a datagram that was not held (FIFO order).
    fifo_mark: Instant,
}

struct InFlight {
    at: Instant,
    seq: u64,
    from: NodeId,
    to: NodeId,
    link_seq: u64,
    dgram: Datagram,
}

impl PartialEq for InFlight {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for InFlight {
    /// Reversed so that `BinaryHeap` pops the earliest (time, seq).
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// What [`Fabric::step`] would do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextEvent {
    /// Deliver a datagram at this time.
    Deliver(Instant),
    /// Fire this node's timer at this time (never earlier than `now`).
    Timer(NodeId, Instant),
}

impl NextEvent {
    /// When it happens.
    pub fn at(self) -> Instant {
        match self {
            NextEvent::Deliver(t) | NextEvent::Timer(_, t) => t,
        }
    }
}

/// The node type of a fabric that owns its nodes.
pub type BoxedNode = Box<dyn SansIo + Send>;

/// The simulated fabric. See the [crate documentation](crate).
///
/// `N` is the node type: by default boxed nodes the fabric owns; a
/// `Fabric<&mut Hca>` drives HCAs lent to it for one run (what the
/// the `testkit`'s two-node harness does).
pub struct Fabric<N = BoxedNode> {
    now: Instant,
    seed: u64,
    dice: FaultDice,
    nodes: Vec<Node<N>>,
    routes: HashMap<IpAddr, NodeId>,
    /// Multicast groups (canonical addresses) and their member nodes.
    groups: BTreeMap<IpAddr, BTreeSet<NodeId>>,
    default_link: LinkConfig,
    default_faults: FaultConfig,
    links: BTreeMap<(NodeId, NodeId), LinkState>,
    filters: Vec<Filter>,
    queue: BinaryHeap<InFlight>,
    /// Sequence number for the next queued event (ties on time).
    next_event_seq: u64,
    /// Fabric-wide transmission counter.
    next_tx: u64,
    stats: FabricStats,
    taps: Vec<Option<tap::Tap>>,
    max_transmits_per_poll: usize,
    max_events_per_run: usize,
    /// The wire trace (see [`Fabric::record_trace`]).
    trace: Vec<Traced>,
    tracing: bool,
    _guard: SeedGuard,
}

impl<N> std::fmt::Debug for Fabric<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("now", &self.now)
            .field("seed", &self.seed)
            .field("nodes", &self.nodes.len())
            .field("in_flight", &self.queue.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Fabric {
    /// An empty fabric at time zero with this seed, default links and no
    /// faults.
    pub fn new(seed: u64) -> Fabric {
        Fabric::of(seed)
    }

    /// Like [`Fabric::new`], but `ROCE_SIM_SEED` overrides `default`.
    pub fn from_env_seed(default: u64) -> Fabric {
        Fabric::new(seed_from_env(default))
    }

    /// Add a node reachable at `addr`. If another node already owns
    /// `addr`, the new node takes the route over.
    pub fn add_node(&mut self, addr: IpAddr, node: impl SansIo + Send + 'static) -> NodeId {
        self.add_boxed_node(addr, Box::new(node))
    }

    /// [`Fabric::add_node`] for an already boxed node.
    pub fn add_boxed_node(&mut self, addr: IpAddr, node: Box<dyn SansIo + Send>) -> NodeId {
        self.add_io(addr, node)
    }

    /// A node, to inspect it.
    pub fn node(&self, id: NodeId) -> Option<&(dyn SansIo + Send)> {
        self.nodes.get(id.0).map(|n| &*n.io)
    }

    /// A node, to drive it directly (e.g. post work between steps).
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut (dyn SansIo + Send + 'static)> {
        self.nodes.get_mut(id.0).map(|n| &mut *n.io)
    }
}

impl<N: SansIo> Fabric<N> {
    /// An empty fabric of `N` nodes at time zero with this seed, default
    /// links and no faults ([`Fabric::new`] for boxed nodes).
    pub fn of(seed: u64) -> Fabric<N> {
        Fabric {
            now: Instant::ZERO,
            seed,
            dice: FaultDice::new(seed),
            nodes: Vec::new(),
            routes: HashMap::new(),
            groups: BTreeMap::new(),
            default_link: LinkConfig::default(),
            default_faults: FaultConfig::default(),
            links: BTreeMap::new(),
            filters: Vec::new(),
            queue: BinaryHeap::new(),
            next_event_seq: 0,
            next_tx: 0,
            stats: FabricStats::default(),
            taps: Vec::new(),
            max_transmits_per_poll: 65_536,
            max_events_per_run: 1_000_000,
            trace: Vec::new(),
            tracing: false,
            _guard: SeedGuard::new(seed),
        }
    }

    /// The seed this fabric's randomness comes from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The virtual clock.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Counters so far.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    /// Counters of one node (`None` for an unknown id).
    pub fn node_stats(&self, id: NodeId) -> Option<&NodeStats> {
        self.nodes.get(id.0).map(|n| &n.stats)
    }

    /// Move the virtual clock forward to `t` (never back).
    pub fn advance_to(&mut self, t: Instant) {
        self.now = self.now.max(t);
    }

    /// Add a node of the fabric's node type reachable at `addr` (see
    /// [`Fabric::add_node`]).
    pub fn add_io(&mut self, addr: IpAddr, node: N) -> NodeId {
        let id = NodeId(self.nodes.len());
        self.nodes.push(Node { addrs: Vec::new(), io: node, stats: NodeStats::default() });
        self.add_address(id, addr);
        id
    }

    /// Make `node` reachable at another address too (e.g. an IPv6 GID).
    /// Returns false for an unknown node.
    pub fn add_address(&mut self, node: NodeId, addr: IpAddr) -> bool {
        let Some(n) = self.nodes.get_mut(node.0) else { return false };
        if !n.addrs.contains(&addr) {
            n.addrs.push(addr);
        }
        self.routes.insert(addr, node);
        true
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The addresses of a node (empty for an unknown id).
    pub fn addresses(&self, node: NodeId) -> &[IpAddr] {
        self.nodes.get(node.0).map(|n| n.addrs.as_slice()).unwrap_or(&[])
    }

    /// The node an address routes to.
    pub fn route(&self, addr: IpAddr) -> Option<NodeId> {
        self.routes.get(&addr).copied()
    }

    /// Make `node` a member of the IP multicast group `group` (an IGMP /
    /// MLD join): datagrams to the group reach it from then on. Returns
    /// false for an unknown node or an address that is not multicast.
    /// Joining twice is a no-op.
    pub fn join_group(&mut self, node: NodeId, group: IpAddr) -> bool {
        let g = roce_emulator::mcast::canonical_gid(group);
        if node.0 >= self.nodes.len() || !g.is_multicast() {
            return false;
        }
        debug!(node = node.0, group = %g, "sim join group");
        self.groups.entry(g).or_default().insert(node);
        true
    }

    /// `node` leaves `group`; returns whether it was a member.
    pub fn leave_group(&mut self, node: NodeId, group: IpAddr) -> bool {
        let g = roce_emulator::mcast::canonical_gid(group);
        let Some(m) = self.groups.get_mut(&g) else { return false };
        let was = m.remove(&node);
        if m.is_empty() {
            self.groups.remove(&g);
        }
        if was {
            debug!(node = node.0, group = %g, "sim leave group");
        }
        was
    }

    /// The members of `group`, in node order (empty for a group nobody
    /// joined).
    pub fn group_members(&self, group: IpAddr) -> Vec<NodeId> {
        let g = roce_emulator::mcast::canonical_gid(group);
        self.groups.get(&g).map(|m| m.iter().copied().collect()).unwrap_or_default()
    }

    /// A node as its own type.
    pub fn io(&self, id: NodeId) -> Option<&N> {
        self.nodes.get(id.0).map(|n| &n.io)
    }

    /// A node as its own type, to drive it directly.
    pub fn io_mut(&mut self, id: NodeId) -> Option<&mut N> {
        self.nodes.get_mut(id.0).map(|n| &mut n.io)
    }

    /// Set the link properties used where no per-link ones are set.
    pub fn set_default_link(&mut self, cfg: LinkConfig) {
        self.default_link = cfg;
    }

    /// Set the properties of the directed link `from → to`.
    pub fn set_link(&mut self, from: NodeId, to: NodeId, cfg: LinkConfig) {
        self.links.entry((from, to)).or_default().config = Some(cfg);
    }

    /// Set the properties of both directions between `a` and `b`.
    pub fn set_link_both(&mut self, a: NodeId, b: NodeId, cfg: LinkConfig) {
        self.set_link(a, b, cfg);
        self.set_link(b, a, cfg);
    }

    /// The properties of the directed link `from → to`.
    pub fn link(&self, from: NodeId, to: NodeId) -> LinkConfig {
        self.links.get(&(from, to)).and_then(|l| l.config).unwrap_or(self.default_link)
    }

    /// Set the random faults used on links without their own.
    pub fn set_faults(&mut self, cfg: FaultConfig) {
        self.default_faults = cfg;
    }

    /// Set the random faults of the directed link `from → to`.
    pub fn set_link_faults(&mut self, from: NodeId, to: NodeId, cfg: FaultConfig) {
        self.links.entry((from, to)).or_default().faults = Some(cfg);
    }

    /// Add a targeted fault; filters are consulted in the order added.
    pub fn add_filter(&mut self, f: Filter) -> FilterId {
        self.filters.push(f);
        FilterId(self.filters.len() - 1)
    }

    /// A filter, to read its counters.
    pub fn filter(&self, id: FilterId) -> Option<&Filter> {
        self.filters.get(id.0)
    }

    /// Remove every filter (their ids become invalid).
    pub fn clear_filters(&mut self) {
        self.filters.clear();
    }

    /// Most datagrams taken from one node in one poll round (default
    /// 65536); the rest are taken in the next round. Guards against a node
    /// that never stops transmitting.
    pub fn set_max_transmits_per_poll(&mut self, n: usize) {
        self.max_transmits_per_poll = n.max(1);
    }

    /// Event bound of [`Fabric::run_for`] and [`Fabric::run_until_time`]
    /// (default 1,000,000).
    pub fn set_max_events_per_run(&mut self, n: usize) {
        self.max_events_per_run = n;
    }

    /// Datagrams in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// Put a datagram on the wire as if `from` had transmitted it now.
    pub fn inject(&mut self, from: NodeId, dgram: Datagram) {
        self.transmit(from, dgram);
    }

    /// Take every pending transmit from every node (in node order).
    pub fn poll_transmits(&mut self) {
        for i in 0..self.nodes.len() {
            self.poll_node(NodeId(i));
        }
    }

    fn poll_node(&mut self, id: NodeId) {
        for _ in 0..self.max_transmits_per_poll {
            let now = self.now;
            let Some(d) = self.nodes[id.0].io.poll_transmit(now) else { break };
            self.transmit(id, d);
        }
    }

    /// The next event, without doing it. Call [`Fabric::poll_transmits`]
    /// first to include transmits the nodes have not handed over yet.
    pub fn next_event(&self) -> Option<NextEvent> {
        let deliver = self.queue.peek().map(|e| e.at);
        let mut timer: Option<(NodeId, Instant)> = None;
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(t) = n.io.poll_timeout() {
                let t = t.max(self.now);
                if timer.is_none_or(|(_, best)| t < best) {
                    timer = Some((NodeId(i), t));
                }
            }
        }
        match (deliver, timer) {
            (Some(d), Some((id, t))) if t < d => Some(NextEvent::Timer(id, t)),
            (Some(d), _) => Some(NextEvent::Deliver(d)),
            (None, Some((id, t))) => Some(NextEvent::Timer(id, t)),
            (None, None) => None,
        }
    }

    /// Process the next event (one delivery or one node's timers),
    /// advancing the clock to it. Returns false if there was none: no
    /// datagram in flight, nothing to transmit and no timer armed.
    pub fn step(&mut self) -> bool {
        self.poll_transmits();
        let Some(ev) = self.next_event() else { return false };
        match ev {
            NextEvent::Deliver(_) => {
                let Some(f) = self.queue.pop() else { return false };
                self.deliver(f);
            }
            NextEvent::Timer(id, at) => {
                self.now = self.now.max(at);
                self.stats.timers_fired += 1;
                let n = &mut self.nodes[id.0];
                n.stats.timers_fired += 1;
                trace!(node = id.0, now_ns = self.now.as_nanos(), "sim timer");
                n.io.handle_timeout(self.now);
            }
        }
        self.poll_transmits();
        true
    }

    /// Step until nothing is left to do, at most `max_events` steps.
    /// Returns true if the fabric went idle, false if the bound was hit.
    pub fn run_until_idle(&mut self, max_events: usize) -> bool {
        for _ in 0..max_events {
            if !self.step() {
                return true;
            }
        }
        self.poll_transmits();
        self.next_event().is_none()
    }

    /// Step until `cond` holds (checked before the first step and after
    /// each), at most `max_events` steps. Returns whether `cond` held.
    pub fn run_until(
        &mut self,
        mut cond: impl FnMut(&mut Fabric<N>) -> bool,
        max_events: usize,
    ) -> bool {
        if cond(self) {
            return true;
        }
        for _ in 0..max_events {
            if !self.step() {
                return cond(self);
            }
            if cond(self) {
                return true;
            }
        }
        false
    }

    /// Process every event up to `now + d`, then set the clock to exactly
    /// `now + d`. Returns false (clock left at the last event) if the event
    /// bound ([`Fabric::set_max_events_per_run`]) was hit first.
    pub fn run_for(&mut self, d: Duration) -> bool {
        let end = self.now + d;
        self.run_until_time(end)
    }

    /// Process every event at or before `end`, then set the clock to `end`
    /// (if it is later). Returns false if the event bound was hit first.
    pub fn run_until_time(&mut self, end: Instant) -> bool {
        for _ in 0..self.max_events_per_run {
            self.poll_transmits();
            match self.next_event() {
                Some(ev) if ev.at() <= end => {
                    self.step();
                }
                _ => {
                    self.now = self.now.max(end);
                    return true;
                }
            }
        }
        false
    }

    fn schedule(&mut self, at: Instant, from: NodeId, to: NodeId, link_seq: u64, dgram: Datagram) {
        let seq = self.next_event_seq;
        self.next_event_seq += 1;
        self.queue.push(InFlight { at, seq, from, to, link_seq, dgram });
    }

    fn deliver(&mut self, f: InFlight) {
        self.now = self.now.max(f.at);
        let now = self.now;
        if let Some(l) = self.links.get_mut(&(f.from, f.to)) {
            match l.max_delivered {
                Some(m) if f.link_seq < m => {
                    self.stats.reordered += 1;
                    trace!(from = f.from.0, to = f.to.0, link_seq = f.link_seq, "sim reordered");
                }
                _ => l.max_delivered = Some(f.link_seq),
            }
        }
        self.tap(TapPoint::Ingress, &f.dgram);
        self.stats.delivered += 1;
        let n = &mut self.nodes[f.to.0];
        n.stats.delivered += 1;
        n.io.handle_datagram(now, f.dgram);
    }

    /// A datagram `from` hands to the wire, through the stages of the
    /// model in their fixed order: routing and the MTU ([`Fabric::admit`]),
    /// the link's serialization ([`Fabric::occupy_link`]), the targeted
    /// filters ([`Fabric::run_filters`]), the random faults
    /// ([`Fabric::roll_faults`]), then the arrival times
    /// ([`Fabric::schedule_arrivals`]). The seeded draws happen in that order.
    ///
    /// A datagram to a multicast group is counted and tapped at `Egress`
    /// once, then goes through the later stages once per member of the
    /// group (in node order), each copy on its own link.
    fn transmit(&mut self, from: NodeId, dgram: Datagram) {
        // a payload in region memory goes on the simulated wire whole (a
        // region deregistered since: the datagram is lost)
        let Some(dgram) = dgram.flatten() else { return };
        let seq = self.next_tx;
        self.next_tx += 1;
        self.stats.transmitted += 1;
        if let Some(n) = self.nodes.get_mut(from.0) {
            n.stats.transmitted += 1;
        }
        self.tap(TapPoint::Egress, &dgram);
        let dst = roce_emulator::mcast::canonical_gid(dgram.endpoints.dst);
        if !dst.is_multicast() {
            let Some(to) = self.route(dgram.endpoints.dst) else {
                self.stats.dropped_unroutable += 1;
                debug!(seq, dst = %dgram.endpoints.dst, "sim drop: unroutable");
                return;
            };
            self.send_copy(seq, from, to, dgram);
            return;
        }
        let members = self.group_members(dst);
        if members.is_empty() {
            self.stats.dropped_unroutable += 1;
            debug!(seq, group = %dst, "sim drop: multicast group without members");
            return;
        }
        for to in members {
            self.stats.mcast_copies += 1;
            trace!(seq, group = %dst, to = to.0, "sim multicast copy");
            self.send_copy(seq, from, to, dgram.clone());
        }
    }

    /// One datagram (or one multicast copy) on the link `from → to`.
    fn send_copy(&mut self, seq: u64, from: NodeId, to: NodeId, dgram: Datagram) {
        let Some(tx) = self.admit(seq, from, to, &dgram) else { return };
        let slot = self.occupy_link(&tx, &dgram);
        let filtered = self.run_filters(&tx, &dgram);
        if filtered.drop {
            self.mark(tx.traced, Verdict::Drop);
            self.stats.dropped_filter += 1;
            debug!(seq = tx.seq, opcode = %tx.opcode, psn = %tx.psn, "sim drop: filter");
            return;
        }
        let Some((dgram, fate)) = self.roll_faults(&tx, &slot.faults, &filtered, dgram) else {
            return;
        };
        self.schedule_arrivals(&tx, &slot, &filtered, fate, dgram);
    }

    /// Check a datagram routed `from → to` (counted and tapped by
    /// [`Fabric::transmit`]) against the link's MTU and trace it: what the
    /// later stages need to know of it, or `None` if it is too large.
    fn admit(&mut self, seq: u64, from: NodeId, to: NodeId, dgram: &Datagram) -> Option<Outgoing> {
        let now = self.now;
        let cfg = self.link(from, to);
        let len = ip_len(dgram);
        let roce = RocePacket::new_checked(&dgram.payload[..]).ok().map(|p| RoceRepr::parse(&p));
        let info = PacketInfo { seq, now, from, to, endpoints: dgram.endpoints, ip_len: len, roce };
        let opcode = Shown(info.opcode());
        let psn = Shown(info.psn());
        let traced = self.trace_transmit(&info);
        if len > cfg.mtu {
            self.mark(traced, Verdict::Drop);
            self.stats.dropped_mtu += 1;
            debug!(seq, %opcode, %psn, len, mtu = cfg.mtu, "sim drop: larger than link MTU");
            return None;
        }
        Some(Outgoing { seq, from, to, cfg, info, opcode, psn, traced })
    }

    /// The link: serialization (the frame occupies it even if it is lost
    /// in flight), then propagation is added by the caller.
    fn occupy_link(&mut self, tx: &Outgoing, dgram: &Datagram) -> LinkSlot {
        let link = self.links.entry((tx.from, tx.to)).or_default();
        let link_seq = link.sent;
        link.sent += 1;
        let start = self.now.max(link.busy_until);
        let done = match tx.cfg.rate {
            Some(rate) if rate > 0 => {
                let ns = (wire_len(dgram) as u128 * 1_000_000_000).div_ceil(rate as u128);
                start + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
            }
            _ => start,
        };
        link.busy_until = done;
        let faults = link.faults.clone().unwrap_or_else(|| self.default_faults.clone());
        LinkSlot { link_seq, done, faults }
    }

    /// Targeted filters: every filter sees every datagram, and their
    /// actions add up.
    fn run_filters(&mut self, tx: &Outgoing, dgram: &Datagram) -> FilterActions {
        let mut acts = FilterActions::default();
        for (i, f) in self.filters.iter_mut().enumerate() {
            let a = f.decide(dgram, &tx.info, self.dice.rng());
            if a != Action::Pass {
                debug!(seq = tx.seq, filter = i, action = ?a, opcode = %tx.opcode, psn = %tx.psn, "sim filter fired");
            }
            match a {
                Action::Pass => {}
                Action::Drop => acts.drop = true,
                Action::Duplicate => acts.duplicate = true,
                Action::Corrupt => acts.corrupt = true,
                Action::FlipBit(b) => acts.flips.push(b),
                Action::Delay(d) => acts.delay += d,
                Action::MarkCe => acts.mark_ce = true,
            }
        }
        acts
    }

    /// Random faults: the one decision function, in its fixed order; then
    /// the bit flips (the filters' and the dice's) and the CE mark (the
    /// filters' or the dice's, ECN-capable datagrams only). `None` if the
    /// datagram is lost.
    fn roll_faults(
        &mut self,
        tx: &Outgoing,
        faults: &FaultConfig,
        filtered: &FilterActions,
        mut dgram: Datagram,
    ) -> Option<(Datagram, Fate)> {
        let (seq, opcode, psn) = (tx.seq, &tx.opcode, &tx.psn);
        let fate = self.dice.decide(&faults.rates(), dgram.payload.len(), filtered.corrupt);
        if fate.drop {
            self.mark(tx.traced, Verdict::Drop);
            self.stats.dropped_loss += 1;
            debug!(seq, %opcode, %psn, p = faults.drop, "sim drop: random loss");
            return None;
        }
        if fate.corrupt_bit.is_some() || !filtered.flips.is_empty() {
            let mut p = dgram.payload.to_vec();
            let mut changed = false;
            for &b in &filtered.flips {
                changed |= roce_faults::flip_bit(&mut p, b);
            }
            if fate.corrupt(&mut p) {
                debug!(seq, %opcode, %psn, bit = fate.corrupt_bit, "sim corrupt: flipped bit");
                changed = true;
            }
            if changed {
                self.stats.corrupted += 1;
                dgram.payload = Bytes::from(p);
            }
        }
        if (filtered.mark_ce || fate.ce_mark) && mark_ce(&mut dgram.meta.tos) {
            self.stats.ce_marked += 1;
            debug!(seq, %opcode, %psn, tos = dgram.meta.tos, "sim ECN: marked CE");
        }
        Some((dgram, fate))
    }

    /// When the datagram (and its copy, if duplicated) arrives: the end of
    /// its serialization, the link latency, jitter and any hold.
    fn schedule_arrivals(
        &mut self,
        tx: &Outgoing,
        slot: &LinkSlot,
        filtered: &FilterActions,
        fate: Fate,
        dgram: Datagram,
    ) {
        let (seq, opcode, psn) = (tx.seq, &tx.opcode, &tx.psn);
        let (from, to, faults) = (tx.from, tx.to, &slot.faults);
        let duplicate = filtered.duplicate || fate.duplicate;
        // Explicit holds (filter delay, reorder fault) let later datagrams
        // overtake; jitter alone keeps the link's FIFO order.
        let mut hold = Duration::ZERO;
        if !filtered.delay.is_zero() {
            self.stats.delayed += 1;
            hold += filtered.delay;
        }
        if fate.reorder {
            self.stats.reorder_held += 1;
            hold += faults.reorder_delay;
            debug!(
                seq,
                %opcode,
                %psn,
                hold_ns = faults.reorder_delay.as_nanos() as u64,
                "sim reorder: held"
            );
        }
        let base = slot.done + tx.cfg.latency;
        let j = jitter(self.dice.rng(), faults.jitter);
        let arrival = self.arrival(from, to, base + j, hold);
        if duplicate {
            self.mark(tx.traced, Verdict::Duplicate);
            self.stats.duplicated += 1;
            // The copy gets its own jitter and a filter's delay, not the
            // reorder hold.
            let j = jitter(self.dice.rng(), faults.jitter);
            let copy_at = self.arrival(from, to, base + j, filtered.delay);
            debug!(seq, %opcode, %psn, copy_at_ns = copy_at.as_nanos(), "sim duplicate");
            let copy = dgram.clone();
            self.schedule(arrival, from, to, slot.link_seq, dgram);
            self.schedule(copy_at, from, to, slot.link_seq, copy);
        } else {
            self.schedule(arrival, from, to, slot.link_seq, dgram);
        }
    }

    /// Arrival time on link `from → to` of a datagram that would arrive at
    /// `t` plus an explicit `hold`. Without a hold it arrives no earlier
    /// than the previous such datagram (links are FIFO; jitter delays but
    /// does not reorder) and becomes the new FIFO mark; a held datagram
    /// arrives at `t + hold` and leaves the mark alone.
    fn arrival(&mut self, from: NodeId, to: NodeId, t: Instant, hold: Duration) -> Instant {
        if !hold.is_zero() {
            return t + hold;
        }
        match self.links.get_mut(&(from, to)) {
            Some(l) => {
                let t = t.max(l.fifo_mark);
                l.fifo_mark = t;
                t
            }
            None => t,
        }
    }
}

fn jitter(rng: &mut SmallRng, max: Duration) -> Duration {
    let ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    if ns == 0 {
        Duration::ZERO
    } else {
        Duration::from_nanos(rng.gen_range(0..=ns))
    }
}

/// An optional packet field in trace events: its `Display` form, or `-`.
struct Shown<T>(Option<T>);

impl<T: core::fmt::Display> core::fmt::Display for Shown<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// A datagram admitted to a link, as the later stages of
/// [`Fabric::transmit`] see it.
struct Outgoing {
    seq: u64,
    from: NodeId,
    to: NodeId,
    cfg: LinkConfig,
    info: PacketInfo,
    opcode: Shown<roce_packet::Opcode>,
    psn: Shown<roce_packet::Psn>,
    /// Its entry in the wire trace, if recorded.
    traced: Option<usize>,
}

/// A datagram's place on its link.
struct LinkSlot {
    /// Its transmission number on the link (for reorder counting).
    link_seq: u64,
    /// When the link has finished serializing it.
    done: Instant,
    /// The faults of the link (or the fabric's default).
    faults: FaultConfig,
}

/// What the targeted filters decided for one datagram, all of them
/// together.
#[derive(Default)]
struct FilterActions {
    drop: bool,
    duplicate: bool,
    corrupt: bool,
    flips: Vec<usize>,
    delay: Duration,
    mark_ce: bool,
}
