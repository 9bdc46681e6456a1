//! One RoCEv2 packet decoded leniently into the oracle's record.
//!
//! Unlike [`roce_packet::RocePacket::new_checked`], which refuses a
//! malformed packet, [`Record::decode`] keeps every field it can read and
//! lists what is wrong in `errors`, with the same names and in the same
//! order as `oracle.py`'s `decode_ib`, so that `roce decode --json` and the
//! oracle can be compared key by key. Nothing here panics on any input.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use roce_packet::ext::{AtomicAckEth, AtomicEth, Deth, Reth, RNR_TIMER_US};
use roce_packet::frame::inet_checksum;
use roce_packet::mad::CmMad;
use roce_packet::opcode::{ExtHeader, OpInfo, OpKind, Transport};
use roce_packet::{bth, icrc, Bth, Opcode};
use serde_json::{json, Map, Value};

/// Where a packet sits in a UDP GSO super-packet (several RoCE packets
/// captured in one UDP datagram before segmentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gso {
    /// Index of this segment, from 0.
    pub segment: usize,
    /// Number of segments in the super-packet.
    pub segments: usize,
    /// UDP payload bytes per segment (the last may be shorter).
    pub size: usize,
}

/// What the decoder needs to know about one RoCEv2 UDP datagram.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// Frame number in the capture, from 1.
    pub frame: u64,
    /// Seconds since the first frame of the capture.
    pub time: f64,
    /// The IP header the ICRC covers (IPv4 with options, or 40-byte IPv6).
    pub ip_header: &'a [u8],
    /// The UDP header the ICRC covers.
    pub udp_header: [u8; 8],
    /// The UDP payload: BTH .. ICRC.
    pub udp_payload: &'a [u8],
    /// UDP length as captured (for a GSO segment: of the whole super-packet).
    pub udp_len: u16,
    /// UDP checksum verdict as captured; `None` when absent (IPv4 zero) or
    /// not checkable (truncated capture).
    pub udp_csum_ok: Option<bool>,
    /// IPv4 header checksum verdict as captured; `None` for IPv6.
    pub ipv4_csum_ok: Option<bool>,
    /// Set for the segments of a UDP GSO super-packet.
    pub gso: Option<Gso>,
    /// Bytes after the IP datagram in the frame (Ethernet padding).
    pub l2_trailer_len: usize,
    /// Errors found by the framing layer (e.g. `truncated_capture`).
    pub frame_errors: Vec<String>,
}

impl<'a> Input<'a> {
    /// An input for a datagram seen exactly as given (no GSO, no trailer):
    /// the UDP length and checksum verdict are taken from the headers.
    #[cfg(test)]
    pub fn simple(
        frame: u64,
        time: f64,
        ip_header: &'a [u8],
        udp_header: [u8; 8],
        udp_payload: &'a [u8],
    ) -> Input<'a> {
        let udp_len = u16::from_be_bytes([udp_header[4], udp_header[5]]);
        let udp_csum_ok = udp_checksum_ok(ip_header, &udp_header, &[udp_payload]);
        Input {
            frame,
            time,
            ip_header,
            udp_header,
            udp_payload,
            udp_len,
            udp_csum_ok,
            ipv4_csum_ok: ipv4_checksum_ok(ip_header),
            gso: None,
            l2_trailer_len: 0,
            frame_errors: Vec::new(),
        }
    }
}

/// The IP ECN field (RFC 3168 section 5): the low two bits of the IPv4
/// TOS byte or the IPv6 traffic class. RoCEv2 congestion control (IBA
/// Annex A17) sends packets ECN-capable (ECT(0) or ECT(1)); a congested
/// switch rewrites that to CE instead of dropping the packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ecn {
    /// 0b00: the sender does not do ECN.
    #[default]
    NotEct,
    /// 0b01: ECN-capable transport, codepoint 1.
    Ect1,
    /// 0b10: ECN-capable transport, codepoint 0.
    Ect0,
    /// 0b11: Congestion Experienced, set by a switch.
    Ce,
}

impl Ecn {
    /// The ECN field of a TOS byte or traffic class.
    pub fn from_tos(tos: u8) -> Ecn {
        match tos & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// `Not-ECT`, `ECT(0)`, `ECT(1)` or `CE` (RFC 3168's names).
    pub fn name(self) -> &'static str {
        match self {
            Ecn::NotEct => "Not-ECT",
            Ecn::Ect1 => "ECT(1)",
            Ecn::Ect0 => "ECT(0)",
            Ecn::Ce => "CE",
        }
    }
}

