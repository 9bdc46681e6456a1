//! Seeded fault injection, shared by the simulated fabric (`roce_sim`) and
//! the real transports' `ROCE_EMU_FAULTS` injector (`roce_transport::faults`):
//! the middleware every datagram passes through while it is in flight.
//! It sits below both, so neither carries the other (the shipped
//! `libibverbs.so.1` has the injector but not the simulator).
//!
//! Two layers, in the spirit of smoltcp's `FaultInjector` and neqo's
//! test-fixture simulator:
//!
//! * [`FaultConfig`] — random faults with a probability each (loss,
//!   duplication, reordering, single-bit corruption, ECN congestion marks)
//!   and a random extra delay (jitter). Set for the whole fabric or per
//!   directed link.
//! * [`Filter`] — targeted faults written as data: a [`Match`] (opcode,
//!   direction, PSN, ...), an [`Occurrence`] ("the 3rd one", "the first
//!   transmission of each packet") and an [`Action`] (drop, duplicate,
//!   corrupt, delay, mark CE). For anything else, [`Filter::custom`] takes
//!   a closure.
//!
//! All randomness comes from one seeded [`FaultDice`] (a `SmallRng`), drawn
//! in a fixed order, so a seed replays the same faults on the same
//! datagrams. A probability of zero draws nothing: turning a fault off does
//! not shift the random sequence of the others.
//!
//! The random faults of one datagram are decided by one function,
//! [`FaultDice::decide`], which the fabric and the injector both call: they
//! differ only in their mechanics (the fabric schedules arrivals on a
//! virtual clock, the injector holds datagrams behind the next batch).
//!
//! # Congestion marks
//!
//! A congested switch running RED with ECN marks a packet instead of
//! dropping it: it sets the ECN field (the low two bits of the IPv4 TOS
//! byte / IPv6 traffic class) to CE, "congestion experienced" (`0b11`),
//! but only in a packet whose sender declared it ECN-capable (ECT(0)
//! `0b10` or ECT(1) `0b01`); a non-ECT packet (`0b00`) is never marked.
//! [`FaultConfig::ce_mark`] and [`Action::MarkCe`] do that to the
//! datagram's `meta.tos` with [`mark_ce`]; the receiving RoCE device
//! answers a CE-marked packet with a CNP (DCQCN). The TOS byte is masked
//! out of the ICRC, so a mark never invalidates a packet.

use core::fmt;
use core::net::IpAddr;
use core::time::Duration;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use roce_emulator::io::Datagram;
use roce_emulator::time::Instant;
use roce_packet::{OpKind, Opcode, Psn, Qpn, RoceRepr, UdpEndpoints};
use std::collections::HashSet;

/// Index of a node in its fabric (in the order added, from 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// Random faults applied to every datagram on a link.
///
/// Probabilities are clamped to `[0, 1]` (NaN counts as 0); nothing here
/// can make the fabric panic.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfig {
    /// Probability that a datagram is lost.
    pub drop: f64,
    /// Probability that a datagram is delivered twice (the copy gets its own
    /// jitter).
    pub duplicate: f64,
    /// Probability that a datagram is held back by [`Self::reorder_delay`]
    /// so that datagrams sent after it overtake it.
    pub reorder: f64,
    /// How long a reordered datagram is held (on top of latency).
    pub reorder_delay: Duration,
    /// Probability that one random bit of the UDP payload is flipped. The
    /// bit is never in BTH byte 4 (FECN, BECN, reserved), which the ICRC
    /// deliberately leaves uncovered, so every corruption is one the
    /// receiver's ICRC check must catch.
    pub corrupt: f64,
    /// Each datagram gets an extra delay drawn uniformly from
    /// `[0, jitter]` (nanosecond resolution), but never arrives before a
    /// datagram sent earlier on the same link (links stay FIFO; use
    /// [`Self::reorder`] for reordering).
    pub jitter: Duration,
    /// Probability that a datagram is marked Congestion Experienced (its
    /// ECN field set to CE, `0b11`, as a switch's RED/ECN queue does); a
    /// datagram that is not ECN-capable (ECN field `0b00`) is never
    /// marked (see [`mark_ce`]). Default 0: nothing is drawn, so the
    /// other faults of a seed are unchanged.
    pub ce_mark: f64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(20),
            corrupt: 0.0,
            jitter: Duration::ZERO,
            ce_mark: 0.0,
        }
    }
}

