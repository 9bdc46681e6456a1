//! A switched fabric: hosts (any [`SansIo`] node, an `Hca` in practice)
//! wired to switches by links with a rate and a delay, switches that
//! queue each packet at its egress port, mark it ECN CE with a RED
//! profile, drop it when the queue is full (tail drop) or pause the
//! sender upstream with PFC, in virtual time.
//!
//! What RoCEv2 fabrics run on, and what [`crate::Fabric`]'s point-to-point
//! links leave out: several senders converging on one port (incast), a
//! queue that builds, a mark instead of a loss, a PAUSE that stops a
//! whole link (and every flow on it: head-of-line blocking), a receiver
//! that stops draining and pauses the fabric behind it (a pause storm).
//!
//! # Model
//!
//! * A host's NIC sends one frame at a time at its link's rate: it pulls
//!   the next datagram from its node (`poll_transmit`) when the link is
//!   free and not paused, so a paused or slow link holds the device's
//!   packets in the device (where DCQCN's pacer and the send queue are).
//! * A frame takes `frame bytes * 8 / rate` to serialize and the link's
//!   delay to propagate; frames are Ethernet (14 + IP + UDP + payload + 4
//!   FCS), preamble and gap not counted.
//! * A switch routes by destination address over the shortest paths
//!   (ECMP: several equal next hops are chosen by a hash of source,
//!   destination and UDP source port, so a flow keeps its path), and
//!   queues the frame at the egress port. Without PFC each egress port
//!   holds `buffer` bytes and drops beyond (tail drop); with PFC the
//!   buffer is shared and each ingress port may hold `xoff + headroom`.
//! * RED/ECN ([`Red`]), at enqueue, ECN-capable frames only: below `kmin`
//!   bytes queued no mark, above `kmax` always, in between with a
//!   probability rising linearly to `pmax` (DCQCN's switch profile).
//!   Frames that are not ECN-capable are never marked.
//! * PFC ([`Pfc`], one priority: the RoCE traffic): a switch counts the
//!   bytes each ingress port has queued; above `xoff` it sends a PAUSE
//!   with `quanta` (512 bit times each) to the transmitter on that link,
//!   again before it expires while still above `xon`, and a PAUSE of 0
//!   (resume) once at or below `xon`. A paused transmitter finishes the
//!   frame on the wire and starts no other. Without PFC a full queue
//!   drops (tail drop). A host may be told to stop draining
//!   ([`SwitchedNet::stall_host`]): it then buffers what arrives and
//!   pauses its switch port by the same rule (a pause storm's origin).
//! * Everything is deterministic: RED's draws come from one seeded
//!   generator, events are ordered by (time, sequence).
//!
//! The run records, every `sample_every`, each flow's delivered rate
//! (flow: source, destination, destination QP) and each switch port's
//! queue depth ([`Sample`]), and optionally a pcap of what the hosts
//! received, PAUSE frames included (MAC control, ethertype 0x8808, PFC
//! opcode 0x0101).

use crate::tap::mac_for;
use core::cmp::Ordering;
use core::net::IpAddr;
use core::time::Duration;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roce_emulator::io::{Datagram, SansIo};
use roce_emulator::time::Instant;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};

/// A link: its rate and its one-way delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Bits per second.
    pub rate_bps: u64,
    /// Propagation delay.
    pub delay: Duration,
}

impl LinkSpec {
    /// `gbps` Gb/s with `delay`.
    pub fn gbps(gbps: u64, delay: Duration) -> LinkSpec {
        LinkSpec { rate_bps: gbps.saturating_mul(1_000_000_000), delay }
    }

