//! Datagram rsockets (`SOCK_DGRAM` over UD), as rsocket.c's `ds_*` and
//! `udp_svc_*` functions make them, on the wire the same:
//!
//! * the rsocket's number is a real UDP socket of the same family; `rbind`
//!   and `rconnect` bind and connect it;
//! * each destination is mapped to the UD QP of the local address that
//!   reaches it (one QP per local address, [`DsQp`]) and, once the peer's
//!   QPN is known, an address handle made from the CM's resolution of it;
//! * the first datagrams to a destination go on the UDP socket with a
//!   [`DsUdpHeader`] (op DATA, our QPN); the receiver answers with op CTRL
//!   (its QPN), delivers the payload and makes its own address handle;
//!   later datagrams are UD SENDs (Q_Key `RDMA_UDP_QKEY`) of a
//!   [`DsHeader`] (the sender's address) and the payload.
//!
//! rdma-core runs a service thread for the UDP socket and forwards a DATA
//! payload through a UD send to its own QP; here the calls on the rsocket
//! (`rrecvfrom`, `rsendto`, `rpoll`...) read the UDP socket themselves and
//! queue the payload directly: the same datagrams on the wire between the
//! two sides, one loopback hop fewer.

use crate::ds_qp::{DsCompletion, DsQp};
use crate::ffi::*;
use crate::table::lock;
use roce_rsocket::consts::{DEF_INLINE, DEF_MEM, DEF_RQSIZE, DEF_SQSIZE, DEF_WMEM, SNDLOWAT};
use roce_rsocket::dgram::{DsAddr, DsHeader, DsUdpAddr, DsUdpHeader, UdpOp};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, LazyLock, Mutex};

pub(crate) type DsHandle = Arc<Mutex<Ds>>;

static DS: LazyLock<Mutex<HashMap<i32, DsHandle>>> = LazyLock::new(Default::default);

pub(crate) fn lookup(fd: i32) -> Option<DsHandle> {
    lock(&DS).get(&fd).cloned()
}

pub(crate) fn remove(fd: i32) -> Option<DsHandle> {
    lock(&DS).remove(&fd)
}

/// A peer: the QP that reaches it, and its address handle and QPN once
/// its UDP header told them.
struct Dest {
    addr: SocketAddr,
    qp: usize,
    ah: *mut ibv_ah,
    qpn: u32,
}

pub(crate) struct Ds {
    pub fd: i32,
    pub family: i32,
    pub fs_flags: i32,
    pub fd_flags: i32,
    pub sbuf_size: u32,
    pub rbuf_size: u32,
    pub sq_size: u16,
    pub rq_size: u16,
    pub sq_inline: u16,
    /// `ds_init_ep` done: the queue sizes are fixed.
    ready: bool,
    qps: Vec<DsQp>,
    dests: Vec<Dest>,
    /// The destination of `rsend` (`rconnect`), or of the last `rsendto`.
    conn: Option<usize>,
    connected: bool,
    /// Datagrams received, not yet read: the sender and the payload.
    rx: VecDeque<(SocketAddr, Vec<u8>)>,
}

// SAFETY: the raw pointers are objects of the drop-in, usable from any
// thread; a `Ds` is reached only under its mutex.
unsafe impl Send for Ds {}

/// `rsocket(domain, SOCK_DGRAM, ...)`: the UDP socket is the number.
pub(crate) fn new_dgram(domain: i32, fs_flags: i32, fd_flags: i32) -> Result<i32, i32> {
    // SAFETY: a plain call.
    let fd = unsafe { libc::socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(crate::errno().max(1));
    }
    let ds = Ds {
        fd,
        family: domain,
        fs_flags,
        fd_flags,
        sbuf_size: DEF_WMEM,
        rbuf_size: DEF_MEM,
        sq_size: DEF_SQSIZE,
        rq_size: DEF_RQSIZE,
        sq_inline: DEF_INLINE,
        ready: false,
        qps: Vec::new(),
        dests: Vec::new(),
        conn: None,
        connected: false,
        rx: VecDeque::new(),
    };
    lock(&DS).insert(fd, Arc::new(Mutex::new(ds)));
    Ok(fd)
}

