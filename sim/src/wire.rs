//! The wire trace and the lockstep runs.
//!
//! * The trace: every RoCE datagram that enters a link, with its headers,
//!   the nodes it went between and what happened to it ([`Traced`]). A
//!   lockstep run always records it; the event-driven runs do after
//!   [`Fabric::record_trace`]. [`Fabric::count`] counts an opcode in one
//!   direction, [`Fabric::dump`] prints the trace for failure messages.
//! * Lockstep runs ([`Fabric::run_lockstep`]): no latency and no event
//!   queue; the nodes take turns handing over what they transmit, every
//!   RoCE datagram passes a hook that observes it and returns a
//!   [`Verdict`] (deliver, drop, duplicate, replace its bytes, hold it
//!   behind the next one), and when nothing moves the clock jumps to the
//!   earliest timer. The two-node test harness (`testkit`) is this mode
//!   of the fabric. Random faults and [`Filter`](crate::Filter)s do not
//!   apply here: the hook decides.

use crate::TapPoint;
use crate::{Fabric, NodeId, PacketInfo};
use core::fmt;
use roce_emulator::io::{Datagram, SansIo};
use roce_emulator::time::Instant;
use roce_packet::{Opcode, Psn, RoceRepr};
use std::collections::{BTreeMap, VecDeque};

/// What happens to a datagram on the wire: a lockstep hook's answer, and
/// what the trace says happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it.
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
    /// Deliver these bytes instead.
    Replace(Vec<u8>),
    /// Deliver it after the next datagram its sender transmits (reorder).
    Hold,
}

/// One RoCE datagram on the wire.
#[derive(Clone, Debug)]
pub struct Traced {
    /// Its position in the fabric's trace.
    pub index: usize,
    /// When it entered the link.
    pub at: Instant,
    /// The node that sent it.
    pub from: NodeId,
    /// The node it was routed to.
    pub to: NodeId,
    /// BTH opcode.
    pub opcode: Opcode,
    /// BTH PSN.
    pub psn: Psn,
    /// BTH AckReq.
    pub ack_req: bool,
    /// All its headers.
    pub repr: RoceRepr,
    /// What happened to it.
    pub action: Verdict,
}

impl Traced {
    fn new(index: usize, at: Instant, from: NodeId, to: NodeId, repr: RoceRepr) -> Traced {
        Traced {
            index,
            at,
            from,
            to,
            opcode: repr.bth.opcode,
            psn: repr.bth.psn,
            ack_req: repr.bth.ack_req,
            repr,
            action: Verdict::Deliver,
        }
    }

    /// One line for a dump, naming the direction `dir`.
    pub fn line(&self, dir: impl fmt::Debug) -> String {
        format!(
            "{:>10}ns {:?} {} psn={} ack_req={} aeth={:?} {:?}\n",
            self.at.as_nanos(),
            dir,
            self.opcode,
            self.psn,
            self.ack_req,
            self.repr.aeth.map(|a| a.syndrome),
            self.action
        )
    }
}

/// How a lockstep run moves datagrams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pace {
    /// Each round every node in turn hands over everything it has to send,
    /// and each datagram is delivered at once (a held one after the next
    /// datagram of its sender, or at the end of the sender's turn).
    #[default]
    Burst,
    /// Each round every node first transmits all it wants into its links'
    /// FIFOs, then only the oldest datagram of each link is delivered:
    /// responses reach a requester one by one, interleaved with its
    /// retransmissions, as on a real link. A held datagram enters its FIFO
    /// behind the next datagram its sender transmits (or when every FIFO
    /// is empty).
    OnePerLink,
}

impl<N: SansIo> Fabric<N> {
    /// Record the trace in the event-driven runs too (lockstep runs always
    /// do). The action of a traced datagram says whether it was dropped
    /// (for any reason) or duplicated.
    pub fn record_trace(&mut self, on: bool) {
        self.tracing = on;
    }

