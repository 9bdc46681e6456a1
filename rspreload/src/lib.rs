//! `librspreload.so`: run an unmodified TCP program over rsockets.
//! Preloaded (`LD_PRELOAD`, or `roce run --rsockets -- CMD`), it
//! interposes the C library's socket calls: the program's TCP sockets
//! become rsockets of whichever `librdmacm.so.1` the dynamic linker finds
//! first (the roce-emu drop-in's under `roce run`), everything else stays
//! the kernel's. rdma-core ships a preload of the same name; this one is
//! written anew, for what that one (rdma-core 44, Debian 12's) misses:
//! `accept4` (Python, Perl, nc.openbsd accept with it), a `select` that
//! answers with the program's fds (socat), and sockets created with
//! `SOCK_CLOEXEC`/`SOCK_NONBLOCK` in the type (Python always adds
//! `SOCK_CLOEXEC`).
//!
//! # What becomes an rsocket
//! `socket(AF_INET or AF_INET6, SOCK_STREAM, 0 or IPPROTO_TCP)`, with or
//! without `SOCK_CLOEXEC` and `SOCK_NONBLOCK` (applied by this library:
//! close-on-exec to the program's fd, non-blocking with `rfcntl`), and
//! what `accept`/`accept4` return from such a listener. UDP, unix and raw
//! sockets stay kernel sockets (name resolution keeps working). If
//! `rsocket` fails, the socket is a kernel one; if `rconnect` fails for
//! anything but a connect under way (`EINPROGRESS`...) or the caller's
//! mistake, the socket becomes a kernel TCP socket under the same fd
//! number and connects over TCP, as rdma-core's preload does (so a
//! client reaches a peer that has no RDMA device or no rsocket listener;
//! a server that listens on an rsocket takes no kernel TCP connection).
//!
//! # The program's fd
//! The program sees a real fd: a placeholder (an unbound unix stream
//! socket, so `fstat` says socket and a call not interposed fails on it),
//! mapped in a lock-free table (`table`) to the rsocket's number. Every
//! interposed call looks its fd up (two atomic loads, none at all while
//! no rsocket exists); an fd not in the table goes to the C library's
//! function (`dlsym(RTLD_NEXT)`) unchanged.
//!
//! Interposed: `socket`, `bind`, `listen`, `accept`, `accept4`
//! (flags honoured), `connect`, `read`, `readv`, `recv`, `recvfrom`,
//! `recvmsg`, `write`, `writev`, `send`, `sendto`, `sendmsg`, `poll`,
//! `ppoll`, `select`, `pselect` (fd sets translated to `rpoll`; rsockets
//! and ordinary fds together; a signal mask is set around the wait, not
//! atomically), `shutdown`, `close`, `getpeername`, `getsockname`,
//! `setsockopt` (`SO_REUSEPORT` accepted and ignored on an rsocket),
//! `getsockopt` (`SO_DOMAIN`, `SO_PROTOCOL`, `SO_ACCEPTCONN` answered
//! here), `fcntl`/`fcntl64` (`F_GETFL`/`F_SETFL` to the rsocket,
//! `F_GETFD`/`F_SETFD` to the fd, `F_DUPFD`), `ioctl` (`FIONBIO`),
//! `dup`, `dup2`, `dup3` (several fds for one rsocket, closed with the
//! last), `sendfile`/`sendfile64` (read from the file, sent on the
//! rsocket). `fcntl` and `ioctl` only on x86-64 and AArch64 Linux (see
//! `calls` for why their variadic argument is sound there).
//!
//! # Not covered
//! * epoll: an rsocket's fd added to an epoll set never becomes ready
//!   (the placeholder is not the connection). Programs that wait with
//!   epoll (Python's `selectors.DefaultSelector`, asyncio, most servers
//!   built on libevent/libuv) do not work on rsockets.
//! * fork: rsockets are not shared with a child. In the child every fd
//!   that stood for an rsocket is stale: calls on it fail with EBADF,
//!   `close` closes the placeholder only (the parent's connection is
//!   untouched). A forking server that hands the accepted connection to
//!   its child does not work; `fork` + `exec` of another program does.
//! * UDP and the other kinds of socket: the kernel's.
//! * `close_range`, `splice`, the stdio of `fdopen`ed sockets (the C
//!   library reads and writes the fd from inside, past this library),
//!   out-of-band data, `SIGIO`.
//!
//! `ROCE_EMU_DEBUG` set: one line on stderr per rsocket made, accepted,
//! closed, or connect fallen back to TCP.
#![allow(unsafe_code)]
// the C functions' contracts are the C library's
#![allow(clippy::missing_safety_doc)]
// the exported functions (`calls`) are left out of the unit tests' harness
// (it would interpose its own socket calls); what only they use is unused
// there
#![cfg_attr(test, allow(dead_code))]

#[cfg(not(test))]
mod calls;
mod sym;
pub mod table;
pub mod translate;

use libc::c_int;

/// The calling thread's errno.
pub(crate) fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno location.
    unsafe { *libc::__errno_location() = e };
}

/// One line on stderr when `ROCE_EMU_DEBUG` is set.
pub(crate) fn diag(msg: &str) {
    use std::io::Write;
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ON.get_or_init(|| std::env::var_os("ROCE_EMU_DEBUG").is_some()) {
        let keep = errno();
        let _ = writeln!(std::io::stderr(), "rspreload[{}]: {msg}", std::process::id());
        set_errno(keep);
    }
}
