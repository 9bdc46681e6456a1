//! `--stats`: a per-connection summary built from the shared analysis.

use crate::analysis::{Analysis, Conversation, Endpoint, Item};
use crate::explain::{Key, Retx};
use crate::human::ms_text;
use crate::record::{nak_name, rnr_timer_ms, AethKind, Ecn, Record};
use roce_packet::opcode::{OpKind, Transport};
use roce_packet::Psn;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Write};

/// Round-trip statistics in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rtt {
    /// Number of samples.
    pub samples: usize,
    /// Smallest sample.
    pub min: f64,
    /// Median (mean of the two middle samples for an even count).
    pub median: f64,
    /// Largest sample.
    pub max: f64,
}

impl Rtt {
    /// Statistics of `v`; `None` when empty.
    pub fn of(v: &[f64]) -> Option<Rtt> {
        if v.is_empty() {
            return None;
        }
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 };
        Some(Rtt { samples: n, min: s[0], median, max: s[n - 1] })
    }
}

/// What one requester sent its responder, and the answers.
#[derive(Clone, Debug, Default)]
pub struct StreamStats {
    /// The requester (its QP once a response showed it).
    pub requester: Option<Endpoint>,
    /// The responder.
    pub responder: Option<Endpoint>,
    /// `RC` or `UC`.
    pub transport: &'static str,
    /// Request packets (first copies and retransmissions).
    pub request_packets: u64,
    /// Response packets (ACKs, NAKs, READ responses, atomic ACKs).
    pub response_packets: u64,
    /// New messages by class: SEND, WRITE, READ, ATOMIC, ...
    pub messages: BTreeMap<&'static str, u64>,
    /// Payload bytes of first copies of requests.
    pub payload_bytes: u64,
    /// Payload bytes of READ responses.
    pub read_bytes: u64,
    /// Request packets that repeat a PSN.
    pub retx_packets: u64,
    /// Distinct PSNs sent more than once.
    pub retx_psns: BTreeSet<u32>,
    /// NAKs by code name.
    pub naks: BTreeMap<&'static str, u64>,
    /// RNR NAKs.
    pub rnr_naks: u64,
    /// Sum of the waits the RNR NAKs asked for, ms.
    pub rnr_asked_ms: f64,
    /// Sum of the actual waits (RNR NAK to retry), ms.
    pub rnr_waited_ms: f64,
    /// Retransmissions with no NAK before them that start a resend
    /// (the PSN does not advance): inferred retransmission timeouts.
    pub timeouts: u64,
    /// Round-trip samples, µs.
    pub rtt_samples: Vec<f64>,
    /// PSNs that went missing (forward jumps).
    pub psn_gaps: u64,
    last_psn: Option<u32>,
    rnr_times: HashMap<u64, f64>,
}

/// One conversation (two endpoints).
#[derive(Clone, Debug)]
pub struct ConvStats {
    /// The two endpoints, in order of first appearance.
    pub ends: (Endpoint, Endpoint),
    /// Packets of the conversation.
    pub packets: u64,
    /// Packets that belong to no requester→responder stream (UD, CNP,
    /// responses whose requests are not in the capture).
    pub other_packets: u64,
    /// Bad packets.
    pub bad: u64,
    /// Packets a switch marked CE (IP ECN Congestion Experienced).
    pub ce_marked: u64,
    /// CNPs by destination QP (the QP told to slow down).
    pub cnps: BTreeMap<u32, u64>,
    /// First and last frame numbers.
    pub frames: (u64, u64),
    /// First and last times, seconds.
    pub times: (f64, f64),
    /// The streams, in order of first appearance.
    pub streams: Vec<(Key, StreamStats)>,
}

impl ConvStats {
    /// Count one packet of the conversation (not yet its stream).
    fn count(&mut self, rec: &Record) {
        self.packets += 1;
        self.frames.1 = rec.frame;
        self.times.1 = rec.time;
        if rec.is_bad() {
            self.bad += 1;
        }
        if rec.ecn == Ecn::Ce {
            self.ce_marked += 1;
        }
        if let Some(b) = rec.bth.filter(|_| rec.is_cnp()) {
            *self.cnps.entry(b.destqp).or_default() += 1;
        }
    }
}

