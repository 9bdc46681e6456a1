//! The receive side of a device shared by several processes (see
//! `docs/devices.md`, "One device, many processes").
//!
//! Every member process of a shared UDP device binds the device's IP:4791
//! in one `SO_REUSEPORT` group, and a classic BPF program on the group
//! steers each datagram by the top byte of its BTH destination QPN: the
//! member's **slot** (member `s` creates QPNs `s << 16 | n`). The program
//! is built and attached by `roce-host`; this module is the part that runs
//! in the transport, on every received datagram:
//!
//! - a **probe** (a datagram that no RoCE peer sends: BTH opcode `0xFF`, the
//!   manufacturer-specific range, with a magic and a nonce) is answered
//!   with this member's slot: the program returns the probe's byte 1 as the
//!   socket index, so the prober learns which socket index holds which slot
//!   (the kernel renumbers the group when a socket closes);
//! - a datagram whose QPN carries **another slot** reached the wrong member
//!   (the program is stale after a member died, or the slot's owner is gone):
//!   it is not handed to this member's core: it is **forwarded** to its
//!   member in an envelope (below), counted, and the member's steward is
//!   woken to re-steer the group;
//! - an **envelope** (BTH opcode `0xFD`: a datagram one member forwards to
//!   another, sent from the device's own address to itself) carries the
//!   original datagram and its source address and port; its byte 5 is the
//!   target slot, where the program looks for a QPN's slot, so the program
//!   steers it with no rule of its own. The target member delivers the
//!   datagram as if it had come straight from its source (the ICRC covers
//!   the source address and port); another member forwards it again, at
//!   most [`MAX_HOPS`] times in all;
//! - everything else (this slot's QPNs, QP1, bytes too short to be a BTH) goes
//!   on to the ICRC check and the core, as for an unshared device.
//!
//! A member that leaves forwards what its socket still holds the same way
//! (`roce-host`'s steward): a datagram that reached the wrong socket while
//! the group changed is not lost. RoCE assumes a lossless fabric, and a
//! connection's last ACK lost on the host is never sent again once its
//! sender has gone (its peer then retransmits for ever).
//!
//! No I/O here except the probe answer and forwarding, which the transport
//! does.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::{Condvar, Mutex};

/// BTH opcode byte of a steering probe (manufacturer-specific range).
pub const PROBE_OPCODE: u8 = 0xFF;
/// First byte of a probe answer.
pub const ANSWER_OPCODE: u8 = 0xFE;
/// The magic after the index byte of probes and answers.
pub const MAGIC: [u8; 2] = *b"RS";
/// Length of a probe: opcode, index, magic, 8-byte nonce.
pub const PROBE_LEN: usize = 12;
/// Length of an answer: a probe's 12 bytes with the opcode changed, then
/// the answering slot and the answering process id (4 bytes, big-endian).
pub const ANSWER_LEN: usize = 17;
/// The QPN bit where the slot starts: slot `s` owns QPNs `s << 16 ..
/// (s + 1) << 16`.
pub const SLOT_SHIFT: u32 = 16;

/// The byte the kernel steers a datagram by to a shared device's member:
/// BTH byte 5, the destination QPN's top byte (a member's slot; 0 for a
/// datagram too short to have one).
pub fn steer_byte(payload: &[u8]) -> u8 {
    payload.get(5).copied().unwrap_or(0)
}

/// A steering probe for socket index `index`.
pub fn probe(index: u8, nonce: u64) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[0] = PROBE_OPCODE;
    p[1] = index;
    p[2..4].copy_from_slice(&MAGIC);
    p[4..12].copy_from_slice(&nonce.to_be_bytes());
    p
}

/// The answer of the member in `slot` (process `pid`) to `probe`.
pub fn answer(probe: &[u8; PROBE_LEN], slot: u8, pid: u32) -> [u8; ANSWER_LEN] {
    let mut a = [0u8; ANSWER_LEN];
    a[..PROBE_LEN].copy_from_slice(probe);
    a[0] = ANSWER_OPCODE;
    a[12] = slot;
    a[13..17].copy_from_slice(&pid.to_be_bytes());
    a
}

