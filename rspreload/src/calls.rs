//! The interposed C functions. Each looks its fd up in the table: an
//! ordinary fd goes to the C library's function unchanged; an fd that
//! stands for an rsocket goes to the rsocket library's function with the
//! rsocket's number; a stale one (inherited over `fork`) is EBADF.
//!
//! Every body runs under [`guarded`]: a panic becomes -1 with EIO, never
//! an unwind into C.

use crate::sym::{self, real, Rs};
use crate::table::{self, Entry};
use crate::translate;
use crate::{diag, errno, set_errno};
use libc::{c_int, c_long, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t};
use libc::{ssize_t, SOL_SOCKET};

/// -1 (of the function's return type) with errno `e`.
fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// `f`'s value; a panic is -1 with EIO.
fn guarded<T: From<i8>>(f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| fail(libc::EIO))
}

/// The C library's `$name` called with the arguments, or ENOSYS without it.
macro_rules! real_call {
    ($name:ident ( $($a:expr),* )) => {
        match real::$name() {
            // SAFETY: the C library's function of this name, with the
            // caller's arguments (its contract is the caller's).
            Some(f) => unsafe { f($($a),*) },
            None => fail(libc::ENOSYS),
        }
    };
}

/// Where a call on an fd goes.
enum Route {
    Kernel,
    Rs(Entry, &'static Rs),
    /// Inherited over fork (or the library vanished): EBADF.
    Stale,
}

#[inline]
fn route(fd: c_int) -> Route {
    match table::get(fd) {
        None => Route::Kernel,
        Some(e) if e.stale => Route::Stale,
        Some(e) => match sym::rs_loaded() {
            Some(lib) => Route::Rs(e, lib),
            None => Route::Stale,
        },
    }
}

/// A call on one fd whose rsocket function takes the same arguments
/// (the rsocket's number first).
macro_rules! pass {
    ($name:ident / $rname:ident ( $fd:ident $(, $a:expr)* )) => {
        guarded(|| match route($fd) {
            Route::Kernel => real_call!($name($fd $(, $a)*)),
            Route::Stale => fail(libc::EBADF),
            Route::Rs(e, lib) => {
                // SAFETY: the caller's arguments with the rsocket's number
                // for its fd: the rsocket function's contract is the C
                // function's.
                sym::call(|| unsafe { (lib.$rname)(e.rs $(, $a)*) })
            }
        })
    };
}

/// `rclose` of `rs` once no fd stands for it any more.
fn drop_ref(e: Entry) {
    if e.stale || !table::release(e.rs) {
        return;
    }
    if let Some(lib) = sym::rs_loaded() {
        diag(&format!("rsocket {}: rclose", e.rs));
        let keep = errno();
        // SAFETY: an rsocket of ours that no fd stands for any more.
        sym::call(|| unsafe { (lib.close)(e.rs) });
        set_errno(keep);
    }
}

/// `new` (a fresh fd from dup) stands for `e`'s rsocket too; what `new`
/// stood for before is let go.
fn share(new: c_int, e: Entry) {
    match table::map(new, e) {
        Ok(Some(prev)) => drop_ref(prev),
        Ok(None) => {}
        // beyond the table: the dup works on the placeholder only
        Err(()) => diag(&format!("fd {new}: beyond the table, not an rsocket")),
    }
}

/// Registers the fork handler once (the first rsocket).
fn at_fork_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    extern "C" fn child() {
        table::forget_all_after_fork();
    }
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only touches our table.
        unsafe { libc::pthread_atfork(None, None, Some(child)) };
    });
}

/// A placeholder fd (an unbound unix socket: `fstat` says socket, a call
/// we do not interpose fails on it rather than misbehaving) standing for
/// rsocket `r`. On failure `r` is closed and -1 returned.
fn adopt(lib: &Rs, r: c_int, domain: c_int, cloexec: bool, how: &str) -> c_int {
    let ty = libc::SOCK_STREAM | if cloexec { libc::SOCK_CLOEXEC } else { 0 };
    let fd: c_int = real_call!(socket(libc::AF_UNIX, ty, 0));
    let err = if fd < 0 {
        errno()
    } else if !matches!(table::map(fd, Entry::new(r, domain)), Ok(None)) {
        let _: c_int = real_call!(close(fd));
        libc::EMFILE
    } else {
        diag(&format!("fd {fd} is rsocket {r} ({how})"));
        return fd;
    };
    // SAFETY: our rsocket, which no fd stands for.
    sym::call(|| unsafe { (lib.close)(r) });
    fail(err)
}

