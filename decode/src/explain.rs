//! `--explain`: what each packet means for the two queue pairs, in plain
//! English, for someone learning RoCE.
//!
//! The explainer follows every requester→responder stream of the capture,
//! keyed by (source, destination, destination QP) of the requests. A
//! response travels the other way and carries the *requester's* QP number,
//! which no request shows, so responses are paired with a stream by
//! addresses and PSN (and the pairing is remembered). Only what the packets
//! prove is claimed; where the capture cannot tell, the text says so.

use crate::human::ms_text;
use crate::record::{nak_name, rnr_timer_ms, AethKind, AtomicF, BthFields, Ecn, Record, RethF};
use core::net::IpAddr;
use roce_packet::opcode::{OpInfo, OpKind, Position, Transport};
use roce_packet::Psn;
use std::collections::{HashMap, VecDeque};

/// At most this many PSNs are remembered per stream for retransmission
/// reports (older ones are forgotten, never an error).
const MAX_SEEN: usize = 1 << 16;
/// At most this many requests are kept waiting for a response per stream.
const MAX_OUTSTANDING: usize = 4096;

/// IBA Table 46: end-to-end credit codes to receive WQE counts (31 = none).
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// A requester→responder stream: (requester address, responder address,
/// responder QP number).
pub type Key = (IpAddr, IpAddr, u32);

/// Why a request PSN was sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retx {
    /// The retry after an RNR NAK (frame of the NAK).
    RnrRetry {
        /// Frame of the RNR NAK.
        nak_frame: u64,
    },
    /// Go-back-N resend after a PSN sequence error NAK.
    AfterNak {
        /// Frame of the NAK.
        nak_frame: u64,
    },
    /// A copy of a PSN that an ACK already covered.
    Duplicate,
    /// No ACK or NAK before the copy: the retransmission timer probably expired.
    Timeout,
}

/// What the state tracking learned from one packet, in structured form
/// (the same facts the `--explain` text is built from).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Facts {
    /// The requester→responder stream the packet belongs to (requests:
    /// always for RC/UC; responses: when they could be paired).
    pub stream: Option<Key>,
    /// The packet is an RC/UC request (otherwise a response or other).
    pub request: bool,
    /// The packet is an RC response (ACK, NAK, READ response, atomic ACK).
    pub response: bool,
    /// Set when this request PSN was seen before.
    pub retx: Option<Retx>,
    /// Milliseconds since the previous copy of this PSN (retransmissions).
    pub since_prev_ms: Option<f64>,
    /// PSNs missing before this request (a jump forward in sequence).
    pub gap: Option<u32>,
    /// Round-trip sample in microseconds: this response answers a request
    /// with AckReq that was sent exactly once before any answer.
    pub rtt_us: Option<f64>,
}

/// One request the requester sent and the responder has not yet answered.
#[derive(Clone, Debug)]
struct Req {
    psn: Psn,
    /// Last PSN the request occupies (a READ occupies one per response packet).
    last: Psn,
    kind: OpKind,
    /// Bytes: message length so far (SEND/WRITE) or requested (READ, atomics 8).
    bytes: u64,
    /// Packets of a WRITE, or response packets of a READ, once known.
    packets: Option<u32>,
    frame: u64,
    /// The request has all its packets (LAST/ONLY seen).
    complete: bool,
}

/// A requester→responder stream.
#[derive(Default, Debug)]
struct Stream {
    transport: Option<Transport>,
    /// Next new PSN expected from the requester; `None` before the first
    /// request or while a READ of unknown length makes it uncertain.
    next_psn: Option<Psn>,
    /// Frame that first carried each PSN, how often it was seen, and when
    /// it was last sent.
    seen: HashMap<u32, (u64, u32, f64)>,
    outstanding: VecDeque<Req>,
    /// Path MTU, learned from a FIRST or MIDDLE packet's payload.
    pmtu: Option<u32>,
    /// The requester's QP number (the destination QP of responses).
    peer_qp: Option<u32>,
    /// Highest PSN acknowledged so far and the frame that did it.
    acked: Option<(Psn, u64)>,
    /// Last RNR NAK: PSN, time, wait in ms, frame.
    rnr: Option<(Psn, f64, f64, u64)>,
    /// Last PSN-sequence NAK: its PSN, frame, and the requester's next new
    /// PSN at that time (the NAK covers the PSNs in between).
    seq_nak: Option<(Psn, u64, Option<Psn>)>,
    /// Requests that asked for an answer and have not had one: PSN to the
    /// send time, or `None` when sent more than once before any answer
    /// (an answer could then belong to either copy: no RTT sample).
    rtt_pending: HashMap<u32, Option<f64>>,
}

/// Tracks the capture's connections and explains packets one at a time.
#[derive(Default)]
pub struct Explainer {
    streams: HashMap<Key, Stream>,
    /// rsocket connections (rdma-core's rsockets, recognised by the
    /// connection data in their REQ and REP): the (address, QPN) of each
    /// end, whose RDMA WRITEs are then explained as rsocket messages.
    rsockets: std::collections::HashSet<(IpAddr, u32)>,
    /// REQs whose private data is rsocket connection data, by the
    /// requester's comm ID: its address and QPN, until the REP.
    rsocket_reqs: HashMap<u32, (IpAddr, u32)>,
    /// The last CE-marked packet from each sender to each receiver
    /// (addresses): its frame and the QP that sent it, if known; a CNP
    /// from the receiver back to the sender answers it.
    ce_marks: HashMap<(IpAddr, IpAddr), (u64, Option<u32>)>,
    /// An ECN-capable packet was explained (ECT is explained once per
    /// capture: every packet of a device with ECN on is ECT).
    ect_explained: bool,
    /// Facts of the packet being explained.
    facts: Facts,
}

