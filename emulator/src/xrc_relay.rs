//! XRC domains shared by the processes of a host (`ibv_open_xrcd` of one
//! file in several processes; see [`crate::xrc`] for XRC itself).
//!
//! On a device shared by several processes each process is a *member* with
//! its own core and a slot: the top byte of its QPNs, and (with this
//! module) of its XRC SRQ numbers. The datagrams of a target QP reach the
//! member that created it (the transport steers by the QPN's top byte), but
//! a request's XRCETH may name an XRC SRQ of another member of the same
//! domain: that SRQ's receive WQEs, CQ and memory are in the other
//! process. So the two members work together, with messages sent from the
//! device's address to itself and steered to the member by byte 5 (as the
//! transport's forwarding envelopes are):
//!
//! - the **owner** of the target QP checks the PSN (step 1 of
//!   [`crate::responder`]), sends the request to the SRQ's member in an
//!   [`EXEC`] message and holds the QP (later requests wait in a queue)
//!   until the answer comes;
//! - the **SRQ's member** runs steps 2..7 on a *shadow* of the target QP
//!   (same QPN, the owner's path MTU, access flags, MSN and address of the
//!   initiator): scatter into the SRQ's receive WQE and complete it on the
//!   SRQ's CQ, or WRITE, READ or atomic on its memory with its PD's keys.
//!   READ responses and atomic acknowledgements leave from there, as the
//!   owner would have sent them; the outcome goes back in a [`VERDICT`];
//! - the owner then acknowledges, NAKs (RNR, or an error that moves the
//!   target QP to ERR), or records the READ/atomic for duplicates, and takes
//!   the next held request.
//!
//! Domains are the same domain when they were opened by the same file
//! (`(st_dev, st_ino)`, `Hca::set_xrcd_key`); a request naming an
//! SRQ of another domain, or one that does not exist, is an invalid
//! request as in one process. A member that never answers (it ended) is
//! given up after [`PATIENCE`]: the request is not acknowledged and the
//! initiator retransmits.
//!
//! Messages: a 16-byte header (opcode [`RELAY_OPCODE`], kind, `XR`, the
//! sender's slot, the receiver's slot at byte 5, `FF FF`, the target QPN,
//! a sequence number), the kind's fields, and an ICRC (the transport checks
//! it as for any datagram). Only messages from the device's own address
//! are taken; anything malformed is dropped and counted (`xrc_relay_dropped`).
//!
//! This module holds the messages and the state; `crate::xrc_member` what
//! the owner and the SRQ's member do with them.

use crate::io::Datagram;
use crate::objects::{SrqHandle, Xrcd, XrcdHandle};
use crate::qp_attr::{AccessFlags, AhAttr, PathMtu};
use crate::time::Instant;
use bytes::Bytes;
use core::time::Duration;
use roce_packet::{IpMeta, IpUdpHeader, Psn, Qpn, UdpEndpoints, ROCE_V2_PORT};
use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr};

/// BTH opcode byte of a relay message (manufacturer-specific range, as the
/// transport's probes 0xFE and envelopes 0xFD).
pub const RELAY_OPCODE: u8 = 0xFC;
/// Kind: a request for the SRQ's member to execute.
pub const EXEC: u8 = 1;
/// Kind: the outcome, back to the target QP's owner.
pub const VERDICT: u8 = 2;
const MAGIC: [u8; 2] = *b"XR";
const HDR: usize = 16;
/// Exec fields after the header: key 16, SRQN 4, MTU 1, max_dest_rd_atomic
/// 1, flags 1, traffic class 1, access 4, MSN 4, dest QPN 4, source port 2,
/// 0 0, initiator's address 16, the target's incarnation 4.
const EXEC_FIXED: usize = HDR + 60;
const VERDICT_LEN: usize = HDR + 24;
/// How long an owner waits for a verdict before it gives the request up.
pub const PATIENCE: Duration = Duration::from_millis(250);
/// Requests held behind one waiting request at most (more are dropped:
/// the initiator retransmits them).
pub const HELD_MAX: usize = 256;

/// An owner's relay state for one target QP (a new one per incarnation:
/// a QP's reset drops it).
#[derive(Debug)]
pub(crate) struct RelayQp {
    /// The incarnation's number, in every EXEC (a member's shadow of an
    /// earlier incarnation is replaced).
    pub gen: u32,
    /// Sequence number of the last EXEC.
    pub seq: u32,
    /// The request whose verdict is awaited.
    pub wait: Option<Wait>,
    /// Requests that arrived meanwhile, in order.
    pub held: VecDeque<Datagram>,
}

