//! Steering: the classic BPF program of a shared device's `SO_REUSEPORT`
//! group, the probe round that learns which socket index holds which slot,
//! and the [`Steward`] thread that re-maps the group when it changes.
//!
//! The program, for a map `{slot s_j at index i_j}`:
//!
//! ```text
//!     ldb [0]                 ; the BTH opcode
//!     jeq #0xFF, probe        ; a steering probe (see roce_transport::steer)
//!     ldb [5]                 ; the top byte of the destination QPN: the slot
//!     jeq #s_0 ? ret #i_0
//!     ...
//!     ret #0xFFFFFFFF         ; no such member: the kernel picks by hash
//! probe:
//!     ldb [1]
//!     ret a                   ; the socket index the probe asks for
//! ```
//!
//! The kernel runs it with the UDP payload at offset 0 and takes the
//! result as an index into the group's sockets; an index past the end
//! makes it fall back to its hash. The index of a socket is the order it
//! joined in, and when one closes the last one takes its place: the map is
//! learned, not computed. The prober sends one probe for each index to the
//! device's address from a socket of its own; each member's transport
//! answers with its slot (`roce_transport::steer`). An index past the end
//! lands, by hash, on some member that then answers for a second index: a
//! member's real index is the smallest it answers for, since every real
//! index is below every index past the end.