    /// The trace so far.
    pub fn trace(&self) -> &[Traced] {
        &self.trace
    }

    /// Take the trace, leaving it empty (indices keep counting from 0).
    pub fn take_trace(&mut self) -> Vec<Traced> {
        std::mem::take(&mut self.trace)
    }

    /// How many traced datagrams from `from` to `to` had opcode `op`.
    pub fn count(&self, from: NodeId, to: NodeId, op: Opcode) -> usize {
        self.trace.iter().filter(|t| t.from == from && t.to == to && t.opcode == op).count()
    }

    /// The trace, one line a datagram, for failure messages.
    pub fn dump(&self) -> String {
        self.trace.iter().map(|t| t.line(format_args!("{}->{}", t.from.0, t.to.0))).collect()
    }

    /// Trace a datagram entering a link (event-driven runs), if tracing.
    pub(crate) fn trace_transmit(&mut self, info: &PacketInfo) -> Option<usize> {
        let repr = info.roce.filter(|_| self.tracing)?;
        let i = self.trace.len();
        self.trace.push(Traced::new(i, info.now, info.from, info.to, repr));
        Some(i)
    }

    /// Set what happened to a traced datagram.
    pub(crate) fn mark(&mut self, traced: Option<usize>, v: Verdict) {
        if let Some(t) = traced.and_then(|i| self.trace.get_mut(i)) {
            t.action = v;
        }
    }

    /// Run in lockstep (see the [crate documentation](crate)): rounds of
    /// transmissions and deliveries as `pace` says, every RoCE datagram
    /// through `hook`, and when nothing moves, the clock jumps to the
    /// earliest timer and every node's timers are handled — until no timer
    /// is armed at or before `max_time`. Returns false if `max_rounds`
    /// rounds did not settle it.
    ///
    /// Datagrams are routed by destination address as in the event-driven
    /// runs (unroutable ones are dropped and counted); datagrams that are
    /// not RoCE bypass the hook and the trace. Capture taps record both
    /// points.
    pub fn run_lockstep(
        &mut self,
        pace: Pace,
        max_time: Instant,
        max_rounds: usize,
        mut hook: impl FnMut(&Traced) -> Verdict,
    ) -> bool {
        // (a lockstep run draws nothing from the seed: no replay line)
        self._guard.armed = false;
        let mut fifos: BTreeMap<(NodeId, NodeId), VecDeque<Datagram>> = BTreeMap::new();
        let mut held: Vec<Option<(NodeId, Datagram)>> = Vec::new();
        for _ in 0..max_rounds {
            let moved = match pace {
                Pace::Burst => self.burst_round(&mut hook),
                Pace::OnePerLink => self.paced_round(&mut hook, &mut fifos, &mut held),
            };
            if moved {
                continue;
            }
            let next = self.nodes.iter().filter_map(|n| n.io.poll_timeout()).min();
            match next {
                Some(t) if t <= max_time => {
                    self.now = self.now.max(t);
                    let now = self.now;
                    for n in &mut self.nodes {
                        n.stats.timers_fired += 1;
                        self.stats.timers_fired += 1;
                        n.io.handle_timeout(now);
                    }
                }
                _ => return true,
            }
        }
        false
    }

    /// One burst round; true if anything was transmitted.
    fn burst_round(&mut self, hook: &mut impl FnMut(&Traced) -> Verdict) -> bool {
        let mut moved = false;
        for src in 0..self.nodes.len() {
            let from = NodeId(src);
            let mut held: Option<(NodeId, Datagram)> = None;
            while let Some(d) = self.nodes[src].io.poll_transmit(self.now) {
                moved = true;
                let out = self.enter_wire(from, d, hook);
                let release = held.take();
                if let Some((to, v, d)) = out {
                    match v {
                        Verdict::Hold => held = Some((to, d)),
                        v => {
                            for d in apply(v, d) {
                                self.deliver_now(to, d);
                            }
                        }
                    }
                }
                if let Some((to, h)) = release {
                    self.deliver_now(to, h);
                }
            }
            if let Some((to, h)) = held {
                self.deliver_now(to, h);
            }
        }
        moved
    }