/// BTH fields as plain integers (the oracle's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BthFields {
    pub opcode: u8,
    pub se: u8,
    pub migreq: u8,
    pub padcnt: u8,
    pub tver: u8,
    pub pkey: u16,
    pub fecn: u8,
    pub becn: u8,
    pub resv6: u8,
    pub destqp: u32,
    pub ackreq: u8,
    pub resv7: u8,
    pub psn: u32,
}

/// RETH values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RethF {
    pub va: u64,
    pub rkey: u32,
    pub dmalen: u32,
}

/// AtomicETH values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicF {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// What an AETH syndrome says (decoded as the oracle does: the kind comes
/// from bits 6..5 even when the reserved bit 7 is set).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AethKind {
    /// Positive acknowledgement with a credit code (31 = no credit info).
    Ack { credit: u8 },
    /// Receiver not ready; retry after the timer (code into IBA Table 45).
    RnrNak { timer: u8 },
    /// Negative acknowledgement with a NAK code.
    Nak { code: u8 },
    /// Kind 0b10, reserved.
    Reserved,
}

/// AETH values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AethF {
    pub syndrome: u8,
    pub msn: u32,
}

impl AethF {
    /// The meaning of the syndrome.
    pub fn kind(&self) -> AethKind {
        let v = self.syndrome & 0x1F;
        match (self.syndrome >> 5) & 3 {
            0 => AethKind::Ack { credit: v },
            1 => AethKind::RnrNak { timer: v },
            3 => AethKind::Nak { code: v },
            _ => AethKind::Reserved,
        }
    }
}

/// The RNR timer code's wait in milliseconds (IBA Table 45).
pub fn rnr_timer_ms(code: u8) -> f64 {
    f64::from(RNR_TIMER_US[(code & 0x1F) as usize]) / 1000.0
}

/// The name of a NAK code (IBA Table 44), as the oracle prints it.
pub fn nak_name(code: u8) -> &'static str {
    match code {
        0 => "PSN_SEQUENCE_ERROR",
        1 => "INVALID_REQUEST",
        2 => "REMOTE_ACCESS_ERROR",
        3 => "REMOTE_OPERATIONAL_ERROR",
        4 => "INVALID_RD_REQUEST",
        _ => "RESERVED",
    }
}

/// One decoded RoCEv2 packet. Field names follow the oracle's record.
#[derive(Clone, Debug)]
pub struct Record {
    pub frame: u64,
    pub time: f64,
    pub ip_version: u8,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub udp_sport: u16,
    pub udp_dport: u16,
    pub udp_len: u16,
    /// IPv4 only: header checksum verdict.
    pub ipv4_csum_ok: Option<bool>,
    /// IPv4 TOS or IPv6 traffic class.
    pub tos: u8,
    /// The ECN field of `tos`.
    pub ecn: Ecn,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    pub udp_csum_ok: Option<bool>,
    pub l2_trailer_bytes: usize,
    /// `None` when the UDP payload is too short for a BTH and an ICRC.
    pub bth: Option<BthFields>,
    pub icrc_wire: Option<[u8; 4]>,
    pub icrc_expected: Option<[u8; 4]>,
    pub icrc_ok: bool,
    /// `RC_SEND_ONLY`, `CNP`, `UNKNOWN_0x1e`, ...; `None` without a BTH.
    pub opcode_name: Option<String>,
    /// The opcode table entry, `None` for an unknown opcode.
    pub info: Option<&'static OpInfo>,
    pub rdeth_eecnxt: Option<u32>,
    pub deth: Option<(u32, u32)>,
    /// XRC requests: the XRCETH's XRC SRQ number.
    pub xrc_srqn: Option<u32>,
    pub feth: Option<u32>,
    pub reth: Option<RethF>,
    pub atomiceth: Option<AtomicF>,
    pub aeth: Option<AethF>,
    pub atomicacketh: Option<u64>,
    pub immdt: Option<u32>,
    pub ieth_rkey: Option<u32>,
    /// Payload bytes without pad; negative when PadCnt exceeds what is
    /// there (as the oracle reports it). `None` when decoding stopped early.
    pub payload_len: Option<i64>,
    pub gso: Option<Gso>,
    /// A CM MAD (a UD SEND to QP1 whose payload parses as one).
    pub cm: Option<Box<CmMad>>,
    pub errors: Vec<String>,
    pub warnings: Vec<String>,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// IPv4 header checksum verdict; `None` for IPv6 or a short header.
#[cfg(test)]
pub fn ipv4_checksum_ok(ip: &[u8]) -> Option<bool> {
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return None;
    }
    Some(inet_checksum(&[ip]) == 0)
}

