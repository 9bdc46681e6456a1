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
//!   it is dropped and counted, never handed to this member's core, and the
//!   member's steward is woken to re-steer the group;
//! - everything else (this slot's QPNs, QP1, bytes too short to be a BTH) goes
//!   on to the ICRC check and the core, as for an unshared device.
//!
//! No I/O here except the probe answer, which the transport sends.

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
    /// A datagram for another slot's QPN: drop it, count it, wake the
    /// steward.
    Foreign(u8),
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
