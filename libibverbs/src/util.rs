//! Shared plumbing: errno, the panic guard, C strings.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Set the calling thread's `errno`.
pub(crate) fn set_errno(e: i32) {
    // SAFETY: __errno_location returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e }
}

/// Read the calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    // SAFETY: as in set_errno.
    unsafe { *libc::__errno_location() }
}

/// Run `f`, turning a panic into `on_panic` (a Rust panic must never unwind
/// into C). The panic message has already been printed by the panic hook.
pub(crate) fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// The failure of an entry point that returns an error number: `errno` is
/// set to it as well, and it is returned. rdma-core's verbs fail with the
/// errno of the kernel command behind them (so `errno` holds the same
/// number), and programs read either: `perror` after a failed
/// `ibv_modify_qp`, `ret = errno` after `rdma_create_qp`... Every entry
/// point of this library that returns an error number goes through here.
pub(crate) fn fail(e: i32) -> i32 {
    set_errno(e);
    e
}

/// [`guard`] for entry points returning an errno (0 on success; the error
/// number is also left in `errno`, see [`fail`]).
pub(crate) fn guard_rc(f: impl FnOnce() -> Result<(), i32>) -> i32 {
    guard(libc::EIO, || match f() {
        Ok(()) => 0,
        Err(e) => fail(e),
    })
}

/// [`guard`] for entry points that return an error number computed in
/// place (0 on success): a nonzero result is also left in `errno`.
pub(crate) fn guard_errno(f: impl FnOnce() -> i32) -> i32 {
    guard(libc::EIO, || match f() {
        0 => 0,
        e => fail(e),
    })
}

/// [`guard`] for entry points returning -1 with errno set on failure.
pub(crate) fn guard_neg(f: impl FnOnce() -> Result<i32, i32>) -> i32 {
    guard(-1, || match f() {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

/// [`guard`] for entry points returning a pointer (NULL with errno set on
/// failure).
pub(crate) fn guard_ptr<T>(f: impl FnOnce() -> Result<*mut T, i32>) -> *mut T {
    guard(std::ptr::null_mut(), || match f() {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    })
}

/// Copy `s` into a fixed C char array, NUL-terminated and truncated.
pub(crate) fn fill_cstr(dst: &mut [libc::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as libc::c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

/// A static NUL-terminated string as a C pointer.
pub(crate) fn cstr(s: &'static [u8]) -> *const libc::c_char {
    debug_assert_eq!(s.last(), Some(&0));
    s.as_ptr().cast()
}

/// Whether the debug environment variable asks for messages on stderr.
pub(crate) fn verbose() -> bool {
    static V: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *V.get_or_init(|| std::env::var("ROCE_EMU_VERBOSE").is_ok_and(|v| v != "0" && !v.is_empty()))
}

/// Print a diagnostic when `ROCE_EMU_VERBOSE` is set (errno returns alone
/// do not say why).
macro_rules! diag {
    ($($t:tt)*) => {
        if $crate::util::verbose() {
            eprintln!("roce-emu libibverbs: {}", format_args!($($t)*));
        }
    };
}
pub(crate) use diag;

/// The program's struct behind `p`; EINVAL for NULL.
///
/// # Safety
/// `p` is NULL or points to a `T` the program lets the call read.
pub(crate) unsafe fn arg_ref<'a, T>(p: *const T) -> Result<&'a T, i32> {
    // SAFETY: per the contract.
    unsafe { p.as_ref() }.ok_or(libc::EINVAL)
}

/// The program's struct behind `p`, to fill in; EINVAL for NULL.
///
/// # Safety
/// `p` is NULL or points to a `T` the program lets the call write.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T) -> Result<&'a mut T, i32> {
    // SAFETY: per the contract.
    unsafe { p.as_mut() }.ok_or(libc::EINVAL)
}