    /// The time `bytes` take to serialize.
    fn serialize(&self, bytes: usize) -> Duration {
        let ns = (bytes as u128 * 8 * 1_000_000_000).div_ceil(u128::from(self.rate_bps.max(1)));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// A switch's RED/ECN profile (bytes of the egress queue).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Red {
    pub kmin: usize,
    pub kmax: usize,
    /// Marking probability at `kmax` (0..=1).
    pub pmax: f64,
}

/// Priority flow control, one priority (bytes queued per ingress port;
/// see [`SwitchConfig::buffer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pfc {
    /// Above this, PAUSE the upstream transmitter.
    pub xoff: usize,
    /// At or below this, resume it.
    pub xon: usize,
    /// Bytes a port may hold beyond its buffer while the PAUSE takes
    /// effect (what is in flight on the link).
    pub headroom: usize,
    /// A PAUSE's time, in quanta of 512 bit times at the link's rate
    /// (65535 at most, as on the wire).
    pub quanta: u16,
}

/// A switch's queues and what it does when they fill.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SwitchConfig {
    /// Bytes each egress port holds without PFC (tail drop beyond). With
    /// PFC the buffer is shared: each ingress may hold `xoff + headroom`
    /// bytes, wherever they are queued, and nothing is dropped while the
    /// headroom covers what is on the wire when the PAUSE leaves.
    pub buffer: usize,
    /// ECN marking (`None`: never marks).
    pub red: Option<Red>,
    /// Priority flow control (`None`: tail drop).
    pub pfc: Option<Pfc>,
}

/// What one switch port (or a host's NIC) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames and bytes transmitted.
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Deepest queue seen, bytes.
    pub max_queue: usize,
    /// Frames marked CE at this egress.
    pub marked: u64,
    /// Frames dropped at this egress (queue full).
    pub dropped: u64,
    /// PAUSE frames sent upstream for this ingress (resumes included).
    pub pauses_sent: u64,
    /// PAUSE frames this transmitter received (resumes included).
    pub pauses_received: u64,
    /// Time this transmitter spent paused.
    pub paused: Duration,
}

/// A flow: source and destination address and destination QP.
pub type FlowKey = (IpAddr, IpAddr, u32);

/// One sample of the run: each flow's rate over the last interval and
/// each switch port's queue.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub at: Instant,
    /// Delivered frame bits per second of each flow that delivered any.
    pub flows: Vec<(FlowKey, f64)>,
    /// Bytes queued at each switch port: `((switch, port), bytes)`.
    pub queues: Vec<((usize, usize), usize)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Host(usize),
    Switch(usize, usize),
}

/// A transmitter: a host's NIC or a switch's egress port.
#[derive(Clone, Copy, Debug)]
struct Tx {
    link: LinkSpec,
    peer: Peer,
    busy_until: Instant,
    paused_until: Instant,
    /// The wake-up scheduled (events at other times are stale).
    armed: Option<Instant>,
    stats: PortStats,
}

impl Tx {
    fn new(link: LinkSpec, peer: Peer) -> Tx {
        Tx {
            link,
            peer,
            busy_until: Instant::ZERO,
            paused_until: Instant::ZERO,
            armed: None,
            stats: PortStats::default(),
        }
    }

    /// When it may start a frame.
    fn free_at(&self) -> Instant {
        self.busy_until.max(self.paused_until)
    }

    /// Schedule a wake-up at `at` unless one is due by then: the time to
    /// push an event for, if any.
    fn arm(&mut self, at: Instant) -> Option<Instant> {
        match self.armed {
            Some(t) if t <= at => None,
            _ => {
                self.armed = Some(at);
                Some(at)
            }
        }
    }

    /// An event for `now` fired: whether it is the one scheduled (a
    /// rescheduled wake-up leaves stale ones behind).
    fn fire(&mut self, now: Instant) -> bool {
        match self.armed {
            Some(t) if t == now => {
                self.armed = None;
                true
            }
            _ => false,
        }
    }
}

struct Frame {
    d: Datagram,
    len: usize,
    /// The switch port it came in on (PFC's ingress accounting).
    ingress: usize,
}

struct Port {
    tx: Tx,
    queue: VecDeque<Frame>,
    queued: usize,
    /// Bytes queued anywhere in the switch that came in on this port.
    ingress_bytes: usize,
    /// This ingress paused its upstream (until it resumes it).
    xoff: bool,
}

struct Switch {
    cfg: SwitchConfig,
    ports: Vec<Port>,
    /// Destination address → the egress ports on a shortest path.
    routes: HashMap<IpAddr, Vec<usize>>,
}