    /// One paced round; true if anything was delivered.
    fn paced_round(
        &mut self,
        hook: &mut impl FnMut(&Traced) -> Verdict,
        fifos: &mut BTreeMap<(NodeId, NodeId), VecDeque<Datagram>>,
        held: &mut Vec<Option<(NodeId, Datagram)>>,
    ) -> bool {
        held.resize_with(self.nodes.len(), || None);
        for (src, slot) in held.iter_mut().enumerate() {
            let from = NodeId(src);
            while let Some(d) = self.nodes[src].io.poll_transmit(self.now) {
                let Some((to, v, d)) = self.enter_wire(from, d, hook) else { continue };
                if v == Verdict::Hold {
                    // an earlier hold of this sender goes first
                    if let Some((t, h)) = slot.replace((to, d)) {
                        fifos.entry((from, t)).or_default().push_back(h);
                    }
                    continue;
                }
                fifos.entry((from, to)).or_default().extend(apply(v, d));
                if let Some((t, h)) = slot.take() {
                    fifos.entry((from, t)).or_default().push_back(h);
                }
            }
        }
        if fifos.values().all(VecDeque::is_empty) {
            // nothing followed a held datagram: it goes now
            for (src, h) in held.iter_mut().enumerate() {
                if let Some((t, h)) = h.take() {
                    fifos.entry((NodeId(src), t)).or_default().push_back(h);
                }
            }
        }
        let mut moved = false;
        let heads: Vec<(NodeId, Datagram)> =
            fifos.iter_mut().filter_map(|(&(_, to), f)| f.pop_front().map(|d| (to, d))).collect();
        for (to, d) in heads {
            self.deliver_now(to, d);
            moved = true;
        }
        moved
    }

    /// A datagram `from` transmitted enters the wire: counted, tapped,
    /// routed, traced and judged by the hook. `None` if unroutable.
    fn enter_wire(
        &mut self,
        from: NodeId,
        d: Datagram,
        hook: &mut impl FnMut(&Traced) -> Verdict,
    ) -> Option<(NodeId, Verdict, Datagram)> {
        // a payload in region memory goes on the simulated wire whole
        let d = d.flatten()?;
        self.next_tx += 1;
        self.stats.transmitted += 1;
        self.nodes[from.0].stats.transmitted += 1;
        self.tap(TapPoint::Egress, &d);
        let Some(to) = self.route(d.endpoints.dst) else {
            self.stats.dropped_unroutable += 1;
            return None;
        };
        let Ok((repr, _)) = RoceRepr::parse_bytes(&d.payload) else {
            return Some((to, Verdict::Deliver, d));
        };
        let mut t = Traced::new(self.trace.len(), self.now, from, to, repr);
        let v = hook(&t);
        match v {
            Verdict::Drop => self.stats.dropped_filter += 1,
            Verdict::Duplicate => self.stats.duplicated += 1,
            _ => {}
        }
        t.action = v.clone();
        self.trace.push(t);
        Some((to, v, d))
    }

    /// Hand a datagram to a node now.
    fn deliver_now(&mut self, to: NodeId, d: Datagram) {
        self.tap(TapPoint::Ingress, &d);
        self.stats.delivered += 1;
        let now = self.now;
        let n = &mut self.nodes[to.0];
        n.stats.delivered += 1;
        n.io.handle_datagram(now, d);
    }
}

/// The datagrams a verdict (other than `Hold`) delivers.
fn apply(v: Verdict, d: Datagram) -> Vec<Datagram> {
    match v {
        Verdict::Deliver | Verdict::Hold => vec![d],
        Verdict::Drop => Vec::new(),
        Verdict::Duplicate => vec![d.clone(), d],
        Verdict::Replace(bytes) => {
            let mut d = d;
            d.payload = bytes.into();
            vec![d]
        }
    }
}
