//! The whole-capture analysis shared by `--explain`, `--ladder`, `--follow`
//! and `--stats`.
//!
//! One pass runs every packet through the [`Explainer`]'s connection
//! tracking (the only state tracking there is) and keeps, per packet, its
//! explanation and structured [`Facts`]. After the pass the requester QP
//! numbers that responses revealed are known for the whole capture, so
//! every packet can be placed between two endpoints (IP address + QP) even
//! when it came before the first response.

use crate::explain::{Explainer, Facts, Key};
use crate::record::Record;
use core::cmp::Ordering;
use core::fmt;
use core::net::IpAddr;
use std::collections::HashMap;

/// One side of a queue-pair connection: a host and a QP number (`None`
/// while the capture does not show it, e.g. a requester whose requests were
/// never answered).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// The host's IP address.
    pub ip: IpAddr,
    /// The QP number at that host.
    pub qpn: Option<u32>,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.qpn {
            Some(q) => write!(f, "{} QP {q:#x}", self.ip),
            None => write!(f, "{} QP ?", self.ip),
        }
    }
}

/// A conversation: two endpoints, in a canonical order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Conversation(pub Endpoint, pub Endpoint);

impl Conversation {
    /// The conversation between `a` and `b` (order does not matter).
    pub fn of(a: Endpoint, b: Endpoint) -> Conversation {
        if a.cmp(&b) == Ordering::Greater {
            Conversation(b, a)
        } else {
            Conversation(a, b)
        }
    }

    /// Whether either endpoint has QP number `qpn`.
    pub fn has_qpn(&self, qpn: u32) -> bool {
        self.0.qpn == Some(qpn) || self.1.qpn == Some(qpn)
    }
}

/// One item of the capture, in frame order.
#[derive(Clone, Debug)]
pub enum Item {
    /// A RoCEv2 packet.
    Packet {
        /// The decoded packet.
        rec: Box<Record>,
        /// What the connection tracking learned from it.
        facts: Facts,
        /// Its `--explain` lines.
        lines: Vec<String>,
    },
    /// A datagram to the RoCE port whose IP/UDP lengths do not add up.
    Broken {
        /// Frame number.
        frame: u64,
        /// Seconds since the first frame.
        time: f64,
        /// What is wrong.
        why: String,
    },
}

impl Item {
    /// Frame number.
    pub fn frame(&self) -> u64 {
        match self {
            Item::Packet { rec, .. } => rec.frame,
            Item::Broken { frame, .. } => *frame,
        }
    }

    /// Seconds since the first frame of the capture.
    pub fn time(&self) -> f64 {
        match self {
            Item::Packet { rec, .. } => rec.time,
            Item::Broken { time, .. } => *time,
        }
    }

    /// A bad packet (wrong ICRC, structural error, broken lengths).
    pub fn is_bad(&self) -> bool {
        match self {
            Item::Packet { rec, .. } => rec.is_bad(),
            Item::Broken { .. } => true,
        }
    }
}

/// The analysed capture.
#[derive(Default)]
pub struct Analysis {
    /// Every RoCEv2 item in frame order.
    pub items: Vec<Item>,
    /// Ethernet PAUSE / PFC frames, in frame order (not RoCE: shown
    /// between the items, counted in `--stats`).
    pub pauses: Vec<crate::pause::Pause>,
    explainer: Explainer,
    /// Endpoint → its peer, learned from the streams' requester QPs.
    peers: HashMap<(IpAddr, u32), (IpAddr, u32)>,
    /// Requester QP of each stream, once known.
    stream_peer: HashMap<Key, u32>,
}

impl Analysis {
    /// An empty analysis.
    pub fn new() -> Analysis {
        Analysis { explainer: Explainer::new(), ..Analysis::default() }
    }

    /// Analyse and keep one packet.
    pub fn packet(&mut self, rec: Record) {
        let (lines, facts) = self.explainer.analyze(&rec);
        self.items.push(Item::Packet { rec: Box::new(rec), facts, lines });
    }