fn set_nonblock(lib: &Rs, rs: c_int, on: bool) -> c_int {
    // SAFETY: integer commands on our rsocket.
    let fl = unsafe { sym::rfcntl(lib, rs, libc::F_GETFL, 0) };
    if fl < 0 {
        return fl;
    }
    let fl = if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
    // SAFETY: as above.
    unsafe { sym::rfcntl(lib, rs, libc::F_SETFL, c_long::from(fl)) }
}

/// # Safety
/// The C library's contract for `socket`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    guarded(|| {
        let Some((cloexec, nonblock)) = translate::tcp_socket(domain, ty, protocol) else {
            return real_call!(socket(domain, ty, protocol));
        };
        if sym::inside() {
            return real_call!(socket(domain, ty, protocol));
        }
        let Some(lib) = sym::rs() else { return real_call!(socket(domain, ty, protocol)) };
        at_fork_once();
        // SAFETY: rsocket with a plain SOCK_STREAM (the flags are ours to
        // apply: rdma-core's rsocket refuses them).
        let r = sym::call(|| unsafe { (lib.socket)(domain, libc::SOCK_STREAM, protocol) });
        if r < 0 {
            diag(&format!("rsocket failed (errno {}): a kernel socket", errno()));
            return real_call!(socket(domain, ty, protocol));
        }
        if nonblock && set_nonblock(lib, r, true) < 0 {
            let e = errno();
            // SAFETY: our fresh rsocket.
            sym::call(|| unsafe { (lib.close)(r) });
            return fail(e);
        }
        adopt(lib, r, domain, cloexec, "socket")
    })
}

/// # Safety
/// The C library's contract for `bind`.
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    pass!(bind / bind(fd, addr, len))
}

/// # Safety
/// The C library's contract for `listen`.
#[no_mangle]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(listen(fd, backlog)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => {
            // SAFETY: our rsocket.
            let r = sym::call(|| unsafe { (lib.listen)(e.rs, backlog) });
            if r == 0 {
                table::update(fd, Entry { listening: true, ..e });
            }
            r
        }
    })
}

fn accept_rs(e: Entry, lib: &Rs, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    let Some((cloexec, nonblock)) = translate::accept_flags(flags) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the caller's address buffer (or NULL) and length.
    let r = sym::call(|| unsafe { (lib.accept)(e.rs, addr, len) });
    if r < 0 {
        return r;
    }
    if nonblock && set_nonblock(lib, r, true) < 0 {
        let err = errno();
        // SAFETY: our fresh rsocket.
        sym::call(|| unsafe { (lib.close)(r) });
        return fail(err);
    }
    adopt(lib, r, c_int::from(e.domain), cloexec, "accept")
}

/// # Safety
/// The C library's contract for `accept`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(accept(fd, addr, len)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => accept_rs(e, lib, addr, len, 0),
    })
}

/// # Safety
/// The C library's contract for `accept4`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(accept4(fd, addr, len, flags)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => accept_rs(e, lib, addr, len, flags),
    })
}