use crate::registry::{self, GroupLock, JoinError, Member, Slot, SteerMap};
use nix::libc;
use nix::sys::socket::{setsockopt, sockopt};
use roce_transport::steer::{self as tsteer, SteerShared, SteerTap, Verdict, Wake};
use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const BPF_LD_B_ABS: u16 = 0x30; // BPF_LD | BPF_B | BPF_ABS
const BPF_LD_W_IND: u16 = 0x40; // BPF_LD | BPF_W | BPF_IND
const BPF_LD_H_IND: u16 = 0x48; // BPF_LD | BPF_H | BPF_IND
const BPF_LD_B_IND: u16 = 0x50; // BPF_LD | BPF_B | BPF_IND
const BPF_LD_IMM: u16 = 0x00; // BPF_LD | BPF_IMM
const BPF_LDX_IMM: u16 = 0x01; // BPF_LDX | BPF_W | BPF_IMM
const BPF_LDX_MSH: u16 = 0xb1; // BPF_LDX | BPF_B | BPF_MSH: x = 4 * (pkt[k] & 0xf)
const BPF_AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const BPF_JA: u16 = 0x05; // BPF_JMP | BPF_JA
const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
const BPF_RET_A: u16 = 0x16; // BPF_RET | BPF_A

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// A tiny assembler: instructions, labels and jumps to labels.
enum Item {
    Ins(libc::sock_filter),
    /// `ja label`
    Ja(Label),
    /// `jeq #k, label` (else fall through): `jeq #k, 0, 1; ja label`.
    JeqTo(u32, Label),
    /// `jne #k, label` (else fall through): `jeq #k, 1, 0; ja label`.
    JneTo(u32, Label),
    Label(Label),
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Label {
    Probe,
    Qp1,
    Cm,
    ServiceId,
    SidrRep,
    NoListener,
    Chain,
    Accept,
    Drop,
    V4,
    V6,
    Payload,
    /// IPv4 to the device's own address.
    V4Mine,
    /// IPv6 to the device's own address.
    V6Mine,
}

fn assemble(items: &[Item]) -> Vec<libc::sock_filter> {
    let len = |i: &Item| match i {
        Item::Ins(_) | Item::Ja(_) => 1,
        Item::JeqTo(..) | Item::JneTo(..) => 2,
        Item::Label(_) => 0,
    };
    let at = |l: Label| {
        let mut pc = 0u32;
        for i in items {
            if matches!(i, Item::Label(x) if *x == l) {
                return pc;
            }
            pc += len(i);
        }
        pc
    };
    let mut out = Vec::new();
    for i in items {
        let pc = out.len() as u32;
        match i {
            Item::Ins(x) => out.push(*x),
            Item::Ja(l) => out.push(ins(BPF_JA, 0, 0, at(*l) - pc - 1)),
            Item::JeqTo(k, l) => {
                out.push(ins(BPF_JEQ_K, 0, 1, *k));
                out.push(ins(BPF_JA, 0, 0, at(*l) - pc - 2));
            }
            Item::JneTo(k, l) => {
                out.push(ins(BPF_JEQ_K, 1, 0, *k));
                out.push(ins(BPF_JA, 0, 0, at(*l) - pc - 2));
            }
            Item::Label(_) => {}
        }
    }
    out
}

/// Where the classifier finds the UDP payload: at offset 0 (a reuseport
/// program) or at `x + k` (a packet socket's filter, `x` the IP header's
/// length).
#[derive(Clone, Copy)]
enum Base {
    Zero,
    X(u32),
}

impl Base {
    /// A load of `size` bytes (1, 2, 4) at payload offset `off`.
    fn ld(self, size: u8, off: usize) -> Item {
        let off = off as u32;
        let (abs, ind) = match size {
            1 => (BPF_LD_B_ABS, BPF_LD_B_IND),
            2 => (BPF_LD_H_ABS, BPF_LD_H_IND),
            _ => (BPF_LD_W_ABS, BPF_LD_W_IND),
        };
        match self {
            Base::Zero => Item::Ins(ins(abs, 0, 0, off)),
            Base::X(k) => Item::Ins(ins(ind, 0, 0, k + off)),
        }
    }
}

/// The classifier both programs share: leaves the target slot in A and
/// jumps to `Chain`; jumps to `Probe` for a steering probe and to
/// `NoListener` for a REQ/SIDR_REQ to a service nobody listens on.
fn classify(base: Base, listeners: &[(u64, u8)]) -> Vec<Item> {
    use tsteer::{CM_ATTR_REQ, CM_ATTR_SIDR_REP, CM_ATTR_SIDR_REQ, CM_CLASS, CM_DATA_AT};
    use Item::{Ins, Ja, JeqTo, Label as L};
    let b = |off: usize| base.ld(1, off);
    let mut p = vec![
        b(0),
        JeqTo(u32::from(tsteer::PROBE_OPCODE), Label::Probe),
        base.ld(4, 4),
        Ins(ins(BPF_AND_K, 0, 0, 0x00FF_FFFF)),
        JeqTo(1, Label::Qp1),
        b(5),
        Ja(Label::Chain),
        L(Label::Qp1),
        b(tsteer::MAD_CLASS_AT),
        JeqTo(u32::from(CM_CLASS), Label::Cm),
        Ins(ins(BPF_LD_IMM, 0, 0, 0)),
        Ja(Label::Chain),
        L(Label::Cm),
        base.ld(2, tsteer::MAD_ATTR_AT),
        JeqTo(u32::from(CM_ATTR_REQ), Label::ServiceId),
        JeqTo(u32::from(CM_ATTR_SIDR_REQ), Label::ServiceId),
        JeqTo(u32::from(CM_ATTR_SIDR_REP), Label::SidrRep),
        b(CM_DATA_AT + 4),
        Ja(Label::Chain),
        L(Label::SidrRep),
        b(CM_DATA_AT),
        Ja(Label::Chain),
        L(Label::ServiceId),
    ];
    let sid_at = tsteer::CM_SERVICE_ID_AT;
    for &(sid, slot) in listeners {
        p.push(base.ld(4, sid_at));
        p.push(Ins(ins(BPF_JEQ_K, 0, 4, (sid >> 32) as u32)));
        p.push(base.ld(4, sid_at + 4));
        p.push(Ins(ins(BPF_JEQ_K, 0, 2, sid as u32)));
        p.push(Ins(ins(BPF_LD_IMM, 0, 0, u32::from(slot))));
        p.push(Ja(Label::Chain));
    }
    p.push(Ja(Label::NoListener));
    p
}

/// The steering program for `map` (`(slot, index)` pairs) and the CM
/// listeners `listeners` (`(service ID, slot)`): a datagram goes to the
/// index of the slot its destination QPN carries; one for QP1 carrying a
/// CM REQ or SIDR_REQ to its service ID's listener, any other CM message
/// to the slot in the top byte of the receiver's comm ID (see
/// [`roce_transport::steer::cm_target_slot`]), another MAD to slot 0.
pub fn program(map: &[(u8, u8)], listeners: &[(u64, u8)]) -> Vec<libc::sock_filter> {
    use Item::{Ins, Label as L};
    let mut p = classify(Base::Zero, listeners);
    // no listener: the kernel's hash picks a member, whose CM rejects
    p.push(L(Label::NoListener));
    p.push(Ins(ins(BPF_RET_K, 0, 0, u32::MAX)));
    p.push(L(Label::Chain));
    for &(slot, index) in map {
        p.push(Ins(ins(BPF_JEQ_K, 0, 1, u32::from(slot))));
        p.push(Ins(ins(BPF_RET_K, 0, 0, u32::from(index))));
    }
    p.push(Ins(ins(BPF_RET_K, 0, 0, u32::MAX)));
    p.push(L(Label::Probe));
    p.push(Base::Zero.ld(1, 1));
    p.push(Ins(ins(BPF_RET_A, 0, 0, 0)));
    assemble(&p)
}

/// What a raw member's packet-socket filter returns for a frame it takes
/// (the bytes to keep: all of them).
pub const RAW_ACCEPT: u32 = u32::MAX;

/// The filter of the packet socket of the raw member in `slot` of the
/// device at `local:port` (Ethernet frames from offset 0): it takes every
/// ARP frame and every ICMPv6 one (neighbour discovery: each member
/// resolves its own peers; only one answers, see the raw transport), and of
/// the UDP datagrams to `local:port` those for this member as the
/// reuseport program would steer them (its slot's QPNs, CM messages to its
/// comm IDs, REQs to the service IDs in `listening`, other MADs when it is
/// slot 0). Everything else, IP fragments and IPv6 extension headers
/// included, is dropped in the kernel.
pub fn raw_filter(slot: u8, local: IpAddr, port: u16, listening: &[u64]) -> Vec<libc::sock_filter> {
    use Item::{Ins, Ja, JeqTo, JneTo, Label as L};
    let mut p = vec![
        Ins(ins(BPF_LD_H_ABS, 0, 0, 12)),
        JeqTo(0x0806, Label::Accept),
        JeqTo(0x0800, Label::V4),
        JeqTo(0x86DD, Label::V6),
        Ja(Label::Drop),
        L(Label::V4),
    ];
    match local {
        IpAddr::V4(a) => p.extend([
            Ins(ins(BPF_LD_B_ABS, 0, 0, 23)),
            JneTo(17, Label::Drop),
            Ins(ins(BPF_LD_H_ABS, 0, 0, 20)),
            Ins(ins(BPF_AND_K, 0, 0, 0x1FFF)),
            JneTo(0, Label::Drop),
            Ins(ins(BPF_LD_W_ABS, 0, 0, 30)),
            JeqTo(u32::from(a), Label::V4Mine),
            // an IPv4 multicast group (224.0.0.0/4) to the port: every
            // member's, the transport keeps the groups it joined
            Ins(ins(BPF_AND_K, 0, 0, 0xF000_0000)),
            JneTo(0xE000_0000, Label::Drop),
            Ins(ins(BPF_LDX_MSH, 0, 0, 14)),
            Ins(ins(BPF_LD_H_IND, 0, 0, 14 + 2)),
            JeqTo(u32::from(port), Label::Accept),
            Ja(Label::Drop),
            L(Label::V4Mine),
            Ins(ins(BPF_LDX_MSH, 0, 0, 14)),
            Ins(ins(BPF_LD_H_IND, 0, 0, 14 + 2)),
            JneTo(u32::from(port), Label::Drop),
            Ja(Label::Payload),
        ]),
        IpAddr::V6(_) => p.push(Ja(Label::Drop)),
    }
    p.push(L(Label::V6));
    p.extend([Ins(ins(BPF_LD_B_ABS, 0, 0, 20)), JeqTo(58, Label::Accept)]);
    match local {
        IpAddr::V6(a) => {
            p.push(JneTo(17, Label::Drop));
            // an IPv6 multicast group (ff00::/8) to the port: every member's
            p.extend([
                Ins(ins(BPF_LD_B_ABS, 0, 0, 38)),
                JneTo(0xFF, Label::V6Mine),
                Ins(ins(BPF_LD_H_ABS, 0, 0, 14 + 40 + 2)),
                JeqTo(u32::from(port), Label::Accept),
                Ja(Label::Drop),
                L(Label::V6Mine),
            ]);
            for (i, w) in a.octets().chunks(4).enumerate() {
                let w = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                p.push(Ins(ins(BPF_LD_W_ABS, 0, 0, 38 + 4 * i as u32)));
                p.push(JneTo(w, Label::Drop));
            }
            p.extend([
                Ins(ins(BPF_LD_H_ABS, 0, 0, 14 + 40 + 2)),
                JneTo(u32::from(port), Label::Drop),
                Ins(ins(BPF_LDX_IMM, 0, 0, 40)),
            ]);
        }
        IpAddr::V4(_) => p.push(Ja(Label::Drop)),
    }
    p.push(L(Label::Payload));
    let mine: Vec<(u64, u8)> = listening.iter().map(|&sid| (sid, slot)).collect();
    // the UDP payload: after Ethernet (14), the IP header (x), UDP (8)
    p.extend(classify(Base::X(14 + 8), &mine));
    p.extend([
        L(Label::Chain),
        JeqTo(u32::from(slot), Label::Accept),
        // a probe (UDP devices only), a REQ to nobody's service (dropped:
        // the peer's CM times out), another member's datagram
        L(Label::Probe),
        L(Label::NoListener),
        L(Label::Drop),
        Ins(ins(BPF_RET_K, 0, 0, 0)),
        L(Label::Accept),
        Ins(ins(BPF_RET_K, 0, 0, RAW_ACCEPT)),
    ]);
    assemble(&p)
}

/// Run `prog` on `pkt` as the kernel would (for tests): the program's
/// result (a socket index, or bytes to keep), or `None` for a load past
/// the end (the kernel then returns 0).
pub fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> Option<u32> {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let at = |k: u32, n: usize| pkt.get(k as usize..(k as usize).checked_add(n)?);
    for _ in 0..prog.len() {
        let i = prog.get(pc)?;
        match i.code {
            BPF_LD_W_ABS => a = u32::from_be_bytes(at(i.k, 4)?.try_into().ok()?),
            BPF_LD_H_ABS => a = u32::from(u16::from_be_bytes(at(i.k, 2)?.try_into().ok()?)),
            BPF_LD_B_ABS => a = u32::from(at(i.k, 1)?[0]),
            BPF_LD_W_IND => a = u32::from_be_bytes(at(x.checked_add(i.k)?, 4)?.try_into().ok()?),
            BPF_LD_H_IND => {
                a = u32::from(u16::from_be_bytes(at(x.checked_add(i.k)?, 2)?.try_into().ok()?))
            }
            BPF_LD_B_IND => a = u32::from(at(x.checked_add(i.k)?, 1)?[0]),
            BPF_LD_IMM => a = i.k,
            BPF_LDX_IMM => x = i.k,
            BPF_LDX_MSH => x = 4 * u32::from(at(i.k, 1)?[0] & 0xF),
            BPF_AND_K => a &= i.k,
            BPF_JA => pc += i.k as usize,
            BPF_JEQ_K => {
                pc += usize::from(if a == i.k { i.jt } else { i.jf });
            }
            BPF_RET_K => return Some(i.k),
            BPF_RET_A => return Some(a),
            _ => return None,
        }
        pc += 1;
    }
    None
}

/// Attach `prog` to the `SO_REUSEPORT` group of `sock`.
///
/// (Not inlined: valgrind's suppression of the `sock_fprog` padding this
/// leaves unwritten names this function; see
/// `libibverbs/tests/data/valgrind.supp`.)
#[inline(never)]
pub fn attach(sock: &UdpSocket, prog: &[libc::sock_filter]) -> io::Result<()> {
    let len =
        u16::try_from(prog.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // The kernel copies the program during the call; `prog` outlives it.
    let fprog = libc::sock_fprog { len, filter: prog.as_ptr().cast_mut() };
    setsockopt(sock, sockopt::AttachReusePortCbpf, &fprog)?;
    Ok(())
}

/// How long a probe round waits: for every live member's answer, but
/// for the others at most `grace` once `me` (the prober's own member,
/// whose engine may be slow to start: under valgrind, on a loaded host)
/// has answered, and never more than `cap`.
#[derive(Clone, Copy, Debug)]
pub struct ProbeWait {
    /// The prober's own slot, if it is a member.
    pub me: Option<u8>,
    /// How long to wait for the other members.
    pub grace: Duration,
    /// How long to wait at most.
    pub cap: Duration,
}

/// Learn which socket index of the group at `addr` holds which of the
/// `live` members: probes from a socket of our own (sent again every
/// 40 ms), answers as long as `wait` says. Returns `(slot, index, pid)`
/// for every member that answered.
pub fn probe_round(addr: SocketAddr, live: &[Member], wait: ProbeWait) -> io::Result<SteerMap> {
    let prober = UdpSocket::bind(SocketAddr::new(addr.ip(), 0))?;
    let nonce: u64 = rand::random();
    // every index the group may have: the live members, and a margin for
    // sockets still closing (answers past the end are ignored, see above)
    let n = (live.len() + 8).clamp(16, 255);
    let start = Instant::now();
    let mut deadline = start + wait.cap;
    if wait.me.is_none() {
        deadline = start + wait.grace.min(wait.cap);
    }
    // slot -> (smallest index answered, pid)
    let mut got: BTreeMap<u8, (u8, u32)> = BTreeMap::new();
    let mut buf = [0u8; 64];
    let mut next_send = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_send {
            for k in 0..n {
                let k = k as u8;
                let _ = prober.send_to(&tsteer::probe(k, nonce), addr);
            }
            next_send = now + Duration::from_millis(40);
        }
        let left = deadline.saturating_duration_since(now);
        // (a member that is leaving answers nothing: not waited for)
        if left.is_zero() || live.iter().all(|m| m.leaving || got.contains_key(&m.slot)) {
            break;
        }
        prober.set_read_timeout(Some(left.min(next_send - now).max(Duration::from_millis(1))))?;
        match prober.recv_from(&mut buf) {
            Ok((len, from)) if from == addr => {
                if let Some((k, nn, slot, pid)) = tsteer::parse_answer(&buf[..len]) {
                    if nn == nonce {
                        let e = got.entry(slot).or_insert((k, pid));
                        if k < e.0 {
                            *e = (k, pid);
                        }
                        if Some(slot) == wait.me {
                            deadline = deadline.min(Instant::now().max(start + wait.grace));
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // one slot per index: a second claim of an index is a stale answer
    let mut taken = [false; 256];
    let mut entries = Vec::new();
    for (slot, (k, pid)) in got {
        if !std::mem::replace(&mut taken[usize::from(k)], true) {
            entries.push((slot, k, pid));
        }
    }
    entries.sort_by_key(|e| e.1);
    Ok(SteerMap { entries })
}

/// How long a probe round waits for other members that do not answer
/// (a stopped process holds its slot and answers nothing).
const PROBE_GRACE: Duration = Duration::from_millis(300);
/// How long a probe round waits for this member's own answer.
const PROBE_CAP: Duration = Duration::from_secs(20);
/// Re-mapping runs at most this often per member.
const MIN_REMAP_GAP: Duration = Duration::from_millis(20);

struct Inner {
    dir: PathBuf,
    addr: SocketAddr,
    /// The member's socket (a second handle on the transport's).
    sock: Option<UdpSocket>,
    /// A raw member's packet socket (a second handle on the transport's),
    /// which carries the member's own filter ([`raw_filter`]).
    raw: Option<socket2::Socket>,
    slot: Option<Slot>,
    /// How the member's transport classifies datagrams (a UDP member's).
    tap: Option<SteerTap>,
    /// Re-maps done by this member.
    remaps: u64,
}

/// How many datagrams a leaving member forwards at most.
const MAX_LEFTOVERS: usize = 4096;

/// The datagrams `sock` holds for other members, as envelopes (see
/// `roce_transport::steer`): read without blocking, GRO batches split;
/// this member's own (its engine has stopped) and probes are dropped.
fn leftovers(sock: &UdpSocket, tap: &SteerTap) -> Vec<Vec<u8>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let mut out = Vec::new();
    if sock.set_nonblocking(true).is_err() {
        return out;
    }
    let Ok(local) = sock.local_addr() else { return out };
    let mut buf = vec![0u8; 65536];
    let mut cmsg = nix::cmsg_space!(i32);
    for _ in 0..MAX_LEFTOVERS {
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let fd = sock.as_raw_fd();
        let Ok(m) = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut cmsg), MsgFlags::empty())
        else {
            break;
        };
        let seg = m.cmsgs().ok().and_then(|mut c| {
            c.find_map(|c| match c {
                ControlMessageOwned::UdpGroSegments(s) => usize::try_from(s).ok(),
                _ => None,
            })
        });
        let (len, from) = (m.bytes, m.address.and_then(|a| sockaddr(&a)));
        let Some(from) = from else { continue };
        let seg = seg.filter(|s| *s > 0).unwrap_or(len.max(1));
        for d in buf[..len].chunks(seg) {
            let env = match tap.classify(d) {
                Verdict::Foreign(slot) => tsteer::wrap(d, from, slot, 1),
                Verdict::Envelope { slot, .. } if slot != tap.slot && from.ip() == local.ip() => {
                    match tsteer::rewrap(d) {
                        Some(v) => v,
                        None => continue,
                    }
                }
                _ => continue,
            };
            out.push(env);
        }
    }
    out
}

fn sockaddr(a: &nix::sys::socket::SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(SocketAddr::from((v4.ip(), v4.port())));
    }
    a.as_sockaddr_in6().map(|v6| SocketAddr::from((v6.ip(), v6.port())))
}

/// Send a leaving member's envelopes to the device at `local` from a socket
/// of its own (the member's is closed: the group's program, which steered
/// as if it were gone, is right now).
fn forward_held(local: SocketAddr, held: &[Vec<u8>]) {
    let Ok(s) = UdpSocket::bind(SocketAddr::new(local.ip(), 0)) else { return };
    for env in held {
        let _ = s.send_to(env, local);
    }
}

impl Inner {
    /// Attach the program for the last map and today's listeners, without
    /// a probe round (the group lock held by the caller): a listen or an
    /// unlisten changes no socket index, and must be quick (a program may
    /// listen again right after a connection and expect the next request).
    fn reattach(&mut self) -> io::Result<()> {
        let listeners = registry::listeners(&self.dir);
        if let (Some(raw), Some(slot)) = (&self.raw, &self.slot) {
            let mine: Vec<u64> =
                listeners.iter().filter(|l| l.1 == slot.slot).map(|l| l.0).collect();
            raw.attach_filter(&raw_filter(slot.slot, self.addr.ip(), self.addr.port(), &mine))?;
        }
        let map = SteerMap::read(&self.dir);
        let pairs: Vec<(u8, u8)> = map.entries.iter().map(|e| (e.0, e.1)).collect();
        if let Some(s) = &self.sock {
            attach(s, &program(&pairs, &listeners))?;
        }
        Ok(())
    }

    /// Probe, attach, write the map (the group lock held by the caller).
    /// A raw member has no group to map: its filter is its own.
    fn remap(&mut self) -> io::Result<SteerMap> {
        if self.raw.is_some() {
            self.reattach()?;
            return Ok(SteerMap::default());
        }
        let live = registry::live_members(&self.dir);
        let me = self.slot.as_ref().map(|s| s.slot);
        let wait = ProbeWait { me, grace: PROBE_GRACE, cap: PROBE_CAP };
        let map = probe_round(self.addr, &live, wait)?;
        let map = keep_unanswered(map, &SteerMap::read(&self.dir), &live);
        let pairs: Vec<(u8, u8)> = map.entries.iter().map(|e| (e.0, e.1)).collect();
        let listeners = registry::listeners(&self.dir);
        if let Some(s) = &self.sock {
            attach(s, &program(&pairs, &listeners))?;
        }
        map.write(&self.dir)?;
        self.remaps += 1;
        tracing::debug!(addr = %self.addr, ?map, "steering re-mapped");
        if map.entries.len() != live.len() {
            tracing::info!(
                addr = %self.addr,
                live = live.len(),
                mapped = map.entries.len(),
                "steering: some members did not answer the probe"
            );
        }
        Ok(map)
    }
}

/// The map of a probe round `got`, completed from the previous map `prev`
/// for the live members that did not answer.
fn keep_unanswered(mut map: SteerMap, prev: &SteerMap, live: &[Member]) -> SteerMap {
    // A live member too busy to answer in time (a loaded host) keeps
    // the index the last map gave it, unless another member answered
    // for that index: sockets move only when one closes, so it is most
    // likely still right, and if not, its datagrams going astray start
    // another re-map. (Dropping it would send all its traffic astray
    // and make every member re-map in turn.) So does a member that is
    // leaving (its engine has stopped, it answers nothing): its socket
    // is still in the group until its steward leaves, and the
    // prediction of that leave ([`SteerMap::without`]) needs its index,
    // or it moves the wrong socket into the hole and the map stays
    // stale until a datagram goes astray (with several members leaving
    // at once, a connection's last ACK was lost that way).
    for m in live {
        if map.entries.iter().any(|e| e.0 == m.slot) {
            continue;
        }
        if let Some(&(slot, index, pid)) = prev.entries.iter().find(|e| e.0 == m.slot) {
            if !map.entries.iter().any(|e| e.1 == index) {
                map.entries.push((slot, index, pid));
            }
        }
    }
    map.entries.sort_by_key(|e| e.1);
    map
}

/// A joining member: holds the group lock and its slot until
/// [`Joining::finish`].
pub struct Joining {
    group: GroupLock,
    dir: PathBuf,
    addr: SocketAddr,
    slot: Slot,
    shared: Arc<SteerShared>,
}

impl Joining {
    /// Join the device bound at `addr`: wait for its group lock, take the
    /// lowest free slot.
    pub fn start(addr: SocketAddr) -> Result<Joining, JoinError> {
        Joining::start_in(registry::device_dir(addr), addr)
    }

    /// Join the raw device on interface `ifname` with address `addr`.
    pub fn start_raw(ifname: &str, addr: SocketAddr) -> Result<Joining, JoinError> {
        Joining::start_in(registry::raw_device_dir(ifname, addr), addr)
    }

    fn start_in(dir: PathBuf, addr: SocketAddr) -> Result<Joining, JoinError> {
        let group = GroupLock::take(&dir)?;
        if registry::live_members(&dir).is_empty() {
            // the first member of a new group: a map left by an earlier
            // group describes sockets that are gone
            let _ = std::fs::remove_file(dir.join("map"));
        }
        let slot = registry::take_slot(&dir, addr)?;
        Ok(Joining { group, dir, addr, slot, shared: Arc::new(SteerShared::default()) })
    }

    /// The slot taken.
    pub fn slot(&self) -> u8 {
        self.slot.slot
    }

    /// How many processes have held this slot (this one included).
    pub fn generation(&self) -> u32 {
        self.slot.generation
    }

    /// The QPNs of this member: its slot's 2^16.
    pub fn qpns(&self) -> std::ops::Range<u32> {
        let base = u32::from(self.slot.slot) << tsteer::SLOT_SHIFT;
        base..base + (1 << tsteer::SLOT_SHIFT)
    }

    /// The first QPN to try: moves on with each holder of the slot, so a
    /// late packet for a previous holder's QP rarely meets a new QP of
    /// the same number.
    pub fn first_qpn(&self) -> u32 {
        let off = 17u32.wrapping_add(self.slot.generation.wrapping_mul(0x1000)) & 0xFFFF;
        self.qpns().start | off.max(2)
    }

    /// What the member's transport needs ([`roce_transport::UdpTransport::set_steer`]).
    pub fn tap(&self) -> SteerTap {
        let (dir, me) = (self.dir.clone(), self.slot.slot);
        let listener_of =
            move |sid: u64| registry::listeners(&dir).into_iter().find(|l| l.0 == sid).map(|l| l.1);
        SteerTap {
            slot: me,
            shared: self.shared.clone(),
            pid: std::process::id(),
            listener_of: Some(tsteer::ListenerOf(Arc::new(listener_of))),
        }
    }

    /// The member's socket is bound and its transport answers probes (its
    /// engine runs): map the group, attach the program, start the steward,
    /// let the next change of the group go ahead.
    pub fn finish(self, sock: UdpSocket) -> io::Result<Steward> {
        let tap = self.tap();
        let mut inner = Inner {
            dir: self.dir,
            addr: self.addr,
            sock: Some(sock),
            raw: None,
            slot: Some(self.slot),
            tap: Some(tap),
            remaps: 0,
        };
        let map = inner.remap()?;
        let me = inner.slot.as_ref().map(|s| s.slot);
        if !map.entries.iter().any(|e| Some(e.0) == me) {
            return Err(io::Error::other(format!(
                "this member (slot {}) did not answer its own probe within {} s (map {:?})",
                me.unwrap_or(0),
                PROBE_CAP.as_secs(),
                map.entries
            )));
        }
        drop(self.group);
        let inner = Arc::new(Mutex::new(inner));
        let (i2, s2) = (inner.clone(), self.shared.clone());
        let thread = roce_transport::signals::spawn_quiet("roce-steward".into(), move || {
            steward_loop(i2, s2)
        })?;
        Ok(Steward { inner, shared: self.shared, thread: Some(thread) })
    }
}

impl Joining {
    /// Whether this member answers ARP requests and neighbour
    /// solicitations for the device's address now: the live member with
    /// the lowest slot does (asked on each request, which are rare), so
    /// exactly one member answers, and another takes over when it ends.
    pub fn answer_gate(&self) -> Arc<dyn Fn() -> bool + Send + Sync> {
        let (dir, me) = (self.dir.clone(), self.slot.slot);
        Arc::new(move || {
            let live = registry::live_members(&dir);
            let first = live.iter().filter(|m| !m.leaving).map(|m| m.slot).min();
            // (none live but us leaving: still us)
            first.is_none_or(|s| s == me)
        })
    }

    /// A raw member's packet socket is open (`sock`, a second handle on the
    /// transport's): attach the member's filter, which takes only this
    /// member's frames (see [`raw_filter`]), and let the next change of the
    /// group go ahead. A raw group needs no map and no steward thread: each
    /// member's filter depends on its own slot and listeners only.
    pub fn finish_raw(self, sock: std::os::fd::OwnedFd) -> io::Result<Steward> {
        let mut inner = Inner {
            dir: self.dir,
            addr: self.addr,
            sock: None,
            raw: Some(socket2::Socket::from(sock)),
            slot: Some(self.slot),
            tap: None,
            remaps: 0,
        };
        inner.reattach()?;
        drop(self.group);
        Ok(Steward { inner: Arc::new(Mutex::new(inner)), shared: self.shared, thread: None })
    }
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn steward_loop(inner: Arc<Mutex<Inner>>, shared: Arc<SteerShared>) {
    let mut last = Instant::now() - MIN_REMAP_GAP;
    loop {
        let slots = match shared.wait(Duration::from_secs(3600)) {
            Wake::Stop => return,
            Wake::Idle => continue,
            Wake::Foreign(s) => s,
        };
        let woke = std::time::SystemTime::now();
        let gap = last.elapsed();
        if gap < MIN_REMAP_GAP {
            std::thread::sleep(MIN_REMAP_GAP - gap);
        }
        let dir = lock(&inner).dir.clone();
        let group = match GroupLock::take(&dir) {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(error = %e, "steering: cannot take the group lock");
                continue;
            }
        };
        if shared.stopping() {
            return;
        }
        // Another member re-mapped since the stray datagram arrived: its
        // map already took what we saw into account.
        if SteerMap::written_since(&dir, woke) {
            drop(group);
            last = Instant::now();
            continue;
        }
        // A datagram for a live member reached us: the program is stale.
        // One for a slot nobody holds is a late packet for a member that
        // is gone: dropped (counted by the transport), nothing to re-map.
        let live = registry::live_members(&dir);
        if slots.iter().any(|s| live.iter().any(|m| m.slot == *s)) {
            if let Err(e) = lock(&inner).remap() {
                tracing::warn!(error = %e, "steering: re-map failed");
            }
        }
        drop(group);
        last = Instant::now();
    }
}

/// A member's steward: re-maps the group when datagrams for another live
/// member reach this one, and leaves the group cleanly when dropped
/// (after the member's engine, which holds the other handle on the
/// socket, has stopped).
pub struct Steward {
    inner: Arc<Mutex<Inner>>,
    shared: Arc<SteerShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Steward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = lock(&self.inner);
        f.debug_struct("Steward").field("addr", &g.addr).field("slot", &g.slot).finish()
    }
}

impl Steward {
    /// This member's slot.
    pub fn slot(&self) -> Option<u8> {
        lock(&self.inner).slot.as_ref().map(|s| s.slot)
    }
    /// Re-maps this member has done (its join's included).
    pub fn remaps(&self) -> u64 {
        lock(&self.inner).remaps
    }
    /// Re-map now (with the group lock), as after a foreign datagram.
    pub fn remap_now(&self) -> io::Result<SteerMap> {
        let dir = lock(&self.inner).dir.clone();
        let _g = GroupLock::take(&dir).map_err(io::Error::other)?;
        lock(&self.inner).remap()
    }
}

/// Listening on a service ID for the whole device, held by this member
/// (see [`Steward::listen`]).
pub struct ListenGuard {
    inner: Arc<Mutex<Inner>>,
    lock: Option<registry::ListenLock>,
}

impl std::fmt::Debug for ListenGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListenGuard")
    }
}

