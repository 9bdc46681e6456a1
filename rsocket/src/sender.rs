//! The sending half of a stream: the sender's view of the peer's receive
//! buffer (the target SGL the peer fills in), the message credits, the
//! send queue and the send buffer ring (rsocket.c: `rsend`,
//! `rs_write_data`, `rs_can_send`, the send branch of `rs_poll_cq`).

use crate::action::{Action, Payload, Seg, Source, Wr};
use crate::config::StreamConfig;
use crate::consts::*;
use crate::error::Error;
use crate::wire::{msg, ByteOrder, ConnData, Iomap, Op, Sge, IOMAP_LEN, SGE_LEN};

/// How big the next write of a `send` call may be: rdma-core starts each
/// `rsend` at [`OLAP_START_SIZE`] and doubles up to [`MAX_TRANSFER`], so
/// that the first bytes leave early. Keep one per application call (a
/// blocking call that waits for completions keeps its ramp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRamp(u32);

impl SendRamp {
    pub fn new() -> SendRamp {
        SendRamp(OLAP_START_SIZE)
    }

    fn next(&mut self, left: usize) -> u32 {
        if (self.0 as usize) < left {
            let x = self.0;
            if self.0 < MAX_TRANSFER {
                self.0 <<= 1;
            }
            x
        } else {
            left as u32
        }
    }
}

impl Default for SendRamp {
    fn default() -> SendRamp {
        SendRamp::new()
    }
}

/// What a sender knows, for tests and diagnostics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderView {
    /// Data (and iomap) messages sent, mod 2^16.
    pub sseq_no: u16,
    /// The credit limit: messages may be sent while `sseq_no != sseq_comp`.
    pub sseq_comp: u16,
    pub sqe_avail: u32,
    pub sbuf_bytes_avail: u32,
    /// The target SGL as we use it (addresses advance as we write).
    pub target_sgl: [Sge; 2],
    /// The entry we write into now.
    pub target_sge: usize,
}

#[derive(Debug)]
pub(crate) struct SendSide {
    sseq_no: u16,
    sseq_comp: u16,
    pub(crate) sqe_avail: u32,
    sbuf_size: u32,
    sbuf_avail: u32,
    /// Where the next copy into the send buffer goes (`ssgl[0].addr`).
    sbuf_head: u32,
    sq_inline: u32,
    /// Our copy of the target SGL, consumed as we write.
    target: [Sge; 2],
    target_sge: usize,
    /// The entry the peer's next SGL update writes (it starts at 1: entry
    /// 0 came in the connection data).
    next_update: usize,
    /// The byte order of our own target list (what we announced).
    own_order: ByteOrder,
    /// The peer's receive buffer as its connection data described it.
    peer_rbuf: (u64, u64),
    peer_credits: u16,
    /// The peer's target iomap: address, rkey, entries.
    remote_iomap: Sge,
    peer_order: ByteOrder,
}

impl SendSide {
    pub(crate) fn new(cfg: &StreamConfig) -> SendSide {
        SendSide {
            sseq_no: 0,
            sseq_comp: 0,
            sqe_avail: u32::from(cfg.sq_size).saturating_sub(QP_CTRL_SIZE),
            sbuf_size: cfg.sbuf_size,
            sbuf_avail: cfg.sbuf_size,
            sbuf_head: 0,
            sq_inline: u32::from(cfg.sq_inline),
            target: [Sge::default(); 2],
            target_sge: 0,
            next_update: 1,
            own_order: ByteOrder::native(),
            peer_rbuf: (0, 0),
            peer_credits: 0,
            remote_iomap: Sge::default(),
            peer_order: ByteOrder::native(),
        }
    }

    /// The peer's connection data arrived (`rs_save_conn_data`).
    pub(crate) fn connect(&mut self, peer: &ConnData) {
        self.target[0] = peer.data_buf;
        self.sseq_comp = peer.credits;
        self.peer_credits = peer.credits;
        let start = peer.data_buf.addr;
        self.peer_rbuf = (start, start.saturating_add(2 * u64::from(peer.data_buf.length)));
        self.remote_iomap = Sge {
            addr: peer.iomap_addr(),
            key: peer.target_sgl.key,
            length: u32::from(peer.iomap_entries()),
        };
        self.peer_order = peer.entry_order();
    }

