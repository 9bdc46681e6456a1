//! A safe Rust face on the rsocket calls, for Rust programs and tests that
//! link the drop-in's rlib: [`RSocket`] owns one rsocket number and
//! closes it when dropped; every call is the C function of the same name.

use crate::addr::c_addr;
use std::io;
use std::net::SocketAddr;

/// One rsocket (stream or datagram).
#[derive(Debug)]
pub struct RSocket(i32);

fn check(r: i32) -> io::Result<i32> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl RSocket {
    /// `rsocket(family of addr, SOCK_STREAM, 0)`.
    pub fn stream(ipv6: bool) -> io::Result<RSocket> {
        let af = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: a plain call.
        check(unsafe { crate::rsocket(af, libc::SOCK_STREAM, 0) }).map(RSocket)
    }

    /// `rsocket(AF_INET or AF_INET6, SOCK_DGRAM, 0)`.
    pub fn dgram(ipv6: bool) -> io::Result<RSocket> {
        let af = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
        // SAFETY: a plain call.
        check(unsafe { crate::rsocket(af, libc::SOCK_DGRAM, 0) }).map(RSocket)
    }

    /// `rsendto`: the payload bytes taken.
    pub fn send_to(&self, buf: &[u8], addr: SocketAddr) -> io::Result<usize> {
        let (ss, len) = c_addr(addr);
        // SAFETY: our rsocket, buffer and address.
        let n = unsafe {
            crate::rsendto(
                self.0,
                buf.as_ptr().cast(),
                buf.len(),
                0,
                &ss as *const _ as *const libc::sockaddr,
                len,
            )
        };
        check(n.max(-1) as i32).map(|_| n as usize)
    }

    /// `rrecvfrom`: the bytes read and the sender.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        // SAFETY: all-zero bytes are a valid storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        // SAFETY: our rsocket, buffer, storage and its length.
        let n = unsafe {
            crate::rrecvfrom(
                self.0,
                buf.as_mut_ptr().cast(),
                buf.len(),
                0,
                &mut ss as *mut _ as *mut libc::sockaddr,
                &mut len,
            )
        };
        check(n.max(-1) as i32)?;
        let from = crate::addr::from_storage(&ss, len as usize)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EAFNOSUPPORT))?;
        Ok((n as usize, from))
    }

    /// `rfcntl(F_SETFL, O_NONBLOCK or 0)`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        let fl = if on { libc::O_NONBLOCK } else { 0 };
        // SAFETY: our rsocket.
        check(unsafe { crate::rfcntl(self.0, libc::F_SETFL, fl.into()) }).map(drop)
    }

    /// The rsocket's number (for `rpoll` and the other C calls).
    pub fn fd(&self) -> i32 {
        self.0
    }

    pub fn bind(&self, addr: SocketAddr) -> io::Result<()> {
        let (ss, len) = c_addr(addr);
        // SAFETY: our rsocket; the address lives across the call.
        check(unsafe { crate::rbind(self.0, &ss as *const _ as *const libc::sockaddr, len) })
            .map(drop)
    }

    pub fn listen(&self, backlog: i32) -> io::Result<()> {
        // SAFETY: our rsocket.
        check(unsafe { crate::rlisten(self.0, backlog) }).map(drop)
    }

    pub fn accept(&self) -> io::Result<RSocket> {
        // SAFETY: our rsocket; no address asked for.
        check(unsafe { crate::raccept(self.0, std::ptr::null_mut(), std::ptr::null_mut()) })
            .map(RSocket)
    }

    pub fn connect(&self, addr: SocketAddr) -> io::Result<()> {
        let (ss, len) = c_addr(addr);
        // SAFETY: our rsocket; the address lives across the call.
        check(unsafe { crate::rconnect(self.0, &ss as *const _ as *const libc::sockaddr, len) })
            .map(drop)
    }

    /// `rsend`: the bytes taken.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        // SAFETY: our rsocket and buffer.
        let n = unsafe { crate::rsend(self.0, buf.as_ptr().cast(), buf.len(), 0) };
        check(n.max(-1) as i32).map(|_| n as usize)
    }

    /// `rrecv`: the bytes read, 0 at end of file.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: our rsocket and buffer.
        let n = unsafe { crate::rrecv(self.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        check(n.max(-1) as i32).map(|_| n as usize)
    }

    /// `rshutdown(SHUT_WR)`.
    pub fn shutdown_write(&self) -> io::Result<()> {
        // SAFETY: our rsocket.
        check(unsafe { crate::rshutdown(self.0, libc::SHUT_WR) }).map(drop)
    }
}

impl Drop for RSocket {
    fn drop(&mut self) {
        // SAFETY: our rsocket, closed once.
        unsafe { crate::rclose(self.0) };
    }
}