fn hx(p: Psn) -> String {
    format!("{:#x}", p.value())
}

fn plural(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Explainer {
    /// A new explainer with no connection state.
    pub fn new() -> Explainer {
        Explainer::default()
    }

    /// Plain-English lines for `r`, updating the connection state.
    #[cfg(test)]
    pub fn explain(&mut self, r: &Record) -> Vec<String> {
        self.analyze(r).0
    }

    /// The explanation of `r` and the structured facts behind it, updating
    /// the connection state.
    pub fn analyze(&mut self, r: &Record) -> (Vec<String>, Facts) {
        self.facts = Facts::default();
        let lines = self.explain_inner(r);
        (lines, core::mem::take(&mut self.facts))
    }

    /// Every stream seen so far and the requester's QP number once a
    /// response revealed it.
    pub fn streams(&self) -> impl Iterator<Item = (Key, Option<u32>)> + '_ {
        self.streams.iter().map(|(k, s)| (*k, s.peer_qp))
    }

    fn explain_inner(&mut self, r: &Record) -> Vec<String> {
        let Some(b) = r.bth else {
            return vec![
                "too short to hold a BTH and an ICRC: not a RoCEv2 packet; a receiver drops it"
                    .into(),
            ];
        };
        if r.errors.iter().any(|e| e == "truncated_capture") {
            return vec![
                "the capture holds only the first part of this packet (snapshot length), so its \
                 ICRC and length cannot be checked; this says nothing about the packet on the wire"
                    .into(),
            ];
        }
        if let Some(what) = member_message(b.opcode) {
            return vec![format!(
                "a manufacturer-specific opcode, which roce-emu uses between the processes of a \
                 shared device ({what}): sent from the device's address to itself and steered \
                 to one member by byte 5, such a message never leaves the host \
                 (docs/devices.md); a device receiving one from elsewhere drops it"
            )];
        }
        if !r.errors.is_empty() {
            let mut s = format!("malformed ({}): a receiver drops it", r.errors.join(", "));
            if r.info.is_none() || b.tver != 0 {
                s.push_str(
                    "; with an unknown opcode or TVer != 0 it is probably not RoCE at all, \
                     just another application's datagram to UDP port 4791",
                );
            }
            return vec![s];
        }
        if !r.icrc_ok {
            return vec![
                "ICRC bad: a receiver drops this packet silently (no NAK is sent), as if it \
                 had been lost on the wire; reliable connections recover by retransmission"
                    .into(),
            ];
        }
        let Some(info) = r.info else {
            return vec![];
        };
        let mut out = Vec::new();
        if (b.fecn != 0 || b.becn != 0) && info.transport != Transport::Cnp {
            out.push(
                "BTH FECN/BECN bit set (RoCEv2 normally signals congestion in the IP ECN field \
                 and answers with CNPs)"
                    .into(),
            );
        }
        match info.transport {
            Transport::Cnp => out.extend(self.cnp(r, &b)),
            Transport::Ud => {
                out.push(ud_text(r, &b));
                if let Some(line) = self.rsocket_cm(r) {
                    out.push(line);
                }
            }
            Transport::Rd => out.push("Reliable Datagram: decoded but not tracked".into()),
            Transport::Rc | Transport::Uc | Transport::Xrc => {
                if let Some(srqn) = r.xrc_srqn {
                    out.push(format!(
                        "XRC request (XRCETH): the target's XRC receive QP {:#x} executes it \
                         with the XRC SRQ {srqn:#x} of its XRC domain, whose receive WQEs a \
                         SEND takes, whose CQ gets the completion and whose PD the keys are \
                         checked against (one receive QP serves every SRQ of the domain)",
                        b.destqp
                    ));
                }
                if info.is_response() {
                    out.extend(self.response(r, &b, info));
                } else {
                    out.extend(self.request(r, &b, info));
                    if self.rsockets.contains(&(r.dst, b.destqp)) {
                        out.extend(rsocket_write(r));
                    }
                }
            }
        }
        out.extend(self.ecn_line(r, info));
        out
    }

    /// A CNP: what it asks for, a finding when it is not the CNP of Annex
    /// A17.9.3, and the CE mark it answers (each mark is answered once: a
    /// later CNP with no new mark in between is not tied to it).
    fn cnp(&mut self, r: &Record, b: &BthFields) -> Vec<String> {
        let problems = r.cnp_problems();
        let mut out = Vec::new();
        if !problems.is_empty() {
            out.push(format!(
                "malformed CNP ({}): Annex A17.9.3's CNP has BECN set, AckReq clear, PSN 0 and \
                 16 zero reserved bytes; a reaction point may ignore this one",
                problems.join(", ")
            ));
        }
        let mut s = format!(
            "Congestion Notification Packet (Annex A17.9.3): tells QP {:#x} to slow down; its \
             reaction point (DCQCN) cuts the QP's rate; never acknowledged",
            b.destqp
        );
        if problems.is_empty() {
            s.push_str("; BECN set; PSN and the 16 reserved bytes are zero");
        }
        out.push(s);
        // the notification point answers CE marks on packets coming to it
        let mark = self.ce_marks.get(&(r.dst, r.src)).copied();
        if mark.is_some_and(|(_, q)| q.is_none_or(|q| q == b.destqp)) {
            self.ce_marks.remove(&(r.dst, r.src));
        }
        match mark {
            Some((f, Some(q))) if q == b.destqp => {
                out.push(format!("it answers the CE mark on frame {f}, a packet QP {q:#x} sent"))
            }
            Some((f, None)) => out.push(format!(
                "it probably answers the CE mark on frame {f}, the last CE-marked packet from {} \
                 to {} (the capture has not shown yet which QP sent it)",
                r.dst, r.src
            )),
            _ => {}
        }
        out
    }

    /// The IP ECN field of a well-formed packet, when it is not Not-ECT;
    /// a CE mark is remembered for the CNP that answers it.
    fn ecn_line(&mut self, r: &Record, info: &OpInfo) -> Option<String> {
        match r.ecn {
            Ecn::NotEct => None,
            Ecn::Ect0 | Ecn::Ect1 if self.ect_explained => None,
            Ecn::Ect0 | Ecn::Ect1 => {
                self.ect_explained = true;
                Some(format!(
                    "IP ECN {}: sent ECN-capable, so a congested switch marks it CE (Congestion \
                     Experienced) instead of dropping it (said once: the packets that follow \
                     are ECN-capable too unless marked)",
                    r.ecn.name()
                ))
            }
            Ecn::Ce if info.transport == Transport::Cnp => Some(
                "IP ECN CE: a switch on the path found its queue above its ECN threshold and \
                 marked this packet Congestion Experienced; a CNP is never answered with a CNP"
                    .into(),
            ),
            Ecn::Ce => {
                let qp = self.sending_qp(r);
                let key = (r.src, r.dst);
                if self.ce_marks.len() >= MAX_OUTSTANDING && !self.ce_marks.contains_key(&key) {
                    self.ce_marks.clear();
                }
                self.ce_marks.insert(key, (r.frame, qp));
                let to = match qp {
                    Some(q) => format!("the sending QP ({q:#x})"),
                    None => "the sending QP".into(),
                };
                Some(format!(
                    "IP ECN CE: a switch on the path found its queue above its ECN threshold and \
                     marked this packet Congestion Experienced instead of dropping it; the \
                     receiving device answers with a CNP to {to}, at most one per QP per interval"
                ))
            }
        }
    }

    /// The QP that sent `r`, when the packet or the tracking shows it: a
    /// DETH's source QP, a request's requester (once a response revealed
    /// it), a response's responder.
    fn sending_qp(&self, r: &Record) -> Option<u32> {
        if let Some((_, q)) = r.deth {
            return Some(q);
        }
        let key = self.facts.stream?;
        if self.facts.request {
            self.streams.get(&key)?.peer_qp
        } else if self.facts.response {
            Some(key.2)
        } else {
            None
        }
    }
}