impl FaultConfig {
    /// No random faults at all (the default).
    pub fn none() -> FaultConfig {
        FaultConfig::default()
    }
    /// Only random loss with probability `p`.
    pub fn lossy(p: f64) -> FaultConfig {
        FaultConfig { drop: p, ..FaultConfig::default() }
    }
}

/// What the fabric knows about a datagram when it decides its faults.
#[derive(Clone, Debug)]
pub struct PacketInfo {
    /// Fabric-wide transmission number (0 for the first datagram any node
    /// sent). Duplicates share the number of their original.
    pub seq: u64,
    /// Virtual time of transmission.
    pub now: Instant,
    /// The node that transmitted it.
    pub from: NodeId,
    /// The node its destination address routes to.
    pub to: NodeId,
    /// Its addresses and ports.
    pub endpoints: UdpEndpoints,
    /// Length of the IP packet (IP header + UDP header + payload).
    pub ip_len: usize,
    /// The RoCE headers, if the payload is a structurally valid RoCEv2
    /// packet (`RocePacket::new_checked`); the ICRC is not checked here.
    pub roce: Option<RoceRepr>,
}

impl PacketInfo {
    /// The BTH opcode, if the payload parsed.
    pub fn opcode(&self) -> Option<Opcode> {
        self.roce.map(|r| r.bth.opcode)
    }
    /// The BTH PSN, if the payload parsed.
    pub fn psn(&self) -> Option<Psn> {
        self.roce.map(|r| r.bth.psn)
    }
    /// The BTH destination QP, if the payload parsed.
    pub fn dest_qp(&self) -> Option<Qpn> {
        self.roce.map(|r| r.bth.dest_qp)
    }
    /// What the opcode does, if known.
    pub fn kind(&self) -> Option<OpKind> {
        self.opcode().and_then(|o| o.info()).map(|i| i.kind)
    }
    /// Key identifying "the same packet" across retransmissions:
    /// addresses, destination QP and PSN.
    fn packet_key(&self) -> Option<PacketKey> {
        self.roce.map(|r| PacketKey {
            src: self.endpoints.src,
            dst: self.endpoints.dst,
            dest_qp: r.bth.dest_qp,
            psn: r.bth.psn,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct PacketKey {
    src: IpAddr,
    dst: IpAddr,
    dest_qp: Qpn,
    psn: Psn,
}

/// Which datagrams a [`Filter`] looks at. Composable with
/// [`Match::All`], [`Match::AnyOf`] and [`Match::Not`].
#[derive(Clone, Debug, PartialEq)]
pub enum Match {
    /// Every datagram.
    Any,
    /// Datagrams whose payload is not a structurally valid RoCEv2 packet.
    NotRoce,
    /// This BTH opcode.
    Opcode(Opcode),
    /// Any opcode of this kind (e.g. every `OpKind::Ack`, any transport).
    Kind(OpKind),
    /// Requests (sent by a requester: SEND, WRITE, READ request, atomics).
    Request,
    /// Responses (ACK, atomic ACK, READ response).
    Response,
    /// Sent from this IP address.
    From(IpAddr),
    /// Sent to this IP address.
    To(IpAddr),
    /// Sent from `src` to `dst`.
    Direction {
        /// Source address.
        src: IpAddr,
        /// Destination address.
        dst: IpAddr,
    },
    /// This PSN.
    Psn(Psn),
    /// A PSN in `[start, start + len)`, modulo 2^24.
    PsnRange {
        /// First PSN.
        start: Psn,
        /// Number of PSNs.
        len: u32,
    },
    /// This destination QP.
    DestQp(Qpn),
    /// With the BTH AckReq bit set.
    AckReq,
    /// With probability `p` (draws from the fabric's seeded RNG each time
    /// it is evaluated).
    Random(f64),
    /// All of these (evaluated in order, stopping at the first miss).
    All(Vec<Match>),
    /// Any of these (evaluated in order, stopping at the first hit).
    AnyOf(Vec<Match>),
    /// Not this.
    Not(Box<Match>),
}

impl Match {
    /// `self` and `other`.
    pub fn and(self, other: Match) -> Match {
        match self {
            Match::All(mut v) => {
                v.push(other);
                Match::All(v)
            }
            m => Match::All(vec![m, other]),
        }
    }

    /// Evaluate against a datagram.
    pub fn matches(&self, info: &PacketInfo, rng: &mut SmallRng) -> bool {
        match self {
            Match::Any => true,
            Match::NotRoce => info.roce.is_none(),
            Match::Opcode(op) => info.opcode() == Some(*op),
            Match::Kind(k) => info.kind() == Some(*k),
            Match::Request => info.opcode().and_then(|o| o.info()).is_some_and(|i| i.is_request()),
            Match::Response => {
                info.opcode().and_then(|o| o.info()).is_some_and(|i| i.is_response())
            }
            Match::From(a) => info.endpoints.src == *a,
            Match::To(a) => info.endpoints.dst == *a,
            Match::Direction { src, dst } => {
                info.endpoints.src == *src && info.endpoints.dst == *dst
            }
            Match::Psn(p) => info.psn() == Some(*p),
            Match::PsnRange { start, len } => info.psn().is_some_and(|p| p.in_range(*start, *len)),
            Match::DestQp(q) => info.dest_qp() == Some(*q),
            Match::AckReq => info.roce.is_some_and(|r| r.bth.ack_req),
            Match::Random(p) => chance(rng, *p),
            Match::All(v) => v.iter().all(|m| m.matches(info, rng)),
            Match::AnyOf(v) => v.iter().any(|m| m.matches(info, rng)),
            Match::Not(m) => !m.matches(info, rng),
        }
    }
}

/// Which of the matching datagrams a [`Filter`] acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occurrence {
    /// Every matching datagram.
    Every,
    /// Only the n-th matching datagram (1-based: `Nth(3)` is the third).
    Nth(u64),
    /// The first n matching datagrams.
    FirstN(u64),
    /// Every n-th matching datagram (the n-th, 2n-th, ...).
    EveryNth(u64),
    /// The first transmission of each distinct packet, where "the same
    /// packet" means same source and destination address, destination QP
    /// and PSN: retransmissions pass. Datagrams that are not RoCE never
    /// count as a first transmission.
    OncePerPacket,
}

/// What happens to a datagram a filter acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Pass,
    /// Lose it.
    Drop,
    /// Deliver it twice.
    Duplicate,
    /// Flip one random bit (never in BTH byte 4; see [`FaultConfig::corrupt`]).
    Corrupt,
    /// Flip this bit of the UDP payload (bit 0 is the MSB of byte 0);
    /// ignored if out of range.
    FlipBit(usize),
    /// Deliver it this much later; datagrams sent after it may overtake
    /// it (a delay is a hold, not link jitter).
    Delay(Duration),
    /// Mark it Congestion Experienced: set the ECN field of its
    /// `meta.tos` to CE (`0b11`) if it is ECN-capable; a non-ECT datagram
    /// passes unchanged (see [`mark_ce`]).
    MarkCe,
}

/// Identifies a filter added with `Fabric::add_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FilterId(pub usize);

/// A closure deciding the fate of each datagram.
pub type FilterFn = Box<dyn FnMut(&Datagram, &PacketInfo) -> Action + Send>;

enum Rule {
    Data { matcher: Match, occurrence: Occurrence, action: Action },
    Custom(FilterFn),
}

/// A targeted fault: which datagrams, which occurrence, what to do.
///
/// ```
/// use roce_faults::{Filter, Match};
/// use roce_packet::Opcode;
/// // Drop the 3rd READ RESPONSE MIDDLE.
/// let f = Filter::matching(Match::Opcode(Opcode::RC_RDMA_READ_RESPONSE_MIDDLE)).nth(3).drop();
/// // Drop the first transmission of every ACK; retransmitted ones pass.
/// let g = Filter::matching(Match::Opcode(Opcode::RC_ACKNOWLEDGE)).once_per_packet().drop();
/// # let _ = (f, g);
/// ```
pub struct Filter {
    rule: Rule,
    matched: u64,
    fired: u64,
    seen: HashSet<PacketKey>,
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Filter");
        match &self.rule {
            Rule::Data { matcher, occurrence, action } => {
                d.field("matcher", matcher).field("occurrence", occurrence).field("action", action)
            }
            Rule::Custom(_) => d.field("custom", &"<closure>"),
        };
        d.field("matched", &self.matched).field("fired", &self.fired).finish()
    }
}

impl Filter {
    /// A filter over the datagrams `m` matches; by default it acts on
    /// every one of them and drops it.
    pub fn matching(m: Match) -> Filter {
        Filter::from_rule(Rule::Data {
            matcher: m,
            occurrence: Occurrence::Every,
            action: Action::Drop,
        })
    }
    /// A filter deciding with a closure, called once for every datagram
    /// that enters a link. [`Filter::matched`] counts calls, [`Filter::fired`]
    /// counts non-`Pass` answers.
    pub fn custom(f: impl FnMut(&Datagram, &PacketInfo) -> Action + Send + 'static) -> Filter {
        Filter::from_rule(Rule::Custom(Box::new(f)))
    }
    fn from_rule(rule: Rule) -> Filter {
        Filter { rule, matched: 0, fired: 0, seen: HashSet::new() }
    }
    /// Set which occurrence to act on (no effect on a custom filter).
    pub fn occurrence(mut self, o: Occurrence) -> Filter {
        if let Rule::Data { occurrence, .. } = &mut self.rule {
            *occurrence = o;
        }
        self
    }
    /// Set the action (no effect on a custom filter).
    pub fn action(mut self, a: Action) -> Filter {
        if let Rule::Data { action, .. } = &mut self.rule {
            *action = a;
        }
        self
    }
    /// Act only on the n-th match (1-based).
    pub fn nth(self, n: u64) -> Filter {
        self.occurrence(Occurrence::Nth(n))
    }
    /// Act on the first n matches.
    pub fn first(self, n: u64) -> Filter {
        self.occurrence(Occurrence::FirstN(n))
    }
    /// Act on every n-th match.
    pub fn every_nth(self, n: u64) -> Filter {
        self.occurrence(Occurrence::EveryNth(n))
    }
    /// Act on the first transmission of each packet only.
    pub fn once_per_packet(self) -> Filter {
        self.occurrence(Occurrence::OncePerPacket)
    }
    /// Drop what it acts on.
    pub fn drop(self) -> Filter {
        self.action(Action::Drop)
    }
    /// Duplicate what it acts on.
    pub fn duplicate(self) -> Filter {
        self.action(Action::Duplicate)
    }
    /// Corrupt one random bit of what it acts on.
    pub fn corrupt(self) -> Filter {
        self.action(Action::Corrupt)
    }
    /// Delay what it acts on.
    pub fn delay(self, d: Duration) -> Filter {
        self.action(Action::Delay(d))
    }
    /// Mark what it acts on Congestion Experienced, if it is ECN-capable
    /// ([`Action::MarkCe`]).
    ///
    /// ```
    /// use roce_faults::{Action, Filter, Match};
    /// use roce_packet::Opcode;
    /// // Mark every 10th SEND ONLY CE (ECT ones; non-ECT ones pass).
    /// let f = Filter::matching(Match::Opcode(Opcode::RC_SEND_ONLY)).every_nth(10).mark_ce();
    /// # let _ = f;
    /// ```
    pub fn mark_ce(self) -> Filter {
        self.action(Action::MarkCe)
    }
    /// How many datagrams matched so far (for a custom filter: how many it
    /// was asked about).
    pub fn matched(&self) -> u64 {
        self.matched
    }
    /// How many times it acted (returned something other than `Pass`).
    pub fn fired(&self) -> u64 {
        self.fired
    }