/// The per-connection summary of `shown` items.
pub fn compute(a: &Analysis, shown: &[&Item]) -> Vec<ConvStats> {
    let mut convs: Vec<ConvStats> = Vec::new();
    let mut index: HashMap<Conversation, usize> = HashMap::new();
    for it in shown {
        let Item::Packet { rec, facts, .. } = it else { continue };
        let Some((src, dst)) = a.endpoints(rec) else { continue };
        let conv = Conversation::of(src, dst);
        let ci = *index.entry(conv).or_insert_with(|| {
            convs.push(ConvStats {
                ends: (src, dst),
                packets: 0,
                other_packets: 0,
                bad: 0,
                ce_marked: 0,
                cnps: BTreeMap::new(),
                frames: (rec.frame, rec.frame),
                times: (rec.time, rec.time),
                streams: Vec::new(),
            });
            convs.len() - 1
        });
        let c = &mut convs[ci];
        c.count(rec);
        let Some(key) = facts.stream else {
            c.other_packets += 1;
            continue;
        };
        let si = match c.streams.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let req = Endpoint { ip: key.0, qpn: a.requester_qp(&key) };
                let resp = Endpoint { ip: key.1, qpn: Some(key.2) };
                c.streams.push((
                    key,
                    StreamStats {
                        requester: Some(req),
                        responder: Some(resp),
                        ..Default::default()
                    },
                ));
                c.streams.len() - 1
            }
        };
        let s = &mut c.streams[si].1;
        let len = rec.payload_len.unwrap_or(0).max(0) as u64;
        let Some(info) = rec.info else { continue };
        let psn = rec.bth.map(|b| b.psn).unwrap_or(0);
        if facts.request {
            s.transport = if info.transport == Transport::Uc { "UC" } else { "RC" };
            s.request_packets += 1;
            if let Some(g) = facts.gap {
                s.psn_gaps += u64::from(g);
            }
            match facts.retx {
                Some(why) => {
                    s.retx_packets += 1;
                    s.retx_psns.insert(psn);
                    match why {
                        Retx::RnrRetry { nak_frame } => {
                            if let Some(t) = s.rnr_times.get(&nak_frame) {
                                s.rnr_waited_ms += (rec.time - t) * 1000.0;
                            }
                        }
                        Retx::Timeout => {
                            let restart =
                                s.last_psn.is_none_or(|p| !Psn::new(psn).is_after(Psn::new(p)));
                            if restart {
                                s.timeouts += 1;
                            }
                        }
                        _ => {}
                    }
                }
                None => {
                    s.payload_bytes += len;
                    if info.position.starts() {
                        let class = match info.kind {
                            OpKind::Send => "SEND",
                            OpKind::Write => "WRITE",
                            OpKind::ReadRequest => "READ",
                            OpKind::CompareSwap | OpKind::FetchAdd => "ATOMIC",
                            OpKind::AtomicWrite => "ATOMIC_WRITE",
                            OpKind::Flush => "FLUSH",
                            _ => "OTHER",
                        };
                        *s.messages.entry(class).or_default() += 1;
                    }
                }
            }
            s.last_psn = Some(psn);
        } else if facts.response {
            s.response_packets += 1;
            if info.kind == OpKind::ReadResponse {
                s.read_bytes += len;
            }
            if let Some(x) = facts.rtt_us {
                s.rtt_samples.push(x);
            }
            match rec.aeth.map(|x| x.kind()) {
                Some(AethKind::RnrNak { timer }) => {
                    s.rnr_naks += 1;
                    s.rnr_asked_ms += rnr_timer_ms(timer);
                    s.rnr_times.insert(rec.frame, rec.time);
                }
                Some(AethKind::Nak { code }) => *s.naks.entry(nak_name(code)).or_default() += 1,
                _ => {}
            }
        }
    }
    convs
}

