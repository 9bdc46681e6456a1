//! A stream rsocket's verbs resources (rsocket.c's `rs_create_ep`,
//! `rs_init_bufs`): a PD, a completion channel and one CQ for both
//! directions, the RC QP made through the CM id, and three registered
//! buffers — the send buffer (local), the receive buffer and the target
//! list (both written by the peer). Posting and polling go through the
//! inline verbs' table, as a C program's do.
//!
//! The buffers are raw allocations touched only through raw pointers
//! (never a Rust reference): the peer's RDMA WRITEs land in the receive
//! buffer and the target list while we run, as a NIC's DMA would.

use crate::ffi::*;
use libc::{c_int, c_void};
use roce_rsocket::{Payload, Seg, Source, StreamConfig, Wr};
use std::ptr;

/// One registered allocation.
pub(crate) struct Buf {
    pub ptr: *mut u8,
    pub len: usize,
    pub mr: *mut ibv_mr,
}

impl Buf {
    pub(crate) fn new(pd: *mut ibv_pd, len: usize, access: c_int) -> Result<Buf, i32> {
        let len = len.max(1);
        // SAFETY: a fresh zeroed allocation of `len` bytes, ours until
        // `free`.
        let ptr = unsafe { libc::calloc(len, 1) } as *mut u8;
        if ptr.is_null() {
            return Err(libc::ENOMEM);
        }
        // SAFETY: `pd` is live; the memory is ours and outlives the MR
        // (deregistered before it is freed).
        let mr = unsafe { ibv_reg_mr(pd, ptr as *mut c_void, len, access) };
        if mr.is_null() {
            // SAFETY: our allocation, not registered.
            unsafe { libc::free(ptr as *mut c_void) };
            return Err(crate::errno().max(libc::ENOMEM));
        }
        Ok(Buf { ptr, len, mr })
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a live MR of ours.
        unsafe { (*self.mr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: a live MR of ours.
        unsafe { (*self.mr).rkey }
    }

    /// Copy `len` bytes from `offset` out to `dst` (bounds checked).
    pub fn read(&self, offset: usize, dst: *mut u8, len: usize) {
        if len == 0 || offset.checked_add(len).is_none_or(|e| e > self.len) {
            return;
        }
        // SAFETY: inside our allocation (checked); `dst` has room for
        // `len` bytes (the caller's buffer). The peer may be writing other
        // parts of the buffer meanwhile; these bytes are ones the protocol
        // says it finished (their completion was seen).
        unsafe { ptr::copy_nonoverlapping(self.ptr.add(offset), dst, len) };
    }

    pub(crate) fn write(&self, offset: usize, src: &[u8]) {
        if offset.checked_add(src.len()).is_none_or(|e| e > self.len) {
            return;
        }
        // SAFETY: inside our allocation (checked); the send buffer is
        // local, nothing else writes it.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(offset), src.len()) };
    }

    pub(crate) fn free(&mut self) {
        if !self.mr.is_null() {
            // SAFETY: our MR, deregistered once.
            unsafe { ibv_dereg_mr(self.mr) };
            self.mr = ptr::null_mut();
        }
        if !self.ptr.is_null() {
            // SAFETY: our allocation, no longer registered.
            unsafe { libc::free(self.ptr as *mut c_void) };
            self.ptr = ptr::null_mut();
        }
    }
}

/// The verbs resources of one connection.
pub(crate) struct Ep {
    pub id: *mut rdma_cm_id,
    pub pd: *mut ibv_pd,
    pub cc: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub sbuf: Buf,
    pub rbuf: Buf,
    pub target: Buf,
    /// CQ events taken and not yet acknowledged.
    pub unacked: u32,
    /// The CQ is armed (`ibv_req_notify_cq`) and no event was taken since.
    pub armed: bool,
}

impl Ep {
    /// `rs_create_ep`: resources on the id's device, the QP made through the
    /// CM, the buffers registered, every receive posted. `cfg` comes back
    /// with the inline size the QP got.
    pub fn create(id: *mut rdma_cm_id, cfg: &mut StreamConfig) -> Result<Ep, i32> {
        // SAFETY: a live id of the CM whose address is resolved (verbs set).
        let verbs = unsafe { (*id).verbs };
        if verbs.is_null() {
            return Err(libc::EINVAL);
        }
        let mut ep = Ep {
            id,
            pd: ptr::null_mut(),
            cc: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            sbuf: Buf { ptr: ptr::null_mut(), len: 0, mr: ptr::null_mut() },
            rbuf: Buf { ptr: ptr::null_mut(), len: 0, mr: ptr::null_mut() },
            target: Buf { ptr: ptr::null_mut(), len: 0, mr: ptr::null_mut() },
            unacked: 0,
            armed: false,
        };
        match ep.build(verbs, cfg) {
            Ok(()) => Ok(ep),
            Err(e) => {
                ep.destroy();
                Err(e)
            }
        }
    }

    fn build(&mut self, verbs: *mut ibv_context, cfg: &mut StreamConfig) -> Result<(), i32> {
        let fail = |p: bool| if p { Err(crate::errno().max(1)) } else { Ok(()) };
        // SAFETY: `verbs` is the id's live context; each object is checked
        // and kept for `destroy`.
        unsafe {
            self.pd = ibv_alloc_pd(verbs);
            fail(self.pd.is_null())?;
            self.cc = ibv_create_comp_channel(verbs);
            fail(self.cc.is_null())?;
            crate::set_nonblock((*self.cc).fd, true);
            let cqe = c_int::from(cfg.sq_size) + c_int::from(cfg.rq_size);
            self.cq = ibv_create_cq(verbs, cqe, ptr::null_mut(), self.cc, 0);
            fail(self.cq.is_null())?;
            let mut attr = ibv_qp_init_attr {
                qp_context: ptr::null_mut(),
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: ptr::null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: u32::from(cfg.sq_size),
                    max_recv_wr: u32::from(cfg.rq_size),
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: u32::from(cfg.sq_inline),
                },
                qp_type: IBV_QPT_RC,
                sq_sig_all: 1,
            };
            if rdma_create_qp(self.id, self.pd, &mut attr) != 0 {
                return Err(crate::errno().max(1));
            }
            self.qp = (*self.id).qp;
            cfg.sq_inline = attr.cap.max_inline_data.min(u32::from(u16::MAX)) as u16;
        }
        let local = IBV_ACCESS_LOCAL_WRITE;
        let remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        self.sbuf = Buf::new(self.pd, cfg.sbuf_total_len() as usize, local)?;
        self.rbuf = Buf::new(self.pd, cfg.rbuf_size as usize, remote)?;
        self.target = Buf::new(self.pd, cfg.target_list_len(), remote)?;
        for _ in 0..cfg.rq_size {
            self.post_recv()?;
        }
        Ok(())
    }

    pub fn memory(&self) -> roce_rsocket::LocalMemory {
        roce_rsocket::LocalMemory {
            rbuf_addr: self.rbuf.ptr as u64,
            rbuf_rkey: self.rbuf.rkey(),
            target_addr: self.target.ptr as u64,
            target_rkey: self.target.rkey(),
        }
    }

    /// One receive without SGE: the immediate is all it takes.
    pub fn post_recv(&self) -> Result<(), i32> {
        let mut wr = ibv_recv_wr {
            wr_id: roce_rsocket::consts::RECV_WR_ID,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        // SAFETY: our live QP; the work request lives across the call.
        match unsafe { post_recv(self.qp, &mut wr) } {
            0 => Ok(()),
            e => Err(e.abs()),
        }
    }

    /// Post an RDMA WRITE the stream asked for; `app` is the application's
    /// buffer of the call that made it (the one `Source::App` offsets name).
    pub fn post(&self, wr: &Wr, app: &[u8]) -> Result<(), i32> {
        let mut sges =
            [ibv_sge { addr: 0, length: 0, lkey: 0 }, ibv_sge { addr: 0, length: 0, lkey: 0 }];
        let mut n = 0usize;
        let mut flags = 0;
        match &wr.payload {
            Payload::Empty => {}
            Payload::InlineApp { offset, len } => {
                let b = app.get(*offset..*offset + *len as usize).ok_or(libc::EINVAL)?;
                sges[0] = ibv_sge { addr: b.as_ptr() as u64, length: *len, lkey: 0 };
                n = 1;
                flags = IBV_SEND_INLINE;
            }
            Payload::InlineBytes(b) => {
                sges[0] = ibv_sge { addr: b.as_ptr() as u64, length: b.len() as u32, lkey: 0 };
                n = 1;
                flags = IBV_SEND_INLINE;
            }
            Payload::Sbuf { segs, source } => {
                let src: &[u8] = match source {
                    Source::App { offset } => app.get(*offset..).ok_or(libc::EINVAL)?,
                    Source::Bytes(b) => b,
                };
                n = self.stage(segs, src, &mut sges)?;
            }
        }
        let mut swr = ibv_send_wr {
            wr_id: wr.wr_id,
            next: ptr::null_mut(),
            sg_list: if n == 0 { ptr::null_mut() } else { sges.as_mut_ptr() },
            num_sge: n as c_int,
            opcode: if wr.imm.is_some() { IBV_WR_RDMA_WRITE_WITH_IMM } else { IBV_WR_RDMA_WRITE },
            send_flags: flags,
            imm_data: wr.imm.unwrap_or(0).to_be(),
            remote_addr: wr.remote_addr,
            rkey: wr.rkey,
            _wr_rest: [0; 5],
            _tail: [0; 7],
        };
        // SAFETY: our live QP; the work request and its SGEs (and inline
        // bytes, copied by the post) live across the call.
        match unsafe { post_send(self.qp, &mut swr) } {
            0 => Ok(()),
            e => Err(e.abs()),
        }
    }

    /// Copy `src` into the send buffer at `segs`; the SGEs that name them.
    fn stage(&self, segs: &[Seg], src: &[u8], sges: &mut [ibv_sge; 2]) -> Result<usize, i32> {
        let mut at = 0usize;
        for (i, s) in segs.iter().take(2).enumerate() {
            let len = s.len as usize;
            let part = src.get(at..at + len).ok_or(libc::EINVAL)?;
            self.sbuf.write(s.offset as usize, part);
            sges[i] = ibv_sge {
                addr: self.sbuf.ptr as u64 + u64::from(s.offset),
                length: s.len,
                lkey: self.sbuf.lkey(),
            };
            at += len;
        }
        Ok(segs.len().min(2))
    }

    /// Completions, at most `wc.len()`.
    pub fn poll(&self, wc: &mut [ibv_wc]) -> Result<usize, i32> {
        // SAFETY: our live CQ.
        let n = unsafe { poll_cq(self.cq, wc) };
        if n < 0 {
            return Err(libc::EIO);
        }
        Ok(n as usize)
    }

    /// The image of the target list (SGL then iomap).
    pub fn target_image(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.target.len];
        self.target.read(0, v.as_mut_ptr(), v.len());
        v
    }

    /// Ask for an event at the next completion.
    pub fn arm(&mut self) {
        if !self.armed {
            // SAFETY: our live CQ.
            unsafe { req_notify_cq(self.cq) };
            self.armed = true;
        }
    }

    /// Take every pending CQ event (the channel is non-blocking).
    pub fn drain_events(&mut self) {
        let mut cq = ptr::null_mut();
        let mut ctx = ptr::null_mut();
        // SAFETY: our live channel, non-blocking: EAGAIN ends the loop.
        while unsafe { ibv_get_cq_event(self.cc, &mut cq, &mut ctx) } == 0 {
            self.unacked += 1;
            self.armed = false;
        }
        if self.unacked > 0 {
            // SAFETY: events of our CQ, taken above.
            unsafe { ibv_ack_cq_events(self.cq, self.unacked) };
            self.unacked = 0;
        }
    }

    pub fn comp_fd(&self) -> c_int {
        // SAFETY: our live channel.
        unsafe { (*self.cc).fd }
    }

    /// Undo `create` (the id itself is its owner's).
    pub fn destroy(&mut self) {
        // SAFETY: each object ours, live, destroyed once, in reverse order
        // of creation; the QP through the CM that made it.
        unsafe {
            if !self.qp.is_null() {
                rdma_destroy_qp(self.id);
                self.qp = ptr::null_mut();
            }
            self.sbuf.free();
            self.rbuf.free();
            self.target.free();
            if !self.cq.is_null() {
                self.drain_events();
            }
            free_cq_channel_pd(&mut self.cq, &mut self.cc, &mut self.pd);
        }
    }
}

/// Destroy a CQ (its events drained and acknowledged), then its completion
/// channel, then the PD, each if there (the pointer is NULL after).
///
/// # Safety
/// Each pointer is NULL or an object of ours, live, used by nothing else
/// any more (its QP and buffers are gone).
pub(crate) unsafe fn free_cq_channel_pd(
    cq: &mut *mut ibv_cq,
    cc: &mut *mut ibv_comp_channel,
    pd: &mut *mut ibv_pd,
) {
    // SAFETY: per the contract, each destroyed once, in reverse order of
    // creation.
    unsafe {
        if !cq.is_null() {
            ibv_destroy_cq(*cq);
            *cq = ptr::null_mut();
        }
        if !cc.is_null() {
            ibv_destroy_comp_channel(*cc);
            *cc = ptr::null_mut();
        }
        if !pd.is_null() {
            ibv_dealloc_pd(*pd);
            *pd = ptr::null_mut();
        }
    }
}

/// One `riomap`ped buffer.
pub(crate) struct IoMapping {
    pub addr: *mut c_void,
    pub len: usize,
    pub mr: *mut ibv_mr,
    /// The peer's iomap entry it was published in (PROT_WRITE).
    pub index: Option<u16>,
}

impl IoMapping {
    /// Deregister (before the PD goes).
    pub fn release(&mut self) {
        if !self.mr.is_null() {
            // SAFETY: our MR, deregistered once.
            unsafe { ibv_dereg_mr(self.mr) };
            self.mr = std::ptr::null_mut();
        }
    }
}
