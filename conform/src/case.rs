//! How a case is written down: what the agent sets up, then a list of
//! steps (packets the tester sends, packets it expects back, work the
//! agent posts, completions, states and region bytes it must see). Cases
//! are data; [`crate::run`] executes them. PSNs are relative: a request
//! the tester sends at `psn: 2` carries the QP's `rq_psn` + 2, a request
//! the target sends at `psn: 0` carries its `sq_psn`.

use crate::agent::{QpParams, QpStateName};
use roce_packet::{NakCode, Opcode};

/// The target's role in a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// The tester requests; the target responds.
    Responder,
    /// The target requests (the agent posts work); the tester responds.
    Requester,
}

impl Direction {
    /// `responder` or `requester`.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Responder => "responder",
            Direction::Requester => "requester",
        }
    }
}

/// The QP and region a case asks the agent for ([`QpParams::DEFAULT`] and
/// what the case changes).
pub type Setup = QpParams;

/// Which remote key a crafted request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// The region's rkey.
    Good,
    /// The region's rkey with its key byte changed.
    WrongKey,
    /// The region's rkey with its index bits changed (no such region).
    WrongIndex,
    /// The rkey of the memory window the set-up bound.
    Window,
}

/// Where a crafted request points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Va {
    /// This offset into the region.
    Off(u64),
    /// This many bytes before the region's start.
    Before(u64),
    /// This absolute address.
    Abs(u64),
}

/// A RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reth {
    /// Where.
    pub va: Va,
    /// Which key.
    pub key: Key,
    /// The DMA length it announces.
    pub dma_len: u32,
}

/// An AtomicETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Atomic {
    /// Where.
    pub va: Va,
    /// Which key.
    pub key: Key,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

/// A request the tester crafts. Its payload is `len` bytes of
/// [`data`]`(salt, msg_off, len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    /// The opcode.
    pub op: Opcode,
    /// PSN relative to the QP's `rq_psn` (wraps at 2^24).
    pub psn: i32,
    /// Payload length.
    pub len: u32,
    /// Offset of this packet's payload in its message (for the data
    /// pattern of multi-packet messages).
    pub msg_off: u32,
    /// Pattern salt.
    pub salt: u8,
    /// RETH, when the opcode has one.
    pub reth: Option<Reth>,
    /// AtomicETH, when the opcode has one.
    pub atomic: Option<Atomic>,
    /// Immediate data, when the opcode has it.
    pub imm: Option<u32>,
    /// The AckReq bit.
    pub ack_req: bool,
    /// A pad count other than the one the length needs.
    pub pad: Option<u8>,
    /// A destination QPN other than the target's QP.
    pub dest_qp: Option<u32>,
    /// A transport header version other than 0.
    pub tver: Option<u8>,
    /// A P_Key other than the default 0xFFFF.
    pub pkey: Option<u16>,
    /// The FECN and BECN bits set.
    pub ecn: bool,
    /// UD: a Q_Key in the DETH other than the QP's.
    pub qkey: Option<u32>,
    /// Send it with a wrong ICRC.
    pub bad_icrc: bool,
    /// A FETH (IBA 1.5 FLUSH): placement type in bits 0..4, selectivity
    /// level in bits 4..6.
    pub feth: Option<u32>,
    /// An IETH naming this key (SEND with invalidate).
    pub ieth: Option<Key>,
    /// An XRC request's XRCETH names this SRQ number instead of the
    /// target's XRC SRQ.
    pub xrc_srq: Option<u32>,
    /// Sent to the case's multicast group (`agent::case_group`), not to
    /// the target's address.
    pub to_group: bool,
    /// The IP TOS byte it leaves with (DSCP and ECN; 0: DSCP 0, Not-ECT).
    pub tos: u8,
}