/// `fd` becomes a kernel TCP socket (the rsocket could not connect):
/// a new socket with the rsocket's non-blocking mode, `SO_REUSEADDR` and
/// `TCP_NODELAY`, moved onto `fd` by `dup3` (the program keeps its fd
/// number and its close-on-exec flag), then the rsocket let go. False
/// (errno set) if that failed; `fd` is then still the rsocket's.
fn to_kernel(fd: c_int, e: Entry, lib: &Rs, family: c_int) -> bool {
    let k: c_int = real_call!(socket(family, libc::SOCK_STREAM, 0));
    if k < 0 {
        return false;
    }
    // SAFETY: integer commands on our rsocket.
    let fl = unsafe { sym::rfcntl(lib, e.rs, libc::F_GETFL, 0) };
    if fl > 0 && fl & libc::O_NONBLOCK != 0 {
        let _: c_int = real_call!(fcntl(k, libc::F_SETFL, c_long::from(libc::O_NONBLOCK)));
    }
    for (level, name) in [(SOL_SOCKET, libc::SO_REUSEADDR), (libc::IPPROTO_TCP, libc::TCP_NODELAY)]
    {
        let mut v: c_int = 0;
        let mut l = std::mem::size_of::<c_int>() as socklen_t;
        let (vp, lp) = (&mut v as *mut c_int as *mut c_void, &mut l as *mut socklen_t);
        // SAFETY: an int and its length, ours.
        let got = sym::call(|| unsafe { (lib.getsockopt)(e.rs, level, name, vp, lp) });
        if got == 0 && v != 0 {
            let vp = &v as *const c_int as *const c_void;
            let _: c_int = real_call!(setsockopt(k, level, name, vp, l));
        }
    }
    let fd_flags: c_int = real_call!(fcntl(fd, libc::F_GETFD, 0 as c_long));
    let cloexec =
        if fd_flags > 0 && fd_flags & libc::FD_CLOEXEC != 0 { libc::O_CLOEXEC } else { 0 };
    let moved: c_int = real_call!(dup3(k, fd, cloexec));
    let keep = errno();
    let _: c_int = real_call!(close(k));
    if moved < 0 {
        set_errno(keep);
        return false;
    }
    if let Some(old) = table::take(fd) {
        drop_ref(old);
    }
    true
}

/// How long a non-blocking `connect` waits for the rsocket connection to
/// fail before it returns EINPROGRESS (then it stays an rsocket).
const EARLY_FAILURE_MS: c_int = 200;

/// The error of a non-blocking rsocket connect that failed within
/// [`EARLY_FAILURE_MS`] (read with `SO_ERROR`), or None: connected, or
/// still under way.
fn early_failure(rs: c_int, lib: &Rs) -> Option<c_int> {
    let mut p = pollfd { fd: rs, events: libc::POLLOUT, revents: 0 };
    // SAFETY: one pollfd of ours.
    let n = sym::call(|| unsafe { (lib.poll)(&mut p, 1, EARLY_FAILURE_MS) });
    if n <= 0 || p.revents & (libc::POLLERR | libc::POLLHUP) == 0 {
        return None;
    }
    let mut v: c_int = 0;
    let mut l = std::mem::size_of::<c_int>() as socklen_t;
    let (vp, lp) = (&mut v as *mut c_int as *mut c_void, &mut l as *mut socklen_t);
    // SAFETY: an int and its length, ours.
    sym::call(|| unsafe { (lib.getsockopt)(rs, SOL_SOCKET, libc::SO_ERROR, vp, lp) });
    Some(if v == 0 { libc::ECONNREFUSED } else { v })
}

/// # Safety
/// The C library's contract for `connect`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(connect(fd, addr, len)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => {
            // SAFETY: the caller's address of `len` bytes.
            let r = sym::call(|| unsafe { (lib.connect)(e.rs, addr, len) });
            let mut err = errno();
            if r == 0 {
                return 0;
            }
            if err == libc::EINPROGRESS {
                // non-blocking: a refusal comes back within a few ms (no
                // rsocket listens there); wait that long for it, so that
                // curl and nc, which connect non-blocking, fall back too
                match early_failure(e.rs, lib) {
                    Some(e2) => err = e2,
                    None => return fail(libc::EINPROGRESS),
                }
            } else if translate::connect_keeps_rsocket(err) {
                return r;
            }
            // not over RDMA (no device for the address, nobody listening
            // on an rsocket there...): over kernel TCP, as rdma-core's
            // preload does
            let family = if addr.is_null() || (len as usize) < std::mem::size_of::<u16>() {
                c_int::from(e.domain)
            } else {
                // SAFETY: the caller's address, at least its family field.
                c_int::from(unsafe { (*addr).sa_family })
            };
            if !to_kernel(fd, e, lib, family) {
                return fail(err);
            }
            diag(&format!("fd {fd}: rconnect failed (errno {err}): connecting over kernel TCP"));
            real_call!(connect(fd, addr, len))
        }
    })
}

/// # Safety
/// The C library's contract for `read`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(read(fd, buf, n)),
        Route::Stale => fail(libc::EBADF),
        // SAFETY: the caller's buffer of `n` bytes.
        Route::Rs(e, lib) => sym::call(|| unsafe { (lib.recv)(e.rs, buf, n, 0) }),
    })
}

