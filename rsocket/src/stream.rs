//! A stream rsocket (`SOCK_STREAM` over RC) as a sans-IO state machine.

use crate::action::{Action, Payload, Seg, Wr};
use crate::config::{LocalMemory, StreamConfig};
use crate::consts::*;
use crate::error::{errno, Error};
use crate::receiver::RecvSide;
use crate::sender::{SendRamp, SendSide, SenderView};
use crate::wire::{
    ctrl, iomap_size_to_scale, msg, ByteOrder, ConnData, Iomap, Msg, Op, Sge, IOMAP_LEN, SGE_LEN,
};

/// Where a stream is (rsocket.c's `rs_state`, the connected part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Made, the peer's connection data not seen yet.
    Idle,
    /// Connected (`rs_connected`), each direction open or shut.
    Connected,
    /// Disconnected both ways (`rs_disconnected`): `POLLHUP`.
    Disconnected,
    /// Failed (`rs_error`): `POLLERR`, `SO_ERROR` is `EIO`.
    Error,
}

/// `rshutdown`'s `how`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    Read,
    Write,
    Both,
}

/// What `rpoll` reports for a stream (`rs_poll_rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollFlags {
    /// Data to read, or end of file.
    pub pollin: bool,
    /// A send would take bytes now.
    pub pollout: bool,
    pub pollhup: bool,
    pub pollerr: bool,
}

/// One receive completion of a stream's QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvCompletion {
    /// The message: `be32toh(wc.imm_data)`.
    pub imm: u32,
    /// `wc.byte_len`: the length of the RDMA WRITE that carried it.
    pub byte_len: u32,
    /// `wc.status == IBV_WC_SUCCESS`.
    pub ok: bool,
}

/// A stream rsocket's protocol state: feed it the peer's connection data,
/// the application's calls and the completions; it answers with
/// [`Action`]s. It never touches memory: the C layer owns the buffers
/// ([`LocalMemory`]) and passes in the image of its target list when a
/// message may have written it.
///
/// The C layer, before connecting (REQ) or accepting (REP): registers the
/// buffers, posts `rq_size` receives ([`Action::PostRecv`] each), and puts
/// [`Stream::conn_data`] in the private data. On the peer's connection data
/// it calls [`Stream::establish`] and performs the actions once its QP can
/// send.
#[derive(Debug)]
pub struct Stream {
    cfg: StreamConfig,
    mem: LocalMemory,
    phase: Phase,
    readable: bool,
    writable: bool,
    so_error: i32,
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    /// A shutdown waiting for a control slot (rdma-core's `rshutdown`
    /// waits in the CQ for one).
    pending_ctrl: Option<u32>,
    tx: SendSide,
    rx: RecvSide,
}

impl Stream {
    /// A stream with these sizes (see [`StreamConfig::normalized`]) over
    /// this registered memory.
    pub fn new(cfg: StreamConfig, mem: LocalMemory) -> Stream {
        Stream {
            cfg,
            mem,
            phase: Phase::Idle,
            readable: false,
            writable: false,
            so_error: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            pending_ctrl: None,
            tx: SendSide::new(&cfg),
            rx: RecvSide::new(&cfg, mem),
        }
    }

    pub fn config(&self) -> &StreamConfig {
        &self.cfg
    }

    /// Our connection data (`rs_format_conn_data`): version 1, iomap flag,
    /// `NET` on a big-endian host, our receive queue size as credits, our
    /// target list, and the first half of our receive buffer.
    pub fn conn_data(&self) -> ConnData {
        let net = if ByteOrder::native() == ByteOrder::Big { CONN_FLAG_NET } else { 0 };
        ConnData {
            version: CONN_DATA_VERSION,
            flags: CONN_FLAG_IOMAP | net,
            credits: self.cfg.rq_size,
            reserved: [0; 3],
            target_iomap_size: iomap_size_to_scale(self.cfg.target_iomap_size),
            target_sgl: Sge {
                addr: self.mem.target_addr,
                key: self.mem.target_rkey,
                length: SGL_SIZE,
            },
            data_buf: Sge {
                addr: self.mem.rbuf_addr,
                key: self.mem.rbuf_rkey,
                length: self.cfg.rbuf_half(),
            },
        }
    }