struct Host<N> {
    node: N,
    addr: IpAddr,
    nic: Option<Tx>,
    /// (switch, port) the NIC is wired to.
    at: Option<(usize, usize)>,
    timer: Option<Instant>,
    /// Not draining until then: arrivals wait in `rx`.
    stall_until: Option<Instant>,
    rx: VecDeque<Datagram>,
    rx_bytes: usize,
    xoff: bool,
    /// PFC of a stalled host (its switch's).
    pfc: Option<Pfc>,
}

enum Ev {
    /// A host's NIC may send.
    HostTx(usize),
    /// A switch port may send.
    PortTx(usize, usize),
    /// A frame reaches a switch port.
    Arrive(usize, usize, Datagram),
    /// A frame reaches a host.
    Deliver(usize, Datagram),
    /// A PAUSE (quanta; 0 resumes) reaches a transmitter.
    Pause(Peer, u16),
    /// A host's timer.
    Timer(usize, Instant),
    /// A host stops draining until then.
    Stall(usize, Instant),
    /// A stalled host drains again.
    Unstall(usize),
    /// Refresh the PAUSE of a congested ingress (switch, port) or host.
    Refresh(Peer),
}

struct Event {
    at: Instant,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Event {
    fn eq(&self, o: &Event) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Event) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    fn cmp(&self, o: &Event) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq)) // earliest first
    }
}

/// The switched fabric. See the [module documentation](self).
pub struct SwitchedNet<N> {
    now: Instant,
    seq: u64,
    events: BinaryHeap<Event>,
    hosts: Vec<Host<N>>,
    switches: Vec<Switch>,
    by_addr: HashMap<IpAddr, usize>,
    rng: SmallRng,
    sample_every: Option<Duration>,
    next_sample: Instant,
    window: BTreeMap<FlowKey, u64>,
    samples: Vec<Sample>,
    pcap: Option<roce_pcap::PcapWriter<Vec<u8>>>,
    /// Frames to no host (unknown destination), dropped.
    pub unroutable: u64,
}

impl<N: SansIo> SwitchedNet<N> {
    /// An empty fabric whose RED draws come from `seed`.
    pub fn new(seed: u64) -> SwitchedNet<N> {
        SwitchedNet {
            now: Instant::ZERO,
            seq: 0,
            events: BinaryHeap::new(),
            hosts: Vec::new(),
            switches: Vec::new(),
            by_addr: HashMap::new(),
            rng: SmallRng::seed_from_u64(seed),
            sample_every: None,
            next_sample: Instant::ZERO,
            window: BTreeMap::new(),
            samples: Vec::new(),
            pcap: None,
            unroutable: 0,
        }
    }

    /// A switch; returns its number.
    pub fn add_switch(&mut self, cfg: SwitchConfig) -> usize {
        self.switches.push(Switch { cfg, ports: Vec::new(), routes: HashMap::new() });
        self.switches.len() - 1
    }

    /// A host at `addr`; returns its number. Wire it with
    /// [`SwitchedNet::connect_host`].
    pub fn add_host(&mut self, addr: IpAddr, node: N) -> usize {
        self.hosts.push(Host {
            node,
            addr,
            nic: None,
            at: None,
            timer: None,
            stall_until: None,
            rx: VecDeque::new(),
            rx_bytes: 0,
            xoff: false,
            pfc: None,
        });
        self.by_addr.insert(addr, self.hosts.len() - 1);
        self.hosts.len() - 1
    }

    fn add_port(&mut self, sw: usize, link: LinkSpec, peer: Peer) -> usize {
        let s = &mut self.switches[sw];
        s.ports.push(Port {
            tx: Tx::new(link, peer),
            queue: VecDeque::new(),
            queued: 0,
            ingress_bytes: 0,
            xoff: false,
        });
        s.ports.len() - 1
    }

    /// Wire host `h` to a new port of switch `sw` with `link` (both ways).
    pub fn connect_host(&mut self, h: usize, sw: usize, link: LinkSpec) {
        let port = self.add_port(sw, link, Peer::Host(h));
        let host = &mut self.hosts[h];
        host.nic = Some(Tx::new(link, Peer::Switch(sw, port)));
        host.at = Some((sw, port));
        host.pfc = self.switches[sw].cfg.pfc;
        self.route_all();
    }

