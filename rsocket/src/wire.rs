//! The stream protocol's wire formats: the connection data of the CM REQ
//! and REP, the 32-bit messages carried as immediate data, and the
//! target SGL and iomap entries written by RDMA WRITE.
//!
//! Byte order (rsocket.c: `rs_format_conn_data`, `rs_save_conn_data`,
//! `rs_send_credits`, `rs_send_iomaps`, `rs_post_msg`, `rs_poll_cq`):
//!
//! * the connection data is big-endian throughout, whatever the hosts
//!   (`credits`, and the `addr`, `key`, `length` of both SGEs);
//! * the immediate data is the message as a big-endian u32 (the sender puts
//!   `htobe32(msg)` in `imm_data`, the receiver takes `be32toh` of the
//!   completion's): the 4 ImmDt bytes of the packet, read big-endian;
//! * SGL and iomap entries written later by RDMA WRITE are in the byte
//!   order of the host that *reads* them: the writer compares its own byte
//!   order with the peer's [`CONN_FLAG_NET`] (set by a big-endian host) and
//!   swaps when they differ (`RS_OPT_SWAP_SGL`). So between two x86 hosts
//!   they are little-endian, and an entry written into the memory of a peer
//!   that announced `NET` is big-endian. [`ConnData::entry_order`] gives the
//!   order for a peer's entries; we announce `NET` only on a big-endian
//!   host, as rdma-core does, so that captures look the same.

use crate::consts::*;
use crate::error::Error;

/// The byte order of the SGL and iomap entries in one host's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    Little,
    Big,
}

impl ByteOrder {
    /// This host's order: what we announce in our connection data.
    pub const fn native() -> ByteOrder {
        if cfg!(target_endian = "big") {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }

    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            ByteOrder::Little => u32::from_le_bytes(a),
            ByteOrder::Big => u32::from_be_bytes(a),
        }
    }

    fn u64(self, b: &[u8]) -> u64 {
        let a = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
        match self {
            ByteOrder::Little => u64::from_le_bytes(a),
            ByteOrder::Big => u64::from_be_bytes(a),
        }
    }

    fn put_u32(self, b: &mut [u8], v: u32) {
        b.copy_from_slice(&match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        });
    }

    fn put_u64(self, b: &mut [u8], v: u64) {
        b.copy_from_slice(&match self {
            ByteOrder::Little => v.to_le_bytes(),
            ByteOrder::Big => v.to_be_bytes(),
        });
    }
}

/// `struct rs_sge`: 16 bytes, `addr` (8), `key` (4), `length` (4). In the
/// connection data it describes the target SGL (`length` counts entries)
/// and the first receive buffer (`length` in bytes); in a target SGL
/// entry, a receive buffer the peer may write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub key: u32,
    pub length: u32,
}

/// Length of [`Sge`] on the wire.
pub const SGE_LEN: usize = 16;

impl Sge {
    /// The entry at the start of `b` (at least [`SGE_LEN`] bytes).
    pub fn parse(b: &[u8], order: ByteOrder) -> Option<Sge> {
        let b = b.get(..SGE_LEN)?;
        Some(Sge {
            addr: order.u64(&b[0..8]),
            key: order.u32(&b[8..12]),
            length: order.u32(&b[12..16]),
        })
    }

    pub fn emit(&self, order: ByteOrder) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        order.put_u64(&mut b[0..8], self.addr);
        order.put_u32(&mut b[8..12], self.key);
        order.put_u32(&mut b[12..16], self.length);
        b
    }
}

/// `struct rs_iomap`: 24 bytes, the stream `offset` (8) a registered buffer
/// answers to, then its [`Sge`]. Written by RDMA WRITE into the peer's
/// target iomap, which follows its target SGL (`rs_send_iomaps`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Iomap {
    pub offset: u64,
    pub sge: Sge,
}

/// Length of [`Iomap`] on the wire.
pub const IOMAP_LEN: usize = 8 + SGE_LEN;

impl Iomap {
    pub fn parse(b: &[u8], order: ByteOrder) -> Option<Iomap> {
        let b = b.get(..IOMAP_LEN)?;
        Some(Iomap { offset: order.u64(&b[0..8]), sge: Sge::parse(&b[8..], order)? })
    }