/// UDP checksum verdict over `header` + `payload` chunks (`header[4..6]`
/// must hold the length the chunks add up to). `None` for an absent IPv4
/// checksum (zero) or a header too short to tell.
pub fn udp_checksum_ok(ip: &[u8], udp_header: &[u8; 8], payload: &[&[u8]]) -> Option<bool> {
    let csum = be16(udp_header, 6);
    let len: usize = 8 + payload.iter().map(|c| c.len()).sum::<usize>();
    let mut ph = Vec::with_capacity(40);
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            if csum == 0 {
                return None;
            }
            ph.extend_from_slice(&ip[12..20]);
            ph.extend_from_slice(&[0, 17]);
            ph.extend_from_slice(&(len as u16).to_be_bytes());
        }
        Some(6) if ip.len() >= 40 => {
            ph.extend_from_slice(&ip[8..40]);
            ph.extend_from_slice(&(len as u32).to_be_bytes());
            ph.extend_from_slice(&[0, 0, 0, 17]);
        }
        _ => return None,
    }
    let mut chunks: Vec<&[u8]> = vec![&ph, &udp_header[..]];
    chunks.extend_from_slice(payload);
    Some(inet_checksum(&chunks) == 0)
}

fn addrs(ip: &[u8]) -> (u8, IpAddr, IpAddr, u8, u8) {
    let unspec = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            let s = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let d = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (4, IpAddr::V4(s), IpAddr::V4(d), ip[1], ip[8])
        }
        Some(6) if ip.len() >= 40 => {
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&ip[8..24]);
            d.copy_from_slice(&ip[24..40]);
            let tc = ((ip[0] & 0x0F) << 4) | (ip[1] >> 4);
            (6, IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), tc, ip[7])
        }
        Some(v) => (v, unspec, unspec, 0, 0),
        None => (0, unspec, unspec, 0, 0),
    }
}

impl Record {
    /// Decode one datagram. Never fails: problems go into `errors`.
    pub fn decode(inp: &Input<'_>) -> Record {
        let (ip_version, src, dst, tos, ttl) = addrs(inp.ip_header);
        let mut r = Record {
            frame: inp.frame,
            time: inp.time,
            ip_version,
            src,
            dst,
            udp_sport: be16(&inp.udp_header, 0),
            udp_dport: be16(&inp.udp_header, 2),
            udp_len: inp.udp_len,
            ipv4_csum_ok: inp.ipv4_csum_ok,
            tos,
            ecn: Ecn::from_tos(tos),
            ttl,
            udp_csum_ok: inp.udp_csum_ok,
            l2_trailer_bytes: inp.l2_trailer_len,
            bth: None,
            icrc_wire: None,
            icrc_expected: None,
            icrc_ok: false,
            opcode_name: None,
            info: None,
            rdeth_eecnxt: None,
            deth: None,
            xrc_srqn: None,
            feth: None,
            reth: None,
            atomiceth: None,
            aeth: None,
            atomicacketh: None,
            immdt: None,
            ieth_rkey: None,
            cm: None,
            payload_len: None,
            gso: inp.gso,
            errors: inp.frame_errors.clone(),
            warnings: Vec::new(),
        };
        if ip_version == 4 && inp.ip_header.len() != 20 {
            r.warnings.push(
                "ipv4_options (ICRC covers the whole header here; rxe assumes 20 bytes)".into(),
            );
        }
        let ib = inp.udp_payload;
        if ib.len() < bth::LEN + icrc::LEN {
            r.errors.push(if inp.gso.is_some() {
                "gso_segment_too_short".into()
            } else {
                "too_short_for_bth_and_icrc".into()
            });
            return r;
        }
        r.decode_ib(inp.ip_header, &inp.udp_header, ib);
        r
    }