    /// Wire switches `a` and `b` with `link` (a port on each).
    pub fn connect_switches(&mut self, a: usize, b: usize, link: LinkSpec) {
        let pa = self.switches[a].ports.len();
        let pb = self.switches[b].ports.len();
        self.add_port(a, link, Peer::Switch(b, pb));
        self.add_port(b, link, Peer::Switch(a, pa));
        self.route_all();
    }

    /// Shortest-path routes of every switch to every host (ECMP sets).
    fn route_all(&mut self) {
        let n = self.switches.len();
        for (h, host) in self.hosts.iter().enumerate() {
            let Some((home, _)) = host.at else { continue };
            // hops from each switch to the host's switch (BFS)
            let mut dist = vec![usize::MAX; n];
            dist[home] = 0;
            let mut q = VecDeque::from([home]);
            while let Some(s) = q.pop_front() {
                for p in &self.switches[s].ports {
                    if let Peer::Switch(t, _) = p.tx.peer {
                        if dist[t] == usize::MAX {
                            dist[t] = dist[s] + 1;
                            q.push_back(t);
                        }
                    }
                }
            }
            for s in 0..n {
                let ports: Vec<usize> = match s == home {
                    true => (self.switches[s].ports.iter().enumerate())
                        .filter(|(_, p)| p.tx.peer == Peer::Host(h))
                        .map(|(i, _)| i)
                        .collect(),
                    false => (self.switches[s].ports.iter().enumerate())
                        .filter(|(_, p)| {
                            matches!(p.tx.peer, Peer::Switch(t, _)
                                if dist[t] != usize::MAX && dist[t] + 1 == dist[s])
                        })
                        .map(|(i, _)| i)
                        .collect(),
                };
                self.switches[s].routes.insert(host.addr, ports);
            }
        }
    }

    /// Record what the hosts receive (PAUSE frames included) as a pcap.
    pub fn record_pcap(&mut self) {
        self.pcap = roce_pcap::PcapWriter::new(Vec::new(), roce_pcap::LinkType::Ethernet).ok();
    }

    /// The recorded pcap file's bytes (empty without [`Self::record_pcap`]).
    pub fn pcap_bytes(&mut self) -> Vec<u8> {
        self.pcap.take().and_then(|w| w.into_inner().ok()).unwrap_or_default()
    }

    /// Sample flow rates and queue depths every `every`.
    pub fn sample_every(&mut self, every: Duration) {
        self.sample_every = Some(every).filter(|d| !d.is_zero());
        self.next_sample = self.now + every;
    }

    /// The samples so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Host `h`'s node (to post work, poll completions).
    pub fn host_mut(&mut self, h: usize) -> &mut N {
        &mut self.hosts[h].node
    }

    /// Host `h`'s node.
    pub fn host(&self, h: usize) -> &N {
        &self.hosts[h].node
    }

    /// Host `h`'s NIC (as a transmitter).
    pub fn nic_stats(&self, h: usize) -> PortStats {
        self.hosts[h].nic.map(|t| t.stats).unwrap_or_default()
    }

    /// A switch port's statistics.
    pub fn port_stats(&self, sw: usize, port: usize) -> PortStats {
        self.switches[sw].ports[port].tx.stats
    }

    /// The port of switch `sw` that leads to host `h` (its own port, if
    /// `h` is wired to `sw`).
    pub fn port_to_host(&self, sw: usize, h: usize) -> Option<usize> {
        self.switches[sw].routes.get(&self.hosts[h].addr)?.first().copied()
    }

    /// Bytes queued now at a switch port.
    pub fn queued(&self, sw: usize, port: usize) -> usize {
        self.switches[sw].ports[port].queued
    }

    /// Host `h` stops draining what arrives from now until `until` (its
    /// receive side buffers, then pauses its switch port if PFC is on).
    pub fn stall_host(&mut self, h: usize, until: Instant) {
        self.hosts[h].stall_until = Some(until);
        self.push(until, Ev::Unstall(h));
    }

