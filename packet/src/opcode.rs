//! The one BTH opcode table (IBA Vol 1 §9.2.1, Table 38, plus IBA 1.5's
//! ATOMIC_WRITE and FLUSH and RoCEv2's CNP, Annex A17.9.3).
//!
//! Every fact about an opcode — its transport, the extension headers it
//! carries, whether it carries a payload, its role in a message — lives in
//! [`TABLE`]. Header lengths and offsets are computed from the header set,
//! never written by hand (rxe's history has bugs from the latter).

use core::fmt;

/// Length of the BTH (IBA §9.2), which every extension header's offset
/// counts from ([`crate::bth::LEN`] is this value).
pub const BTH_LEN: usize = 12;

/// Transport service, the top three bits of the opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Reliable Datagram (decoded only; no RoCE implementation uses it).
    Rd,
    /// Unreliable Datagram.
    Ud,
    /// RoCEv2 congestion notification packet (opcode 0x81).
    Cnp,
    /// Extended Reliable Connected (IBA Vol 1 Annex A14, opcodes
    /// 0xA0..=0xB7): RC's operations, each request with an XRCETH naming
    /// the XRC SRQ at the target.
    Xrc,
}

impl Transport {
    pub const fn prefix(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "",
            Transport::Xrc => "XRC",
        }
    }
}

/// A set of extension headers (the ones that follow the BTH).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

/// One extension header kind. The discriminant order is the order in which
/// the headers appear on the wire after the BTH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ExtHeader {
    Rdeth = 0,
    Deth = 1,
    /// XRC: the XRC SRQ number (24 bits) in every request (Annex A14).
    Xrceth = 2,
    Feth = 3,
    Reth = 4,
    AtomicEth = 5,
    Aeth = 6,
    AtomicAckEth = 7,
    ImmDt = 8,
    Ieth = 9,
    /// The 16 reserved bytes of a CNP.
    CnpPad = 10,
}

impl ExtHeader {
    /// Every header kind, in wire order.
    pub const ALL: [ExtHeader; 11] = [
        ExtHeader::Rdeth,
        ExtHeader::Deth,
        ExtHeader::Xrceth,
        ExtHeader::Feth,
        ExtHeader::Reth,
        ExtHeader::AtomicEth,
        ExtHeader::Aeth,
        ExtHeader::AtomicAckEth,
        ExtHeader::ImmDt,
        ExtHeader::Ieth,
        ExtHeader::CnpPad,
    ];
    /// Length on the wire in bytes.
    #[allow(clippy::len_without_is_empty)] // a header kind, not a container
    pub const fn len(self) -> usize {
        match self {
            ExtHeader::Rdeth => 4,
            ExtHeader::Deth => 8,
            ExtHeader::Xrceth => 4,
            ExtHeader::Feth => 4,
            ExtHeader::Reth => 16,
            ExtHeader::AtomicEth => 28,
            ExtHeader::Aeth => 4,
            ExtHeader::AtomicAckEth => 8,
            ExtHeader::ImmDt => 4,
            ExtHeader::Ieth => 4,
            ExtHeader::CnpPad => 16,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            ExtHeader::Rdeth => "RDETH",
            ExtHeader::Deth => "DETH",
            ExtHeader::Xrceth => "XRCETH",
            ExtHeader::Feth => "FETH",
            ExtHeader::Reth => "RETH",
            ExtHeader::AtomicEth => "AtomicETH",
            ExtHeader::Aeth => "AETH",
            ExtHeader::AtomicAckEth => "AtomicAckETH",
            ExtHeader::ImmDt => "ImmDt",
            ExtHeader::Ieth => "IETH",
            ExtHeader::CnpPad => "CNP",
        }
    }
}