    /// Decide for one datagram; updates the counters (the fabric calls
    /// this for each filter in order).
    pub fn decide(&mut self, dgram: &Datagram, info: &PacketInfo, rng: &mut SmallRng) -> Action {
        let action = match &mut self.rule {
            Rule::Custom(f) => {
                self.matched += 1;
                f(dgram, info)
            }
            Rule::Data { matcher, occurrence, action } => {
                if !matcher.matches(info, rng) {
                    return Action::Pass;
                }
                self.matched += 1;
                let n = self.matched;
                let act = match *occurrence {
                    Occurrence::Every => true,
                    Occurrence::Nth(k) => n == k,
                    Occurrence::FirstN(k) => n <= k,
                    Occurrence::EveryNth(k) => n.checked_rem(k) == Some(0),
                    Occurrence::OncePerPacket => {
                        info.packet_key().is_some_and(|key| self.seen.insert(key))
                    }
                };
                if act {
                    *action
                } else {
                    Action::Pass
                }
            }
        };
        if action != Action::Pass {
            self.fired += 1;
        }
        action
    }
}

/// The probabilities of the random faults, as the one decision function
/// ([`FaultDice::decide`]) takes them: the simulated fabric's
/// [`FaultConfig`] and the real transports' `ROCE_EMU_FAULTS` injector
/// (`roce_transport::faults`) both reduce to this.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultRates {
    /// Probability that a datagram is lost.
    pub drop: f64,
    /// Probability that one random bit of the payload is flipped.
    pub corrupt: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a datagram is held back (reordered).
    pub reorder: f64,
    /// Probability that a datagram is marked Congestion Experienced (if
    /// it is ECN-capable; see [`mark_ce`]).
    pub ce_mark: f64,
}