fn ep_json(e: &Option<Endpoint>) -> Value {
    match e {
        Some(e) => json!({"ip": e.ip.to_string(), "qpn": e.qpn}),
        None => Value::Null,
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// One JSON object per conversation (one per line).
pub fn write_json(convs: &[ConvStats], out: &mut dyn Write) -> io::Result<()> {
    for c in convs {
        let streams: Vec<Value> = c
            .streams
            .iter()
            .map(|(_, s)| {
                let mut m = Map::new();
                m.insert("requester".into(), ep_json(&s.requester));
                m.insert("responder".into(), ep_json(&s.responder));
                m.insert("transport".into(), json!(s.transport));
                m.insert("request_packets".into(), json!(s.request_packets));
                m.insert("response_packets".into(), json!(s.response_packets));
                m.insert("messages".into(), json!(s.messages));
                m.insert("payload_bytes".into(), json!(s.payload_bytes));
                m.insert("read_bytes".into(), json!(s.read_bytes));
                m.insert("retransmitted_packets".into(), json!(s.retx_packets));
                m.insert("retransmitted_psns".into(), json!(s.retx_psns));
                m.insert("psns_missing".into(), json!(s.psn_gaps));
                m.insert("naks".into(), json!(s.naks));
                m.insert("rnr_naks".into(), json!(s.rnr_naks));
                m.insert("rnr_wait_asked_ms".into(), json!(round3(s.rnr_asked_ms)));
                m.insert("rnr_wait_ms".into(), json!(round3(s.rnr_waited_ms)));
                m.insert("timeouts".into(), json!(s.timeouts));
                let rtt = match Rtt::of(&s.rtt_samples) {
                    Some(r) => json!({"samples": r.samples, "min": round3(r.min),
                        "median": round3(r.median), "max": round3(r.max)}),
                    None => json!({"samples": 0}),
                };
                m.insert("rtt_us".into(), rtt);
                Value::Object(m)
            })
            .collect();
        let mut m = Map::new();
        m.insert("endpoints".into(), json!([ep_json(&Some(c.ends.0)), ep_json(&Some(c.ends.1))]));
        m.insert("packets".into(), json!(c.packets));
        m.insert("other_packets".into(), json!(c.other_packets));
        m.insert("bad".into(), json!(c.bad));
        // only when there is congestion: other captures' objects are unchanged
        if c.ce_marked > 0 {
            m.insert("ce_marked".into(), json!(c.ce_marked));
        }
        if !c.cnps.is_empty() {
            let v: Vec<Value> = c.cnps.iter().map(|(q, n)| json!({"qpn": q, "count": n})).collect();
            m.insert("cnps".into(), json!(v));
        }
        m.insert("first_frame".into(), json!(c.frames.0));
        m.insert("last_frame".into(), json!(c.frames.1));
        m.insert("first_time".into(), json!(c.times.0));
        m.insert("last_time".into(), json!(c.times.1));
        m.insert("streams".into(), json!(streams));
        writeln!(out, "{}", Value::Object(m))?;
    }
    Ok(())
}

fn counts(m: &BTreeMap<&'static str, u64>) -> String {
    m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ")
}

fn opt_ep(e: &Option<Endpoint>) -> String {
    e.map(|e| e.to_string()).unwrap_or_else(|| "?".into())
}

fn us(x: f64) -> String {
    format!("{x:.0}")
}

/// The human-readable summary.
pub fn write_text(convs: &[ConvStats], out: &mut dyn Write) -> io::Result<()> {
    if convs.is_empty() {
        writeln!(out, "(no RoCEv2 packets between two endpoints)")?;
    }
    for (i, c) in convs.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        writeln!(
            out,
            "{} <-> {}: {} packets, frames {}-{}, {:.6}-{:.6} s{}",
            c.ends.0,
            c.ends.1,
            c.packets,
            c.frames.0,
            c.frames.1,
            c.times.0,
            c.times.1,
            if c.bad > 0 { format!(", {} bad", c.bad) } else { String::new() }
        )?;
        if c.other_packets > 0 {
            writeln!(
                out,
                "  {} outside any request/response stream (UD, CNP, or unmatched responses)",
                if c.other_packets == 1 {
                    "1 packet".to_string()
                } else {
                    format!("{} packets", c.other_packets)
                }
            )?;
        }
        if let Some(line) = congestion_text(c) {
            writeln!(out, "  {line}")?;
        }
        for (_, s) in &c.streams {
            writeln!(
                out,
                "  {} requests {} -> {}",
                s.transport_name(),
                opt_ep(&s.requester),
                opt_ep(&s.responder)
            )?;
            writeln!(
                out,
                "    packets        {} requests, {} responses",
                s.request_packets, s.response_packets
            )?;
            let total: u64 = s.messages.values().sum();
            let msgs = if total == 0 {
                "0".to_string()
            } else {
                format!("{total} ({})", counts(&s.messages))
            };
            writeln!(out, "    messages       {msgs}")?;
            let mut bytes = format!("{} sent", s.payload_bytes);
            if s.read_bytes > 0 {
                bytes.push_str(&format!(", {} read", s.read_bytes));
            }
            writeln!(out, "    payload bytes  {bytes}")?;
            let psns: Vec<String> = s.retx_psns.iter().map(|p| format!("{p:#x}")).collect();
            let retx = if s.retx_packets == 0 {
                "none".to_string()
            } else {
                format!(
                    "{} packets, {} PSN{} ({})",
                    s.retx_packets,
                    psns.len(),
                    if psns.len() == 1 { "" } else { "s" },
                    truncated_list(&psns)
                )
            };
            writeln!(out, "    retransmitted  {retx}")?;
            if s.psn_gaps > 0 {
                writeln!(out, "    PSNs missing   {}", s.psn_gaps)?;
            }
            let naks = if s.naks.is_empty() { "none".to_string() } else { counts(&s.naks) };
            writeln!(out, "    NAKs           {naks}")?;
            let rnr = if s.rnr_naks == 0 {
                "none".to_string()
            } else {
                format!(
                    "{}, asked to wait {} ms in total, waited {} ms",
                    s.rnr_naks,
                    ms_text(s.rnr_asked_ms),
                    ms_text(s.rnr_waited_ms)
                )
            };
            writeln!(out, "    RNR NAKs       {rnr}")?;
            writeln!(out, "    timeouts       {} inferred", s.timeouts)?;
            let rtt = match Rtt::of(&s.rtt_samples) {
                Some(r) => format!(
                    "{} sample{}: min {} / median {} / max {} µs",
                    r.samples,
                    if r.samples == 1 { "" } else { "s" },
                    us(r.min),
                    us(r.median),
                    us(r.max)
                ),
                None => "no samples".into(),
            };
            writeln!(out, "    round trip     {rtt}")?;
        }
    }
    Ok(())
}

/// `congestion: 2 packets marked CE (ECN), 1 CNP to QP 0x11`; `None`
/// without CE marks and CNPs (the summary of other captures is unchanged).
fn congestion_text(c: &ConvStats) -> Option<String> {
    if c.ce_marked == 0 && c.cnps.is_empty() {
        return None;
    }
    let ce = match c.ce_marked {
        0 => "no packet marked CE (ECN)".to_string(),
        1 => "1 packet marked CE (ECN)".to_string(),
        n => format!("{n} packets marked CE (ECN)"),
    };
    let total: u64 = c.cnps.values().sum();
    let cnps = match c.cnps.len() {
        0 => "no CNPs".to_string(),
        1 => {
            let (q, _) = c.cnps.iter().next()?;
            format!(
                "{} to QP {q:#x}",
                if total == 1 { "1 CNP".into() } else { format!("{total} CNPs") }
            )
        }
        _ => {
            let each: Vec<String> =
                c.cnps.iter().map(|(q, n)| format!("{n} to QP {q:#x}")).collect();
            format!("{total} CNPs: {}", each.join(", "))
        }
    };
    Some(format!("congestion: {ce}, {cnps}"))
}

fn truncated_list(v: &[String]) -> String {
    if v.len() <= 8 {
        v.join(", ")
    } else {
        format!("{}, ... {} more", v[..8].join(", "), v.len() - 8)
    }
}

impl StreamStats {
    fn transport_name(&self) -> &'static str {
        if self.transport.is_empty() {
            "RC"
        } else {
            self.transport
        }
    }
}
