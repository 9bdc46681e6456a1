//! The receiving half of a stream: the receive buffer's two halves, the
//! queue of arrived messages, and when to offer a half or grant credits
//! (rsocket.c: `rs_init_bufs`, `rs_send_credits`, `rs_give_credits`,
//! `rrecv`, the receive branch of `rs_poll_cq`).
//!
//! The peer writes data into the half we offered, front to back, never
//! across its end, and moves to the other half when it is full; each write
//! carries an `RS_OP_DATA` message with its length. So data sits in the
//! receive buffer in arrival order, as in a ring, and the reader follows it
//! with one offset. When the reader has freed a whole half (and a control
//! slot is free), we offer it again by writing one SGE into the peer's
//! target SGL — entries 1, 0, 1, ... (entry 0 went in the connection data)
//! — with an `RS_OP_SGL` message carrying the new credit limit: messages
//! consumed (`rseq_no`) plus the receive queue size. When no half is free
//! but half the queue's worth of messages were consumed since the last
//! grant, the same message goes alone in a 0-byte write.

use crate::action::{Payload, Seg, Source, Wr};
use crate::config::{LocalMemory, StreamConfig};
use crate::error::Error;
use crate::wire::{msg, ByteOrder, ConnData, Op, Sge, SGE_LEN};
use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct RecvSide {
    rbuf_size: u32,
    half: u32,
    rq_size: u16,
    /// The reader's place in the receive buffer.
    rbuf_offset: u32,
    /// Bytes read since the last offer (`rbuf_bytes_avail`); a half is
    /// offered again when this reaches `half`.
    rbuf_avail: u32,
    /// The half to offer next.
    rbuf_free_offset: u32,
    /// Messages consumed, mod 2^16.
    rseq_no: u16,
    /// Grant credits without a buffer once `rseq_no` reaches this.
    rseq_comp: u16,
    /// Lengths of the arrived messages not yet consumed (the front one may
    /// be partly read).
    msgs: VecDeque<u32>,
    queued: u64,
    /// The offered halves the peer has not filled yet, and how much of the
    /// first it filled: where the next data message must land.
    offered: VecDeque<Seg>,
    filled: u32,
    /// Messages (data and iomap) received, and the limit we granted last.
    received: u16,
    limit: u16,
    /// The peer's target SGL (address, rkey, entries) and the entry our
    /// next update writes.
    remote_sgl: Sge,
    remote_sge: u32,
    peer_order: ByteOrder,
    mem: LocalMemory,
}

impl RecvSide {
    pub(crate) fn new(cfg: &StreamConfig, mem: LocalMemory) -> RecvSide {
        let half = cfg.rbuf_half();
        RecvSide {
            rbuf_size: cfg.rbuf_size,
            half,
            rq_size: cfg.rq_size,
            rbuf_offset: 0,
            rbuf_avail: half,
            rbuf_free_offset: half,
            rseq_no: 0,
            rseq_comp: cfg.rq_size >> 1,
            msgs: VecDeque::new(),
            queued: 0,
            offered: VecDeque::from([Seg { offset: 0, len: half }]),
            filled: 0,
            received: 0,
            limit: cfg.rq_size,
            remote_sgl: Sge::default(),
            remote_sge: 1,
            peer_order: ByteOrder::native(),
            mem,
        }
    }

    pub(crate) fn connect(&mut self, peer: &ConnData) {
        self.remote_sgl = peer.target_sgl;
        self.remote_sge = 1 % peer.target_sgl.length.max(1);
        self.peer_order = peer.entry_order();
    }

    pub(crate) fn queued(&self) -> u64 {
        self.queued
    }

    pub(crate) fn has_data(&self) -> bool {
        !self.msgs.is_empty()
    }

    /// One more message takes a credit; more than granted is an error.
    fn take_credit(&mut self) -> Result<(), Error> {
        if self.received == self.limit {
            return Err(Error::DataBeyondCredits { limit: self.limit });
        }
        self.received = self.received.wrapping_add(1);
        Ok(())
    }