impl FaultConfig {
    /// The probabilities, for [`FaultDice::decide`].
    pub fn rates(&self) -> FaultRates {
        FaultRates {
            drop: self.drop,
            corrupt: self.corrupt,
            duplicate: self.duplicate,
            reorder: self.reorder,
            ce_mark: self.ce_mark,
        }
    }
}

/// The random fate of one datagram, as [`FaultDice::decide`] drew it.
/// What to do with it (hold it for how long, how to deliver the copy) is
/// left to the caller's mechanics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fate {
    /// Lose it (nothing else was drawn).
    pub drop: bool,
    /// Flip this bit of the payload (bit 0 is the MSB of byte 0; never in
    /// BTH byte 4). `None` if not corrupted, or nothing can be flipped.
    pub corrupt_bit: Option<usize>,
    /// Deliver it twice.
    pub duplicate: bool,
    /// Hold it back so that later datagrams overtake it.
    pub reorder: bool,
    /// Mark it Congestion Experienced if it is ECN-capable (drawn whatever
    /// its ECN field: [`Fate::mark_ce`] leaves a non-ECT one alone).
    pub ce_mark: bool,
}

impl Fate {
    /// Flip [`Fate::corrupt_bit`] in `payload`; false if there is none (or
    /// it is out of range).
    pub fn corrupt(&self, payload: &mut [u8]) -> bool {
        self.corrupt_bit.is_some_and(|b| flip_bit(payload, b))
    }