/// # Safety
/// The C library's contract for `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(write(fd, buf, n)),
        Route::Stale => fail(libc::EBADF),
        // SAFETY: the caller's buffer of `n` bytes.
        Route::Rs(e, lib) => sym::call(|| unsafe { (lib.send)(e.rs, buf, n, 0) }),
    })
}

/// # Safety
/// The C library's contract for `readv`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    pass!(readv / readv(fd, iov, n))
}

/// # Safety
/// The C library's contract for `writev`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    pass!(writev / writev(fd, iov, n))
}

/// # Safety
/// The C library's contract for `recv`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    pass!(recv / recv(fd, buf, n, flags))
}

/// # Safety
/// The C library's contract for `send`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    pass!(send / send(fd, buf, n, flags))
}

/// # Safety
/// The C library's contract for `recvfrom`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    pass!(recvfrom / recvfrom(fd, buf, n, flags, addr, len))
}

/// `sendto` on a connected TCP socket ignores the address (Linux's TCP
/// does); so does this.
///
/// # Safety
/// The C library's contract for `sendto`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(sendto(fd, buf, n, flags, addr, len)),
        Route::Stale => fail(libc::EBADF),
        // SAFETY: the caller's buffer of `n` bytes.
        Route::Rs(e, lib) => sym::call(|| unsafe { (lib.send)(e.rs, buf, n, flags) }),
    })
}

/// # Safety
/// The C library's contract for `recvmsg`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    pass!(recvmsg / recvmsg(fd, msg, flags))
}

/// # Safety
/// The C library's contract for `sendmsg`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    pass!(sendmsg / sendmsg(fd, msg, flags))
}

/// # Safety
/// The C library's contract for `shutdown`.
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    pass!(shutdown / shutdown(fd, how))
}

/// # Safety
/// The C library's contract for `getpeername`.
#[no_mangle]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    pass!(getpeername / getpeername(fd, addr, len))
}

/// # Safety
/// The C library's contract for `getsockname`.
#[no_mangle]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    pass!(getsockname / getsockname(fd, addr, len))
}

/// `SO_REUSEPORT` on an rsocket is accepted and does nothing (rsockets
/// share no port; nc.openbsd's listener sets it and stops if it fails).
///
/// # Safety
/// The C library's contract for `setsockopt`.
#[no_mangle]
pub unsafe extern "C" fn setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *const c_void,
    len: socklen_t,
) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(setsockopt(fd, level, name, val, len)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => {
            // SAFETY: the caller's option value of `len` bytes.
            let r = sym::call(|| unsafe { (lib.setsockopt)(e.rs, level, name, val, len) });
            let unknown = matches!(errno(), libc::ENOTSUP | libc::ENOPROTOOPT);
            if r < 0 && unknown && level == SOL_SOCKET && name == libc::SO_REUSEPORT {
                diag(&format!("fd {fd}: SO_REUSEPORT ignored on an rsocket"));
                return 0;
            }
            r
        }
    })
}

/// `SO_DOMAIN`, `SO_PROTOCOL` and `SO_ACCEPTCONN` of an rsocket are
/// answered here (the rsocket library does not know them).
///
/// # Safety
/// The C library's contract for `getsockopt`.
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(getsockopt(fd, level, name, val, len)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => {
            let ours = match (level, name) {
                (SOL_SOCKET, libc::SO_DOMAIN) => Some(c_int::from(e.domain)),
                (SOL_SOCKET, libc::SO_PROTOCOL) => Some(libc::IPPROTO_TCP),
                (SOL_SOCKET, libc::SO_ACCEPTCONN) => Some(c_int::from(e.listening)),
                _ => None,
            };
            let Some(v) = ours else {
                // SAFETY: the caller's buffer and length.
                return sym::call(|| unsafe { (lib.getsockopt)(e.rs, level, name, val, len) });
            };
            if val.is_null() || len.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: the caller's length, not NULL.
            if (unsafe { *len } as usize) < std::mem::size_of::<c_int>() {
                return fail(libc::EINVAL);
            }
            // SAFETY: the caller's buffer of at least an int (checked), and
            // its length.
            unsafe {
                (val as *mut c_int).write_unaligned(v);
                *len = std::mem::size_of::<c_int>() as socklen_t;
            }
            0
        }
    })
}

