//! Extension transport headers (IBA §9.3): RETH, AETH, AtomicETH,
//! AtomicAckETH, ImmDt, IETH, DETH, RDETH and IBA 1.5's FETH.
//!
//! Each header has a zero-copy view (`Reth<T>` ...) whose `new_checked`
//! verifies the length — after it no accessor panics — and a `Copy` `Repr`
//! with `parse` and `emit`. Unknown wire values (AETH syndromes, NAK codes)
//! are kept, never rejected.

use crate::error::{need, Error, Result};
use crate::field::*;
use crate::types::{Msn, QKey, Qpn, RKey};
use core::fmt;

macro_rules! view {
    ($(#[$m:meta])* $name:ident, $len:expr, $what:literal) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<T> {
            buffer: T,
        }
        impl<T: AsRef<[u8]>> $name<T> {
            /// Length of this header on the wire.
            pub const LEN: usize = $len;
            pub const fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }
            pub fn new_checked(buffer: T) -> Result<Self> {
                need($what, $len, buffer.as_ref().len())?;
                Ok($name { buffer })
            }
            pub fn into_inner(self) -> T {
                self.buffer
            }
            #[allow(dead_code)]
            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code)]
            fn m(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}

/// A header's `Repr` read from and written to its view field by field,
/// each through the view's getter and setter (written in the order given).
macro_rules! repr_io {
    ($repr:ident: $view:ident { $($field:ident / $set:ident),* $(,)? }) => {
        impl $repr {
            pub fn parse(b: &[u8]) -> Result<Self> {
                let v = $view::new_checked(b)?;
                Ok($repr { $($field: v.$field()),* })
            }
            pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
                check_emit(buf, $view::<&[u8]>::LEN)?;
                let mut v = $view::new_unchecked(buf);
                $(v.$set(self.$field);)*
                Ok(())
            }
        }
    };
}

fn check_emit(buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::BufferTooSmall { need, have: buf.len() })
    } else {
        Ok(())
    }
}

// ---------------------------------------------------------------- RETH
view!(
    /// RDMA Extended Transport Header: virtual address, rkey, DMA length.
    Reth, 16, "RETH"
);
impl<T: AsRef<[u8]>> Reth<T> {
    pub fn va(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    pub fn rkey(&self) -> RKey {
        RKey::new(u32_at(self.b(), 8))
    }
    pub fn dma_len(&self) -> u32 {
        u32_at(self.b(), 12)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    pub fn set_va(&mut self, v: u64) {
        put_u64(self.m(), 0, v)
    }
    pub fn set_rkey(&mut self, v: RKey) {
        put_u32(self.m(), 8, v.value())
    }
    pub fn set_dma_len(&mut self, v: u32) {
        put_u32(self.m(), 12, v)
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: RKey,
    pub dma_len: u32,
}
repr_io!(RethRepr: Reth { va/set_va, rkey/set_rkey, dma_len/set_dma_len });

// ---------------------------------------------------------------- AETH
/// NAK codes (IBA §9.7.5.2.4, Table 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    /// A reserved code (5..=31), kept as received.
    Reserved(u8),
}
impl NakCode {
    pub const fn from_u5(v: u8) -> NakCode {
        match v & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            x => NakCode::Reserved(x),
        }
    }
    pub const fn to_u5(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(x) => x & 0x1F,
        }
    }
    /// The name the oracle and tshark users see, e.g. `PSN_SEQUENCE_ERROR`.
    pub const fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "PSN_SEQUENCE_ERROR",
            NakCode::InvalidRequest => "INVALID_REQUEST",
            NakCode::RemoteAccessError => "REMOTE_ACCESS_ERROR",
            NakCode::RemoteOperationalError => "REMOTE_OPERATIONAL_ERROR",
            NakCode::InvalidRdRequest => "INVALID_RD_REQUEST",
            NakCode::Reserved(_) => "RESERVED",
        }
    }
}

/// The 5-bit RNR NAK timer code (IBA Table 45): how long the requester
/// waits before retrying. Code 0 means the longest wait, 655.36 ms.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RnrTimer(u8);

