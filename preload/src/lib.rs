//! `libroce_preload.so`: what `roce run -- CMD` preloads into CMD and every
//! process it starts, so that software which looks for RDMA devices
//! *outside* libibverbs finds the host's roce-emu devices as it finds a
//! kernel device.
//!
//! UCX `stat()`s `/dev/infiniband/uverbsN` and reads
//! `/sys/class/infiniband/<dev>/ports/1/gid_attrs/...`; Open MPI's openib BTL
//! `stat()`s `/sys/class/infiniband`; pyverbs looks for the device's netdev
//! there. None of it exists without a kernel RDMA stack, and none of it can
//! be reached from our libibverbs (a library that `dlopen`s libibverbs, like
//! UCX's transport modules, does its own file I/O). So this library
//! interposes the C library's path calls (`open`, `fopen`, `stat`, `access`,
//! `opendir`, `readlink`, ... and their 64-bit, `*at` and fortified forms) and
//! rewrites exactly three path prefixes, whole components only:
//!
//! ```text
//! /sys/class/infiniband        -> $ROCE_EMU_SYSFS/sys/class/infiniband
//! /sys/class/infiniband_verbs  -> $ROCE_EMU_SYSFS/sys/class/infiniband_verbs
//! /dev/infiniband              -> $ROCE_EMU_SYSFS/dev/infiniband
//! ```
//!
//! `$ROCE_EMU_SYSFS` is a tree `roce run` writes from the device
//! configuration (`roce_host::sysfs`). Every other path, and every call when
//! the variable is unset, goes to the C library untouched. Relative paths
//! and `*at` calls with a relative path are not rewritten (nobody reaches
//! these directories that way).
//!
//! The real functions are found with `dlsym(RTLD_NEXT, name)` on first use.

#![allow(unsafe_code)]

use libc::{c_char, c_int, c_void, mode_t, size_t, FILE};
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// The variable naming the tree.
pub const ENV_SYSFS: &str = "ROCE_EMU_SYSFS";

/// The prefixes rewritten, each a whole path or followed by `/`.
pub const PREFIXES: [&str; 3] =
    ["/sys/class/infiniband_verbs", "/sys/class/infiniband", "/dev/infiniband"];

/// The tree's root, read once (`None`: unset or empty, nothing rewritten).
fn root() -> Option<&'static [u8]> {
    static ROOT: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    ROOT.get_or_init(|| {
        use std::os::unix::ffi::OsStringExt;
        std::env::var_os(ENV_SYSFS).map(|v| v.into_vec()).filter(|v| !v.is_empty())
    })
    .as_deref()
}

/// `path` under `root` if it starts with one of [`PREFIXES`] as whole
/// components, else `None`.
pub fn rewrite(root: &[u8], path: &[u8]) -> Option<Vec<u8>> {
    let hit = PREFIXES.iter().any(|p| {
        let p = p.as_bytes();
        path.starts_with(p) && matches!(path.get(p.len()), None | Some(b'/'))
    });
    if !hit {
        return None;
    }
    let mut v = Vec::with_capacity(root.len() + path.len());
    v.extend_from_slice(root);
    v.extend_from_slice(path);
    Some(v)
}

/// The path to hand the real function: `path` itself, or its rewrite
/// (kept alive in the returned `CString` for the duration of the call).
///
/// # Safety
/// `path` is NULL or a NUL-terminated string (the caller's contract with
/// the C library).
unsafe fn mapped(path: *const c_char) -> Option<CString> {
    let root = root()?;
    if path.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if p.first() != Some(&b'/') {
        return None;
    }
    CString::new(rewrite(root, p)?).ok()
}

/// The real `name` (`dlsym(RTLD_NEXT)`), cached in `slot`; NULL if the C
/// library has no such symbol.
fn real(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Relaxed);
    if !p.is_null() {
        return p;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name is always
    // safe to call; the result is checked for NULL by the callers.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    slot.store(p, Ordering::Relaxed);
    p
}