/// A parsed answer: `(index, nonce, slot, pid)`, or `None` if `b` is not
/// one.
pub fn parse_answer(b: &[u8]) -> Option<(u8, u64, u8, u32)> {
    if b.len() != ANSWER_LEN || b[0] != ANSWER_OPCODE || b[2..4] != MAGIC {
        return None;
    }
    let nonce = u64::from_be_bytes(b[4..12].try_into().ok()?);
    let pid = u32::from_be_bytes(b[13..17].try_into().ok()?);
    Some((b[1], nonce, b[12], pid))
}

/// What a member does with one received datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it on (this slot's QPN, QP1, or not a BTH at all: the core
    /// drops and counts what it cannot parse).
    Mine,
    /// A steering probe: answer it, deliver nothing.
    Probe([u8; PROBE_LEN]),
    /// A datagram for another slot's QPN: forward it, count it, wake the
    /// steward.
    Foreign(u8),
    /// An envelope ([`wrap`]) for `slot`, forwarded `hops` times so far,
    /// carrying a datagram from `src` (after [`FORWARD_HDR`] bytes).
    Envelope { slot: u8, hops: u8, src: SocketAddr },
}

/// BTH opcode byte of an envelope: a datagram forwarded from one member of
/// a shared device to another (manufacturer-specific range, as probes).
pub const FORWARD_OPCODE: u8 = 0xFD;
/// The envelope's header: opcode, hops, magic, 0, target slot, `FF FF`
/// (so that no QPN-1 rule matches), source port (2 bytes), 0 0, source
/// address (16 bytes: IPv6, or IPv4-mapped).
pub const FORWARD_HDR: usize = 28;
/// How many times a datagram is forwarded at most (a stale program can
/// steer an envelope to the wrong member too; one for a slot nobody holds
/// any more ends there).
pub const MAX_HOPS: u8 = 3;

/// `payload`, received from `src`, in an envelope for the member in `slot`
/// that has been forwarded `hops` times (1 for the first forward).
pub fn wrap(payload: &[u8], src: SocketAddr, slot: u8, hops: u8) -> Vec<u8> {
    let mut b = Vec::with_capacity(FORWARD_HDR + payload.len());
    b.extend_from_slice(&[FORWARD_OPCODE, hops, MAGIC[0], MAGIC[1], 0, slot, 0xFF, 0xFF]);
    b.extend_from_slice(&src.port().to_be_bytes());
    b.extend_from_slice(&[0, 0]);
    let ip = match src.ip() {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    };
    b.extend_from_slice(&ip.octets());
    b.extend_from_slice(payload);
    b
}

/// The envelope in `b`, if it is one: `(slot, hops, src)`.
pub fn unwrap(b: &[u8]) -> Option<(u8, u8, SocketAddr)> {
    if b.len() < FORWARD_HDR || b[0] != FORWARD_OPCODE || b[2..4] != MAGIC || b[6..8] != [0xFF; 2] {
        return None;
    }
    let port = u16::from_be_bytes([b[8], b[9]]);
    let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&b[12..28]).ok()?);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    Some((b[5], b[1], SocketAddr::new(ip, port)))
}

/// The envelope `b` forwarded once more, or `None` once it has been
/// forwarded [`MAX_HOPS`] times (or is none).
pub fn rewrap(b: &[u8]) -> Option<Vec<u8>> {
    let (_, hops, _) = unwrap(b)?;
    if hops >= MAX_HOPS {
        return None;
    }
    let mut v = b.to_vec();
    v[1] = hops + 1;
    Some(v)
}

/// The wake-up of one member's steward, shared between the
/// transport (which notes) and the steward thread (which waits).
#[derive(Debug, Default)]
pub struct SteerShared {
    /// Slots seen in foreign datagrams since the steward last looked (a
    /// bitmap of 256 slots), and whether the steward should stop.
    state: Mutex<WakeState>,
    cond: Condvar,
}

#[derive(Debug, Default)]
struct WakeState {
    slots: [u64; 4],
    stop: bool,
}

/// What [`SteerShared::wait`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Foreign datagrams for these slots arrived.
    Foreign(Vec<u8>),
    /// [`SteerShared::stop`] was called.
    Stop,
    /// Nothing happened within the wait's time.
    Idle,
}