/// IBA Table 45 in microseconds, indexed by code.
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    pub const fn new(code: u8) -> RnrTimer {
        RnrTimer(code & 0x1F)
    }
    pub const fn code(self) -> u8 {
        self.0
    }
    /// The wait in microseconds.
    pub const fn micros(self) -> u32 {
        RNR_TIMER_US[self.0 as usize]
    }
}
impl fmt::Debug for RnrTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RnrTimer({} = {} us)", self.0, self.micros())
    }
}

/// The AETH syndrome byte (IBA §9.7.5.2, Table 43).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive ACK with an end-to-end credit count (31 = no credit info).
    Ack { credit: u8 },
    /// Receiver not ready: retry after the timer.
    RnrNak(RnrTimer),
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Bit 7 set or kind 0b10: kept as the raw byte.
    Reserved(u8),
}

impl Syndrome {
    /// Credit code meaning "no credit information" (IBA 9.7.7.2.5).
    pub const NO_CREDIT: u8 = 0x1F;
    pub const fn from_u8(v: u8) -> Syndrome {
        if v & 0x80 != 0 {
            return Syndrome::Reserved(v);
        }
        match (v >> 5) & 3 {
            0 => Syndrome::Ack { credit: v & 0x1F },
            1 => Syndrome::RnrNak(RnrTimer::new(v)),
            3 => Syndrome::Nak(NakCode::from_u5(v)),
            _ => Syndrome::Reserved(v),
        }
    }
    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credit } => credit & 0x1F,
            Syndrome::RnrNak(t) => 0x20 | t.code(),
            Syndrome::Nak(c) => 0x60 | c.to_u5(),
            Syndrome::Reserved(v) => v,
        }
    }
    /// "ACK", "RNR_NAK", "NAK" or "RESERVED" (the oracle's `kind`).
    pub const fn kind_name(self) -> &'static str {
        match self {
            Syndrome::Ack { .. } => "ACK",
            Syndrome::RnrNak(_) => "RNR_NAK",
            Syndrome::Nak(_) => "NAK",
            Syndrome::Reserved(_) => "RESERVED",
        }
    }
}