    fn decode_ib(&mut self, ip: &[u8], udp: &[u8; 8], ib: &[u8]) {
        let v = Bth::new_unchecked(&ib[..bth::LEN]);
        let b = BthFields {
            opcode: v.opcode().0,
            se: v.solicited() as u8,
            migreq: v.migreq() as u8,
            padcnt: v.pad_count(),
            tver: v.tver(),
            pkey: v.pkey().value(),
            fecn: v.fecn() as u8,
            becn: v.becn() as u8,
            resv6: v.resv6(),
            destqp: v.dest_qp().value(),
            ackreq: v.ack_req() as u8,
            resv7: v.resv7(),
            psn: v.psn().value(),
        };
        self.bth = Some(b);
        let (body, tail) = ib.split_at(ib.len() - icrc::LEN);
        let wire = [tail[0], tail[1], tail[2], tail[3]];
        let exp = icrc::compute(ip, udp, body);
        self.icrc_wire = Some(wire);
        self.icrc_expected = Some(exp);
        self.icrc_ok = wire == exp;
        if let Some(name) = member_message(ip, ib) {
            // roce-emu's own message between the processes of one shared
            // device (never on a wire): named, not malformed
            self.opcode_name = Some(name.into());
            return;
        }
        if b.tver != 0 {
            self.errors.push("tver_not_0".into());
        }
        let op = Opcode(b.opcode);
        self.opcode_name = Some(op.name());
        let Some(info) = op.info() else {
            self.errors.push("unknown_opcode".into());
            return;
        };
        self.info = Some(info);
        let mut p = bth::LEN;
        for h in info.headers.iter() {
            let n = h.len();
            if p + n > body.len() {
                self.errors.push(format!("truncated_{}", h.name()));
                return;
            }
            let s = &body[p..p + n];
            match h {
                ExtHeader::Reth => {
                    let x = Reth::new_unchecked(s);
                    self.reth =
                        Some(RethF { va: x.va(), rkey: x.rkey().value(), dmalen: x.dma_len() });
                }
                ExtHeader::Aeth => {
                    self.aeth = Some(AethF { syndrome: s[0], msn: be32(s, 0) & 0xFF_FFFF });
                }
                ExtHeader::AtomicEth => {
                    let x = AtomicEth::new_unchecked(s);
                    self.atomiceth = Some(AtomicF {
                        va: x.va(),
                        rkey: x.rkey().value(),
                        swap_add: x.swap_add(),
                        compare: x.compare(),
                    });
                }
                ExtHeader::AtomicAckEth => {
                    self.atomicacketh = Some(AtomicAckEth::new_unchecked(s).orig_rem_data());
                }
                ExtHeader::ImmDt => self.immdt = Some(be32(s, 0)),
                ExtHeader::Ieth => self.ieth_rkey = Some(be32(s, 0)),
                ExtHeader::Deth => {
                    let x = Deth::new_unchecked(s);
                    self.deth = Some((x.qkey().value(), x.src_qp().value()));
                    if x.resv8() != 0 {
                        self.warnings.push("deth_reserved_nonzero".into());
                    }
                }
                ExtHeader::Rdeth => self.rdeth_eecnxt = Some(be32(s, 0) & 0xFF_FFFF),
                ExtHeader::Feth => self.feth = Some(be32(s, 0)),
                ExtHeader::Xrceth => {
                    self.xrc_srqn = Some(be32(s, 0) & 0xFF_FFFF);
                    if s[0] != 0 {
                        self.warnings.push("xrceth_reserved_nonzero".into());
                    }
                }
                ExtHeader::CnpPad => {
                    if s.iter().any(|&x| x != 0) {
                        self.warnings.push("cnp_reserved_nonzero".into());
                    }
                }
            }
            p += n;
        }
        let rest = body.len() - p;
        let pad = usize::from(b.padcnt);
        self.payload_len = Some(rest as i64 - pad as i64);
        if b.destqp == 1 && self.deth.is_some() && rest >= pad {
            // QP1 is the GSI: a management datagram, maybe the CM's
            self.cm = CmMad::parse(&body[p..body.len() - pad]).ok().map(Box::new);
        }
        if rest & 3 != 0 {
            self.errors.push(format!("payload_plus_pad_not_multiple_of_4 ({rest})"));
        }
        if rest < pad {
            self.errors.push("padcnt_exceeds_payload".into());
        }
        if !info.has_payload && rest != 0 {
            self.errors.push(format!("unexpected_payload ({rest} bytes)"));
        }
        if pad > 0 && body[body.len().saturating_sub(pad)..].iter().any(|&x| x != 0) {
            self.warnings.push("pad_bytes_nonzero".into());
        }
        if info.kind == OpKind::AtomicWrite && self.payload_len != Some(8) {
            self.errors.push("atomic_write_payload_not_8".into());
        }
    }