    /// Host `h` stops draining from `from` until `until`.
    pub fn stall_host_between(&mut self, h: usize, from: Instant, until: Instant) {
        self.push(from, Ev::Stall(h, until));
    }

    /// Every switch port's statistics: `((switch, port), stats)`.
    pub fn all_port_stats(&self) -> Vec<((usize, usize), PortStats)> {
        (self.switches.iter().enumerate())
            .flat_map(|(s, sw)| sw.ports.iter().enumerate().map(move |(p, x)| ((s, p), x.tx.stats)))
            .collect()
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        self.seq += 1;
        self.events.push(Event { at: at.max(self.now), seq: self.seq, ev });
    }

    /// Let host `h`'s NIC look for work now (after posting to its node).
    pub fn kick(&mut self, h: usize) {
        let now = self.now;
        let Some(nic) = &mut self.hosts[h].nic else { return };
        if let Some(at) = nic.arm(nic.free_at().max(now)) {
            self.push(at, Ev::HostTx(h));
        }
    }

    /// Re-arm host `h`'s timer from its node's `poll_timeout`.
    fn rearm(&mut self, h: usize) {
        let t = self.hosts[h].node.poll_timeout();
        if t != self.hosts[h].timer {
            self.hosts[h].timer = t;
            if let Some(t) = t {
                self.push(t, Ev::Timer(h, t));
            }
        }
    }