/// Interposes C function `$name` whose first argument (`$path`) is a path:
/// the path is rewritten if it is one of ours, then the real function is
/// called with the same arguments. `$fail` is returned (errno ENOSYS) if the
/// C library has no such function.
macro_rules! path_first {
    ($name:ident ( $path:ident : *const c_char $(, $a:ident : $t:ty)* ) -> $r:ty, $fail:expr) => {
        /// Interposed: see the crate documentation.
        ///
        /// # Safety
        /// The C library's contract for this function.
        #[no_mangle]
        pub unsafe extern "C" fn $name($path: *const c_char $(, $a: $t)*) -> $r {
            static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            let name = CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes());
            let f = name.map_or(std::ptr::null_mut(), |n| real(&REAL, n));
            if f.is_null() {
                // SAFETY: errno is this thread's.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return $fail;
            }
            // SAFETY: `f` is the C library's function of this very name and
            // signature (found by dlsym under the same name).
            let f: unsafe extern "C" fn(*const c_char $(, $t)*) -> $r =
                unsafe { std::mem::transmute::<*mut c_void, _>(f) };
            // SAFETY: the path contract is the caller's; `m` outlives the call.
            let m = unsafe { mapped($path) };
            let p = m.as_ref().map_or($path, |m| m.as_ptr());
            // SAFETY: the caller's arguments, with the path maybe replaced by
            // a valid NUL-terminated one.
            unsafe { f(p $(, $a)*) }
        }
    };
}

/// The same for `*at` functions, whose path is the second argument.
macro_rules! path_second {
    ($name:ident ( $d:ident : c_int, $path:ident : *const c_char $(, $a:ident : $t:ty)* ) -> $r:ty, $fail:expr) => {
        /// Interposed: see the crate documentation.
        ///
        /// # Safety
        /// The C library's contract for this function.
        #[no_mangle]
        pub unsafe extern "C" fn $name($d: c_int, $path: *const c_char $(, $a: $t)*) -> $r {
            static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            let name = CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes());
            let f = name.map_or(std::ptr::null_mut(), |n| real(&REAL, n));
            if f.is_null() {
                // SAFETY: errno is this thread's.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return $fail;
            }
            // SAFETY: as in path_first.
            let f: unsafe extern "C" fn(c_int, *const c_char $(, $t)*) -> $r =
                unsafe { std::mem::transmute::<*mut c_void, _>(f) };
            // SAFETY: as in path_first (absolute paths only are rewritten, so
            // the directory fd no longer matters for them).
            let m = unsafe { mapped($path) };
            let p = m.as_ref().map_or($path, |m| m.as_ptr());
            // SAFETY: the caller's arguments.
            unsafe { f($d, p $(, $a)*) }
        }
    };
}