/// The name of a socket (`getsockname`, or `getpeername` when `peer`).
fn sock_name(fd: i32, peer: bool) -> Result<SocketAddr, i32> {
    // SAFETY: all-zero bytes are a valid storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = &mut ss as *mut _ as *mut libc::sockaddr;
    // SAFETY: our socket; the storage and its length.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    if r != 0 {
        return Err(crate::errno().max(1));
    }
    crate::addr::from_storage(&ss, len as usize).ok_or(libc::EAFNOSUPPORT)
}

fn header_of(a: SocketAddr) -> DsHeader {
    match a {
        SocketAddr::V4(v) => DsHeader { port: v.port(), addr: DsAddr::V4(v.ip().octets()) },
        SocketAddr::V6(v) => DsHeader {
            port: v.port(),
            // `sin6_flowinfo`'s bytes as they are (network order), as
            // rdma-core copies them
            addr: DsAddr::V6 { flowinfo: u32::from_be(v.flowinfo()), addr: v.ip().octets() },
        },
    }
}

fn addr_of(h: &DsHeader) -> SocketAddr {
    match h.addr {
        DsAddr::V4(a) => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(a), h.port)),
        DsAddr::V6 { flowinfo, addr } => {
            SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(addr), h.port, flowinfo.to_be(), 0))
        }
    }
}