    pub fn emit(&self, order: ByteOrder) -> [u8; IOMAP_LEN] {
        let mut b = [0u8; IOMAP_LEN];
        order.put_u64(&mut b[0..8], self.offset);
        b[8..].copy_from_slice(&self.sge.emit(order));
        b
    }
}

/// The iomap size's one-byte encoding (`rs_value_to_scale(v, 8)`): up to
/// 128 as is, above that `0x80 | v >> 8` (a count of 256-entry blocks).
pub fn iomap_size_to_scale(value: u16) -> u8 {
    if value <= 0x80 {
        value as u8
    } else {
        0x80 | (value >> 8) as u8
    }
}

/// The inverse (`rs_scale_to_value(s, 8)`).
pub fn iomap_scale_to_size(scale: u8) -> u16 {
    if scale <= 0x80 {
        u16::from(scale)
    } else {
        u16::from(scale & 0x7F) << 8
    }
}

/// `struct rs_conn_data`, the 40 bytes each side puts in its CM private
/// data (after librdmacm's 36-byte header in a REQ, at offset 0 in a REP;
/// [`CMA_HDR_LEN`]):
///
/// | offset | bytes | field |
/// |---|---|---|
/// | 0 | 1 | version (1) |
/// | 1 | 1 | flags: [`CONN_FLAG_NET`], [`CONN_FLAG_IOMAP`] |
/// | 2 | 2 | credits: the sender's receive queue size, big-endian |
/// | 4 | 3 | reserved, 0 |
/// | 7 | 1 | target iomap size, scaled ([`iomap_size_to_scale`]) |
/// | 8 | 16 | target SGL: address, rkey, entries (2), big-endian |
/// | 24 | 16 | data buffer: the first half of the receive buffer, big-endian |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnData {
    pub version: u8,
    pub flags: u8,
    pub credits: u16,
    pub reserved: [u8; 3],
    /// As on the wire (scaled); [`ConnData::iomap_entries`] decodes it.
    pub target_iomap_size: u8,
    pub target_sgl: Sge,
    pub data_buf: Sge,
}

impl ConnData {
    /// The fields as they are, whatever the version (for `explain`).
    pub fn parse_any(pd: &[u8]) -> Result<ConnData, Error> {
        let b = pd.get(..CONN_DATA_LEN).ok_or(Error::ConnDataShort { len: pd.len() })?;
        let be = ByteOrder::Big;
        Ok(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            reserved: [b[4], b[5], b[6]],
            target_iomap_size: b[7],
            target_sgl: Sge::parse(&b[8..24], be).expect("16 bytes"),
            data_buf: Sge::parse(&b[24..40], be).expect("16 bytes"),
        })
    }

    /// The connection data at the start of `pd`, checked as far as a stream
    /// relies on it: long enough, version 1, a target SGL with entries.
    pub fn parse(pd: &[u8]) -> Result<ConnData, Error> {
        let c = ConnData::parse_any(pd)?;
        if c.version != CONN_DATA_VERSION {
            return Err(Error::ConnDataVersion { version: c.version });
        }
        if c.target_sgl.length == 0 {
            return Err(Error::ConnDataNoSgl);
        }
        Ok(c)
    }

    pub fn emit(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[4..7].copy_from_slice(&self.reserved);
        b[7] = self.target_iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.emit(ByteOrder::Big));
        b[24..40].copy_from_slice(&self.data_buf.emit(ByteOrder::Big));
        b
    }

    /// The order in which entries written into this side's target SGL and
    /// iomap must be: big-endian if it announced [`CONN_FLAG_NET`].
    pub fn entry_order(&self) -> ByteOrder {
        if self.flags & CONN_FLAG_NET != 0 {
            ByteOrder::Big
        } else {
            ByteOrder::Little
        }
    }

    /// Entries of the target iomap (0 without [`CONN_FLAG_IOMAP`]).
    pub fn iomap_entries(&self) -> u16 {
        if self.flags & CONN_FLAG_IOMAP != 0 {
            iomap_scale_to_size(self.target_iomap_size)
        } else {
            0
        }
    }

    /// Where the target iomap is: right after the target SGL's entries,
    /// same rkey (`rs_save_conn_data`).
    pub fn iomap_addr(&self) -> u64 {
        self.target_sgl.addr.wrapping_add(SGE_LEN as u64 * u64::from(self.target_sgl.length))
    }
}

