//! Socket addresses between C (`sockaddr_in`, `sockaddr_in6`) and Rust.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// `addr` as a C socket address and its length.
pub(crate) fn c_addr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in fits in the storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a sockaddr_in6 fits in the storage.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// A C socket address (of `len` bytes) as a Rust one.
///
/// # Safety
/// `a` points to `len` readable bytes.
pub(crate) unsafe fn from_c(
    a: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Result<SocketAddr, i32> {
    if a.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: all-zero bytes are a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: per the contract, into our storage.
    unsafe { std::ptr::copy_nonoverlapping(a as *const u8, &mut ss as *mut _ as *mut u8, n) };
    from_storage(&ss, n).ok_or(libc::EINVAL)
}

pub(crate) fn from_storage(ss: &libc::sockaddr_storage, len: usize) -> Option<SocketAddr> {
    match i32::from(ss.ss_family) {
        libc::AF_INET if len >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: a sockaddr_in's bytes.
            let s = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(s.sin_port))))
        }
        libc::AF_INET6 if len >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: a sockaddr_in6's bytes.
            let s = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = Ipv6Addr::from(s.sin6_addr.s6_addr);
            let port = u16::from_be(s.sin6_port);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, port, s.sin6_flowinfo, s.sin6_scope_id)))
        }
        _ => None,
    }
}
