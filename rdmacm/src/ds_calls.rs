//! The rsocket calls on a datagram rsocket (rsocket.c's `SOCK_DGRAM`
//! branches): the C entry points in `exports`, `opts` and `poll` come
//! here when the number is a datagram rsocket's.

use crate::ds::{self, Ds, DsHandle};
use crate::table::lock;
use crate::SLEEP_CAP_MS;
use libc::{c_int, c_void, sockaddr, socklen_t};
use std::net::SocketAddr;
use std::sync::MutexGuard;

/// Sleep until the UDP socket or a CQ has news (at most `ms`), the lock
/// released meanwhile.
fn sleep_on<'a>(h: &'a DsHandle, mut g: MutexGuard<'a, Ds>, ms: i32) -> MutexGuard<'a, Ds> {
    let fds = g.arm();
    if g.progress() {
        return g;
    }
    drop(g);
    let mut set: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: our array of pollfds.
    unsafe { libc::poll(set.as_mut_ptr(), set.len() as libc::nfds_t, ms.clamp(0, SLEEP_CAP_MS)) };
    lock(h)
}

pub(crate) fn bind(h: &DsHandle, addr: *const sockaddr, len: socklen_t) -> Result<c_int, i32> {
    let mut g = lock(h);
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    g.init_ep();
    // SAFETY: our socket; the caller's address of `len` bytes.
    if unsafe { libc::bind(g.fd, addr, len) } != 0 {
        return Err(crate::errno().max(1));
    }
    Ok(0)
}

pub(crate) fn connect(h: &DsHandle, addr: *const sockaddr, len: socklen_t) -> Result<c_int, i32> {
    lock(h).connect(addr, len).map(|()| 0)
}

/// `rsendto` (a destination) or `rsend` (the connected one).
pub(crate) fn send(
    h: &DsHandle,
    data: &[u8],
    flags: c_int,
    dst: Option<SocketAddr>,
) -> Result<usize, i32> {
    let mut g = lock(h);
    match dst {
        Some(d) => g.set_dest(d)?,
        None if !g.connected() => return Err(libc::EDESTADDRREQ),
        None => {}
    }
    let nonblock = g.nonblocking(flags);
    loop {
        match g.send_to_conn(data, flags) {
            Err(libc::EAGAIN) => {
                if g.progress() {
                    continue;
                }
                if nonblock {
                    return Err(libc::EAGAIN);
                }
                g = sleep_on(h, g, SLEEP_CAP_MS);
            }
            r => return r,
        }
    }
}

/// `rrecvfrom`: one datagram, truncated to `len`; its sender into
/// `addr` (`ds_set_src`: `*addrlen` bytes at most, set to the address's
/// length when shorter).
pub(crate) fn recv(
    h: &DsHandle,
    buf: *mut u8,
    len: usize,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> Result<usize, i32> {
    let mut g = lock(h);
    if !g.is_ready() {
        // neither bound nor connected nor sent from (`ds_recvfrom`)
        return Err(libc::EINVAL);
    }
    let nonblock = g.nonblocking(flags);
    let (from, data) = loop {
        g.progress();
        if let Some(d) = g.pop(flags & libc::MSG_PEEK != 0) {
            break d;
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        g = sleep_on(h, g, SLEEP_CAP_MS);
    };
    drop(g);
    let n = data.len().min(len);
    if n > 0 {
        // SAFETY: the caller's buffer of `len` >= n bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
    }
    if !addr.is_null() && !addrlen.is_null() {
        let (ss, full) = crate::addr::c_addr(from);
        // SAFETY: the caller's length and buffer of that many bytes.
        unsafe {
            let k = (*addrlen).min(full) as usize;
            std::ptr::copy_nonoverlapping(&ss as *const _ as *const u8, addr as *mut u8, k);
            *addrlen = k as socklen_t;
        }
    }
    Ok(n)
}

pub(crate) fn close(s: c_int) -> bool {
    match ds::remove(s) {
        Some(h) => {
            lock(&h).destroy();
            true
        }
        None => false,
    }
}

/// `rpoll`'s view of a datagram rsocket.
pub(crate) fn revents(h: &DsHandle, events: libc::c_short) -> libc::c_short {
    let mut g = lock(h);
    g.progress();
    let mut r = 0;
    if g.readable() {
        r |= libc::POLLIN;
    }
    if g.writable() {
        r |= libc::POLLOUT;
    }
    r & events
}

/// The fds `rpoll` sleeps on for it; `None` when it has news already.
pub(crate) fn poll_fds(h: &DsHandle) -> Option<Vec<i32>> {
    let mut g = lock(h);
    let fds = g.arm();
    if g.progress() {
        return None;
    }
    Some(fds)
}

/// `rsetsockopt`: everything but `SOL_RDMA` goes to the UDP socket too;
/// the buffer sizes (doubled, as the kernel does) size the queues of QPs
/// made afterwards.
pub(crate) fn setsockopt(
    h: &DsHandle,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> Result<c_int, i32> {
    let mut g = lock(h);
    if level == crate::ffi::SOL_RDMA {
        return Err(libc::ENOTSUP);
    }
    // SAFETY: our socket; the caller's value.
    if unsafe { libc::setsockopt(g.fd, level, name, val, len) } != 0 {
        return Err(crate::errno().max(1));
    }
    if level == libc::SOL_SOCKET && !g.has_qps() && !val.is_null() && len >= 4 {
        // SAFETY: 4 readable bytes (checked).
        let v = unsafe { (val as *const u32).read_unaligned() };
        match name {
            libc::SO_RCVBUF => g.rbuf_size = v.saturating_mul(2),
            libc::SO_SNDBUF => {
                g.sbuf_size = v.saturating_mul(2).max(roce_rsocket::consts::SNDLOWAT * 2)
            }
            _ => {}
        }
    }
    Ok(0)
}

pub(crate) fn getsockopt(
    h: &DsHandle,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> Result<c_int, i32> {
    let g = lock(h);
    // SAFETY: our socket; the caller's buffer and length.
    if unsafe { libc::getsockopt(g.fd, level, name, val, len) } != 0 {
        return Err(crate::errno().max(1));
    }
    Ok(0)
}

pub(crate) fn fcntl(h: &DsHandle, cmd: c_int, arg: libc::c_long) -> Result<c_int, i32> {
    let mut g = lock(h);
    match cmd {
        libc::F_GETFL => Ok(g.fs_flags),
        libc::F_SETFL => {
            g.fs_flags = arg as c_int;
            Ok(0)
        }
        libc::F_GETFD => Ok(g.fd_flags),
        libc::F_SETFD => {
            g.fd_flags = arg as c_int;
            Ok(0)
        }
        _ => Err(libc::ENOTSUP),
    }
}

/// `rgetsockname` / `rgetpeername`: the UDP socket's.
pub(crate) fn name(
    h: &DsHandle,
    peer: bool,
    a: *mut sockaddr,
    l: *mut socklen_t,
) -> Result<c_int, i32> {
    let g = lock(h);
    if l.is_null() || a.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: our socket; the caller's buffer and length.
    let r = unsafe {
        if peer {
            libc::getpeername(g.fd, a, l)
        } else {
            libc::getsockname(g.fd, a, l)
        }
    };
    if r != 0 {
        return Err(crate::errno().max(1));
    }
    Ok(0)
}