impl Req {
    /// `op` at relative PSN `psn`, no payload, AckReq set.
    pub const fn new(op: Opcode, psn: i32) -> Req {
        Req {
            op,
            psn,
            len: 0,
            msg_off: 0,
            salt: 1,
            reth: None,
            atomic: None,
            imm: None,
            ack_req: true,
            pad: None,
            dest_qp: None,
            tver: None,
            pkey: None,
            ecn: false,
            qkey: None,
            bad_icrc: false,
            feth: None,
            ieth: None,
            xrc_srq: None,
            to_group: false,
            tos: 0,
        }
    }
    /// With the IP header's ECN field Congestion Experienced (TOS 0x03),
    /// as a congested switch marks an ECN-capable packet (Annex A17.9).
    pub const fn ce_marked(mut self) -> Req {
        self.tos = CE;
        self
    }
    /// An XRC request naming the SRQ number `n` (not the target's SRQ).
    pub const fn xrc_srq(mut self, n: u32) -> Req {
        self.xrc_srq = Some(n);
        self
    }
    /// To the case's multicast group (and the multicast QPN 0xFFFFFF).
    pub const fn to_group(mut self) -> Req {
        self.to_group = true;
        self.dest_qp = Some(0xFF_FFFF);
        self
    }
    /// With an IETH naming `key`.
    pub const fn ieth(mut self, key: Key) -> Req {
        self.ieth = Some(key);
        self
    }
    /// With a FETH.
    pub const fn feth(mut self, feth: u32) -> Req {
        self.feth = Some(feth);
        self
    }
    /// With `len` payload bytes.
    pub const fn len(mut self, len: u32) -> Req {
        self.len = len;
        self
    }
    /// With pattern `salt`, payload at message offset `msg_off`.
    pub const fn data(mut self, salt: u8, msg_off: u32) -> Req {
        self.salt = salt;
        self.msg_off = msg_off;
        self
    }
    /// With a RETH.
    pub const fn reth(mut self, va: Va, key: Key, dma_len: u32) -> Req {
        self.reth = Some(Reth { va, key, dma_len });
        self
    }
    /// With an AtomicETH.
    pub const fn atomic(mut self, va: Va, key: Key, swap_add: u64, compare: u64) -> Req {
        self.atomic = Some(Atomic { va, key, swap_add, compare });
        self
    }
    /// With immediate data.
    pub const fn imm(mut self, imm: u32) -> Req {
        self.imm = Some(imm);
        self
    }
    /// AckReq cleared.
    pub const fn no_ack_req(mut self) -> Req {
        self.ack_req = false;
        self
    }
    /// With this pad count.
    pub const fn pad(mut self, pad: u8) -> Req {
        self.pad = Some(pad);
        self
    }
    /// To another QPN.
    pub const fn to_qp(mut self, qpn: u32) -> Req {
        self.dest_qp = Some(qpn);
        self
    }
    /// With this TVer.
    pub const fn tver(mut self, tver: u8) -> Req {
        self.tver = Some(tver);
        self
    }
    /// With this P_Key.
    pub const fn pkey(mut self, pkey: u16) -> Req {
        self.pkey = Some(pkey);
        self
    }
    /// UD: with this Q_Key in the DETH.
    pub const fn qkey(mut self, qkey: u32) -> Req {
        self.qkey = Some(qkey);
        self
    }
    /// With FECN and BECN set.
    pub const fn ecn(mut self) -> Req {
        self.ecn = true;
        self
    }
    /// With a wrong ICRC.
    pub const fn bad_icrc(mut self) -> Req {
        self.bad_icrc = true;
        self
    }
}

/// The IP TOS byte of a packet marked Congestion Experienced: DSCP 0,
/// ECN field 0b11.
pub const CE: u8 = 0b11;

/// The data pattern: byte `i` of a message with salt `salt`. The
/// offset's bits above the low eight are mixed in, so that bytes a
/// multiple of 256 apart (an MTU-sized chunk put in the wrong place)
/// differ.
pub fn data(salt: u8, msg_off: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(salt, msg_off.wrapping_add(i))).collect()
}

/// Byte `j` of the pattern with salt `salt`.
const fn pattern_byte(salt: u8, j: u32) -> u8 {
    ((j.wrapping_mul(7) ^ (j >> 8).wrapping_mul(0x9d)) as u8).wrapping_add(salt)
}