impl Drop for ListenGuard {
    fn drop(&mut self) {
        let dir = lock(&self.inner).dir.clone();
        let Ok(_g) = GroupLock::take(&dir) else { return };
        if let Some(l) = self.lock.take() {
            l.release();
        }
        if let Err(e) = lock(&self.inner).reattach() {
            tracing::warn!(error = %e, "steering: re-attach after unlisten failed");
        }
    }
}

impl Steward {
    /// Listen on `service_id` for the whole device: connection requests
    /// to it reach this member. `Err(AddrInUse)` if another process of
    /// the device listens on it, as the kernel's CM answers for a port
    /// of one device.
    pub fn listen(&self, service_id: u64) -> io::Result<ListenGuard> {
        let dir = lock(&self.inner).dir.clone();
        let slot = lock(&self.inner)
            .slot
            .as_ref()
            .map(|s| s.slot)
            .ok_or_else(|| io::Error::other("member has left"))?;
        // Register before taking the group lock: a change of the group under
        // way (a process joining) reads the listeners after its probe round,
        // so its program already steers this service's requests here; a
        // program that publishes its port before rdma_listen (qperf) and a
        // peer that joins the device meanwhile then do not race.
        let held = registry::listen(&dir, service_id, slot).map_err(io::Error::other)?;
        let Some(l) = held else {
            return Err(io::Error::from(io::ErrorKind::AddrInUse));
        };
        let _g = GroupLock::take(&dir).map_err(io::Error::other)?;
        lock(&self.inner).reattach()?;
        Ok(ListenGuard { inner: self.inner.clone(), lock: Some(l) })
    }
}

