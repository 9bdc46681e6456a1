//! The functions called: the C library's own (`dlsym(RTLD_NEXT)`, found
//! on first use) and the rsocket library's (`dlopen("librdmacm.so.1")`
//! when the program makes its first TCP socket: whichever librdmacm.so.1
//! the dynamic linker finds, the drop-in's first under `roce run`).

use libc::{c_int, c_long, c_ulong, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr};
use libc::{socklen_t, ssize_t};
use std::cell::Cell;
use std::ffi::CStr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// `dlsym(RTLD_NEXT, name)`, cached in `slot` (NULL: no such function).
pub fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Relaxed);
    if !p.is_null() {
        return p;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name may always be
    // called; callers check the result for NULL.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    slot.store(p, Ordering::Relaxed);
    p
}

/// Declares `real::NAME()`: the C library's `NAME` as a function pointer
/// of the given type, or None.
macro_rules! real_fns {
    ($($name:ident : $ty:ty;)*) => {
        /// The C library's functions (the next definitions after this
        /// library's).
        #[allow(non_upper_case_globals, dead_code)]
        pub mod real {
            use super::*;
            $(
                #[inline]
                pub fn $name() -> Option<$ty> {
                    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
                    let name = CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes());
                    let p = name.map_or(std::ptr::null_mut(), |n| next(&SLOT, n));
                    // SAFETY: `p` is the C library's function of this name,
                    // whose C prototype `$ty` repeats (a non-null data
                    // pointer from dlsym is a function's address).
                    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, $ty>(p) })
                }
            )*
        }
    };
}

real_fns! {
    socket: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    bind: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    listen: unsafe extern "C" fn(c_int, c_int) -> c_int;
    accept: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    accept4: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    connect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    read: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
    readv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    recv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    recvfrom: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    recvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
    write: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
    writev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    send: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    sendto: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    sendmsg: unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
    poll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int;
    ppoll: unsafe extern "C" fn(*mut pollfd, nfds_t, *const libc::timespec, *const libc::sigset_t) -> c_int;
    select: unsafe extern "C" fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int;
    pselect: unsafe extern "C" fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const libc::timespec, *const libc::sigset_t) -> c_int;
    shutdown: unsafe extern "C" fn(c_int, c_int) -> c_int;
    close: unsafe extern "C" fn(c_int) -> c_int;
    getpeername: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getsockname: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    setsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    getsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    fcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    fcntl64: unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    ioctl: unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;
    dup: unsafe extern "C" fn(c_int) -> c_int;
    dup2: unsafe extern "C" fn(c_int, c_int) -> c_int;
    dup3: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    sendfile: unsafe extern "C" fn(c_int, c_int, *mut libc::off_t, size_t) -> ssize_t;
    sendfile64: unsafe extern "C" fn(c_int, c_int, *mut libc::off64_t, size_t) -> ssize_t;
    pread64: unsafe extern "C" fn(c_int, *mut c_void, size_t, libc::off64_t) -> ssize_t;
    lseek64: unsafe extern "C" fn(c_int, libc::off64_t, c_int) -> libc::off64_t;
}

/// Declares [`Rs`], the rsocket library's calls, and `find`, which looks
/// them all up in a loaded library.
macro_rules! rs_fns {
    ($($field:ident = $sym:literal : $ty:ty;)*) => {
        /// The rsocket calls of the loaded library.
        pub struct Rs {
            $(pub $field: $ty,)*
        }

        /// Every call in the library `h` (None if one is missing).
        fn find(h: *mut c_void) -> Option<Rs> {
            Some(Rs {
                $($field: {
                    let p = lookup(h, $sym)?;
                    // SAFETY: the library's function of this name, whose
                    // prototype in <rdma/rsocket.h> the type repeats.
                    unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
                },)*
            })
        }
    };
}

rs_fns! {
    socket = c"rsocket": unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
    bind = c"rbind": unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    listen = c"rlisten": unsafe extern "C" fn(c_int, c_int) -> c_int;
    accept = c"raccept": unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    connect = c"rconnect": unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
    recv = c"rrecv": unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    recvfrom = c"rrecvfrom": unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    recvmsg = c"rrecvmsg": unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
    readv = c"rreadv": unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    send = c"rsend": unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    sendmsg = c"rsendmsg": unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t;
    writev = c"rwritev": unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
    poll = c"rpoll": unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int;
    shutdown = c"rshutdown": unsafe extern "C" fn(c_int, c_int) -> c_int;
    close = c"rclose": unsafe extern "C" fn(c_int) -> c_int;
    getpeername = c"rgetpeername": unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getsockname = c"rgetsockname": unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    setsockopt = c"rsetsockopt": unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    getsockopt = c"rgetsockopt": unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    // `rfcntl(s, cmd, ...)`, called with an integer third argument
    fcntl = c"rfcntl": unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
}

/// `dlsym(h, name)`, or None (said with ROCE_EMU_DEBUG).
fn lookup(h: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    // SAFETY: a handle from dlopen, a NUL-terminated name.
    let p = unsafe { libc::dlsym(h, name.as_ptr()) };
    if p.is_null() {
        crate::diag(&format!("{} has no {}", RDMACM.to_string_lossy(), name.to_string_lossy()));
    }
    (!p.is_null()).then_some(p)
}

/// The library's name (the first on the dynamic linker's path).
pub const RDMACM: &CStr = c"librdmacm.so.1";

static RS: OnceLock<Option<Rs>> = OnceLock::new();

thread_local! {
    /// How deep this thread is in a call into the rsocket library (or in
    /// loading it): a socket made there is the library's own and stays
    /// the kernel's.
    static INSIDE: Cell<u32> = const { Cell::new(0) };
}

/// Whether this thread is inside the rsocket library.
pub fn inside() -> bool {
    INSIDE.with(|d| d.get() > 0)
}

/// Run `f` (a call into the rsocket library) marked as inside it.
#[inline]
pub fn call<T>(f: impl FnOnce() -> T) -> T {
    INSIDE.with(|d| d.set(d.get() + 1));
    let r = f();
    INSIDE.with(|d| d.set(d.get().saturating_sub(1)));
    r
}

/// The rsocket library, loaded on the first call (None: it could not be
/// loaded, or lacks a function: sockets stay the kernel's).
pub fn rs() -> Option<&'static Rs> {
    RS.get_or_init(|| call(load)).as_ref()
}

/// The rsocket library if it is loaded already (the calls on fds mapped
/// to rsockets, which exist only once it is).
#[inline]
pub fn rs_loaded() -> Option<&'static Rs> {
    RS.get().and_then(Option::as_ref)
}

fn load() -> Option<Rs> {
    // SAFETY: dlopen of a library by name; its constructors run (a socket
    // they make stays the kernel's: we are `inside`).
    let h = unsafe { libc::dlopen(RDMACM.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        crate::diag(&format!(
            "cannot load {}: sockets stay kernel sockets",
            RDMACM.to_string_lossy()
        ));
        return None;
    }
    find(h)
}

/// `rfcntl` with an integer argument.
///
/// # Safety
/// `s` is any int; the library checks it.
pub unsafe fn rfcntl(lib: &Rs, s: c_int, cmd: c_int, arg: c_long) -> c_int {
    // SAFETY: rfcntl's integer-argument commands read one long.
    call(|| unsafe { (lib.fcntl)(s, cmd, arg) })
}