#[cfg(test)]
#[test]
fn background_u64_reads_the_pattern() {
    for off in [0, 64, 1020, 65528] {
        let b = data(BACKGROUND, off as u32, 8);
        assert_eq!(background_u64(off), u64::from_le_bytes(b.try_into().unwrap()), "at {off}");
    }
    // bytes 256 apart differ (an MTU-sized chunk in the wrong place shows)
    assert_ne!(data(1, 0, 64), data(1, 1024, 64));
}

/// What the region (filled with the background pattern at set-up) must
/// hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bytes {
    /// The background pattern: nothing was written there.
    Untouched,
    /// [`data`]`(salt, msg_off, len)`: what the tester's requests carried.
    Data {
        /// Pattern salt.
        salt: u8,
        /// Message offset of the first byte checked.
        msg_off: u32,
    },
    /// A little-endian 64-bit value (an atomic's result).
    U64(u64),
    /// The 40-byte GRH area of a UD receive for an IPv4 sender: an IPv4
    /// header at bytes 20..40 from the tester to the target.
    GrhV4,
}

/// The background pattern's salt.
pub const BACKGROUND: u8 = 0xA5;

/// The 64-bit value (little-endian, as a CPU reads it) the background
/// pattern puts at region offset `off`: what an atomic there finds.
pub const fn background_u64(off: u64) -> u64 {
    let mut v = 0u64;
    let mut i = 0;
    while i < 8 {
        let b = pattern_byte(BACKGROUND, (off + i) as u32);
        v |= (b as u64) << (8 * i);
        i += 1;
    }
    v
}

/// A work request the agent posts (target as requester).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    /// `ibv_wr_opcode`.
    pub opcode: u32,
    /// Local region offset.
    pub off: u64,
    /// Length.
    pub len: u32,
    /// Remote address the target names (the tester has no memory: any).
    pub remote_addr: u64,
    /// Remote key the target names.
    pub rkey: u32,
    /// Immediate data.
    pub imm: u32,
    /// Compare / add.
    pub compare_add: u64,
    /// Swap.
    pub swap: u64,
    /// IBV_SEND_FENCE.
    pub fence: bool,
}

impl Post {
    /// `opcode` of `len` bytes from region offset `off`.
    pub const fn new(opcode: u32, off: u64, len: u32) -> Post {
        Post {
            opcode,
            off,
            len,
            remote_addr: 0x7000_0000,
            rkey: 0x1234,
            imm: 0,
            compare_add: 0,
            swap: 0,
            fence: false,
        }
    }
    /// With immediate data.
    pub const fn imm(mut self, imm: u32) -> Post {
        self.imm = imm;
        self
    }
    /// Fenced: waits for every earlier READ and atomic.
    pub const fn fence(mut self) -> Post {
        self.fence = true;
        self
    }
    /// With compare/add and swap values.
    pub const fn atomic(mut self, compare_add: u64, swap: u64) -> Post {
        self.compare_add = compare_add;
        self.swap = swap;
        self
    }
}

/// How the tester answers the target's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resp {
    /// A positive ACK at this relative PSN.
    Ack(i32),
    /// A NAK.
    Nak(i32, NakCode),
    /// An RNR NAK with this timer code.
    RnrNak(i32, u8),
    /// READ response packets from relative PSN `psn` carrying
    /// `data(salt, msg_off, len)` (MTU-sized), the first `skip` of them
    /// left out (lost), `only` the first `only` sent when set.
    Read {
        /// First PSN.
        psn: i32,
        /// Bytes in all.
        len: u32,
        /// Pattern salt.
        salt: u8,
        /// Message offset of the first byte (a READ re-issued for its
        /// remainder).
        msg_off: u32,
        /// Packets not sent at the start.
        skip: u32,
        /// Send at most this many.
        only: Option<u32>,
    },
    /// An atomic ACK returning `orig`.
    AtomicAck(i32, u64),
}