    /// An `RS_OP_DATA` message of `len` bytes: where it landed.
    pub(crate) fn on_data(&mut self, len: u32) -> Result<Seg, Error> {
        let room = self.offered.front().map_or(0, |s| s.len - self.filled);
        if len > room {
            return Err(Error::DataBeyondBuffer { len, room });
        }
        self.take_credit()?;
        if len == 0 {
            // rdma-core never sends one (its `rrecv` would return 0, as at
            // end of file): consumed at once, the credit comes back
            self.rseq_no = self.rseq_no.wrapping_add(1);
            return Ok(Seg { offset: self.rbuf_offset, len: 0 });
        }
        let front = *self.offered.front().expect("room > 0");
        let at = Seg { offset: front.offset + self.filled, len };
        self.filled += len;
        if self.filled == front.len {
            self.offered.pop_front();
            self.filled = 0;
        }
        self.msgs.push_back(len);
        self.queued += u64::from(len);
        Ok(at)
    }

    /// An `RS_OP_IOMAP_SGL` message: it took a credit (rdma-core's sender
    /// counts it; its receiver does not queue it, so the credit is never
    /// given back — we count it the same way).
    pub(crate) fn on_iomap(&mut self) -> Result<(), Error> {
        self.take_credit()
    }

    /// `rs_give_credits` without the control-slot and state conditions: a
    /// half is free, or half a queue of messages was consumed.
    pub(crate) fn credits_due(&self) -> bool {
        self.rbuf_avail >= self.half || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0
    }

    /// `rs_send_credits`: the write granting credits, with a free half if
    /// there is one. `ctrl_slot` is the send-buffer offset to stage the
    /// SGE at when it cannot go inline.
    pub(crate) fn send_credits(&mut self, ctrl_slot: Option<u32>) -> Wr {
        self.rseq_comp = self.rseq_no.wrapping_add(self.rq_size >> 1);
        let raw = u32::from(self.rseq_no) + u32::from(self.rq_size);
        self.limit = raw as u16;
        let m = msg(Op::Sgl, raw);
        if self.rbuf_avail < self.half {
            return Wr {
                wr_id: u64::from(m),
                imm: Some(m),
                remote_addr: 0,
                rkey: 0,
                payload: Payload::Empty,
            };
        }
        let sge = Sge {
            addr: self.mem.rbuf_addr.wrapping_add(u64::from(self.rbuf_free_offset)),
            key: self.mem.rbuf_rkey,
            length: self.half,
        };
        let bytes = sge.emit(self.peer_order).to_vec();
        let payload = match ctrl_slot {
            None => Payload::InlineBytes(bytes),
            Some(offset) => Payload::Sbuf {
                segs: vec![Seg { offset, len: SGE_LEN as u32 }],
                source: Source::Bytes(bytes),
            },
        };
        let wr = Wr {
            wr_id: u64::from(m),
            imm: Some(m),
            remote_addr: self
                .remote_sgl
                .addr
                .wrapping_add(SGE_LEN as u64 * u64::from(self.remote_sge)),
            rkey: self.remote_sgl.key,
            payload,
        };
        self.offered.push_back(Seg { offset: self.rbuf_free_offset, len: self.half });
        self.rbuf_avail -= self.half;
        self.rbuf_free_offset += self.half;
        if self.rbuf_free_offset >= self.rbuf_size {
            self.rbuf_free_offset = 0;
        }
        self.remote_sge += 1;
        if self.remote_sge == self.remote_sgl.length {
            self.remote_sge = 0;
        }
        wr
    }

    /// The first `max` queued bytes, as spans of the receive buffer (two
    /// when they wrap around its end).
    pub(crate) fn read_spans(&self, max: usize) -> Vec<Seg> {
        let mut n = self.queued.min(max as u64) as u32;
        let mut at = self.rbuf_offset;
        let mut out = Vec::new();
        while n > 0 {
            let len = n.min(self.rbuf_size - at);
            out.push(Seg { offset: at, len });
            n -= len;
            at = if at + len == self.rbuf_size { 0 } else { at + len };
        }
        out
    }

    /// The application read `n` bytes (at most what is queued): returns
    /// how many were consumed.
    pub(crate) fn consume(&mut self, n: usize) -> usize {
        let mut left = self.queued.min(n as u64) as u32;
        let total = left;
        while left > 0 {
            let head = self.msgs.front_mut().expect("queued bytes have messages");
            let take = left.min(*head);
            *head -= take;
            left -= take;
            if *head == 0 {
                self.msgs.pop_front();
                self.rseq_no = self.rseq_no.wrapping_add(1);
            }
            self.rbuf_offset = (self.rbuf_offset + take) % self.rbuf_size;
            self.rbuf_avail += take;
        }
        self.queued -= u64::from(total);
        total as usize
    }
}