/// The op of a message: the top 3 bits of the immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// Application data: the low 29 bits are its length.
    Data = 0,
    /// Reserved ("data, more to come"), never sent.
    RsvdDataMore = 1,
    /// rdma-core's tag for a direct (iomap) RDMA WRITE in its `wr_id`s; it
    /// never travels as an immediate.
    Write = 2,
    /// Reserved ("direct receive, more to come"), never sent.
    RsvdDraMore = 3,
    /// Credit update, with or without a new target SGL entry: the low bits
    /// are the new credit limit (a message sequence number, low 16 bits).
    Sgl = 4,
    /// Reserved, never sent.
    Rsvd = 5,
    /// An iomap entry was written: bits 15..0 are its index.
    IomapSgl = 6,
    /// Control: the low bits are a [`ctrl`] value.
    Ctrl = 7,
}

impl Op {
    pub fn from_bits(op: u32) -> Op {
        match op & 7 {
            0 => Op::Data,
            1 => Op::RsvdDataMore,
            2 => Op::Write,
            3 => Op::RsvdDraMore,
            4 => Op::Sgl,
            5 => Op::Rsvd,
            6 => Op::IomapSgl,
            _ => Op::Ctrl,
        }
    }
}

/// Control message values (`RS_CTRL_*`).
pub mod ctrl {
    /// The sender will neither send nor receive any more.
    pub const DISCONNECT: u32 = 0;
    /// Sent as the `wr_id` of a 0-byte RDMA WRITE *without* immediate: the
    /// peer never sees it, the sender's completion tells it the link lives.
    pub const KEEPALIVE: u32 = 1;
    /// The sender will send no more (SHUT_WR) but still receives.
    pub const SHUTDOWN: u32 = 2;
}

/// The low 29 bits of a message.
pub const MSG_DATA_MASK: u32 = 0x1FFF_FFFF;

/// A message: `op << 29 | data` (`rs_msg_set`).
pub fn msg(op: Op, data: u32) -> u32 {
    ((op as u32) << 29) | (data & MSG_DATA_MASK)
}

/// A message taken apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    /// `len` bytes of data were written at the next place of the receive
    /// buffer.
    Data { len: u32 },
    /// The receiver may now send messages up to sequence number `limit`
    /// (exclusive, mod 2^16). `raw` is the 29-bit field: rdma-core puts
    /// `rseq_no + rq_size` there, which may exceed 16 bits; only the low 16
    /// count. A 16-byte write with it carries a new target SGL entry.
    Sgl { limit: u16, raw: u32 },
    /// Entry `index` of the target iomap was written (bits 28..16 reserved).
    IomapSgl { index: u16 },
    /// A control message ([`ctrl`]); unknown values are ignored, as
    /// rdma-core ignores them.
    Ctrl { value: u32 },
}

impl Msg {
    /// The message of an immediate, in host order (`be32toh` of
    /// `wc.imm_data`). Ops 1, 2, 3 and 5 are never sent by rdma-core:
    /// [`Error::ReservedOp`] (rdma-core would queue 1, 3, 5 as data and
    /// ignore 2; we refuse them).
    pub fn decode(imm: u32) -> Result<Msg, Error> {
        let data = imm & MSG_DATA_MASK;
        match Op::from_bits(imm >> 29) {
            Op::Data => Ok(Msg::Data { len: data }),
            Op::Sgl => Ok(Msg::Sgl { limit: data as u16, raw: data }),
            Op::IomapSgl => Ok(Msg::IomapSgl { index: data as u16 }),
            Op::Ctrl => Ok(Msg::Ctrl { value: data }),
            op => Err(Error::ReservedOp { op: op as u8 }),
        }
    }

    pub fn encode(self) -> u32 {
        match self {
            Msg::Data { len } => msg(Op::Data, len),
            Msg::Sgl { raw, .. } => msg(Op::Sgl, raw),
            Msg::IomapSgl { index } => msg(Op::IomapSgl, u32::from(index)),
            Msg::Ctrl { value } => msg(Op::Ctrl, value),
        }
    }
}