    /// The peer's connection data (the REQ's on the passive side, the REP's
    /// on the active side; the rsocket part, after any CM header): the
    /// stream is connected, readable and writable. The actions offer the
    /// second half of our receive buffer at once.
    pub fn establish(&mut self, peer: &[u8]) -> Result<Vec<Action>, Error> {
        if self.phase != Phase::Idle {
            return Err(Error::NotConnected);
        }
        let c = ConnData::parse(peer)?;
        self.tx.connect(&c);
        self.rx.connect(&c);
        self.phase = Phase::Connected;
        self.readable = true;
        self.writable = true;
        let mut out = Vec::new();
        self.update_credits(&mut out);
        Ok(out)
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    fn connected(&self) -> bool {
        self.phase == Phase::Connected
    }

    /// Protocol failure: the error state, `SO_ERROR` = `EIO`.
    fn fail(&mut self, e: Error) -> Error {
        self.phase = Phase::Error;
        self.readable = false;
        self.writable = false;
        self.so_error = errno::EIO;
        self.pending_ctrl = None;
        e
    }

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// Post a control message if a slot is free (`rs_post_msg`).
    fn post_ctrl(&mut self, value: u32, out: &mut Vec<Action>) -> bool {
        if !self.ctrl_avail() {
            return false;
        }
        self.ctrl_seqno += 1;
        let m = msg(Op::Ctrl, value);
        out.push(Action::Post(Wr {
            wr_id: u64::from(m),
            imm: Some(m),
            remote_addr: 0,
            rkey: 0,
            payload: Payload::Empty,
        }));
        true
    }

    /// After every event: a pending shutdown, then credits if due
    /// (`rs_update_credits`).
    fn update_credits(&mut self, out: &mut Vec<Action>) {
        if !self.connected() {
            return;
        }
        if let Some(v) = self.pending_ctrl {
            if self.post_ctrl(v, out) {
                self.pending_ctrl = None;
            }
        }
        if self.ctrl_avail() && self.rx.credits_due() {
            self.ctrl_seqno += 1;
            let slot = (self.ctrl_seqno & (QP_CTRL_SIZE - 1)) * MAX_CTRL_MSG;
            let slot = (!self.cfg.ctrl_inline()).then_some(self.cfg.sbuf_size + slot);
            out.push(Action::Post(self.rx.send_credits(slot)));
        }
    }

    /// The application sends `len` bytes (`rsend`): the bytes taken now (a
    /// prefix) and the writes. Nothing taken: [`Error::WouldBlock`] (wait
    /// for completions, retry with the same `ramp`). Shut down for
    /// writing, disconnected or failed: [`Error::ConnReset`], as rdma-core.
    pub fn send(&mut self, len: usize, ramp: &mut SendRamp) -> Result<(usize, Vec<Action>), Error> {
        match self.phase {
            Phase::Idle => return Err(Error::NotConnected),
            _ if !self.writable => return Err(Error::ConnReset),
            _ => {}
        }
        let mut out = Vec::new();
        let n = self.tx.send(len, ramp, &mut out);
        if n == 0 && len > 0 {
            return Err(Error::WouldBlock);
        }
        Ok((n, out))
    }

    /// A receive completion. `target_list` is the current image of our
    /// target list (at least the SGL's 32 bytes): a credit message may come
    /// with a new entry written there.
    pub fn handle_recv_completion(
        &mut self,
        c: RecvCompletion,
        target_list: &[u8],
    ) -> Result<Vec<Action>, Error> {
        let mut out = Vec::new();
        // flushed receives (rdma-core skips failed ones without reposting),
        // and anything after the end
        if !c.ok || !self.connected() {
            return Ok(out);
        }
        match self.on_msg(c, target_list, &mut out) {
            Ok(()) => {}
            Err(e) => return Err(self.fail(e)),
        }
        if self.connected() {
            out.push(Action::PostRecv);
        }
        self.update_credits(&mut out);
        Ok(out)
    }

    fn on_msg(
        &mut self,
        c: RecvCompletion,
        target_list: &[u8],
        out: &mut Vec<Action>,
    ) -> Result<(), Error> {
        match Msg::decode(c.imm)? {
            Msg::Data { len } => {
                if c.byte_len != len {
                    return Err(Error::DataLengthMismatch { len, byte_len: c.byte_len });
                }
                let at = self.rx.on_data(len)?;
                if len > 0 {
                    out.push(Action::Arrived { offset: at.offset, len });
                }
            }
            Msg::Sgl { limit, .. } => self.tx.on_credit(limit, c.byte_len, target_list)?,
            Msg::IomapSgl { .. } => self.rx.on_iomap()?,
            Msg::Ctrl { value: ctrl::DISCONNECT } => self.disconnected(out),
            Msg::Ctrl { value: ctrl::SHUTDOWN } => {
                if self.writable {
                    self.readable = false;
                    out.push(Action::PeerShutdown);
                } else {
                    self.disconnected(out);
                }
            }
            Msg::Ctrl { .. } => {}
        }
        Ok(())
    }

    fn disconnected(&mut self, out: &mut Vec<Action>) {
        if self.phase == Phase::Connected {
            self.phase = Phase::Disconnected;
            self.readable = false;
            self.writable = false;
            self.pending_ctrl = None;
            out.push(Action::Disconnected);
        }
    }

    /// A send completion of one of our [`Wr`]s.
    pub fn handle_send_completion(&mut self, wr_id: u64, ok: bool) -> Result<Vec<Action>, Error> {
        let mut out = Vec::new();
        let m = wr_id as u32;
        let ctrl_done = (self.ctrl_max_seqno + 1).min(self.ctrl_seqno + QP_CTRL_SIZE);
        match Op::from_bits(m >> 29) {
            Op::Sgl => self.ctrl_max_seqno = ctrl_done,
            Op::Ctrl => {
                self.ctrl_max_seqno = ctrl_done;
                if m & crate::wire::MSG_DATA_MASK == ctrl::DISCONNECT {
                    self.disconnected(&mut out);
                }
            }
            _ => self.tx.on_completion(m, self.cfg.sq_size),
        }
        if !ok && self.connected() {
            return Err(self.fail(Error::CompletionFailed));
        }
        self.update_credits(&mut out);
        Ok(out)
    }

    /// Bytes queued for the application.
    pub fn readable_bytes(&self) -> u64 {
        self.rx.queued()
    }

    /// Where the first `max` queued bytes are in the receive buffer (for
    /// `rrecv` to copy, or `MSG_PEEK`).
    pub fn read_spans(&self, max: usize) -> Vec<Seg> {
        self.rx.read_spans(max)
    }

    /// The application copied out `n` bytes (from [`Stream::read_spans`]):
    /// they are free; a credit update may follow. Returns the bytes
    /// consumed (at most those queued).
    pub fn consume(&mut self, n: usize) -> (usize, Vec<Action>) {
        let k = self.rx.consume(n);
        let mut out = Vec::new();
        self.update_credits(&mut out);
        (k, out)
    }

    /// End of file: nothing queued and the peer will send nothing more.
    pub fn at_eof(&self) -> bool {
        !self.rx.has_data() && !self.readable && self.phase != Phase::Idle
    }

    /// `rshutdown`: the control message it sends (`SHUTDOWN` while we can
    /// still receive, else `DISCONNECT`), now or when a control slot frees.
    /// Once our `DISCONNECT` completes, [`Action::Disconnected`] follows.
    pub fn shutdown(&mut self, how: Shutdown) -> Vec<Action> {
        let mut out = Vec::new();
        if !self.connected() {
            return out;
        }
        let value = match how {
            Shutdown::Both => {
                self.readable = false;
                self.writable = false;
                ctrl::DISCONNECT
            }
            Shutdown::Write => {
                self.writable = false;
                if self.readable {
                    ctrl::SHUTDOWN
                } else {
                    ctrl::DISCONNECT
                }
            }
            Shutdown::Read => {
                self.readable = false;
                if self.writable {
                    return out;
                }
                ctrl::DISCONNECT
            }
        };
        if !self.post_ctrl(value, &mut out) {
            self.pending_ctrl = Some(value);
        }
        out
    }

    /// A keepalive, if a control slot is free (`tcp_svc_send_keepalive`):
    /// a 0-byte RDMA WRITE *without* immediate, so the peer sees nothing;
    /// its completion (an error if the peer is gone) is what counts. The C
    /// layer sends one every `TCP_KEEPIDLE` seconds.
    pub fn keepalive(&mut self) -> Option<Wr> {
        if !self.connected() || !self.ctrl_avail() {
            return None;
        }
        self.ctrl_seqno += 1;
        let m = msg(Op::Ctrl, ctrl::KEEPALIVE);
        Some(Wr {
            wr_id: u64::from(m),
            imm: None,
            remote_addr: 0,
            rkey: 0,
            payload: Payload::Empty,
        })
    }

    /// Every work request posted has completed (`rs_conn_all_sends_done`):
    /// `rshutdown` waits for this before disconnecting.
    pub fn all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno - self.ctrl_seqno == QP_CTRL_SIZE
            && self.tx.all_data_done(self.cfg.sq_size))
            || !self.connected()
    }

    pub fn can_send(&self) -> bool {
        self.writable && self.tx.can_send()
    }

    /// What `rpoll` reports.
    pub fn poll(&self) -> PollFlags {
        PollFlags {
            pollin: self.rx.has_data() || (!self.readable && self.phase != Phase::Idle),
            pollout: self.tx.can_send(),
            pollhup: self.phase == Phase::Disconnected,
            pollerr: self.phase == Phase::Error,
        }
    }

    /// `SO_ERROR`: the pending error (`EIO` after a failure), cleared.
    pub fn take_error(&mut self) -> i32 {
        core::mem::take(&mut self.so_error)
    }

    pub fn sender_view(&self) -> SenderView {
        self.tx.view()
    }

    /// Publish our iomapped buffer as entry `index` of the peer's target
    /// iomap (`riomap` with `PROT_WRITE`, sent by the next `rsend`/
    /// `riowrite`): the application's buffer at `sge` answers to stream
    /// offset `offset`.
    pub fn send_iomap(&mut self, index: u16, offset: u64, sge: Sge) -> Result<Wr, Error> {
        if !self.writable {
            return Err(Error::ConnReset);
        }
        self.tx.send_iomap(index, &Iomap { offset, sge })
    }

    /// `riowrite`: write `len` bytes at stream offset `offset` straight into
    /// the peer's iomapped buffer that covers it, as published in our
    /// target iomap (whose image is after the SGL in `target_list`).
    pub fn iowrite(
        &mut self,
        offset: u64,
        len: usize,
        ramp: &mut SendRamp,
        target_list: &[u8],
    ) -> Result<(usize, Vec<Action>), Error> {
        if !self.writable {
            return Err(Error::ConnReset);
        }
        let iom = self.find_iomap(offset, target_list)?;
        let mut out = Vec::new();
        let n = self.tx.iowrite(&iom, offset, len, ramp, &mut out);
        if n == 0 && len > 0 {
            return Err(Error::WouldBlock);
        }
        Ok((n, out))
    }

    /// `rs_find_iomap`: the entry of our target iomap covering `offset`.
    fn find_iomap(&self, offset: u64, target_list: &[u8]) -> Result<Iomap, Error> {
        let base = SGE_LEN * SGL_SIZE as usize;
        for i in 0..usize::from(self.cfg.target_iomap_size) {
            let at = base + i * IOMAP_LEN;
            let b = target_list
                .get(at..at + IOMAP_LEN)
                .ok_or(Error::TargetListShort { len: target_list.len() })?;
            let iom = Iomap::parse(b, ByteOrder::native()).expect("24 bytes");
            if offset >= iom.offset && offset - iom.offset < u64::from(iom.sge.length) {
                return Ok(iom);
            }
        }
        Err(Error::NoIomapAt { offset })
    }
}