view!(
    /// ACK Extended Transport Header: syndrome and MSN.
    Aeth, 4, "AETH"
);
impl<T: AsRef<[u8]>> Aeth<T> {
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from_u8(self.b()[0])
    }
    pub fn msn(&self) -> Msn {
        Msn::new(u24_at(self.b(), 1))
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    pub fn set_syndrome(&mut self, s: Syndrome) {
        self.m()[0] = s.to_u8()
    }
    pub fn set_msn(&mut self, m: Msn) {
        put_u24(self.m(), 1, m.value())
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    pub msn: Msn,
}
repr_io!(AethRepr: Aeth { syndrome/set_syndrome, msn/set_msn });

// ---------------------------------------------------------------- AtomicETH
view!(
    /// Atomic Extended Transport Header: VA, rkey, swap (or add) and compare data.
    AtomicEth, 28, "AtomicETH"
);
impl<T: AsRef<[u8]>> AtomicEth<T> {
    pub fn va(&self) -> u64 {
        u64_at(self.b(), 0)
    }
    pub fn rkey(&self) -> RKey {
        RKey::new(u32_at(self.b(), 8))
    }
    /// Swap data for COMPARE_SWAP, add data for FETCH_ADD.
    pub fn swap_add(&self) -> u64 {
        u64_at(self.b(), 12)
    }
    pub fn compare(&self) -> u64 {
        u64_at(self.b(), 20)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    pub fn set_va(&mut self, v: u64) {
        put_u64(self.m(), 0, v)
    }
    pub fn set_rkey(&mut self, v: RKey) {
        put_u32(self.m(), 8, v.value())
    }
    pub fn set_swap_add(&mut self, v: u64) {
        put_u64(self.m(), 12, v)
    }
    pub fn set_compare(&mut self, v: u64) {
        put_u64(self.m(), 20, v)
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: RKey,
    pub swap_add: u64,
    pub compare: u64,
}
repr_io!(AtomicEthRepr: AtomicEth { va/set_va, rkey/set_rkey, swap_add/set_swap_add, compare/set_compare });

// ---------------------------------------------------------------- AtomicAckETH
view!(
    /// Atomic Acknowledge Extended Transport Header: the original remote data.
    AtomicAckEth, 8, "AtomicAckETH"
);
impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    pub fn orig_rem_data(&self) -> u64 {
        u64_at(self.b(), 0)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    pub fn set_orig_rem_data(&mut self, v: u64) {
        put_u64(self.m(), 0, v)
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    pub orig_rem_data: u64,
}
repr_io!(AtomicAckEthRepr: AtomicAckEth { orig_rem_data/set_orig_rem_data });

// ---------------------------------------------------------------- 4-byte headers
view!(
    /// Immediate data (4 bytes, opaque to the transport, big-endian on the wire).
    ImmDt, 4, "ImmDt"
);
impl<T: AsRef<[u8]>> ImmDt<T> {
    pub fn imm(&self) -> u32 {
        u32_at(self.b(), 0)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmDt<T> {
    pub fn set_imm(&mut self, v: u32) {
        put_u32(self.m(), 0, v)
    }
}

view!(
    /// Invalidate Extended Transport Header: the rkey to invalidate.
    Ieth, 4, "IETH"
);
impl<T: AsRef<[u8]>> Ieth<T> {
    pub fn rkey(&self) -> RKey {
        RKey::new(u32_at(self.b(), 0))
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ieth<T> {
    pub fn set_rkey(&mut self, v: RKey) {
        put_u32(self.m(), 0, v.value())
    }
}

view!(
    /// Reliable Datagram Extended Transport Header (decoded only).
    Rdeth, 4, "RDETH"
);
impl<T: AsRef<[u8]>> Rdeth<T> {
    /// The whole 32-bit word (8 reserved bits + 24-bit EE context).
    pub fn raw(&self) -> u32 {
        u32_at(self.b(), 0)
    }
    pub fn ee_context(&self) -> u32 {
        u24_at(self.b(), 1)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Rdeth<T> {
    pub fn set_raw(&mut self, v: u32) {
        put_u32(self.m(), 0, v)
    }
}

view!(
    /// Flush Extended Transport Header (IBA 1.5): selectivity and placement type.
    Feth, 4, "FETH"
);
impl<T: AsRef<[u8]>> Feth<T> {
    pub fn raw(&self) -> u32 {
        u32_at(self.b(), 0)
    }
    /// Placement type bits (bit 0: global visibility, bit 1: persistence).
    pub fn placement_type(&self) -> u8 {
        (self.raw() & 0x0F) as u8
    }
    /// Selectivity level (0: memory region range, 1: whole memory region).
    pub fn selectivity(&self) -> u8 {
        ((self.raw() >> 4) & 0x03) as u8
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Feth<T> {
    pub fn set_raw(&mut self, v: u32) {
        put_u32(self.m(), 0, v)
    }
}

// ---------------------------------------------------------------- DETH
view!(
    /// Datagram Extended Transport Header: Q_Key and source QP.
    Deth, 8, "DETH"
);
impl<T: AsRef<[u8]>> Deth<T> {
    pub fn qkey(&self) -> QKey {
        QKey::new(u32_at(self.b(), 0))
    }
    pub fn resv8(&self) -> u8 {
        self.b()[4]
    }
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(u24_at(self.b(), 5))
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    pub fn set_qkey(&mut self, v: QKey) {
        put_u32(self.m(), 0, v.value())
    }
    pub fn set_resv8(&mut self, v: u8) {
        self.m()[4] = v
    }
    pub fn set_src_qp(&mut self, v: Qpn) {
        put_u24(self.m(), 5, v.value())
    }
}
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DethRepr {
    pub qkey: QKey,
    pub src_qp: Qpn,
    /// The reserved byte, kept for exact re-emission.
    pub resv8: u8,
}
repr_io!(DethRepr: Deth { qkey/set_qkey, resv8/set_resv8, src_qp/set_src_qp });