// `open` and friends are variadic in C (the mode, read only with O_CREAT or
// O_TMPFILE). They are declared here with the mode as a fixed argument:
// on x86-64 and AArch64 Linux a variadic integer argument travels in the
// same register as a fixed one, so `mode` is the caller's mode when it
// passed one and an unused value otherwise, which the real function ignores
// just the same.
path_first!(open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int, -1);
path_first!(open64(path: *const c_char, flags: c_int, mode: mode_t) -> c_int, -1);
path_first!(__open_2(path: *const c_char, flags: c_int) -> c_int, -1);
path_first!(__open64_2(path: *const c_char, flags: c_int) -> c_int, -1);
path_second!(openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int, -1);
path_second!(openat64(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int, -1);
path_second!(__openat_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, -1);
path_second!(__openat64_2(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int, -1);
path_first!(fopen(path: *const c_char, mode: *const c_char) -> *mut FILE, std::ptr::null_mut());
path_first!(fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE, std::ptr::null_mut());
path_first!(stat(path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_first!(stat64(path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_first!(lstat(path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_first!(lstat64(path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_second!(fstatat(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int, -1);
path_second!(fstatat64(dirfd: c_int, path: *const c_char, buf: *mut c_void, flags: c_int) -> c_int, -1);
path_second!(statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: libc::c_uint, buf: *mut c_void) -> c_int, -1);
path_first!(access(path: *const c_char, mode: c_int) -> c_int, -1);
path_first!(euidaccess(path: *const c_char, mode: c_int) -> c_int, -1);
path_first!(eaccess(path: *const c_char, mode: c_int) -> c_int, -1);
path_second!(faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int, -1);
path_first!(opendir(path: *const c_char) -> *mut libc::DIR, std::ptr::null_mut());
path_first!(readlink(path: *const c_char, buf: *mut c_char, size: size_t) -> libc::ssize_t, -1);
path_second!(readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, size: size_t) -> libc::ssize_t, -1);
path_first!(realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char, std::ptr::null_mut());
path_first!(scandir(path: *const c_char, list: *mut c_void, filter: *mut c_void, compar: *mut c_void) -> c_int, -1);
path_first!(scandir64(path: *const c_char, list: *mut c_void, filter: *mut c_void, compar: *mut c_void) -> c_int, -1);
path_first!(getxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t) -> libc::ssize_t, -1);
path_first!(lgetxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t) -> libc::ssize_t, -1);
path_first!(listxattr(path: *const c_char, list: *mut c_char, size: size_t) -> libc::ssize_t, -1);
path_first!(llistxattr(path: *const c_char, list: *mut c_char, size: size_t) -> libc::ssize_t, -1);
// glibc before 2.33 compiled stat() into these (programs built then still call them)
path_second!(__xstat(ver: c_int, path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_second!(__xstat64(ver: c_int, path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_second!(__lxstat(ver: c_int, path: *const c_char, buf: *mut c_void) -> c_int, -1);
path_second!(__lxstat64(ver: c_int, path: *const c_char, buf: *mut c_void) -> c_int, -1);

// ---------------------------------------------------------------- getifaddrs

/// The devices' addresses that the shim adds to `getifaddrs()`, read once
/// from `$ROCE_EMU_SYSFS/ifaddrs` (lines `LABEL ADDR PREFIX`, written by
/// `roce run`): a UDP device on 127.0.0.2 has that address on `lo`, which
/// `lo`'s 127.0.0.1/8 covers but `getifaddrs()` does not list; the kernel
/// lists a labelled address (`ip addr add 127.0.0.2/8 dev lo label
/// lo:roce0`) as an entry named by its label, and so does the shim.
/// Software that finds RDMA devices through interface addresses
/// (libfabric's verbs provider, which skips the interface named `lo`)
/// then finds ours as it finds a kernel device on its netdev.
fn extra_ifaddrs() -> &'static [(String, std::net::IpAddr, u8)] {
    static EXTRA: OnceLock<Vec<(String, std::net::IpAddr, u8)>> = OnceLock::new();
    EXTRA.get_or_init(|| {
        use std::os::unix::ffi::OsStrExt;
        let Some(root) = root() else { return Vec::new() };
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(root)).join("ifaddrs");
        std::fs::read_to_string(path).map(|t| parse_ifaddrs(&t)).unwrap_or_default()
    })
}

/// Parse `LABEL ADDR PREFIX` lines (others are skipped).
pub fn parse_ifaddrs(text: &str) -> Vec<(String, std::net::IpAddr, u8)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let label = w.next()?;
            let addr = w.next()?.parse().ok()?;
            let prefix = w.next()?.parse().ok()?;
            (label.len() < libc::IFNAMSIZ).then(|| (label.to_string(), addr, prefix))
        })
        .collect()
}

/// One added entry: the `ifaddrs` node and the storage it points into, in
/// one `calloc` block (never freed: glibc's `freeifaddrs` frees only the
/// block of the list's head, which stays glibc's; a few bytes per call).
#[repr(C)]
struct Extra {
    node: libc::ifaddrs,
    name: [c_char; libc::IFNAMSIZ],
    addr: libc::sockaddr_storage,
    mask: libc::sockaddr_storage,
}

fn fill_sockaddr(st: &mut libc::sockaddr_storage, ip: std::net::IpAddr) {
    match ip {
        std::net::IpAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any
            // sockaddr; the cast is to its IPv4 form.
            let sin =
                unsafe { &mut *(st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from_ne_bytes(v4.octets());
        }
        std::net::IpAddr::V6(v6) => {
            // SAFETY: as above, its IPv6 form.
            let sin6 =
                unsafe { &mut *(st as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_addr.s6_addr = v6.octets();
        }
    }
}

fn mask_of(ip: std::net::IpAddr, prefix: u8) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V4(_) => {
            let p = u32::from(prefix.min(32));
            let m = if p == 0 { 0 } else { u32::MAX << (32 - p) };
            std::net::IpAddr::V4(m.into())
        }
        std::net::IpAddr::V6(_) => {
            let p = u32::from(prefix.min(128));
            let m = if p == 0 { 0 } else { u128::MAX << (128 - p) };
            std::net::IpAddr::V6(m.into())
        }
    }
}

/// The address of an `ifaddrs` entry, if IPv4/IPv6.
///
/// # Safety
/// `sa` is NULL or points to a sockaddr of its family's size.
unsafe fn ip_of(sa: *const libc::sockaddr) -> Option<std::net::IpAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's sockaddr; read by its family.
    unsafe {
        match i32::from((*sa).sa_family) {
            libc::AF_INET => {
                let a = (*sa.cast::<libc::sockaddr_in>()).sin_addr.s_addr;
                Some(std::net::IpAddr::V4(a.to_ne_bytes().into()))
            }
            libc::AF_INET6 => Some(std::net::IpAddr::V6(
                (*sa.cast::<libc::sockaddr_in6>()).sin6_addr.s6_addr.into(),
            )),
            _ => None,
        }
    }
}

/// Interposed: the real `getifaddrs`, then an entry for each device
/// address the list lacks (see [`extra_ifaddrs`]), with the flags of the
/// interface its label names (`lo` of `lo:roce0`) except `IFF_LOOPBACK`.
///
/// # Safety
/// The C library's contract for `getifaddrs`.
#[no_mangle]
pub unsafe extern "C" fn getifaddrs(out: *mut *mut libc::ifaddrs) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let f = real(&REAL, c"getifaddrs");
    if f.is_null() {
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: the C library's getifaddrs, found under its name.
    let f: unsafe extern "C" fn(*mut *mut libc::ifaddrs) -> c_int =
        unsafe { std::mem::transmute::<*mut c_void, _>(f) };
    // SAFETY: the caller's out pointer.
    let rc = unsafe { f(out) };
    let extra = extra_ifaddrs();
    if rc != 0 || out.is_null() || extra.is_empty() {
        return rc;
    }
    // SAFETY: a list glibc just built: valid nodes up to a NULL next; each
    // added node is a zeroed calloc block filled here before it is linked.
    unsafe {
        let mut tail = *out;
        if tail.is_null() {
            return rc;
        }
        let mut have = Vec::new();
        let mut flags_of = Vec::new();
        let mut n = tail;
        while !n.is_null() {
            if let Some(ip) = ip_of((*n).ifa_addr) {
                have.push(ip);
            }
            if !(*n).ifa_name.is_null() {
                flags_of.push((CStr::from_ptr((*n).ifa_name).to_bytes().to_vec(), (*n).ifa_flags));
            }
            tail = n;
            n = (*n).ifa_next;
        }
        for (label, ip, prefix) in extra {
            if have.contains(ip) {
                continue;
            }
            let base = label.split(':').next().unwrap_or(label).as_bytes();
            let Some(flags) = flags_of.iter().find(|(nm, _)| nm == base).map(|x| x.1) else {
                continue;
            };
            let e = libc::calloc(1, std::mem::size_of::<Extra>()).cast::<Extra>();
            if e.is_null() {
                break;
            }
            for (i, b) in label.bytes().enumerate() {
                (*e).name[i] = b as c_char;
            }
            fill_sockaddr(&mut (*e).addr, *ip);
            fill_sockaddr(&mut (*e).mask, mask_of(*ip, *prefix));
            (*e).node.ifa_name = (*e).name.as_mut_ptr();
            // (not IFF_LOOPBACK: software that looks for RDMA devices by
            // interface skips loopback interfaces, where no kernel RDMA
            // device can live; ours does)
            (*e).node.ifa_flags = flags & !(libc::IFF_LOOPBACK as libc::c_uint);
            (*e).node.ifa_addr = (&raw mut (*e).addr).cast();
            (*e).node.ifa_netmask = (&raw mut (*e).mask).cast();
            (*tail).ifa_next = &raw mut (*e).node;
            tail = &raw mut (*e).node;
        }
    }
    rc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_prefixes_are_rewritten() {
        let r = b"/run/x";
        let rw = |p: &str| rewrite(r, p.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(rw("/sys/class/infiniband").as_deref(), Some("/run/x/sys/class/infiniband"));
        assert_eq!(
            rw("/sys/class/infiniband/roce0/ports/1/gids/1").as_deref(),
            Some("/run/x/sys/class/infiniband/roce0/ports/1/gids/1")
        );
        assert_eq!(
            rw("/sys/class/infiniband_verbs/uverbs0/ibdev").as_deref(),
            Some("/run/x/sys/class/infiniband_verbs/uverbs0/ibdev")
        );
        assert_eq!(rw("/dev/infiniband/uverbs1").as_deref(), Some("/run/x/dev/infiniband/uverbs1"));
        assert_eq!(rw("/dev/infiniband/").as_deref(), Some("/run/x/dev/infiniband/"));
        assert_eq!(
            parse_ifaddrs("lo:roce0 127.0.0.2 8\nbad\nlo:roce1 ::1 128\nx 1.2.3.4 zz\n"),
            vec![
                ("lo:roce0".to_string(), "127.0.0.2".parse().unwrap(), 8),
                ("lo:roce1".to_string(), "::1".parse().unwrap(), 128)
            ]
        );
        assert_eq!(
            mask_of("10.0.0.1".parse().unwrap(), 8),
            "255.0.0.0".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(
            mask_of("fd00::1".parse().unwrap(), 64),
            "ffff:ffff:ffff:ffff::".parse::<std::net::IpAddr>().unwrap()
        );
        for no in [
            "/sys/class/infinibandx",
            "/sys/class/net/lo",
            "/dev/null",
            "/dev/infinibandx",
            "sys/class/infiniband",
            "/sys/class/infiniband_mad/x",
            "",
        ] {
            assert_eq!(rw(no), None, "{no}");
        }
    }
}