impl SteerShared {
    /// Note a foreign datagram for `slot` (wakes the steward, once until
    /// it has looked).
    pub fn note_foreign(&self, slot: u8) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (w, b) = (usize::from(slot / 64), slot % 64);
        if g.slots[w] & (1 << b) == 0 {
            g.slots[w] |= 1 << b;
            self.cond.notify_all();
        }
    }

    /// Whether [`SteerShared::stop`] was called.
    pub fn stopping(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).stop
    }

    /// Ask the steward to end.
    pub fn stop(&self) {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        g.stop = true;
        self.cond.notify_all();
    }

    /// Wait up to `timeout` for foreign datagrams or a stop; takes the
    /// noted slots.
    pub fn wait(&self, timeout: std::time::Duration) -> Wake {
        let g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (mut g, _) = self
            .cond
            .wait_timeout_while(g, timeout, |s| !s.stop && s.slots == [0; 4])
            .unwrap_or_else(|e| e.into_inner());
        if g.stop {
            return Wake::Stop;
        }
        let bits = std::mem::take(&mut g.slots);
        let slots: Vec<u8> =
            (0..=255u8).filter(|s| bits[usize::from(s / 64)] & (1 << (s % 64)) != 0).collect();
        if slots.is_empty() {
            Wake::Idle
        } else {
            Wake::Foreign(slots)
        }
    }
}

/// Which member (slot) listens on a CM service ID on this device, if any
/// (the host's registry; asked only for connection requests, which are rare).
#[derive(Clone)]
pub struct ListenerOf(pub std::sync::Arc<dyn Fn(u64) -> Option<u8> + Send + Sync>);

impl std::fmt::Debug for ListenerOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListenerOf")
    }
}

/// The transport's view of its member: its slot and the shared state.
#[derive(Clone, Debug)]
pub struct SteerTap {
    /// This member's slot.
    pub slot: u8,
    /// The steward's wake-up.
    pub shared: std::sync::Arc<SteerShared>,
    /// This process's id (in probe answers).
    pub pid: u32,
    /// Who listens on a service ID: a REQ or SIDR_REQ that reached this
    /// member while another one listens on its service ID came by a stale
    /// program (a member ended without leaving, the kernel renumbered the
    /// group): it is foreign, not this member's CM's to reject. `None`:
    /// every request is this member's.
    pub listener_of: Option<ListenerOf>,
}

impl SteerTap {
    /// Classify one received UDP payload.
    pub fn classify(&self, payload: &[u8]) -> Verdict {
        if payload.len() < 12 {
            return Verdict::Mine;
        }
        if payload[0] == PROBE_OPCODE {
            if payload.len() == PROBE_LEN && payload[2..4] == MAGIC {
                let mut p = [0u8; PROBE_LEN];
                p.copy_from_slice(payload);
                return Verdict::Probe(p);
            }
            return Verdict::Mine;
        }
        if payload[0] == FORWARD_OPCODE {
            if let Some((slot, hops, src)) = unwrap(payload) {
                return Verdict::Envelope { slot, hops, src };
            }
            return Verdict::Mine;
        }
        let qpn = u32::from_be_bytes([0, payload[5], payload[6], payload[7]]);
        let slot = match qpn {
            1 => match cm_target_slot(payload) {
                Some(s) => s,
                None => match (self.listener_of.as_ref(), cm_service_id(payload)) {
                    (Some(l), Some(sid)) => match (l.0)(sid) {
                        Some(s) => s,
                        None => return Verdict::Mine,
                    },
                    _ => return Verdict::Mine,
                },
            },
            _ => payload[5],
        };
        if slot == self.slot {
            Verdict::Mine
        } else {
            Verdict::Foreign(slot)
        }
    }
}

/// Offset of the MAD's management class in a QP1 datagram (BTH 12 and
/// DETH 8 bytes before the MAD).
pub const MAD_CLASS_AT: usize = 21;
/// Offset of the MAD's attribute ID (2 bytes).
pub const MAD_ATTR_AT: usize = 36;
/// Offset of the CM message (the MAD's data).
pub const CM_DATA_AT: usize = 44;
/// The CM's management class.
pub const CM_CLASS: u8 = 0x07;
/// CM attribute IDs that name a service ID (steered to its listener).
pub const CM_ATTR_REQ: u16 = 0x0010;
/// SIDR_REQ (steered by service ID too).
pub const CM_ATTR_SIDR_REQ: u16 = 0x0017;
/// SIDR_REP: steered by its request ID (the requester's).
pub const CM_ATTR_SIDR_REP: u16 = 0x0018;