#[derive(Debug)]
pub(crate) struct Wait {
    pub seq: u32,
    pub repr: roce_packet::RoceRepr,
    /// A duplicate READ re-executed by the member (no new PSNs).
    pub dup: bool,
    pub since: Instant,
}

impl RelayQp {
    pub fn new(gen: u32) -> RelayQp {
        RelayQp { gen, seq: 0, wait: None, held: VecDeque::new() }
    }
}

/// What the SRQ's member did with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Executed (SEND, WRITE): acknowledge.
    Ack,
    /// Not executed, nothing to say (the initiator retransmits).
    Drop,
    /// No receive WQE: RNR NAK.
    Rnr,
    /// A class B/C/D error: NAK with this code (5 bits), the target to ERR.
    Error(u8),
    /// Answered by the member's own responses (READ, atomic, FLUSH,
    /// ATOMIC_WRITE): `npkts` PSNs consumed; an atomic's original value.
    Answered { npkts: u32, orig: Option<u64> },
}

/// The fields of an EXEC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Exec {
    pub from: u8,
    pub tgt: Qpn,
    pub seq: u32,
    pub key: (u64, u64),
    pub srqn: u32,
    pub mtu: PathMtu,
    pub max_dest_rd_atomic: u8,
    pub dup: bool,
    pub traffic_class: u8,
    pub access: AccessFlags,
    pub msn: u32,
    pub dest_qpn: Qpn,
    pub src_port: u16,
    pub dgid: IpAddr,
    pub gen: u32,
    /// The request as received (BTH to ICRC).
    pub packet: Bytes,
}

/// The member slot an XRC SRQ number belongs to (its top byte).
pub fn srqn_slot(srqn: u32) -> u8 {
    (srqn >> 16) as u8
}

/// Where a request of a target QP in `xrcd` goes when its XRCETH names an
/// SRQ of another member: `(slot, domain key, SRQN)`. `None` when the SRQ
/// is this member's (or this device is not shared, or the domain was not
/// opened by a file).
pub(crate) fn remote_target(
    me: Option<u8>,
    xrcds: &BTreeMap<XrcdHandle, Xrcd>,
    xrcd: Option<XrcdHandle>,
    xrceth: Option<u32>,
) -> Option<(u8, (u64, u64), u32)> {
    let me = me?;
    let srqn = xrceth? & 0x00FF_FFFF;
    let slot = srqn_slot(srqn);
    if slot == me {
        return None;
    }
    let key = xrcds.get(&xrcd?)?.key?;
    Some((slot, key, srqn))
}