    /// Apply [`Fate::ce_mark`] to a datagram's IP TOS byte (IPv6 traffic
    /// class) with [`mark_ce`]: true if it was marked (drawn, and
    /// ECN-capable).
    pub fn mark_ce(&self, tos: &mut u8) -> bool {
        self.ce_mark && mark_ce(tos)
    }
}

/// The ECN field: the low two bits of the IPv4 TOS byte / IPv6 traffic
/// class (RFC 3168).
pub const ECN_MASK: u8 = 0b11;
/// ECN codepoint Not-ECT: the sender does not do ECN (never marked).
pub const ECN_NOT_ECT: u8 = 0b00;
/// ECN codepoint ECT(1): ECN-capable transport.
pub const ECN_ECT1: u8 = 0b01;
/// ECN codepoint ECT(0): ECN-capable transport (what RoCEv2 devices send).
pub const ECN_ECT0: u8 = 0b10;
/// ECN codepoint CE: congestion experienced.
pub const ECN_CE: u8 = 0b11;

/// Mark a packet Congestion Experienced as a switch's RED/ECN queue does:
/// if its ECN field (the low two bits of `tos`, the IPv4 TOS byte or IPv6
/// traffic class) says it is ECN-capable (ECT(0), ECT(1), or already CE),
/// set the field to CE (`0b11`), leaving the DSCP bits alone; a Not-ECT
/// packet (`0b00`) is never marked. Returns whether it marked (true for an
/// already CE packet too, which stays CE).
///
/// ```
/// let mut tos = 26 << 2 | roce_faults::ECN_ECT0; // DSCP 26, ECT(0): 0x6a
/// assert!(roce_faults::mark_ce(&mut tos));
/// assert_eq!(tos, 0x6b);
/// let mut plain = 26 << 2; // DSCP 26, Not-ECT: 0x68
/// assert!(!roce_faults::mark_ce(&mut plain));
/// assert_eq!(plain, 0x68);
/// ```
pub fn mark_ce(tos: &mut u8) -> bool {
    if *tos & ECN_MASK == ECN_NOT_ECT {
        return false;
    }
    *tos |= ECN_CE;
    true
}