/// # Safety
/// The C library's contract for `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    guarded(|| {
        if table::get(fd).is_none() {
            return real_call!(close(fd));
        }
        // unmapped before the placeholder closes: its number, once free,
        // may be any file's
        let e = table::take(fd);
        let r: c_int = real_call!(close(fd));
        let keep = errno();
        if let Some(e) = e {
            drop_ref(e);
        }
        set_errno(keep);
        r
    })
}

/// The caller's pollfds with each rsocket's fd replaced by its number,
/// or None if none of them is an rsocket's.
fn to_rpoll(user: &[pollfd]) -> Option<(&'static Rs, Vec<pollfd>)> {
    if !user.iter().any(|p| table::get(p.fd).is_some()) {
        return None;
    }
    let lib = sym::rs_loaded()?;
    let v =
        user.iter().map(|p| pollfd { fd: rs_or_fd(p.fd), events: p.events, revents: 0 }).collect();
    Some((lib, v))
}

/// The rsocket's number for `fd`, or `fd` itself (an ordinary fd, or a
/// stale placeholder: polled as the kernel's).
fn rs_or_fd(fd: c_int) -> c_int {
    table::get(fd).filter(|e| !e.stale).map_or(fd, |e| e.rs)
}

/// `rpoll` of `v` with `mask` as the signal mask meanwhile (ppoll's and
/// pselect's, set around the call: not atomically as the kernel does).
fn rpoll_masked(lib: &Rs, v: &mut [pollfd], ms: c_int, mask: *const libc::sigset_t) -> c_int {
    // SAFETY: sigset_t is plain bits; all zeroes is a valid (empty) set.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: the caller's signal set (checked not NULL), ours for the old.
    let mut set = || unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, &mut old) };
    let masked = !mask.is_null() && set() == 0;
    // SAFETY: our array of pollfds.
    let r = sym::call(|| unsafe { (lib.poll)(v.as_mut_ptr(), v.len() as nfds_t, ms) });
    if masked {
        let keep = errno();
        // SAFETY: the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        set_errno(keep);
    }
    r
}

/// The caller's pollfds as a slice, if there are any and not absurdly many.
///
/// # Safety
/// `fds` points to `n` pollfds (poll's contract).
unsafe fn user_fds<'a>(fds: *mut pollfd, n: nfds_t) -> Option<&'a mut [pollfd]> {
    if fds.is_null() || n == 0 || n as usize > table::MAX_FD || !table::any() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { std::slice::from_raw_parts_mut(fds, n as usize) })
}

/// # Safety
/// The C library's contract for `poll`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    guarded(|| {
        // SAFETY: poll's contract.
        let Some(user) = (unsafe { user_fds(fds, n) }) else {
            return real_call!(poll(fds, n, timeout));
        };
        let Some((lib, mut v)) = to_rpoll(user) else { return real_call!(poll(fds, n, timeout)) };
        let r = rpoll_masked(lib, &mut v, timeout, std::ptr::null());
        for (u, p) in user.iter_mut().zip(&v) {
            u.revents = p.revents;
        }
        r
    })
}

/// # Safety
/// The C library's contract for `ppoll`.
#[no_mangle]
pub unsafe extern "C" fn ppoll(
    fds: *mut pollfd,
    n: nfds_t,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    guarded(|| {
        // SAFETY: ppoll's contract.
        let Some(user) = (unsafe { user_fds(fds, n) }) else {
            return real_call!(ppoll(fds, n, t, mask));
        };
        let Some((lib, mut v)) = to_rpoll(user) else { return real_call!(ppoll(fds, n, t, mask)) };
        // SAFETY: the caller's timespec or NULL.
        let ms = translate::timespec_ms(unsafe { t.as_ref() });
        let r = rpoll_masked(lib, &mut v, ms, mask);
        for (u, p) in user.iter_mut().zip(&v) {
            u.revents = p.revents;
        }
        r
    })
}

