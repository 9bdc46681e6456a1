//! A datagram rsocket's UD QP for one local address (rsocket.c's
//! `ds_create_qp`, `ds_init_bufs`, `ds_post_recv`, `ds_post_send`): an
//! `RDMA_PS_UDP` CM id bound to the address (the CM moves its QP to RTS
//! with `RDMA_UDP_QKEY`), a PD, a completion channel and one CQ, a
//! receive ring of `rq` slots (40-byte GRH, then [`SNDLOWAT`] bytes) and a
//! send ring of `sq` slots of [`SNDLOWAT`] bytes (header and payload).
//! Address handles to the peers reached through this QP are made here too
//! (`udp_svc_create_ah`: the destination resolved by the CM).

use crate::ep::Buf;
use crate::ffi::*;
use libc::{c_int, c_void};
use roce_rsocket::consts::{RECV_WR_ID, SNDLOWAT};
use roce_rsocket::dgram::{DsHeader, GRH_LEN};
use std::net::SocketAddr;
use std::ptr;

/// One receive slot: the GRH, then the datagram (header and payload).
const RSLOT: usize = GRH_LEN + SNDLOWAT as usize;
const SSLOT: usize = SNDLOWAT as usize;

pub(crate) struct DsQp {
    /// The address the datagrams from this QP say they come from.
    pub local: SocketAddr,
    pub id: *mut rdma_cm_id,
    pub pd: *mut ibv_pd,
    pub cc: *mut ibv_comp_channel,
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub qpn: u32,
    rbuf: Buf,
    sbuf: Buf,
    /// Send slots not in flight.
    pub free: Vec<u32>,
    pub sq_inline: u32,
    pub armed: bool,
}

/// What a completion was.
pub(crate) enum DsCompletion {
    /// A datagram: the sender's address as its header says, the payload.
    Recv(DsHeader, Vec<u8>),
    /// A send slot came back, or a receive that was refused (reposted).
    Other,
}

fn null_buf() -> Buf {
    Buf { ptr: ptr::null_mut(), len: 0, mr: ptr::null_mut() }
}

impl DsQp {
    /// The QP of `local` with `sq` send and `rq` receive slots.
    pub fn create(local: SocketAddr, sq: u16, rq: u16, inline: u16) -> Result<DsQp, i32> {
        let mut id = ptr::null_mut();
        // SAFETY: a synchronous id (NULL channel); `id` receives it.
        if unsafe { rdma_create_id(ptr::null_mut(), &mut id, ptr::null_mut(), RDMA_PS_UDP) } != 0 {
            return Err(crate::errno().max(1));
        }
        let mut q = DsQp {
            local,
            id,
            pd: ptr::null_mut(),
            cc: ptr::null_mut(),
            cq: ptr::null_mut(),
            qp: ptr::null_mut(),
            qpn: 0,
            rbuf: null_buf(),
            sbuf: null_buf(),
            free: Vec::new(),
            sq_inline: 0,
            armed: false,
        };
        match q.build(sq.max(1), rq.max(1), inline) {
            Ok(()) => Ok(q),
            Err(e) => {
                q.destroy();
                Err(e)
            }
        }
    }

    fn build(&mut self, sq: u16, rq: u16, inline: u16) -> Result<(), i32> {
        let fail = |p: bool| if p { Err(crate::errno().max(1)) } else { Ok(()) };
        let (ss, len) = crate::addr::c_addr(self.local);
        let _ = len;
        // SAFETY: our id; the address lives across the call.
        if unsafe { rdma_bind_addr(self.id, &ss as *const _ as *mut libc::sockaddr) } != 0 {
            // the UDP port may be the CM's to refuse: the address alone
            let mut any = self.local;
            any.set_port(0);
            let (ss, _) = crate::addr::c_addr(any);
            // SAFETY: as above.
            fail(unsafe { rdma_bind_addr(self.id, &ss as *const _ as *mut libc::sockaddr) } != 0)?;
        }
        // SAFETY: the id is bound (verbs set); each object is checked and
        // kept for `destroy`.
        unsafe {
            let verbs = (*self.id).verbs;
            fail(verbs.is_null())?;
            self.pd = ibv_alloc_pd(verbs);
            fail(self.pd.is_null())?;
            self.cc = ibv_create_comp_channel(verbs);
            fail(self.cc.is_null())?;
            crate::set_nonblock((*self.cc).fd, true);
            self.cq = ibv_create_cq(
                verbs,
                c_int::from(sq) + c_int::from(rq),
                ptr::null_mut(),
                self.cc,
                0,
            );
            fail(self.cq.is_null())?;
            let mut attr = ibv_qp_init_attr {
                qp_context: ptr::null_mut(),
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: ptr::null_mut(),
                cap: ibv_qp_cap {
                    max_send_wr: u32::from(sq),
                    max_recv_wr: u32::from(rq),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: u32::from(inline),
                },
                qp_type: IBV_QPT_UD,
                sq_sig_all: 1,
            };
            if rdma_create_qp(self.id, self.pd, &mut attr) != 0 {
                return Err(crate::errno().max(1));
            }
            self.qp = (*self.id).qp;
            self.qpn = (*self.qp).qp_num;
            self.sq_inline = attr.cap.max_inline_data;
        }
        self.rbuf = Buf::new(self.pd, usize::from(rq) * RSLOT, IBV_ACCESS_LOCAL_WRITE)?;
        self.sbuf = Buf::new(self.pd, usize::from(sq) * SSLOT, IBV_ACCESS_LOCAL_WRITE)?;
        self.free = (0..u32::from(sq)).rev().collect();
        for i in 0..u32::from(rq) {
            self.post_recv(i)?;
        }
        self.arm();
        Ok(())
    }

