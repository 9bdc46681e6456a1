//! `fork()` (issue 26, finding 5): a child process works on its own, as
//! with `ibv_fork_init()` on a kernel device: objects it creates work,
//! objects it inherited fail cleanly, and nothing it does disturbs the
//! parent.
//!
//! A forked child has one thread: the engine threads, stewards and
//! publishers of the parent's devices are not there, and a lock another
//! parent thread held at the moment of the fork stays held forever. So the
//! child never touches an inherited device:
//!
//! - `pthread_atfork` handlers (`crate::device::fork_install`) take this
//!   library's global locks before the fork (the CM's state, the open
//!   devices, the handle table, in the order the library nests them) and
//!   give them back after it, so the child finds them consistent and
//!   unlocked. They are the device list's; the CM, above it, registers its
//!   part with them (`crate::device::ForkHooks`) before it makes any state;
//! - in the child, every inherited object leaves the handle table (a slow
//!   verb on it answers EINVAL, [`crate::handles`]), every inherited
//!   device is forgotten (never dropped: its destructor would join threads
//!   that do not exist and re-steer the parent's group), and the CM starts
//!   empty; the fork **generation** ([`generation`]) moves on, and the fast
//!   paths (`ibv_post_*`, `ibv_poll_cq`, `ibv_req_notify_cq`, the `ibv_wr_*`
//!   and extended-poll calls) answer an object of an older generation with
//!   EIO (or a poll error) before they take any of its locks;
//! - the child closes its copies of the inherited devices' sockets (UDP
//!   bound to a device's address and port, AF_PACKET for raw devices) and of
//!   the lock files of the device registry: it never reads the parent's
//!   datagrams, and when the parent leaves a shared device its socket and
//!   slot really go (a copy held by the child would keep them in the group).
//!
//! The child may then open the device again: it joins the shared device as
//! a member of its own (docs/devices.md, "One device, many processes").
//!
//! This file is at the bottom of the crate (every object file checks the
//! generation): the generation counter and the child's closing of
//! inherited descriptors. The handlers, which need the device list and
//! the CM, are above it.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU32, Ordering};

static GEN: AtomicU32 = AtomicU32::new(0);

/// The fork generation of this process: 0 in a process that was not
/// forked from one using this library, one more in each forked child.
pub(crate) fn generation() -> u32 {
    GEN.load(Ordering::Relaxed)
}

/// Whether an object made in generation `gen` was inherited through a
/// fork (the fast paths' check: one relaxed load).
#[inline]
pub(crate) fn inherited(gen: u32) -> bool {
    gen != GEN.load(Ordering::Relaxed)
}

/// In a forked child (its first fork handler): the generation moves on,
/// so every object made before the fork is inherited.
pub(crate) fn next_generation() {
    GEN.fetch_add(1, Ordering::SeqCst);
}

/// Close the child's copies of the inherited devices' sockets and of the
/// device registry's lock files.
pub(crate) fn close_inherited(socks: &[(std::net::IpAddr, u16)], raw: bool) {
    let runtime = roce_host::publish::runtime_dir();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<RawFd> =
        dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect();
    for fd in fds {
        if fd <= 2 {
            continue;
        }
        let ours = match sock_of(fd) {
            Some(Sock::Inet(a)) => socks.contains(&(a.ip(), a.port())),
            Some(Sock::Packet) => raw,
            Some(Sock::Other) => false,
            None => std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .is_ok_and(|p| p.starts_with(&runtime)),
        };
        if ours {
            // SAFETY: closing an fd of this (single-threaded, just forked)
            // child that belongs to an inherited device or registry lock,
            // which nothing in the child uses again (those objects are
            // forgotten, never dropped, so nothing closes it twice).
            unsafe { libc::close(fd) };
        }
    }
}

enum Sock {
    Inet(std::net::SocketAddr),
    Packet,
    Other,
}

/// What socket `fd` is (None: not a socket).
fn sock_of(fd: RawFd) -> Option<Sock> {
    // SAFETY: getsockname into a sockaddr_storage of the size we pass.
    let (ss, len) = unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        if libc::getsockname(fd, (&mut ss as *mut libc::sockaddr_storage).cast(), &mut len) != 0 {
            return None;
        }
        (ss, len)
    };
    let _ = len;
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { *(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(Sock::Inet((ip, u16::from_be(a.sin_port)).into()))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { *(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(Sock::Inet((ip, u16::from_be(a.sin6_port)).into()))
        }
        libc::AF_PACKET => Some(Sock::Packet),
        _ => Some(Sock::Other),
    }
}