/// The one seeded source of fault decisions, shared by the simulated fabric
/// and the real transports' fault injector: a `SmallRng` seeded with a
/// `u64`, drawn in a fixed order, so a seed replays the same faults on the
/// same sequence of datagrams (on the same platform and `rand` version).
#[derive(Clone, Debug)]
pub struct FaultDice {
    rng: SmallRng,
}

impl FaultDice {
    /// Dice seeded with `seed`.
    pub fn new(seed: u64) -> FaultDice {
        FaultDice { rng: SmallRng::seed_from_u64(seed) }
    }

    /// The generator, for other seeded choices (jitter, `Match::Random`).
    pub fn rng(&mut self) -> &mut SmallRng {
        &mut self.rng
    }

    /// `true` with probability `p` (clamped; NaN and `p <= 0` draw nothing).
    pub fn chance(&mut self, p: f64) -> bool {
        chance(&mut self.rng, p)
    }

    /// Decide the random fate of a datagram of `payload_len` bytes, in the
    /// fixed order: loss (if lost, nothing more is drawn), corruption
    /// (`force_corrupt` makes it certain but still draws the chance, so a
    /// targeted corruption does not shift the sequence; the bit is drawn
    /// when corrupting), duplication, reordering, and last the CE mark
    /// (drawn whatever the datagram's ECN field; [`Fate::mark_ce`] marks
    /// only an ECN-capable one). A probability of zero draws nothing, so
    /// turning a fault off does not shift the others, and a seed without
    /// `ce_mark` replays the faults it gave before the mark existed.
    pub fn decide(&mut self, rates: &FaultRates, payload_len: usize, force_corrupt: bool) -> Fate {
        if self.chance(rates.drop) {
            return Fate { drop: true, ..Fate::default() };
        }
        let corrupt = self.chance(rates.corrupt) | force_corrupt;
        let corrupt_bit = if corrupt { random_bit(&mut self.rng, payload_len) } else { None };
        let duplicate = self.chance(rates.duplicate);
        let reorder = self.chance(rates.reorder);
        let ce_mark = self.chance(rates.ce_mark);
        Fate { drop: false, corrupt_bit, duplicate, reorder, ce_mark }
    }
}