/// One step of a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The agent posts a receive of `len` bytes at region offset `off`.
    PostRecv {
        /// Offset.
        off: u64,
        /// Length.
        len: u32,
    },
    /// The tester sends a request.
    Send(Req),
    /// The target acknowledges up to this relative PSN (earlier ACKs,
    /// which a device that does not coalesce sends, are skipped).
    Ack(i32),
    /// The target answers with this NAK at this PSN.
    Nak(i32, NakCode),
    /// The target answers with an RNR NAK at this PSN carrying the QP's
    /// RNR timer.
    RnrNak(i32),
    /// The target answers with READ responses from this PSN carrying the
    /// region's bytes `[off, off + len)`.
    ReadResp {
        /// First PSN.
        psn: i32,
        /// Region offset.
        off: u64,
        /// Bytes.
        len: u32,
    },
    /// The target answers with an atomic ACK returning `orig`.
    AtomicAck(i32, u64),
    /// Nothing from the target for this many milliseconds.
    Quiet(u32),
    /// The agent's next completion has this status (`ibv_wc_status`).
    Completion(u32),
    /// The agent's next completion has this status and byte count.
    CompletionLen(u32, u32),
    /// The agent's next completion has this status and byte count and
    /// carries this immediate value.
    CompletionImm(u32, u32, u32),
    /// The agent has no completion.
    NoCompletion,
    /// The QP is in this state (within a second).
    State(QpStateName),
    /// The region's bytes `[off, off + len)`.
    Mem {
        /// Offset.
        off: u64,
        /// Length.
        len: u32,
        /// What they must be.
        want: Bytes,
    },
    /// The agent posts a send work request.
    Post(Post),
    /// The target sends a request with this opcode at this relative PSN.
    Request(Opcode, i32),
    /// The target sends a request with this opcode at this relative PSN
    /// again, at least `min_ms` and at most `max_ms` after the last one.
    Retransmit {
        /// Opcode.
        op: Opcode,
        /// Relative PSN.
        psn: i32,
        /// Earliest (ms after the previous packet).
        min_ms: u32,
        /// Latest.
        max_ms: u32,
    },
    /// The agent moves the QP to this state (RTS → SQD, SQD → RTS).
    Modify(QpStateName),
    /// The agent's device refuses to post this send work request.
    PostRefused(Post),
    /// The target's last request carried this immediate value.
    ReqImm(u32),
    /// The target's last request's RETH names the posted remote address
    /// plus `off`, for `len` bytes.
    ReqReth {
        /// Offset from the work request's remote address.
        off: u64,
        /// DMA length.
        len: u32,
    },
    /// The tester answers.
    Respond(Resp),
    /// Wait.
    Sleep(u32),
    /// The tester sends `n` copies of a request at consecutive PSNs (from
    /// the request's) in one `sendmmsg`: they arrive back to back.
    Burst {
        /// The first request.
        req: Req,
        /// How many.
        n: u32,
    },
    /// After waiting `wait_ms` for more, `min..=max` CNPs have come to
    /// the tester's QP since the previous such step (or the case's start;
    /// with the answers of the steps between, or since), each with Annex
    /// A17.9.3's format: 32 bytes, opcode 0x81, P_Key 0xFFFF, BECN, the
    /// tester's QPN, A 0, PSN 0, 16 zero bytes, a good ICRC. None at all
    /// from a device whose packets are Not-ECT is n/a: it takes no part in
    /// congestion management.
    Cnps {
        /// At least this many.
        min: u32,
        /// At most this many.
        max: u32,
        /// How long to wait for them.
        wait_ms: u32,
    },
    /// The tester sends a well-formed CNP (Annex A17.9.3) to the target's
    /// QP, from DSCP 48 and Not-ECT, as a NIC's notification point does.
    SendCnp,
    /// The target's latest packet (not a CNP) left ECN-capable: ECT(0) or
    /// ECT(1) in its IP header. Not-ECT is n/a (the device takes no part
    /// in ECN congestion management); CE fails (only a switch marks CE).
    Ect,
}

/// One conformance case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Stable id, `area.what`.
    pub id: &'static str,
    /// The IBA rule: section and compliance statement.
    pub iba: &'static str,
    /// What the rule says, in one line.
    pub rule: &'static str,
    /// The target's role.
    pub direction: Direction,
    /// What the agent sets up.
    pub setup: Setup,
    /// The script.
    pub steps: &'static [Step],
}