    /// Run every event up to `end` (every host kicked first); false if
    /// `max_events` ran out first.
    pub fn run_until(&mut self, end: Instant, max_events: usize) -> bool {
        for h in 0..self.hosts.len() {
            self.kick(h);
            self.rearm(h);
        }
        for _ in 0..max_events {
            let next = self.events.peek().map(|e| e.at);
            let sample = self.sample_every.map(|_| self.next_sample);
            match (next, sample) {
                (_, Some(s)) if s <= end && next.is_none_or(|n| s <= n) => self.take_sample(s),
                (Some(n), _) if n <= end => {
                    let Some(e) = self.events.pop() else { break };
                    self.now = self.now.max(e.at);
                    self.handle(e.ev);
                }
                _ => {
                    self.now = self.now.max(end);
                    return true;
                }
            }
        }
        false
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::HostTx(h) => self.host_tx(h),
            Ev::PortTx(s, p) => self.port_tx(s, p),
            Ev::Arrive(s, p, d) => self.arrive(s, p, d),
            Ev::Deliver(h, d) => self.deliver(h, d),
            Ev::Pause(to, q) => self.paused(to, q),
            Ev::Timer(h, t) => {
                if self.hosts[h].timer == Some(t) {
                    self.hosts[h].timer = None;
                    let now = self.now;
                    self.hosts[h].node.handle_timeout(now);
                    self.rearm(h);
                    self.kick(h);
                }
            }
            Ev::Stall(h, until) => self.stall_host(h, until),
            Ev::Unstall(h) => self.unstall(h),
            Ev::Refresh(at) => self.refresh(at),
        }
    }

    fn host_tx(&mut self, h: usize) {
        let now = self.now;
        let host = &mut self.hosts[h];
        let Some(nic) = &mut host.nic else { return };
        if !nic.fire(now) {
            return;
        }
        if nic.free_at() > now {
            if let Some(at) = nic.arm(nic.free_at()) {
                self.push(at, Ev::HostTx(h));
            }
            return;
        }
        let Some(d) = host.node.poll_transmit(now) else {
            self.rearm(h);
            return;
        };
        let len = d.frame_len();
        let nic = self.hosts[h].nic.as_mut().expect("checked");
        let ser = nic.link.serialize(len);
        nic.busy_until = now + ser;
        nic.stats.tx_frames += 1;
        nic.stats.tx_bytes += len as u64;
        let (peer, delay, free) = (nic.peer, nic.link.delay, nic.busy_until);
        let wake = nic.arm(free);
        if let Peer::Switch(s, p) = peer {
            self.push(free + delay, Ev::Arrive(s, p, d));
        }
        if let Some(at) = wake {
            self.push(at, Ev::HostTx(h));
        }
        self.rearm(h);
    }

    fn arrive(&mut self, s: usize, ingress: usize, d: Datagram) {
        let Some(ports) = self.switches[s].routes.get(&d.endpoints.dst) else {
            self.unroutable += 1;
            return;
        };
        if ports.is_empty() {
            self.unroutable += 1;
            return;
        }
        let e = ports[ecmp(&d) % ports.len()];
        let len = d.frame_len();
        let cfg = self.switches[s].cfg;
        // lossless with PFC: an ingress may queue up to xoff + headroom (a
        // shared buffer); without, an egress queue holds `buffer` (tail drop)
        let full = match cfg.pfc {
            Some(pfc) => {
                self.switches[s].ports[ingress].ingress_bytes + len > pfc.xoff + pfc.headroom
            }
            None => self.switches[s].ports[e].queued + len > cfg.buffer,
        };
        let port = &mut self.switches[s].ports[e];
        if full {
            port.tx.stats.dropped += 1;
            return;
        }
        let mut d = d;
        if let Some(red) = cfg.red {
            let q = port.queued;
            let p = if q >= red.kmax {
                1.0
            } else if q > red.kmin {
                red.pmax * (q - red.kmin) as f64 / (red.kmax - red.kmin).max(1) as f64
            } else {
                0.0
            };
            if p > 0.0
                && (p >= 1.0 || self.rng.gen::<f64>() < p)
                && roce_faults::mark_ce(&mut d.meta.tos)
            {
                port.tx.stats.marked += 1;
            }
        }
        port.queue.push_back(Frame { d, len, ingress });
        port.queued += len;
        port.tx.stats.max_queue = port.tx.stats.max_queue.max(port.queued);
        self.switches[s].ports[ingress].ingress_bytes += len;
        if let Some(pfc) = cfg.pfc {
            let inp = &mut self.switches[s].ports[ingress];
            if !inp.xoff && inp.ingress_bytes > pfc.xoff {
                inp.xoff = true;
                self.send_pause(Peer::Switch(s, ingress), pfc.quanta);
            }
        }
        self.arm_port(s, e);
    }

    fn arm_port(&mut self, s: usize, p: usize) {
        let now = self.now;
        let tx = &mut self.switches[s].ports[p].tx;
        if let Some(at) = tx.arm(tx.free_at().max(now)) {
            self.push(at, Ev::PortTx(s, p));
        }
    }

    fn port_tx(&mut self, s: usize, p: usize) {
        let now = self.now;
        let port = &mut self.switches[s].ports[p];
        if !port.tx.fire(now) || port.queue.is_empty() {
            return;
        }
        if port.tx.free_at() > now {
            if let Some(at) = port.tx.arm(port.tx.free_at()) {
                self.push(at, Ev::PortTx(s, p));
            }
            return;
        }
        let Some(f) = port.queue.pop_front() else { return };
        port.queued -= f.len;
        let ser = port.tx.link.serialize(f.len);
        port.tx.busy_until = now + ser;
        port.tx.stats.tx_frames += 1;
        port.tx.stats.tx_bytes += f.len as u64;
        let (peer, at) = (port.tx.peer, port.tx.busy_until + port.tx.link.delay);
        let free = port.tx.busy_until;
        match peer {
            Peer::Host(h) => self.push(at, Ev::Deliver(h, f.d)),
            Peer::Switch(t, q) => self.push(at, Ev::Arrive(t, q, f.d)),
        }
        // PFC: the ingress this frame came in on has less queued
        let inp = &mut self.switches[s].ports[f.ingress];
        inp.ingress_bytes = inp.ingress_bytes.saturating_sub(f.len);
        if let Some(pfc) = self.switches[s].cfg.pfc {
            let inp = &mut self.switches[s].ports[f.ingress];
            if inp.xoff && inp.ingress_bytes <= pfc.xon {
                inp.xoff = false;
                self.send_pause(Peer::Switch(s, f.ingress), 0);
            }
        }
        if !self.switches[s].ports[p].queue.is_empty() {
            if let Some(at) = self.switches[s].ports[p].tx.arm(free) {
                self.push(at, Ev::PortTx(s, p));
            }
        }
    }

    /// `from` (a switch ingress or a host) sends a PAUSE of `quanta` (0:
    /// resume) to the transmitter at the other end of its link.
    fn send_pause(&mut self, from: Peer, quanta: u16) {
        let (to, link) = match from {
            Peer::Switch(s, p) => {
                let port = &mut self.switches[s].ports[p];
                port.tx.stats.pauses_sent += 1;
                (port.tx.peer, port.tx.link)
            }
            Peer::Host(h) => match &mut self.hosts[h].nic {
                Some(nic) => {
                    nic.stats.pauses_sent += 1;
                    (nic.peer, nic.link)
                }
                None => return,
            },
        };
        self.push(self.now + link.delay, Ev::Pause(to, quanta));
        if quanta > 0 {
            // again at half the pause time, while still congested
            let half = pause_time(quanta, link.rate_bps) / 2;
            self.push(self.now + half.max(Duration::from_nanos(1)), Ev::Refresh(from));
        }
    }

    fn refresh(&mut self, at: Peer) {
        let (still, quanta) = match at {
            Peer::Switch(s, p) => {
                (self.switches[s].ports[p].xoff, self.switches[s].cfg.pfc.map_or(0, |c| c.quanta))
            }
            Peer::Host(h) => (self.hosts[h].xoff, self.hosts[h].pfc.map_or(0, |c| c.quanta)),
        };
        if still && quanta > 0 {
            self.send_pause(at, quanta);
        }
    }

    /// A PAUSE reaches transmitter `to`.
    fn paused(&mut self, to: Peer, quanta: u16) {
        let now = self.now;
        let tx = match to {
            Peer::Host(h) => match &mut self.hosts[h].nic {
                Some(t) => t,
                None => return,
            },
            Peer::Switch(s, p) => &mut self.switches[s].ports[p].tx,
        };
        tx.stats.pauses_received += 1;
        // time paused so far in the current pause
        if tx.paused_until > now {
            tx.stats.paused = tx.stats.paused.saturating_sub(tx.paused_until - now);
        }
        tx.paused_until = now + pause_time(quanta, tx.link.rate_bps);
        tx.stats.paused += tx.paused_until - now;
        let from = tx.peer;
        match to {
            Peer::Host(h) => {
                // (the capture shows what the hosts receive: this PAUSE)
                if let Peer::Switch(s, p) = from {
                    self.record_pause(switch_mac(s, p), quanta);
                }
                self.kick(h)
            }
            Peer::Switch(s, p) => self.arm_port(s, p),
        }
    }

    fn deliver(&mut self, h: usize, d: Datagram) {
        let now = self.now;
        self.count_flow(&d);
        if let Some(w) = &mut self.pcap {
            let src = d.endpoints.src;
            if let Ok(f) = roce_packet::frame::ethernet_frame(
                mac_for(src),
                mac_for(d.endpoints.dst),
                &d.endpoints,
                &d.meta,
                &d.clone().flatten().map(|x| x.payload).unwrap_or_default(),
            ) {
                let _ = w.write_frame(Duration::from_nanos(now.as_nanos()), &f);
            }
        }
        let host = &mut self.hosts[h];
        if host.stall_until.is_some_and(|t| t > now) {
            host.rx_bytes += d.frame_len();
            host.rx.push_back(d);
            if let Some(pfc) = host.pfc {
                if !host.xoff && host.rx_bytes > pfc.xoff {
                    host.xoff = true;
                    self.send_pause(Peer::Host(h), pfc.quanta);
                }
            }
            return;
        }
        host.node.handle_datagram(now, d);
        self.rearm(h);
        self.kick(h);
    }

    fn unstall(&mut self, h: usize) {
        let now = self.now;
        let host = &mut self.hosts[h];
        if host.stall_until.is_some_and(|t| t > now) {
            return; // stalled again, later
        }
        host.stall_until = None;
        while let Some(d) = host.rx.pop_front() {
            host.node.handle_datagram(now, d);
        }
        host.rx_bytes = 0;
        if host.xoff {
            host.xoff = false;
            self.send_pause(Peer::Host(h), 0);
        }
        self.rearm(h);
        self.kick(h);
    }

    fn count_flow(&mut self, d: &Datagram) {
        if self.sample_every.is_none() {
            return;
        }
        let qpn = match d.payload.get(5..8) {
            Some(b) => u32::from_be_bytes([0, b[0], b[1], b[2]]),
            None => 0,
        };
        *self.window.entry((d.endpoints.src, d.endpoints.dst, qpn)).or_default() +=
            d.frame_len() as u64;
    }

    fn take_sample(&mut self, at: Instant) {
        let every = self.sample_every.unwrap_or(Duration::from_micros(10));
        let secs = every.as_secs_f64();
        let flows =
            std::mem::take(&mut self.window).into_iter().map(|(k, b)| (k, b as f64 * 8.0 / secs));
        let queues = (self.switches.iter().enumerate())
            .flat_map(|(s, sw)| sw.ports.iter().enumerate().map(move |(p, x)| ((s, p), x.queued)))
            .collect();
        self.samples.push(Sample { at, flows: flows.collect(), queues });
        self.next_sample = at + every;
        self.now = self.now.max(at);
    }

    fn record_pause(&mut self, src: [u8; 6], quanta: u16) {
        let now = self.now;
        let Some(w) = &mut self.pcap else { return };
        let _ = w.write_frame(Duration::from_nanos(now.as_nanos()), &pfc_frame(src, quanta));
    }
}