    /// A CNP (opcode 0x81).
    pub fn is_cnp(&self) -> bool {
        self.info.is_some_and(|i| i.transport == Transport::Cnp)
    }

    /// How a CNP differs from Annex A17.9.3's (BECN set, AckReq clear,
    /// PSN 0, 16 zero reserved bytes), in words; empty for a well-formed
    /// CNP or another packet. These are findings, not `errors`: the packet
    /// is not bad for them (the oracle does not flag them either).
    pub fn cnp_problems(&self) -> Vec<String> {
        let mut v = Vec::new();
        let Some(b) = self.bth.filter(|_| self.is_cnp()) else { return v };
        if b.becn == 0 {
            v.push("BECN not set".to_string());
        }
        if b.ackreq != 0 {
            v.push("AckReq set".to_string());
        }
        if b.psn != 0 {
            v.push(format!("PSN {:#x} not 0", b.psn));
        }
        if self.warnings.iter().any(|w| w == "cnp_reserved_nonzero") {
            v.push("reserved bytes not 0".to_string());
        }
        v
    }

    /// A bad packet: wrong ICRC or a structural error (warnings do not count).
    pub fn is_bad(&self) -> bool {
        !self.icrc_ok || !self.errors.is_empty()
    }

    /// The oracle's JSON record for this packet (same keys, same order,
    /// integers as JSON numbers, ICRCs as hex strings in wire byte order).
    ///
    /// One key is ours, not the oracle's: `"ecn"` (after the IP TOS / TTL
    /// keys), the name of the ECN field ([`Ecn::name`]), present only when
    /// the packet is ECN-capable or CE-marked: a Not-ECT packet's record is
    /// exactly the oracle's.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("frame".into(), json!(self.frame));
        m.insert("ip_version".into(), json!(self.ip_version));
        m.insert("src".into(), json!(self.src.to_string()));
        m.insert("dst".into(), json!(self.dst.to_string()));
        m.insert("udp_sport".into(), json!(self.udp_sport));
        m.insert("udp_dport".into(), json!(self.udp_dport));
        m.insert("udp_len".into(), json!(self.udp_len));
        if self.ip_version == 4 {
            m.insert("ipv4_csum_ok".into(), json!(self.ipv4_csum_ok));
            m.insert("ip_tos".into(), json!(self.tos));
            m.insert("ip_ttl".into(), json!(self.ttl));
        } else {
            m.insert("ipv6_tc".into(), json!(self.tos));
            m.insert("ipv6_hlim".into(), json!(self.ttl));
        }
        if self.ecn != Ecn::NotEct {
            m.insert("ecn".into(), json!(self.ecn.name()));
        }
        m.insert("udp_csum_ok".into(), json!(self.udp_csum_ok));
        if self.l2_trailer_bytes > 0 {
            m.insert("l2_trailer_bytes".into(), json!(self.l2_trailer_bytes));
        }
        if let Some(g) = self.gso {
            m.insert("gso_size".into(), json!(g.size));
            m.insert("gso_segment".into(), json!(g.segment));
            m.insert("gso_segments".into(), json!(g.segments));
        }
        if let Some(b) = self.bth {
            m.insert("opcode".into(), json!(b.opcode));
            m.insert("se".into(), json!(b.se));
            m.insert("migreq".into(), json!(b.migreq));
            m.insert("padcnt".into(), json!(b.padcnt));
            m.insert("tver".into(), json!(b.tver));
            m.insert("pkey".into(), json!(b.pkey));
            m.insert("fecn".into(), json!(b.fecn));
            m.insert("becn".into(), json!(b.becn));
            m.insert("resv6".into(), json!(b.resv6));
            m.insert("destqp".into(), json!(b.destqp));
            m.insert("ackreq".into(), json!(b.ackreq));
            m.insert("resv7".into(), json!(b.resv7));
            m.insert("psn".into(), json!(b.psn));
        }
        if let (Some(w), Some(e)) = (self.icrc_wire, self.icrc_expected) {
            m.insert("icrc_wire".into(), json!(hex4(w)));
            m.insert("icrc_expected".into(), json!(hex4(e)));
            m.insert("icrc_ok".into(), json!(self.icrc_ok));
        }
        if let Some(n) = &self.opcode_name {
            m.insert("opcode_name".into(), json!(n));
        }
        if let Some(x) = self.rdeth_eecnxt {
            m.insert("rdeth_eecnxt".into(), json!(x));
        }
        if let Some((qkey, srcqp)) = self.deth {
            m.insert("deth".into(), json!({"qkey": qkey, "srcqp": srcqp}));
        }
        if let Some(x) = self.xrc_srqn {
            m.insert("xrceth".into(), json!({"xrcsrq": x}));
        }
        if let Some(x) = self.feth {
            m.insert("feth".into(), json!(x));
        }
        if let Some(x) = self.reth {
            m.insert("reth".into(), json!({"va": x.va, "rkey": x.rkey, "dmalen": x.dmalen}));
        }
        if let Some(x) = self.atomiceth {
            m.insert(
                "atomiceth".into(),
                json!({"va": x.va, "rkey": x.rkey, "swap_add": x.swap_add, "compare": x.compare}),
            );
        }
        if let Some(a) = self.aeth {
            m.insert("aeth".into(), aeth_json(&a));
        }
        if let Some(x) = self.atomicacketh {
            m.insert("atomicacketh".into(), json!({ "orig_rem_data": x }));
        }
        if let Some(x) = self.immdt {
            m.insert("immdt".into(), json!(x));
        }
        if let Some(x) = self.ieth_rkey {
            m.insert("ieth_rkey".into(), json!(x));
        }
        if let Some(x) = self.payload_len {
            m.insert("payload_len".into(), json!(x));
        }
        if let Some(c) = &self.cm {
            m.insert("cm".into(), crate::cm_fmt::json(c));
        }
        if !self.errors.is_empty() {
            m.insert("errors".into(), json!(self.errors));
        }
        if !self.warnings.is_empty() {
            m.insert("warnings".into(), json!(self.warnings));
        }
        Value::Object(m)
    }
}