/// rdma-core's rsocket connection data, strictly: version 1, only the NET
/// and IOMAP flags, reserved bytes zero, a 2-entry target SGL and a
/// receive buffer (so other programs' private data is not taken for it).
fn rsocket_conn(pd: &[u8]) -> bool {
    roce_rsocket::ConnData::parse(pd).is_ok_and(|c| {
        c.version == 1
            && c.flags & !3 == 0
            && c.reserved == [0; 3]
            && c.target_sgl.length == 2
            && c.data_buf.length > 0
    })
}

/// An RDMA WRITE on an rsocket connection: what it is in the rsockets
/// protocol (the immediate's message, a keepalive, an iomap write).
fn rsocket_write(r: &Record) -> Option<String> {
    let len = r.reth.map(|x| x.dmalen)?;
    let name = r.opcode_name.as_deref().unwrap_or("");
    if !name.contains("RDMA_WRITE") {
        return None;
    }
    Some(match r.immdt {
        Some(imm) => roce_rsocket::explain_imm(imm, len),
        None => roce_rsocket::explain_write(len),
    })
}

fn ud_text(r: &Record, b: &BthFields) -> String {
    let (qkey, srcqp) = r.deth.unwrap_or_default();
    let len = r.payload_len.unwrap_or(0);
    let mut s = match b.destqp {
        // the multicast QPN: the IP destination is the group
        0xFF_FFFF => format!(
            "UD SEND of {len} bytes from QP {srcqp:#x} to the multicast group {} (destination QP \
             0xffffff, Q_Key {qkey:#x}): every QP attached to the group (ibv_attach_mcast, \
             rdma_join_multicast), on every device that joined it, takes one receive WQE of its \
             own if its Q_Key matches, its buffer getting a 40-byte GRH (destination: the group) \
             before the data",
            r.dst
        ),
        _ => format!(
            "UD SEND of {len} bytes from QP {srcqp:#x} to QP {:#x} (Q_Key {qkey:#x}): takes one \
             receive WQE at the destination, whose buffer gets a 40-byte GRH before the data",
            b.destqp
        ),
    };
    if let Some(imm) = r.immdt {
        s.push_str(&format!("; immediate data {imm:#x} goes into the receive completion"));
    }
    if b.destqp == 1 {
        s.push_str("; QP1 is the GSI: this is a management datagram (e.g. a CM MAD)");
        if let Some(c) = &r.cm {
            s.push_str(". ");
            s.push_str(&crate::cm_fmt::explain(c));
        }
    }
    s.push_str("; UD has no ACKs, a lost datagram is simply gone");
    s
}