impl HeaderSet {
    pub const EMPTY: HeaderSet = HeaderSet(0);
    pub const fn of(h: ExtHeader) -> HeaderSet {
        HeaderSet(1 << h as u8)
    }
    pub const fn with(self, h: ExtHeader) -> HeaderSet {
        HeaderSet(self.0 | (1 << h as u8))
    }
    pub const fn contains(self, h: ExtHeader) -> bool {
        self.0 & (1 << h as u8) != 0
    }
    pub const fn bits(self) -> u16 {
        self.0
    }
    /// Total length of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < ExtHeader::ALL.len() {
            if self.contains(ExtHeader::ALL[i]) {
                n += ExtHeader::ALL[i].len();
            }
            i += 1;
        }
        n
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// Offset of `h` from the start of the BTH, if present.
    pub const fn offset_of(self, h: ExtHeader) -> Option<usize> {
        if !self.contains(h) {
            return None;
        }
        let mut off = BTH_LEN;
        let mut i = 0;
        while i < ExtHeader::ALL.len() {
            let x = ExtHeader::ALL[i];
            if x as u8 == h as u8 {
                return Some(off);
            }
            if self.contains(x) {
                off += x.len();
            }
            i += 1;
        }
        None
    }
    /// Iterate the headers in wire order.
    pub fn iter(self) -> impl Iterator<Item = ExtHeader> {
        ExtHeader::ALL.into_iter().filter(move |h| self.contains(*h))
    }
}

impl fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(|h| h.name())).finish()
    }
}

/// What an opcode does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Ack,
    AtomicAck,
    CompareSwap,
    FetchAdd,
    Resync,
    AtomicWrite,
    Flush,
    Cnp,
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// Starts a message (FIRST or ONLY).
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Ends a message (LAST or ONLY).
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Everything the table knows about one opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpInfo {
    /// IBA name without the transport prefix, e.g. `SEND_LAST_WITH_IMMEDIATE`.
    pub name: &'static str,
    pub transport: Transport,
    pub kind: OpKind,
    pub position: Position,
    /// Extension headers after the BTH, in wire order.
    pub headers: HeaderSet,
    /// Whether a payload may follow the headers.
    pub has_payload: bool,
}

impl OpInfo {
    /// Sent by a requester (as opposed to a response or acknowledgement).
    /// A CNP is neither a request nor a response: the congestion
    /// notification point sends it, outside any QP's message flow.
    pub const fn is_request(&self) -> bool {
        !matches!(self.kind, OpKind::ReadResponse | OpKind::Ack | OpKind::AtomicAck | OpKind::Cnp)
    }
    /// Sent by a responder (ACK, atomic ACK, read response).
    pub const fn is_response(&self) -> bool {
        matches!(self.kind, OpKind::ReadResponse | OpKind::Ack | OpKind::AtomicAck)
    }
    /// Carries immediate data.
    pub const fn has_imm(&self) -> bool {
        self.headers.contains(ExtHeader::ImmDt)
    }
    /// Carries an invalidate rkey.
    pub const fn has_inv(&self) -> bool {
        self.headers.contains(ExtHeader::Ieth)
    }
    /// Consumes a receive WQE at the responder: every SEND packet (the WQE
    /// is taken at FIRST/ONLY and finished at LAST/ONLY) and the last
    /// packet of an RDMA WRITE with immediate.
    pub const fn uses_recv_wqe(&self) -> bool {
        match self.kind {
            OpKind::Send => true,
            OpKind::Write => self.has_imm(),
            _ => false,
        }
    }
    /// Length of the BTH plus extension headers.
    pub const fn header_len(&self) -> usize {
        BTH_LEN + self.headers.len()
    }
}

/// A BTH opcode. Unknown values are kept, never rejected at construction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Opcode(pub u8);

const fn hs(list: &[ExtHeader]) -> HeaderSet {
    let mut s = HeaderSet::EMPTY;
    let mut i = 0;
    while i < list.len() {
        s = s.with(list[i]);
        i += 1;
    }
    s
}

use ExtHeader as H;
use OpKind as K;
use Position as P;