/// `select`/`pselect` through `rpoll` if a set holds an rsocket's fd:
/// None if none does (the caller uses the C library's).
fn select_rs(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    ms: c_int,
    mask: *const libc::sigset_t,
) -> Option<c_int> {
    if !table::any() {
        return None;
    }
    // copies: the caller may pass one set twice
    // SAFETY: the caller's sets, each valid or NULL (select's contract).
    let copy = |s: *mut libc::fd_set| unsafe { s.as_ref().copied() };
    let (mut r, mut w, mut x) = (copy(rd), copy(wr), copy(ex));
    let (user, mut fds) =
        translate::sets_to_poll(nfds, r.as_ref(), w.as_ref(), x.as_ref(), rs_or_fd);
    if !user.iter().any(|&fd| table::get(fd).is_some()) {
        return None;
    }
    let lib = sym::rs_loaded()?;
    let n = rpoll_masked(lib, &mut fds, ms, mask);
    if n < 0 {
        return Some(n);
    }
    let count = translate::poll_to_sets(&user, &fds, r.as_mut(), w.as_mut(), x.as_mut());
    for (dst, src) in [(rd, r), (wr, w), (ex, x)] {
        if let (false, Some(s)) = (dst.is_null(), src) {
            // SAFETY: the caller's set, not NULL.
            unsafe { dst.write(s) };
        }
    }
    Some(count)
}

/// # Safety
/// The C library's contract for `select`.
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's timeval or NULL.
        let ms = translate::timeval_ms(unsafe { t.as_ref() });
        match select_rs(nfds, rd, wr, ex, ms, std::ptr::null()) {
            Some(n) => {
                if n == 0 && !t.is_null() {
                    // SAFETY: the caller's timeval: none left (Linux
                    // updates it to the time not slept)
                    unsafe { t.write(libc::timeval { tv_sec: 0, tv_usec: 0 }) };
                }
                n
            }
            None => real_call!(select(nfds, rd, wr, ex, t)),
        }
    })
}

/// # Safety
/// The C library's contract for `pselect`.
#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    t: *const libc::timespec,
    mask: *const libc::sigset_t,
) -> c_int {
    guarded(|| {
        // SAFETY: the caller's timespec or NULL.
        let ms = translate::timespec_ms(unsafe { t.as_ref() });
        match select_rs(nfds, rd, wr, ex, ms, mask) {
            Some(n) => n,
            None => real_call!(pselect(nfds, rd, wr, ex, t, mask)),
        }
    })
}

/// # Safety
/// The C library's contract for `dup`.
#[no_mangle]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    guarded(|| {
        let e = table::get(old);
        let r: c_int = real_call!(dup(old));
        if let (true, Some(e)) = (r >= 0, e) {
            share(r, e);
        }
        r
    })
}

/// After `dup2`/`dup3` made `new` a copy of `old` (which stood for `e`).
fn after_dup2(new: c_int, e: Option<Entry>) {
    match e {
        Some(e) => share(new, e),
        None => {
            if let Some(prev) = table::take(new) {
                drop_ref(prev);
            }
        }
    }
}

/// # Safety
/// The C library's contract for `dup2`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    guarded(|| {
        let e = table::get(old);
        if old == new || (e.is_none() && table::get(new).is_none()) {
            return real_call!(dup2(old, new));
        }
        let r: c_int = real_call!(dup2(old, new));
        if r >= 0 {
            after_dup2(new, e);
        }
        r
    })
}

/// # Safety
/// The C library's contract for `dup3`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    guarded(|| {
        let e = table::get(old);
        if old == new || (e.is_none() && table::get(new).is_none()) {
            return real_call!(dup3(old, new, flags));
        }
        let r: c_int = real_call!(dup3(old, new, flags));
        if r >= 0 {
            after_dup2(new, e);
        }
        r
    })
}

/// `sendfile` to an rsocket: up to 1 MiB read from `input` (at `*off`,
/// which is advanced, or at its file position) and sent; what was read
/// but not sent is given back to the file position.
fn sendfile_rs(e: Entry, lib: &Rs, input: c_int, off: *mut i64, count: size_t) -> ssize_t {
    let mut buf = vec![0u8; count.min(1 << 20)];
    let p = buf.as_mut_ptr() as *mut c_void;
    // SAFETY: the caller's offset or NULL.
    let at = unsafe { off.as_ref().copied() };
    let n: ssize_t = match at {
        Some(at) => real_call!(pread64(input, p, buf.len(), at)),
        None => real_call!(read(input, p, buf.len())),
    };
    if n <= 0 {
        return n;
    }
    // SAFETY: `n` bytes of our buffer.
    let w = sym::call(|| unsafe { (lib.send)(e.rs, p, n as size_t, 0) });
    let keep = errno();
    let sent = w.max(0);
    match at {
        // SAFETY: the caller's offset, not NULL.
        Some(at) => unsafe { off.write(at + sent as i64) },
        None if sent < n => {
            let _: i64 = real_call!(lseek64(input, (sent - n) as i64, libc::SEEK_CUR));
        }
        None => {}
    }
    set_errno(keep);
    w
}