impl Explainer {
    /// A CM REQ or REP carrying rsocket connection data: what it says, and
    /// (at the REP) the connection's two QPs are remembered as rsockets.
    fn rsocket_cm(&mut self, r: &Record) -> Option<String> {
        use roce_packet::mad::CmMsg;
        match &r.cm.as_deref()?.msg {
            CmMsg::Req(q) => {
                let conn = q.private_data.get(roce_rsocket::consts::CMA_HDR_LEN..)?;
                if !rsocket_conn(conn) {
                    return None;
                }
                self.rsocket_reqs.insert(q.local_comm_id, (r.src, q.local_qpn));
                Some(roce_rsocket::explain_req_private_data(&q.private_data[..]))
            }
            CmMsg::Rep(p) => {
                let (ip, qpn) = *self.rsocket_reqs.get(&p.remote_comm_id)?;
                if !rsocket_conn(&p.private_data[..]) {
                    return None;
                }
                self.rsockets.insert((ip, qpn));
                self.rsockets.insert((r.src, p.local_qpn));
                Some(roce_rsocket::explain_rep_private_data(&p.private_data[..]))
            }
            _ => None,
        }
    }

    fn request(&mut self, r: &Record, b: &BthFields, info: &OpInfo) -> Vec<String> {
        let psn = Psn::new(b.psn);
        let len = r.payload_len.unwrap_or(0).max(0) as u64;
        let key = (r.src, r.dst, b.destqp);
        let st = self.streams.entry(key).or_default();
        st.transport = Some(info.transport);
        // (XRC is RC between an initiator and a target QP: ACKs, NAKs, retries)
        let rc = matches!(info.transport, Transport::Rc | Transport::Xrc);
        let mut out = Vec::new();
        self.facts.stream = Some(key);
        self.facts.request = true;

        // Learn the path MTU: FIRST and MIDDLE packets are exactly one PMTU.
        if matches!(info.position, Position::First | Position::Middle) && len > 0 {
            st.pmtu = Some(len as u32);
        }

        // Sequence: new, retransmitted, or after a gap.
        let mut retrans = false;
        match st.next_psn {
            Some(e) if psn.is_before(e) => {
                retrans = true;
                let (text, why) = retrans_text(st, psn, r);
                self.facts.retx = Some(why);
                self.facts.since_prev_ms =
                    st.seen.get(&psn.value()).map(|(_, _, t)| (r.time - t) * 1000.0);
                out.push(text);
            }
            Some(e) if psn.is_after(e) => {
                let gap = psn.distance(e) as u64;
                self.facts.gap = Some(gap as u32);
                let mut s = format!(
                    "PSN jumps from the expected {} to {}: {} missing (lost, or not in this \
                     capture)",
                    hx(e),
                    hx(psn),
                    plural(gap, "packet", "packets")
                );
                if rc {
                    s.push_str(&format!(
                        "; the responder answers with a PSN_SEQUENCE_ERROR NAK for {}",
                        hx(e)
                    ));
                } else {
                    s.push_str(
                        "; UC does not retransmit, the responder drops the message in progress",
                    );
                }
                out.push(s);
            }
            _ => {}
        }
        if st.seen.len() >= MAX_SEEN && !st.seen.contains_key(&psn.value()) {
            st.seen.clear();
        }
        let e = st.seen.entry(psn.value()).or_insert((r.frame, 0, r.time));
        e.1 += 1;
        e.2 = r.time;

        // Round-trip bookkeeping: a request that asks for an answer.
        if rc && (b.ackreq != 0 || info.kind == OpKind::ReadRequest) {
            if st.rtt_pending.len() >= MAX_OUTSTANDING {
                st.rtt_pending.clear();
            }
            st.rtt_pending.entry(psn.value()).and_modify(|t| *t = None).or_insert(Some(r.time));
        }

        // What the operation does.
        out.push(describe_request(st, r, retrans));

        // Track outstanding requests (RC only: UC has no responses).
        let mut span: Option<u32> = Some(1);
        if !retrans {
            track_request(st, r, psn, len, &mut span);
        } else if info.kind == OpKind::ReadRequest {
            span = read_packets(st.pmtu, r.reth.map(|x| x.dmalen).unwrap_or(0));
        }
        if b.ackreq != 0 && rc {
            if let Some(last) = out.last_mut() {
                last.push_str(" (AckReq: an ACK is requested)");
            }
        }
        // Advance the expected PSN.
        let advance = match st.next_psn {
            Some(e) => !psn.is_before(e),
            None => true,
        };
        if advance {
            st.next_psn = span.map(|n| psn.add(n));
        }
        out
    }

    /// Find the stream a response (travelling responder→requester) belongs to.
    fn find_stream(&mut self, r: &Record) -> Option<Key> {
        let b = r.bth?;
        let psn = Psn::new(b.psn);
        let cands: Vec<Key> = self
            .streams
            .iter()
            .filter(|(k, s)| {
                k.0 == r.dst
                    && k.1 == r.src
                    && matches!(s.transport, Some(Transport::Rc | Transport::Xrc))
            })
            .map(|(k, _)| *k)
            .collect();
        if let Some(k) = cands.iter().find(|k| self.streams[*k].peer_qp == Some(b.destqp)) {
            return Some(*k);
        }
        let unbound: Vec<Key> =
            cands.iter().filter(|k| self.streams[*k].peer_qp.is_none()).copied().collect();
        let covering = unbound.iter().find(|k| {
            self.streams[*k]
                .outstanding
                .iter()
                .any(|q| psn.is_at_or_after(q.psn) && !psn.is_after(q.last))
        });
        let near = unbound.iter().find(|k| {
            let s = &self.streams[*k];
            s.seen.contains_key(&b.psn)
                || s.next_psn.is_some_and(|e| psn.is_before(e) && e.distance(psn) < 1 << 16)
        });
        let chosen = covering.or(near).copied().or(if unbound.len() == 1 {
            Some(unbound[0])
        } else {
            None
        })?;
        if let Some(s) = self.streams.get_mut(&chosen) {
            s.peer_qp = Some(b.destqp);
        }
        Some(chosen)
    }