/// One row of the low-5-bit table: (name, kind, position, headers, payload).
type OpRow = (&'static str, OpKind, Position, HeaderSet, bool);

/// The low five bits of the opcode.
const OPS: [Option<OpRow>; 32] = {
    let mut t: [Option<OpRow>; 32] = [None; 32];
    t[0x00] = Some(("SEND_FIRST", K::Send, P::First, hs(&[]), true));
    t[0x01] = Some(("SEND_MIDDLE", K::Send, P::Middle, hs(&[]), true));
    t[0x02] = Some(("SEND_LAST", K::Send, P::Last, hs(&[]), true));
    t[0x03] = Some(("SEND_LAST_WITH_IMMEDIATE", K::Send, P::Last, hs(&[H::ImmDt]), true));
    t[0x04] = Some(("SEND_ONLY", K::Send, P::Only, hs(&[]), true));
    t[0x05] = Some(("SEND_ONLY_WITH_IMMEDIATE", K::Send, P::Only, hs(&[H::ImmDt]), true));
    t[0x06] = Some(("RDMA_WRITE_FIRST", K::Write, P::First, hs(&[H::Reth]), true));
    t[0x07] = Some(("RDMA_WRITE_MIDDLE", K::Write, P::Middle, hs(&[]), true));
    t[0x08] = Some(("RDMA_WRITE_LAST", K::Write, P::Last, hs(&[]), true));
    t[0x09] = Some(("RDMA_WRITE_LAST_WITH_IMMEDIATE", K::Write, P::Last, hs(&[H::ImmDt]), true));
    t[0x0A] = Some(("RDMA_WRITE_ONLY", K::Write, P::Only, hs(&[H::Reth]), true));
    t[0x0B] =
        Some(("RDMA_WRITE_ONLY_WITH_IMMEDIATE", K::Write, P::Only, hs(&[H::Reth, H::ImmDt]), true));
    t[0x0C] = Some(("RDMA_READ_REQUEST", K::ReadRequest, P::Only, hs(&[H::Reth]), false));
    t[0x0D] = Some(("RDMA_READ_RESPONSE_FIRST", K::ReadResponse, P::First, hs(&[H::Aeth]), true));
    t[0x0E] = Some(("RDMA_READ_RESPONSE_MIDDLE", K::ReadResponse, P::Middle, hs(&[]), true));
    t[0x0F] = Some(("RDMA_READ_RESPONSE_LAST", K::ReadResponse, P::Last, hs(&[H::Aeth]), true));
    t[0x10] = Some(("RDMA_READ_RESPONSE_ONLY", K::ReadResponse, P::Only, hs(&[H::Aeth]), true));
    t[0x11] = Some(("ACKNOWLEDGE", K::Ack, P::Only, hs(&[H::Aeth]), false));
    t[0x12] =
        Some(("ATOMIC_ACKNOWLEDGE", K::AtomicAck, P::Only, hs(&[H::Aeth, H::AtomicAckEth]), false));
    t[0x13] = Some(("COMPARE_SWAP", K::CompareSwap, P::Only, hs(&[H::AtomicEth]), false));
    t[0x14] = Some(("FETCH_ADD", K::FetchAdd, P::Only, hs(&[H::AtomicEth]), false));
    t[0x15] = Some(("RESYNC", K::Resync, P::Only, hs(&[]), false));
    t[0x16] = Some(("SEND_LAST_WITH_INVALIDATE", K::Send, P::Last, hs(&[H::Ieth]), true));
    t[0x17] = Some(("SEND_ONLY_WITH_INVALIDATE", K::Send, P::Only, hs(&[H::Ieth]), true));
    t[0x1C] = Some(("FLUSH", K::Flush, P::Only, hs(&[H::Feth, H::Reth]), false));
    t[0x1D] = Some(("ATOMIC_WRITE", K::AtomicWrite, P::Only, hs(&[H::Reth]), true));
    t
};

/// Is the low-5-bit operation defined for this transport?
const fn valid_for(tr: Transport, low: u8) -> bool {
    match tr {
        // RC: 0x00..=0x14, the invalidate sends, FLUSH, ATOMIC_WRITE (RESYNC is RD only)
        Transport::Rc => low <= 0x14 || low == 0x16 || low == 0x17 || low == 0x1C || low == 0x1D,
        Transport::Uc => low <= 0x0B,
        Transport::Rd => low <= 0x15,
        Transport::Ud => low == 0x04 || low == 0x05,
        // XRC: RC's operations up to FETCH_ADD and the invalidate sends
        // (as mlx5 sends them; no RESYNC, FLUSH or ATOMIC_WRITE)
        Transport::Xrc => low <= 0x14 || low == 0x16 || low == 0x17,
        Transport::Cnp => false,
    }
}

const fn build(op: u8) -> Option<OpInfo> {
    if op == 0x81 {
        return Some(OpInfo {
            name: "CNP",
            transport: Transport::Cnp,
            kind: OpKind::Cnp,
            position: Position::Only,
            headers: HeaderSet::of(ExtHeader::CnpPad),
            has_payload: false,
        });
    }
    let tr = match op >> 5 {
        0 => Transport::Rc,
        1 => Transport::Uc,
        2 => Transport::Rd,
        3 => Transport::Ud,
        5 => Transport::Xrc,
        _ => return None,
    };
    let low = op & 0x1F;
    if !valid_for(tr, low) {
        return None;
    }
    let (name, kind, position, mut headers, has_payload) = match OPS[low as usize] {
        Some(x) => x,
        None => return None,
    };
    match tr {
        Transport::Ud => headers = headers.with(ExtHeader::Deth),
        // every XRC request names its XRC SRQ; responses do not
        Transport::Xrc
            if !matches!(kind, OpKind::ReadResponse | OpKind::Ack | OpKind::AtomicAck) =>
        {
            headers = headers.with(ExtHeader::Xrceth)
        }
        Transport::Rd => {
            headers = headers.with(ExtHeader::Rdeth);
            // RD requests carry a DETH too; responses and ACKs do not.
            if matches!(
                kind,
                OpKind::Send
                    | OpKind::Write
                    | OpKind::ReadRequest
                    | OpKind::CompareSwap
                    | OpKind::FetchAdd
                    | OpKind::Resync
            ) {
                headers = headers.with(ExtHeader::Deth);
            }
        }
        _ => {}
    }
    Some(OpInfo { name, transport: tr, kind, position, headers, has_payload })
}

/// The table: one entry per opcode value, `None` for reserved/unknown ones.
pub static TABLE: [Option<OpInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = build(i as u8);
        i += 1;
    }
    t
};