    fn post_recv(&self, slot: u32) -> Result<(), i32> {
        let off = slot as usize * RSLOT;
        if off + RSLOT > self.rbuf.len {
            return Err(libc::EINVAL);
        }
        let mut sge = ibv_sge {
            addr: self.rbuf.ptr as u64 + off as u64,
            length: RSLOT as u32,
            lkey: self.rbuf.lkey(),
        };
        let mut wr = ibv_recv_wr {
            wr_id: RECV_WR_ID | u64::from(slot),
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: our live QP; the request and its SGE live across the call.
        match unsafe { post_recv(self.qp, &mut wr) } {
            0 => Ok(()),
            e => Err(e.abs()),
        }
    }

    /// Send `hdr` + `data` to `qpn` through `ah` (`ds_post_send`); EAGAIN
    /// when every send slot is in flight.
    pub fn send(&mut self, ah: *mut ibv_ah, qpn: u32, hdr: &[u8], data: &[u8]) -> Result<(), i32> {
        let len = hdr.len() + data.len();
        if len > SSLOT {
            return Err(libc::EMSGSIZE);
        }
        let slot = self.free.pop().ok_or(libc::EAGAIN)?;
        let off = slot as usize * SSLOT;
        self.sbuf.write(off, hdr);
        self.sbuf.write(off + hdr.len(), data);
        let mut sge = ibv_sge {
            addr: self.sbuf.ptr as u64 + off as u64,
            length: len as u32,
            lkey: self.sbuf.lkey(),
        };
        let mut wr = ibv_send_wr {
            wr_id: u64::from(slot),
            next: ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_SEND,
            send_flags: if len as u32 <= self.sq_inline { IBV_SEND_INLINE } else { 0 },
            imm_data: 0,
            // the `ud` member of the union: ah, remote QPN, remote Q_Key
            remote_addr: ah as u64,
            rkey: qpn,
            _wr_rest: [RDMA_UDP_QKEY, 0, 0, 0, 0],
            _tail: [0; 7],
        };
        // SAFETY: our live QP; the request, its SGE and the AH live across
        // the call.
        match unsafe { post_send(self.qp, &mut wr) } {
            0 => Ok(()),
            e => {
                self.free.push(slot);
                Err(e.abs())
            }
        }
    }

    /// Take completions (at most 32); the datagrams among them.
    pub fn poll(&mut self, out: &mut Vec<DsCompletion>) -> usize {
        self.drain_events();
        let mut wc = [ibv_wc::default(); 32];
        // SAFETY: our live CQ.
        let n = unsafe { poll_cq(self.cq, &mut wc) }.max(0) as usize;
        for w in &wc[..n] {
            out.push(self.on_completion(w));
        }
        n
    }

    fn on_completion(&mut self, w: &ibv_wc) -> DsCompletion {
        let slot = (w.wr_id & 0xFFFF_FFFF) as u32;
        if w.wr_id & RECV_WR_ID == 0 {
            self.free.push(slot);
            return DsCompletion::Other;
        }
        let mut got = None;
        if w.status == IBV_WC_SUCCESS {
            let mut b = vec![0u8; SSLOT];
            self.rbuf.read(slot as usize * RSLOT + GRH_LEN, b.as_mut_ptr(), SSLOT);
            if let Ok((h, r)) = DsHeader::parse_recv(&b, w.byte_len) {
                got = Some(DsCompletion::Recv(h, b[r].to_vec()));
            }
        }
        let _ = self.post_recv(slot);
        got.unwrap_or(DsCompletion::Other)
    }

    /// An address handle to `dst` from this QP's address, the path
    /// resolved by the CM (`udp_svc_create_ah`).
    pub fn create_ah(&self, dst: SocketAddr) -> Result<*mut ibv_ah, i32> {
        let mut id = ptr::null_mut();
        // SAFETY: a synchronous id; `id` receives it.
        if unsafe { rdma_create_id(ptr::null_mut(), &mut id, ptr::null_mut(), RDMA_PS_UDP) } != 0 {
            return Err(crate::errno().max(1));
        }
        let r = self.resolve_ah(id, dst);
        // SAFETY: our id, destroyed once.
        unsafe { rdma_destroy_id(id) };
        r
    }

    fn resolve_ah(&self, id: *mut rdma_cm_id, dst: SocketAddr) -> Result<*mut ibv_ah, i32> {
        let mut src = self.local;
        src.set_port(0);
        let (mut s, _) = crate::addr::c_addr(src);
        let (mut d, _) = crate::addr::c_addr(dst);
        // SAFETY: our synchronous id; the addresses live across the calls;
        // the id's route fields are read after the route is resolved; the
        // AH is made in our PD.
        unsafe {
            let sp = &mut s as *mut _ as *mut libc::sockaddr;
            if rdma_resolve_addr(id, sp, &mut d as *mut _ as *mut libc::sockaddr, 2000) != 0
                || rdma_resolve_route(id, 2000) != 0
            {
                return Err(crate::errno().max(1));
            }
            let ib = (*id).ibaddr;
            let port = (*self.id).port_num.max(1);
            let mut attr = ibv_ah_attr {
                dgid: ib.dgid,
                sgid_index: self.sgid_index(port, &ib.sgid),
                hop_limit: 64,
                is_global: 1,
                port_num: port,
                ..Default::default()
            };
            let ah = ibv_create_ah(self.pd, &mut attr);
            if ah.is_null() {
                return Err(crate::errno().max(libc::ENOMEM));
            }
            Ok(ah)
        }
    }

    /// The index of `gid` in the port's table (`udp_svc_sgid_index`: the
    /// first 16, else 0).
    fn sgid_index(&self, port: u8, gid: &[u8; 16]) -> u8 {
        for i in 0..16u8 {
            let mut g = [0u8; 16];
            // SAFETY: our id's live context; `g` has 16 bytes.
            let r = unsafe { ibv_query_gid((*self.id).verbs, port, c_int::from(i), &mut g) };
            if r == 0 && &g == gid {
                return i;
            }
        }
        0
    }

    /// Ask for an event at the next completion.
    pub fn arm(&mut self) {
        if !self.armed && !self.cq.is_null() {
            // SAFETY: our live CQ.
            unsafe { req_notify_cq(self.cq) };
            self.armed = true;
        }
    }

    fn drain_events(&mut self) {
        if !self.armed {
            return; // no event can be waiting: save the read(2)
        }
        let (mut cq, mut ctx): (*mut ibv_cq, *mut c_void) = (ptr::null_mut(), ptr::null_mut());
        let mut n = 0;
        // SAFETY: our live, non-blocking channel.
        while unsafe { ibv_get_cq_event(self.cc, &mut cq, &mut ctx) } == 0 {
            n += 1;
            self.armed = false;
        }
        if n > 0 {
            // SAFETY: events of our CQ, taken above.
            unsafe { ibv_ack_cq_events(self.cq, n) };
        }
    }

    pub fn comp_fd(&self) -> c_int {
        // SAFETY: our live channel.
        unsafe { (*self.cc).fd }
    }

    /// Free everything (the AHs made in our PD are gone already).
    pub fn destroy(&mut self) {
        // SAFETY: each object ours, destroyed once, in reverse order.
        unsafe {
            if !self.qp.is_null() {
                rdma_destroy_qp(self.id);
                self.qp = ptr::null_mut();
            }
            self.sbuf.free();
            self.rbuf.free();
            if !self.cq.is_null() {
                self.drain_events();
            }
            crate::ep::free_cq_channel_pd(&mut self.cq, &mut self.cc, &mut self.pd);
            if !self.id.is_null() {
                rdma_destroy_id(self.id);
                self.id = ptr::null_mut();
            }
        }
    }
}