    fn response(&mut self, r: &Record, b: &BthFields, info: &OpInfo) -> Vec<String> {
        let psn = Psn::new(b.psn);
        let key = self.find_stream(r);
        let mut out = Vec::new();
        self.facts.stream = key;
        self.facts.response = true;
        if let Some(st) = key.and_then(|k| self.streams.get_mut(&k)) {
            if let Some(Some(t)) = st.rtt_pending.remove(&b.psn) {
                self.facts.rtt_us = Some((r.time - t) * 1e6);
            }
            st.rtt_pending.retain(|k, _| Psn::new(*k).is_after(psn));
        }
        let len = r.payload_len.unwrap_or(0).max(0) as u64;
        match info.kind {
            OpKind::ReadResponse => {
                let st = key.and_then(|k| self.streams.get_mut(&k));
                out.push(read_response_text(st, r, psn, len));
            }
            OpKind::AtomicAck => {
                let orig = r.atomicacketh.unwrap_or(0);
                out.push(format!(
                    "atomic result: the 8 bytes at the target address held {orig:#x} before the \
                     operation at PSN {}; the requester's WQE completes with this value",
                    hx(psn)
                ));
                if let Some(st) = key.and_then(|k| self.streams.get_mut(&k)) {
                    retire(st, psn, r.frame);
                }
            }
            _ => {}
        }
        if let Some(a) = r.aeth {
            let st = key.and_then(|k| self.streams.get_mut(&k));
            if let Some(s) = aeth_text(st, r, a.syndrome, a.msn, info.kind) {
                out.push(s);
            }
        }
        if key.is_none() && info.kind == OpKind::Ack {
            out.push("(the requests it answers are not in this capture)".into());
        }
        out
    }
}

/// Response packets a READ of `dmalen` bytes takes at `pmtu` (at least
/// one). Without a known PMTU, a READ of at most 256 bytes (the smallest
/// IB MTU) still takes exactly one.
fn read_packets(pmtu: Option<u32>, dmalen: u32) -> Option<u32> {
    if pmtu.is_none() && dmalen <= 256 {
        return Some(1);
    }
    let p = pmtu?;
    if p == 0 {
        return None;
    }
    Some(dmalen.div_ceil(p).max(1))
}

fn retrans_text(st: &mut Stream, psn: Psn, r: &Record) -> (String, Retx) {
    let (copy, since) = match st.seen.get(&psn.value()) {
        Some((f, n, t)) => (
            format!("copy {}, first sent in frame {f}", n + 1),
            format!(" ({} ms after the previous copy)", ms_text((r.time - t) * 1000.0)),
        ),
        None => ("first copy not in this capture".to_string(), String::new()),
    };
    if let Some((p, t, wait, f)) = st.rnr {
        if p == psn {
            // One retry per RNR NAK; a later copy has another reason.
            st.rnr = None;
            let s = format!(
                "retry of PSN {} after the RNR NAK in frame {f} ({copy}): it came {} ms after \
                 the NAK, which asked for {} ms",
                hx(psn),
                ms_text((r.time - t) * 1000.0),
                ms_text(wait)
            );
            return (s, Retx::RnrRetry { nak_frame: f });
        }
    }
    if let Some((p, f, next)) = st.seq_nak {
        let covered = match next {
            Some(n) => psn.is_at_or_after(p) && psn.is_before(n),
            None => psn.is_at_or_after(p),
        };
        if covered {
            let s = format!(
                "retransmission of PSN {} ({copy}): go-back-N resend after the \
                 PSN_SEQUENCE_ERROR NAK for {} in frame {f}",
                hx(psn),
                hx(p)
            );
            return (s, Retx::AfterNak { nak_frame: f });
        }
    }
    match st.acked {
        Some((a, f)) if !psn.is_after(a) => (
            format!(
            "duplicate of PSN {} (retransmission; {copy}): an ACK covering it was already seen \
             in frame {f}, so that ACK was lost or late; the responder treats this as a \
             duplicate and acknowledges again",
            hx(psn)
        ),
            Retx::Duplicate,
        ),
        _ => (
            format!(
            "retransmission of PSN {} ({copy}): no ACK or NAK for it appears before this point, \
             so the requester's retransmission timer has probably expired{since}",
            hx(psn)
        ),
            Retx::Timeout,
        ),
    }
}

fn imm_inv_suffix(r: &Record) -> String {
    let mut s = String::new();
    if let Some(imm) = r.immdt {
        s.push_str(&format!("; immediate data {imm:#x} goes into the receive completion"));
    }
    if let Some(k) = r.ieth_rkey {
        s.push_str(&format!("; the responder also invalidates rkey {k:#x}"));
    }
    s
}