/// `true` with probability `p` (clamped; NaN and `p <= 0` draw nothing).
pub(crate) fn chance(rng: &mut SmallRng, p: f64) -> bool {
    if p.is_nan() || p <= 0.0 {
        false
    } else if p >= 1.0 {
        true
    } else {
        rng.gen::<f64>() < p
    }
}

/// A random bit of a `len`-byte payload, skipping BTH byte 4 when the
/// payload is long enough to have a BTH (FECN, BECN, resv6: not covered by
/// the ICRC, so every flip is one the receiver's ICRC check must catch).
fn random_bit(rng: &mut SmallRng, len: usize) -> Option<usize> {
    const SKIP: usize = 4;
    let skip = len > SKIP;
    let bits = len * 8 - if skip { 8 } else { 0 };
    if bits == 0 {
        return None;
    }
    let mut bit = rng.gen_range(0..bits);
    if skip && bit >= SKIP * 8 {
        bit += 8;
    }
    Some(bit)
}

/// Flip bit `bit` (0 = MSB of byte 0). False if out of range.
pub fn flip_bit(payload: &mut [u8], bit: usize) -> bool {
    match payload.get_mut(bit / 8) {
        Some(b) => {
            *b ^= 0x80 >> (bit % 8);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_emulator::time::Instant;

    /// The random faults every test draws, CE mark aside.
    fn busy(ce_mark: f64) -> FaultRates {
        FaultRates { drop: 0.1, corrupt: 0.1, duplicate: 0.2, reorder: 0.2, ce_mark }
    }

    /// [`FaultDice::decide`] as it was before the CE mark: the draws a
    /// seed's golden runs were recorded with.
    fn decide_without_ce(dice: &mut FaultDice, r: &FaultRates, len: usize) -> Fate {
        if dice.chance(r.drop) {
            return Fate { drop: true, ..Fate::default() };
        }
        let corrupt = dice.chance(r.corrupt);
        let corrupt_bit = if corrupt { random_bit(dice.rng(), len) } else { None };
        let duplicate = dice.chance(r.duplicate);
        let reorder = dice.chance(r.reorder);
        Fate { drop: false, corrupt_bit, duplicate, reorder, ce_mark: false }
    }

    #[test]
    fn without_ce_mark_a_seed_draws_what_it_drew_before() {
        for seed in 0..8 {
            let (mut new, mut old) = (FaultDice::new(seed), FaultDice::new(seed));
            for i in 0..2_000 {
                let len = 20 + i % 1000;
                let got = new.decide(&busy(0.0), len, false);
                assert_eq!(got, decide_without_ce(&mut old, &busy(0.0), len), "seed {seed} #{i}");
                assert!(!got.ce_mark);
            }
            // and the generators are in the same state afterwards
            assert_eq!(new.rng().gen::<u64>(), old.rng().gen::<u64>());
        }
    }

    #[test]
    fn a_certain_ce_mark_draws_nothing_and_shifts_nothing() {
        let (mut a, mut b) = (FaultDice::new(3), FaultDice::new(3));
        for _ in 0..2_000 {
            let with = a.decide(&busy(1.0), 100, false);
            let without = b.decide(&busy(0.0), 100, false);
            // lost datagrams draw nothing more: no mark either
            assert_eq!(with.ce_mark, !with.drop);
            assert_eq!(with, Fate { ce_mark: !with.drop, ..without });
        }
    }

    #[test]
    fn the_ce_mark_is_drawn_last_and_only_for_delivered_datagrams() {
        let mut d = FaultDice::new(11);
        let mut r = FaultDice::new(11);
        let rates = busy(0.5);
        let (mut marked, mut kept) = (0, 0);
        for _ in 0..4_000 {
            let f = d.decide(&rates, 64, false);
            let mut want = decide_without_ce(&mut r, &rates, 64);
            if !want.drop {
                want.ce_mark = r.chance(0.5);
                kept += 1;
                marked += u32::from(want.ce_mark);
            }
            assert_eq!(f, want);
        }
        // Binomial(kept, 0.5): within 5 sd
        let sd5 = 5.0 * (kept as f64 * 0.25).sqrt();
        assert!((marked as f64 - kept as f64 / 2.0).abs() < sd5, "{marked} of {kept}");
    }

    #[test]
    fn a_certain_mark_marks_every_ect_datagram_and_no_other() {
        let mut dice = FaultDice::new(9);
        let rates = FaultRates { ce_mark: 1.0, ..FaultRates::default() };
        for tos in 0..=u8::MAX {
            let fate = dice.decide(&rates, 64, false);
            assert!(fate.ce_mark);
            let mut t = tos;
            let ect = tos & ECN_MASK != ECN_NOT_ECT;
            assert_eq!(fate.mark_ce(&mut t), ect, "tos {tos:#04x}");
            let want = if ect { tos | ECN_CE } else { tos };
            assert_eq!(t, want, "tos {tos:#04x}");
        }
        // no mark drawn: nothing changes, ECT or not
        let mut t = ECN_ECT0;
        assert!(!Fate::default().mark_ce(&mut t));
        assert_eq!(t, ECN_ECT0);
    }

    #[test]
    fn mark_ce_on_each_codepoint() {
        let dscp = 26 << 2;
        for (ecn, marks) in
            [(ECN_NOT_ECT, false), (ECN_ECT1, true), (ECN_ECT0, true), (ECN_CE, true)]
        {
            let mut tos = dscp | ecn;
            assert_eq!(mark_ce(&mut tos), marks, "ecn {ecn:#04b}");
            let want = if marks { ECN_CE } else { ECN_NOT_ECT };
            assert_eq!(tos & ECN_MASK, want, "ecn {ecn:#04b}");
            assert_eq!(tos & !ECN_MASK, dscp, "the DSCP bits stay");
        }
    }

    #[test]
    fn config_rates_carry_the_ce_mark() {
        assert_eq!(FaultConfig::default().ce_mark, 0.0);
        assert_eq!(FaultConfig::default().rates(), FaultRates::default());
        let c = FaultConfig { ce_mark: 0.25, ..FaultConfig::lossy(0.1) };
        assert_eq!(c.rates(), FaultRates { drop: 0.1, ce_mark: 0.25, ..FaultRates::default() });
    }

    #[test]
    fn a_filter_can_mark_ce() {
        let ep = UdpEndpoints {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            src_port: 49152,
            dst_port: 4791,
        };
        let info = PacketInfo {
            seq: 0,
            now: Instant::ZERO,
            from: NodeId(0),
            to: NodeId(1),
            endpoints: ep,
            ip_len: 28,
            roce: None,
        };
        let d = Datagram::new(ep, roce_packet::IpMeta::default(), vec![0u8; 8].into());
        let mut rng = SmallRng::seed_from_u64(1);
        let mut f = Filter::matching(Match::Any).every_nth(2).mark_ce();
        let acts: Vec<Action> = (0..4).map(|_| f.decide(&d, &info, &mut rng)).collect();
        assert_eq!(acts, [Action::Pass, Action::MarkCe, Action::Pass, Action::MarkCe]);
        assert_eq!((f.matched(), f.fired()), (4, 2));
    }
}