fn header(b: &mut Vec<u8>, kind: u8, from: u8, to: u8, tgt: Qpn, seq: u32) {
    b.extend_from_slice(&[RELAY_OPCODE, kind, MAGIC[0], MAGIC[1], from, to, 0xFF, 0xFF]);
    b.extend_from_slice(&tgt.value().to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// A message from the device's address to itself, ICRC filled.
fn datagram(addr: IpAddr, mut b: Vec<u8>) -> Option<Datagram> {
    b.extend_from_slice(&[0; 4]);
    let ep = UdpEndpoints { src: addr, dst: addr, src_port: ROCE_V2_PORT, dst_port: ROCE_V2_PORT };
    let meta = IpMeta::default();
    IpUdpHeader::build(&ep, &meta, b.len()).ok()?.fill_icrc(&mut b);
    Some(Datagram::new(ep, meta, Bytes::from(b)))
}

/// An EXEC for the member in `to`, from the device at `addr`.
pub(crate) fn exec_datagram(addr: IpAddr, to: u8, e: &Exec) -> Option<Datagram> {
    let mut b = Vec::with_capacity(EXEC_FIXED + e.packet.len() + 4);
    header(&mut b, EXEC, e.from, to, e.tgt, e.seq);
    b.extend_from_slice(&e.key.0.to_be_bytes());
    b.extend_from_slice(&e.key.1.to_be_bytes());
    b.extend_from_slice(&e.srqn.to_be_bytes());
    b.extend_from_slice(&[e.mtu as u8, e.max_dest_rd_atomic, u8::from(e.dup), e.traffic_class]);
    b.extend_from_slice(&e.access.0.to_be_bytes());
    b.extend_from_slice(&e.msn.to_be_bytes());
    b.extend_from_slice(&e.dest_qpn.value().to_be_bytes());
    b.extend_from_slice(&e.src_port.to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&v6(e.dgid).octets());
    b.extend_from_slice(&e.gen.to_be_bytes());
    b.extend_from_slice(&e.packet);
    datagram(addr, b)
}

/// A VERDICT on the request `psn` of EXEC `seq`, for the owner in `to`.
pub(crate) fn verdict_datagram(
    addr: IpAddr,
    from: u8,
    to: u8,
    tgt: Qpn,
    seq: u32,
    psn: Psn,
    v: Verdict,
) -> Option<Datagram> {
    let mut b = Vec::with_capacity(VERDICT_LEN + 4);
    header(&mut b, VERDICT, from, to, tgt, seq);
    let (code, nak, npkts, orig) = match v {
        Verdict::Ack => (0u8, 0u8, 0u32, None),
        Verdict::Drop => (1, 0, 0, None),
        Verdict::Rnr => (2, 0, 0, None),
        Verdict::Error(c) => (3, c & 0x1F, 0, None),
        Verdict::Answered { npkts, orig } => (4, 0, npkts, orig),
    };
    b.extend_from_slice(&[code, nak, u8::from(orig.is_some()), 0]);
    b.extend_from_slice(&npkts.to_be_bytes());
    b.extend_from_slice(&orig.unwrap_or(0).to_be_bytes());
    b.extend_from_slice(&psn.value().to_be_bytes());
    b.extend_from_slice(&[0; 4]);
    datagram(addr, b)
}

/// A relay message, parsed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message {
    Exec(Exec),
    Verdict { from: u8, tgt: Qpn, seq: u32, psn: Psn, verdict: Verdict },
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parse a relay message for the member in `me` (`None`: malformed, or
/// not for it). `b` is the UDP payload, ICRC included.
pub(crate) fn parse(b: &Bytes, me: u8) -> Option<Message> {
    if b.len() < HDR + 4 || b[0] != RELAY_OPCODE || b[2..4] != MAGIC || b[5] != me {
        return None;
    }
    let body = b.len() - 4;
    let from = b[4];
    let tgt = Qpn::new(be32(b, 8)?);
    let seq = be32(b, 12)?;
    match b[1] {
        EXEC if body >= EXEC_FIXED => {
            let mtu = match b[36] {
                1 => PathMtu::Mtu256,
                2 => PathMtu::Mtu512,
                3 => PathMtu::Mtu1024,
                4 => PathMtu::Mtu2048,
                5 => PathMtu::Mtu4096,
                _ => return None,
            };
            let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&b[56..72]).ok()?);
            Some(Message::Exec(Exec {
                from,
                tgt,
                seq,
                key: (be64(b, 16)?, be64(b, 24)?),
                srqn: be32(b, 32)? & 0x00FF_FFFF,
                mtu,
                max_dest_rd_atomic: b[37],
                dup: b[38] & 1 != 0,
                traffic_class: b[39],
                access: AccessFlags(be32(b, 40)?),
                msn: be32(b, 44)? & 0x00FF_FFFF,
                dest_qpn: Qpn::new(be32(b, 48)?),
                src_port: u16::from_be_bytes([b[52], b[53]]),
                dgid: ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4),
                gen: be32(b, 72)?,
                packet: b.slice(EXEC_FIXED..body),
            }))
        }
        VERDICT if body == VERDICT_LEN => {
            let orig = (b[18] & 1 != 0).then(|| be64(b, 24)).flatten();
            let verdict = match b[16] {
                0 => Verdict::Ack,
                1 => Verdict::Drop,
                2 => Verdict::Rnr,
                3 => Verdict::Error(b[17] & 0x1F),
                4 => Verdict::Answered { npkts: be32(b, 20)?, orig },
                _ => return None,
            };
            Some(Message::Verdict { from, tgt, seq, psn: Psn::new(be32(b, 32)?), verdict })
        }
        _ => None,
    }
}

/// The address vector of the initiator an EXEC names (the shadow answers
/// READs and atomics to it).
pub(crate) fn initiator_av(e: &Exec) -> AhAttr {
    let mut av = AhAttr::new(e.dgid);
    av.traffic_class = e.traffic_class;
    av
}