fn describe_request(st: &Stream, r: &Record, retrans: bool) -> String {
    let Some(info) = r.info else { return String::new() };
    let len = r.payload_len.unwrap_or(0).max(0) as u64;
    let psn = Psn::new(r.bth.map(|b| b.psn).unwrap_or(0));
    let uc = info.transport == Transport::Uc;
    // The message in progress, if this packet continues one (not told for
    // a retransmission), and this packet's number in it.
    let cont = st
        .outstanding
        .back()
        .filter(|q| !q.complete && matches!(q.kind, OpKind::Send | OpKind::Write))
        .filter(|_| !retrans)
        .map(|q| (q, psn.distance(q.psn).max(0) as u64 + 1));
    let s = match info.kind {
        OpKind::Send => describe_send(r, info.position, len, cont),
        OpKind::Write => describe_write(r, info.position, len, cont),
        OpKind::ReadRequest => describe_read(st, r, psn),
        kind => describe_other(r, kind),
    };
    if uc && info.position.starts() && !retrans {
        s + " (UC: no ACKs; if a packet is lost the responder drops the whole message)"
    } else {
        s
    }
}

/// A SEND packet: `cont` is the message it continues and its number in it.
fn describe_send(r: &Record, pos: Position, len: u64, cont: Option<(&Req, u64)>) -> String {
    match pos {
        Position::Only => format!(
            "a whole SEND of {len} bytes in one packet: takes one receive WQE at the responder{}",
            imm_inv_suffix(r)
        ),
        Position::First => format!(
            "first packet of a SEND ({len} bytes): the responder starts filling its next \
             receive WQE"
        ),
        Position::Middle => match cont {
            Some((q, index)) => format!("SEND packet {index} ({} bytes so far)", q.bytes + len),
            _ => format!("middle packet of a SEND ({len} bytes)"),
        },
        Position::Last => match cont {
            Some((q, index)) => format!(
                "last packet of a SEND: the message is {} bytes in {}; the responder completes \
                 the receive WQE{}",
                q.bytes + len,
                plural(index, "packet", "packets"),
                imm_inv_suffix(r)
            ),
            _ => format!(
                "last packet of a SEND ({len} bytes): the responder completes the receive WQE{}",
                imm_inv_suffix(r)
            ),
        },
    }
}

/// An RDMA WRITE packet: `cont` is the message it continues and its number
/// in it.
fn describe_write(r: &Record, pos: Position, len: u64, cont: Option<(&Req, u64)>) -> String {
    match pos {
        Position::Only => {
            let x = r.reth.unwrap_or(RethF { va: 0, rkey: 0, dmalen: 0 });
            let mut s = format!(
                "an RDMA WRITE of {} bytes to va {:#x} (rkey {:#x}) in one packet: placed \
                 straight into the responder's memory",
                x.dmalen, x.va, x.rkey
            );
            if r.immdt.is_some() {
                s.push_str(&format!(
                    ", and because it carries immediate data it also takes a receive WQE{}",
                    imm_inv_suffix(r)
                ));
            } else {
                s.push_str(", no receive WQE used");
            }
            s
        }
        Position::First => {
            let x = r.reth.unwrap_or(RethF { va: 0, rkey: 0, dmalen: 0 });
            let n = if len > 0 { u64::from(x.dmalen).div_ceil(len).max(1) } else { 1 };
            format!(
                "first packet of an RDMA WRITE of {} bytes to va {:#x} (rkey {:#x}): {} of \
                 {len} bytes; no receive WQE used",
                x.dmalen,
                x.va,
                x.rkey,
                plural(n, "packet", "packets")
            )
        }
        Position::Middle => match cont {
            Some((q, index)) => match q.packets {
                Some(n) => format!("RDMA WRITE packet {index} of {n}"),
                None => format!("RDMA WRITE packet {index}"),
            },
            _ => format!("middle packet of an RDMA WRITE ({len} bytes)"),
        },
        Position::Last => {
            let mut s = match cont {
                Some((q, index)) => format!(
                    "last packet of the RDMA WRITE: {} bytes in {}",
                    q.bytes + len,
                    plural(index, "packet", "packets")
                ),
                _ => format!("last packet of an RDMA WRITE ({len} bytes)"),
            };
            if r.immdt.is_some() {
                s.push_str(&format!(
                    "; with immediate data it takes a receive WQE at the responder{}",
                    imm_inv_suffix(r)
                ));
            }
            s
        }
    }
}

/// An RDMA READ request and the PSNs its responses will use.
fn describe_read(st: &Stream, r: &Record, psn: Psn) -> String {
    let x = r.reth.unwrap_or(RethF { va: 0, rkey: 0, dmalen: 0 });
    let mut s = format!(
        "RDMA READ request: asks the responder for {} bytes from va {:#x} (rkey {:#x})",
        x.dmalen, x.va, x.rkey
    );
    match read_packets(st.pmtu, x.dmalen) {
        Some(1) => {
            s.push_str(&format!("; one READ RESPONSE ONLY with PSN {} will carry them", hx(psn)))
        }
        Some(n) => s.push_str(&format!(
            "; {n} response packets will reuse PSNs {} to {}",
            hx(psn),
            hx(psn.add(n - 1))
        )),
        None => s.push_str(&format!(
            "; the response packets reuse PSNs from {} on, one per path MTU",
            hx(psn)
        )),
    }
    s
}