/// The slot a CM message in a QP1 datagram belongs to: the top byte of
/// the receiver's communication ID (the message's remote comm ID, bytes
/// 4..8 of every CM message after the REQ; a SIDR_REP's request ID,
/// bytes 0..4). `None` for a REQ or SIDR_REQ (steered by service ID to
/// the listener), a MAD of another class and anything too short.
pub fn cm_target_slot(payload: &[u8]) -> Option<u8> {
    if *payload.get(MAD_CLASS_AT)? != CM_CLASS {
        return None;
    }
    let attr = u16::from_be_bytes([*payload.get(MAD_ATTR_AT)?, *payload.get(MAD_ATTR_AT + 1)?]);
    match attr {
        CM_ATTR_REQ | CM_ATTR_SIDR_REQ => None,
        CM_ATTR_SIDR_REP => payload.get(CM_DATA_AT).copied(),
        0x0011..=0x0016 | 0x0019 | 0x001A => payload.get(CM_DATA_AT + 4).copied(),
        _ => None,
    }
}

/// Offset of the service ID of a REQ or SIDR_REQ (8 bytes).
pub const CM_SERVICE_ID_AT: usize = CM_DATA_AT + 8;

/// The service ID of a CM REQ or SIDR_REQ in a QP1 datagram, `None` for
/// anything else.
pub fn cm_service_id(payload: &[u8]) -> Option<u64> {
    if *payload.get(MAD_CLASS_AT)? != CM_CLASS {
        return None;
    }
    let attr = u16::from_be_bytes([*payload.get(MAD_ATTR_AT)?, *payload.get(MAD_ATTR_AT + 1)?]);
    if !matches!(attr, CM_ATTR_REQ | CM_ATTR_SIDR_REQ) {
        return None;
    }
    let b = payload.get(CM_SERVICE_ID_AT..CM_SERVICE_ID_AT + 8)?;
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    fn bth(qpn: u32) -> Vec<u8> {
        let mut b = vec![0u8; 28];
        b[0] = 0x04; // RC SEND ONLY
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    #[test]
    fn classify_by_slot_probe_and_qp1() {
        let t = SteerTap {
            slot: 3,
            shared: Arc::new(SteerShared::default()),
            pid: 7,
            listener_of: Some(ListenerOf(Arc::new(|sid| (sid == 0x0106_1234).then_some(5)))),
        };
        assert_eq!(t.classify(&bth(0x03_0011)), Verdict::Mine);
        assert_eq!(t.classify(&bth(0x04_0011)), Verdict::Foreign(4));
        assert_eq!(t.classify(&bth(0x00_0011)), Verdict::Foreign(0));
        assert_eq!(
            t.classify(&bth(1)),
            Verdict::Mine,
            "QP1, not a CM MAD: whoever the program picked"
        );
        let mut rep = vec![0u8; 20 + 256];
        rep[5..8].copy_from_slice(&[0, 0, 1]);
        rep[MAD_CLASS_AT] = CM_CLASS;
        rep[MAD_ATTR_AT..MAD_ATTR_AT + 2].copy_from_slice(&0x0013u16.to_be_bytes());
        rep[CM_DATA_AT..CM_DATA_AT + 4].copy_from_slice(&0x0712_3456u32.to_be_bytes());
        rep[CM_DATA_AT + 4..CM_DATA_AT + 8].copy_from_slice(&0x0398_7654u32.to_be_bytes());
        assert_eq!(t.classify(&rep), Verdict::Mine, "a REP to our comm ID (slot 3)");
        rep[CM_DATA_AT + 4] = 9;
        assert_eq!(t.classify(&rep), Verdict::Foreign(9), "a REP to slot 9's comm ID");
        rep[MAD_ATTR_AT + 1] = 0x10;
        assert_eq!(t.classify(&rep), Verdict::Mine, "a REQ to nobody's service: ours to reject");
        rep[CM_SERVICE_ID_AT..CM_SERVICE_ID_AT + 8].copy_from_slice(&0x0106_1234u64.to_be_bytes());
        assert_eq!(cm_service_id(&rep), Some(0x0106_1234));
        assert_eq!(t.classify(&rep), Verdict::Foreign(5), "a REQ to slot 5's service: astray");
        rep[MAD_ATTR_AT + 1] = 0x17;
        assert_eq!(t.classify(&rep), Verdict::Foreign(5), "a SIDR_REQ too");
        let quiet = SteerTap { listener_of: None, ..t.clone() };
        assert_eq!(quiet.classify(&rep), Verdict::Mine, "without a registry: every request");
        rep[MAD_ATTR_AT + 1] = 0x10;
        rep[MAD_ATTR_AT + 1] = 0x18;
        assert_eq!(t.classify(&rep), Verdict::Foreign(7), "a SIDR_REP: by its request ID");
        rep[MAD_CLASS_AT] = 0x04;
        assert_eq!(t.classify(&rep), Verdict::Mine, "not the CM's class");
        assert_eq!(t.classify(&[0u8; 5]), Verdict::Mine, "the core counts runts");
        let p = probe(9, 0x1122_3344_5566_7788);
        assert_eq!(t.classify(&p), Verdict::Probe(p));
        let mut not_probe = p.to_vec();
        not_probe.push(0);
        assert_eq!(t.classify(&not_probe), Verdict::Mine, "a probe is exactly 12 bytes");
        let a = answer(&p, 3, 4242);
        assert_eq!(parse_answer(&a), Some((9, 0x1122_3344_5566_7788, 3, 4242)));
        assert_eq!(parse_answer(&p), None);
        assert_eq!(parse_answer(&a[..16]), None);
    }

    #[test]
    fn envelopes_carry_the_datagram_its_source_and_a_hop_count() {
        let t = SteerTap {
            slot: 3,
            shared: Arc::new(SteerShared::default()),
            pid: 7,
            listener_of: None,
        };
        let d = bth(0x04_0011);
        for src in ["127.0.8.2:4791", "[fd00::5]:50123"] {
            let src: SocketAddr = src.parse().unwrap();
            let env = wrap(&d, src, 4, 1);
            assert_eq!(env.len(), FORWARD_HDR + d.len());
            assert_eq!(env[FORWARD_HDR..], d[..], "the datagram, byte for byte");
            assert_eq!(env[5], 4, "the target slot where the program reads a QPN's slot");
            assert_ne!(u32::from_be_bytes([0, env[5], env[6], env[7]]), 1, "never QPN 1");
            assert_eq!(unwrap(&env), Some((4, 1, src)));
            assert_eq!(t.classify(&env), Verdict::Envelope { slot: 4, hops: 1, src });
            let mine = wrap(&d, src, 3, 2);
            assert_eq!(t.classify(&mine), Verdict::Envelope { slot: 3, hops: 2, src });
        }
        let src: SocketAddr = "127.0.8.2:4791".parse().unwrap();
        let mut env = wrap(&d, src, 4, 1);
        for hops in 2..=MAX_HOPS {
            env = rewrap(&env).expect("forwarded again");
            assert_eq!(unwrap(&env), Some((4, hops, src)));
        }
        assert_eq!(rewrap(&env), None, "not past MAX_HOPS");
        // malformed envelopes are the core's to drop (no BTH opcode 0xFD)
        assert_eq!(t.classify(&env[..FORWARD_HDR - 1]), Verdict::Mine, "too short");
        let mut bad = wrap(&d, src, 4, 1);
        bad[2] = b'X';
        assert_eq!(t.classify(&bad), Verdict::Mine, "no magic");
        assert_eq!(rewrap(&bad), None);
    }

    #[test]
    fn foreign_wakes_the_steward_once_per_slot() {
        let s = Arc::new(SteerShared::default());
        assert_eq!(s.wait(Duration::from_millis(1)), Wake::Idle);
        s.note_foreign(200);
        s.note_foreign(5);
        s.note_foreign(5);
        assert_eq!(s.wait(Duration::from_millis(1)), Wake::Foreign(vec![5, 200]));
        assert_eq!(s.wait(Duration::from_millis(1)), Wake::Idle);
        let s2 = s.clone();
        let h = std::thread::spawn(move || s2.wait(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        s.stop();
        assert_eq!(h.join().unwrap(), Wake::Stop);
    }
}