/// The MAC address of switch `s`'s port `p` (locally administered:
/// `02:53:57:00:s:p`), the source of its PAUSE frames.
pub fn switch_mac(s: usize, p: usize) -> [u8; 6] {
    [0x02, 0x53, 0x57, 0x00, s as u8, p as u8]
}

/// The priority RoCE traffic runs on (PFC's class-enable bit).
pub const ROCE_PRIORITY: u8 = 3;

/// A PFC PAUSE frame (IEEE 802.1Qbb): to 01:80:C2:00:00:01, MAC control
/// (0x8808), opcode 0x0101, class-enable vector with [`ROCE_PRIORITY`],
/// `quanta` for that priority, padded to 60 bytes.
pub fn pfc_frame(src: [u8; 6], quanta: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(60);
    f.extend_from_slice(&[0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0x08, 0x01, 0x01]);
    f.extend_from_slice(&(1u16 << ROCE_PRIORITY).to_be_bytes());
    for prio in 0..8u8 {
        let q = if prio == ROCE_PRIORITY { quanta } else { 0 };
        f.extend_from_slice(&q.to_be_bytes());
    }
    f.resize(60, 0);
    f
}

/// `quanta` × 512 bit times at `rate_bps`.
fn pause_time(quanta: u16, rate_bps: u64) -> Duration {
    let ns = (u128::from(quanta) * 512 * 1_000_000_000).div_ceil(u128::from(rate_bps.max(1)));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// ECMP's hash of a flow: source, destination, UDP source port.
fn ecmp(d: &Datagram) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: &[u8]| {
        for x in b {
            h ^= u64::from(*x);
            h = h.wrapping_mul(0x100_0000_01b3);
        }
    };
    match d.endpoints.src {
        IpAddr::V4(a) => eat(&a.octets()),
        IpAddr::V6(a) => eat(&a.octets()),
    }
    match d.endpoints.dst {
        IpAddr::V4(a) => eat(&a.octets()),
        IpAddr::V6(a) => eat(&a.octets()),
    }
    eat(&d.endpoints.src_port.to_be_bytes());
    h as usize
}

/// Jain's fairness index of `rates` (1: all equal; 1/n: one has it all).
pub fn jain(rates: &[f64]) -> f64 {
    let s: f64 = rates.iter().sum();
    let q: f64 = rates.iter().map(|r| r * r).sum();
    match q > 0.0 {
        true => s * s / (rates.len() as f64 * q),
        false => 1.0,
    }
}