impl Steward {
    /// Hold the XRC domain of the file `key` (`(st_dev, st_ino)`) for this
    /// member ([`registry::xrcd`]): whether another process of the device
    /// holds it too, and the hold (dropped when the member's last handle
    /// on the domain closes).
    pub fn xrcd(&self, key: (u64, u64)) -> io::Result<(bool, registry::XrcdLock)> {
        let dir = lock(&self.inner).dir.clone();
        registry::xrcd(&dir, key).map_err(io::Error::other)
    }
}

impl Steward {
    /// The first half of leaving, to call while the member's engine still
    /// runs: stop the steward thread (a re-map under way ends quickly: this
    /// member's own engine still answers its probe) and mark the slot
    /// leaving, so that nobody's probe round waits for a member whose engine
    /// is about to stop. [`Drop`] does the rest once the engine is gone.
    pub fn prepare_leave(&mut self) {
        self.shared.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(s) = lock(&self.inner).slot.as_mut() {
            s.mark_leaving();
        }
    }
}

impl Drop for Steward {
    fn drop(&mut self) {
        self.shared.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // (the group lock first, then the state: the order of every path)
        let dir = lock(&self.inner).dir.clone();
        let group = GroupLock::take(&dir);
        let mut g = lock(&self.inner);
        let Ok(group) = group else {
            g.sock = None;
            g.raw = None;
            g.slot = None;
            return;
        };
        // Leave: steer as the group will be once our socket is gone (the
        // last socket takes our index), then close it and free the slot.
        // What the socket still holds for other members (it was steered
        // here by a stale program, or came for the last socket since the
        // program above) goes on to them once the socket is closed.
        let mut held = Vec::new();
        if let (Some(sock), Some(slot)) = (&g.sock, &g.slot) {
            let map = SteerMap::read(&g.dir).without(slot.slot);
            let pairs: Vec<(u8, u8)> = map.entries.iter().map(|e| (e.0, e.1)).collect();
            let mut listeners = registry::listeners(&g.dir);
            listeners.retain(|l| l.1 != slot.slot);
            if attach(sock, &program(&pairs, &listeners)).is_ok() {
                let _ = map.write(&g.dir);
            }
            if let Some(tap) = &g.tap {
                held = leftovers(sock, tap);
            }
        }
        let local = g.sock.as_ref().and_then(|s| s.local_addr().ok());
        g.sock = None;
        if let Some(local) = local.filter(|_| !held.is_empty()) {
            forward_held(local, &held);
        }
        g.raw = None;
        g.slot = None;
        drop(group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bth(qpn: u32) -> Vec<u8> {
        let mut b = vec![0u8; 28];
        b[0] = 0x04;
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    /// What a leaving member's socket still holds: the datagrams for
    /// other slots come back as envelopes with their source, envelopes for
    /// others once more (hop counted), its own datagrams and probes not.
    #[test]
    fn a_leaving_member_forwards_what_its_socket_holds_for_others() {
        let sock = UdpSocket::bind("127.0.73.1:0").unwrap();
        let local = sock.local_addr().unwrap();
        let tx = UdpSocket::bind("127.0.73.2:0").unwrap();
        let from = tx.local_addr().unwrap();
        let tap = SteerTap {
            slot: 3,
            shared: Arc::new(SteerShared::default()),
            pid: 1,
            listener_of: None,
        };
        let (theirs, mine) = (bth(0x05_0011), bth(0x03_0011));
        tx.send_to(&theirs, local).unwrap();
        tx.send_to(&mine, local).unwrap();
        tx.send_to(&tsteer::probe(1, 9), local).unwrap();
        // an envelope from a member (the device's own address) for slot 6,
        // and one from elsewhere
        let peer: SocketAddr = "127.0.73.9:4791".parse().unwrap();
        let env6 = tsteer::wrap(&theirs, peer, 6, 1);
        let member = UdpSocket::bind("127.0.73.1:0").unwrap();
        member.send_to(&env6, local).unwrap();
        tx.send_to(&env6, local).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let got = leftovers(&sock, &tap);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(tsteer::unwrap(&got[0]), Some((5, 1, from)));
        assert_eq!(got[0][tsteer::FORWARD_HDR..], theirs[..], "the datagram, byte for byte");
        assert_eq!(tsteer::unwrap(&got[1]), Some((6, 2, peer)), "forwarded once more");
        assert_eq!(got[1][tsteer::FORWARD_HDR..], theirs[..]);
        assert!(leftovers(&sock, &tap).is_empty(), "read once, without blocking");
    }

    #[test]
    fn a_leaving_member_keeps_its_index_so_its_leave_is_predicted() {
        let m = |slot, leaving| Member { slot, pid: 100 + u32::from(slot), leaving };
        // indices 0..4 hold slots 0, 1, 2, 3; slots 1 and 3 are leaving (their
        // engines have stopped) and answer no probe
        let prev = SteerMap { entries: vec![(0, 0, 100), (1, 1, 101), (2, 2, 102), (3, 3, 103)] };
        let live = [m(0, false), m(1, true), m(2, false), m(3, true)];
        let got = SteerMap { entries: vec![(0, 0, 100), (2, 2, 102)] };
        let map = keep_unanswered(got, &prev, &live);
        assert_eq!(map, prev, "both leavers keep their sockets' indices");
        // slot 1 leaves, then slot 3: the kernel moves index 3 (slot 3) into
        // hole 1, then index 2 (slot 2) into slot 3's new place, index 1
        let after = map.without(1).without(3);
        assert_eq!(after.entries, vec![(0, 0, 100), (2, 1, 102)]);
        // had slot 3's index been dropped from the map, slot 1's leave would
        // move slot 2 into hole 1, where the kernel moves slot 3: slot 2's
        // datagrams would go to slot 3's closing socket
        let blind = SteerMap { entries: vec![(0, 0, 100), (1, 1, 101), (2, 2, 102)] };
        assert_eq!(blind.without(1).entries, vec![(0, 0, 100), (2, 1, 102)]);
        assert_eq!(map.without(1).entries, vec![(0, 0, 100), (2, 2, 102), (3, 1, 103)]);
        // an index another member answered for is not given back
        let got = SteerMap { entries: vec![(0, 0, 100), (2, 1, 102)] };
        let map = keep_unanswered(got, &prev, &[m(0, false), m(1, true), m(2, false)]);
        assert_eq!(map.entries, vec![(0, 0, 100), (2, 1, 102)]);
    }

    #[test]
    fn program_steers_by_slot_and_answers_probes() {
        let p = program(&[(0, 2), (5, 0), (63, 1)], &[]);
        assert_eq!(run(&p, &bth(0x05_0011)), Some(0));
        assert_eq!(run(&p, &bth(0x00_0001)), Some(2), "QP1, not a MAD of the CM: slot 0's");
        assert_eq!(run(&p, &bth(0x3F_FFFF)), Some(1));
        assert_eq!(run(&p, &bth(0x07_0011)), Some(u32::MAX), "no member: the kernel's hash");
        assert_eq!(run(&p, &tsteer::probe(9, 1)), Some(9));
        assert_eq!(run(&p, &[0x04, 0, 0]), None, "a runt: the kernel returns 0");
        let empty = program(&[], &[]);
        assert_eq!(run(&empty, &bth(0x05_0011)), Some(u32::MAX));
        assert_eq!(run(&empty, &tsteer::probe(3, 1)), Some(3));
        let full: Vec<(u8, u8)> = (0..registry::MAX_MEMBERS).map(|s| (s, 63 - s)).collect();
        let p = program(&full, &[]);
        for s in 0..registry::MAX_MEMBERS {
            assert_eq!(run(&p, &bth(u32::from(s) << 16 | 0x20)), Some(u32::from(63 - s)));
        }
        assert_eq!(run(&p, &tsteer::probe(200, 1)), Some(200));
    }

    /// A CM MAD in a QP1 datagram: attribute `attr`, comm IDs, service ID.
    fn cm(attr: u16, local: u32, remote: u32, sid: u64) -> Vec<u8> {
        let mut b = bth(1);
        b.resize(20 + 256, 0);
        b[tsteer::MAD_CLASS_AT] = tsteer::CM_CLASS;
        b[tsteer::MAD_ATTR_AT..][..2].copy_from_slice(&attr.to_be_bytes());
        b[tsteer::CM_DATA_AT..][..4].copy_from_slice(&local.to_be_bytes());
        b[tsteer::CM_DATA_AT + 4..][..4].copy_from_slice(&remote.to_be_bytes());
        b[tsteer::CM_SERVICE_ID_AT..][..8].copy_from_slice(&sid.to_be_bytes());
        b
    }

    #[test]
    fn program_steers_cm_messages_by_service_id_and_comm_id() {
        let map = [(0, 0), (1, 1), (2, 2), (3, 3)];
        let sid = 0x0000_0000_0106_4e20u64;
        let p = program(&map, &[(sid, 2), (sid + 1, 3)]);
        assert_eq!(run(&p, &cm(0x0010, 0x0100_0001, 0, sid)), Some(2), "REQ to its listener");
        assert_eq!(run(&p, &cm(0x0010, 0x0100_0001, 0, sid + 1)), Some(3));
        assert_eq!(run(&p, &cm(0x0017, 0x0100_0001, 0, sid + 1)), Some(3), "SIDR_REQ");
        assert_eq!(run(&p, &cm(0x0010, 0x0100_0001, 0, sid + 2)), Some(u32::MAX), "no listener");
        assert_eq!(run(&p, &cm(0x0010, 0x0100_0001, 0, sid | 1 << 40)), Some(u32::MAX));
        for attr in [0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0019, 0x001A] {
            // the receiver's comm ID is the remote one, slot 1
            assert_eq!(run(&p, &cm(attr, 0x0300_0005, 0x0100_0009, 0)), Some(1), "{attr:#x}");
            let mut b = cm(attr, 0x0300_0005, 0x0100_0009, 0);
            assert_eq!(tsteer::cm_target_slot(&b), Some(1), "the tap agrees: {attr:#x}");
            b[tsteer::CM_DATA_AT + 4] = 3;
            assert_eq!(run(&p, &b), Some(3));
        }
        assert_eq!(run(&p, &cm(0x0018, 0x0200_0005, 0x0100_0009, 0)), Some(2), "SIDR_REP");
        let mut other = cm(0x0013, 0, 0x0300_0000, 0);
        other[tsteer::MAD_CLASS_AT] = 0x04;
        assert_eq!(run(&p, &other), Some(0), "another class: slot 0");
        let mut not_qp1 = cm(0x0013, 0, 0x0300_0000, 0);
        not_qp1[5..8].copy_from_slice(&[2, 0, 1]);
        assert_eq!(run(&p, &not_qp1), Some(2), "QPN 0x020001 is not QP1");
    }

    /// Three sockets in one group on a loopback address of their own; the
    /// kernel runs our program: each QPN's datagrams reach its slot's
    /// socket, before and after the middle socket closes.
    #[test]
    fn the_kernel_steers_by_the_program() {
        let addr: SocketAddr = "127.0.70.1:4791".parse().unwrap();
        let bind = || {
            let mut c = roce_transport::UdpConfig::new(addr);
            c.reuseport = true;
            roce_transport::UdpTransport::bind(c).unwrap().try_clone_socket().unwrap()
        };
        let socks: Vec<UdpSocket> = (0..3).map(|_| bind()).collect();
        // index i holds slot 10 + i
        attach(&socks[0], &program(&[(10, 0), (11, 1), (12, 2)], &[])).unwrap();
        let tx = UdpSocket::bind("127.0.70.2:0").unwrap();
        for s in &socks {
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        }
        let mut buf = [0u8; 64];
        for round in 0..5u32 {
            for slot in [10u32, 11, 12] {
                tx.send_to(&bth(slot << 16 | round), addr).unwrap();
                let (n, _) = socks[(slot - 10) as usize].recv_from(&mut buf).unwrap();
                assert_eq!(buf[..n], bth(slot << 16 | round)[..], "slot {slot}");
            }
        }
        // a probe for index 2 reaches socket 2
        tx.send_to(&tsteer::probe(2, 7), addr).unwrap();
        let (n, _) = socks[2].recv_from(&mut buf).unwrap();
        assert_eq!(n, tsteer::PROBE_LEN);
        // socket 1 closes: socket 2 takes index 1
        let mut socks = socks;
        let last = socks.pop().unwrap();
        socks.pop();
        attach(&socks[0], &program(&[(10, 0), (12, 1)], &[])).unwrap();
        tx.send_to(&bth(12 << 16 | 99), addr).unwrap();
        let (n, _) = last.recv_from(&mut buf).unwrap();
        assert_eq!(buf[..n], bth(12 << 16 | 99)[..]);
    }

    /// An Ethernet frame carrying `payload` in UDP to `dst:port` over IPv4
    /// (with `opts` 4-byte words of IP options) or IPv6.
    fn frame(dst: IpAddr, port: u16, opts: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        match dst {
            IpAddr::V4(a) => {
                f.extend([0x08, 0x00, 0x45 + opts, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0]);
                f.extend([10, 0, 0, 9]);
                f.extend(a.octets());
                f.extend(std::iter::repeat_n(1, 4 * usize::from(opts)));
            }
            IpAddr::V6(a) => {
                f.extend([0x86, 0xDD, 0x60, 0, 0, 0, 0, 0, 17, 64]);
                f.extend([0xfd; 16]);
                f.extend(a.octets());
            }
        }
        f.extend(49152u16.to_be_bytes());
        f.extend(port.to_be_bytes());
        f.extend([0, 0, 0, 0]);
        f.extend(payload);
        f
    }

    #[test]
    fn raw_filter_takes_this_members_frames_only() {
        let me: IpAddr = "10.9.0.1".parse().unwrap();
        let sid = 0x0106_4e20u64;
        let p = raw_filter(3, me, 4791, &[sid]);
        let ok = Some(RAW_ACCEPT);
        for opts in [0, 1, 10] {
            assert_eq!(run(&p, &frame(me, 4791, opts, &bth(0x03_0011))), ok, "options {opts}");
            assert_eq!(run(&p, &frame(me, 4791, opts, &bth(0x04_0011))), Some(0));
        }
        assert_eq!(run(&p, &frame(me, 4792, 0, &bth(0x03_0011))), Some(0), "another port");
        let other: IpAddr = "10.9.0.2".parse().unwrap();
        assert_eq!(run(&p, &frame(other, 4791, 0, &bth(0x03_0011))), Some(0), "not our address");
        // a multicast group's datagram (QPN 0xFFFFFF: no member's slot) is
        // every member's; the transport keeps the groups it joined
        let group: IpAddr = "239.1.2.3".parse().unwrap();
        assert_eq!(run(&p, &frame(group, 4791, 0, &bth(0xFF_FFFF))), ok, "a group");
        assert_eq!(run(&p, &frame(group, 4791, 2, &bth(0xFF_FFFF))), ok, "a group, IP options");
        assert_eq!(
            run(&p, &frame(group, 4792, 0, &bth(0xFF_FFFF))),
            Some(0),
            "a group, other port"
        );
        let g6: IpAddr = "ff0e::1:2".parse().unwrap();
        let me6: IpAddr = "fd00::7".parse().unwrap();
        let p6 = raw_filter(2, me6, 4791, &[]);
        assert_eq!(run(&p6, &frame(g6, 4791, 0, &bth(0xFF_FFFF))), ok, "an IPv6 group");
        assert_eq!(run(&p6, &frame(g6, 4000, 0, &bth(0xFF_FFFF))), Some(0), "IPv6, other port");
        assert_eq!(run(&p6, &frame(me6, 4791, 0, &bth(0x02_0011))), ok, "IPv6, mine");
        assert_eq!(run(&p6, &frame(me6, 4791, 0, &bth(0x03_0011))), Some(0), "IPv6, another's");
        let mut frag = frame(me, 4791, 0, &bth(0x03_0011));
        frag[20] = 0x20; // more fragments, offset 8
        frag[21] = 1;
        assert_eq!(run(&p, &frag), Some(0), "a fragment");
        let mut tcp = frame(me, 4791, 0, &bth(0x03_0011));
        tcp[23] = 6;
        assert_eq!(run(&p, &tcp), Some(0), "not UDP");
        // the CM: a REQ to our service, messages to our comm IDs
        assert_eq!(run(&p, &frame(me, 4791, 0, &cm(0x0010, 0x0100_0001, 0, sid))), ok);
        assert_eq!(run(&p, &frame(me, 4791, 0, &cm(0x0010, 0x0100_0001, 0, sid + 1))), Some(0));
        assert_eq!(run(&p, &frame(me, 4791, 0, &cm(0x0013, 9, 0x0300_0002, 0))), ok);
        assert_eq!(run(&p, &frame(me, 4791, 0, &cm(0x0013, 9, 0x0400_0002, 0))), Some(0));
        assert_eq!(run(&p, &frame(me, 4791, 0, &tsteer::probe(3, 1))), Some(0), "no probes");
        // another MAD: slot 0's
        let mut mad = cm(0x0013, 0, 0, 0);
        mad[tsteer::MAD_CLASS_AT] = 0x04;
        assert_eq!(run(&p, &frame(me, 4791, 0, &mad)), Some(0));
        assert_eq!(run(&raw_filter(0, me, 4791, &[]), &frame(me, 4791, 0, &mad)), ok);
        // neighbour discovery reaches every member
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(run(&p, &arp), ok);
        let mut v6 = frame("fd00::1".parse().unwrap(), 0, 0, &[0; 24]);
        v6[20] = 58;
        assert_eq!(run(&p, &v6), ok, "ICMPv6");
        assert_eq!(run(&p, &frame("fd00::1".parse().unwrap(), 4791, 0, &bth(0x03_0011))), Some(0));
        assert_eq!(run(&p, &[0u8; 10]), None, "a runt: the kernel drops it");
        // an IPv6 device
        let me6: IpAddr = "fd00::1".parse().unwrap();
        let p6 = raw_filter(5, me6, 4791, &[]);
        assert_eq!(run(&p6, &frame(me6, 4791, 0, &bth(0x05_0011))), ok);
        assert_eq!(run(&p6, &frame(me6, 4791, 0, &bth(0x03_0011))), Some(0));
        assert_eq!(run(&p6, &frame("fd00::2".parse().unwrap(), 4791, 0, &bth(0x05_0011))), Some(0));
        assert_eq!(run(&p6, &frame(me6, 4000, 0, &bth(0x05_0011))), Some(0));
        assert_eq!(
            run(&p6, &frame(me, 4791, 0, &bth(0x05_0011))),
            Some(0),
            "IPv4 to an IPv6 device"
        );
    }

    /// The members of a raw device: each one's filter is attached at join;
    /// of the live members the one in the lowest slot answers neighbour
    /// requests, and the next one takes over when it leaves.
    #[test]
    fn exactly_one_raw_member_answers_neighbours() {
        let root = std::env::temp_dir().join(format!("roce-host-gate-{}", std::process::id()));
        let dir = root.join("raw");
        let addr: SocketAddr = "10.0.0.1:4791".parse().unwrap();
        // (any socket takes a filter: a UDP one stands in for the packet socket)
        let sock = || std::os::fd::OwnedFd::from(UdpSocket::bind("127.0.0.1:0").unwrap());
        let j0 = Joining::start_in(dir.clone(), addr).unwrap();
        let g0 = j0.answer_gate();
        let s0 = j0.finish_raw(sock()).unwrap();
        let j1 = Joining::start_in(dir.clone(), addr).unwrap();
        let g1 = j1.answer_gate();
        let s1 = j1.finish_raw(sock()).unwrap();
        assert_eq!((s0.slot(), s1.slot()), (Some(0), Some(1)));
        assert!(g0() && !g1(), "slot 0 answers, slot 1 does not");
        let l = s1.listen(0x0106_4e20).unwrap();
        assert_eq!(registry::listeners(&dir), vec![(0x0106_4e20, 1)]);
        assert_eq!(
            s0.listen(0x0106_4e20).unwrap_err().kind(),
            io::ErrorKind::AddrInUse,
            "a service ID has one listener per device"
        );
        drop(l);
        drop(s0);
        assert!(g1(), "slot 1 answers once slot 0 has left");
        drop(s1);
        let _ = std::fs::remove_dir_all(&root);
    }
}