/// The atomics, ATOMIC_WRITE, FLUSH and RESYNC requests.
fn describe_other(r: &Record, kind: OpKind) -> String {
    match kind {
        OpKind::CompareSwap => {
            let x = r.atomiceth.unwrap_or(AtomicF { va: 0, rkey: 0, swap_add: 0, compare: 0 });
            format!(
                "atomic COMPARE_SWAP on the 8 bytes at va {:#x} (rkey {:#x}): if they equal \
                 {:#x} they become {:#x}; the original value comes back in an ATOMIC_ACKNOWLEDGE",
                x.va, x.rkey, x.compare, x.swap_add
            )
        }
        OpKind::FetchAdd => {
            let x = r.atomiceth.unwrap_or(AtomicF { va: 0, rkey: 0, swap_add: 0, compare: 0 });
            format!(
                "atomic FETCH_ADD: adds {:#x} to the 8 bytes at va {:#x} (rkey {:#x}); the \
                 original value comes back in an ATOMIC_ACKNOWLEDGE",
                x.swap_add, x.va, x.rkey
            )
        }
        OpKind::AtomicWrite => {
            let va = r.reth.map(|x| x.va).unwrap_or(0);
            format!("ATOMIC_WRITE: the responder writes these 8 bytes at va {va:#x} as one unit")
        }
        OpKind::Flush => {
            let va = r.reth.map(|x| x.va).unwrap_or(0);
            format!("FLUSH: asks the responder to make earlier RDMA writes at va {va:#x} persistent or visible")
        }
        OpKind::Resync => "RESYNC (Reliable Datagram)".into(),
        _ => String::new(),
    }
}