/// # Safety
/// The C library's contract for `sendfile`.
#[no_mangle]
pub unsafe extern "C" fn sendfile(
    out: c_int,
    input: c_int,
    off: *mut libc::off_t,
    count: size_t,
) -> ssize_t {
    guarded(|| match route(out) {
        Route::Kernel => real_call!(sendfile(out, input, off, count)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => sendfile_rs(e, lib, input, off, count),
    })
}

/// # Safety
/// The C library's contract for `sendfile64`.
#[no_mangle]
pub unsafe extern "C" fn sendfile64(
    out: c_int,
    input: c_int,
    off: *mut libc::off64_t,
    count: size_t,
) -> ssize_t {
    guarded(|| match route(out) {
        Route::Kernel => real_call!(sendfile64(out, input, off, count)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => sendfile_rs(e, lib, input, off, count),
    })
}

// `fcntl` and `ioctl` are variadic in C. They are defined here with the
// optional third argument as a fixed integer (`c_long`, an untyped
// pointer for ioctl): on the x86-64 System V and AArch64 Linux ABIs the
// first variadic integer or pointer argument travels in the same register
// as a fixed third one would (rdx / x2; the caller's count of vector
// registers in al is read only by a variadic callee), every fcntl and
// ioctl argument is an integer or a pointer (never a float nor a struct
// by value), and a caller that passed no third argument leaves a value
// there that only the commands taking one read. The argument is passed on
// unchanged to the C library's variadic function. On other architectures
// these two are not interposed (the crate's documentation says so).

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn fcntl_rs(fd: c_int, e: Entry, lib: &Rs, cmd: c_int, arg: c_long, big: bool) -> c_int {
    let on_placeholder = |cmd: c_int, arg: c_long| -> c_int {
        if big {
            real_call!(fcntl64(fd, cmd, arg))
        } else {
            real_call!(fcntl(fd, cmd, arg))
        }
    };
    match cmd {
        libc::F_GETFL => {
            // SAFETY: an integer command on our rsocket.
            let fl = unsafe { sym::rfcntl(lib, e.rs, libc::F_GETFL, 0) };
            if fl < 0 {
                fl
            } else {
                fl | libc::O_RDWR
            }
        }
        libc::F_SETFL => set_nonblock(lib, e.rs, arg as c_int & libc::O_NONBLOCK != 0),
        // close-on-exec is the program's fd's, the placeholder's
        libc::F_GETFD | libc::F_SETFD => on_placeholder(cmd, arg),
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let r = on_placeholder(cmd, arg);
            if r >= 0 {
                share(r, e);
            }
            r
        }
        // SAFETY: rfcntl answers other commands (ENOTSUP, mostly).
        _ => unsafe { sym::rfcntl(lib, e.rs, cmd, arg) },
    }
}

/// # Safety
/// The C library's contract for `fcntl` (see above for the argument).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(fcntl(fd, cmd, arg)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => fcntl_rs(fd, e, lib, cmd, arg, false),
    })
}

/// # Safety
/// The C library's contract for `fcntl64` (see above for the argument).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(fcntl64(fd, cmd, arg)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) => fcntl_rs(fd, e, lib, cmd, arg, true),
    })
}

/// `FIONBIO` on an rsocket sets its non-blocking mode (Python's sockets
/// with a timeout use it); other requests on an rsocket are ENOTTY.
///
/// # Safety
/// The C library's contract for `ioctl` (see above for the argument).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: libc::c_ulong, arg: *mut c_void) -> c_int {
    guarded(|| match route(fd) {
        Route::Kernel => real_call!(ioctl(fd, req, arg)),
        Route::Stale => fail(libc::EBADF),
        Route::Rs(e, lib) if req == libc::FIONBIO => {
            if arg.is_null() {
                return fail(libc::EFAULT);
            }
            // SAFETY: FIONBIO's argument is the caller's int.
            let on = unsafe { (arg as *const c_int).read_unaligned() } != 0;
            match set_nonblock(lib, e.rs, on) {
                r if r < 0 => r,
                _ => 0,
            }
        }
        Route::Rs(..) => fail(libc::ENOTTY),
    })
}