    /// Keep a broken datagram.
    pub fn broken(&mut self, frame: u64, time: f64, why: String) {
        self.items.push(Item::Broken { frame, time, why });
    }

    /// Call after the last packet: learns every endpoint's peer.
    pub fn finish(&mut self) {
        let mut streams: Vec<(Key, Option<u32>)> = self.explainer.streams().collect();
        streams.sort();
        for ((req_ip, resp_ip, resp_qp), peer) in streams {
            let Some(req_qp) = peer else { continue };
            self.stream_peer.insert((req_ip, resp_ip, resp_qp), req_qp);
            self.peers.entry((resp_ip, resp_qp)).or_insert((req_ip, req_qp));
            self.peers.entry((req_ip, req_qp)).or_insert((resp_ip, resp_qp));
        }
    }

    /// The requester's QP number of a stream, if a response showed it.
    pub fn requester_qp(&self, k: &Key) -> Option<u32> {
        self.stream_peer.get(k).copied()
    }

    /// Source and destination endpoints of a packet; `None` without a BTH.
    ///
    /// The destination is (destination address, destination QP). The
    /// source QP comes from the DETH (UD) or is the destination's learned
    /// peer when that peer lives at the source address; otherwise unknown.
    pub fn endpoints(&self, r: &Record) -> Option<(Endpoint, Endpoint)> {
        let b = r.bth?;
        let dst = Endpoint { ip: r.dst, qpn: Some(b.destqp) };
        let src_qpn = match r.deth {
            Some((_, srcqp)) => Some(srcqp),
            None => match self.peers.get(&(r.dst, b.destqp)) {
                Some(&(ip, q)) if ip == r.src => Some(q),
                _ => None,
            },
        };
        Some((Endpoint { ip: r.src, qpn: src_qpn }, dst))
    }

    /// The conversation a packet belongs to.
    pub fn conversation(&self, r: &Record) -> Option<Conversation> {
        self.endpoints(r).map(|(s, d)| Conversation::of(s, d))
    }

    /// Whether an item belongs to a conversation that QP `qpn` is part of.
    pub fn follows(&self, item: &Item, qpn: u32) -> bool {
        match item {
            Item::Packet { rec, .. } => self.conversation(rec).is_some_and(|c| c.has_qpn(qpn)),
            Item::Broken { .. } => false,
        }
    }
}

/// Which items to show: frame range, `--follow`, `--bad-only`, `--max`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Filter {
    /// First frame shown.
    pub from: Option<u64>,
    /// Last frame shown.
    pub to: Option<u64>,
    /// Only the conversations of this QP number.
    pub follow: Option<u32>,
    /// Only bad packets.
    pub bad_only: bool,
    /// At most this many items.
    pub max: Option<usize>,
}

impl Filter {
    /// The items of `a` that pass, in order.
    pub fn select<'a>(&self, a: &'a Analysis) -> Vec<&'a Item> {
        let mut v = Vec::new();
        for it in &a.items {
            if self.max.is_some_and(|m| v.len() >= m) {
                break;
            }
            let f = it.frame();
            if self.from.is_some_and(|x| f < x) || self.to.is_some_and(|x| f > x) {
                continue;
            }
            if self.bad_only && !it.is_bad() {
                continue;
            }
            if self.follow.is_some_and(|q| !a.follows(it, q)) {
                continue;
            }
            v.push(it);
        }
        v
    }
}

/// Parse a QP number: `0x2a`, `0X2A` or decimal `42`, at most 24 bits.
pub fn parse_qpn(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let v = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse::<u32>(),
    }
    .map_err(|_| format!("not a QP number: {s:?} (use hex 0x2a or decimal 42)"))?;
    if v > 0xFF_FFFF {
        return Err(format!("QP numbers have 24 bits: {s} is too large"));
    }
    Ok(v)
}