impl Ds {
    pub fn nonblocking(&self, flags: i32) -> bool {
        self.fs_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    /// `ds_init_ep`: the queue sizes from the buffer sizes
    /// (`ds_set_qp_size`), fixed from now on.
    pub fn init_ep(&mut self) {
        if self.ready {
            return;
        }
        let per = SNDLOWAT;
        self.sq_size = self.sq_size.min(roce_rsocket::consts::QP_MAX_SIZE);
        self.rq_size = self.rq_size.min(roce_rsocket::consts::QP_MAX_SIZE);
        if u32::from(self.rq_size) > self.rbuf_size / per {
            self.rq_size = (self.rbuf_size / per) as u16;
        } else {
            self.rbuf_size = u32::from(self.rq_size) * per;
        }
        if u32::from(self.sq_size) > self.sbuf_size / per {
            self.sq_size = (self.sbuf_size / per) as u16;
        } else {
            self.sbuf_size = u32::from(self.sq_size) * per;
        }
        self.sq_size = self.sq_size.max(1);
        self.rq_size = self.rq_size.max(1);
        self.ready = true;
    }

    /// `rconnect`: connect the UDP socket and find the destination.
    pub fn connect(&mut self, a: *const libc::sockaddr, len: libc::socklen_t) -> Result<(), i32> {
        self.init_ep();
        // SAFETY: the caller's address of `len` bytes.
        let dst = unsafe { crate::addr::from_c(a, len) }?;
        // SAFETY: our socket; the caller's address.
        if unsafe { libc::connect(self.fd, a, len) } != 0 {
            return Err(crate::errno().max(1));
        }
        self.conn = Some(self.get_dest(dst)?);
        self.connected = true;
        Ok(())
    }

    /// The local address datagrams to `dst` leave from
    /// (`ds_get_src_addr`): the socket's, or, bound to any address, the
    /// one the kernel routes `dst` from, with the socket's port.
    fn src_addr(&self, dst: SocketAddr) -> Result<SocketAddr, i32> {
        let mut me = sock_name(self.fd, false)?;
        if me.port() == 0 {
            // never bound: bind now, as the first sendto would
            let any: SocketAddr = match self.family {
                libc::AF_INET6 => (Ipv6Addr::UNSPECIFIED, 0).into(),
                _ => (Ipv4Addr::UNSPECIFIED, 0).into(),
            };
            let (ss, len) = crate::addr::c_addr(any);
            // SAFETY: our socket; our address.
            unsafe { libc::bind(self.fd, &ss as *const _ as *const libc::sockaddr, len) };
            me = sock_name(self.fd, false)?;
        }
        if !me.ip().is_unspecified() {
            return Ok(me);
        }
        let fam = if dst.is_ipv6() { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: a plain call; the socket is closed below.
        let s = unsafe { libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if s < 0 {
            return Err(crate::errno().max(1));
        }
        let (ss, len) = crate::addr::c_addr(dst);
        // SAFETY: our temporary socket and address.
        let r = unsafe { libc::connect(s, &ss as *const _ as *const libc::sockaddr, len) };
        let found = if r == 0 { sock_name(s, false) } else { Err(crate::errno().max(1)) };
        // SAFETY: ours, closed once.
        unsafe { libc::close(s) };
        let mut src = found?;
        src.set_port(me.port());
        Ok(src)
    }

    /// `ds_get_dest`: the destination of `dst`, made (with the QP of its
    /// local address) when new.
    fn get_dest(&mut self, dst: SocketAddr) -> Result<usize, i32> {
        if let Some(i) = self.dests.iter().position(|d| d.addr == dst) {
            return Ok(i);
        }
        let src = self.src_addr(dst)?;
        let qp = match self.qps.iter().position(|q| q.local == src) {
            Some(q) => q,
            None => {
                self.init_ep();
                let q = DsQp::create(src, self.sq_size, self.rq_size, self.sq_inline)?;
                crate::diag(&format!("rsocket {}: UD QP {:#x} for {src}", self.fd, q.qpn));
                self.qps.push(q);
                self.qps.len() - 1
            }
        };
        self.dests.push(Dest { addr: dst, qp, ah: std::ptr::null_mut(), qpn: 0 });
        Ok(self.dests.len() - 1)
    }

    /// `ds_sendv_udp`: `data` on the UDP socket to destination `d`, after
    /// the UDP header with op `op`; the payload bytes sent.
    fn send_udp(&self, d: usize, op: UdpOp, data: &[u8], flags: i32) -> Result<usize, i32> {
        let dest = &self.dests[d];
        let qp = &self.qps[dest.qp];
        let addr = match qp.local.ip() {
            IpAddr::V4(a) => DsUdpAddr::V4(a.octets()),
            IpAddr::V6(a) => DsUdpAddr::V6(a.octets()),
        };
        let hdr = DsUdpHeader { op, qpn: qp.qpn, addr }.emit();
        let mut iov = [
            libc::iovec { iov_base: hdr.as_ptr() as *mut _, iov_len: hdr.len() },
            libc::iovec { iov_base: data.as_ptr() as *mut _, iov_len: data.len() },
        ];
        let (mut ss, len) = crate::addr::c_addr(dest.addr);
        // SAFETY: all-zero bytes are a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = &mut ss as *mut _ as *mut libc::c_void;
        msg.msg_namelen = len;
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = 2;
        // SAFETY: our socket; the message's buffers live across the call.
        let n = unsafe { libc::sendmsg(self.fd, &msg, flags & libc::MSG_DONTWAIT) };
        if n < 0 {
            return Err(crate::errno().max(1));
        }
        Ok((n as usize).saturating_sub(hdr.len()))
    }

    /// Read the UDP socket dry (`udp_svc_process_rs`).
    fn drain_udp(&mut self) -> bool {
        let mut any = false;
        let mut buf = vec![0u8; SNDLOWAT as usize];
        loop {
            // SAFETY: all-zero bytes are a valid storage.
            let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut sl = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: our socket, buffer and storage.
            let n = unsafe {
                libc::recvfrom(
                    self.fd,
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    &mut ss as *mut _ as *mut libc::sockaddr,
                    &mut sl,
                )
            };
            if n < 0 {
                return any;
            }
            any = true;
            let Some(from) = crate::addr::from_storage(&ss, sl as usize) else { continue };
            let Ok((h, plen)) = DsUdpHeader::parse(&buf[..n as usize], from.is_ipv6()) else {
                continue;
            };
            let Ok(d) = self.get_dest(from) else { continue };
            if h.op == UdpOp::Data {
                let _ = self.send_udp(d, UdpOp::Ctrl, &[], 0);
            }
            if self.dests[d].ah.is_null() || self.dests[d].qpn != h.qpn {
                self.make_ah(d, h.qpn);
            }
            if h.op == UdpOp::Data {
                let at = n as usize - plen;
                self.deliver(from, buf[at..n as usize].to_vec());
            }
        }
    }

    fn deliver(&mut self, from: SocketAddr, data: Vec<u8>) {
        // as many as the receive queue holds; the rest are dropped
        if self.rx.len() < usize::from(self.rq_size.max(1)) {
            self.rx.push_back((from, data));
        }
    }

    /// `udp_svc_create_ah`: a new address handle for destination `d`.
    fn make_ah(&mut self, d: usize, qpn: u32) {
        let dest = &mut self.dests[d];
        let qp = &self.qps[dest.qp];
        if !dest.ah.is_null() {
            // SAFETY: our AH, destroyed once.
            unsafe { ibv_destroy_ah(dest.ah) };
            dest.ah = std::ptr::null_mut();
        }
        match qp.create_ah(dest.addr) {
            Ok(ah) => {
                dest.ah = ah;
                dest.qpn = qpn;
                crate::diag(&format!("rsocket {}: {} is QPN {qpn:#x}", self.fd, dest.addr));
            }
            Err(e) => {
                crate::diag(&format!("rsocket {}: no path to {}: errno {e}", self.fd, dest.addr))
            }
        }
    }

    /// Take what the UDP socket and the CQs have; `true` when anything.
    pub fn progress(&mut self) -> bool {
        let mut any = self.drain_udp();
        let mut done = Vec::new();
        for q in &mut self.qps {
            while q.poll(&mut done) > 0 {
                any = true;
            }
        }
        for c in done {
            if let DsCompletion::Recv(h, data) = c {
                self.deliver(addr_of(&h), data);
            }
        }
        any
    }

    /// `dsend` to the current destination: over UDP until its QPN is
    /// known, then a UD SEND. `Err(EAGAIN)` when no send slot is free.
    pub fn send_to_conn(&mut self, data: &[u8], flags: i32) -> Result<usize, i32> {
        let d = self.conn.ok_or(libc::EDESTADDRREQ)?;
        let qpi = self.dests[d].qp;
        let hdr = header_of(self.qps[qpi].local).emit();
        if hdr.len() + data.len() > SNDLOWAT as usize {
            return Err(libc::EMSGSIZE);
        }
        if self.dests[d].ah.is_null() {
            return self.send_udp(d, UdpOp::Data, data, flags);
        }
        let (ah, qpn) = (self.dests[d].ah, self.dests[d].qpn);
        self.qps[qpi].send(ah, qpn, &hdr, data)?;
        Ok(data.len())
    }

    /// Make `dst` the current destination (`rsendto`).
    pub fn set_dest(&mut self, dst: SocketAddr) -> Result<(), i32> {
        self.init_ep();
        if self.conn.is_none_or(|c| self.dests[c].addr != dst) {
            self.conn = Some(self.get_dest(dst)?);
        }
        Ok(())
    }

    pub fn readable(&self) -> bool {
        !self.rx.is_empty()
    }

    /// `ds_can_send`: a send slot is free (or there is no QP yet).
    pub fn writable(&self) -> bool {
        self.qps.is_empty() || self.qps.iter().any(|q| !q.free.is_empty())
    }

    pub fn pop(&mut self, peek: bool) -> Option<(SocketAddr, Vec<u8>)> {
        if peek {
            self.rx.front().cloned()
        } else {
            self.rx.pop_front()
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready
    }

    pub fn has_qps(&self) -> bool {
        !self.qps.is_empty()
    }

    pub fn connected(&self) -> bool {
        self.connected
    }

    /// The fds to sleep on: the UDP socket and each QP's completion
    /// channel, armed.
    pub fn arm(&mut self) -> Vec<i32> {
        let mut v = vec![self.fd];
        for q in &mut self.qps {
            q.arm();
            v.push(q.comp_fd());
        }
        v
    }

    /// `rclose`: free everything, close the UDP socket.
    pub fn destroy(&mut self) {
        for d in self.dests.drain(..) {
            if !d.ah.is_null() {
                // SAFETY: our AH, destroyed once, before its PD.
                unsafe { ibv_destroy_ah(d.ah) };
            }
        }
        for q in &mut self.qps {
            q.destroy();
        }
        self.qps.clear();
        if self.fd >= 0 {
            // SAFETY: our socket, closed once.
            unsafe { libc::close(self.fd) };
            self.fd = -1;
        }
    }
}