impl Opcode {
    pub const fn info(self) -> Option<&'static OpInfo> {
        TABLE[self.0 as usize].as_ref()
    }
    pub const fn is_known(self) -> bool {
        TABLE[self.0 as usize].is_some()
    }
    /// Build an opcode from a transport and a low-5-bit operation code;
    /// `None` if that combination is not defined.
    pub const fn from_parts(tr: Transport, low: u8) -> Option<Opcode> {
        let base = match tr {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Rd => 0x40,
            Transport::Ud => 0x60,
            Transport::Xrc => 0xA0,
            Transport::Cnp => return Some(Opcode::CNP),
        };
        let op = Opcode(base | (low & 0x1F));
        if op.is_known() {
            Some(op)
        } else {
            None
        }
    }
    /// Full IBA name like `RC_SEND_FIRST` or `UNKNOWN_0x1e`.
    pub fn name(self) -> String {
        match self.info() {
            Some(i) if i.transport == Transport::Cnp => "CNP".to_string(),
            Some(i) => format!("{}_{}", i.transport.prefix(), i.name),
            None => format!("UNKNOWN_{:#04x}", self.0),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode({:#04x} {})", self.0, self.name())
    }
}
impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Named constants for the opcodes a RoCE implementation sends.
#[allow(missing_docs)]
impl Opcode {
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);
    pub const RC_FLUSH: Opcode = Opcode(0x1C);
    pub const RC_ATOMIC_WRITE: Opcode = Opcode(0x1D);
    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    pub const CNP: Opcode = Opcode(0x81);
}