fn track_request(st: &mut Stream, r: &Record, psn: Psn, len: u64, span: &mut Option<u32>) {
    let Some(info) = r.info else { return };
    match (info.kind, info.position) {
        (OpKind::Send | OpKind::Write, Position::Middle | Position::Last) => {
            if let Some(q) =
                st.outstanding.back_mut().filter(|q| !q.complete && q.kind == info.kind)
            {
                q.bytes += len;
                q.last = psn;
                q.complete = info.position == Position::Last;
                return;
            }
            push_req(st, r, psn, psn, info.kind, len, None, info.position == Position::Last);
        }
        (OpKind::Write, Position::First) => {
            let total = r.reth.map(|x| u64::from(x.dmalen)).unwrap_or(0);
            let n = if len > 0 { Some(total.div_ceil(len).max(1) as u32) } else { None };
            push_req(st, r, psn, psn, info.kind, len, n, false);
        }
        (OpKind::Send, Position::First) => push_req(st, r, psn, psn, info.kind, len, None, false),
        (OpKind::ReadRequest, _) => {
            let dmalen = r.reth.map(|x| x.dmalen).unwrap_or(0);
            let n = read_packets(st.pmtu, dmalen);
            *span = n;
            let last = psn.add(n.unwrap_or(1) - 1);
            push_req(st, r, psn, last, info.kind, u64::from(dmalen), n, true);
        }
        (k, _) => {
            let bytes = if matches!(k, OpKind::CompareSwap | OpKind::FetchAdd) { 8 } else { len };
            push_req(st, r, psn, psn, k, bytes, None, true);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn push_req(
    st: &mut Stream,
    r: &Record,
    psn: Psn,
    last: Psn,
    kind: OpKind,
    bytes: u64,
    packets: Option<u32>,
    complete: bool,
) {
    if st.outstanding.len() >= MAX_OUTSTANDING {
        st.outstanding.pop_front();
    }
    st.outstanding.push_back(Req { psn, last, kind, bytes, packets, frame: r.frame, complete });
}

/// Remove every request that ends at or before `psn`; returns them.
fn retire(st: &mut Stream, psn: Psn, frame: u64) -> Vec<Req> {
    let mut done = Vec::new();
    while let Some(q) = st.outstanding.front() {
        if q.complete && !q.last.is_after(psn) {
            if let Some(q) = st.outstanding.pop_front() {
                done.push(q);
            }
        } else {
            break;
        }
    }
    match st.acked {
        Some((a, _)) if !psn.is_after(a) => {}
        _ => st.acked = Some((psn, frame)),
    }
    done
}

fn read_response_text(st: Option<&mut Stream>, r: &Record, psn: Psn, len: u64) -> String {
    let pos = r.info.map(|i| i.position).unwrap_or(Position::Only);
    let pos_name = match pos {
        Position::First => "FIRST",
        Position::Middle => "MIDDLE",
        Position::Last => "LAST",
        Position::Only => "ONLY",
    };
    let Some(st) = st else {
        return format!(
            "READ RESPONSE {pos_name} ({len} bytes) for PSN {}: the READ request is not in this \
             capture",
            hx(psn)
        );
    };
    if matches!(pos, Position::First | Position::Middle) && len > 0 {
        st.pmtu = Some(len as u32);
    }
    let pmtu = st.pmtu;
    let req = st.outstanding.iter_mut().find(|q| {
        q.kind == OpKind::ReadRequest
            && psn.is_at_or_after(q.psn)
            && psn.distance(q.psn) < q.packets.map(|n| n as i32).unwrap_or(1 << 20)
    });
    let Some(q) = req else {
        return format!(
            "READ RESPONSE {pos_name} ({len} bytes) for PSN {}: no outstanding READ request \
             covers this PSN in the capture",
            hx(psn)
        );
    };
    if q.packets.is_none() && pos == Position::Only {
        q.packets = Some(1);
    }
    if q.packets.is_none() && pos == Position::Last {
        q.packets = Some(psn.distance(q.psn).max(0) as u32 + 1);
    }
    if q.packets.is_none() {
        q.packets = read_packets(pmtu, q.bytes as u32);
        if let Some(n) = q.packets {
            q.last = q.psn.add(n - 1);
        }
    }
    let k = psn.distance(q.psn) + 1;
    let of = match q.packets {
        Some(n) => format!("{k} of {n}"),
        None => format!("{k}"),
    };
    let mut s = format!(
        "READ RESPONSE {pos_name} {of} for the READ at PSN {} ({} bytes requested, frame {})",
        hx(q.psn),
        q.bytes,
        q.frame
    );
    if pos.ends() {
        s.push_str(": the data is complete and the requester's READ WQE finishes");
    }
    s
}

fn aeth_text(
    st: Option<&mut Stream>,
    r: &Record,
    syndrome: u8,
    msn: u32,
    kind: OpKind,
) -> Option<String> {
    let b = r.bth?;
    let psn = Psn::new(b.psn);
    let a = crate::record::AethF { syndrome, msn };
    match a.kind() {
        AethKind::Ack { credit } => Some(ack_text(st, r, psn, msn, credit, kind)),
        AethKind::RnrNak { timer } => {
            let ms = rnr_timer_ms(timer);
            if let Some(st) = st {
                retire(st, psn.sub(1), r.frame);
                st.rnr = Some((psn, r.time, ms, r.frame));
            }
            Some(format!(
                "RNR NAK: the responder had no receive WQE posted for the request at PSN {}; \
                 the requester waits {} ms (timer code {timer}) and retries PSN {}",
                hx(psn),
                ms_text(ms),
                hx(psn)
            ))
        }
        AethKind::Nak { code } => {
            if let Some(st) = st {
                retire(st, psn.sub(1), r.frame);
                if code == 0 {
                    st.seq_nak = Some((psn, r.frame, st.next_psn));
                }
            }
            Some(nak_text(psn, msn, code))
        }
        AethKind::Reserved => Some(format!(
            "AETH syndrome {syndrome:#04x} uses the reserved kind 0b10: a requester ignores it"
        )),
    }
}

/// What a positive ACK (alone or in a READ response or atomic ACK, `kind`)
/// acknowledges and completes; retires what it covers from `st`.
fn ack_text(
    st: Option<&mut Stream>,
    r: &Record,
    psn: Psn,
    msn: u32,
    credit: u8,
    kind: OpKind,
) -> String {
    let credit_text = if credit == 31 {
        "credit 31 = no credit information".to_string()
    } else {
        format!(
            "credit {credit}: the responder has {} receive WQEs posted",
            CREDITS[credit as usize]
        )
    };
    if kind == OpKind::ReadResponse {
        let retired = st.map(|s| retire(s, psn, r.frame).len()).unwrap_or(0);
        let _ = retired;
        return format!(
            "its AETH is also an ACK for every earlier request (MSN {msn}; {credit_text})"
        );
    }
    if kind == OpKind::AtomicAck {
        return format!("AETH: MSN {msn}, {credit_text}");
    }
    let Some(st) = st else {
        return format!(
            "ACK covers everything up to PSN {} (MSN {msn}): the requester can complete \
             those WQEs; {credit_text}",
            hx(psn)
        );
    };
    if let Some((prev, f)) = st.acked {
        if !psn.is_after(prev) {
            retire(st, psn, r.frame);
            return format!(
                "duplicate ACK: PSN {} was already acknowledged (frame {f}); a responder \
                 acknowledges again when it sees a duplicate request (MSN {msn}; \
                 {credit_text})",
                hx(psn)
            );
        }
    }
    let done = retire(st, psn, r.frame);
    let mut s = format!(
        "ACK covers everything up to PSN {} (MSN {msn}): the requester can complete \
         those WQEs",
        hx(psn)
    );
    if let (Some(first), Some(last)) = (done.first(), done.last()) {
        if done.len() == 1 {
            s.push_str(&format!(" (completes the request that started in frame {})", first.frame));
        } else {
            s.push_str(&format!(
                " (completes {} requests, started in frames {} to {})",
                done.len(),
                first.frame,
                last.frame
            ));
        }
    }
    s.push_str(&format!("; {credit_text}"));
    s
}

/// What a NAK with `code` for `psn` means for the requester.
fn nak_text(psn: Psn, msn: u32, code: u8) -> String {
    match code {
        0 => format!(
            "NAK PSN_SEQUENCE_ERROR: the responder expected PSN {0} but got a later one; \
             everything before {0} is acknowledged (MSN {msn}) and the requester resends \
             from PSN {0}",
            hx(psn)
        ),
        1 => format!(
            "NAK INVALID_REQUEST for PSN {}: the responder rejected the request \
             (unsupported operation or bad length); the requester's WQE completes in \
             error and its QP moves to the error state",
            hx(psn)
        ),
        2 => format!(
            "NAK REMOTE_ACCESS_ERROR for PSN {}: the rkey, address, length or access \
             rights failed the responder's check; the requester's WQE completes with a \
             remote access error and its QP moves to the error state",
            hx(psn)
        ),
        3 => format!(
            "NAK REMOTE_OPERATIONAL_ERROR for PSN {}: the responder could not carry out \
             the request; the requester's WQE completes in error and its QP moves to the \
             error state",
            hx(psn)
        ),
        c => format!("NAK {} (code {c}) for PSN {}", nak_name(c), hx(psn)),
    }
}

/// roce-emu's member-to-member messages on a shared device: opcodes of the
/// manufacturer-specific range no device puts on a wire.
fn member_message(opcode: u8) -> Option<&'static str> {
    match opcode {
        0xFC => {
            Some("an XRC request relayed to the process whose XRC SRQ it names, or its verdict")
        }
        0xFD => Some("a datagram forwarded to the member it belongs to"),
        0xFE => Some("a steering probe"),
        _ => None,
    }
}
