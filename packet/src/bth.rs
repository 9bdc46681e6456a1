//! Base Transport Header (IBA §9.2, 12 bytes).
//!
//! ```text
//!  0       opcode
//!  1       SE(7) M(6) PadCnt(5:4) TVer(3:0)
//!  2..4    P_Key
//!  4       FECN(7) BECN(6) reserved(5:0)      <- masked to 0xFF for the ICRC
//!  5..8    DestQP (24 bits)
//!  8       AckReq(7) reserved(6:0)
//!  9..12   PSN (24 bits)
//! ```
//!
//! [`Bth::new_checked`] verifies the length; after it, no accessor panics.
//! [`Bth::new_unchecked`] accessors panic on a buffer shorter than [`LEN`].

use crate::error::{need, Result};
use crate::field::*;
use crate::opcode::Opcode;
use crate::types::{PKey, Psn, Qpn};

/// Length of the BTH.
pub const LEN: usize = crate::opcode::BTH_LEN;

mod off {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const FECN_BECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// A zero-copy view of a BTH at the start of a buffer.
#[derive(Clone, Copy, Debug)]
pub struct Bth<T> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    pub const fn new_unchecked(buffer: T) -> Bth<T> {
        Bth { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Bth<T>> {
        need("BTH", LEN, buffer.as_ref().len())?;
        Ok(Bth { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn opcode(&self) -> Opcode {
        Opcode(self.b()[off::OPCODE])
    }
    pub fn solicited(&self) -> bool {
        self.b()[off::FLAGS] & 0x80 != 0
    }
    pub fn migreq(&self) -> bool {
        self.b()[off::FLAGS] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.b()[off::FLAGS] >> 4) & 3
    }
    pub fn tver(&self) -> u8 {
        self.b()[off::FLAGS] & 0x0F
    }
    pub fn pkey(&self) -> PKey {
        PKey::new(u16_at(self.b(), off::PKEY))
    }
    pub fn fecn(&self) -> bool {
        self.b()[off::FECN_BECN] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.b()[off::FECN_BECN] & 0x40 != 0
    }
    pub fn resv6(&self) -> u8 {
        self.b()[off::FECN_BECN] & 0x3F
    }
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(u24_at(self.b(), off::DEST_QP))
    }
    pub fn ack_req(&self) -> bool {
        self.b()[off::ACK_REQ] & 0x80 != 0
    }
    pub fn resv7(&self) -> u8 {
        self.b()[off::ACK_REQ] & 0x7F
    }
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), off::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_opcode(&mut self, op: Opcode) {
        self.m()[off::OPCODE] = op.0;
    }
    fn set_bit(&mut self, byte: usize, mask: u8, v: bool) {
        let b = &mut self.m()[byte];
        *b = if v { *b | mask } else { *b & !mask };
    }
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bit(off::FLAGS, 0x80, v)
    }
    pub fn set_migreq(&mut self, v: bool) {
        self.set_bit(off::FLAGS, 0x40, v)
    }
    /// Sets PadCnt (only the low two bits are used).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.m()[off::FLAGS];
        *b = (*b & !0x30) | ((v & 3) << 4);
    }
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.m()[off::FLAGS];
        *b = (*b & 0xF0) | (v & 0x0F);
    }
    pub fn set_pkey(&mut self, v: PKey) {
        put_u16(self.m(), off::PKEY, v.value())
    }
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bit(off::FECN_BECN, 0x80, v)
    }
    pub fn set_becn(&mut self, v: bool) {
        self.set_bit(off::FECN_BECN, 0x40, v)
    }
    pub fn set_resv6(&mut self, v: u8) {
        let b = &mut self.m()[off::FECN_BECN];
        *b = (*b & 0xC0) | (v & 0x3F);
    }
    pub fn set_dest_qp(&mut self, v: Qpn) {
        put_u24(self.m(), off::DEST_QP, v.value())
    }
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_bit(off::ACK_REQ, 0x80, v)
    }
    pub fn set_resv7(&mut self, v: u8) {
        let b = &mut self.m()[off::ACK_REQ];
        *b = (*b & 0x80) | (v & 0x7F);
    }
    pub fn set_psn(&mut self, v: Psn) {
        put_u24(self.m(), off::PSN, v.value())
    }
}

/// The BTH's fields as plain values (reserved bits kept so that
/// parse-then-emit reproduces the original bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub migreq: bool,
    pub pad_count: u8,
    pub tver: u8,
    pub pkey: PKey,
    pub fecn: bool,
    pub becn: bool,
    pub resv6: u8,
    pub dest_qp: Qpn,
    pub ack_req: bool,
    pub resv7: u8,
    pub psn: Psn,
}

impl Default for BthRepr {
    fn default() -> Self {
        BthRepr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qp: Qpn::new(0),
            ack_req: false,
            resv7: 0,
            psn: Psn::new(0),
        }
    }
}

impl BthRepr {
    pub fn parse<T: AsRef<[u8]>>(v: &Bth<T>) -> BthRepr {
        BthRepr {
            opcode: v.opcode(),
            solicited: v.solicited(),
            migreq: v.migreq(),
            pad_count: v.pad_count(),
            tver: v.tver(),
            pkey: v.pkey(),
            fecn: v.fecn(),
            becn: v.becn(),
            resv6: v.resv6(),
            dest_qp: v.dest_qp(),
            ack_req: v.ack_req(),
            resv7: v.resv7(),
            psn: v.psn(),
        }
    }
    /// Parse from the first 12 bytes of `b`.
    pub fn parse_bytes(b: &[u8]) -> Result<BthRepr> {
        Ok(Self::parse(&Bth::new_checked(b)?))
    }
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
    /// Write into the first 12 bytes of `buf` (which must hold them).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, v: &mut Bth<T>) {
        v.m()[..LEN].fill(0);
        v.set_opcode(self.opcode);
        v.set_solicited(self.solicited);
        v.set_migreq(self.migreq);
        v.set_pad_count(self.pad_count);
        v.set_tver(self.tver);
        v.set_pkey(self.pkey);
        v.set_fecn(self.fecn);
        v.set_becn(self.becn);
        v.set_resv6(self.resv6);
        v.set_dest_qp(self.dest_qp);
        v.set_ack_req(self.ack_req);
        v.set_resv7(self.resv7);
        v.set_psn(self.psn);
    }
    /// Emit into a byte slice; errors if it is shorter than 12 bytes.
    pub fn emit_bytes(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < LEN {
            return Err(crate::Error::BufferTooSmall { need: LEN, have: buf.len() });
        }
        self.emit(&mut Bth::new_unchecked(&mut buf[..LEN]));
        Ok(())
    }
}