/// The SRQ an EXEC names, if it is an XRC SRQ of a domain with the EXEC's
/// key: its handle, PD and CQ.
pub(crate) fn member_srq(
    srqs: &crate::queues::SrqTable,
    xrcds: &BTreeMap<XrcdHandle, Xrcd>,
    e: &Exec,
) -> Option<(SrqHandle, crate::objects::PdHandle, crate::objects::CqHandle)> {
    let h = SrqHandle::from_number(e.srqn);
    let s = srqs.get(&h)?;
    let (d, cq) = s.xrc?;
    (xrcds.get(&d)?.key? == e.key).then_some((h, s.pd, cq))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn exec() -> Exec {
        Exec {
            from: 3,
            tgt: Qpn::new(0x03_0011),
            seq: 7,
            key: (0x801, 0x1234_5678_9abc),
            srqn: 0x05_0002,
            mtu: PathMtu::Mtu1024,
            max_dest_rd_atomic: 4,
            dup: true,
            traffic_class: 0x68,
            access: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
            msn: 0x12_3456,
            dest_qpn: Qpn::new(0x00_0042),
            src_port: 0xC123,
            dgid: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 9)),
            gen: 99,
            packet: Bytes::from_static(&[
                0x64, 0, 0xFF, 0xFF, 0, 3, 0, 0x11, 0, 0, 0, 1, 1, 2, 3, 4,
            ]),
        }
    }

    #[test]
    fn exec_and_verdict_round_trip_and_carry_an_icrc() {
        let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let e = exec();
        let d = exec_datagram(addr, 5, &e).unwrap();
        assert_eq!(d.endpoints.dst, addr);
        assert_eq!(d.payload[5], 5, "steered by byte 5");
        let hdr = IpUdpHeader::build(&d.endpoints, &d.meta, d.payload.len()).unwrap();
        assert!(hdr.verify_icrc(&d.payload));
        assert_eq!(parse(&d.payload, 5), Some(Message::Exec(e.clone())));
        assert_eq!(parse(&d.payload, 4), None, "not for another member");
        for v in [
            Verdict::Ack,
            Verdict::Drop,
            Verdict::Rnr,
            Verdict::Error(2),
            Verdict::Answered { npkts: 3, orig: None },
            Verdict::Answered { npkts: 1, orig: Some(0xDEAD_BEEF_0000_0001) },
        ] {
            let d = verdict_datagram(addr, 5, 3, e.tgt, 7, Psn::new(0xFF_FFFE), v).unwrap();
            assert_eq!(
                parse(&d.payload, 3),
                Some(Message::Verdict {
                    from: 5,
                    tgt: e.tgt,
                    seq: 7,
                    psn: Psn::new(0xFF_FFFE),
                    verdict: v
                })
            );
        }
    }

    #[test]
    fn malformed_messages_are_none() {
        let addr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let d = exec_datagram(addr, 5, &exec()).unwrap();
        let b = d.payload.to_vec();
        for n in 0..EXEC_FIXED + 4 {
            assert_eq!(parse(&Bytes::copy_from_slice(&b[..n]), 5), None, "{n} bytes");
        }
        let mut bad = b.clone();
        bad[36] = 9; // no such MTU
        assert_eq!(parse(&Bytes::from(bad), 5), None);
        let mut bad = b.clone();
        bad[1] = 7; // no such kind
        assert_eq!(parse(&Bytes::from(bad), 5), None);
        let mut bad = b;
        bad[2] = b'Y';
        assert_eq!(parse(&Bytes::from(bad), 5), None);
        let v = verdict_datagram(addr, 5, 3, Qpn::new(1), 1, Psn::new(0), Verdict::Ack).unwrap();
        let mut bad = v.payload.to_vec();
        bad[16] = 9;
        assert_eq!(parse(&Bytes::from(bad), 3), None);
    }

    #[test]
    fn remote_target_only_for_another_members_srq_of_a_keyed_domain() {
        let mut xrcds = BTreeMap::new();
        xrcds.insert(XrcdHandle(1), Xrcd { users: 0, key: Some((1, 2)) });
        xrcds.insert(XrcdHandle(2), Xrcd { users: 0, key: None });
        let d = Some(XrcdHandle(1));
        assert_eq!(
            remote_target(Some(3), &xrcds, d, Some(0x05_0002)),
            Some((5, (1, 2), 0x05_0002))
        );
        assert_eq!(remote_target(Some(5), &xrcds, d, Some(0x05_0002)), None, "own SRQ");
        assert_eq!(remote_target(None, &xrcds, d, Some(0x05_0002)), None, "not shared");
        assert_eq!(remote_target(Some(3), &xrcds, Some(XrcdHandle(2)), Some(0x05_0002)), None);
        assert_eq!(remote_target(Some(3), &xrcds, d, None), None);
    }
}
