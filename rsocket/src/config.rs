//! A stream's sizes and the memory the C layer registered for it.

use crate::consts::*;
use crate::wire::{IOMAP_LEN, SGE_LEN};

/// The sizes of one stream rsocket (`struct rsocket`'s `sbuf_size`,
/// `rbuf_size`, `sq_size`, `rq_size`, `sq_inline`, `target_iomap_size`).
/// An accepted rsocket inherits its listener's (`rs_alloc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Send buffer bytes (data; the control slots come after them).
    pub sbuf_size: u32,
    /// Receive buffer bytes, offered to the peer in two halves. Kept even.
    pub rbuf_size: u32,
    pub sq_size: u16,
    /// Receive queue entries: also the message credits we grant.
    pub rq_size: u16,
    /// The QP's inline limit: payloads up to this are posted inline.
    pub sq_inline: u16,
    /// Entries of our target iomap.
    pub target_iomap_size: u16,
}

impl Default for StreamConfig {
    fn default() -> StreamConfig {
        StreamConfig {
            sbuf_size: DEF_WMEM,
            rbuf_size: DEF_MEM,
            sq_size: DEF_SQSIZE,
            rq_size: DEF_RQSIZE,
            sq_inline: DEF_INLINE,
            target_iomap_size: DEF_IOMAP_SIZE,
        }
    }
}

impl StreamConfig {
    /// `SO_RCVBUF`: rsockets keep twice the value asked for.
    pub fn set_rcvbuf(&mut self, val: u32) {
        self.rbuf_size = val.saturating_mul(2);
    }

    /// `SO_SNDBUF`: twice the value, at least `2 * SNDLOWAT`.
    pub fn set_sndbuf(&mut self, val: u32) {
        self.sbuf_size = val.saturating_mul(2).max(SNDLOWAT * 2);
    }

    /// The queue sizes as `rs_set_qp_size` clamps them to the device's
    /// `max_qp_wr` and to `QP_MIN_SIZE..=QP_MAX_SIZE`, and the buffers to
    /// what the protocol needs (an even receive buffer of at least 2 bytes,
    /// a send buffer of at least [`SNDLOWAT`]).
    pub fn normalized(mut self, max_qp_wr: u32) -> StreamConfig {
        let max = max_qp_wr.min(u32::from(QP_MAX_SIZE)) as u16;
        let clamp = |v: u16| if v > max { max } else { v.max(QP_MIN_SIZE) };
        self.sq_size = clamp(self.sq_size);
        self.rq_size = clamp(self.rq_size);
        self.rbuf_size = (self.rbuf_size & !1).max(2);
        self.sbuf_size = self.sbuf_size.max(SNDLOWAT);
        self
    }

    /// Bytes to register for the send buffer: the data part, then
    /// [`QP_CTRL_SIZE`] 16-byte control slots when SGL updates cannot go
    /// inline (`rs_init_bufs`).
    pub fn sbuf_total_len(&self) -> u32 {
        self.sbuf_size + if self.ctrl_inline() { 0 } else { MAX_CTRL_MSG * QP_CTRL_SIZE }
    }

    /// Bytes to register (remote write) for the target list: the target SGL
    /// ([`SGL_SIZE`] entries) then the target iomap.
    pub fn target_list_len(&self) -> usize {
        SGE_LEN * SGL_SIZE as usize + IOMAP_LEN * usize::from(self.target_iomap_size)
    }

    /// Half the receive buffer: the unit offered to the peer.
    pub fn rbuf_half(&self) -> u32 {
        self.rbuf_size >> 1
    }

    pub(crate) fn ctrl_inline(&self) -> bool {
        u32::from(self.sq_inline) >= MAX_CTRL_MSG
    }
}

/// Where the C layer registered a stream's memory: the receive buffer
/// (`rbuf_size` bytes, remote write) and the target list
/// ([`StreamConfig::target_list_len`] bytes, remote write). The send buffer
/// is local only: the actions name offsets in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LocalMemory {
    pub rbuf_addr: u64,
    pub rbuf_rkey: u32,
    pub target_addr: u64,
    pub target_rkey: u32,
}