fn aeth_json(a: &AethF) -> Value {
    let mut m = Map::new();
    m.insert("syndrome".into(), json!(a.syndrome));
    m.insert("msn".into(), json!(a.msn));
    if a.syndrome & 0x80 != 0 {
        m.insert("reserved_bit_set".into(), json!(true));
    }
    match a.kind() {
        AethKind::Ack { credit } => {
            m.insert("kind".into(), json!("ACK"));
            m.insert("credit".into(), json!(credit));
        }
        AethKind::RnrNak { timer } => {
            m.insert("kind".into(), json!("RNR_NAK"));
            m.insert("rnr_timer".into(), json!(timer));
            m.insert("rnr_timer_ms".into(), json!(rnr_timer_ms(timer)));
        }
        AethKind::Nak { code } => {
            m.insert("kind".into(), json!("NAK"));
            m.insert("nak_code".into(), json!(code));
            m.insert("nak".into(), json!(nak_name(code)));
        }
        AethKind::Reserved => {
            m.insert("kind".into(), json!("RESERVED"));
        }
    }
    Value::Object(m)
}

/// Four bytes as 8 lowercase hex digits, in the given (wire) order.
pub fn hex4(b: [u8; 4]) -> String {
    format!("{:02x}{:02x}{:02x}{:02x}", b[0], b[1], b[2], b[3])
}

/// roce-emu's messages between the members of a shared device, sent from
/// the device's address to itself (manufacturer-specific opcodes): their
/// names, `None` for anything else (docs/devices.md).
fn member_message(ip: &[u8], ib: &[u8]) -> Option<&'static str> {
    let to_itself = match ip.first().map(|v| v >> 4) {
        Some(4) if ip.len() >= 20 => ip[12..16] == ip[16..20],
        Some(6) if ip.len() >= 40 => ip[8..24] == ip[24..40],
        _ => false,
    };
    if !to_itself || ib.len() < 12 {
        return None;
    }
    match (ib[0], &ib[1..4], &ib[6..8]) {
        (0xFC, [1, b'X', b'R'], _) => Some("ROCE_EMU_XRC_EXEC"),
        (0xFC, [2, b'X', b'R'], _) => Some("ROCE_EMU_XRC_VERDICT"),
        (0xFD, _, [0xFF, 0xFF]) => Some("ROCE_EMU_FORWARD"),
        (0xFE, _, _) => Some("ROCE_EMU_PROBE"),
        _ => None,
    }
}