    pub(crate) fn view(&self) -> SenderView {
        SenderView {
            sseq_no: self.sseq_no,
            sseq_comp: self.sseq_comp,
            sqe_avail: self.sqe_avail,
            sbuf_bytes_avail: self.sbuf_avail,
            target_sgl: self.target,
            target_sge: self.target_sge,
        }
    }

    /// `rs_can_send`: a send queue entry, [`SNDLOWAT`] bytes of send
    /// buffer, a message credit and room in the current target entry.
    pub(crate) fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target[self.target_sge].length != 0
    }

    pub(crate) fn all_data_done(&self, sq_size: u16) -> bool {
        self.sqe_avail + QP_CTRL_SIZE >= u32::from(sq_size)
    }

    /// Where `len` bytes go locally: inline from `source` when short
    /// enough, else copied into the send buffer ring (two segments when it
    /// wraps). Takes the bytes from the budget.
    fn place(&mut self, len: u32, source: Source) -> Payload {
        self.sbuf_avail -= len;
        if len <= self.sq_inline {
            return match source {
                Source::App { offset } => Payload::InlineApp { offset, len },
                Source::Bytes(b) => Payload::InlineBytes(b),
            };
        }
        let left = self.sbuf_size - self.sbuf_head;
        let segs = if len <= left {
            let s = vec![Seg { offset: self.sbuf_head, len }];
            self.sbuf_head = if len < left { self.sbuf_head + len } else { 0 };
            s
        } else {
            let s =
                vec![Seg { offset: self.sbuf_head, len: left }, Seg { offset: 0, len: len - left }];
            self.sbuf_head = len - left;
            s
        };
        Payload::Sbuf { segs, source }
    }

    /// The application sends `len` bytes: as many data messages as credits,
    /// buffers and queue entries allow. Returns the bytes taken.
    pub(crate) fn send(&mut self, len: usize, ramp: &mut SendRamp, out: &mut Vec<Action>) -> usize {
        let mut done = 0usize;
        while done < len && self.can_send() {
            let entry = self.target[self.target_sge];
            let xfer = ramp.next(len - done).min(self.sbuf_avail).min(entry.length);
            let payload = self.place(xfer, Source::App { offset: done });
            // rs_write_data: the entry moves on before the write is posted
            self.sseq_no = self.sseq_no.wrapping_add(1);
            self.sqe_avail -= 1;
            let t = &mut self.target[self.target_sge];
            t.addr = t.addr.wrapping_add(u64::from(xfer));
            t.length -= xfer;
            if t.length == 0 {
                self.target_sge = (self.target_sge + 1) % SGL_SIZE as usize;
            }
            let m = msg(Op::Data, xfer);
            out.push(Action::Post(Wr {
                wr_id: u64::from(m),
                imm: Some(m),
                remote_addr: entry.addr,
                rkey: entry.key,
                payload,
            }));
            done += xfer as usize;
        }
        done
    }

    /// A credit update (`RS_OP_SGL`) arrived with a write of `byte_len`
    /// bytes into our target SGL, whose current image is `target_list`.
    pub(crate) fn on_credit(
        &mut self,
        limit: u16,
        byte_len: u32,
        target_list: &[u8],
    ) -> Result<(), Error> {
        let room = limit.wrapping_sub(self.sseq_no);
        if room > self.peer_credits {
            return Err(Error::CreditsBeyondQueue { limit, sent: self.sseq_no });
        }
        match byte_len {
            0 => {}
            16 => self.take_sgl_entry(target_list)?,
            len => return Err(Error::SglWriteLength { len }),
        }
        self.sseq_comp = limit;
        Ok(())
    }

    /// The peer wrote its next target SGL entry: check and use it.
    fn take_sgl_entry(&mut self, target_list: &[u8]) -> Result<(), Error> {
        let idx = self.next_update;
        let at = idx * SGE_LEN;
        let bytes = target_list
            .get(at..at + SGE_LEN)
            .ok_or(Error::TargetListShort { len: target_list.len() })?;
        let sge = Sge::parse(bytes, self.own_order).expect("16 bytes");
        if self.target[idx].length != 0 {
            return Err(Error::SglInUse { index: idx as u32 });
        }
        let end = sge.addr.checked_add(u64::from(sge.length));
        let (lo, hi) = self.peer_rbuf;
        if sge.length == 0 || sge.addr < lo || end.is_none_or(|e| e > hi) {
            return Err(Error::SglBeyondBuffer { addr: sge.addr, length: sge.length });
        }
        self.target[idx] = sge;
        self.next_update = (idx + 1) % SGL_SIZE as usize;
        Ok(())
    }

    /// One of our data, direct or iomap writes completed (`rs_poll_cq`).
    /// Capped at the sizes, so that a `wr_id` we never gave cannot make
    /// room that is not there.
    pub(crate) fn on_completion(&mut self, m: u32, sq_size: u16) {
        let freed = match Op::from_bits(m >> 29) {
            Op::IomapSgl => IOMAP_LEN as u32,
            _ => m & crate::wire::MSG_DATA_MASK,
        };
        self.sqe_avail = (self.sqe_avail + 1).min(u32::from(sq_size).saturating_sub(QP_CTRL_SIZE));
        self.sbuf_avail = self.sbuf_avail.saturating_add(freed).min(self.sbuf_size);
    }

    /// Publish iomap entry `index` to the peer (`rs_send_iomaps`,
    /// `rs_write_iomap`): a 24-byte write into the peer's target iomap with
    /// an `RS_OP_IOMAP_SGL` message; it takes a message credit.
    pub(crate) fn send_iomap(&mut self, index: u16, iom: &Iomap) -> Result<Wr, Error> {
        if u32::from(index) >= self.remote_iomap.length {
            return Err(Error::NoSuchIomap { index });
        }
        if !self.can_send() {
            return Err(Error::WouldBlock);
        }
        let bytes = iom.emit(self.peer_order).to_vec();
        let payload = self.place(IOMAP_LEN as u32, Source::Bytes(bytes));
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        let m = msg(Op::IomapSgl, u32::from(index));
        Ok(Wr {
            wr_id: u64::from(m),
            imm: Some(m),
            remote_addr: self.remote_iomap.addr + IOMAP_LEN as u64 * u64::from(index),
            rkey: self.remote_iomap.key,
            payload,
        })
    }

    /// Write `len` bytes straight into the peer's iomapped buffer `iom` at
    /// stream offset `offset` (`riowrite`, `rs_write_direct`): plain RDMA
    /// WRITEs, no message, no credit taken (but `rs_can_send` must hold).
    /// Returns the bytes taken.
    pub(crate) fn iowrite(
        &mut self,
        iom: &Iomap,
        offset: u64,
        len: usize,
        ramp: &mut SendRamp,
        out: &mut Vec<Action>,
    ) -> usize {
        let mut done = 0usize;
        let end = iom.offset.saturating_add(u64::from(iom.sge.length));
        while done < len && self.can_send() {
            let at = offset + done as u64;
            if at < iom.offset || at >= end {
                break;
            }
            let xfer = ramp
                .next(len - done)
                .min(self.sbuf_avail)
                .min((end - at).min(u64::from(u32::MAX)) as u32);
            let payload = self.place(xfer, Source::App { offset: done });
            self.sqe_avail -= 1;
            out.push(Action::Post(Wr {
                wr_id: u64::from(msg(Op::Write, xfer)),
                imm: None,
                remote_addr: iom.sge.addr.wrapping_add(at - iom.offset),
                rkey: iom.sge.key,
                payload,
            }));
            done += xfer as usize;
        }
        done
    }
}
